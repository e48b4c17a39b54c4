"""Claims statistics on the Monte Carlo sweeps (``gpolab bandit/arithmetic/loglinear/zoo``): the
MSE orderings and ratios of the estimators, the mean baseline's bias, and the joint tests of exact
theory against Monte Carlo (:func:`gpolab.engine.stats.joint_test`).
"""

from __future__ import annotations

import math

import numpy as np

from gpolab.engine import stats
from gpolab.labs.claims.stats import exact_statistic, ratio_and_se, statistic


def _gap(a, sa, b, sb) -> tuple[float, float]:
    """a − b and its SE (independent)."""
    return float(a - b), math.hypot(sa, sb)


def _order_gaps(df, estimator: str, G: int) -> list[tuple[float, float]]:
    """(base − instruct, instruct − icl) MSE gaps of one estimator at G, each with its SE."""
    v = df[(df["estimator"] == estimator) & (df["G"] == G)].set_index("policy")
    return [
        _gap(v.loc[a, "mse"], v.loc[a, "mse_se"], v.loc[b, "mse"], v.loc[b, "mse_se"])
        for a, b in (("base", "instruct"), ("instruct", "icl"))
    ]


def strength_order(t: dict) -> dict:
    df = t["results"]
    G = 16 if 16 in set(df["G"]) else int(df["G"].max())
    v = df[(df["estimator"] == "vanilla") & (df["G"] == G)].set_index("policy")
    ratio = ratio_and_se(
        v.loc["base", "mse"], v.loc["base", "mse_se"], v.loc["icl", "mse"], v.loc["icl", "mse_se"]
    )
    gap = min(_order_gaps(df, "vanilla", G))
    return statistic(
        f"vanilla MSE at G = {G}: base {v.loc['base', 'mse']:.3g}, instruct "
        f"{v.loc['instruct', 'mse']:.3g}, icl {v.loc['icl', 'mse']:.3g} (mean V "
        "0.15 / 0.40 / 0.65): grows with strength (why, and a family that reverses "
        "it: docs/arithmetic.md)",
        base_over_icl=ratio,
        smallest_gap=gap,
    )


def strength_family(t: dict) -> dict:
    df = t["results"]
    G = int(df["G"].max())
    gaps, parts = [], []
    for e in ("vanilla", "loo", "oracle"):
        v = df[(df["estimator"] == e) & (df["G"] == G)].set_index("policy")["mse"]
        gaps += _order_gaps(df, e, G)
        parts.append(f"{e} {v['base']:.3g} > {v['instruct']:.3g} > {v['icl']:.3g}")
    gap = min(gaps, key=lambda g: g[0] / g[1] if g[1] > 0 else g[0] * math.inf)
    return statistic(
        f"G = {G}, base > instruct > icl: "
        + "; ".join(parts)
        + f"; least clear gap {gap[0]:.3g} ± {gap[1]:.3g}",
        smallest_gap_z=(gap[0] / gap[1], 1.0),
    )


def mean_baseline(t: dict) -> dict:
    """At the smallest G: the mean baseline's bias² against ‖g_x‖²/G² and against 0, each as a z
    (SE 1) with the SE of the bias² estimate, and its MSE margin below the next-lowest estimator.

    SE of the unbiased bias² estimate ‖ē‖² − tr Σ/n (ē the mean error of n seeds, Σ its per-seed
    covariance): Var ≈ 4 bᵀΣb/n + 2 tr(Σ²)/n² ≤ 4 ‖b‖² tr Σ/n + 2 (tr Σ)²/n² (b the bias; an
    upper bound, as the table has tr Σ only), with ‖b‖² the larger of the estimate and the
    theory."""
    df = t["results"]
    G = int(df["G"].min())
    at = df[df["G"] == G].set_index("estimator")
    m = at.loc["mean"]
    n, V = float(m["n_seeds"]), float(m["variance"])
    b2 = max(float(m["bias_sq"]), float(m["theory_bias_sq"]), 0.0)
    bias_se = math.sqrt(4 * b2 * V / n + 2 * V**2 / n**2)
    z = float((m["bias_sq"] - m["theory_bias_sq"]) / bias_se)
    others = at.drop(index="mean")
    nxt = others.loc[others["mse"].idxmin()]
    gap = _gap(nxt["mse"], nxt["mse_se"], m["mse"], m["mse_se"])
    return statistic(
        f"G = {G}: mean's bias² {m['bias_sq']:.3g} ± {bias_se:.2g} vs exact "
        f"‖g_x‖²/G² {m['theory_bias_sq']:.3g} (z = {z:.2f}); MSE {m['mse']:.4g} vs "
        f"the next-lowest ({nxt.name}) {nxt['mse']:.4g} (oracle "
        f"{at.loc['oracle', 'mse']:.4g})",
        bias_theory_abs_z=(abs(z), 1.0),
        bias_z=(float(m["bias_sq"] / bias_se), 1.0),
        lowest_mse_gap=gap,
    )


def normalization_direction(t: dict) -> dict:
    """At G = 8: grpo/loo MSE (Monte Carlo, delta-method SE) and snr/loo from exact theory (count
    tables: SE 0, checked against Monte Carlo by gpolab-1); the Monte Carlo snr/loo has no SE in
    the table and is reported only."""
    df = t["results"]
    at = df[(df["G"] == 8)].set_index(["env", "estimator"])
    out, se, parts = {}, {}, []
    for env in sorted(set(df["env"])):
        g, lo = at.loc[(env, "grpo")], at.loc[(env, "loo")]
        ratio = ratio_and_se(g["mse"], g["mse_se"], lo["mse"], lo["mse_se"])
        snr = float(g["theory_snr_vs_loo"])
        out[f"mse_ratio_{env}"], se[f"mse_ratio_{env}"] = ratio
        out[f"snr_{env}"], se[f"snr_{env}"] = snr, 0.0 if np.isfinite(snr) else math.nan
        parts.append(
            f"{env}: grpo/loo MSE {ratio[0]:.2f} ± {ratio[1]:.2f}, snr/loo "
            f"{snr:.4f} exact ({float(g['snr_vs_loo']):.4f} Monte Carlo)"
        )
    return {**out, "se": se, "detail": "G = 8: " + "; ".join(parts)}


def kappa_values(t: dict) -> dict:
    """κ_8(0.05) from the exact κ table (SE 0)."""
    k = t["kappa"]
    k = k[k["G"] == 8]
    want = {"grpo": 2.31, "nemo/grpo": 1.47, "loo": 1.0}
    got = {}
    for name in want:
        c = k[k["estimator"] == name]
        got[name] = float(np.interp(0.05, c["p"], c["kappa"])) if len(c) else float("nan")
    err = max(abs(got[n] - want[n]) for n in want)
    return exact_statistic(
        "κ_8(0.05): " + ", ".join(f"{n} {got[n]:.3f} (theory {want[n]})" for n in want),
        max_abs_error=err,
    )


def _worst_ratio(df, hi: str, lo: str, G: int) -> tuple[float, float, str]:
    """The largest MSE ratio hi/lo over the policies (or envs) at G, its SE and where."""
    worst = (math.nan, math.nan, "")
    by = "policy" if "policy" in df and df["policy"].notna().any() else "env"
    for name, sub in df[df["G"] == G].groupby(by):
        m = sub.set_index("estimator")
        r = ratio_and_se(
            m.loc[hi, "mse"], m.loc[hi, "mse_se"], m.loc[lo, "mse"], m.loc[lo, "mse_se"]
        )
        if math.isnan(worst[0]) or r[0] > worst[0]:
            worst = (*r, str(name))
    return worst


def oracle_close(t: dict) -> dict:
    """Fig. 4's observation 2 in numbers: the worst policy's loo/oracle MSE ratio at G = 8
    ("already close") and at G = 32 and 64 ("nearly indistinguishable"), each with its
    delta-method SE; NaN where the table lacks that G (the quick sizes)."""
    df = t["results"]
    out, se, parts = {}, {}, []
    for G in (8, 32, 64):
        r, s, where = (
            _worst_ratio(df, "loo", "oracle", G) if G in set(df["G"]) else (math.nan, math.nan, "")
        )
        out[f"loo_over_oracle_G{G}"], se[f"loo_over_oracle_G{G}"] = r, s
        parts.append(f"G = {G}: {r:.3f} ± {s:.3f}" + (f" ({where})" if where else " (not run)"))
    return {
        **out,
        "se": se,
        "detail": "worst loo/oracle MSE over the policies: " + "; ".join(parts),
    }


def _unclear_gaps(df, pairs) -> tuple[int, int, tuple[float, str]]:
    """Over the (policy, G) cells of ``df``: how many MSE gaps hi − lo, for each (hi, lo) of
    ``pairs``, are not 2 SE of the difference clear, the cells, and the least clear gap (in SEs,
    and where: policy, G and the estimator ``hi``, or ``lo`` when ``hi`` is vanilla)."""
    bad, cells, worst = 0, 0, (math.inf, "")
    for (policy, G), sub in df.groupby(["policy", "G"]):
        m = sub.set_index("estimator")
        cells += 1
        for hi, lo in pairs:
            gap = m.loc[hi, "mse"] - m.loc[lo, "mse"]
            s = float(np.hypot(m.loc[hi, "mse_se"], m.loc[lo, "mse_se"]))
            bad += gap <= 2 * s
            if gap / s < worst[0]:
                worst = (gap / s, f"{policy}, G = {int(G)}, {lo if hi == 'vanilla' else hi}")
    return int(bad), cells, worst


def _ordering(df, rows, pairs, count: str, text: str, **extra) -> dict:
    """An ordering claim: the :func:`_unclear_gaps` of ``rows`` over ``pairs`` (a count, named
    ``count``: SE 0) and the exact theory's joint test over every (policy, estimator) of ``df``
    (a p-value is its own test: SE 0); ``text`` formatted with ``bad``, ``clear`` and ``gaps``
    (counts), ``worst`` (SEs, where), ``joint``, ``zmax`` and ``extra``."""
    bad, cells, worst = _unclear_gaps(rows, pairs)
    joint, zmax = _joint(df, ("policy", "estimator"))
    counts = dict(bad=bad, clear=2 * cells - bad, gaps=2 * cells)
    text = text.format(**counts, worst=worst, joint=joint, zmax=zmax, **extra)
    return exact_statistic(text, **{count: bad}, joint_p=joint)


def no_filler_flip(t: dict) -> dict:
    """Every (policy, G) cell: a violation unless vanilla's MSE is below both the oracle's and
    loo's by 2 SE of the difference (a count: SE 0); and the exact theory's joint test (a p-value
    is its own test: SE 0)."""
    df = t["results"]
    text = (
        "vanilla below the oracle and loo, 2 SE clear, in {clear} of {gaps} comparisons (policy "
        "× G × baseline); least clear: {worst[1]} ({worst[0]:.1f} SE); exact theory joint p = "
        "{joint:.2g}"
    )
    return _ordering(df, df, (("oracle", "vanilla"), ("loo", "vanilla")), "flip_violations", text)


def ustat_identity(t: dict) -> dict:
    """Lemma 1 on the zoo's cells: ustat (the pairwise U-statistic) and loo evaluated on the same
    draws; the largest difference of their MSE, squared bias and variance over every (env, G),
    relative to loo's MSE (a bias² near 0 would make its own relative difference float32 noise;
    float rounding only when the identity holds: exact, SE 0).  A quantity measured for one form
    and not the other counts as infinite; one measured for neither (NaN both) is skipped."""
    worst, n = 0.0, 0
    for _, sub in t["results"].groupby(["env", "G"]):
        m = sub.set_index("estimator")
        if not {"ustat", "loo"} <= set(m.index):
            continue
        n += 1
        scale = abs(float(m.loc["loo", "mse"]))
        for col in ("mse", "bias_sq", "variance"):
            a, b = float(m.loc["ustat", col]), float(m.loc["loo", col])
            if math.isnan(a) and math.isnan(b):
                continue
            gap = abs(a - b) / max(scale, 1e-30)
            worst = math.inf if math.isnan(gap) else max(worst, gap)
    worst = worst if n else math.nan
    return exact_statistic(
        f"ustat vs loo on the same draws, {n} (env, G) cells: largest difference of "
        f"MSE, bias² and variance over loo's MSE {worst:.2g}",
        max_rel_diff=worst,
        cells=n,
    )


def _joint(rows, by=("estimator",)) -> tuple[float, float]:
    """(joint p, largest |z|) of :func:`gpolab.engine.stats.joint_test`; NaN when no row has exact
    theory (no test is no pass)."""
    t = stats.joint_test(rows, by)
    return (math.nan, math.nan) if t is None else (t["joint_p"], t["max_abs_z"])


def oracle_match(t: dict) -> dict:
    df = t["results"]
    Gmax = int(df["G"].max())
    at = df[df["G"] == Gmax].set_index("estimator")
    loo, oracle = at.loc["loo"], at.loc["oracle"]
    ratio, ratio_se = ratio_and_se(loo["mse"], loo["mse_se"], oracle["mse"], oracle["mse_se"])
    joint, zmax = _joint(df)
    return statistic(
        f"loo/oracle = {ratio:.3f} ± {ratio_se:.3f} at G = {Gmax}; exact theory vs "
        f"Monte Carlo: joint p = {joint:.2g} (Bonferroni over estimators of Σ_G z²; "
        f"a p-value is its own test: SE 0), largest |z| {zmax:.2f}; "
        f"{int(df['n_seeds'].min()):,} seeds",
        loo_over_oracle_at_max_G=(ratio, ratio_se),
        joint_p=(joint, 0.0),
        max_abs_z=(zmax, 0.0),
    )


def arithmetic_ordering(t: dict) -> dict:
    """Fig. 4's observation 1 over the paper's group sizes (G >= 4): a (policy, G) cell violates
    "vanilla has the largest MSE" unless vanilla is above both loo and the oracle by 2 SE of the
    difference (a count: SE 0); and the exact theory's joint test over every cell."""
    df = t["results"]
    paper = df[df["G"] >= 4]
    Gs = ", ".join(str(int(g)) for g in sorted(set(paper["G"])))
    text = (
        "{bad} of {gaps} gaps (policy × G = {Gs} × loo, oracle) where vanilla's MSE is not above "
        "by 2 SE; exact theory (every G) joint p = {joint:.2g}, largest |z| {zmax:.2f}"
    )
    pairs = (("vanilla", "loo"), ("vanilla", "oracle"))
    return _ordering(df, paper, pairs, "ordering_violations", text, Gs=Gs)


def zoo_theory(t: dict) -> dict:
    df = t["results"]
    out, parts = {}, []
    for env, rows in df.groupby("env"):
        joint, zmax = _joint(rows)
        out[f"joint_p_{env}"] = joint
        parts.append(
            f"{env}: joint p = {joint:.2g}, largest |z| {zmax:.2f} "
            f"({int(rows['theory_mse'].notna().sum())} cells)"
        )
    return exact_statistic("; ".join(parts), **out)


def graded_theory(t: dict) -> dict:
    """The graded zoo: Monte Carlo against the graded count tables (``joint_p``) and against the
    binary theory of the same means (``binary_joint_p``: the rows' ``binary_theory_mse`` as the
    theory), over the cells where both exist."""
    df = t["results"]
    rows = df[df["env"] == "graded"]
    rows = rows[np.isfinite(rows["theory_mse"].astype(float))]
    rows = rows[np.isfinite(rows["binary_theory_mse"].astype(float))]
    joint, zmax = _joint(rows)
    binary, bmax = _joint(rows.assign(theory_mse=rows["binary_theory_mse"]))
    return exact_statistic(
        f"graded count tables: joint p = {joint:.2g}, largest |z| {zmax:.2f}; binary theory of "
        f"the same means: joint p = {binary:.2g}, largest |z| {bmax:.1f} "
        f"({len(rows)} cells, {rows['estimator'].nunique()} estimators)",
        joint_p=joint,
        binary_joint_p=binary,
    )


STATISTICS = (
    strength_order,
    strength_family,
    mean_baseline,
    normalization_direction,
    kappa_values,
    oracle_close,
    no_filler_flip,
    ustat_identity,
    oracle_match,
    arithmetic_ordering,
    zoo_theory,
    graded_theory,
)
