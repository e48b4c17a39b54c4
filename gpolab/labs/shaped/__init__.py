"""``gpolab shaped``: the shaped-reward lab (:mod:`gpolab.labs.shaped.lab`), DAPO dynamic sampling
with ``filter_groups.metric`` acc against score under a shaped reward (verl-recipe PR #125)."""

from __future__ import annotations

from gpolab.kit.command import lab_command

# shown at the end of --help; tests/runner/test_help_examples.py parses and resolves each
EXAMPLES = ("gpolab shaped --quick", "gpolab shaped --shaping-weight 0,0.5 --quick")

register = lab_command(
    "shaped",
    help="DAPO dynamic sampling under a shaped reward: filter metric acc vs score",
    description="verl filter_groups with metric acc or score on the shaped bandit (score = "
    "correct + lambda * shaping): the kept GRPO update against the exact gradients of accuracy "
    "and of the shaped objective, the share of it from all-fail groups, and accuracy over a "
    "short training run (verl-recipe PR #125's phantom gradient).  Writes the gradient and "
    "training tables (parquet and CSV), config.toml and shaped_training.png to --out.",
)
