"""``gpolab plan LOG``: what a real run's group size, estimator and sampling do
(:mod:`gpolab.labs.plan.lab`)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from gpolab import configs, validate
from gpolab.kit import output, running
from gpolab.kit.command import config_from_args, lab_command

# shown at the end of --help; tests/runner/test_help_examples.py parses and resolves each
EXAMPLES = ("gpolab plan completions.parquet", "gpolab plan --log rollouts/ --format verl --G 8")

# every file a plan run writes: a run replaces the ones an earlier run left in --out
OUTPUTS = (
    *(
        f"{t}.{x}"
        for t in ("summary", "curve", "kappa", "groups", "allocation")
        for x in ("parquet", "csv")
    ),
    "config.toml",
    "plan.png",
    "report.md",
    "plan.json",
    "allocation.json",
)
STAGE = ".plan-stage"  # the run's files are written here first, then moved into --out


def _flags(p) -> None:
    p.add_argument("LOG", nargs="?", help="the rollout log: a file or a folder (same as --log)")


def _run(lab, args) -> int:
    if args.LOG is not None:
        if args.log is not None and args.log != args.LOG:
            raise validate.ConfigError(
                f"log: given twice ({args.LOG!r} and --log {args.log!r}); allowed: one log, "
                "as LOG or --log"
            )
        args.log = args.LOG
    cfg = config_from_args(lab, args)
    cfg.validate()
    if args.figures_dir is not None:  # checked before the run, like --out
        output.prepare(args.figures_dir, "figures-dir")
    # everything is computed before the first file is written: an error leaves --out as it was
    tables = lab.run(cfg)
    cfg = lab.with_callback_files(cfg)[0]  # the log read (a run folder: the hook's files)
    text = lab.report(cfg, tables)
    summary = lab.summary_json(cfg, tables)
    texts = {}
    if cfg.allocate:
        from gpolab.labs.plan import allocation

        table, alloc = allocation.allocation_table(cfg, tables)
        text += "\n\n" + allocation.allocation_text(alloc)
        tables = {**tables, "allocation": table}
        doc = {**alloc, "G": dict(zip(table["prompt"], map(int, table["G"]), strict=True))}
        texts["allocation.json"] = json.dumps(doc, indent=1) + "\n"
        summary["allocation"] = alloc
    texts["report.md"] = text + "\n"
    texts["plan.json"] = json.dumps(summary, indent=1) + "\n"
    texts["config.toml"] = configs.dumps(configs.absolute_paths(cfg), lab.NAME)  # from anywhere
    paths = _write(lab, cfg.out, tables, texts)
    if args.figures_dir:
        running.copy_figures(paths, args.figures_dir)
    if args.json:
        print(json.dumps(summary))
        return 0
    print(text)
    print(f"\nwrote {', '.join(map(str, paths))}")
    return 0


def _write(lab, out, tables: dict, texts: dict) -> list[Path]:
    """Write the run's files into a stage folder inside ``out``, then replace the previous
    run's outputs with them as a whole (a file an earlier run wrote and this one does not,
    e.g. allocation.csv without --allocate, is removed)."""
    with output.hold(out) as out:
        stage = out / STAGE
        shutil.rmtree(stage, ignore_errors=True)  # an earlier run killed mid-write
        stage.mkdir()
        try:
            paths = output.write_tables(stage, tables)
            paths += [output.write_text(stage / name, t) for name, t in texts.items()]
            paths += running.draw(lab, stage)
            names = [p.name for p in paths]
            for name in OUTPUTS:
                if name not in names:
                    (out / name).unlink(missing_ok=True)
            for name in names:
                os.replace(stage / name, out / name)
        except OSError as err:
            raise output.write_failed(out, err) from None
        finally:
            shutil.rmtree(stage, ignore_errors=True)
    return [out / name for name in names]


HELP = "read a GRPO run's rollout log: difficulty fit, degenerate groups by G, DAPO cost, kappa"
DESCRIPTION = (
    "Reads a rollout log (TRL completions parquet folder, verl rollout jsonl folder, or a "
    "CSV/parquet table with prompt, reward[, step, length]) and reports, exactly under a "
    "beta-binomial fit of prompt difficulty: the degenerate-group fraction at every G (checked "
    "against the log), the G that keeps it under --target, informative groups per step at a "
    "fixed response budget, DAPO dynamic sampling's draws per kept group, and each estimator's "
    "kappa at this difficulty mix.  G* needs --proxy-column and --grad-norms; without them the "
    "report says why.  A training run's output folder with gpolab's hook files (TRL: "
    "gpolab.integrations.trl.PlanCallback) gives all of them: the report opens with 'use G = "
    "...' or why the log cannot decide.  Writes report.md, plan.json, tables and plan.png to "
    "--out."
)
register = lab_command("plan", help=HELP, description=DESCRIPTION, extend=_flags, runner=_run)
