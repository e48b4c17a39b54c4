"""``gpolab groupsize``: the group-size lab (:mod:`gpolab.labs.groupsize.lab`), fixed θ or
``--train``; ``--quick`` sizes and the default ``--out`` follow the mode (``Config.MODES``)."""

from __future__ import annotations

from gpolab.kit.command import lab_command

# shown at the end of --help; tests/runner/test_help_examples.py parses and resolves each
EXAMPLES = (
    "gpolab groupsize --quick",
    "gpolab groupsize --train --env bandit --quick",
    "gpolab groupsize --budget --quick",
)

register = lab_command(
    "groupsize",
    help="optimal group size G at a fixed budget N = B*G (2603.01162 Thm 7)",
    description="Fixed theta (default): Monte Carlo MSE of the leave-one-out mini-batch "
    "gradient over every divisor G of N on the bandit, against the exact fixed-N MSE and its "
    "minimiser 1 + sqrt(C3/c1) (the paper: sqrt(c3/c1)).  --train: final suboptimality gap of "
    "SGD with N responses per step over many seeds, per G, N and step schedule, on the bandit "
    "and the arithmetic surrogate.  --budget (a training check): equal total rollouts for "
    "every N and G, prompts drawn afresh or from pools of P prompts, rollouts to a target "
    "success rate, pass@1 and pass@k, beside the per-step optimum and "
    "theory.groupsize.training_rule.  Writes results, summary and curve tables (parquet and "
    "csv), config.toml and groupsize_mse.png / groupsize_train.png / groupsize_budget.png to "
    "--out.",
)
