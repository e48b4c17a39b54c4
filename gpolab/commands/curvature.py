"""``gpolab curvature``: the curvature law ‖g_x‖ ≤ 2Bσ_x, ‖H_x‖_op ≤ 4B²σ_x on random θ.

DESIGN §7, [N] arXiv 2601.23135, Lemma 1.  Samples many θ of the log-linear bandit (random
directions at log-uniform scales, so σ_x covers (0, 1/2]), computes the exact σ_x, ‖g_x‖ and
‖H_x‖_op of every prompt, plots them against σ_x with the bounds dashed and reports the fitted
constants C in ‖g_x‖ ≈ C·B·σ_x and ‖H_x‖_op ≈ C·B²·σ_x.
"""

from __future__ import annotations

HELP_OUT = "output directory (default: results/curvature)"


def register(sub) -> None:
    p = sub.add_parser(
        "curvature",
        help="curvature law: per-prompt gradient and Hessian norms against the reward std",
        description="Exact ||g_x|| and ||H_x||_op of the log-linear bandit at many random theta, "
        "against sigma_x, with the bounds 2B sigma_x and 4B^2 sigma_x (arXiv 2601.23135).  "
        "Writes curvature.csv, summary.json and curvature.png to --out.",
    )
    p.add_argument("--thetas", type=int, default=400, help="random theta draws (default: 400)")
    p.add_argument("--prompts", type=int, default=32, help="prompts N (default: 32)")
    p.add_argument("--responses", type=int, default=256, help="responses per prompt (>= 256)")
    p.add_argument("--block", type=int, default=8, help="feature block size k (default: 8)")
    p.add_argument("--bound", type=float, default=1.0, help="feature norm B (default: 1)")
    p.add_argument("--rho", type=float, default=0.5, help="shared-block weight (default: 0.5)")
    p.add_argument("--scale-min", type=float, default=0.1, help="smallest theta scale")
    p.add_argument("--scale-max", type=float, default=30.0, help="largest theta scale")
    p.add_argument("--seed", type=int, default=0, help="PRNG seed (default: 0)")
    p.add_argument("--quick", action="store_true", help="small run (a few seconds)")
    p.add_argument("--out", default="results/curvature", help=HELP_OUT)
    p.add_argument("--figures-dir", default=None, help="also copy curvature.png here")
    p.set_defaults(func=run)


def sample_thetas(key, dim: int, n: int, scale_min: float, scale_max: float):
    """(n, D) θ = s·z/√k-free Gaussian directions z ~ N(0, I) with s log-uniform."""
    import jax
    import jax.numpy as jnp

    k_s, k_z = jax.random.split(key)
    s = jnp.exp(
        jax.random.uniform(k_s, (n, 1), minval=jnp.log(scale_min), maxval=jnp.log(scale_max))
    )
    return s * jax.random.normal(k_z, (n, dim))


def measure(key, params, n: int, scale_min: float, scale_max: float):
    """(σ, ‖g‖, ‖H‖_op), each (n, N), at n random θ."""
    import jax

    from gpolab import engine
    from gpolab.envs import loglinear

    with engine.prng_mode():
        thetas = sample_thetas(key, params.dim, n, scale_min, scale_max)
        out = jax.jit(jax.vmap(lambda th: loglinear.curvature_norms(params, th)))(thetas)
    return out


def plot(df, bound: float, fits: dict, path) -> str:
    """Two panels: ‖g_x‖ and ‖H_x‖_op against σ_x, bound dashed, fitted constant dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    s = np.linspace(0, 0.5, 50)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), constrained_layout=True)
    panels = [
        ("grad_norm", "‖g_x‖ = ‖∇p_x‖", 2 * bound, "2Bσ_x (bound)", bound),
        ("hess_norm", "‖H_x‖_op = ‖∇²p_x‖_op", 4 * bound**2, "4B²σ_x (bound)", bound**2),
    ]
    for ax, (col, ylabel, slope, blabel, scale) in zip(axes, panels, strict=True):
        ax.scatter(df["sigma"], df[col], s=3, alpha=0.25, color="C0", label="exact, random θ")
        ax.plot(s, slope * s, "k--", lw=1.4, label=blabel)
        c = fits[col]["max_ratio"]
        ax.plot(s, c * scale * s, ":", color="C3", lw=1.6, label=f"tightest C·σ_x, C = {c:.3f}")
        ax.set(xlabel="reward std σ_x = √(p_x(1 − p_x))", ylabel=ylabel, xlim=(0, 0.52))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"Curvature law on the log-linear bandit (B = {bound:g}), arXiv 2601.23135")
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return str(path)


def run(args) -> int:
    import json
    import shutil
    import time
    from pathlib import Path

    import jax
    import numpy as np
    import pandas as pd

    from gpolab import validate
    from gpolab.envs import loglinear
    from gpolab.theory import curvature as theory

    if args.quick:
        args.thetas = min(args.thetas, 60)
    validate.integer("thetas", args.thetas, 1)
    validate.real("scale-min", args.scale_min, low=0.0, open_low=True)
    validate.real("scale-max", args.scale_max, low=args.scale_min)
    params = loglinear.make(
        args.seed,
        prompts=args.prompts,
        responses=args.responses,
        block=args.block,
        bound=args.bound,
        rho=args.rho,
    )
    t0 = time.perf_counter()
    sigma, gnorm, hnorm = (
        np.asarray(a, np.float64)
        for a in measure(
            jax.random.key(args.seed + 1), params, args.thetas, args.scale_min, args.scale_max
        )
    )
    df = pd.DataFrame(
        dict(
            theta=np.repeat(np.arange(args.thetas), args.prompts),
            prompt=np.tile(np.arange(args.prompts), args.thetas),
            sigma=sigma.ravel(),
            grad_norm=gnorm.ravel(),
            hess_norm=hnorm.ravel(),
        )
    )
    B = args.bound
    fits = {
        "grad_norm": theory.fit_constant(df["grad_norm"], df["sigma"], B),
        "hess_norm": theory.fit_constant(df["hess_norm"], df["sigma"], B**2),
    }
    holds = {
        "grad_bound_holds": bool(np.all(gnorm <= theory.gradient_bound(sigma, B) + 1e-6)),
        "hess_bound_holds": bool(np.all(hnorm <= theory.hessian_bound(sigma, B) + 1e-6)),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "curvature.csv", index=False)
    summary = dict(
        points=len(df),
        sigma_range=[float(sigma.min()), float(sigma.max())],
        grad=fits["grad_norm"],
        hess=fits["hess_norm"],
        **holds,
        seconds=time.perf_counter() - t0,
    )
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    fig = plot(df, B, fits, out / "curvature.png")
    if args.figures_dir:
        Path(args.figures_dir).mkdir(parents=True, exist_ok=True)
        shutil.copy(fig, Path(args.figures_dir) / "curvature.png")
    g, h = fits["grad_norm"], fits["hess_norm"]
    print(
        f"{len(df)} (theta, prompt) points, sigma in [{sigma.min():.3g}, {sigma.max():.3g}]\n"
        f"||g_x|| <= C B sigma_x: tightest C = {g['max_ratio']:.4f} (bound 2), "
        f"LS slope {g['ls_slope']:.4f}; holds: {holds['grad_bound_holds']}\n"
        f"||H_x||_op <= C B^2 sigma_x: tightest C = {h['max_ratio']:.4f} (bound 4), "
        f"LS slope {h['ls_slope']:.4f}; holds: {holds['hess_bound_holds']}\n"
        f"wrote {out / 'curvature.csv'}, {out / 'summary.json'}, {fig}"
    )
    return 0
