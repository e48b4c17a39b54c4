"""The sweep's stored cell keys are pinned: refactoring the config (its env instances, its
TOML form) must give byte-identical keys for every existing config, or stored cells would be
recomputed.  Values recorded from the code before the envs owned their instances."""

from __future__ import annotations

import pytest

from gpolab.labs.sweep.lab import Config, cell_keys
from gpolab.runner import experiments
from tests.labs.keys import fingerprint

CONFIGS = {
    "bandit": dict(),
    "bandit_small": dict(prompts=4, actions=6, G=(2, 4), estimators=("loo", "grpo")),
    "bandit_loglinear": dict(kind="loglinear", dim=4, G=(4,)),
    "bandit_lengths": dict(
        lengths="independent", loss_agg=("seq-mean-token-sum", "token-mean"), G=(4,)
    ),
    "tree": dict(env="tree"),
    "tree_finite": dict(
        env="tree", model="finite", thoughts=8, K=(4,), M=(2,), estimators=("mean-only", "leaf-std")
    ),
    "arithmetic": dict(env="arithmetic"),
    "arithmetic_gen": dict(
        env="arithmetic",
        lengths="generated",
        loss_agg=("token-mean",),
        G=(4,),
        policy=("icl",),
        filler=16,
    ),
    "dynamic": dict(B=4, dynamic_sampling=True, max_draws=4, G=(2, 4)),
}
EXPERIMENTS = (
    "arithmetic_mse_vs_G",
    "arithmetic_strength",
    "bandit_mse_vs_G",
    "dynamic_sampling",
    "loglinear_mse_vs_G",
    "loss_agg",
    "loss_agg_independent",
    "tree_mse_heatmap",
)


PINNED = {
    "bandit": "30 597ade017bb9484e 28f34d781ca62262",
    "bandit_small": "4 8f6c03231412a924 f7ae4523e80fa7e3",
    "bandit_loglinear": "5 c9347d4c4982ed91 2e14a6ff21b495e6",
    "bandit_lengths": "10 13b24436e5bfc962 f8f8b6f6394bc8d3",
    "tree": "16 726f49eecf50a86c a86f7e461f05186e",
    "tree_finite": "2 a03c4e8451506c40 e74b27acaf901b32",
    "arithmetic": "90 12166018cbf7bd3b e0a5b0c161a851fa",
    "arithmetic_gen": "5 c8ee1e0bc43210e8 b682f109a9bdbbb0",
    "dynamic": "10 4348b6ad0d64b34f af35b47230b3604c",
    "arithmetic_mse_vs_G": "90 7443778427eed883 63a50e865db03424",
    "arithmetic_mse_vs_G-quick": "45 603261d1f5cd9be8 0316b649b2b0e04e",
    "arithmetic_strength": "18 e01b2ad979e028c9 732c9b0cf1c8e6e5",
    "arithmetic_strength-quick": "18 bd591ec62d82e1a7 080dada9db290f91",
    "bandit_mse_vs_G": "30 48365bf4b1e01469 ccf463de55cd5f9c",
    "bandit_mse_vs_G-quick": "30 3e95607a1874c5b6 d5ed12b467e02f11",
    "dynamic_sampling": "15 59c22cbc4db6d097 c3e9e1e99c2f8205",
    "dynamic_sampling-quick": "6 7b36921b7338fe4b 5faa1c76abb0ce15",
    "loglinear_mse_vs_G": "30 f5ed68cd08223e96 b9de816586942e5a",
    "loglinear_mse_vs_G-quick": "30 25cdbc963d057e5d ae6617fac3da00ea",
    "loss_agg": "36 7f3a81c49ced2509 fd2caf313b59a276",
    "loss_agg-quick": "24 683b5de522f5ca04 a1afdb7a46945637",
    "loss_agg_independent": "36 1b0c00d503c25353 397e0995cbf00817",
    "loss_agg_independent-quick": "24 7f9fed41d787d1a0 fd020ec2eaa9a8fb",
    "tree_mse_heatmap": "16 4c0b3147520f4d9d 1b74843dc431727d",
    "tree_mse_heatmap-quick": "4 03f0219e98e850b3 350b2f2980fc26f9",
}


@pytest.mark.parametrize("name", CONFIGS)
def test_cell_keys_of_flat_configs_are_pinned(name):
    assert fingerprint(cell_keys(Config(**CONFIGS[name]))) == PINNED[name]


@pytest.mark.parametrize("name", EXPERIMENTS)
@pytest.mark.parametrize("quick", [False, True])
def test_cell_keys_of_shipped_experiments_are_pinned(name, quick):
    exp = experiments.load(experiments.DEFAULT_DIR / f"{name}.toml")
    assert fingerprint(cell_keys(exp.config(quick))) == PINNED[f"{name}{'-quick' * quick}"]
