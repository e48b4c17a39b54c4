"""The float32 claims' statistics (NM-spike, NM-mask, VP-floor) on small synthetic tables: each
rule decides as stated, its control fails where the tables are built to make it fail, and a NaN
(a (grid, G) not enumerated, a split missing) is never a pass.  Their run on the lab's own
tables: below, and the slow claims check."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from gpolab.labs.claims import lab as claims
from gpolab.labs.claims import stats_float

LEDGER = {c["id"]: c for c in claims.load(claims.LEDGER)}


def _grid(spike=500.0, dyadic_ratio=1.0, post=1.0):
    """(grid, G) rows: binary (dyadic) and pr4161 (not), G = 4 and 8, with the float32 largest
    |A| over the bound ``spike`` on pr4161, ``dyadic_ratio`` on binary, ``post`` after the mask."""
    rows = []
    for grid, dy, ratio in (("binary", True, dyadic_ratio), ("pr4161", False, spike)):
        for G in (4, 8):
            bound = 2.0
            rows.append(
                dict(
                    grid=grid,
                    G=G,
                    dyadic=dy,
                    computed=True,
                    bound=bound,
                    max_pre=ratio * bound,
                    max_post=post * bound,
                    ratio_pre=ratio,
                    ratio_post=post,
                    p_spike_pre=0.01 if ratio > 1.001 else 0.0,
                    p_spike_post=0.01 if post > 1.001 else 0.0,
                    p_residue=0.01,
                    worst="0×1, 0.35×7",
                    p_total=1.0,
                )
            )
    return pd.DataFrame(rows)


def _splits(a=-2154.06, post=-0.35):
    """Two (G−1)-vs-1 splits: a 0 among seven 0.35 (float32 ``a`` before the mask, ``post``
    after, exactly −0.35) and a 0 among seven 0.95."""
    pr4161 = dict(grid="pr4161", single=0.0, others=0.35, a_pre=a, a_post=post, a_exact=-0.35)
    pr4158 = dict(grid="pr4158", single=0.0, others=0.95, a_pre=-2075.39, a_post=-0.95)
    return pd.DataFrame([pr4161, pr4158 | dict(a_exact=-0.95)]).assign(G=8)


def _verdict(claim_id, tables):
    c = LEDGER[claim_id]
    v = dict(claims.STATISTICS[c["statistic"]](tables))
    v.pop("detail")
    se = v.pop("se")
    assert all(s == 0 for s in se.values())  # exact enumeration: every value exact
    return claims.verdict(c, v, se), v


@pytest.mark.parametrize(
    "grid, splits, verdict",
    [
        (_grid(), _splits(), "reproduced"),
        (_grid(spike=1.0), _splits(a=-0.35), "partly"),  # no spike: its rules fail, control holds
        (_grid(spike=1.0, dyadic_ratio=50.0), _splits(a=-0.35), "not reproduced"),
        (_grid(dyadic_ratio=50.0), _splits(), "partly"),  # the control fails
    ],
)
def test_nm_spike_rules(grid, splits, verdict):
    assert _verdict("NM-spike", {"grid": grid, "splits": splits})[0] == verdict


def test_nm_spike_needs_a_spike_at_every_G():
    g = _grid()
    g.loc[(g["grid"] == "pr4161") & (g["G"] == 4), "ratio_pre"] = 1.0  # G = 4: none
    v, values = _verdict("NM-spike", {"grid": g, "splits": _splits()})
    assert v == "partly" and values["ratio_nondyadic_min"] == 1.0 < stats_float.LIMIT


def test_a_missing_split_or_a_nan_is_never_a_pass():
    v, values = _verdict("NM-spike", {"grid": _grid(), "splits": _splits().iloc[1:]})
    assert math.isnan(values["a_pr4161"]) and v == "inconclusive"
    g = _grid()
    g.loc[0, "ratio_post"] = math.nan
    v, values = _verdict("NM-mask", {"grid": g, "splits": _splits()})
    assert math.isnan(values["post_ratio_max"]) and v == "inconclusive"


def test_a_row_not_enumerated_is_left_out_not_read_as_nan():
    g = _grid()
    extra = g.iloc[[0]].assign(G=16, computed=False, ratio_pre=math.nan, ratio_post=math.nan)
    tables = {"grid": pd.concat([g, extra], ignore_index=True), "splits": _splits()}
    assert _verdict("NM-spike", tables)[0] == "reproduced"
    assert _verdict("NM-mask", tables)[0] == "reproduced"


@pytest.mark.parametrize(
    "grid, splits, verdict",
    [
        (_grid(), _splits(), "reproduced"),
        (_grid(post=3.0), _splits(post=-0.2), "partly"),  # the mask leaves a spike
        (_grid(spike=1.0, post=3.0), _splits(post=-0.2), "not reproduced"),
        (_grid(spike=1.0), _splits(), "partly"),  # control: no spike to remove
    ],
)
def test_nm_mask_rules(grid, splits, verdict):
    assert _verdict("NM-mask", {"grid": grid, "splits": splits})[0] == verdict


def test_on_the_labs_own_tables_both_claims_are_reproduced():
    """The lab at small sizes (every grid that spikes at G = 4 and 8): both verdicts."""
    from gpolab.labs.float32 import lab

    cfg = lab.Config(grids=("binary", "quarters", "tenths", "pr4161", "pr4158"), G=(3, 4, 8))
    tables = lab.run(cfg)
    assert _verdict("NM-spike", tables)[0] == "reproduced"
    assert _verdict("NM-mask", tables)[0] == "reproduced"


def _verl(shrink=0.0046, fix=0.0, control=1.0):
    """verl rows: the PR's scores at G = 2 and 8 (bound 0.62, 1.93) with the smallest floored over
    exact ratio ``shrink`` and |A_fixed − A_grpo| ``fix`` (over the bound), binary at G = 2 and 8
    with ratio ``control``."""
    rows = []
    for grid, ratio in (("pr6348", shrink), ("binary", control)):
        for G, bound in ((2, 0.62), (8, 1.93)):
            rows.append(
                dict(
                    grid=grid,
                    G=G,
                    computed=True,
                    bound=bound,
                    max_floored=ratio * bound,
                    max_fixed=bound,
                    max_grpo=bound,
                    shrink=ratio,
                    p_shrink2=0.99 if ratio < 0.5 else 0.0,
                    fix_vs_grpo=fix * bound,
                    worst="1×1, 1.00001×7",
                    p_total=1.0,
                )
            )
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    "verl, verdict",
    [
        (_verl(), "reproduced"),
        (_verl(fix=0.01), "partly"),  # the fix leaves a difference from canonical grpo
        (_verl(shrink=1.0), "partly"),  # no shrink: its rule fails, the others hold
        (_verl(shrink=0.02), "partly"),  # a shrink of 50×: not orders of magnitude
        (_verl(shrink=1.0, fix=0.01), "partly"),  # the control alone holds
        (_verl(shrink=1.0, fix=0.01, control=0.004), "not reproduced"),
        (_verl(control=0.004), "partly"),  # the control fails: the floor binds on binary rewards
    ],
)
def test_vp_floor_rules(verl, verdict):
    assert _verdict("VP-floor", {"verl": verl})[0] == verdict


def test_vp_floor_a_missing_or_unenumerated_row_is_never_a_pass():
    v = _verl()
    v, values = _verdict("VP-floor", {"verl": v[(v["grid"] != "pr6348") | (v["G"] != 8)]})
    assert math.isnan(values["shrink_pr6348"]) and v == "inconclusive"
    v = _verl()
    v.loc[(v["grid"] == "pr6348") & (v["G"] == 8), "computed"] = False
    assert math.isnan(_verdict("VP-floor", {"verl": v})[1]["fix_vs_grpo_rel"])
    v = _verl()
    v.loc[v["grid"] == "binary", "shrink"] = math.nan
    v, values = _verdict("VP-floor", {"verl": v})
    assert math.isnan(values["control_shrink_min"]) and v == "inconclusive"


def test_vp_floor_on_the_labs_own_tables_is_reproduced():
    from gpolab.labs.float32 import lab

    cfg = lab.Config(grids=("binary",), verl_grids=("pr6348", "binary"), G=(2, 8))
    verdict, values = _verdict("VP-floor", lab.run(cfg))
    assert verdict == "reproduced" and values["shrink_pr6348"] < 0.005
