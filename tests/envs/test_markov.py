"""The Markov env (long responses, exact gradient by dynamic programming): against enumeration of
every response at small T, its sampler against the exact law, and the mismatch sizes."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpolab import envs
from gpolab.envs import markov
from gpolab.validate import ConfigError


@pytest.fixture(scope="module", autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def small(T=4, A=3, P=3, seed=0):
    return markov.make(markov.Instance(prompts=P, vocab=A, length=T, scale=0.8, instance_seed=seed))


def enumerate_all(params, logits):
    """Every response of every prompt: (P, A^T) probabilities under ``logits``, rewards, and the
    (A^T, T) responses."""
    P, A, T = params.num_prompts, params.vocab, params.T
    ys = jnp.array(list(itertools.product(range(A), repeat=T)), jnp.int32)  # (A^T, T)
    prompts = jnp.arange(P)
    lp = markov.table_logp(params, logits, prompts, jnp.broadcast_to(ys, (P, *ys.shape)))
    rewards = (jnp.sum(ys == 0, -1)[None, :] >= params.k[:, None]).astype(lp.dtype)
    return jnp.exp(jnp.sum(lp, -1)), rewards, ys


@pytest.mark.parametrize("T,A", [(1, 2), (4, 3), (6, 2)])
def test_values_and_gradients_equal_enumeration(T, A):
    params = small(T, A)
    theta = markov.init_theta(params) + 0.1
    truth = markov.exact(params, theta)

    def enum_J(t):
        prob, rewards, _ = enumerate_all(params, markov.table(params, t))
        return jnp.mean(jnp.sum(prob * rewards, -1))

    prob, rewards, _ = enumerate_all(params, markov.table(params, theta))
    assert jnp.sum(prob, -1) == pytest.approx(np.ones(params.num_prompts), abs=1e-12)
    assert truth.V == pytest.approx(np.asarray(jnp.sum(prob * rewards, -1)), abs=1e-12)
    assert truth.g == pytest.approx(np.asarray(jax.grad(enum_J)(theta)), abs=1e-12)
    # g_local is g_x in prompt x's own block; the other blocks of ∇V_x are zero
    block = (A + 1) * A
    for x in range(params.num_prompts):
        gx = jax.grad(
            lambda t, x=x: jnp.sum(
                enumerate_all(params, markov.table(params, t))[0][x] * rewards[x]
            )
        )(theta)
        assert truth.g_local[x] == pytest.approx(np.asarray(gx[x * block : (x + 1) * block]))


@pytest.mark.parametrize("T,A", [(1, 2), (4, 3), (6, 2)])
def test_the_forward_backward_gradient_equals_enumeration_with_the_count_capped(T, A):
    """value_gradient's V and g against enumeration, with the count capped at the largest
    threshold + 1 (its fewest states) and with every count (T + 1); a prompt with k_x = 0 has
    V = 1 and gradient 0 (to float64 rounding)."""
    params = small(T, A, P=4)
    params = params.replace(k=params.k.at[0].set(0))
    theta = markov.init_theta(params) + 0.1
    prob, rewards, _ = enumerate_all(params, markov.table(params, theta))

    def enum_J(t):
        p, r, _ = enumerate_all(params, markov.table(params, t))
        return jnp.mean(jnp.sum(p * r, -1))

    want = np.asarray(jax.grad(enum_J)(theta))
    for cap in (markov.count_cap(params), T + 1):
        V, g = markov.value_gradient(params, theta, cap)
        assert V == pytest.approx(np.asarray(jnp.sum(prob * rewards, -1)), abs=1e-12)
        assert g == pytest.approx(want, abs=1e-12)
    assert float(V[0]) == pytest.approx(1.0, abs=1e-12)
    assert np.abs(np.asarray(g[: (A + 1) * A])).max() < 1e-12


def test_the_forward_backward_gradient_at_long_t_equals_autodiff():
    """T = 256 (a cap under half the counts): the recursion equals reverse-mode
    autodiff through the dynamic programme to float64 rounding."""
    params = markov.make(markov.Instance(length=256))
    theta = markov.init_theta(params) + 0.05
    V, g = markov.value_gradient(params, theta, markov.count_cap(params))
    assert markov.count_cap(params) < 257 // 2
    truth = markov.exact(params, theta)
    np.testing.assert_allclose(V, truth.V, rtol=0, atol=1e-12)
    np.testing.assert_allclose(g, truth.g, rtol=0, atol=1e-10 * float(jnp.abs(truth.g).max()))


def test_kl_and_mismatch_sizes_equal_enumeration():
    params = small(5, 3)
    theta = markov.init_theta(params)
    for kind, size in (("noise", 0.3), ("temperature", 1.4), ("bf16", 8.0)):
        mu = markov.behaviour_logits(params, theta, kind, size)
        p_pi, _, _ = enumerate_all(params, markov.table(params, theta))
        p_mu, _, _ = enumerate_all(params, mu)
        kl_seq = jnp.mean(jnp.sum(p_mu * (jnp.log(p_mu) - jnp.log(p_pi)), -1))
        chi2_seq = jnp.mean(jnp.sum(p_pi**2 / p_mu, -1)) - 1
        m = markov.mismatch(params, theta, mu)
        assert m.kl_seq == pytest.approx(float(kl_seq), rel=1e-10)
        assert m.kl_token == pytest.approx(float(kl_seq) / params.T, rel=1e-10)
        assert m.chi2_seq == pytest.approx(float(chi2_seq), rel=1e-10)
        assert float(m.kl_seq) > 0 and float(m.chi2_seq) > 0
        # total variation per state (prompt, previous token), visited along every response
        pm, pp = jax.nn.softmax(mu, -1), jax.nn.softmax(markov.table(params, theta), -1)
        tv = 0.5 * jnp.sum(jnp.abs(pm - pp), -1)  # (P, A + 1)
        _, _, ys = enumerate_all(params, mu)
        prev = jnp.concatenate([jnp.full((ys.shape[0], 1), params.vocab), ys[:, :-1]], -1)
        per = jnp.sum(tv[:, prev], -1)  # (P, A^T): Σ_t TV along each response
        tv_token = jnp.mean(jnp.sum(p_mu * per, -1)) / params.T
        assert m.tv_token == pytest.approx(float(tv_token), rel=1e-10)
        assert m.tv_max == pytest.approx(float(jnp.max(tv)), rel=1e-10)  # μ visits every state
    # the env's kl: π_θ against a reference, the same identity
    ref = theta + 0.2 * params.noise.reshape(-1)
    p_ref = enumerate_all(params, markov.table(params, ref))[0]
    want = jnp.mean(jnp.sum(p_pi * (jnp.log(p_pi) - jnp.log(p_ref)), -1))
    assert markov.kl(params, theta, ref) == pytest.approx(float(want), rel=1e-10)
    # no mismatch: zero (control)
    none = markov.mismatch(params, theta, markov.table(params, theta))
    assert abs(float(none.kl_seq)) < 1e-12 and abs(float(none.chi2_seq)) < 1e-12
    assert float(none.tv_max) == 0.0


def test_sampler_and_token_logp_follow_the_law():
    """Response frequencies of 20,000 draws against the enumerated law (chi-square, fixed seed),
    and token_logp of each drawn response sums to its enumerated log-probability."""
    params = small(3, 2, P=2)
    theta = markov.init_theta(params)
    n = 20_000
    prompts = jnp.zeros(1, jnp.int32)
    ys, rewards = markov.sample(jax.random.key(0), params, theta, prompts, n)
    prob, rew, all_ys = enumerate_all(params, markov.table(params, theta))
    code = np.asarray(ys[0] @ (2 ** jnp.arange(2, -1, -1)))  # binary code of each response
    counts = np.bincount(code, minlength=8)
    expected = n * np.asarray(prob[0])
    chi2 = np.sum((counts - expected) ** 2 / expected)
    assert chi2 < 24.3  # 7 degrees of freedom, p = 0.001
    assert np.asarray(rewards[0]) == pytest.approx(np.asarray(rew[0])[code])
    logp, mask = markov.token_logp(params, theta, prompts, ys)
    assert np.all(np.asarray(mask) == 1)
    assert np.asarray(jnp.sum(logp[0], -1)) == pytest.approx(np.log(np.asarray(prob[0]))[code])


def test_token_gradient_is_the_weighted_score_sum():
    params = small(4, 3)
    theta = markov.init_theta(params)
    prompts = jnp.array([0, 2], jnp.int32)
    ys, _ = markov.sample(jax.random.key(1), params, theta, prompts, 3)
    w = jax.random.normal(jax.random.key(2), ys.shape)
    got = markov.token_gradient(params, theta, prompts, ys, w)
    # by hand: ∇ log softmax(θ[x, prev])[a] = e_a − π(·|x, prev) in the (x, prev) row
    pi = np.asarray(jax.nn.softmax(markov.table(params, theta), -1))
    want = np.zeros_like(pi)
    A = params.vocab
    for i, x in enumerate(np.asarray(prompts)):
        for g in range(3):
            prev = A
            for t in range(params.T):
                a = int(ys[i, g, t])
                want[x, prev] += float(w[i, g, t]) * (np.eye(A)[a] - pi[x, prev])
                prev = a
    assert np.asarray(got) == pytest.approx(want.reshape(-1), abs=1e-12)
    whole = markov.gradient(params, theta, prompts, ys, jnp.sum(w, -1) * 0 + 1.0)
    ones = markov.token_gradient(params, theta, prompts, ys, jnp.ones_like(w))
    assert np.asarray(whole) == pytest.approx(np.asarray(ones))


def test_long_responses_stay_exact_and_finite():
    """T = 256: V in (0, 1) spread by the thresholds, the gradient finite and equal to a central
    difference, the sequence χ² of a small mismatch finite and above 1 + T·χ²_token − 1."""
    params = markov.make(markov.Instance(length=256))
    theta = markov.init_theta(params)
    truth = markov.exact(params, theta)
    V = np.asarray(truth.V)
    assert V.max() > 0.75 and V.min() < 0.25 and np.all(np.diff(V) <= 1e-12)
    e = np.zeros(params.dim)
    e[3] = 1e-5
    fd = (
        markov.expected_return(params, theta + e) - markov.expected_return(params, theta - e)
    ) / 2e-5
    assert float(truth.g[3]) == pytest.approx(float(fd), rel=1e-5, abs=1e-10)
    m = markov.mismatch(params, theta, markov.behaviour_logits(params, theta, "noise", 0.05))
    assert np.isfinite(float(m.chi2_seq)) and float(m.chi2_seq) > 256 * float(m.chi2_token) * 0.9


def test_registry_and_bad_settings():
    assert "markov" in envs.names("values", "kl")
    env, inst = envs.make("markov", length=16)
    assert env is markov.ENV and inst.length == 16
    with pytest.raises(ConfigError, match="^length: got 0"):
        markov.make(markov.Instance(length=0))
    with pytest.raises(ConfigError, match="^mismatch kind: got 'fp8'"):
        markov.behaviour_logits(small(), markov.init_theta(small()), "fp8", 1.0)
