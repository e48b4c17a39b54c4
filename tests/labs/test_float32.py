"""The float32 lab: its tables (every column documented on docs/tables.md), a (grid, G) beyond
``max_compositions`` said so rather than dropped, its settings checked before anything runs,
verl's variance floor (PR#6348) on its own grids."""

from __future__ import annotations

import math

import pytest

from gpolab.labs.float32 import lab
from gpolab.validate import ConfigError
from tests.test_docs_tables import assert_documented, saved


def test_the_tables_columns_are_documented(tmp_path):
    cfg = lab.Config(grids=("binary", "pr4161"), verl_grids=("pr6348",), G=(2, 8))
    assert_documented(lab.NAME, saved(lab, cfg, tmp_path))


def test_the_spike_and_its_mask_on_pr4161s_grid():
    t = lab.run(lab.Config(grids=("pr4161", "binary"), G=(3, 8)))
    g = t["grid"].set_index(["grid", "G"])
    assert g.loc[("pr4161", 8), "max_pre"] > 1000 and g.loc[("pr4161", 8), "ratio_pre"] > 100
    assert g.loc[("pr4161", 8), "ratio_post"] < 1.001
    assert g.loc[("pr4161", 8), "p_spike_pre"] > 0 == g.loc[("pr4161", 8), "p_spike_post"]
    assert g.loc[("pr4161", 3), "ratio_pre"] < 1.001  # two equal peers: their mean is exact
    assert (g.loc["binary", "ratio_pre"] < 1.001).all()
    assert (g["p_total"] - 1).abs().max() < 1e-12
    spl = t["splits"]
    assert len(spl) == 2 * (6 + 2)  # ordered pairs of distinct values, per G


def test_a_grid_beyond_max_compositions_is_a_row_saying_so():
    cfg = lab.Config(grids=("tenths",), verl_grids=("tenths",), G=(2, 8), max_compositions=1000)
    t = lab.run(cfg)
    for table, col in (("grid", "max_pre"), ("verl", "max_floored")):
        g = t[table].set_index("G")
        assert bool(g.loc[2, "computed"]) and not bool(g.loc[8, "computed"])
        assert math.isnan(g.loc[8, col]) and g.loc[8, "compositions"] == 43758
    assert lab.report(cfg, t).count("not enumerated (more than 1,000 groups): tenths G = 8") == 2


def test_verls_floor_shrinks_the_prs_groups_and_spares_binary_ones():
    """verl PR#6348's scores: every mixed group's floored |A| is under 1% of the exact one at
    G = 8, the fix equal to canonical grpo; binary rewards: no shrink (var₁ ≥ 1/G ≫ 1e-6)."""
    t = lab.run(lab.Config(grids=("binary",), verl_grids=("pr6348", "lowvar", "binary"), G=(2, 8)))
    v = t["verl"].set_index(["grid", "G"])
    pr = v.loc[("pr6348", 8)]
    assert pr["shrink"] < 0.01 and pr["max_floored"] < 0.01 * pr["bound"]
    assert pr["p_shrink2"] == pytest.approx(1 - 2 / 2**8)  # all but the two all-equal groups
    assert pr["fix_vs_grpo"] < 1e-3 * pr["bound"]
    assert v.loc[("pr6348", 2), "max_floored"] == 0.005001788027584553  # the PR's printed value
    assert 0.1 < v.loc[("lowvar", 8), "shrink"] < 0.5
    assert (v.loc["binary", "shrink"] > 0.999).all() and (v.loc["binary", "p_shrink2"] == 0).all()
    assert (v["p_total"] - 1).abs().max() < 1e-12


@pytest.mark.parametrize(
    "settings, field",
    [
        (dict(grids=("thirds",)), "grids"),
        (dict(grids=()), "grids"),
        (dict(verl_grids=("thirds",)), "verl_grids"),
        (dict(verl_grids=()), "verl_grids"),
        (dict(G=(1, 4)), "G"),
        (dict(max_compositions=0), "max_compositions"),
    ],
)
def test_bad_settings_name_the_field(settings, field):
    with pytest.raises(ConfigError, match=field):
        lab.Config(**settings).validate()
