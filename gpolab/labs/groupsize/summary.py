"""The group-size lab's analysis, from its saved ``results`` table alone: the best G per N
(per env, N and schedule in training) next to the prediction, and the exact curve over
continuous G (:mod:`gpolab.labs.groupsize.lab`)."""

from __future__ import annotations

import numpy as np

from gpolab.labs.groupsize import pool as pools
from gpolab.theory import groupsize as theory

CONSTANTS = ("c1", "C2", "C3", "C2_se", "C3_se")


def constants_of(df) -> theory.Constants:
    """The constants c1, C2, C3 (and SEs) carried by the rows of one instance."""
    return theory.Constants(*(float(df[k].iloc[0]) for k in CONSTANTS))


def _best(sub, value: str) -> tuple:
    """(best G, the Gs whose 95% CI overlaps the best one's) of one curve."""
    best = sub.loc[sub[value].idxmin()]
    tied = sub.loc[sub[f"{value}_ci_low"] <= best[f"{value}_ci_high"], "G"]
    return int(best["G"]), ",".join(str(int(g)) for g in tied)


def _predicted(sub, N: int) -> dict:
    """The predicted best divisor (with a pool: the pool law's over the feasible G), the
    constants with both forms of G*, and with a pool its columns
    (:func:`~gpolab.labs.groupsize.pool.summary_columns`)."""
    c = constants_of(sub)
    if "pool" not in sub or not sub["pool"].notna().all():
        return {"predicted_best_G": theory.best_divisor(c, N), **c.to_dict()}
    P = int(sub["pool"].iloc[0])
    predicted = theory.pool_best_divisor(pools.pool_constants_of(sub), N, P)
    return {"predicted_best_G": predicted, **c.to_dict(), **pools.summary_columns(sub, N, _best)}


def fixed_summary(df):
    """Per N: the empirical best G, the divisors statistically tied with it (95% CIs overlap),
    the predicted best divisor and the constants with both forms of G*."""
    import pandas as pd

    rows = []
    for N, sub in df.groupby("N", sort=False):
        best, tied = _best(sub.sort_values("G"), "mse")
        rows.append(
            {"N": int(N), "empirical_best_G": best, "tied_G": tied, **_predicted(sub, int(N))}
        )
    return pd.DataFrame(rows)


def train_summary(df):
    """Per (env, N, schedule): as :func:`fixed_summary` for the final gap, and whether the
    minimum is interior (neither G = 2 nor G = N)."""
    import pandas as pd

    rows = []
    for (env, N, schedule), sub in df.groupby(["env", "N", "schedule"], sort=False):
        sub = sub.sort_values("G")
        best, tied = _best(sub, "gap")
        rows.append(
            {
                "env": env,
                "N": int(N),
                "schedule": schedule,
                "empirical_best_G": best,
                "tied_G": tied,
                "interior_minimum": bool(sub["G"].iloc[0] < best < sub["G"].iloc[-1]),
                **_predicted(sub, int(N)),
            }
        )
    return pd.DataFrame(rows)


def theory_curve(df, train: bool, points: int = 200):
    """The exact fixed-N MSE over continuous G in [2, N] per N (the figure's dashed lines)."""
    import pandas as pd

    rows = []
    if not train:
        for N, sub in df.groupby("N", sort=False):
            c = constants_of(sub)
            for G in np.geomspace(2, int(N), points):
                rows.append({"N": int(N), "G": float(G), "theory_mse": theory.fixed_n_mse(c, N, G)})
    return pd.DataFrame(rows, columns=["N", "G", "theory_mse"])
