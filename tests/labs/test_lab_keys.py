"""The stored cell keys of the tree, chi2, curvature and stdnorm labs are pinned: routing them
through ``store.resume`` / ``store.cell_key``, declaring their env settings once (borrowed from
the env's Instance) and renaming flags must give byte-identical keys, or stored cells would be
recomputed.  Values recorded from the code before those changes (issue 27, phase 2)."""

from __future__ import annotations

import pytest

from gpolab import configs
from gpolab.kit import experiments
from gpolab.labs.chi2 import lab as chi2
from gpolab.labs.curvature import lab as curvature
from gpolab.labs.stdnorm import lab as stdnorm
from gpolab.labs.tree import lab as tree
from tests.labs.keys import fingerprint


def stdnorm_keys(cfg) -> list[str]:
    train_keys, bias_keys = stdnorm.cell_keys(cfg)
    return [*train_keys, *bias_keys]


LABS = {
    "tree": (tree.Config, tree.cell_keys),
    "chi2": (chi2.Config, chi2.cell_keys),
    "curvature": (curvature.Config, curvature.cell_keys),
    "stdnorm": (stdnorm.Config, stdnorm_keys),
}
PINNED = {
    "tree": "20 7feaf1f66c75821f 4e74a7f048499217",
    "tree-quick": "12 3ef6074ed415d633 666f2471aa3b4e0e",
    "chi2": "5 523aa908e6c5adba 1885909187758b98",
    "chi2-quick": "5 a94ed7bc4331c1f2 591c73f17223ed5b",
    "curvature": "1 38e6e2d9b90503f9 e83348f49ff82844",
    "curvature-quick": "1 d825e0604ddcc871 298ebdd74d573c2f",
    "stdnorm": "105 754c2ca0ad747ab5 015e01120c41c4a2",
    "stdnorm-quick": "34 b55352a84daada0a b98379a6a0b150e5",
}
EXPERIMENTS = {
    "tree_branching": "36 e849e51ccfaf3607 43b9d9598752c0ba",
    "tree_branching-quick": "16 f256109446945b4c 28ec791c9885dde6",
    "tree_budget": "4 32a87bf197f5dcaa 8232b5d388558814",
    "tree_budget-quick": "4 57b376fba388545e 6b3f725076d9438d",
    "tree_lab": "20 7feaf1f66c75821f 4e74a7f048499217",
    "tree_lab-quick": "9 3ef6074ed415d633 0d68067517dfbdfd",
    "chi2": "5 523aa908e6c5adba 1885909187758b98",
    "chi2-quick": "5 4db34f07fc093014 d9a01ede863d87cc",
    "curvature": "1 38e6e2d9b90503f9 e83348f49ff82844",
    "curvature-quick": "1 d825e0604ddcc871 298ebdd74d573c2f",
    "train_gain": "105 754c2ca0ad747ab5 015e01120c41c4a2",
    "train_gain-quick": "34 b55352a84daada0a b98379a6a0b150e5",
}
# non-default settings, in today's spelling (the old spelling: test_old_names_give_the_same_keys)
OTHERS = {
    "tree": (
        dict(model="finite", thoughts=8, instance_seed=3, beta_a=1.5, beta_b=2.0, K=(4,), M=(2,)),
        "1 5cab6962f87a9165 80775b3c80e9a7b0",
    ),
    "chi2": (
        dict(instance_seed=2, estimator=("loo", "grpo")),
        "2 42a1ed1f85919bab 7a7fc7162d23bf6e",
    ),
    "curvature": (dict(prompts=8, rho=0.3, bound=2.0), "1 2a893fdcccbd8f89 9fc887330e5063f5"),
    "stdnorm": (dict(prompts=8, align=0.5, block=4), "34 968121ab4bc0ec54 f47c9cdebbd93f55"),
}


@pytest.mark.parametrize("lab", LABS)
@pytest.mark.parametrize("quick", [False, True])
def test_default_and_quick_keys_are_pinned(lab, quick):
    cls, keys = LABS[lab]
    assert fingerprint(keys(configs.resolve(cls, quick=quick))) == PINNED[lab + "-quick" * quick]


@pytest.mark.parametrize("name", sorted({n.removesuffix("-quick") for n in EXPERIMENTS}))
@pytest.mark.parametrize("quick", [False, True])
def test_shipped_experiments_keys_are_pinned(name, quick):
    exp = experiments.load(experiments.DEFAULT_DIR / f"{name}.toml")
    keys = LABS[exp.lab][1]
    assert fingerprint(keys(exp.config(quick))) == EXPERIMENTS[name + "-quick" * quick]


@pytest.mark.parametrize("lab", OTHERS)
def test_other_settings_keys_are_pinned(lab):
    cls, keys = LABS[lab]
    typed, pinned = OTHERS[lab]
    quick = lab == "stdnorm"
    assert fingerprint(keys(configs.resolve(cls, typed=typed, quick=quick))) == pinned


def test_tree_budget_keys_leave_out_the_cost_model():
    cfg = configs.resolve(tree.Config, typed=dict(leaves=12, think_len=10.0, variant="mean-only"))
    assert fingerprint(tree.cell_keys(cfg)) == "5 9a9fc1de1460280b 0aee3de7c8152709"
