"""``gpolab figures``: run every experiment in experiments/ (resumably) and draw its figures."""

from __future__ import annotations

# shown at the end of --help; tests/runner/test_help_examples.py parses and resolves each
EXAMPLES = (
    "gpolab figures --quick",
    "gpolab figures --only bandit_mse_vs_G,tree_mse_heatmap",
    "gpolab figures --replot",
)


def register(sub) -> None:
    p = sub.add_parser(
        "figures",
        help="regenerate every figure from the declarative experiments",
        description="Runs each experiments/*.toml (finished cells are reused from --out) and "
        "draws its figures from the saved tables into --figures-dir.",
    )
    p.add_argument("--only", help="comma list of experiment names (default: all)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="the labs' quick sizes and each experiment's [quick] table (whole set in minutes)",
    )
    p.add_argument(
        "--replot", action="store_true", help="redraw from saved tables only; compute nothing"
    )
    p.add_argument(
        "--out",
        default=None,
        help="results root; each experiment keeps its cells in <out>/<name> (default: results)",
    )
    p.add_argument("--figures-dir", default=None, help="where the PNGs go (default: figures)")
    p.add_argument(
        "--experiments",
        default=None,
        help="directory of experiment files (default: the repository's experiments/)",
    )
    p.add_argument("--fresh", action="store_true", help="discard saved results and recompute")
    p.add_argument(
        "--jobs",
        type=int,
        default=0,
        help="worker processes for the experiments (0: one per core; 1: this process); the "
        "numbers do not depend on it",
    )
    p.set_defaults(func=run)


def folders(args) -> tuple[str, str]:
    """(results root, figure folder) of the flags."""
    return args.out or "results", args.figures_dir or "figures"


def run(args) -> int:
    import time
    from pathlib import Path

    from gpolab import validate
    from gpolab.kit import experiments, output

    results_root, figures_dir = folders(args)
    found = experiments.discover(args.experiments or experiments.DEFAULT_DIR)
    names = [e.name for e in found]
    if args.only is not None:  # `--only ''` is an empty selection, not "all"
        wanted = experiments.selection("only", args.only, names)
        found = [e for e in found if e.name in wanted]
    validate.integer("jobs", args.jobs, 0, 256)
    start = time.perf_counter()
    output.prepare(results_root)
    output.prepare(figures_dir, "figures_dir")
    if args.replot:
        ran = {e.name: (Path(results_root) / (e.name + "-quick" * args.quick), 0.0) for e in found}
    else:
        ran = experiments.run_all(found, results_root, args.quick, args.fresh, jobs=args.jobs)
    timings = []
    for exp in found:
        results, seconds = ran[exp.name][:2]
        timings.append((exp.name, seconds, experiments.plot(exp, results, figures_dir)))
    width = max(len(n) for n, _, _ in timings)
    for name, seconds, paths in timings:
        print(f"{name:<{width}}  {seconds:7.1f} s  {', '.join(map(str, paths))}")
    jobs = 1 if args.replot else experiments.workers(args.jobs, len(found))
    wall = f"wall {time.perf_counter() - start:.1f} s, {jobs} worker process{'es' * (jobs > 1)}"
    print(f"{'total':<{width}}  {sum(t for _, t, _ in timings):7.1f} s  ({wall})")
    return 0
