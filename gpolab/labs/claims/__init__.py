"""``gpolab claims``: the claims ledger (:mod:`gpolab.labs.claims.lab`) with a verdict per claim."""

from __future__ import annotations

from gpolab.kit import running
from gpolab.kit.command import config_from_args, lab_command, run_lab

# shown at the end of --help; tests/runner/test_help_examples.py parses and resolves each
EXAMPLES = ("gpolab claims --quick", "gpolab claims --only U1,T1 --markdown")


def _flags(p) -> None:
    g = p.add_argument_group("output")
    g.add_argument("--markdown", action="store_true", help="print the ledger as a markdown table")


def _run(lab, args) -> int:
    if not args.markdown:
        return run_lab(lab, args)
    cfg = config_from_args(lab, args)
    cfg.validate()
    print(lab.markdown(running.execute(lab, cfg, fresh=args.fresh).tables))
    return 0


register = lab_command(
    "claims",
    help="the ledger of every paper claim gpolab tests: statistic, rule and verdict",
    description="Reads the saved tables of the experiments (computing only missing ones; "
    "--quick: the quick-size tables of `gpolab figures --quick`) and prints one verdict per "
    "claim (reproduced, partly, not reproduced, inconclusive, not testable here) with its "
    "statistic, reason and each rule's margin in standard errors (a rule within one SE of its "
    "threshold is inconclusive; a NaN never passes).  The experiments are those shipped with "
    "gpolab (any working directory; --experiments overrides).  It writes no README or docs "
    "page: the repository's `python -m tools.readme` regenerates their claims blocks.",
    extend=_flags,
    runner=_run,
)
