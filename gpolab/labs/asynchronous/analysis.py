"""The asynchronous lab's derived tables: the safe staleness of each composition (from
``results``) and the training comparison (from the curves' per-split final J)."""

from __future__ import annotations

import pandas as pd

from gpolab.kernels.splits import split_se
from gpolab.labs.offpolicy.analysis import largest_safe

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
