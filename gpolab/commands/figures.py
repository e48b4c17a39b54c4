"""``gpolab figures``: run every experiment in experiments/ (resumably) and draw its figures."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser(
        "figures",
        help="regenerate every figure from the declarative experiments",
        description="Runs each experiments/*.toml (finished cells are reused from --results) "
        "and draws its figures from the saved tables into --out.",
    )
    p.add_argument("--only", help="comma list of experiment names (default: all)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="apply each experiment's [quick] overrides (whole set in minutes)",
    )
    p.add_argument("--out", default="figures", help="where the PNGs go (default: figures)")
    p.add_argument(
        "--results",
        default="results",
        help="results root; each experiment keeps its cells in <results>/<name>",
    )
    p.add_argument(
        "--experiments",
        default=None,
        help="directory of experiment files (default: the repository's experiments/)",
    )
    p.add_argument("--fresh", action="store_true", help="discard saved results and recompute")
    p.set_defaults(func=run)


def run(args) -> int:
    from gpolab import experiments, validate

    found = experiments.discover(args.experiments or experiments.DEFAULT_DIR)
    names = [e.name for e in found]
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        for n in wanted:
            validate.choice("only", n, names)
        found = [e for e in found if e.name in wanted]
    timings = []
    for exp in found:
        results, seconds = experiments.run(exp, args.results, quick=args.quick, fresh=args.fresh)
        paths = experiments.plot(exp, results, args.out)
        timings.append((exp.name, seconds, paths))
    width = max(len(n) for n, _, _ in timings)
    for name, seconds, paths in timings:
        print(f"{name:<{width}}  {seconds:7.1f} s  {', '.join(map(str, paths))}")
    print(f"{'total':<{width}}  {sum(t for _, t, _ in timings):7.1f} s")
    return 0
