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
    p.set_defaults(func=run)


def folders(args) -> tuple[str, str]:
    """(results root, figure folder) of the flags."""
    return args.out or "results", args.figures_dir or "figures"


def run(args) -> int:
    from pathlib import Path

    from gpolab import configs, validate
    from gpolab.runner import experiments, output

    results_root, figures_dir = folders(args)
    found = experiments.discover(args.experiments or experiments.DEFAULT_DIR)
    names = [e.name for e in found]
    if args.only is not None:  # `--only ''` is an empty selection, not "all"
        wanted = configs.coerce_list("only", args.only)
        for n in wanted:
            validate.choice("only", n, names)
        found = [e for e in found if e.name in wanted]
    output.prepare(results_root)
    output.prepare(figures_dir, "figures_dir")
    timings = []
    for exp in found:
        if args.replot:
            results, seconds = Path(results_root) / (exp.name + "-quick" * args.quick), 0.0
        else:
            results, seconds = experiments.run(exp, results_root, args.quick, args.fresh)
        timings.append((exp.name, seconds, experiments.plot(exp, results, figures_dir)))
    width = max(len(n) for n, _, _ in timings)
    for name, seconds, paths in timings:
        print(f"{name:<{width}}  {seconds:7.1f} s  {', '.join(map(str, paths))}")
    print(f"{'total':<{width}}  {sum(t for _, t, _ in timings):7.1f} s")
    return 0
