"""``gpolab chi2``: the weighted-χ² limit of n·Δ(θ_n) under SGD with η_i = β/i.

[U] arXiv 2603.01162, Theorem 8; DESIGN §5.  For each estimator: the predicted weights w_k and
mean Σ w_k, the empirical mean of n·Δ over seeds with a 95% CI, and the Kolmogorov–Smirnov test
against the Imhof CDF at every n; a QQ plot and an ECDF-vs-CDF figure go to ``--out``.
"""

from __future__ import annotations

ALL = ("vanilla", "loo", "oracle", "mean", "grpo")


def register(sub) -> None:
    p = sub.add_parser(
        "chi2",
        help="asymptotic weighted chi-square law of the SGD suboptimality gap (2603.01162 Thm 8)",
        description="Run SGD (steps beta/i) on the Gaussian-policy testbed for many seeds and "
        "compare n*gap with its predicted limit sum_k w_k chi2_1: predicted weights and mean, "
        "empirical mean with a 95% CI, Kolmogorov-Smirnov test against the Imhof CDF.  Writes "
        "chi2_qq.png, chi2_ecdf.png and results.json to --out.",
    )
    p.add_argument(
        "--estimator",
        default="all",
        help=f"comma list of {', '.join(ALL)}, or all (default: all)",
    )
    p.add_argument("--B", type=int, default=4, help="prompts per step (default: 4)")
    p.add_argument("--G", type=int, default=8, help="responses per prompt, >= 2 (default: 8)")
    p.add_argument(
        "--beta",
        type=float,
        default=3.0,
        help="step size scale, eta_i = beta/i; needs beta*lambda_min > 1/2 (default: 3)",
    )
    p.add_argument("--seeds", type=int, default=4096, help="independent SGD runs (default: 4096)")
    p.add_argument(
        "--n",
        default="100,1000,10000",
        help="comma list of step counts n at which n*gap is recorded (default: 100,1000,10000)",
    )
    p.add_argument("--prompts", type=int, default=4, help="number of prompts P (default: 4)")
    p.add_argument("--dim", type=int, default=3, help="parameter dimension d (default: 3)")
    p.add_argument(
        "--rank",
        type=int,
        default=None,
        help="rank r < d of the features: only r directions of theta matter (default: d)",
    )
    p.add_argument("--init", type=float, default=0.3, help="||theta_0 - theta*|| (default: 0.3)")
    p.add_argument("--eps", type=float, default=1e-4, help="grpo: std epsilon (default: 1e-4)")
    p.add_argument("--ddof", type=int, default=1, help="grpo: std ddof, 0 or 1 (default: 1)")
    p.add_argument(
        "--mc-groups",
        type=int,
        default=2**19,
        help="grpo theory: Monte Carlo groups per prompt for its Jacobian and covariance "
        "(default: 2^19)",
    )
    p.add_argument("--env-seed", type=int, default=0, help="testbed instance seed (default: 0)")
    p.add_argument("--seed", type=int, default=0, help="PRNG seed of the runs (default: 0)")
    p.add_argument(
        "--devices",
        type=int,
        default=None,
        help="CPU devices to split the seeds over (default: the CPU count; only takes effect "
        "before JAX has started in this process)",
    )
    p.add_argument("--out", default="results/chi2", help="output directory (default: results/chi2)")
    p.add_argument("--json", action="store_true", help="one JSON object per (estimator, n) line")
    p.set_defaults(func=run)


def parse_estimators(text: str) -> tuple[str, ...]:
    from gpolab import validate

    names = ALL if text.strip() == "all" else tuple(s.strip() for s in text.split(",") if s.strip())
    if not names:
        raise validate.ConfigError(f"estimator: got {text!r}; allowed: {', '.join(ALL)} or all")
    for name in names:
        validate.choice("estimator", name, ALL)
    return names


def parse_ints(field: str, text: str) -> tuple[int, ...]:
    from gpolab import validate

    try:
        return tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise validate.ConfigError(
            f"{field}: got {text!r}; allowed: a comma list of integers"
        ) from None


def use_cpu_devices(count: int | None):
    """Ask for ``count`` CPU devices (:func:`gpolab.engine.use_cpu_devices`); return a seed mesh
    over every device when there is more than one, else None."""
    from gpolab import engine

    engine.use_cpu_devices(count)
    return engine.local_mesh()


def plot(samples: dict, laws: dict, steps, out) -> tuple[str, str]:
    """QQ plot at the largest n and ECDF-vs-CDF at every n, one panel per estimator."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = list(samples)
    k = len(names)
    fig, axes = plt.subplots(1, k, figsize=(3.3 * k, 3.4), constrained_layout=True, squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        dist = laws[name][1]
        x = np.sort(samples[name][:, -1])
        p = (np.arange(1, x.size + 1) - 0.5) / x.size
        q = dist.ppf(p)
        ax.plot(q, x, ".", ms=2, color="C0")
        top = max(q[-1], x[-1])
        ax.plot([0, top], [0, top], "k--", lw=1)
        ax.set(title=name, xlabel="predicted quantile", ylabel=f"n·Δ at n = {steps[-1]}")
        ax.grid(alpha=0.3)
    fig.suptitle("QQ: n·Δ(θ_n) vs Σ w_k χ²₁ (Thm 8, arXiv 2603.01162)")
    qq = str(out / "chi2_qq.png")
    fig.savefig(qq, dpi=120)
    plt.close(fig)

    fig, axes = plt.subplots(1, k, figsize=(3.3 * k, 3.4), constrained_layout=True, squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        dist = laws[name][1]
        hi = float(dist.ppf(0.995))
        grid = np.linspace(0, hi, 300)
        for j, n in enumerate(steps):
            x = np.sort(samples[name][:, j])
            ax.step(x, np.arange(1, x.size + 1) / x.size, where="post", lw=1, label=f"n = {n}")
        ax.plot(grid, dist.cdf(grid), "k--", lw=1.3, label="Imhof CDF")
        ax.set(title=name, xlabel="n·Δ(θ_n)", ylabel="CDF", xlim=(0, hi))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle("ECDF of n·Δ(θ_n) vs the predicted weighted-χ² CDF")
    ecdf = str(out / "chi2_ecdf.png")
    fig.savefig(ecdf, dpi=120)
    plt.close(fig)
    return qq, ecdf


def run(args) -> int:
    import json
    import time
    from pathlib import Path

    from gpolab import chi2

    cfg = chi2.Chi2Config(
        estimators=parse_estimators(args.estimator),
        B=args.B,
        G=args.G,
        beta=args.beta,
        seeds=args.seeds,
        steps=parse_ints("n", args.n),
        prompts=args.prompts,
        dim=args.dim,
        rank=args.rank,
        env_seed=args.env_seed,
        seed=args.seed,
        init=args.init,
        eps=args.eps,
        ddof=args.ddof,
        mc_groups=args.mc_groups,
    )
    chi2.validate_config(cfg)
    mesh = use_cpu_devices(args.devices)
    t0 = time.perf_counter()

    def show(r) -> None:
        if args.json:
            print(json.dumps(r.to_dict()), flush=True)
            return
        if r.n == cfg.steps[0]:
            w = ", ".join(f"{v:.4g}" for v in r.weights)
            print(
                f"{r.estimator}: weights [{w}]  predicted mean {r.predicted_mean:.4g}  "
                f"(rank {r.rank}, beta*lambda_min {r.beta * r.lambda_min:.3g}, {r.seconds:.1f}s)"
            )
        print(
            f"  n={r.n:<7d} mean n*gap {r.empirical_mean:.4g} "
            f"[{r.ci_low:.4g}, {r.ci_high:.4g}]  KS {r.ks_stat:.4f} p={r.ks_pvalue:.3g}",
            flush=True,
        )

    results, samples, laws = chi2.run(cfg, mesh=mesh, on_result=show)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps([r.to_dict() for r in results], indent=1))
    qq, ecdf = plot(samples, laws, cfg.steps, out)
    if not args.json:
        print(f"wrote {qq}, {ecdf}, {out / 'results.json'} ({time.perf_counter() - t0:.1f}s)")
    return 0
