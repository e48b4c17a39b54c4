"""The sweep's stored cell keys are pinned: refactoring the config (its env instances, its
TOML form) must give byte-identical keys for every existing config, or stored cells would be
recomputed.  Values recorded from the code before the envs owned their instances; the bandit's
re-pinned when its responses came to be drawn by the alias method (issue 44: its rows' keys carry
how they are drawn, so rows stored from the inverse CDF are computed again; the tree's and the
arithmetic surrogate's keys did not change)."""

from __future__ import annotations

import pytest

from gpolab.kit import experiments
from gpolab.labs.sweep.lab import Config, cell_keys
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
    "bandit": "30 ec5134847c3639ac 4549ce0f94282509",
    "bandit_small": "4 e106e6080b4e0247 d344cdcadc835d7a",
    "bandit_loglinear": "5 bc87ae71e737f0f4 1ee06cb968b098de",
    "bandit_lengths": "10 730cf74fd2dad105 14df9d473ee4b3c9",
    "tree": "16 726f49eecf50a86c a86f7e461f05186e",
    "tree_finite": "2 a03c4e8451506c40 e74b27acaf901b32",
    "arithmetic": "90 12166018cbf7bd3b e0a5b0c161a851fa",
    "arithmetic_gen": "5 c8ee1e0bc43210e8 b682f109a9bdbbb0",
    "dynamic": "10 01b9d100ce11e92f 8acb25e9508c4e3e",
    "arithmetic_mse_vs_G": "90 7443778427eed883 63a50e865db03424",
    "arithmetic_mse_vs_G-quick": "45 603261d1f5cd9be8 0316b649b2b0e04e",
    "arithmetic_strength": "18 e01b2ad979e028c9 732c9b0cf1c8e6e5",
    "arithmetic_strength-quick": "18 bd591ec62d82e1a7 080dada9db290f91",
    "bandit_mse_vs_G": "30 88702b9e7e2c16ae f1025baf41035373",
    "bandit_mse_vs_G-quick": "30 369759647ba3b6c7 bc03feb3b3f4e866",
    "dynamic_sampling": "15 8940daea533fcd40 b6c2a305628e709d",
    "dynamic_sampling-quick": "6 ae23da1447caf492 e41101b2c6024b57",
    "loglinear_mse_vs_G": "30 f41f27fce299974f 628a975953d45edf",
    "loglinear_mse_vs_G-quick": "30 d70d8abb9982af54 e33a5f26eb49245b",
    "loss_agg": "36 c4b1cd6c68066783 cf9633c6b631807a",
    "loss_agg-quick": "24 346caa088b2124e1 b8243064c71c97a4",
    "loss_agg_independent": "36 d4e65115967cd319 cabe502f3791eb90",
    "loss_agg_independent-quick": "24 04ace64230e633ae 4f5f75b02edd5581",
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
