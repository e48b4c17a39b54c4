"""``gpolab mismatch``: the rollout–training mismatch lab (:mod:`gpolab.labs.mismatch.lab`), every
framework's mismatch correction (TRL, verl) against the exact gradient."""

from __future__ import annotations

from gpolab.kit.command import lab_command

# shown at the end of --help; tests/runner/test_help_examples.py parses and resolves each
EXAMPLES = (
    "gpolab mismatch --quick",
    "gpolab mismatch --T 64,256 --mismatch noise:0.05,bf16:16 --from-config grpo_config.yaml",
)

register = lab_command(
    "mismatch",
    help="rollout-training mismatch: every framework's correction against the exact gradient",
    description="Responses of T tokens sampled by a rollout engine whose policy differs from the "
    "trainer's (Markov env), and every framework's mismatch correction (TRL, verl) against the "
    "exact gradient: bias^2, variance, MSE, cos, scale and the truncated share; --from-config "
    "names the correction a TRL or verl config runs.  Writes the results and decision tables, "
    "config.toml and the figure to --out.",
)
