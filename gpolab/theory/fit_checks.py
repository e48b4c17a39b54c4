"""Checks of a difficulty fit (:mod:`gpolab.theory.difficulty`) against the log it came from
(theory §10; ``gpolab plan``'s fit check): :func:`logged_check`, the flat-group fraction at each
group's own size against the fit's prediction, and :func:`count_check`, the whole count
histogram against the fit's beta-binomial; :func:`mean_se`, a mean's standard error clustered
by prompt."""

from __future__ import annotations

import numpy as np
from scipy import stats

from gpolab.theory.difficulty import (
    BetaFit,
    _ab_draws,
    _beta_binomial_pmf,
    check_counts,
    cluster_meat,
    degenerate_fraction,
)

CHECK_ELEMENTS = 1 << 21  # draws x group size per chunk of :func:`logged_check` (~16 MB a row)


def _z(measured: float, se_m: float, predicted: float, se_p: float) -> float:
    """(measured − predicted)/√(se_m² + se_p²); 0 when both agree exactly with no spread and
    ±inf when they differ with none (never NaN)."""
    diff, se = measured - predicted, float(np.hypot(se_m, se_p))
    if se > 0:
        return float(diff / se)
    return 0.0 if diff == 0 else float(np.copysign(np.inf, diff))


def _check_result(
    flat: np.ndarray, per_group: np.ndarray, per_draw: np.ndarray, clusters=None
) -> dict:
    """The check's numbers from the flat indicators, the fit's per-group probabilities at the
    point and (draws, groups) at the draws; ``clusters``: :func:`mean_se`."""
    N = flat.size
    measured, predicted = float(flat.mean()), float(per_group.mean())
    se_m = mean_se(flat, clusters)
    se_null = float(np.sqrt(np.sum(per_group * (1 - per_group))) / N)
    se_p = float(np.std(per_draw.mean(axis=1))) if per_draw.shape[0] > 1 else 0.0
    return {
        "groups": int(N),
        "measured": measured,
        "measured_se": se_m,
        "predicted": predicted,
        "predicted_se": se_p,
        "z": _z(measured, max(se_m, se_null), predicted, se_p),
    }


def mean_se(x, clusters=None) -> float:
    """Standard error of mean(x): √(m(1 − m)/N) for 0/1 x with independent entries (``clusters``
    None or all distinct), else the cluster-robust √(C/(C − 1) Σ_c (Σ_{i∈c} (x_i − m))²)/N
    (:func:`cluster_meat` with one parameter), which counts a prompt's repeats as correlated."""
    x = np.asarray(x, np.float64)
    m, N = float(x.mean()), x.size
    if clusters is None or np.unique(np.asarray(clusters)).size in (N, 1):
        return float(np.sqrt(max(m * (1 - m), 0.0) / N))
    return float(np.sqrt(cluster_meat((x - m)[:, None], clusters)[0][0, 0]) / N)


def logged_check(
    successes, trials, fit: BetaFit, *, draws: int = 2000, seed: int = 0, clusters=None
) -> dict:
    """The fit's check: the logged fraction of flat groups (c ∈ {0, n}) against its prediction.

    ``measured`` = mean 1{c_i ∈ {0, n_i}} with binomial SE √(m(1 − m)/N) (cluster-robust by
    ``clusters`` where a label repeats, :func:`mean_se`); ``predicted`` = the
    mean over the logged groups of E[p^{n_i} + (1 − p)^{n_i}] at each group's own size n_i
    (unequal sizes), ``predicted_se`` its spread over :func:`draws` of (a, b) (0 when the fit has
    no interval); z = (measured − predicted)/√(se_m² + se_p²), where se_m is the larger of the
    binomial SE and the SE the fit itself implies, √(Σ d_i(1 − d_i))/N (so an all-flat log still
    has a finite z).  |z| of several says the beta-binomial does not describe the log (e.g. a point
    mass of impossible prompts)."""
    c, n = check_counts(successes, trials)
    flat = ((c == 0) | (c == n)).astype(np.float64)
    a, b = _ab_draws(fit, draws if fit.has_interval else 1, seed)
    # each draw's mean over the groups, by distinct size (memory: draws x sizes, not x groups),
    # in chunks of draws: _fractions holds (draws, max n) products, 10 GB at 4,000 draws of
    # groups of 65,536 (issue 55); a chunk holds at most CHECK_ELEMENTS
    sizes, counts = np.unique(n, return_counts=True)
    step = max(1, CHECK_ELEMENTS // int(sizes.max() + 1))
    per_draw = np.concatenate(
        [
            degenerate_fraction(a[i : i + step, None], b[i : i + step, None], sizes[None])
            @ (counts / n.size)
            for i in range(0, a.size, step)
        ]
    )
    return _check_result(flat, degenerate_fraction(fit.a, fit.b, n), per_draw[:, None], clusters)


def count_check(successes, trials, fit: BetaFit, *, min_expected: float = 5.0) -> dict:
    """Pearson goodness of fit of the whole count histogram (the flat fraction alone is nearly
    reproduced by the maximum-likelihood fit even when the model is wrong, e.g. a point mass of
    impossible prompts beside a peak of easy ones).  Per group size n with N_n groups, expected
    E_nc = N_n · BetaBinomial(c; n, a, b); adjacent cells of one n are merged until each holds
    >= ``min_expected``; X² = Σ (O − E)²/E on df = cells − (#sizes) − 2 (totals and a, b
    fitted), p = P(χ²_df > X²).  At the binomial limit (:attr:`BetaFit.binomial_limit`: the
    maximum on the boundary a + b = ∞, only the mean fitted) df = cells − (#sizes) − 1: the
    spread's score then points out of the model, so X² gains its square, one χ²_1 more (the
    boundary case of Self & Liang 1987; exactly binomial logs land there about half the time,
    and with df − 2 the test rejected them at 6.6% instead of 5%).  df <= 0 (too few cells):
    ``p_value`` None, nothing to test."""
    c, n = check_counts(successes, trials)
    chi2, cells, sizes = 0.0, 0, np.unique(n)
    for m in sizes:
        observed = np.bincount(c[n == m], minlength=m + 1).astype(np.float64)
        expected = observed.sum() * _beta_binomial_pmf(int(m), fit.a, fit.b)
        for o, e in _merge_cells(observed, expected, min_expected):
            chi2, cells = chi2 + (o - e) ** 2 / max(e, 1e-300), cells + 1
    df = cells - sizes.size - (1 if fit.binomial_limit else 2)
    p = float(stats.chi2.sf(chi2, df)) if df > 0 else None
    return {"chi2": float(chi2), "df": int(df), "p_value": p, "cells": int(cells)}


def _merge_cells(observed, expected, least: float) -> list[tuple[float, float]]:
    """Adjacent (observed, expected) cells merged left to right until each expected >= least
    (a short last cell joins the one before)."""
    out, o_acc, e_acc = [], 0.0, 0.0
    for o, e in zip(observed, expected, strict=True):
        o_acc, e_acc = o_acc + o, e_acc + e
        if e_acc >= least:
            out.append((o_acc, e_acc))
            o_acc = e_acc = 0.0
    if e_acc > 0 or o_acc > 0:
        if out:
            o_last, e_last = out.pop()
            out.append((o_last + o_acc, e_last + e_acc))
        else:
            out.append((o_acc, e_acc))
    return out
