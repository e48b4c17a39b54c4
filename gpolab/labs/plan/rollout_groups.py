"""Per-group summaries of a rollout log (:class:`gpolab.labs.plan.rollouts.Log`): one row per
group, and
whether the rewards are binary."""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["groups", "binary_levels"]


def binary_levels(log) -> tuple[float, float] | None:
    """(low, high) when the rewards take at most two distinct values, None when graded.

    Rewards within {0, 1} give (0.0, 1.0), also when only one of them occurs. Two other values
    give (low, high). One other value v gives (v, v): then it counts as a success when v > 0.
    """
    values = np.unique(log.frame["reward"].to_numpy(dtype=float))
    if len(values) > 2:
        return None
    if set(values.tolist()) <= {0.0, 1.0}:
        return (0.0, 1.0)
    return (float(values[0]), float(values[-1]))


def _group_mean(x: np.ndarray, starts: np.ndarray) -> np.ndarray:
    ok = ~np.isnan(x)
    count = np.add.reduceat(ok.astype(float), starts)
    total = np.add.reduceat(np.where(ok, x, 0.0), starts)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def groups(log) -> pd.DataFrame:
    """One row per group: step, group, prompt, n, successes, mean, std (ddof 0), degenerate,
    length_mean, proxy_mean. successes = number of rewards at the high binary level (see
    :func:`binary_levels`; NaN when graded); degenerate = all rewards of the group equal."""
    f = log.frame
    order = np.argsort(f["group"].to_numpy(), kind="stable")
    g, r = f["group"].to_numpy()[order], f["reward"].to_numpy(dtype=float)[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]]) if len(g) else np.zeros(0, int)
    n = np.diff(np.r_[starts, len(g)])
    if len(g) == 0:
        cols = "step group prompt n successes mean std degenerate length_mean proxy_mean"
        return pd.DataFrame(columns=cols.split())
    mean = np.add.reduceat(r, starts) / n
    std = np.sqrt(np.add.reduceat((r - np.repeat(mean, n)) ** 2, starts) / n)
    degenerate = np.minimum.reduceat(r, starts) == np.maximum.reduceat(r, starts)
    std[degenerate] = 0.0
    levels = binary_levels(log)
    if levels is None:
        successes = np.full(len(n), np.nan)
    elif levels[0] < levels[1]:
        successes = np.add.reduceat((r == levels[1]).astype(float), starts)
    else:
        successes = n * float(levels[0] > 0)
    first = order[starts]
    return pd.DataFrame(
        {
            "step": f["step"].to_numpy()[first],
            "group": g[starts],
            "prompt": f["prompt"].to_numpy()[first],
            "n": n.astype(np.int64),
            "successes": successes.astype(float),
            "mean": mean,
            "std": std,
            "degenerate": degenerate,
            "length_mean": _group_mean(f["length"].to_numpy(dtype=float)[order], starts),
            "proxy_mean": _group_mean(f["proxy"].to_numpy(dtype=float)[order], starts),
        }
    )
