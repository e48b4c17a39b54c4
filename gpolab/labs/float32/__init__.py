"""``gpolab float32``: NeMo-RL's one-pass float32 leave-one-out std and verl's grpo_vectorized
variance floor on rewards beyond 0/1 (:mod:`gpolab.labs.float32.lab`), exactly, over every group
on a reward grid."""

from __future__ import annotations

from gpolab.kit.command import lab_command

# shown at the end of --help; tests/runner/test_help_examples.py parses and resolves each
EXAMPLES = (
    "gpolab float32 --quick",
    "gpolab float32 --grids binary,tenths --G 4,8",
    "gpolab float32 --verl-grids pr6348,lowvar --G 2,8",
)

register = lab_command(
    "float32",
    help="float32 std normalization: NeMo-RL's spike and verl's variance floor, exactly",
    description="NeMo-RL's GRPO advantage (leave-one-out baseline, normalize_rewards) in numpy "
    "float32 as the framework computes it (7ea279ab, and with PR#4158's mask) against the exact "
    "value, over every group of G rewards on each reward grid (no Monte Carlo): the largest |A|, "
    "the exact probability of a spike past the exact bound, and every (G-1)-vs-1 split.  Writes "
    "the grid, splits and verl tables and config.toml to --out.  Table verl: verl's "
    "grpo_vectorized before PR#6348 (variance floored at 1e-6) and after it, and canonical grpo, "
    "in numpy float32 in torch's CPU order, on --verl-grids: the shrink of low-variance groups' "
    "advantages.",
)
