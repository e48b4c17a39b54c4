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


def _spread(rows, y: str, se: str) -> tuple[float, float]:
    """(largest ratio max/min of ``y`` over cells with the same product k·η, its delta-method SE)
    over ``rows``' resolved cells (``y`` more than 3 SE above 0); NaN when no product has two."""
    rows = rows[rows[y] > 3 * rows[se]]
    best = (math.nan, math.nan)
    for _, g in rows.groupby((rows["staleness"] * rows["eta"]).round(9)):
        if len(g) < 2:
            continue
        hi, lo = g.loc[g[y].idxmax()], g.loc[g[y].idxmin()]
        r = float(hi[y] / lo[y])
        r_se = r * math.hypot(hi[se] / hi[y], lo[se] / lo[y])  # independent: conservative
        if math.isnan(best[0]) or r > best[0]:
            best = (r, r_se)
    return best


def async_product(t: dict) -> dict:
    """gpolab's question on [AS]'s law: does the first update's bias depend on the staleness and
    the step size through S·η alone, so that the largest safe S·η is the same at every η?  At no
    mismatch, per biased composition, ``spread``: the largest ratio of paired bias² between cells
    with the same product k·η (1 where the product alone sets it; with bias² ∝ (S·η)^2, a spread
    s moves the largest safe S·η by at most √s).  Ruled (``spread_max``) over the compositions
    whose clip never engages (a clip is a non-linearity in η: TRL's composition is reported);
    NaN when a composition has no product resolved at two cells.  Control ``control_spread``:
    the same spread of the sequence-IS update's excess MSE over its k = 0 MSE, whose variance
    grows faster in η than in k (the test can tell a law that is not one of S·η)."""
    upd = t["updates"]
    first = upd[(upd["update"] == 0) & (upd["staleness"] >= 1)]
    parts, ruled = [], []
    for c, g in first[first["correction"] != CONTROL].groupby("correction", sort=False):
        s = _spread(g, "bias_sq_paired", "bias_sq_paired_se")
        clipped = bool((g["clip_frac"] > 0).any())
        note = " (clip engages: reported)" if clipped else ""
        parts.append(f"{c}: {s[0]:.2f} ± {s[1]:.2f}{note}")
        if not clipped:
            ruled.append(s)
    worst = (math.nan, math.nan)
    if ruled and not any(math.isnan(v) for v, _ in ruled):
        worst = max(ruled)
    ctl = first[first["correction"] == CONTROL].copy()
    base = upd[(upd["correction"] == CONTROL) & (upd["update"] == 0) & (upd["staleness"] == 0)]
    at0 = base.set_index("eta")
    ctl["excess"] = ctl["mse"] - at0.loc[ctl["eta"], "mse"].to_numpy()
    ctl["excess_se"] = np.hypot(ctl["mse_se"], at0.loc[ctl["eta"], "mse_se"].to_numpy())
    c_s = _spread(ctl, "excess", "excess_se") if len(ctl) and len(base) else (math.nan, math.nan)
    return statistic(
        f"{upd['mismatch'].iloc[0]}, first update, {int(upd['n_seeds'].iloc[0]):,} seeds; largest "
        f"bias² ratio at equal k·η: {'; '.join(parts)}; {CONTROL}'s excess MSE: {c_s[0]:.2f} ± "
        f"{c_s[1]:.2f}",
        spread_max=worst,
        control_spread=c_s,
    )


def _spearman(x, y) -> tuple[float, float]:
    """(Spearman's ρ of ``x`` and ``y``, its SE (1 − ρ²)/√(n − 3) from Fisher's z, cells taken as
    independent points); NaN below 4 points."""
    from scipy.stats import spearmanr

    if len(x) < 4:
        return math.nan, math.nan
    rho = float(spearmanr(x, y)[0])
    return rho, (1 - rho**2) / math.sqrt(len(x) - 3)


def async_ess(t: dict) -> dict:
    """[VC] collapsing ESS predicts increasing variance (the v2 abstract), as gpolab's rank test
    over the asynchronous lab's cells (every mismatch, η and k ≥ 0, the first update): per
    composition Spearman's ρ of the mean ESS ratio of the minibatch's sequence weights with the
    update's variance (``rho_var_max``, the largest over compositions: every one ≤ −0.5 for the
    claim) and with its cos(ĝ, g) (``rho_cos_min``: every one ≥ 0.5, ESS ranks the direction's
    error).  Control ``control_rho_abs``: |ρ| of the ESS with the fresh on-policy update's MSE at
    the same θ (an update that does not see the weights), at most 0.5."""
    first = t["updates"][t["updates"]["update"] == 0]
    var, cos, parts = [], [], []
    for c, g in first.groupby("correction", sort=False):
        v, k = _spearman(g["ess"], g["variance"]), _spearman(g["ess"], g["cos"])
        var.append(v)
        cos.append(k)
        parts.append(f"{c}: variance {v[0]:.2f}, cos {k[0]:.2f}")
    nan = any(math.isnan(v) for v, _ in var + cos) or not var
    one = first.drop_duplicates(["mismatch", "eta", "staleness"])  # the fresh update is shared
    ctl = _spearman(one["ess"], one["mse_fresh"])
    return statistic(
        f"{len(first) // max(len(var), 1)} cells per composition, "
        f"{int(first['n_seeds'].iloc[0]):,} seeds; Spearman ρ of the ESS with "
        f"{'; '.join(parts)}; with the fresh update's MSE {ctl[0]:.2f}",
        rho_var_max=(math.nan, math.nan) if nan else max(var),
        rho_cos_min=(math.nan, math.nan) if nan else min(cos),
        control_rho_abs=(abs(ctl[0]), ctl[1]),
    )


PREFIX = "gpolab/cumtoken_engine"  # the cumulative token ratio against μ (CTPO's theorem's)


def async_prefix_variance(t: dict) -> dict:
    """[CT] the cumulative token ratio against the behaviour policy has strictly lower variance
    than the full sequence ratio (the abstract), on the first update of ``gpolab/cumtoken_engine``
    against the sequence-IS update on the same draws at every cell where the engine's policy
    differs from the trainer's (a noise or k ≥ 1): ``ratio_max``, the largest variance ratio
    over the cells, with its delta-method SE (each variance's SE from its MSE's and bias²'s; the
    sequence ratio's variance is heavy-tailed, and a Monte Carlo variance that misses its tail
    reads low, which only raises this ratio); ``bias_z_max``, the prefix ratio's largest bias² in
    SEs (reported: a prefix ratio is unbiased for a term whose advantage depends on the prefix
    alone, and a sequence reward depends on every token).  Control ``control_p``: the SIS rows'
    bias² against g is 0 (Bonferroni p)."""
    first = t["updates"][t["updates"]["update"] == 0]
    moved = first[(first["mismatch_size"] > 0) | (first["staleness"] > 0)]
    keys = ["mismatch", "staleness", "eta"]
    pre = moved[moved["correction"] == PREFIX].set_index(keys)
    seq = moved[moved["correction"] == CONTROL].set_index(keys).loc[pre.index]

    def var_se(d):
        return np.hypot(d["mse_se"], d["bias_sq_se"]).to_numpy(float)

    vp, vs = pre["variance"].to_numpy(float), seq["variance"].to_numpy(float)
    r = vp / vs
    r_se = np.abs(r) * np.hypot(var_se(pre) / vp, var_se(seq) / vs)
    ok = len(r) and not np.isnan(r).any()
    i = int(np.argmax(r)) if ok else 0
    z = (pre["bias_sq"] / pre["bias_sq_se"].where(pre["bias_sq_se"] > 0)).to_numpy(float)
    p = _unbiased_p(seq.reset_index())
    cells = "; ".join(
        f"{m}, k = {k}: {x:.3g} ± {e:.2g} (bias² {b:.3g} ± {be:.2g})"
        for (m, k, _), x, e, b, be in zip(
            pre.index, r, r_se, pre["bias_sq"], pre["bias_sq_se"], strict=True
        )
    )
    return statistic(
        f"T = {int(first['T'].iloc[0])}, {int(first['n_seeds'].iloc[0]):,} seeds, first update; "
        f"variance of {PREFIX} over {CONTROL}'s by cell: {cells}; {CONTROL} bias² against g over "
        f"{len(seq)} cells: Bonferroni p = {p:.2g}",
        ratio_max=(float(r[i]), float(r_se[i])) if ok else (math.nan, math.nan),
        bias_z_max=(float(np.nanmax(z)) if len(z) else math.nan, 0.0),
        control_p=(p, 0.0),
    )


STATISTICS = (*STATISTICS, async_product, async_ess, async_prefix_variance)
