"""``gpolab claims``: the claims ledger (:mod:`gpolab.labs.claims.lab`) with a verdict per claim."""

from __future__ import annotations

from gpolab.runner import labs
from gpolab.runner.commands import config_from_args, lab_command, run_lab

# shown at the end of --help (each is parsed, and a lab's resolved, by tests/test_help_examples.py)
EXAMPLES = (
    'gpolab claims --quick',
    'gpolab claims --only U1,T1 --markdown',
)


def _flags(p) -> None:
    g = p.add_argument_group("output")
    g.add_argument("--markdown", action="store_true", help="print the ledger as a markdown table")
    g.add_argument("--readme", metavar="FILE", nargs="+",
                   help="rewrite the generated claims blocks of each FILE (the ledger in "
                   "docs/claims.md, the verdicts summary in README.md)")  # fmt: skip


def _run(lab, args) -> int:
    if not (args.markdown or args.readme):
        return run_lab(lab, args)
    from gpolab import readme  # imports the claims lab: deferred so `gpolab --help` stays instant

    cfg = config_from_args(lab, args)
    cfg.validate()
    for path in args.readme or ():  # checked before anything runs
        readme.claims_text(path)
    result = labs.execute(lab, cfg, fresh=args.fresh)
    for path in args.readme or ():
        readme.write_claims(result.tables, path)
        print(f"wrote the claims blocks of {path}")
    if args.markdown:
        print(lab.markdown(result.tables))
    return 0


register = lab_command(
    "claims",
    help="the ledger of every paper claim gpolab tests: statistic, rule and verdict",
    description="Reads the saved tables of the experiments (computing only missing ones; "
    "--quick: the quick-size tables of `gpolab figures --quick`) and prints one verdict per "
    "claim (reproduced, partly, not reproduced, inconclusive, not testable here) with its "
    "statistic, reason and each rule's margin in standard errors (a rule within one SE of its "
    "threshold is inconclusive; a NaN never passes).  The experiments are those shipped with "
    "gpolab (any working directory; --experiments overrides).  --readme README.md rewrites the "
    "README's generated claims table.",
    extend=_flags,
    runner=_run,
)
