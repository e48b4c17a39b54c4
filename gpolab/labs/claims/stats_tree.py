"""Claims statistics on the tree lab's tables (``gpolab tree``): which split of a leaf budget
wins, the variance floor and decay in M, and the overlap boundary.
"""

from __future__ import annotations

import math

import numpy as np

from gpolab.labs.claims.stats import exact_statistic, ratio_and_se, statistic

THINK_RATIOS = (0.0, 0.25, 1.0, 4.0)  # L_think / L_answer at which tree_branching ranks splits


def _full_budgets(df) -> list[int]:
    """The leaf budgets whose splits K·M (K >= 2) the grid holds in full (at least three)."""
    budgets = []
    for n, rows in df.groupby("leaves"):
        want = {(k, n // k) for k in range(2, n + 1) if n % k == 0}
        if len(want) >= 3 and want <= set(zip(rows["K"], rows["M"], strict=True)):
            budgets.append(int(n))
    return budgets


def _winner(rows) -> str:
    """``tree`` when the recommended split has M > 1 and no flat split ties with it, ``flat``
    in the mirror case, else ``tie``."""
    best, tied = rows[rows["recommended"]].iloc[0], rows[rows["tie"]]
    if best["M"] > 1 and not (tied["M"] == 1).any():
        return "tree"
    return "flat" if best["M"] == 1 and not (tied["M"] > 1).any() else "tie"


def tree_branching(t: dict) -> dict:
    """Over every leaf budget whose splits K·M (K >= 2) the grid holds in full (at least three)
    and over L_think/L_answer in :data:`THINK_RATIOS`: the best split by tokens per effective
    thought (:func:`gpolab.labs.tree.lab.rank`).  A setting is a tree win when the best split has
    M > 1 and no flat split (M = 1) ties with it, a flat win in the mirror case (counts: SE 0).
    ``tree_wins_think_ge_answer`` counts the settings with L_think >= L_answer and at least 16
    leaves, ``flat_wins_no_think`` those with L_think = 0 (every budget)."""

    from gpolab.labs.tree import lab as tree  # defers jax

    df = t["results"].assign(leaves=lambda d: d["K"] * d["M"])
    budgets = _full_budgets(df)
    if not budgets:
        raise KeyError("no leaf budget whose splits the grid holds in full")
    pays = {}  # think ratio → the winner at each budget
    for r in THINK_RATIOS:
        sub = df[df["leaves"].isin(budgets)].assign(
            budget=lambda d: d["leaves"], think_len=r, answer_len=1.0
        )
        ranked = tree.rank(sub.assign(cost=tree.cost(sub["K"], sub["M"], r, 1.0)))
        pays[r] = [_winner(rows) for _, rows in ranked.groupby("budget")]
    every = [w for r in THINK_RATIOS for w in pays[r]]
    long = [(n, w) for r in THINK_RATIOS if r >= 1 for n, w in zip(budgets, pays[r], strict=True)]
    values = {
        "tree_wins": every.count("tree"),
        "flat_wins": every.count("flat"),
        "n_settings": len(budgets) * len(THINK_RATIOS),
        "tree_wins_think_ge_answer": sum(w == "tree" for n, w in long if n >= 16),
        "n_think_ge_answer": sum(n >= 16 for n, _ in long),
        "flat_wins_no_think": pays[0.0].count("flat"),
        "n_no_think": len(pays[0.0]),
    }
    parts = [
        f"L_think/L_answer = {r:g}: "
        + ", ".join(f"{n} leaves {w}" for n, w in zip(budgets, pays[r], strict=True))
        for r in THINK_RATIOS
    ]
    detail = (
        "winner per (leaf budget, L_think/L_answer), a 95% tie with the other kind counted as a "
        f"tie (counts of settings: SE 0): {'; '.join(parts)}; "
        f"{int(np.sum(df['theory_exact'].astype(bool)))} of {len(df)} cells ranked on exact corr"
    )
    return exact_statistic(detail, **values)


def tree_floor(t: dict) -> dict:
    df = t["results"]
    K = int(df["K"].max())
    row = df[df["K"] == K].sort_values("M").iloc[0]
    exact = row["theory_variance"] if np.isfinite(row["theory_variance"]) else row["theory_floor"]
    z = float((row["variance"] - exact) / row["variance_se"])
    gap = float(abs(row["variance"] - row["theory_floor"]) / row["theory_floor"])
    return statistic(
        f"K = {K}, M = {int(row['M'])}: variance {row['variance']:.4g} vs exact "
        f"{exact:.4g} (z = {z:.2f}); the K → ∞ floor is {row['theory_floor']:.4g} "
        f"({100 * gap:.1f}% away)",
        floor_abs_z=(abs(z), 1.0),
        rel_gap_to_floor=(gap, float(row["variance_se"] / row["theory_floor"])),
    )


def tree_decay(t: dict) -> dict:
    """At the largest K: steps in M where the variance does not fall 2 SE clear (a count: SE 0)
    and the last-over-first ratio (delta-method SE)."""
    df = t["results"]
    K = int(df["K"].max())
    sub = df[df["K"] == K].sort_values("M")
    v, s = sub["variance"].to_numpy(), sub["variance_se"].to_numpy()
    flat = int(np.sum(v[:-1] - v[1:] <= 2 * np.hypot(s[:-1], s[1:])))
    ratio = ratio_and_se(v[-1], s[-1], v[0], s[0])
    return statistic(
        f"K = {K}: variance {v[0]:.3g} at M = {int(sub['M'].iloc[0])} → "
        f"{v[-1]:.3g} at M = {int(sub['M'].iloc[-1])}; {flat} of {len(v) - 1} steps "
        "not 2 SE clear",
        non_decreasing_steps=(flat, 0.0),
        last_over_first=ratio,
    )


def tree_overlap_boundary(t: dict) -> dict:
    """Thoughts that share features (the loglinear model at one leaf budget): where the best split
    of the whole budget has M > 1, over the overlap ρ and L_think/L_answer grids of
    :func:`gpolab.theory.tree_overlap.winners`.  ``violations``: grid points above a ratio's
    boundary where branching does not pay; ``moving_ratios``: think ratios whose boundary lies
    strictly inside (0, 1) (the overlap decides); ``flat_when_free``: overlaps at which flat
    sampling wins when thinking is free; counts (SE 0).  ``joint_p``: the six Monte Carlo
    moments against the exact ones (per moment Σ z² over the cells against χ², Bonferroni over
    the moments, which share draws; a p-value: SE 0)."""
    from scipy.stats import chi2

    from gpolab.theory import tree_overlap as ov

    df = t["results"]
    tt, c = float(df["ov_target_sq"].iloc[0]), float(df["ov_strategy_dot"].iloc[0])
    wins = ov.winners(df, tt, c)
    b = ov.boundary(wins)
    inside = [r for r, rho in b["rho_star"].items() if 0 < rho < 1]
    free = wins[wins["ratio"] == 0]
    ps = []  # per moment: Σ z² over the cells (independent streams) ~ χ²; Bonferroni over moments
    for m in ov.MOMENTS:
        z = ((df[f"ov_{m}"] - df[f"theory_ov_{m}"]) / df[f"ov_{m}_se"]).to_numpy(np.float64)
        z = z[np.isfinite(df[f"theory_ov_{m}"].to_numpy(np.float64))]
        ps.append(float(chi2.sf(np.sum(z**2), len(z))) if np.all(np.isfinite(z)) else math.nan)
    p = min(1.0, len(ps) * min(ps)) if not any(map(math.isnan, ps)) else math.nan
    stars = ", ".join(
        f"{r:.3g}: {'never' if math.isnan(v) else f'ρ ≥ {v:g}'}" for r, v in b["rho_star"].items()
    )
    return exact_statistic(
        f"{int(df['K'].iloc[0] * df['M'].iloc[0])} leaves; branching (M > 1) pays, "
        f"by L_think/L_answer: {stars}; {b['violations']} grid points above a "
        f"boundary where it stops paying; source {wins['source'].iloc[0]}; the six "
        f"moments against exact theory: joint p = {p:.2g}",
        violations=b["violations"],
        moving_ratios=len(inside),
        flat_when_free=int((free["pays"] == "flat").sum()),
        n_overlaps=len(free),
        joint_p=p,
    )


STATISTICS = (tree_branching, tree_floor, tree_decay, tree_overlap_boundary)
