"""The group-size lab's stored cell keys are pinned: routing it through
:func:`gpolab.kit.store.resume`
(or any refactor of its config) must give byte-identical keys, or stored cells would be
recomputed.  Values recorded from the code before the lab used the store's key builder."""

from __future__ import annotations

import pytest

from gpolab.kit import experiments
from gpolab.labs.groupsize.lab import Config, cell_keys
from tests.labs.keys import fingerprint

CONFIGS = {
    "fixed": dict(),
    "fixed_small": dict(N=(8, 12), seeds=500, prompts=4, actions=6),
    "train": dict(train=True),
    "train_bandit": dict(train=True, env="bandit", bandit_N=(16,), schedules=("decay",)),
    "train_arithmetic": dict(train=True, env="arithmetic", arithmetic_N=(8,), questions=50),
}
EXPERIMENTS = ("groupsize_mse", "groupsize_train")


PINNED = {
    "fixed": "30 28fdab5f3b3251de fcd7eb5afe7acbdc",
    "fixed_small": "8 860c606b5bce1993 4ab55d614b08a642",
    "train": "52 e75b733ed7658842 20fd651e69dd348a",
    "train_bandit": "4 811c0b4a255b8862 ec3df3927bc5b6e0",
    "train_arithmetic": "6 d0aad6e4a4f064e4 16ce0c70b184e8bf",
    "groupsize_mse": "30 28fdab5f3b3251de fcd7eb5afe7acbdc",
    "groupsize_mse-quick": "30 d7439ee412269af9 2f65999f11d301f1",
    "groupsize_train": "52 e75b733ed7658842 20fd651e69dd348a",
    "groupsize_train-quick": "20 0fb9cd39fce19d46 14e3f760ea904b16",
}


@pytest.mark.parametrize("name", CONFIGS)
def test_cell_keys_of_configs_are_pinned(name):
    assert fingerprint(cell_keys(Config(**CONFIGS[name]))) == PINNED[name]


@pytest.mark.parametrize("name", EXPERIMENTS)
@pytest.mark.parametrize("quick", [False, True])
def test_cell_keys_of_shipped_experiments_are_pinned(name, quick):
    exp = experiments.load(experiments.DEFAULT_DIR / f"{name}.toml")
    assert fingerprint(cell_keys(exp.config(quick))) == PINNED[f"{name}{'-quick' * quick}"]
