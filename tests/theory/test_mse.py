"""Monte Carlo MSE against the exact finite-G formulas of theory §3 (fixed seeds, 4 SE)."""

import jax
import numpy as np
import pytest

from gpolab import engine
from gpolab.envs import bandit
from gpolab.kernels import grouped
from gpolab.theory import mse as theory

EXACT = ("vanilla", "oracle", "loo", "mean", "ustat")
SEEDS = 20_000


def measure(params, G, B=0, estimators=EXACT, seeds=SEEDS, key=0):
    truth = bandit.exact(params)
    cell = grouped.BanditCell(tuple(estimators), G=G, B=B)
    m = engine.run(
        grouped.bandit_error,
        cell,
        (params, truth, bandit.outcome_tables(params), np.float32(1e-4)),
        jax.random.key(key),
        seeds,
        chunk=5000,
    )
    return truth, {n: engine.error_stats(m, f"{n}/err", f"{n}/sq") for n in estimators}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["tabular", "loglinear"])
@pytest.mark.parametrize("G", [2, 3, 8, 32])
def test_mc_mse_matches_exact_formula(kind, G):
    params = bandit.make(4, prompts=8, actions=16, kind=kind, dim=5)
    truth, res = measure(params, G)
    for name in EXACT:
        exact = theory.mse(truth, name, G)
        s = res[name]
        assert abs(s.mse - exact) < 4 * s.mse_se, (name, s.mse, exact, s.mse_se)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["tabular", "loglinear"])
def test_minibatch_mse_adds_prompt_variance(kind):
    """B iid prompts: MSE = c1/B + E_X MSE(X)/B (unbiased); the shrunk form for mean."""
    params = bandit.make(5, prompts=8, actions=16, kind=kind, dim=5)
    truth, res = measure(params, G=4, B=3, estimators=("oracle", "loo", "mean"))
    for name, s in res.items():
        exact = theory.mse(truth, name, 4, B=3)
        assert abs(s.mse - exact) < 4 * s.mse_se, (name, s.mse, exact)
    assert float(truth.c1) > 0


@pytest.mark.slow
def test_mean_baseline_bias_matches_g_over_G():
    """E ĝ_mean = (1 − 1/G) g_x, so bias² = ‖g_x‖²/G²; unbiased estimators have bias² ≈ 0."""
    params = bandit.make(6, prompts=4, actions=8, logit_scale=2.0)
    G = 2
    truth, res = measure(params, G, estimators=("mean", "loo"), seeds=100_000)
    exact = theory.bias_sq(truth, "mean", G)
    # bias_sq = mse − variance; its noise is of the order of the MSE's standard error
    assert abs(res["mean"].bias_sq - exact) < 4 * res["mean"].mse_se
    assert abs(res["loo"].bias_sq) < 4 * res["loo"].mse_se
    assert exact > 10 * res["mean"].mse_se  # the check has power


def test_constant_baseline_formula_reduces_to_oracle_and_vanilla():
    params = bandit.make(7, prompts=5, actions=9)
    truth = bandit.exact(params)
    G = 6
    np.testing.assert_allclose(
        theory.mse_constant(truth, G, 0.0), theory.mse_vanilla(truth, G), rtol=1e-5
    )
    # b = V(x) per prompt is the oracle
    np.testing.assert_allclose(
        theory.mse_constant(truth, G, np.asarray(truth.V)), theory.mse_oracle(truth, G), rtol=1e-6
    )


def test_loo_first_order_term_is_oracle():
    truth = bandit.exact(bandit.make(8, prompts=5, actions=9))
    for G in (10, 100, 1000):
        ratio = theory.mse(truth, "loo", G) / theory.mse(truth, "oracle", G)
        extra = float(
            np.mean(
                np.asarray(truth.S2) * np.asarray(truth.sigma2)
                + np.sum(np.asarray(truth.g_local) ** 2, -1)
            )
        )
        # MSE_loo / MSE_oracle − 1 = C3 / ((G − 1) C2): goes to 0 like 1/G
        assert np.isclose(
            ratio - 1, extra / (G - 1) / float(np.mean(truth.tr_sigma_oracle)), rtol=1e-4
        )


@pytest.mark.slow
def test_float64_mode_matches_theory(x64):
    params = jax.tree.map(lambda x: np.asarray(x, np.float64), bandit.make(9, prompts=4, actions=8))
    truth = bandit.exact(params)
    assert truth.g.dtype == np.float64
    cell = grouped.BanditCell(("loo",), G=5)
    m = engine.run(
        grouped.bandit_error,
        cell,
        (params, truth, bandit.outcome_tables(params), np.float64(1e-4)),
        jax.random.key(0),
        20_000,
        chunk=5000,
    )
    s = engine.error_stats(m, "loo/err", "loo/sq")
    assert abs(s.mse - theory.mse(truth, "loo", 5)) < 4 * s.mse_se
