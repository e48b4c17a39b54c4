"""A lab's command line.

A lab's subcommand is :func:`lab_command`: every field of the lab's config dataclass becomes a
flag (:func:`gpolab.configs.add_flags`), plus the same ``--config FILE.toml``, ``--quick``,
``--json``, ``--fresh`` and ``--figures-dir`` on every lab, with one meaning: a flag the user
typed wins over ``--quick`` and over the config file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpolab import configs
from gpolab.kit import output, running
from gpolab.kit.tables import records


def lab_command(
    name: str, command: str | None = None, *, help: str, description: str, extend=None, runner=None
):
    """``register(sub)`` for lab ``name``'s subcommand ``command`` (default: the lab's name).
    ``extend(parser)`` adds command-only flags; ``runner(lab, args)`` replaces :func:`run_lab`."""

    def register(sub) -> None:
        lab = running.get(name)
        # no abbreviations: a removed flag must be an error, not a prefix of another (--a of
        # --answer-len)
        p = sub.add_parser(command or name, help=help, description=description, allow_abbrev=False)
        common = p.add_argument_group("every lab")
        common.add_argument("--config", help=f"TOML file with a [{name}] table; flags override it")
        common.add_argument(
            "--quick", action="store_true", help="small sizes for the settings you did not type"
        )
        common.add_argument("--json", action="store_true", help="print rows as JSON lines")
        common.add_argument(
            "--fresh", action="store_true", help="recompute every cell (default: resume --out)"
        )
        common.add_argument("--figures-dir", help="also copy the figures here (e.g. figures)")
        common.add_argument(
            "--max-hours",
            help="refuse a cell projected (from its first seeds) to take longer "
            "(default: 24; 0: no limit)",
        )
        configs.add_flags(p.add_argument_group(f"{name} settings"), lab.Config)
        if extend is not None:
            extend(p)
        p.set_defaults(func=lambda args: (runner or run_lab)(lab, args))

    def brief(sub) -> None:  # the name and help only: `gpolab --help` imports no lab
        sub.add_parser(command or name, help=help, description=description)

    register.brief = brief
    return register


def config_from_args(lab, args: argparse.Namespace):
    """The validated config: defaults < ``--config`` file < ``--quick`` < typed flags.  With
    ``--config FILE`` and no ``out`` anywhere, results go to ``results/<FILE's stem>``."""
    set_max_hours(args)
    cls = lab.Config
    typed = configs.typed(args, cls)
    table, file_quick = {}, {}
    if args.config:
        _, table, file_quick = configs.split_file(args.config, lab.NAME)
        table = {"out": f"results/{Path(args.config).stem}", **table}
    return configs.resolve(
        cls,
        typed=typed,
        table=table,
        quick=args.quick,
        file_quick=file_quick,
        source=args.config or "",
    )


def set_max_hours(args: argparse.Namespace) -> None:
    """``--max-hours``: the longest projected cell this run accepts
    (:class:`~gpolab.engine.progress.Clock`
    refuses longer ones)."""
    from gpolab import validate
    from gpolab.engine import progress

    if getattr(args, "max_hours", None) is not None:
        validate.real("max-hours", args.max_hours, low=0.0)
        progress.MAX_SECONDS = 3600.0 * float(args.max_hours)


def run_lab(lab, args, cfg=None) -> int:
    """Resolve, run (resumably), write, draw, print."""
    cfg = cfg or config_from_args(lab, args)
    if args.figures_dir is not None:  # checked before the run, like --out
        output.prepare(args.figures_dir, "figures-dir")
    result = running.execute(lab, cfg, fresh=args.fresh)
    if args.figures_dir:
        running.copy_figures(result.paths, args.figures_dir)
    notes = lab.notes(cfg, result.tables) if hasattr(lab, "notes") else ""
    if args.json:  # stdout stays JSON lines; notes go to stderr
        for rec in records(lab, result.tables):
            print(json.dumps(rec))
        if notes:
            print(notes, file=sys.stderr)
        return 0
    print(lab.report(cfg, result.tables))
    if notes:
        print(notes)
    print(f"\nwrote {', '.join(map(str, result.paths))}; this run {result.seconds:.1f} s")
    return 0
