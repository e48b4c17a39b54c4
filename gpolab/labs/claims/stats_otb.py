"""Claims statistics on the token-baseline lab's tables (``gpolab otb``): verl's optimal token
baseline at a small group size against GRPO at a large one."""

from __future__ import annotations

import math

from gpolab.labs.claims.stats import statistic

MATCH = 1.1  # gpolab's threshold for "matches" (the ledger rule) and the control's separation
SEPARATION_SE = 2.0  # the control must clear MATCH by this many SEs, else the test is blind


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
    hi = m.loc[m["otb_small_vs_ref_large"].idxmin()]
    lo = m.loc[m["ref_small_vs_ref_large"].idxmin()]
    ratio = (float(hi["otb_small_vs_ref_large"]), float(hi["otb_small_vs_ref_large_se"]))
    control = (float(lo["ref_small_vs_ref_large"]), float(lo["ref_small_vs_ref_large_se"]))
    blind = not control[0] - SEPARATION_SE * control[1] > MATCH
    if blind or m["otb_small_vs_ref_large"].isna().any():
        ratio = (math.nan, math.nan)
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


STATISTICS = (otb_group_size,)
