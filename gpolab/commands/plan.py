"""``gpolab plan LOG``: what a real run's group size, estimator and sampling do
(:mod:`gpolab.labs.plan`)."""

from __future__ import annotations

import json

from gpolab import labs, output
from gpolab.commands import config_from_args, lab_command


def _flags(p) -> None:
    p.add_argument("LOG", nargs="?", help="the rollout log: a file or a folder (same as --log)")


def _run(lab, args) -> int:
    if args.LOG is not None:
        args.log = args.LOG
    cfg = config_from_args(lab, args)
    cfg.validate()
    cfg = lab.with_callback_files(cfg)[0]  # a run folder with a training hook's files
    lab.load(cfg)  # the log's errors come before the output folder is touched
    if cfg.grad_norms:
        lab.read_norms(cfg.grad_norms)
    if args.figures_dir is not None:  # checked before the run, like --out
        output.prepare(args.figures_dir, "figures-dir")
    result = labs.execute(lab, cfg, use_store=False)
    text = lab.report(cfg, result.tables)
    paths = [*result.paths, output.write_text(result.out / "report.md", text + "\n")]
    summary = lab.summary_json(cfg, result.tables)
    if cfg.allocate:
        table, alloc = lab.allocation_table(cfg, result.tables)
        text += "\n\n" + lab.allocation_text(alloc)
        paths[-1] = output.write_text(result.out / "report.md", text + "\n")
        paths += output.write_tables(result.out, {"allocation": table})
        doc = {**alloc, "G": dict(zip(table["prompt"], map(int, table["G"]), strict=True))}
        paths.append(output.write_text(result.out / "allocation.json", json.dumps(doc, indent=1)
                                       + "\n"))  # fmt: skip
        summary["allocation"] = alloc
    paths.append(output.write_text(result.out / "plan.json", json.dumps(summary, indent=1) + "\n"))
    if args.figures_dir:
        labs.copy_figures(result.paths, args.figures_dir)
    if args.json:
        print(json.dumps(summary))
        return 0
    print(text)
    print(f"\nwrote {', '.join(map(str, paths))}")
    return 0


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
