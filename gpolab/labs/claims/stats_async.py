"""Claims statistics on the asynchronous lab's tables (``gpolab asynchronous``): the staleness law
of the first update's bias and the token-level objective's first-order gap.
"""

from __future__ import annotations

import math

import numpy as np

from gpolab.labs.claims import stats
from gpolab.labs.claims.stats import statistic

CONTROL = "sis"  # gpolab's unbiased control composition (estimators.asynchronous)


def _extreme(rows, col: str, pick) -> tuple[float, float, str]:
    """(value, its SE, the composition) of the row of ``rows`` where ``col`` is extreme (``pick``
    min or max); NaN when any row's value is NaN (a composition the fit could not resolve is
    never skipped into a pass)."""
    v = rows[col].to_numpy(float)
    if not len(v) or np.isnan(v).any():
        return math.nan, math.nan, ""
    i = int(pick(v))
    r = rows.iloc[i]
    return float(r[col]), float(r[f"{col}_se"]), str(r["correction"])


def _unbiased_p(upd) -> float:
    """The Bonferroni p that every row's bias² against the exact gradient is 0
    (:func:`gpolab.labs.claims.stats._unbiased_p` with the asynchronous lab's splits)."""
    from gpolab.labs.asynchronous.lab import SPLITS

    return stats._unbiased_p(upd, SPLITS)[0]


def async_staleness_law(t: dict) -> dict:
    """[AS] "a per-step surrogate-gradient bias of order O(S·η)" (the abstract), on the first
    update of each biased composition at no mismatch (staleness alone; the ``staleness_law``
    table, :func:`gpolab.labs.asynchronous.analysis.staleness_law`, fits the paired bias²):
    ``slope_k_min`` and ``slope_eta_min``, the smallest slope of log bias² in k (at the smallest
    η) and in η (at the smallest k ≥ 1) over the compositions (a bias ≤ C·S·η as S·η → 0 allows
    any slope ≥ 2 and none below; √(S·η) would give 1); ``collapse_min``/``collapse_max``, the
    bias² at (largest k, smallest η) over that at (smallest k, largest η), equal products S·η
    (1 where the bias depends on S·η alone: the largest safe S·η is then the same at every η;
    reported, not ruled: the abstract states an order, not a collapse; NaN where a composition's
    two points are not both resolved).  Control ``control_p``: the SIS rows' bias² against the
    exact gradient, 0 at every (k ≥ 1, η) (Bonferroni p)."""
    law, upd = t["staleness_law"], t["updates"]
    biased = law[law["correction"] != CONTROL]
    sk, sk_se, sk_c = _extreme(biased, "slope_k", np.argmin)
    se_, se_se, se_c = _extreme(biased, "slope_eta", np.argmin)
    lo, lo_se, _ = _extreme(biased, "collapse", np.argmin)
    hi, hi_se, _ = _extreme(biased, "collapse", np.argmax)
    ctl = upd[(upd["correction"] == CONTROL) & (upd["update"] == 0) & (upd["staleness"] >= 1)]
    p = _unbiased_p(ctl)
    parts = "; ".join(
        f"{r.correction}: slope in k {r.slope_k:.2f} ± {r.slope_k_se:.2f}, in η "
        f"{r.slope_eta:.2f} ± {r.slope_eta_se:.2f}, in k·η {r.slope_k_eta:.2f} ± "
        f"{r.slope_k_eta_se:.2f}, collapse {r.collapse:.2f} ± {r.collapse_se:.2f}"
        for r in biased.itertuples()
    )
    ks = [int(k) for k in sorted(upd["staleness"].unique())]
    etas = [float(e) for e in sorted(upd["eta"].unique())]
    return statistic(
        f"{upd['mismatch'].iloc[0]}, T = {int(upd['T'].iloc[0])}, k = {ks}, η = {etas}, "
        f"{int(upd['n_seeds'].iloc[0]):,} seeds: {parts}; smallest slopes from {sk_c} (k) and "
        f"{se_c} (η); {CONTROL} bias² against g over {len(ctl)} cells: Bonferroni p = {p:.2g}",
        slope_k_min=(sk, sk_se),
        slope_eta_min=(se_, se_se),
        collapse_min=(lo, lo_se),
        collapse_max=(hi, hi_se),
        control_p=(p, 0.0),
    )


def _slope(rows, x: str) -> tuple[float, float]:
    """(slope, SE) of log paired bias² in log ``x`` over ``rows`` (points within 3 SE of 0 left
    out; :func:`gpolab.labs.offpolicy.analysis.fit_slope`)."""
    from gpolab.labs.offpolicy.analysis import fit_slope

    s, se, _ = fit_slope(rows[x], rows["bias_sq_paired"], rows["bias_sq_paired_se"])
    return s, se


def async_first_order(t: dict) -> dict:
    """[Q] the token-level objective (Eq. 3) is a first-order approximation of the sequence-level
    one (Eq. 1), valid when π_θ is close to μ_θold, which takes both a small training–inference
    discrepancy and small staleness (§2.3–2.4): on the first update of the token-level
    composition (every correction but the control), its paired bias² against the sequence-IS
    update on the same minibatch (Eq. 1's gradient) is ``origin_rel`` (over its MSE) at no
    mismatch and k = 0 (float rounding: the two objectives coincide), and grows from there in
    the engine's noise size at k = 0 (``slope_gap``) and in k at no noise (``slope_stale``),
    each a log–log slope of bias² (2: a bias linear in the gap, as a first-order approximation
    leaves it).  Control ``control_p``: the SIS rows' bias² against the exact gradient is 0."""
    upd = t["updates"]
    first = upd[upd["update"] == 0]
    tok = first[first["correction"] != CONTROL]
    fresh = tok[tok["staleness"] == 0]
    exact = tok[tok["mismatch_size"] == 0]
    origin = tok[(tok["staleness"] == 0) & (tok["mismatch_size"] == 0)]
    rel = float((origin["bias_sq_paired"].abs() / origin["mse"]).max()) if len(origin) else math.nan
    s_gap = _slope(fresh[fresh["mismatch_size"] > 0], "mismatch_size")
    s_k = _slope(exact[exact["staleness"] > 0], "staleness")
    ctl = first[(first["correction"] == CONTROL)]
    ctl = ctl[(ctl["staleness"] > 0) | (ctl["mismatch_size"] > 0)]
    p = _unbiased_p(ctl)

    def cells(rows, x):
        return ", ".join(
            f"{getattr(r, x):g}: {r.bias_sq_paired:.3g} ± {r.bias_sq_paired_se:.2g}"
            for r in rows.sort_values(x).itertuples()
        )

    return statistic(
        f"{', '.join(tok['correction'].unique())}, T = {int(upd['T'].iloc[0])}, η = "
        f"{float(upd['eta'].iloc[0]):g}, {int(upd['n_seeds'].iloc[0]):,} seeds: paired bias² "
        f"at k = 0 by noise {cells(fresh, 'mismatch_size')} (slope {s_gap[0]:.2f} ± "
        f"{s_gap[1]:.2f}); at no noise by k {cells(exact, 'staleness')} (slope {s_k[0]:.2f} ± "
        f"{s_k[1]:.2f}); at both 0: {rel:.2g} of the MSE; {CONTROL} bias² against g over "
        f"{len(ctl)} cells: Bonferroni p = {p:.2g}",
        origin_rel=(rel, 0.0),
        slope_gap=s_gap,
        slope_stale=s_k,
        control_p=(p, 0.0),
    )


STATISTICS = (async_staleness_law, async_first_order)
