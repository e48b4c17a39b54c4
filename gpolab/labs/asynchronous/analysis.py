"""The asynchronous lab's derived tables: the safe staleness of each composition (from
``results``) and the training comparison (from the curves' per-split final J)."""

from __future__ import annotations

import math

import pandas as pd

from gpolab.kernels.splits import split_se
from gpolab.labs.offpolicy.analysis import fit_slope, largest_safe

SAFE = 1.10  # "safe": MSE within 10% of a fresh on-policy update's at the same θ
SHRINK = 0.9  # ... and the update not shrunk by more than 10% (scale = E ĝ·g / E‖g‖²)
FAILS = 1e30  # the excess a shrunk k is given: a clear failure (finite: not a NaN's "inconclusive")
COMPOSITION = ["correction", "mismatch", "switch"]
SAFE_COLUMNS = (*COMPOSITION[:2], "eta", "m", "tested_staleness", "safe_staleness", "status")
TRAINING_COLUMNS = ("mismatch", "eta", "law", "m", "correction", "J_final", "J_final_se")
TRAINING_COLUMNS += ("gap_to_best", "gap_to_best_se", "verdict")


def safe_staleness(results: pd.DataFrame) -> pd.DataFrame:
    """Per (composition, mismatch, η, m): the largest staleness k whose epoch's excess MSE over
    a fresh on-policy update at the same θ (and every smaller k's) is at most ``SAFE`` − 1;
    ``status`` "none safe" where not even the smallest k is, "inconclusive" where a deciding
    margin is inside one SE.  A k whose update is shrunk (``scale`` below ``SHRINK``) is not safe
    whatever its MSE: a clipped or masked update's MSE falls with its step even where its
    direction gets worse, so its small MSE is no evidence (``status`` "shrunk" where that, and not
    the MSE, ends the run of safe k).  The scale has no SE here, so the rule withholds "safe"
    near the threshold rather than grant it."""
    keys = [k for k in [*COMPOSITION, "eta", "m"] if k in results]
    rows = []
    for key, g in results.groupby(keys, sort=False):
        g = g.sort_values("staleness")
        shrunk = g["scale"] < SHRINK
        best, status = largest_safe(
            g.assign(excess_mse=g["excess_mse"].where(~shrunk, FAILS)),
            "staleness",
            "excess_mse",
            SAFE - 1,
        )
        after = g[g["staleness"] > (-1 if best is None else best)]
        if len(after) and shrunk[after.index[0]] and after["excess_mse"].iloc[0] <= SAFE - 1:
            status = "shrunk"  # it would pass by MSE, but its update is shrunk
        elif best is None and status == "ok":
            status = "none safe"
        rows.append(
            dict(zip(keys, key, strict=True))
            | {"tested_staleness": int(g["staleness"].max()), "safe_staleness": best}
            | {"status": status}
        )
    return pd.DataFrame(rows)


def training(splits: pd.DataFrame) -> pd.DataFrame:
    """Per (mismatch, η, staleness law, m): each composition's final J (mean, SE over the seed
    splits; J at
    θ_0 beside it) and
    its paired gap to the composition with the highest mean (the splits share their draws, so the
    gap's SE is the spread of the per-split gaps); ``verdict``: best, behind (gap beyond one SE)
    or inconclusive."""
    if splits.empty:
        return pd.DataFrame()
    keys = ["mismatch", "switch", "eta", "law", "staleness", "m"]
    rows = []
    for key, g in splits.groupby(keys, sort=False):
        wide = g.pivot(index="split", columns="correction", values="J_final")
        means = wide.mean()
        best = means.idxmax()
        for name in dict.fromkeys(g["correction"]):
            gap = (wide[name] - wide[best]).to_numpy()
            se = float(split_se(gap))
            verdict = "best" if name == best else "behind" if -gap.mean() > se else "inconclusive"
            rows.append(
                dict(zip(keys, key, strict=True))
                | {"correction": name, "J_final": float(means[name])}
                | {"J_final_se": float(split_se(wide[name].to_numpy()))}
                | {"J_start": float(g["J_start"].iloc[0])}
                | {"gap_to_best": float(gap.mean()), "gap_to_best_se": se, "verdict": verdict}
            )
    return pd.DataFrame(rows)


def is_yours(df: pd.DataFrame, mine: dict):
    """The rows of the user's setup: its composition at its m and at most its oldest rollouts."""
    return (
        (df["correction"] == mine["correction"])
        & (df["m"] == mine["m"])
        & (df["law"].str.startswith("k=") if "law" in df else True)
        & (df["staleness"] <= mine["staleness"])
    )


def _lead(df: pd.DataFrame, col: str, se: str | None, best_high: bool) -> str:
    """The best row's correction and value of ``col``, with "(within 1 SE of X)" when the
    runner-up's margin is inside either's SE."""
    d = df.dropna(subset=[col]).sort_values(col, ascending=not best_high)
    if d.empty:
        return "—"
    top = d.iloc[0]
    text = f"{top['correction']} {top[col]:.4g}"
    if len(d) > 1 and se is not None:
        nxt = d.iloc[1]
        if abs(top[col] - nxt[col]) < max(top[se], nxt[se]):
            text += f" (within 1 SE of {nxt['correction']})"
    return text


def decision(tables: dict, mine: dict) -> pd.DataFrame:
    """Per (mismatch, η) at the user's oldest rollouts and m: the user's excess MSE, cos and
    final J beside the composition with the least excess MSE, the best cos and the highest final
    J (paired gap) at the same cell."""
    res, train = tables["results"], tables["training"]
    k, m = mine["staleness"], mine["m"]
    rows = []
    for (spec, eta), g in res[(res["staleness"] == k) & (res["m"] == m)].groupby(
        ["mismatch", "eta"], sort=False
    ):
        own = g[g["correction"] == mine["correction"]].iloc[0]
        row = {"mismatch": spec, "eta": eta, "staleness": k}
        row["your excess_mse"] = f"{own['excess_mse']:.4g} ± {own['excess_mse_se']:.2g}"
        row["least excess_mse"] = _lead(g, "excess_mse", "excess_mse_se", False)
        row["your cos"] = f"{own['cos']:.4g}"
        row["best cos"] = _lead(g, "cos", None, True)
        if not train.empty:
            t = train[(train["mismatch"] == spec) & (train["eta"] == eta)]
            t = t[(t["staleness"] == k) & (t["m"] == m) & (t["law"] == f"k={k}")]
            you = t[t["correction"] == mine["correction"]]
            if len(you):
                y = you.iloc[0]
                row["your final J (gap to best)"] = (
                    f"{y['J_final']:.4g} ({y['gap_to_best']:+.3g} ± {y['gap_to_best_se']:.2g}, "
                    f"{y['verdict']})"
                )
                row["best final J"] = _lead(t, "J_final", "J_final_se", True)
        rows.append(row)
    return pd.DataFrame(rows)


LAW_KEYS = ["correction", "mismatch", "switch"]


def staleness_law(updates: pd.DataFrame) -> pd.DataFrame:
    """Per (composition, mismatch): how the first update's bias grows with the staleness k and
    the step size η (the law O(S·η) of arXiv 2607.01083's abstract: a per-step bias of order
    S·η).  From the paired bias² against the sequence-IS update on the same minibatch (SIS is
    unbiased at every θ, so the pair's mean difference is the update's bias, measured with less
    noise), each slope a weighted fit of log bias² with its SE (points within 3 SE of 0 left
    out; :func:`gpolab.labs.offpolicy.analysis.fit_slope`):

    * ``slope_k_eta``: in the product k·η over every (k ≥ 1, η) — 2 where the bias is linear in
      S·η, above 2 where it vanishes faster;
    * ``slope_k``: in k at the smallest η; ``slope_eta``: in η at the smallest k ≥ 1;
    * ``collapse``: bias² at (largest k, smallest η) over bias² at (smallest k ≥ 1, largest η)
      where the two products k·η are equal (1 where the bias depends on k·η alone), with its
      delta-method SE; NaN where they differ or either is within 3 SE of 0."""

    first = updates[(updates["update"] == 0) & (updates["staleness"] >= 1)]
    rows = []
    for key, g in first.groupby(LAW_KEYS, sort=False):
        y, se = g["bias_sq_paired"], g["bias_sq_paired_se"]
        s, s_se, n = fit_slope(g["staleness"] * g["eta"], y, se)
        low = g[g["eta"] == g["eta"].min()]
        sk = fit_slope(low["staleness"], low["bias_sq_paired"], low["bias_sq_paired_se"])
        near = g[g["staleness"] == g["staleness"].min()]
        se_ = fit_slope(near["eta"], near["bias_sq_paired"], near["bias_sq_paired_se"])
        a = g[(g["staleness"] == g["staleness"].max()) & (g["eta"] == g["eta"].min())]
        b = g[(g["staleness"] == g["staleness"].min()) & (g["eta"] == g["eta"].max())]
        ratio = (math.nan, math.nan)
        if (
            len(a)
            and len(b)
            and math.isclose(
                a["staleness"].iloc[0] * a["eta"].iloc[0], b["staleness"].iloc[0] * b["eta"].iloc[0]
            )
        ):
            (ya, sa), (yb, sb) = (
                (float(x["bias_sq_paired"].iloc[0]), float(x["bias_sq_paired_se"].iloc[0]))
                for x in (a, b)
            )
            if ya > 3 * sa and yb > 3 * sb:  # both resolved (SIS's is 0: no ratio)
                r = ya / yb
                ratio = (r, abs(r) * math.hypot(sa / ya, sb / yb))  # independent: conservative
        rows.append(
            dict(zip(LAW_KEYS, key, strict=True))
            | {"slope_k_eta": s, "slope_k_eta_se": s_se, "points": n}
            | {"slope_k": sk[0], "slope_k_se": sk[1], "slope_eta": se_[0], "slope_eta_se": se_[1]}
            | {"collapse": ratio[0], "collapse_se": ratio[1]}
        )
    return pd.DataFrame(rows)
