"""The graded bandit (gpolab/envs/graded.py): its exact truth against autodiff and against the
bandit's Bernoulli truth on the grid {0, 1}, its draws against the reward laws, the closed forms of
theory §3 against the graded count tables, the sweep's graded rows against their exact theory,
and bad settings (one error line, nothing drawn)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpolab import engine, validate
from gpolab.envs import bandit, graded
from gpolab.theory import exact, graded_exact

SMALL = dict(prompts=3, actions=5, instance_seed=2)


def _law(params):
    """(grid, probs, pi, f) in float64, rows renormalised (the sweep's inputs of the theory)."""

    def rows(p):
        p = np.asarray(p, np.float64)
        return p / p.sum(-1, keepdims=True)

    pi = rows(bandit.policy(params.bandit))
    return (
        np.asarray(params.grid, np.float64),
        rows(params.probs),
        pi,
        rows(params.bandit.prompt_probs),
    )


def test_gradient_matches_autodiff_of_the_objective():
    params = graded.make(grid=(0.0, 0.3, 1.0), concentration=0.7, **SMALL)
    truth = graded.exact(params)

    def J(theta):
        pi = bandit.policy(bandit.at(params.bandit, theta))
        mu = params.probs @ params.grid
        return params.bandit.prompt_probs @ jnp.sum(pi * mu, -1)

    g = jax.grad(J)(bandit.init_theta(params.bandit))
    np.testing.assert_allclose(truth.g, g, atol=2e-6)
    np.testing.assert_allclose(params.bandit.success, params.probs @ params.grid, rtol=1e-6)


def test_on_the_grid_0_1_the_truth_is_the_bandits():
    """Rewards on {0, 1}: the graded truth (second moment Σ v² P = P(1)) is the Bernoulli one."""
    params = graded.make(grid=(0.0, 1.0), **SMALL)
    got, want = graded.exact(params), bandit.exact(params.bandit)
    for field in ("V", "sigma2", "g", "S2", "tr_sigma_oracle", "e_wz2", "e_w2_zv", "c1"):
        np.testing.assert_allclose(getattr(got, field), getattr(want, field), atol=2e-6)


def test_variance_fields_are_the_reward_laws():
    """σ²(x) = Σ_a π Σ_k v_k² P − V² and E‖WZ‖² = Σ_a π ‖W‖² Σ_k v_k² P, written out."""
    params = graded.make(grid=(-1.0, 0.25, 2.0), **SMALL)
    truth = graded.exact(params)
    v, P, pi, _ = _law(params)
    V = np.einsum("pa,pak,k->p", pi, P, v)
    m2 = np.einsum("pa,pak,k->p", pi, P, v**2)
    np.testing.assert_allclose(truth.sigma2, m2 - V**2, rtol=1e-5)
    w2 = 1 - 2 * pi + np.sum(pi**2, -1, keepdims=True)  # ‖e_a − π‖²
    np.testing.assert_allclose(truth.e_wz2, np.einsum("pa,pa,pak,k->p", pi, w2, P, v**2), rtol=1e-5)


def test_draws_follow_the_joint_law():
    """Frequencies of every (action, value) of one prompt against π(a)·P(v|a): a χ² test on 200k
    draws (fixed seed)."""
    from scipy.stats import chi2

    params = graded.make(prompts=2, actions=4, grid=(0.0, 0.5, 1.0), instance_seed=5)
    tables = graded.outcome_tables(params)
    n = 200_000
    a, r = graded.sample(jax.random.key(3), params, jnp.zeros(1, jnp.int32), n, tables)
    k = np.searchsorted(np.asarray(params.grid), np.asarray(r[0]))
    counts = np.bincount(np.asarray(a[0]) * 3 + k, minlength=12)
    expect = n * np.asarray(graded.outcome_probs(params)[0], np.float64)
    keep = expect > 0
    assert counts[~keep].sum() == 0  # an outcome of probability 0 is never drawn
    stat = np.sum((counts[keep] - expect[keep]) ** 2 / expect[keep])
    assert chi2.sf(stat, keep.sum() - 1) > 1e-3


def test_float64_mode_draws_the_same_instance():
    p32 = graded.make(**SMALL)
    with engine.float64_mode(True):
        p64 = graded.make(**SMALL)
        assert p64.probs.dtype == jnp.float64
    np.testing.assert_allclose(p64.probs, p32.probs, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(p64.bandit.theta, p32.bandit.theta)


@pytest.mark.parametrize("spec", ["vanilla", "loo", "mean"])
@pytest.mark.parametrize("B", [None, 3])
def test_closed_forms_equal_the_graded_count_tables(spec, B):
    """Two derivations of the same number: theory §3's closed forms on the graded truth and §8's
    graded count tables, for the estimators that have both (float32 truth: 1e-5)."""
    params = graded.make(grid=(0.0, 0.4, 1.0), **SMALL)
    truth = graded.exact(params)
    G = 4
    closed = exact.theory_columns(truth, spec, G, B)
    counted = graded_exact.instance_theory(spec, G, *_law(params), B)
    assert closed["theory"] == "closed form"
    assert counted["mse"] == pytest.approx(closed["theory_mse"], rel=2e-5)
    assert counted["bias_sq"] == pytest.approx(closed["theory_bias_sq"], rel=2e-5, abs=1e-12)


def test_sweep_rows_agree_with_their_theory():
    """The sweep's graded Monte Carlo against its exact columns (one G, 3 estimators, 20k seeds),
    and the binary theory of the same means far from it (the claim's control, in small)."""
    from gpolab.labs.sweep import lab as sweep

    cfg = sweep.Config(
        env="graded",
        estimators=("loo", "grpo", "nemo/grpo", "oracle"),
        G=(4,),
        seeds=20_000,
        prompts=4,
        actions=6,
    )
    df = sweep.run_sweep(cfg)
    z = (df["mse"] - df["theory_mse"]) / df["mse_se"]
    assert np.all(np.isfinite(z)) and np.max(np.abs(z)) < 4.5, df[["estimator", "mse"]]
    assert set(df["theory"]) == {"graded count table", "closed form"}
    zb = (df["mse"] - df["binary_theory_mse"]) / df["mse_se"]
    assert np.min(np.abs(zb)) > 10


@pytest.mark.parametrize(
    "settings, field",
    [
        (dict(grid=(0.0, 0.0, 1.0)), "grid"),
        (dict(grid=(1.0,)), "grid"),
        (dict(grid=(0.0, float("nan"))), "grid"),
        (dict(concentration=0.0), "concentration"),
        (dict(actions=1), "actions"),
        (dict(B=-1), "B"),
    ],
)
def test_bad_settings_raise_one_error_line(settings, field):
    with pytest.raises(validate.ConfigError, match=field):
        graded.make(**settings)


def test_sweep_refuses_a_loss_aggregation_on_one_token_responses():
    from gpolab.labs.sweep import lab as sweep

    cfg = sweep.Config(env="graded", loss_agg=("token-mean",), G=(4,), seeds=10)
    with pytest.raises(validate.ConfigError, match="loss_agg"):
        cfg.validate()
