"""Claims statistics on the float32 lab's tables (``gpolab float32``): NeMo-RL's one-pass float32
leave-one-out std on rewards beyond 0/1 (PR#4161's spike) and PR#4158's triviality mask; verl's
``grpo_vectorized`` variance floor (PR#6348).  Every value is an exact enumeration's (SE 0): a
rule decides by its comparison.
"""

from __future__ import annotations

import math

import numpy as np

from gpolab.labs.claims.stats import exact_statistic

LIMIT = 1.001  # |A| over the exact bound: float32 rounding of a genuine std, never a spike


def _split(spl, grid: str, G: int, single: float, others: float) -> float:
    """The float32 advantage (before the mask) of ``single`` among G − 1 copies of ``others``
    in the splits table; NaN when that split is not in it."""
    row = spl[
        (spl["grid"] == grid)
        & (spl["G"] == G)
        & np.isclose(spl["single"], single)
        & np.isclose(spl["others"], others)
    ]
    return float(row["a_pre"].iloc[0]) if len(row) else math.nan


def _done(grid):
    return grid[grid["computed"].astype(bool)]


def _max(values) -> float:
    """The largest value; NaN when there is none or any is NaN (never a pass)."""
    v = np.asarray(values, float)
    return float(v.max()) if v.size and not np.isnan(v).any() else math.nan


def float_spike(t: dict) -> dict:
    """[NM] PR#4161: a (G−1)-vs-1 split on a non-dyadic reward gives the singleton a float32
    advantage in the thousands under NeMo's 7ea279ab arithmetic (leave-one-out baseline,
    normalize_rewards).  ``a_pr4161``: |A| of a 0 among seven 0.35 (G = 8, PR#4161's reward);
    ``ratio_nondyadic_min``: over the group sizes G ≥ 4 enumerated, the smallest of (the largest
    float32 |A| over the non-dyadic grids' groups, over the exact bound of that grid and G), so a
    spike at every G ≥ 4; ``largest``: the largest float32 |A| anywhere (reported with its grid).
    Control ``control_ratio_max``: the same ratio on the dyadic grids (binary, quarters), where
    the sums are exact: at most :data:`LIMIT`.  The detail gives the exact probability of a spike
    per (grid, G) with every grid value equally likely."""
    grid, spl = _done(t["grid"]), t["splits"]
    nondy = grid[~grid["dyadic"].astype(bool) & (grid["G"] >= 4)]
    per_G = nondy.groupby("G")["ratio_pre"].max()
    dy = grid[grid["dyadic"].astype(bool)]
    top = grid.loc[grid["max_pre"].idxmax()] if len(grid) else None
    spikes = "; ".join(
        f"{r.grid} G = {r.G}: max |A| {r.max_pre:.6g} (bound {r.bound:.4g}, {r.worst}), "
        f"P = {r.p_spike_pre:.3g}"
        for r in grid.itertuples()
        if r.p_spike_pre > 0
    )
    a = _split(spl, "pr4161", 8, 0.0, 0.35)
    b = _split(spl, "pr4158", 8, 0.0, 0.95)
    return exact_statistic(
        f"float32 (numpy, one accumulator): 0 among seven 0.35: A = {a:.6g}; 0 among seven 0.95: "
        f"A = {b:.6g}; spikes (P: every grid value equally likely): {spikes or 'none'}; "
        f"dyadic grids' largest |A| over the bound {_max(dy['ratio_pre']):.6g}",
        a_pr4161=abs(a),
        ratio_nondyadic_min=float(per_G.min()) if len(per_G) else math.nan,
        largest=float(top["max_pre"]) if top is not None else math.nan,
        control_ratio_max=_max(dy["ratio_pre"]),
    )


def float_mask(t: dict) -> dict:
    """[NM] PR#4158: normalizing only where ``(std > 0) & ~is_trivial_distribution`` removes the
    spike: ``post_ratio_max``, the largest float32 |A| after the mask over the exact bound, over
    every (grid, G) enumerated (at most :data:`LIMIT`); ``post_err_max``, the largest
    |A_float32 − A_exact| after the mask over every (G−1)-vs-1 split (the singleton gets r − b,
    as in exact arithmetic).  Control ``control_pre_ratio_max``: the same ratio before the mask,
    on the same groups (at least 100: the test can see a spike)."""
    grid, spl = _done(t["grid"]), t["splits"]
    err = np.abs(spl["a_post"] - spl["a_exact"]).to_numpy(float)
    return exact_statistic(
        f"{len(grid)} (grid, G) enumerated, {len(spl)} splits: after the mask the largest |A| "
        f"over the bound is {_max(grid['ratio_post']):.6g}, before it "
        f"{_max(grid['ratio_pre']):.6g}",
        post_ratio_max=_max(grid["ratio_post"]),
        post_err_max=_max(err),
        control_pre_ratio_max=_max(grid["ratio_pre"]),
    )


def _min(values) -> float:
    """The smallest value; NaN when there is none or any is NaN (never a pass)."""
    v = np.asarray(values, float)
    return float(v.min()) if v.size and not np.isnan(v).any() else math.nan


def _at(verl, grid: str, G: int, col: str) -> float:
    """``col`` of (grid, G) in the verl table; NaN when that row is missing or not enumerated."""
    row = verl[(verl["grid"] == grid) & (verl["G"] == G)]
    return float(row[col].iloc[0]) if len(row) else math.nan


def verl_floor(t: dict) -> dict:
    """[VP] verl PR#6348: ``grpo_vectorized`` at b178a3cd floored the group variance at 1e-6 and
    shrank low-variance groups' advantages by orders of magnitude; the fix (``eps=0.0``, centred
    variance) gives canonical ``grpo``'s values.  On the PR's scores {1.0, 1.00001} (float32) at
    G = 8: ``shrink_pr6348``, the smallest ratio of a group's largest floored |A| to its exact one
    (at most 0.01: a shrink of 100× or more); ``fix_vs_grpo_rel``, the largest |A_fixed − A_grpo|
    over every member of every group, over the exact bound (float32 rounding: at most 1e-3).
    Control ``control_shrink_min``: the same ratio on binary rewards at every G (var₁ ≫ 1e-6: the
    floor never binds, at least 0.999).  The detail gives the PR's G = 2 advantages and the exact
    probability that a group is shrunk by more than 2× per (grid, G)."""
    verl = _done(t["verl"])
    bound = _at(verl, "pr6348", 8, "bound")
    low = "; ".join(
        f"{r.grid} G = {r.G}: shrink {r.shrink:.3g} ({r.worst}), P(> 2×) = {r.p_shrink2:.4g}"
        for r in verl.itertuples()
        if r.p_shrink2 > 0
    )
    return exact_statistic(
        f"float32 (numpy, torch's CPU order): 1.0 and 1.00001 at G = 2: floored "
        f"±{_at(verl, 'pr6348', 2, 'max_floored'):.10g}, fixed "
        f"±{_at(verl, 'pr6348', 2, 'max_fixed'):.10g}, canonical grpo "
        f"±{_at(verl, 'pr6348', 2, 'max_grpo'):.10g}, exact ±{_at(verl, 'pr6348', 2, 'bound'):.10g}"
        f"; shrunk groups (P: every grid value equally likely): {low or 'none'}; largest "
        f"|A_fixed - A_grpo| anywhere {_max(verl['fix_vs_grpo']):.3g}",
        shrink_pr6348=_at(verl, "pr6348", 8, "shrink"),
        fix_vs_grpo_rel=_at(verl, "pr6348", 8, "fix_vs_grpo") / bound,
        control_shrink_min=_min(verl[verl["grid"] == "binary"]["shrink"]),
    )


STATISTICS = (float_spike, float_mask, verl_floor)
