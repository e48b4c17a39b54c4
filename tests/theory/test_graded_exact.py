"""Exact graded-reward theory (gpolab.theory.graded_exact): the binary count tables of
gpolab.theory.exact at the grid {0, 1}, Monte Carlo on 3- and 4-value grids (fixed seeds, 4 SE),
degenerate groups and bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpolab import estimators, validate
from gpolab.envs import bandit
from gpolab.theory import exact as ex
from gpolab.theory import graded_exact as gx

N_GROUPS = 200_000
Z_MAX = 4.0


@pytest.mark.parametrize("spec", ["loo", "grpo", "mean", "verl/grpo"])
@pytest.mark.parametrize("G", [2, 4, 8])
def test_binary_grid_is_the_count_table_theory(x64, spec, G):
    params = bandit.make(3, prompts=1, actions=7)
    truth = bandit.exact(params)
    pi, s = np.asarray(bandit.policy(params), np.float64)[0], np.asarray(params.success)[0]
    got = gx.graded_moments(spec, G, [0.0, 1.0], np.stack([1 - s, s], -1), pi)
    table = ex.registry_table(spec, G)
    np.testing.assert_allclose(got.target, np.asarray(truth.g_local)[0], rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(got.mse, ex.mse(truth, table, G), rtol=1e-10)
    np.testing.assert_allclose(got.bias_sq, ex.bias_sq(truth, table, G), rtol=1e-8, atol=1e-25)
    k = ex.kappa(table, G, np.asarray(truth.V)[0])
    np.testing.assert_allclose(got.mean, k * got.target, rtol=1e-10, atol=1e-15)


def draw_instance(seed: int, K: int, A: int = 5):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.ones(A)), rng.dirichlet(np.full(K, 0.7), size=A)


def monte_carlo_groups(seed: int, pi, P, G: int, n: int = N_GROUPS):
    """(actions, reward indices), each (n, G), drawn iid: a ~ π, then v ~ P(· | a)."""
    rng = np.random.default_rng(seed)
    a = rng.choice(pi.size, size=(n, G), p=pi)
    u = rng.random((n, G))
    k = (u[..., None] > np.cumsum(P, -1)[a][..., :-1]).sum(-1)  # inverse CDF per action
    return a, k


def z_scores(spec, G, grid, pi, P, a, k):
    """(MSE z, bias² z, bias² SE, exact) of ``spec`` on the groups (a, k), with
    ĝ = Σ_g c_g (e_{a_g} − π)."""
    rewards = np.asarray(grid)[k]
    c = np.asarray(jax.jit(lambda r: estimators.gradient_weights(spec, r))(rewards), np.float64)
    onehot = np.eye(pi.size)[a]  # (n, G, A)
    g_hat = np.einsum("ng,nga->na", c, onehot) - c.sum(1)[:, None] * pi[None]
    ex_ = gx.graded_moments(spec, G, grid, P, pi)
    n = g_hat.shape[0]
    sq = np.sum((g_hat - ex_.target) ** 2, 1)
    z_mse = (sq.mean() - ex_.mse) / (sq.std(ddof=1) / np.sqrt(n))
    # bias²: ‖d̄‖² − tr Σ/n is unbiased; Var ≈ 4 dᵀΣd/n + 2 tr(Σ²)/n² (Gaussian mean)
    d, cov = g_hat.mean(0) - ex_.target, np.cov(g_hat, rowvar=False)
    est = d @ d - np.trace(cov) / n
    se = np.sqrt(4 * d @ cov @ d / n + 2 * np.trace(cov @ cov) / n**2)
    return z_mse, (est - ex_.bias_sq) / se, se, ex_


GRIDS = {3: [0.0, 0.5, 1.0], 4: [-0.5, 0.0, 0.3, 1.0]}
SPECS = ("loo", "grpo", "trl/grpo", "mathforge/dgae")


@pytest.mark.slow
@pytest.mark.parametrize("K", [3, 4])
@pytest.mark.parametrize("G", [2, 3, 4, 8])
def test_graded_matches_monte_carlo(x64, K, G):
    grid = GRIDS[K]
    pi, P = draw_instance(10 + K, K)
    a, k = monte_carlo_groups(100 * K + G, pi, P, G)
    for spec in SPECS:
        z_mse, z_b2, se, res = z_scores(spec, G, grid, pi, P, a, k)
        print(f"K={K} G={G} {spec}: z_mse={z_mse:+.2f} z_bias2={z_b2:+.2f} mse={res.mse:.5g}")
        assert abs(z_mse) < Z_MAX and abs(z_b2) < Z_MAX, (spec, K, G, z_mse, z_b2)
        assert np.isfinite(res.mse) and res.bias_sq >= 0
        if spec == "loo":  # unbiased exactly, in theory
            assert res.bias_sq <= 1e-24 * max(1.0, res.target @ res.target)
        elif G >= 4:  # power: the biased estimators' bias² is many SE from 0
            assert res.bias_sq > 8 * se, (spec, K, G, res.bias_sq, se)


def test_degenerate_groups_are_finite(x64):
    grid = [0.0, 0.5, 1.0]
    pi = np.array([0.5, 0.3, 0.2, 0.0])
    same = np.tile([0.0, 1.0, 0.0], (4, 1))  # every reward 0.5: every group all-equal
    for spec in ("grpo", "verl/grpo", "loo", "mathforge/dgae"):
        r = gx.graded_moments(spec, 4, grid, same, pi)
        assert r.mse == pytest.approx(0.0, abs=1e-24) and r.bias_sq == pytest.approx(0.0, abs=1e-24)
    # a grid value no action reaches (q_v = 0): finite, and the theory of the grid without it
    P = np.array([[0.2, 0.0, 0.8], [0.5, 0.0, 0.5], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    for spec in ("grpo", "mathforge/dgae", "trl/grpo"):
        full = gx.graded_moments(spec, 4, grid, P, pi)
        two = gx.graded_moments(spec, 4, [0.0, 1.0], P[:, [0, 2]], pi)
        assert np.isfinite(full.mse) and np.all(np.isfinite(full.mean))
        np.testing.assert_allclose(full.mse, two.mse, rtol=1e-12)
        np.testing.assert_allclose(full.mean, two.mean, rtol=1e-12, atol=1e-16)
    # a deterministic policy: W = 0 for its action, so ĝ = 0 = g
    r = gx.graded_moments("grpo", 3, grid, P, np.array([1.0, 0.0, 0.0, 0.0]))
    assert r.mse == 0.0 and np.all(r.mean == 0.0)


@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(grid=[0.0, 0.5, 0.5]), "repeated"),
        (dict(probs=np.full((4, 3), 0.3)), "rows sum"),
        (dict(pi=np.array([0.5, 0.3, 0.3, 0.0])), "rows sum"),
        (dict(spec="loo", G=1), "G \\(for loo\\)"),
        (dict(G=64, grid=np.linspace(0, 1, 8)), "canonical groups"),
        (dict(spec="oracle"), "needs baseline"),
        (dict(spec="grpo[scale=batch]"), "batch-scoped"),
    ],
    ids=["grid", "probs", "pi", "G", "too-large", "oracle", "batch"],
)
def test_bad_input_is_one_clear_error(x64, kw, words):
    args = dict(spec="grpo", G=4, grid=[0.0, 0.5, 1.0], pi=np.array([0.4, 0.3, 0.2, 0.1]))
    args["probs"] = np.tile([0.2, 0.3, 0.5], (4, 1))
    args.update(kw)
    if args["probs"].shape[1] != len(args["grid"]):
        args["probs"] = np.full((4, len(args["grid"])), 1 / len(args["grid"]))
    with pytest.raises(validate.ConfigError, match=words):
        gx.graded_moments(args.pop("spec"), args.pop("G"), args["grid"], args["probs"], args["pi"])


def test_refuses_weights_not_equivariant_on_graded_groups(x64):
    """A rule that is a count table on binary groups (mean) but adds the column index to each
    reward off {0, 1}: the binary checks pass, the graded permutation check refuses it."""

    def order(rewards):
        extra = jnp.where(rewards != jnp.round(rewards), jnp.arange(rewards.shape[-1])[None], 0)
        return rewards - rewards.mean(-1, keepdims=True) + extra

    name = "test/graded_order"
    if name not in estimators.REGISTRY:
        estimators.register(name, order)
    assert ex.registry_table(name, 3).ok
    with pytest.raises(validate.ConfigError, match="not permutation-equivariant"):
        gx.graded_moments(name, 3, [0.0, 0.5, 1.0], np.tile([0.2, 0.3, 0.5], (2, 1)), [0.6, 0.4])


@pytest.mark.parametrize("G", [1, 3])
def test_vanilla_by_hand(G):
    """c = r/G: unbiased, MSE = (E[‖W‖² r²] − ‖g‖²)/G, at G = 1 too (no pair term)."""
    pi, v = np.array([0.5, 0.3, 0.2]), np.array([0.0, 0.5, 1.0])
    P = np.array([[0.2, 0.3, 0.5], [1.0, 0.0, 0.0], [0.1, 0.1, 0.8]])
    W = np.eye(3) - pi
    e_wr2 = np.sum(pi[:, None] * P * v[None] ** 2 * np.sum(W**2, 1)[:, None])
    r = gx.graded_moments("vanilla", G, v, P, pi)
    np.testing.assert_allclose(r.mse, (e_wr2 - r.target @ r.target) / G, rtol=1e-12)
    assert r.bias_sq < 1e-28
