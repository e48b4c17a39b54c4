"""Log-linear bandit (theory §7): exact g_x, H_x against autodiff and finite differences, the
curvature-law bounds, the instance construction and the sampler."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpolab import engine
from gpolab import estimators as est
from gpolab.envs import loglinear as ll
from gpolab.theory import curvature as theory
from gpolab.validate import ConfigError


def small(**kw):
    return ll.make(3, prompts=3, responses=256, block=3, **kw)


def random_theta(params, seed, scale=2.0):
    return scale * jax.random.normal(jax.random.key(seed), (params.dim,))


@pytest.mark.parametrize("rho", [0.0, 0.6, 1.0])
def test_exact_gradient_is_jacobian_of_success(rho):
    params = small(rho=rho)
    theta = random_theta(params, 1)
    truth = ll.exact(params, theta)
    auto = jax.jacobian(lambda th: ll.success(params, th))(theta)
    np.testing.assert_allclose(truth.g_global, auto, rtol=1e-4, atol=1e-7)
    # ‖g_x‖ = ‖c_x‖: the embedding of the local gradient is an isometry
    np.testing.assert_allclose(
        jnp.linalg.norm(truth.g_global, axis=-1), jnp.linalg.norm(truth.g_local, axis=-1), rtol=1e-5
    )
    np.testing.assert_allclose(truth.V + truth.one_minus_V, 1.0, rtol=1e-6)


@pytest.mark.parametrize("rho", [0.0, 0.6])
def test_exact_hessian_is_autodiff_hessian(rho):
    params = small(rho=rho)
    theta = random_theta(params, 2)
    for x in range(params.num_prompts):
        auto = jax.hessian(lambda th, x=x: ll.success(params, th)[x])(theta)
        np.testing.assert_allclose(ll.hessian(params, theta, x), auto, rtol=1e-4, atol=1e-7)


def test_exact_gradient_and_hessian_match_finite_differences(x64):
    params = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), small(rho=0.5))
    theta = np.asarray(random_theta(params, 3), np.float64)
    g = np.asarray(ll.exact(params, jnp.asarray(theta)).g_global)
    H1 = np.asarray(ll.hessian(params, jnp.asarray(theta), 1))
    h = 1e-5
    for i in range(theta.size):
        e = np.zeros(theta.size)
        e[i] = h
        plus = ll.exact(params, jnp.asarray(theta + e))
        minus = ll.exact(params, jnp.asarray(theta - e))
        fd_p = (np.asarray(plus.V) - np.asarray(minus.V)) / (2 * h)
        np.testing.assert_allclose(g[:, i], fd_p, rtol=1e-6, atol=1e-10)
        fd_g = (np.asarray(plus.g_global[1]) - np.asarray(minus.g_global[1])) / (2 * h)  # H_1[:, i]
        np.testing.assert_allclose(H1[:, i], fd_g, rtol=1e-5, atol=1e-9)


def test_full_feature_table_gives_the_same_policy():
    params = small(rho=0.3)
    theta = random_theta(params, 4)
    phi = ll.features(params)
    np.testing.assert_allclose(phi @ theta, ll.logits(params, theta), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(jnp.linalg.norm(phi, axis=-1), params.bound, rtol=1e-5)


@pytest.mark.parametrize("bound", [1.0, 2.5])
def test_curvature_bounds_hold_on_random_theta(bound):
    """‖g_x‖ ≤ 2Bσ_x and ‖H_x‖_op ≤ 4B²σ_x (and the Cauchy–Schwarz ‖g_x‖ ≤ Bσ_x) at 200 θ."""
    params = ll.make(0, prompts=8, responses=256, block=4, bound=bound, rho=0.5)
    keys = jax.random.split(jax.random.key(7), 2)
    scales = jnp.exp(jax.random.uniform(keys[0], (200, 1), minval=-2.0, maxval=3.0))
    thetas = scales * jax.random.normal(keys[1], (200, params.dim))
    s, g, h = (
        np.asarray(a, np.float64) for a in jax.vmap(ll.curvature_norms, (None, 0))(params, thetas)
    )
    assert s.max() > 0.45 and s.min() < 0.05  # the draws cover the σ range
    tol = 1e-5 * bound**2
    assert np.all(g <= theory.gradient_bound(s, bound) + tol)
    assert np.all(g <= bound * s + tol)
    assert np.all(h <= theory.hessian_bound(s, bound) + tol)
    fit = theory.fit_constant(h, s, bound**2)
    assert 0 < fit["ls_slope"] <= fit["max_ratio"] <= 4


def test_initial_policy_is_poor_and_heterogeneous():
    params = ll.make(0)
    truth = ll.exact(params, ll.init_theta(params))
    p = np.asarray(truth.V)
    assert p.shape == (32,) and params.num_responses >= 256
    assert p.min() == pytest.approx(0.02, abs=0.005) and p.max() == pytest.approx(0.9, abs=0.005)
    assert set(np.unique(np.asarray(params.reward))) == {0.0, 1.0}


def test_equal_control_has_identical_prompts_and_orthogonal_blocks_at_rho_zero():
    params = ll.make(1, prompts=4, equal=True, p_equal=0.3)
    theta = random_theta(params, 5) * 0  # symmetric start
    truth = ll.exact(params, theta)
    sigma = np.sqrt(truth.sigma2)
    np.testing.assert_allclose(sigma, sigma[0], rtol=1e-6)
    theta = random_theta(ll.make(1, prompts=4), 6)
    g = ll.exact(ll.make(1, prompts=4), theta).g_global
    gram = np.asarray(g @ g.T)
    np.testing.assert_allclose(gram - np.diag(np.diag(gram)), 0.0, atol=1e-12)


def test_sampler_rewards_and_gradient_are_unbiased():
    """Reward means match p_x and the vanilla gradient (1/N) Σ_x (1/G) Σ_g Z W is unbiased for
    ∇J; tolerances from the Monte Carlo standard error."""
    params = ll.make(2, prompts=4, responses=256, block=4, rho=0.5)
    theta = random_theta(params, 8, scale=1.0)
    truth = ll.exact(params, theta)
    G, S = 4, 4000

    prompts = jnp.arange(params.num_prompts)

    def one(key):
        ys, r = ll.sample(key, params, theta, prompts, G)
        grad = ll.gradient(params, theta, prompts, ys, est.gradient_weights("vanilla", r))
        return r.mean(-1), grad / params.num_prompts

    with engine.prng_mode():
        keys = engine.seed_keys(jax.random.key(9), jnp.arange(S, dtype=jnp.uint32))
        rbar, grads = jax.jit(jax.vmap(one))(keys)
    rbar, grads = np.asarray(rbar, np.float64), np.asarray(grads, np.float64)
    se = rbar.std(0, ddof=1) / np.sqrt(S)
    assert np.all(np.abs(rbar.mean(0) - np.asarray(truth.V)) < 4 * se + 1e-7)
    err2 = np.sum((grads.mean(0) - np.asarray(truth.g_global).mean(0)) ** 2)
    noise2 = np.sum(grads.var(0, ddof=1)) / S  # E‖mean − g‖² = tr Cov / S
    assert err2 < 2.0 * noise2


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(responses=100), "responses"),
        (dict(rho=1.5), "rho"),
        (dict(bound=0.0), "bound"),
        (dict(p_low=0.0), "p_low"),
        (dict(align=2.0), "align"),
    ],
)
def test_bad_instance_raises_one_line(kw, field):
    with pytest.raises(ConfigError) as err:
        ll.make(0, **kw)
    msg = str(err.value)
    assert msg.startswith(field) and "allowed" in msg and "\n" not in msg


@pytest.mark.parametrize("rho", [0.0, 0.6, 1.0])
def test_smoothness_sigma_is_the_top_eigenvalue_and_bounds_the_hessian_of_J(rho):
    """s(θ) = λ_max(Σ_x σ_x w_x w_xᵀ) (dense eigensolver) and ‖∇²J(θ)‖_op ≤ 4B²s(θ)/N (autodiff
    Hessian of J) at random θ; ρ = 0 gives max_x σ_x, ρ = 1 gives Σ_x σ_x."""
    params = ll.make(2, prompts=5, responses=256, block=3, rho=rho, bound=1.5)
    a, r = (float(v) for v in ll.mixing(params))
    N = params.num_prompts
    W = np.zeros((N, N + 1))
    W[np.arange(N), np.arange(N)] = a
    W[:, N] = r
    for seed in range(2):
        theta = random_theta(params, seed, scale=1.0 + 2 * seed)
        truth = ll.exact(params, theta)
        sig = np.sqrt(np.asarray(truth.sigma2, np.float64))
        s = float(ll.smoothness_sigma(params, truth))
        assert s == pytest.approx(np.linalg.eigvalsh((W.T * sig) @ W)[-1], rel=1e-5)
        if rho == 0.0:
            assert s == pytest.approx(sig.max(), rel=1e-6)
        if rho == 1.0:
            assert s == pytest.approx(sig.sum(), rel=1e-5)
        H = np.asarray(jax.hessian(lambda th: ll.expected_return(params, th))(theta), np.float64)
        L = np.abs(np.linalg.eigvalsh(H)).max()
        assert L <= 4 * params.bound**2 * s / N * (1 + 1e-5)
        assert s <= sig.max() * theory.coherence(N, rho) * (1 + 1e-6)


def test_admissible_steps_closed_form():
    eta = theory.admissible_steps(32, 0.0, bound=1.0, c=4.0)
    assert eta == {"grpo": 8.0, "reinforce": 16.0, "reinforce_iterate": 8.0}
    assert theory.coherence(32, 1.0) == 32.0
    eta = theory.admissible_steps(10, 0.5, bound=2.0, c=4.0)
    kappa = 1 + 9 * 0.25
    assert eta["grpo"] == pytest.approx(10 / (16 * kappa))
    assert eta["reinforce"] / eta["grpo"] == pytest.approx(2.0)
    assert theory.smoothness(10, 0.5, 0.5, bound=2.0) == pytest.approx(1 / eta["reinforce"])
    # the oracle prediction: σ_max/σ̄ at ρ = 0, 1 at ρ = 1 (s = N σ̄ = κ σ̄)
    assert theory.predicted_gain_iterate([0.5], [0.25], 10, 0.0) == pytest.approx(2.0)
    assert theory.predicted_gain_iterate([2.5], [0.25], 10, 1.0) == pytest.approx(1.0)
