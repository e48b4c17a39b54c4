"""Proposition 13 and Lemma 11 of arXiv 2603.01162 (Appendix A) on the log-linear bandit
(``gpolab/theory/arcsin.py``, ``gpolab stdnorm --regimes arcsin``): Algorithm 2's advantage against
gpolab's ``grpo``, the finite-G mean field Φ_G against 2 arcsin √v, and Lemma 11's exact ratio
against its own Monte Carlo."""

import jax
import numpy as np
import pytest
from scipy import integrate

from gpolab import estimators
from gpolab.labs.stdnorm import arcsin as regime
from gpolab.labs.stdnorm import lab as stdnorm
from gpolab.theory import arcsin as theory
from gpolab.validate import ConfigError


@pytest.mark.parametrize("G", [2, 3, 8])
def test_algorithm_2_advantage_is_G_over_G_minus_1_times_grpo_and_finite(G):
    """(Z_g − Z̄_−g)/se = G/(G − 1)·grpo (ddof 1, eps 0) on every binary group, all-equal groups
    0 (never NaN); and its count table gives the same advantages."""
    groups = np.array([[int(b) for b in np.binary_repr(i, G)] for i in range(2**G)], np.float32)
    paper = np.asarray(regime.advantages(groups))
    assert np.all(np.isfinite(paper))
    grpo = np.asarray(estimators.advantages("grpo[ddof=1,eps=0]", groups))
    np.testing.assert_allclose(paper, np.nan_to_num(grpo) * G / (G - 1), atol=1e-5)
    table = theory.paper_table(G)
    for z, a in zip(groups, paper, strict=True):
        s = z.sum()
        want = [table.a1[int(s - 1)] if zi else table.a0[int(s)] for zi in z]
        np.testing.assert_allclose(a, want, atol=1e-5)


def test_phi_G_integrates_kappa_G_and_tends_to_two_arcsin_sqrt_v():
    """Φ_G(v) = ∫_0^v κ_G (quadrature) and, as G grows, Φ_G → 2 arcsin √v (and κ_G → 1/σ) on
    the interior: the gap falls with G."""
    v = np.array([0.05, 0.3, 0.5, 0.8])
    for G in (4, 16):
        quad = [integrate.quad(lambda t, G=G: float(theory.kappa(G, t)), 0, x)[0] for x in v]
        np.testing.assert_allclose(theory.phi(G, v), quad, rtol=1e-8, atol=1e-12)
    limit = 2 * np.arcsin(np.sqrt(v))
    np.testing.assert_allclose(theory.phi(np.inf, v), limit)
    gaps = [np.max(np.abs(theory.phi(G, v) - limit)) for G in (8, 32, 128)]
    assert gaps[0] > gaps[1] > gaps[2]
    kgaps = [np.max(np.abs(theory.kappa(G, v) * np.sqrt(v * (1 - v)) - 1)) for G in (8, 32, 128)]
    assert kgaps[0] > kgaps[1] > kgaps[2]


def test_lemma11_exact_ratio_matches_its_monte_carlo_and_the_direction_tends_to_grad_J():
    """The regime's rows on a small instance: the measured E‖ĝ − U‖²/E‖U‖² within 4 SE of the
    exact one at every G, the exact ratio and the direction's relative error to ∇J falling in G,
    and ∇J distinct from ∇E V (cos < 1)."""
    cfg = stdnorm.Config(regimes=("arcsin",), arcsin_G=(2, 8, 32), arcsin_draws=1500, prompts=8)
    d = regime.tables(cfg, jax.random.key(0))["arcsin_direction"]
    assert np.all(np.abs(d["u_ratio"] - d["u_ratio_exact"]) < 4 * d["u_ratio_se"])
    assert np.all(np.diff(d["u_ratio_exact"]) < 0) and np.all(np.diff(d["rel_err"]) < 0)
    assert d["cos_target_plain"].iloc[0] < 0.999
    assert d["cos_arcsin"].iloc[-1] > d["cos_plain"].iloc[-1]


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(arcsin_align=1.5), "^arcsin_align: got 1.5"),
        (dict(arcsin_G=(1, 4)), "^arcsin_G: got 1"),
        (dict(arcsin_draws=1), "^arcsin_draws: got 1"),
    ],
)
def test_bad_arcsin_settings_are_one_config_error(change, message):
    with pytest.raises(ConfigError, match=message):
        stdnorm.Config(regimes=("arcsin",), **change).validate()
