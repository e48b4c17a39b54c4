"""``gpolab sweep``: the sweep lab (:mod:`gpolab.labs.sweep`), plus multi-process flags."""

from __future__ import annotations

from gpolab.commands import config_from_args, lab_command, run_lab


def _distributed_flags(p) -> None:
    dist = p.add_argument_group("multi-process (jax.distributed; implies --shard)")
    dist.add_argument("--coordinator", help="host:port of process 0, e.g. 127.0.0.1:12345")
    dist.add_argument("--num-processes", type=int, default=1, help="processes in the run")
    dist.add_argument("--process-id", type=int, default=0, help="this process's index")


def _run(lab, args) -> int:
    cfg = config_from_args(lab, args)
    if not args.coordinator:
        return run_lab(lab, args, cfg)
    from gpolab.engine import init_distributed

    init_distributed(args.coordinator, args.num_processes, args.process_id)
    cfg = cfg.replace(shard=True)
    if args.process_id != 0:  # every process computes every cell; process 0 writes
        lab.run_sweep(cfg)
        return 0
    args.fresh = True  # processes stay in lockstep only if none skips a cell
    return run_lab(lab, args, cfg)


register = lab_command(
    "sweep",
    help="MSE of gradient estimators over a grid of G (bandit) or K x M (tree)",
    description="Run every (estimator, G) or (K, M) cell over many seeds and compare the Monte "
    "Carlo MSE with the exact finite-G theory.  Writes results.parquet, results.csv, "
    "config.toml and a figure to --out.",
    extend=_distributed_flags,
    runner=_run,
)
