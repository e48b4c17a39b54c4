"""``gpolab plancheck``: ``gpolab plan`` on logs simulated from the surrogates, against their truth
(:mod:`gpolab.labs.plancheck.lab`)."""

from __future__ import annotations

from gpolab.kit.command import lab_command

# shown at the end of --help; tests/runner/test_help_examples.py parses and resolves each
EXAMPLES = ("gpolab plancheck --quick", "gpolab plancheck --env bandit --quick")

register = lab_command(
    "plancheck",
    help="validate `gpolab plan`: simulated TRL/verl/table logs, recovered vs true answers",
    description="Simulates rollout logs from the tabular bandit and the arithmetic surrogate at a "
    "fixed policy (with a per-response score-norm proxy and loo gradient norms at two batch "
    "sizes), writes them as TRL and verl write them and as a table, reads them back with "
    "`gpolab plan` and compares the mean difficulty, the degenerate-group curve, the logged "
    "fraction, c1, C3 and G* with the exact truth.  Writes logs/, results tables and "
    "plancheck.png to --out.",
)
