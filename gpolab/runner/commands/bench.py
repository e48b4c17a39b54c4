"""``gpolab bench``: seeds/s, compile time, peak memory and ratios to numpy and the PRNG bound."""

from __future__ import annotations

import json
import sys

# shown at the end of --help; tests/runner/test_help_examples.py parses and resolves each
EXAMPLES = (
    "gpolab bench --quick",
    "gpolab bench --json",
    "gpolab bench --ledger quick --baseline HEAD~1",
)

COLUMNS = (
    "workload seeds_per_s numpy_seeds_per_s speedup_vs_numpy rng_bound_fraction gpolab_speedup "
    "compile_s chunk peak_rss_mb cold_s rerun_s warm_s compile_share updates_per_s "
    "vs_one_eta_at_a_time stage_us stage_share"
).split()


def register(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="throughput of the Monte Carlo engine, with ratios measured in the same run",
        description="Runs workload W1 (tabular bandit 16x64, G=16, loo) against the numpy "
        "reference, a numba peer (when numba is installed: pip install 'gpolab[bench]') and the "
        "PRNG bound, a profile of W1 (where its time goes on this machine), plus log-linear, tree, "
        "arithmetic, offpolicy, mismatch, async loop, allocate, training, scaling and memory "
        "workloads.",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="small seed counts (about 1.5 minutes on 2 cores; used by the tests)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object per workload")
    p.add_argument(
        "--seeds",
        type=int,
        default=None,
        help="seeds per throughput measurement (default 400000; quick 20000)",
    )
    p.add_argument(
        "--chunk",
        type=int,
        default=0,
        help="seeds per compiled chunk (default 0: the engine's cache-sized auto chunk)",
    )
    p.add_argument(
        "--ledger",
        choices=("quick", "full"),
        default=None,
        help="instead of the throughput rows: the wall time of `gpolab claims` and `gpolab "
        "figures` at this size, cold (empty caches) and warm, each in a fresh process (quick: "
        "about 25 minutes on 2 cores)",
    )
    p.add_argument(
        "--baseline",
        default=None,
        help="with --ledger: a git commit (e.g. the previous release's tag) whose same four runs "
        "alternate with this checkout's; each row gets the ratio baseline/this",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    import pandas as pd

    from gpolab import bench, validate
    from gpolab.bench import BenchConfig, numba_ref, run_bench

    if args.ledger is not None or args.baseline is not None:
        return run_ledger(args)

    cfg = BenchConfig(quick=args.quick, chunk=args.chunk)
    if args.seeds is not None:
        validate.integer("seeds", args.seeds, 1)
        cfg = BenchConfig(quick=args.quick, chunk=args.chunk, seeds=args.seeds)
    validate.integer("chunk", args.chunk, 0)

    def progress(row):
        print(f"{row['workload']}: {row['seeds_per_s']:,.0f} seeds/s", file=sys.stderr, flush=True)

    rows = run_bench(cfg, on_row=progress)
    why = numba_ref.missing()
    note = f"note: no numba peer row: {why}" if why else None
    info = bench.machine_info()
    if args.json:  # every row carries the machine it ran on
        for r in rows:
            print(
                json.dumps(
                    {**{k: r.get(k) for k in {**dict.fromkeys(COLUMNS), **r}}, "machine": info}
                )
            )
        if note:
            print(note, file=sys.stderr)
        return 0
    df = pd.DataFrame(rows).reindex(columns=COLUMNS)
    print(f"machine: {bench.machine(info)}")
    with pd.option_context("display.width", 200, "display.max_colwidth", 60):
        print(df.to_string(index=False, float_format=lambda x: f"{x:,.3g}"))
    print_summary(rows, note)
    return 0


def print_summary(rows: list[dict], note: str | None) -> None:
    """The lines under the bench table: W1 against numpy, the PRNG bound and numba (or why no
    numba row), W1's profile and the default sweep's compile shares."""
    from gpolab import bench

    w1 = rows[0]
    print(
        f"\nW1: {w1['seeds_per_s']:,.0f} seeds/s = {w1['speedup_vs_numpy']:.1f}x numpy "
        f"({w1['numpy_seeds_per_s']:,.0f} seeds/s), {100 * w1['rng_bound_fraction']:.0f}% of "
        f"the PRNG bound ({w1['rng_seeds_per_s']:,.0f} seeds/s); numpy agrees within 4 SE: "
        f"{w1['numpy_agrees']}"
    )
    if note:
        print(note)
    else:
        print(
            f"W1 = {w1['speedup_vs_numba']:.1f}x numba with the same alias draw "
            f"({w1['numba_seeds_per_s']:,.0f} seeds/s), {w1['speedup_vs_numba_binary']:.1f}x "
            f"numba with a binary-search draw ({w1['numba_binary_seeds_per_s']:,.0f} seeds/s); "
            f"both agree within 4 SE: {w1['numba_agrees'] and w1['numba_binary_agrees']}"
        )
    cut = bench.PROFILE
    stages = [r for r in rows if r["workload"].startswith(cut)]
    print(
        "W1 profile, wall µs per seed on all devices (share): "
        + ", ".join(
            f"{r['workload'][len(cut) :]} {r['stage_us']:.2f} ({100 * r['stage_share']:.0f}%)"
            for r in stages
        )
    )
    sweep = rows[-1]
    print(
        f"default sweep: cold {sweep['cold_s']:.1f} s (compile {100 * sweep['compile_share']:.0f}%"
        f"), re-run from the persistent XLA cache {sweep['rerun_s']:.1f} s (compile "
        f"{100 * sweep['rerun_compile_share']:.0f}%), warm {sweep['warm_s']:.1f} s"
    )


def run_ledger(args) -> int:
    """``--ledger``: :func:`gpolab.bench.ledger.rows`, printed as a table or JSON lines."""
    import pandas as pd

    from gpolab import bench, validate
    from gpolab.bench import ledger

    if args.ledger is None:
        raise validate.ConfigError("baseline: needs --ledger quick or --ledger full")
    for flag, given in (("quick", args.quick), ("seeds", args.seeds), ("chunk", args.chunk)):
        if given:
            raise validate.ConfigError(
                f"{flag}: not with --ledger (it times the CLI's own runs at --ledger's size)"
            )

    def progress(row):
        print(f"{row['workload']}: {row['seconds']:,.1f} s", file=sys.stderr, flush=True)

    rows = ledger.rows(args.ledger, args.baseline, on_row=progress)
    info = bench.machine_info()
    if args.json:
        for r in rows:
            print(json.dumps({**r, "machine": info}))
        return 0
    print(f"machine: {bench.machine(info)}")
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda x: f"{x:,.3g}"))
    return 0
