"""The group-size lab's analysis, from its saved ``results`` table alone: the best G per N
(per env, N and schedule in training; per env, pool and N in the budget check) next to the
prediction, and the exact curve over continuous G (:mod:`gpolab.labs.groupsize.lab`)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from gpolab.labs.groupsize.config import CHECKPOINTS
from gpolab.labs.groupsize.pool import POOL_CONSTANTS
from gpolab.theory import groupsize as theory

CONSTANTS = ("c1", "C2", "C3", "C2_se", "C3_se")


def constants_of(df, names=CONSTANTS) -> theory.Constants:
    """The constants c1, C2, C3 (and SEs) carried by the rows of one instance (``names``: the
    columns, e.g. the pool's :data:`POOL_CONSTANTS` or the population's c1, C2, C3 alone)."""
    return theory.Constants(*(float(df[k].iloc[0]) for k in names))


def pool_constants(sub) -> theory.Constants:
    """The constants the rule reads: the pool's (P ≥ 1) or the population's (P = 0)."""
    return constants_of(sub, POOL_CONSTANTS if int(sub["pool"].iloc[0]) else CONSTANTS[:3])


def best(sub, value: str, maximize: bool = False) -> tuple[int, list[int]]:
    """(best G, the Gs whose 95% CI overlaps the best one's) of one curve sorted by G."""
    b = sub.loc[sub[value].idxmax() if maximize else sub[value].idxmin()]
    if maximize:
        tied = sub.loc[sub[f"{value}_ci_high"] >= b[f"{value}_ci_low"], "G"]
    else:
        tied = sub.loc[sub[f"{value}_ci_low"] <= b[f"{value}_ci_high"], "G"]
    return int(b["G"]), sorted(int(g) for g in tied)


def ties(gs: list[int]) -> str:
    return ",".join(map(str, gs))


def _predicted(sub, N: int) -> dict:
    """The predicted best divisor (with a pool: the pool law's over the feasible G), the
    constants with both forms of G*, and with a pool its columns (:func:`_pool_columns`)."""
    c = constants_of(sub)
    if "pool" not in sub or not sub["pool"].notna().all():
        return {"predicted_best_G": theory.best_divisor(c, N), **c.to_dict()}
    P = int(sub["pool"].iloc[0])
    predicted = theory.pool_best_divisor(constants_of(sub, POOL_CONSTANTS), N, P)
    return {"predicted_best_G": predicted, **c.to_dict(), **_pool_columns(sub, N)}


def _pool_columns(sub, N: int) -> dict:
    """The extra summary columns of a (N, ...) curve with a pool: the best G on the pool's own
    target, the pool law's best divisor and continuous minimiser, the smallest feasible G and
    the infinite-pool law's best divisor (population constants)."""
    P = int(sub["pool"].iloc[0])
    best_pool, tied_pool = best(sub, "mse_pool" if "mse_pool" in sub else "gap_pool")
    return {
        "pool": P,
        "min_G": max(2, math.ceil(N / P)),
        "empirical_best_G_pool": best_pool,
        "tied_G_pool": ties(tied_pool),
        "infinite_pool_best_G": theory.best_divisor(constants_of(sub, CONSTANTS[:3]), N),
        "g_star_pool": theory.g_star_pool(constants_of(sub, POOL_CONSTANTS), P),
        **{k: float(sub[k].iloc[0]) for k in ("pool_c1", "pool_C2", "pool_C3", "pool_bias_sq")},
    }


def fixed_summary(df):
    """Per N: the empirical best G, the divisors statistically tied with it (95% CIs overlap),
    the predicted best divisor and the constants with both forms of G*."""
    rows = []
    for N, sub in df.groupby("N", sort=False):
        g, tied = best(sub.sort_values("G"), "mse")
        rows.append(
            {"N": int(N), "empirical_best_G": g, "tied_G": ties(tied), **_predicted(sub, int(N))}
        )
    return pd.DataFrame(rows)


def train_summary(df):
    """Per (env, N, schedule): as :func:`fixed_summary` for the final gap, and whether the
    minimum is interior (neither G = 2 nor G = N)."""
    rows = []
    for (env, N, schedule), sub in df.groupby(["env", "N", "schedule"], sort=False):
        sub = sub.sort_values("G")
        g, tied = best(sub, "gap")
        rows.append(
            {
                "env": env,
                "N": int(N),
                "schedule": schedule,
                "empirical_best_G": g,
                "tied_G": ties(tied),
                "interior_minimum": bool(sub["G"].iloc[0] < g < sub["G"].iloc[-1]),
                **_predicted(sub, int(N)),
            }
        )
    return pd.DataFrame(rows)


def budget_summary(df):
    """Per (env, P, N): the best G by rollouts to target (with its ties and share reached), by
    final pass@1 and pass@k, by J at each compute checkpoint, next to the per-step predictions
    (infinite-pool divisor, the pool law's, :func:`~gpolab.theory.groupsize.training_rule`)."""
    rows = []
    for (env, pool, N), sub in df.groupby(["env", "pool", "N"], sort=False):
        sub = sub.sort_values("G")
        N, pool = int(N), int(pool)
        g, tied = best(sub, "rollouts")
        at = sub.set_index("G")
        pop = constants_of(sub, CONSTANTS[:3])
        rule = theory.training_rule(pool_constants(sub), N, pool)
        row = {
            "env": env,
            "pool": pool,
            "N": N,
            "best_G": g,
            "tied_G": ties(tied),
            "tie_share": len(tied) / len(sub),
            "best_reached": float(at.loc[g, "reached"]),
            "best_rollouts": float(at.loc[g, "rollouts"]),
            "worst_rollouts": float(sub["rollouts"].max()),
            "rule_G": rule["G"],
            "rule_in_ties": rule["G"] in tied,
            "infinite_pool_best_G": theory.best_divisor(pop, N),
            "g_star_exact": pop.g_star_exact,
            "min_G": rule["min_G"],
        }
        for value in ("pass1", "passk", *(f"value_c{d}" for d in CHECKPOINTS)):
            bg, bt = best(sub, value, maximize=True)
            row.update({f"best_G_{value}": bg, f"tied_G_{value}": ties(bt)})
        rows.append(row)
    return pd.DataFrame(rows)


def theory_curve(df, train: bool, points: int = 200):
    """The exact fixed-N MSE over continuous G in [2, N] per N (the figure's dashed lines)."""
    rows = []
    if not train:
        for N, sub in df.groupby("N", sort=False):
            c = constants_of(sub)
            for G in np.geomspace(2, int(N), points):
                rows.append({"N": int(N), "G": float(G), "theory_mse": theory.fixed_n_mse(c, N, G)})
    return pd.DataFrame(rows, columns=["N", "G", "theory_mse"])
