"""Beta-binomial difficulty fit and the degenerate-group law (DESIGN §10), against simulation
and exact enumeration."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, stats

from gpolab.theory import difficulty
from gpolab.validate import ConfigError


@pytest.mark.parametrize("a, b", [(0.5, 1.0), (2.0, 3.0)])
def test_degenerate_fraction_matches_integration(a, b):
    for G in (1, 2, 8, 64):

        def flat(p, G=G):
            return (p**G + (1 - p) ** G) * stats.beta.pdf(p, a, b)

        want = integrate.quad(flat, 0, 1)[0]
        assert difficulty.degenerate_fraction(a, b, G) == pytest.approx(want, rel=1e-7)
    assert difficulty.degenerate_fraction(a, b, 1) == pytest.approx(1.0)  # one response: flat
    draws = difficulty.dapo_draws_per_kept_group(a, b, 8)
    assert draws == pytest.approx(1 / (1 - difficulty.degenerate_fraction(a, b, 8)))


def test_degenerate_fraction_matches_simulated_groups():
    rng = np.random.default_rng(0)
    a, b, G, n = 0.5, 1.0, 4, 200_000
    z = rng.random((n, G)) < rng.beta(a, b, n)[:, None]
    flat = np.mean(z.all(1) | (~z).all(1))
    exact = difficulty.degenerate_fraction(a, b, G)
    assert abs(flat - exact) < 4 * np.sqrt(exact * (1 - exact) / n)


def test_fit_recovers_beta_within_its_standard_error():
    rng = np.random.default_rng(1)
    a, b, prompts, G = 0.7, 1.6, 4000, 8
    c = rng.binomial(G, rng.beta(a, b, prompts))
    f = difficulty.fit(c, np.full(prompts, G))
    assert abs(f.a - a) < 4 * f.a_se and abs(f.b - b) < 4 * f.b_se
    assert f.a_se < 0.1 * a and f.prompts == prompts  # the fit is informative at this size


@pytest.mark.parametrize(
    "c, n, match",
    [([1, 2], [2], "shapes"), ([1.5, 1], [2, 2], "non-integer"), ([3, 1], [2, 2], "0 <= "),
     ([1], [2], "at least 2 prompts")],
)  # fmt: skip
def test_bad_counts_are_one_line(c, n, match):
    with pytest.raises(ConfigError, match=match):
        difficulty.fit(c, n)
