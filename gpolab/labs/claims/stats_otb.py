"""Claims statistics on the token-baseline lab's tables (``gpolab otb``): verl's optimal token
baseline at a small group size against GRPO at a large one."""

from __future__ import annotations

import math

from gpolab.labs.claims.stats import statistic

MATCH = 1.1  # gpolab's threshold for "matches" (the ledger rule) and the control's separation
SEPARATION_SE = 2.0  # the control must clear MATCH by this many SEs, else the test is blind


def _best_against_control(m, ratio: str, control: str) -> tuple[tuple, tuple, bool]:
    """(the smallest ``ratio`` over the rows with its SE, the smallest ``control`` with its SE,
    blind): blind when the control does not clear :data:`MATCH` by :data:`SEPARATION_SE` SEs;
    the ratio is NaN when blind or when any row has none (no pass on a missing row)."""
    if m.empty or m[ratio].isna().all() or m[control].isna().all():
        return (math.nan, math.nan), (math.nan, math.nan), True
    hi, lo = m.loc[m[ratio].idxmin()], m.loc[m[control].idxmin()]
    best = (float(hi[ratio]), float(hi[f"{ratio}_se"]))
    ctrl = (float(lo[control]), float(lo[f"{control}_se"]))
    blind = not ctrl[0] - SEPARATION_SE * ctrl[1] > MATCH
    if blind or m[ratio].isna().any():
        best = (math.nan, math.nan)
    return best, ctrl, blind


def otb_group_size(t: dict) -> dict:
    """[OTB] "matches the performance of large group sizes (N=32) with only N=4" (the abstract),
    on the gradient one step takes: per policy, OTB's best-scale MSE (the direction's error,
    unchanged by verl's token-mean divisor) at G = ``small`` over ``reference``'s (verl/grpo) at
    G = ``large``; ``ratio_best`` is the smallest over the policies (OTB's most favourable one),
    with its SE (the ledger rule: ≤ 1.1 matches).  The control: the same ratio for the reference
    against itself (``control_min``, the smallest over policies) must exceed 1.1 by 2 SE; where it
    does not, the experiment cannot tell G = small from G = large and ``ratio_best`` is NaN
    (inconclusive)."""
    m = t["match"]
    if m.empty:
        return statistic("no rows", ratio_best=(math.nan, math.nan))
    ratio, control, blind = _best_against_control(
        m, "otb_small_vs_ref_large", "ref_small_vs_ref_large"
    )
    small, large, ref = int(m["small"].iloc[0]), int(m["large"].iloc[0]), m["reference"].iloc[0]
    per = "; ".join(
        f"{r.policy} {r.otb_small_vs_ref_large:.3g} ± {r.otb_small_vs_ref_large_se:.2g} "
        f"(OTB / {ref} at G = {small}: {r.otb_vs_ref_small:.3g} ± {r.otb_vs_ref_small_se:.2g}; "
        f"at G = {large}: {r.otb_vs_ref_large:.3g} ± {r.otb_vs_ref_large_se:.2g})"
        for r in m.itertuples()
    )
    return statistic(
        f"best-scale MSE of verl/otb at G = {small} over {ref} at G = {large}, per policy: "
        f"{per}; control {ref} at G = {small} over G = {large}: smallest {control[0]:.3g} ± "
        f"{control[1]:.2g}" + (" (cannot separate the sizes: NaN)" if blind else ""),
        ratio_best=ratio,
        control_min=control,
    )


def otb_train(t: dict) -> dict:
    """[OTB] the same sentence on its own measure, training at equal steps (``train_match``): per
    (policy, lr), the gain J_T − J_0 of ``reference`` at G = ``large`` over OTB's at ``small``
    (Adam, same start and steps; the ledger rule: ≤ 1.1 matches); ``ratio_best`` the smallest
    over the rows (OTB's most favourable policy and learning rate).  The control: the
    reference's own gain at ``large`` over ``small`` (``control_min``, the smallest over the
    rows) must exceed 1.1 by 2 SE, else the runs cannot tell the sizes apart and ``ratio_best``
    is NaN (inconclusive)."""
    m = t["train_match"]
    if m.empty:
        return statistic("no training rows", ratio_best=(math.nan, math.nan))
    ratio, control, blind = _best_against_control(
        m, "ref_large_vs_otb_small", "ref_large_vs_ref_small"
    )
    small, large, ref = int(m["small"].iloc[0]), int(m["large"].iloc[0]), m["reference"].iloc[0]
    per = "; ".join(
        f"{r.policy} lr {r.lr:g}: {r.ref_large_vs_otb_small:.3g} ± "
        f"{r.ref_large_vs_otb_small_se:.2g} (gains: OTB {r.gain_otb_small:.3f}, "
        f"{ref} G = {small} {r.gain_ref_small:.3f}, "
        f"G = {large} {r.gain_ref_large:.3f})"
        for r in m.itertuples()
    )
    return statistic(
        f"gain in exact J after {int(m['steps'].iloc[0])} Adam steps of {ref} at G = {large} over "
        f"verl/otb at G = {small}, per policy and lr: {per}; control {ref} G = {large} over "
        f"G = {small}: smallest {control[0]:.3g} ± {control[1]:.2g}"
        + (" (cannot separate the sizes: NaN)" if blind else ""),
        ratio_best=ratio,
        control_min=control,
    )


STATISTICS = (otb_group_size, otb_train)
