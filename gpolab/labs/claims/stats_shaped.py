"""Claims statistic on the shaped-reward lab's tables (``gpolab shaped``): verl-recipe PR #125's
"phantom gradient" of DAPO's dynamic sampling filtered on ``metric = score`` under a shaped reward.
"""

from __future__ import annotations

import math

from gpolab.labs.claims.stats import statistic


def _one(rows, col: str) -> tuple[float, float]:
    """(value, SE) of ``col`` in the single row of ``rows``; NaN when there is not exactly one
    (a missing cell is never a pass)."""
    if len(rows) != 1:
        return math.nan, math.nan
    r = rows.iloc[0]
    return float(r[col]), float(r[f"{col}_se"])


def _diff(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    """a − b and its SE, the two taken independent (conservative: the metrics share draws and
    their estimates are positively correlated)."""
    return a[0] - b[0], math.hypot(a[1], b[1])


def shaped_phantom(t: dict) -> dict:
    """[verl-recipe PR #125] with ``filter_groups.metric = score`` and a shaped reward, all-fail
    groups (std > 0 from the shaping) survive the filter and GRPO turns their shaping differences
    into a full-size update that does not serve accuracy.  At the largest shaping weight λ of the
    tables: ``score_allfail_share``, the share of the kept update (per-group norms) from all-fail
    groups under ``score``, and ``acc_allfail_share`` under ``acc`` (0: acc drops them);
    ``cos_drop`` = cos(ĝ_acc, ∇J_acc) − cos(ĝ_score, ∇J_acc) at θ₀ (the score-filtered update
    points less toward accuracy); ``acc_gap`` = J_acc after the last training step with ``acc``
    minus with ``score``; ``score_gain`` = J_acc(last) − J_acc(0) with ``score`` (reported: below
    0 is the PR's collapse).  Control at λ = 0 (``control_diff``): the largest |difference| of
    the two metrics' rows (cos, all-fail share, final J_acc), exactly 0 on common draws (SE 0);
    NaN when the tables hold no λ = 0 or no λ > 0."""
    g, tr = t["gradient"], t["training"]
    lams = sorted(float(x) for x in g["shaping_weight"].unique())
    lam = lams[-1] if lams and lams[-1] > 0 else math.nan
    at = g[g["shaping_weight"] == lam]
    share_s = _one(at[at["metric"] == "score"], "allfail_share")
    share_a = _one(at[at["metric"] == "acc"], "allfail_share")
    cos_drop = _diff(
        _one(at[at["metric"] == "acc"], "cos_acc"), _one(at[at["metric"] == "score"], "cos_acc")
    )
    last = tr[(tr["shaping_weight"] == lam) & (tr["step"] == tr["step"].max())]
    first = tr[(tr["shaping_weight"] == lam) & (tr["step"] == 0)]
    end_s, end_a = (
        _one(last[last["metric"] == "score"], "J_acc"),
        _one(last[last["metric"] == "acc"], "J_acc"),
    )
    gap = _diff(end_a, end_s)
    gain = _diff(end_s, _one(first[first["metric"] == "score"], "J_acc"))
    control = _control(g, tr) if 0.0 in lams else math.nan
    steps = int(tr["step"].max()) if len(tr) else 0
    return statistic(
        f"λ = {lam:g}, {int(at['n_seeds'].max()) if len(at) else 0:,} seeds: all-fail share "
        f"of the kept update score {share_s[0]:.3f} ± {share_s[1]:.3f}, acc {share_a[0]:.3f}; "
        f"cos with ∇J_acc acc − score {cos_drop[0]:.3f} ± {cos_drop[1]:.3f}; J_acc after "
        f"{steps} steps acc {end_a[0]:.3f} ± {end_a[1]:.3f}, score {end_s[0]:.3f} ± "
        f"{end_s[1]:.3f} (score's gain from step 0 {gain[0]:+.3f}); λ = 0 control: largest "
        f"|acc − score| {control:.3g}",
        score_allfail_share=share_s,
        acc_allfail_share=(share_a[0], 0.0 if share_a[0] == 0 else share_a[1]),
        cos_drop=cos_drop,
        acc_gap=gap,
        score_gain=gain,
        control_diff=(control, 0.0),
    )


def _control(g, tr) -> float:
    """max |acc − score| over the λ = 0 rows' cos_acc, allfail_share and final J_acc (NaN when a
    metric's row is missing)."""
    g0, last = g[g["shaping_weight"] == 0.0], tr[tr["step"] == tr["step"].max()]
    t0 = last[last["shaping_weight"] == 0.0]
    diffs = []
    for rows, col in ((g0, "cos_acc"), (g0, "allfail_share"), (t0, "J_acc")):
        a, s = rows[rows["metric"] == "acc"], rows[rows["metric"] == "score"]
        if len(a) != 1 or len(s) != 1:
            return math.nan
        diffs.append(abs(float(a[col].iloc[0]) - float(s[col].iloc[0])))
    return max(diffs)


STATISTICS = (shaped_phantom,)
