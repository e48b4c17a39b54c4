"""``gpolab sweep``: the sweep lab (:mod:`gpolab.labs.sweep.lab`), plus multi-process flags."""

from __future__ import annotations

from gpolab.kit.command import config_from_args, lab_command, run_lab

# shown at the end of --help; tests/runner/test_help_examples.py parses and resolves each
EXAMPLES = (
    "gpolab sweep --quick",
    "gpolab sweep --estimators loo,grpo,verl/grpo --G 4,8,16 --seeds 20000 --out results/mine",
    "gpolab sweep --env tree --K 4,16 --M 1,4 --quick",
)


def _distributed_flags(p) -> None:
    dist = p.add_argument_group("multi-process (jax.distributed; implies --shard)")
    dist.add_argument("--coordinator", help="host:port of process 0, e.g. 127.0.0.1:12345")
    dist.add_argument(
        "--num-processes", type=int, help="processes in the run (with --coordinator; default: 1)"
    )
    dist.add_argument(
        "--process-id", type=int, help="this process's index (with --coordinator; default: 0)"
    )

    arr = p.add_argument_group("job arrays")
    arr.add_argument(
        "--cells",
        metavar="I/N",
        help="compute only share I of N (0 <= I < N) of "
        "the cells into --out's store, e.g. $SLURM_ARRAY_TASK_ID/N; a final run "
        "without --cells assembles the table without recomputing",
    )


def parse_share(text: str) -> tuple[int, int]:
    """``"i/n"`` → (i, n) with 0 <= i < n; one error line otherwise."""
    from gpolab.validate import ConfigError

    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        i, n = -1, 0
    if not 0 <= i < n:
        raise ConfigError(f"cells: got {text!r}; allowed: I/N with integers 0 <= I < N, e.g. 3/8")
    return i, n


def _share(lab, args, cfg) -> int:
    """One job of an array: this share's cells into the store; no table, no lock (cells are
    written atomically one file each, so jobs of one array can share the folder)."""
    from gpolab.kit import output
    from gpolab.kit.store import Store
    from gpolab.validate import ConfigError

    i, n = parse_share(args.cells)
    if args.fresh:
        raise ConfigError("cells: --fresh would clear the other jobs' cells; not allowed")
    store = Store(output.prepare(cfg.out))
    df = lab.run_sweep(cfg, store=store, share=(i, n))
    print(
        f"share {i}/{n}: {len(df)} cells in {cfg.out}; run the same command without --cells "
        "to assemble the table (stored cells are not recomputed)"
    )
    return 0


def distributed(args) -> tuple[int, int]:
    """(processes, this process's index) of the multi-process flags (checked by
    :func:`gpolab.engine.devices.init_distributed`); either without ``--coordinator`` is an
    error."""
    from gpolab import validate

    given = [f for f in ("num_processes", "process_id") if getattr(args, f) is not None]
    if given and not args.coordinator:
        raise validate.ConfigError(
            f"{given[0].replace('_', '-')}: not used without --coordinator "
            "(a multi-process run); allowed: both or neither"
        )
    n = 1 if args.num_processes is None else args.num_processes
    return n, 0 if args.process_id is None else args.process_id  # checked by init_distributed


def _run(lab, args) -> int:
    cfg = config_from_args(lab, args)
    processes, index = distributed(args)
    if args.cells:
        if args.coordinator:
            from gpolab.validate import ConfigError

            raise ConfigError("cells: a job array share runs one process; drop --coordinator")
        return _share(lab, args, cfg)
    from gpolab import engine

    if args.coordinator:
        engine.init_distributed(args.coordinator, processes, index)
    elif engine.init_auto_distributed() is None:  # Slurm, Open MPI, TPU pods: detected
        return run_lab(lab, args, cfg)
    import jax

    cfg = cfg.replace(shard=True)
    if jax.process_index() != 0:  # process 0 holds the store and says which cells to compute
        lab.run_sweep(cfg)
        return 0
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
