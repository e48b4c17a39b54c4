"""Claims statistics: the helpers every family shares (a ratio and its SE, Bonferroni), and the
off-policy and rollout–training mismatch statistics.  Each statistic takes one experiment's tables
and returns the values its rules read, ``se`` (one standard error per ruled quantity: 0 when
exact or count-valued) and a one-line ``detail``; the other families are the ``stats_*`` modules
beside this one, and :data:`gpolab.labs.claims.lab.STATISTICS` collects every family's
``STATISTICS``.
"""

from __future__ import annotations

import math


def bonferroni(p) -> float:
    """min(1, n · min p) over n p-values; NaN if any is NaN (Python's min(1.0, nan) is 1.0: a
    NaN would pass)."""
    import numpy as np

    p = np.asarray(p, float)
    return math.nan if p.size == 0 or np.isnan(p).any() else float(min(1.0, p.size * p.min()))


def ratio_and_se(a, sa, b, sb) -> tuple[float, float]:
    """a/b and its delta-method SE (a, b taken independent: conservative when they share draws
    and are positively correlated, as estimators of one cell do)."""
    r = float(a / b)
    return r, abs(r) * math.hypot(sa / a, sb / b)


def statistic(detail: str, **values) -> dict:
    """A statistic's values, each given with its standard error as ``name=(value, se)``, and its
    one-line ``detail``."""
    out = {k: v for k, (v, _) in values.items()}
    return {**out, "se": {k: se for k, (_, se) in values.items()}, "detail": detail}


def exact_statistic(detail: str, **values) -> dict:
    """A statistic whose every value is exact or count-valued (each SE 0), with its ``detail``."""
    return {**values, "se": dict.fromkeys(values, 0.0), "detail": detail}


def not_measured(t: dict) -> dict:
    """For a claim that cannot be tested here: it reads nothing (its reason says why)."""
    return {"se": {}}


def offpolicy_order(t: dict) -> dict:
    """Thm 12's order on the token rule (theory §13): the slopes of its paired bias² in η (at the
    largest m; the smallest three and the largest two step sizes) and in the lag k + j,
    recomputed from the results and updates tables, each with its SE, and their distances from 2;
    the token rule's paired bias at the largest η and m in SEs (the detail: the fits only use
    points resolved 3 SE above 0) and the largest |bias²|/SE of the SIS rule's own rows at m > 1
    (unbiased)."""
    import numpy as np

    from gpolab.labs.offpolicy import analysis

    res, upd = t["results"], t["updates"]
    sc = analysis.scaling(upd, res).set_index("ratio").loc["token"]
    tok = res[res["ratio"] == "token"]
    top = tok[
        (tok["m"] == tok["m"].max())
        & (tok["eta"] == tok["eta"].max())
        & (tok["staleness"] == tok["staleness"].min())
    ].iloc[0]
    sis = res[(res["ratio"] == "sis") & (res["m"] > 1)]
    z = np.abs(sis["bias_sq"] / sis["bias_sq_se"]).to_numpy(np.float64)
    sis_z = float(np.max(z)) if len(z) and np.all(np.isfinite(z)) else math.nan
    names = ("slope_eta_low", "slope_eta_high", "slope_lag")
    out = {n: float(sc[n]) for n in names}
    out |= {
        "slope_eta_low_dev": abs(out["slope_eta_low"] - 2),
        "slope_lag_dev": abs(out["slope_lag"] - 2),
        "token_bias_z": float(top["bias_sq_paired"] / top["bias_sq_paired_se"]),
        "sis_max_z": sis_z,
    }
    se = {**{n: float(sc[n + "_se"]) for n in names}, "token_bias_z": 1.0, "sis_max_z": 0.0}
    se |= {"slope_eta_low_dev": se["slope_eta_low"], "slope_lag_dev": se["slope_lag"]}
    etas = sorted(tok["eta"].unique())
    return {
        **out,
        "se": se,
        "detail": f"token at m = {int(tok['m'].max())}: bias² ∝ η^{out['slope_eta_low']:.2f} "
        f"± {se['slope_eta_low']:.2f} over the smallest step sizes (η from {etas[0]:g}), "
        f"η^{out['slope_eta_high']:.2f} ± {se['slope_eta_high']:.2f} over the largest (up to "
        f"{etas[-1]:g}), η^{float(sc['slope_eta']):.2f} ± {float(sc['slope_eta_se']):.2f} "
        f"over all; ∝ lag^{out['slope_lag']:.2f} ± {se['slope_lag']:.2f} at η = "
        f"{float(sc['lag_eta']):g}; "
        f"paired bias² at η = {top['eta']:g}, m = {int(top['m'])}: "
        f"{top['bias_sq_paired']:.3g} ± {top['bias_sq_paired_se']:.2g} "
        f"(MSE {top['mse']:.3g}); SIS: largest |bias²|/SE {sis_z:.2f} over {len(z)} rows",
    }


# ------------------------------------------------------------------ rollout–training mismatch
# (issue 43) The mismatch lab (gpolab/labs/mismatch/lab.py): one row per
# (T, mismatch, correction) with bias_sq, variance and scale (each ± SE from 8 seed batches) and
# the mismatch's exact size (mismatch_kl per token, mismatch_kl_seq, mismatch_tv_max,
# mismatch_chi2_seq).

UNTRUNCATED = 1e6  # an IS threshold at least this large: no weight of these experiments reaches it


def _untruncated(df, name: str):
    """The rows of correction ``name`` run with a threshold no weight reaches (verl's TIS with
    is_threshold ≥ :data:`UNTRUNCATED`: plain importance sampling up to the ±20 log clamp)."""
    from gpolab.estimators import mismatch

    def plain(spec) -> bool:
        n, options = mismatch.parse(spec)
        t = options.get("is_threshold")
        return n == name and isinstance(t, float) and t >= UNTRUNCATED

    return df[df["correction"].map(plain).to_numpy(bool)]


def _log_fit(xs, y, se) -> tuple[list[float], list[float]]:
    """Weighted least squares of log y on 1 and log x for each x in ``xs`` (weights (y/se)², the
    delta method): the slopes and their SEs, inflated by √(χ²/dof) when the points scatter more
    than their SEs allow (a curved relation is not read as a precise slope).  NaN unless every y
    is positive, every se finite and positive and the design has full rank."""
    import numpy as np

    y, se = np.asarray(y, np.float64), np.asarray(se, np.float64)
    nan = [math.nan] * len(xs)
    if not (len(y) > len(xs) and np.all(y > 0) and np.all(np.isfinite(se)) and np.all(se > 0)):
        return nan, nan
    X = np.column_stack([np.ones(len(y)), *(np.log(np.asarray(x, np.float64)) for x in xs)])
    w = (y / se) ** 2
    A = X.T @ (w[:, None] * X)
    if np.linalg.matrix_rank(A) < X.shape[1]:
        return nan, nan
    cov = np.linalg.inv(A)
    beta = cov @ (X.T @ (w * np.log(y)))
    dof = len(y) - X.shape[1]
    chi2 = float(np.sum(w * (np.log(y) - X @ beta) ** 2))
    cov *= max(1.0, chi2 / dof) if dof > 0 else 1.0
    return [float(b) for b in beta[1:]], [float(math.sqrt(cov[i, i])) for i in range(1, len(beta))]


def _unbiased_p(rows, splits: int | None = None) -> tuple[float, float]:
    """(p, largest |z|): is every row's bias² zero?  Per row z = bias_sq/bias_sq_se, a t with
    splits − 1 degrees of freedom (the SE comes from the lab's ``splits`` seed batches; default:
    the mismatch lab's), two-sided, combined by Bonferroni (valid for rows that share draws); NaN
    without rows or with a NaN."""
    import numpy as np
    from scipy.stats import t as student

    if splits is None:
        from gpolab.kernels.rollout_mismatch import SPLITS as splits

    z = (rows["bias_sq"] / rows["bias_sq_se"]).to_numpy(np.float64)
    if not len(z) or not np.all(np.isfinite(z)):
        return math.nan, math.nan
    return bonferroni(2 * student.sf(np.abs(z), splits - 1)), float(np.max(np.abs(z)))


def mismatch_token_bias(t: dict) -> dict:
    """[LL] token-level IS's O(T² Δ_max) bias, as the order of an upper bound, on untruncated
    token IS (verl's token TIS, threshold out of reach): ‖bias‖ = √bias² of the rows with a
    mismatch whose bias² is resolved (≥ 3 SE), fitted as log ‖bias‖ = a + s_T log T + s_Δ log Δ
    with Δ = ``mismatch_tv_max``, the largest per-token total variation ½Σ|μ − π| over the
    states μ visits (gpolab's reading: the blog's Δ_max is not defined in the text read; it
    measures bias with TV, and verl's docs gloss Δ_max as the maximum per-token policy
    divergence).  ``slope_T`` (≤ 2 for the bound's order in T) and ``slope_delta`` (≥ 1: a
    bound C·T²·Δ on Δ ≤ 1 needs the bias to vanish no slower than linearly as Δ → 0; a larger
    power is inside it) with their SEs; NaN unless the row at the largest T and mismatch
    is resolved (≥ 3 SE: else no order is seen).  Control ``control_p``: the rows without
    mismatch (weights 1: unbiased) have bias² 0 (:func:`_unbiased_p`, a p-value: SE 0)."""
    import numpy as np

    df = _untruncated(t["results"], "verl/token_tis")
    on = df[df["mismatch_size"] > 0].sort_values(["mismatch_size", "T"])
    z = (on["bias_sq"] / on["bias_sq_se"]).to_numpy(np.float64)
    fit = on[z >= 3]
    top = on.iloc[-1]  # the largest mismatch at its largest T
    top_z = float(top["bias_sq"] / top["bias_sq_se"])
    norm = np.sqrt(fit["bias_sq"].clip(lower=0))
    norm_se = fit["bias_sq_se"] / (2 * norm)
    (s_T, s_D), (se_T, se_D) = _log_fit([fit["T"], fit["mismatch_tv_max"]], norm, norm_se)
    (_, s_n), (_, se_n) = _log_fit([fit["T"], fit["mismatch_size"]], norm, norm_se)
    if not top_z >= 3:
        s_T = s_D = se_T = se_D = math.nan
    per = []
    for size, rows in fit.groupby("mismatch_size"):
        b = np.sqrt(rows["bias_sq"])
        (s,), (s_se,) = _log_fit([rows["T"]], b, rows["bias_sq_se"] / (2 * b))
        per.append(f"noise {size:g}: T^{s:.2f} ± {s_se:.2f} ({len(rows)} T)")
    p, zmax = _unbiased_p(df[df["mismatch_size"] == 0])
    return statistic(
        f"untruncated token IS, {len(fit)} of {len(on)} rows with a mismatch resolved "
        f"(bias² ≥ 3 SE): ‖bias‖ ∝ T^{s_T:.2f} ± {se_T:.2f} · Δ^{s_D:.2f} ± {se_D:.2f}, Δ = "
        f"the largest per-token TV(μ, π) (gpolab's reading of Δ_max); in the noise size ∝ "
        f"s^{s_n:.2f} ± {se_n:.2f}; per noise: {'; '.join(per)}; at T = "
        f"{int(top['T'])}, noise {top['mismatch_size']:g}: bias² {top['bias_sq']:.3g} ± "
        f"{top['bias_sq_se']:.2g} ({top_z:.1f} SE); no mismatch: largest |bias²|/SE {zmax:.2f}",
        slope_T=(s_T, se_T),
        slope_delta=(s_D, se_D),
        control_p=(p, 0.0),
    )


SEQ_CHI2_RESOLVED = 10.0  # 1 + χ²_seq up to which the seeds see the weights' tail (variance fit)


def mismatch_seq_variance(t: dict) -> dict:
    """[LL] sequence-level IS: zero bias, variance growing like (1 + χ²)^T, on untruncated
    sequence IS (verl's seq TIS, threshold out of reach; the ±20 log clamp not reached).
    ``unbiased_p``: every row with a mismatch (every T and size) has bias² 0 (:func:`_unbiased_p`;
    a p-value: SE 0).  ``slope_dev``: |s − 1|, s the slope of log(variance / the uncorrected
    variance) against log(1 + χ²_seq), χ²_seq = E_μ[(π/μ)²] − 1 of whole sequences (exact;
    ≤ (1 + χ²_tok,max)^T − 1), fitted where 1 + χ²_seq ≤ :data:`SEQ_CHI2_RESOLVED` (beyond, the
    seeds miss the weights' tail and the measured variance falls short); the ratio's SE by the
    delta method.  Control ``token_slope``: the same slope for untruncated token IS, whose
    weights do not multiply along the sequence (it stays near 0: the growth is the sequence
    weights', not the mismatch's)."""
    import numpy as np

    res = t["results"]
    base = res[res["correction"] == "none"].set_index(["T", "mismatch"])

    def ratios(rows):  # variance over the uncorrected one (delta-method SE) and 1 + χ²_seq
        rows = rows[rows["mismatch_size"] > 0]
        b = base.loc[list(zip(rows["T"], rows["mismatch"], strict=True))]
        a, sa = rows["variance"].to_numpy(np.float64), rows["variance_se"].to_numpy(np.float64)
        c, sc = b["variance"].to_numpy(np.float64), b["variance_se"].to_numpy(np.float64)
        r, x = a / c, 1 + rows["mismatch_chi2_seq"].to_numpy(np.float64)
        return rows, r, np.abs(r) * np.hypot(sa / a, sc / c), x

    seq, r, r_se, x = ratios(_untruncated(res, "verl/seq_tis"))
    keep = x <= SEQ_CHI2_RESOLVED
    (s,), (s_se,) = _log_fit([x[keep]], r[keep], r_se[keep])
    tok, tr, tr_se, tx = ratios(_untruncated(res, "verl/token_tis"))
    tkeep = tx <= SEQ_CHI2_RESOLVED
    (ts,), (ts_se,) = _log_fit([tx[tkeep]], tr[tkeep], tr_se[tkeep])
    p, zmax = _unbiased_p(seq)
    pts = ", ".join(
        f"T = {int(T)} {m}: {a:.3g} ± {b:.2g} vs {c:.3g}"
        for T, m, a, b, c in zip(seq["T"], seq["mismatch"], r, r_se, x, strict=True)
    )
    return statistic(
        f"untruncated sequence IS: variance over the uncorrected one against 1 + χ²_seq "
        f"(exact): {pts}; fit over the {int(keep.sum())} rows with 1 + χ²_seq ≤ "
        f"{SEQ_CHI2_RESOLVED:g}: ∝ (1 + χ²_seq)^{s:.2f} ± {s_se:.2f} (token IS: "
        f"^{ts:.2f} ± {ts_se:.2f}); bias² over {len(seq)} rows with a mismatch: largest "
        f"|bias²|/SE {zmax:.2f}, joint p = {p:.2g}",
        unbiased_p=(p, 0.0),
        slope_dev=(abs(s - 1), s_se),
        token_slope=(ts, ts_se),
    )


CLAMP = 20.0  # verl's clamp on the summed log-ratio of sequence-level weights (±20)
COLLAPSED, ALIVE = 0.1, 0.5  # scale = E ĝ·g/‖g‖² of a collapsed estimate, of a working one
BEFORE_CLAMP = 5.0  # sequence KL at most this: well before the clamp


def _extreme_scale(rows, pick: str) -> tuple[float, float]:
    """(scale, SE) of the row with the largest (``idxmax``) or smallest (``idxmin``) scale; NaN
    without rows or with a NaN scale."""
    import numpy as np

    if rows.empty or not np.all(np.isfinite(rows["scale"])):
        return math.nan, math.nan
    r = rows.loc[getattr(rows["scale"], pick)()]
    return float(r["scale"]), float(r["scale_se"])


def mismatch_seq_collapse(t: dict) -> dict:
    """[FK] "sequence-level IS collapses when [T·KL reaches] verl's clamp of 20, and often earlier",
    on the scale E ĝ·g/‖g‖² (1: no shrinkage; 0: the weights zero the estimate) of every
    sequence-level correction of the experiment (``level == "sequence"``) against the sequence KL
    T·KL = ``mismatch_kl_seq``: ``collapsed_max``, the largest scale past the clamp (KL_seq > 20;
    collapse: ≤ 0.1).  A row the sampler cannot resolve (``resolved`` ≠ "yes") carries the scale
    of draws from π (:func:`gpolab.kernels.rollout_mismatch.per_seed_pi`), which sees the weight's
    tail.  "Often earlier" bounds nothing, so the smallest scale short of the clamp is reported
    (``before_min``, KL_seq ≤ 5), not ruled.  Control ``control_min``: the smallest scale of the
    token-level rows (no correction, token TIS) past the clamp, which the sequence weights'
    collapse does not touch (> 0.1).  Each with its row's jackknife SE."""

    res = t["results"]
    seq = (res["level"] == "sequence").to_numpy()
    past = (res["mismatch_kl_seq"] > CLAMP).to_numpy()
    before = (res["mismatch_kl_seq"] <= BEFORE_CLAMP).to_numpy()
    hi, hi_se = _extreme_scale(res[seq & past], "idxmax")
    lo, lo_se = _extreme_scale(res[seq & before], "idxmin")
    ctl, ctl_se = _extreme_scale(res[~seq & past], "idxmin")
    mid = res[seq & ~past & ~before]  # past 5, short of the clamp
    early = (
        f"; short of the clamp ({BEFORE_CLAMP:g} < KL_seq ≤ {CLAMP:g}) the largest sequence-level "
        f"scale is already {mid['scale'].max():.3g}"
        if len(mid)
        else ""
    )
    parts = [
        f"{c}: "
        + ", ".join(f"{r.scale:.3g}" for r in rows.sort_values("mismatch_kl_seq").itertuples())
        for c, rows in res.groupby("correction", sort=False)
    ]
    kls = ", ".join(f"{k:.3g}" for k in sorted(res["mismatch_kl_seq"].unique()))
    return statistic(
        f"T = {int(res['T'].max())}, scale E ĝ·g/‖g‖² at KL_seq = {kls}: "
        + "; ".join(parts)
        + f"; past the clamp (KL_seq > {CLAMP:g}) the largest sequence-level scale "
        f"{hi:.3g} ± {hi_se:.2g}; at KL_seq ≤ {BEFORE_CLAMP:g} the smallest {lo:.3g} ± "
        f"{lo_se:.2g}{early}; token-level past the clamp: smallest {ctl:.3g} ± {ctl_se:.2g}",
        collapsed_max=(hi, hi_se),
        before_min=(lo, lo_se),
        control_min=(ctl, ctl_se),
    )


STATISTICS = (
    not_measured,
    offpolicy_order,
    mismatch_token_bias,
    mismatch_seq_variance,
    mismatch_seq_collapse,
)
