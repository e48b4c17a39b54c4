"""The transfer model behind G* of the estimator a run trains with (gpolab.theory.gstar_model):
its closed-form Beta averages against quadrature, loo's law reproduced exactly from the log's
constants, the exact criteria against the loo MSE law, and the model's G* against the exact one
on tabular bandits whose per-prompt truth is enumerated."""

import itertools

import numpy as np
import pytest
from scipy import integrate, stats

from gpolab.envs import bandit
from gpolab.theory import exact, groupsize
from gpolab.theory import gstar_model as gm

AL, BE = 1.3, 2.1


def _constants(truth):
    """(c1, ‖g‖², s, a) exactly, and the moment-matched Beta of V: what a log estimates."""
    f = np.asarray(truth.prompt_probs, np.float64)
    V, S2 = np.asarray(truth.V, np.float64), np.asarray(truth.S2, np.float64)
    g_x = exact.global_gradients(truth)
    g = f @ g_x
    s = float(f @ (S2 * V * (1 - V)))
    a = float(f @ (np.asarray(truth.tr_sigma_oracle, np.float64) + (g_x**2).sum(1)))
    m1, var = f @ V, f @ V**2 - (f @ V) ** 2
    k = m1 * (1 - m1) / var - 1
    return groupsize.constants(truth).c1, float(g @ g), s, a, m1 * k, (1 - m1) * k


@pytest.mark.parametrize("spec,G", [("grpo", 5), ("nemo/grpo", 3), ("loo", 2)])
def test_beta_averages_against_quadrature(spec, G):
    table = exact.registry_table(spec, G)
    pdf = stats.beta(AL, BE).pdf

    def avg(h):
        return integrate.quad(lambda p: h(p) * pdf(p), 0, 1, limit=200)[0]

    def kap(p):
        return exact.kappa(table, G, p)

    def e2(a, p):
        return float(np.sum(a**2 * exact._pmf(G - 1, p)))

    K1, D1, D0, X = gm.terms(table, AL, BE)
    assert K1 == pytest.approx(avg(lambda p: kap(p) * np.sqrt(p * (1 - p))), rel=1e-6)
    assert D1 == pytest.approx(avg(lambda p: p * e2(table.a1, p)), rel=1e-6)
    assert D0 == pytest.approx(avg(lambda p: (1 - p) * e2(table.a0, p)), rel=1e-6)
    assert X == pytest.approx(avg(lambda p: p * (1 - p) * exact._cross(table, G, p)), rel=1e-6)


@pytest.mark.parametrize("s,a", [(0.2, 0.3), (0.2, 0.21), (0.5, 0.1)])
def test_loo_through_the_model_is_the_logs_loo_law(s, a):
    """Whatever branch sets q1, q0, loo's model MSE is (c1 G + C2 + C3/(G − 1))/N with the log's
    c1 and C3 = s + c1 + ‖g‖², so its G* is a grid neighbour of 1 + √(C3/c1)."""
    c1, g_sq, N = 0.01, 0.05, 1024
    m = gm.fit(c1, g_sq, s, a, AL, BE)
    t = gm.estimator_terms("loo", AL, BE)
    G = t.G.astype(float)
    u, w = (np.exp(gm._beta_ratio(AL, BE, *e)) for e in ((2, 1), (1, 2)))
    C2 = m.q1 * w + m.q0 * u - (c1 + g_sq)
    C3 = s + c1 + g_sq
    law = (c1 * G + C2 + C3 / (G - 1)) / N
    np.testing.assert_allclose(gm.criteria(t, m, N)["mse"] * g_sq, law, rtol=1e-10)
    gstar = 1 + np.sqrt(C3 / c1)
    below, above = max(x for x in gm.GRID if x <= gstar), min(x for x in gm.GRID if x >= gstar)
    assert gm.best(t, m, N) in (below, above)
    assert gm.best(t, m, N, "mse") == gm.best(t, m, N)  # unbiased: the targets agree


def test_model_parameters_and_their_guards():
    m = gm.fit(0.01, 0.05, 0.2, 0.21, AL, BE)
    assert m.q1 > 0 and m.q0 > 0 and not m.notes  # the 2x2 solve
    assert m.K0**2 * m.mu_sq == pytest.approx(0.05)
    low = gm.fit(-1.0, 0.05, 0.2, 0.21, AL, BE)  # c1 below the model's floor: τ² = 0
    assert low.nu == low.mu_sq and "parallel" in low.notes[0]
    assert "not finite" in gm.fit(np.nan, 0.05, 0.2, 0.2, AL, BE)
    assert "not above 0" in gm.fit(0.01, 0.05, 0.0, 0.2, AL, BE)
    # ‖g‖² not resolved: taken as 0, where the rescaled target's minimiser (nsr's) still exists;
    # loo's is then the law's with c1 = E‖g_X‖²: 1 + √(C3/c1), C3 = s + c1
    zero = gm.fit(0.01, -0.1, 0.2, 0.2, AL, BE)
    assert zero.mu_sq == 0 and "taken as 0" in zero.notes[0]
    out = gm.gstar("loo", 0.01, -0.1, 0.2, 0.2, AL, BE, 1024)
    g = 1 + np.sqrt(0.21 / 0.01)
    assert out["gstar"] in (max(x for x in gm.GRID if x <= g), min(x for x in gm.GRID if x >= g))
    assert out["gstar_mse"] is None and np.isnan(out["rescaled"])
    assert gm.gstar("trl/grpo", 0.01, -0.1, 0.2, 0.2, AL, BE, 256)["gstar"] in gm.GRID


def test_exact_criteria_for_loo_are_the_fixed_budget_mse():
    truth = bandit.exact(bandit.make(0, prompts=64, actions=8))
    c = groupsize.constants(truth)
    g_sq = float(np.sum((np.asarray(truth.prompt_probs) @ exact.global_gradients(truth)) ** 2))
    ex = gm.exact_criteria(truth, "loo", 512)
    want = [groupsize.fixed_n_mse(c, 512, int(G)) / g_sq for G in ex["G"]]
    np.testing.assert_allclose(ex["mse"], want, rtol=1e-6)
    np.testing.assert_allclose(ex["scale"], 1.0, rtol=1e-9)


SETTINGS = [
    dict(kind=kind, logit_scale=ls, success_a=sa, success_b=sb)
    for kind, ls, sa, sb in itertools.product(
        ("tabular", "loglinear"), (0.5, 4.0), (0.3, 2.0), (0.5, 2.0)
    )
]


def _excess(truth, spec, G, N=1024):
    """Exact 1/SNR at G over its minimum over the grid, minus 1 (0: G is the best)."""
    return gm.noise_excess(gm.exact_criteria(truth, spec, N), G)


@pytest.fixture(scope="module")
def bandits():
    return [bandit.exact(bandit.make(0, prompts=256, actions=16, **s)) for s in SETTINGS]


def test_model_gstar_against_the_exact_one_on_bandits(bandits):
    """Given the exact constants a log estimates, the model's G* of two std-normalized
    estimators costs at most 20% more gradient noise (1/SNR) than the exact best G, on sixteen
    tabular and log-linear bandits (measured: at most 16.6%, nemo/grpo on a log-linear bandit
    with hard prompts; 0 on 15 of the 32).  The transfer model is no better there than loo's own
    G* (at most 7.4%): its assumptions (‖g_x‖² ∝ p(1 − p), one score norm per reward value) are
    where it errs.  Negative control: G = 64, far from every optimum, costs more than 50% on
    every bandit, so the bound is not vacuous."""
    model, loo = [], []
    for truth in bandits:
        c1, g_sq, s, a, al, be = _constants(truth)
        G_loo = gm.gstar("loo", c1, g_sq, s, a, al, be, 1024)["gstar"]
        for spec in ("trl/grpo", "nemo/grpo"):
            model.append(
                _excess(truth, spec, gm.gstar(spec, c1, g_sq, s, a, al, be, 1024)["gstar"])
            )
            loo.append(_excess(truth, spec, G_loo))
            assert _excess(truth, spec, 64) > 0.5
    assert max(model) <= 0.20 and max(loo) <= 0.10
    assert max(model) == pytest.approx(0.166, abs=0.01)  # the docstring's measured numbers
    assert sum(x == 0 for x in model) == 15 and max(loo) == pytest.approx(0.074, abs=0.005)


def test_the_targets_differ_for_a_scaled_estimator_and_the_interval_holds_the_point():
    truth = bandit.exact(bandit.make(0, prompts=256, actions=16, logit_scale=0.5))
    c1, g_sq, s, a, al, be = _constants(truth)
    rng = np.random.default_rng(0)
    reps = np.array([c1, g_sq, s, a]) * rng.normal(1, 0.05, (200, 4))
    reps[:3, 2] = -1.0  # replicates the model cannot be set from (s <= 0) are left out
    out = gm.gstar("trl/grpo", c1, g_sq, s, a, al, be, 1024, reps)
    assert out["replicates_used"] == 197
    assert out["gstar_lo"] <= out["gstar"] <= out["gstar_hi"]
    assert out["gstar_mse"] != out["gstar"] and out["scale"] > 1.2  # 1/σ: a scale bias
