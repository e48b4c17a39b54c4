"""``gpolab train``: SGD / Adam training of GRPO against REINFORCE on the log-linear bandit.

DESIGN §7, [N] arXiv 2601.23135.  For the main setting (the first ``--rho``) every estimator ×
G (and G = ∞, the exact-gradient mode) × optimizer is trained over a log grid of step sizes,
vmapped over seeds and step sizes in one jit per configuration.  Further ``--rho`` values and the
equal-σ control run GRPO and the REINFORCE estimators (mean, loo) at ``--gain-G`` and G = ∞ with
SGD only.  Reports per estimator at its best step size: iterations to ``--target``, the final
suboptimality gap, σ̄ along the trajectory and the mean per-prompt gradient cosine; the gain
of GRPO over REINFORCE against the prediction; finite-sample bias at θ₀.
"""

from __future__ import annotations

import argparse

import numpy as np

ENVS = ("loglinear",)
QUICK = dict(
    seeds=6, steps=80, G="4", estimators="grpo,loo", optimizers="sgd", rho="0,0.9", bias_seeds=256
)


def register(sub) -> None:
    p = sub.add_parser(
        "train",
        help="train GRPO vs REINFORCE (SGD/Adam, step-size grid, many seeds); gain and phases",
        description="Policy-gradient training on the log-linear bandit of arXiv 2601.23135 "
        "(DESIGN §7).  Writes summary.csv, gain.csv, finite_sample.csv and figures to --out.",
    )
    p.add_argument("--env", default="loglinear", help="environment (allowed: loglinear)")
    p.add_argument("--estimators", default="grpo,mean,loo,grpo-batch", help="comma list")
    p.add_argument("--G", default="2,4,8,16", help="comma list of group sizes (inf is added)")
    p.add_argument("--optimizers", default="sgd,adam", help="comma list of sgd, adam")
    p.add_argument("--steps", type=int, default=300, help="training steps (default: 300)")
    p.add_argument("--seeds", type=int, default=32, help="seeds per configuration (default: 32)")
    p.add_argument(
        "--lr-grid", default="1:10000:9", help="SGD step sizes: comma list or lo:hi:n log grid"
    )
    p.add_argument("--adam-lr-grid", default="0.003:10:8", help="Adam step sizes (as --lr-grid)")
    p.add_argument("--rho", default="0,0.5,0.9", help="comma list of ρ (first = main setting)")
    p.add_argument(
        "--control",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the equal-σ control (identical prompts)",
    )
    p.add_argument("--target", type=float, default=0.9, help="target J for iterations-to-target")
    p.add_argument("--gain-G", type=int, default=8, help="sampled G of the ρ sweep and control")
    p.add_argument("--eps", type=float, default=1e-4, help="grpo eps added to the std")
    p.add_argument("--ddof", type=int, default=1, help="grpo std ddof, 0 or 1")
    p.add_argument("--bias-seeds", type=int, default=4096, help="seeds of the bias table")
    p.add_argument("--prompts", type=int, default=32, help="prompts N")
    p.add_argument("--responses", type=int, default=256, help="responses per prompt (>= 256)")
    p.add_argument("--block", type=int, default=8, help="feature block size k")
    p.add_argument("--align", type=float, default=0.5, help="reward alignment with features")
    p.add_argument("--seed", type=int, default=0, help="master PRNG seed")
    p.add_argument("--quick", action="store_true", help="tiny run (< 1 minute)")
    p.add_argument("--out", default="results/train", help="output directory")
    p.add_argument("--figures-dir", default=None, help="also copy train_gain/phases.png here")
    p.set_defaults(func=run)


def parse_list(field: str, text: str, kind=float) -> list:
    """Comma list → values; raises ConfigError naming the field."""
    from gpolab import validate

    try:
        values = [kind(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise validate.ConfigError(
            f"{field}: got {text!r}; allowed: a comma list of {kind.__name__}s"
        ) from None
    if not values:
        raise validate.ConfigError(f"{field}: got an empty list; allowed: one or more values")
    return values


def parse_grid(field: str, text: str):
    """``lo:hi:n`` (log grid) or a comma list of positive step sizes."""
    import numpy as np

    from gpolab import validate

    if ":" in str(text):
        parts = str(text).split(":")
        try:
            lo, hi, n = float(parts[0]), float(parts[1]), int(parts[2])
        except (ValueError, IndexError):
            lo = hi = n = None
        if len(parts) != 3 or lo is None or not (0 < lo <= hi) or n < 1:
            raise validate.ConfigError(
                f"{field}: got {text!r}; allowed: lo:hi:n with 0 < lo <= hi, n >= 1, or a list"
            )
        return np.geomspace(lo, hi, n)
    values = np.asarray(parse_list(field, text))
    if np.any(values <= 0) or not np.all(np.isfinite(values)):
        raise validate.ConfigError(f"{field}: got {text!r}; allowed: positive step sizes")
    return values


def check(args):
    """Validate every flag in plain Python; returns the parsed settings."""
    from gpolab import train, validate

    validate.choice("env", args.env, ENVS)
    estimators = [e.strip() for e in args.estimators.split(",") if e.strip()]
    if not estimators:
        raise validate.ConfigError(
            "estimators: got an empty list; allowed: " + ", ".join(train.ESTIMATORS)
        )
    for e in estimators:
        validate.choice("estimators", e, train.ESTIMATORS)
    Gs = parse_list("G", args.G, int)
    for G in Gs:
        validate.integer("G", G, 2)
    optimizers = [o.strip() for o in args.optimizers.split(",") if o.strip()]
    for o in optimizers or [""]:
        validate.choice("optimizers", o, train.OPTIMIZERS)
    validate.integer("steps", args.steps, 1)
    validate.integer("seeds", args.seeds, 1)
    validate.integer("gain-G", args.gain_G, 2)
    validate.integer("bias-seeds", args.bias_seeds, 2)
    validate.real("target", args.target, 0.0, 1.0, open_low=True)
    validate.real("eps", args.eps, low=0.0)
    validate.choice("ddof", args.ddof, (0, 1))
    rhos = parse_list("rho", args.rho)
    for r in rhos:
        validate.real("rho", r, 0.0, 1.0)
    grids = {
        "sgd": parse_grid("lr-grid", args.lr_grid),
        "adam": parse_grid("adam-lr-grid", args.adam_lr_grid),
    }
    return estimators, Gs, optimizers, rhos, grids


def make_env(args, rho: float, equal: bool):
    from gpolab.envs import loglinear

    return loglinear.make(
        args.seed,
        prompts=args.prompts,
        responses=args.responses,
        block=args.block,
        rho=rho,
        align=args.align,
        equal=equal,
    )


def summarize(res: dict, target: float, optimum: float) -> dict:
    """Best step size and the per-run report of one configuration's curves."""
    import numpy as np

    from gpolab import train
    from gpolab.engine import Z95

    J = res["J"]
    i = train.best_lr_index(J, target)
    Jb = J[i]  # (S, T+1)
    mean = Jb.mean(axis=0)
    T = train.hit_time(mean, target)
    per_seed = train.hit_time(Jb, target)
    end = int(T) if np.isfinite(T) else Jb.shape[-1] - 1
    window = slice(0, max(end, 1))
    gap = optimum - Jb[:, -1]
    sbar = res["sigma_bar"][i].mean(axis=0)[window]
    smax = res["sigma_max"][i].max(axis=0)[window]
    S = Jb.shape[0]
    return dict(
        lr_index=i,
        best_lr=float(res["lrs"][i]),
        iters=float(T),
        iters_seed_median=float(np.median(per_seed)),
        reached_frac=float(np.mean(np.isfinite(per_seed))),
        final_J=float(mean[-1]),
        final_J_se=float(Jb[:, -1].std(ddof=1) / np.sqrt(S)) if S > 1 else 0.0,
        gap_mean=float(gap.mean()),
        gap_q10=float(np.quantile(gap, 0.1)),
        gap_q50=float(np.quantile(gap, 0.5)),
        gap_q90=float(np.quantile(gap, 0.9)),
        sigma_bar=float(sbar.mean()),
        sigma_max=float(smax.max()),
        pred_sqrt_ratio=float(np.sqrt(sbar.mean() / smax.max())),
        pred_speedup=float(smax.max() / sbar.mean()),
        cos_mean=float(res["cos"][i].mean(axis=0)[window].mean()),
        zero_frac=float(res["zero_frac"][i].mean()),
        ci_half=float(Z95 * Jb.std(axis=0, ddof=1).max() / np.sqrt(S)) if S > 1 else 0.0,
    )


def run(args) -> int:
    import json
    import shutil
    import time
    from pathlib import Path

    import jax
    import numpy as np
    import pandas as pd

    from gpolab import train

    if args.quick:
        for k, v in QUICK.items():
            setattr(args, k, v)
        args.lr_grid, args.adam_lr_grid = "10:10000:4", "0.01:10:4"
    estimators, Gs, optimizers, rhos, grids = check(args)
    env = train.loglinear_env()
    key = jax.random.key(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    settings = [(f"rho={r:g}", r, False) for r in rhos]
    if args.control:
        settings.append(("control", rhos[0], True))
    reinforce = [e for e in estimators if e in train.REINFORCE] or ["loo"]
    gain_estimators = ["grpo", *reinforce]
    rows, curves = [], {}
    t_start = time.perf_counter()
    for si, (label, rho, equal) in enumerate(settings):
        params = make_env(args, rho, equal)
        main = si == 0
        est_list = estimators if main else gain_estimators
        G_list = ([*Gs] if main else [args.gain_G]) + [train.EXACT]
        opt_list = optimizers if main else ["sgd"]
        for opt in opt_list:
            for G in G_list:
                for e in est_list:
                    run_ = train.Run(e, G, opt, args.steps, args.ddof)
                    t0 = time.perf_counter()
                    res = train.train(run_, env, key, params, grids[opt], args.seeds, args.eps)
                    res["lrs"] = grids[opt]
                    row = dict(setting=label, rho=rho, control=equal, estimator=e, optimizer=opt)
                    row["G"] = float("inf") if G == train.EXACT else G
                    row.update(summarize(res, args.target, env.optimum))
                    row["seconds"] = time.perf_counter() - t0
                    rows.append(row)
                    i = row["lr_index"]
                    curves[(label, e, row["G"], opt)] = {
                        k: v[i] for k, v in res.items() if k != "lrs"
                    }
                    print(
                        f"{label:>9} {opt:4} G={row['G']:<4} {e:10} lr*={row['best_lr']:<8.3g}"
                        f" iters={row['iters']:<6g} final J={row['final_J']:.4f}"
                        f" ({row['seconds']:.1f} s)",
                        flush=True,
                    )
    summary = pd.DataFrame(rows)
    gains = gain_table(summary, curves, args.target)
    bias = bias_table(args, env, key, Gs)
    summary.to_csv(out / "summary.csv", index=False)
    gains.to_csv(out / "gain.csv", index=False)
    bias.to_csv(out / "finite_sample.csv", index=False)
    np.savez_compressed(
        out / "curves.npz",
        **{"|".join(map(str, k)) + "|" + m: v for k, c in curves.items() for m, v in c.items()},
    )
    figs = [
        plot_curves(summary, curves, args, out / "train_curves.png"),
        plot_gain(gains, out / "train_gain.png"),
        plot_phases(summary, curves, settings, args, out / "train_phases.png"),
    ]
    if args.figures_dir:
        Path(args.figures_dir).mkdir(parents=True, exist_ok=True)
        for f in figs[1:]:
            shutil.copy(f, Path(args.figures_dir) / Path(f).name)
    total = time.perf_counter() - t_start
    (out / "run.json").write_text(json.dumps(dict(seconds=total, args=vars(args)), default=str))
    cols = [
        "setting",
        "optimizer",
        "G",
        "estimator",
        "best_lr",
        "iters",
        "final_J",
        "gap_q50",
        "sigma_bar",
        "cos_mean",
        "zero_frac",
    ]
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(summary[cols].to_string(index=False, float_format="%.4g"))
        print()
        print(gains.to_string(index=False, float_format="%.3g"))
        print()
        print(bias.to_string(index=False, float_format="%.3g"))
    print(
        f"\nwrote {out}/summary.csv, gain.csv, finite_sample.csv, {', '.join(figs)};"
        f" total {total:.1f} s"
    )
    return 0


def gain_table(summary, curves, target: float):
    """Per (setting, optimizer, G): iterations to target of GRPO and of the best REINFORCE
    estimator (mean/loo/vanilla), each at its best step size; measured gain with a bootstrap CI
    over seeds; predicted √(σ̄/σ_max) and σ_max/σ̄ along GRPO's trajectory."""
    import pandas as pd

    from gpolab import train

    rows = []
    for (label, opt, G), grp in summary.groupby(["setting", "optimizer", "G"], sort=False):
        g = grp[grp.estimator == "grpo"]
        r = grp[grp.estimator.isin(train.REINFORCE)]
        if g.empty or r.empty:
            continue
        g = g.iloc[0]
        r = r.sort_values(["iters", "final_J"], ascending=[True, False]).iloc[0]
        Jg = curves[(label, "grpo", G, opt)]["J"]
        Jr = curves[(label, r.estimator, G, opt)]["J"]
        lo, hi = train.bootstrap_hit_ratio(Jr, Jg, target)
        rows.append(
            dict(
                setting=label,
                rho=g.rho,
                control=g.control,
                optimizer=opt,
                G=G,
                reinforce=r.estimator,
                iters_reinforce=r.iters,
                iters_grpo=g.iters,
                gain=float(np.float64(r.iters) / g.iters) if np.isfinite(g.iters) else np.nan,
                gain_ci_low=lo,
                gain_ci_high=hi,
                pred_sqrt_ratio=g.pred_sqrt_ratio,
                pred_speedup=g.pred_speedup,
                sigma_bar=g.sigma_bar,
                sigma_max=g.sigma_max,
                cos_mean=g.cos_mean,
            )
        )
    return pd.DataFrame(rows)


def bias_table(args, env, key, Gs):
    """E ĝ_grpo at θ₀ against the exact Σ_x g_x/σ_x direction, for eps ∈ {1e-4, 1e-8} and
    ddof ∈ {0, 1}; zero-variance group fraction against p^G + (1 − p)^G."""
    import jax
    import pandas as pd

    from gpolab import train

    params = make_env(args, float(parse_list("rho", args.rho)[0]), False)
    theta0 = env.init(params)
    rows = []
    for G in Gs:
        for ddof in (0, 1):
            for eps in (1e-4, 1e-8):
                r = train.finite_sample_bias(
                    jax.random.fold_in(key, 1000 + G),
                    env,
                    params,
                    theta0,
                    G,
                    seeds=args.bias_seeds,
                    eps=eps,
                    ddof=ddof,
                )
                rows.append(dict(G=G, ddof=ddof, eps=eps, **r))
    return pd.DataFrame(rows)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


LABELS = {
    "grpo": "GRPO (std per prompt)",
    "grpo-batch": "GRPO (batch std)",
    "mean": "REINFORCE, mean baseline",
    "loo": "REINFORCE, RLOO",
    "vanilla": "REINFORCE, no baseline",
}


def plot_curves(summary, curves, args, path) -> str:
    """J_t (mean over seeds, 95% CI band) per estimator at its best step size, main setting, SGD:
    one panel at --gain-G (or the largest G run) and one exact (G = ∞)."""
    import numpy as np

    from gpolab.engine import Z95

    plt = _pyplot()
    main = summary.setting.iloc[0]
    sub = summary[(summary.setting == main) & (summary.optimizer == summary.optimizer.iloc[0])]
    sampled = sorted(g for g in sub.G.unique() if np.isfinite(g))
    G_show = args.gain_G if args.gain_G in sampled else sampled[-1]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True, sharey=True)
    for ax, G in zip(axes, [G_show, float("inf")], strict=True):
        for j, e in enumerate(sub.estimator.unique()):
            key = (main, e, G, sub.optimizer.iloc[0])
            if key not in curves:
                continue
            J = curves[key]["J"]
            m = J.mean(axis=0)
            t = np.arange(m.size)
            ax.plot(t, m, color=f"C{j}", label=LABELS.get(e, e))
            if J.shape[0] > 1:
                h = Z95 * J.std(axis=0, ddof=1) / np.sqrt(J.shape[0])
                ax.fill_between(t, m - h, m + h, color=f"C{j}", alpha=0.2, lw=0)
        ax.axhline(args.target, color="k", ls="--", lw=1, label=f"target J = {args.target:g}")
        ax.set(
            xlabel="iteration t",
            ylabel="J_t = mean_x p_x",
            title=f"{main}, {sub.optimizer.iloc[0].upper()}, G = {G:g} (best step size each)",
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return str(path)


def plot_gain(gains, path) -> str:
    """Measured gain of GRPO over REINFORCE (iterations to target, 95% bootstrap CI) against ρ
    and against the mean gradient cosine; predicted σ_max/σ̄ and √(σ̄/σ_max) dashed; control
    marked."""
    import numpy as np

    plt = _pyplot()
    sgd = gains[gains.optimizer == "sgd"] if (gains.optimizer == "sgd").any() else gains
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    for j, (G, grp) in enumerate(sgd.groupby("G", sort=True)):
        color = f"C{j}"
        name = "G = ∞ (exact)" if not np.isfinite(G) else f"G = {G:g}"
        for ax, xcol in zip(axes, ["rho", "cos_mean"], strict=True):
            main = grp[~grp.control].sort_values(xcol)
            err = np.abs(np.vstack([main.gain - main.gain_ci_low, main.gain_ci_high - main.gain]))
            ax.errorbar(
                main[xcol],
                main.gain,
                yerr=err,
                fmt="o-",
                color=color,
                capsize=3,
                label=f"measured, {name}",
            )
            ax.plot(
                main[xcol],
                main.pred_speedup,
                "--",
                color=color,
                lw=1.2,
                label=f"predicted σ_max/σ̄, {name}",
            )
            ax.plot(
                main[xcol],
                1 / main.pred_sqrt_ratio,
                ":",
                color=color,
                lw=1.2,
                label=f"predicted √(σ_max/σ̄), {name}",
            )
            ctrl = grp[grp.control]
            if not ctrl.empty:
                ax.plot(
                    ctrl[xcol],
                    ctrl.gain,
                    "s",
                    color=color,
                    mfc="none",
                    ms=9,
                    label=f"equal-σ control, {name}",
                )
    for ax, xlabel in zip(
        axes, ["ρ (shared-block weight)", "mean pairwise cosine of g_x"], strict=True
    ):
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set(xlabel=xlabel, ylabel="gain = iters(REINFORCE) / iters(GRPO)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("Convergence gain of std-normalized GRPO over REINFORCE (SGD, best step each)")
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return str(path)


def phase_bounds(gain: np.ndarray) -> tuple[int, int]:
    """Phase boundaries from the level gain g(t) (nan-tolerant): phase I (acceleration) until g
    first reaches 90% of its peak, phase III (saturation) from the first time after the peak
    that g falls below 90% of it (or the end), phase II in between."""
    import numpy as np

    g = np.where(np.isfinite(gain), gain, np.nan)
    if not np.isfinite(g).any():
        return len(g) - 1, len(g) - 1
    peak = np.nanmax(g)
    t1 = int(np.nanargmax(g >= 0.9 * peak))
    tp = int(np.nanargmax(g))
    after = np.where((np.arange(len(g)) > tp) & (g < 0.9 * peak))[0]
    t2 = int(after[0]) if after.size else len(g) - 1
    return t1, max(t2, t1)


def plot_phases(summary, curves, settings, args, path) -> str:
    """σ̄_t, mean gradient cosine and the level gain over training (SGD, exact gradients and
    --gain-G), for the main and the most shared ρ, phases I/II/III shaded."""
    import numpy as np

    from gpolab import train

    plt = _pyplot()
    main_rows = [s for s in settings if not s[2]]
    show = [main_rows[0]] + ([main_rows[-1]] if len(main_rows) > 1 else [])
    fig, axes = plt.subplots(
        3,
        len(show),
        figsize=(5.5 * len(show), 8),
        sharex=True,
        constrained_layout=True,
        squeeze=False,
    )
    for c, (label, _, _) in enumerate(show):
        sub = summary[(summary.setting == label) & (summary.optimizer == "sgd")]
        reinforce = sub[sub.estimator.isin(train.REINFORCE) & ~np.isfinite(sub.G)]
        r_est = reinforce.sort_values("iters").estimator.iloc[0] if len(reinforce) else "loo"
        for j, G in enumerate([float("inf"), float(args.gain_G)]):
            kg, kr = (label, "grpo", G, "sgd"), (label, r_est, G, "sgd")
            if kg not in curves or kr not in curves:
                continue
            cg, cr = curves[kg], curves[kr]
            name = "G = ∞" if not np.isfinite(G) else f"G = {G:g}"
            t = np.arange(cg["J"].shape[-1])
            axes[0, c].plot(t, cg["sigma_bar"].mean(0), color=f"C{j}", label=f"GRPO, {name}")
            axes[0, c].plot(
                t,
                cr["sigma_bar"].mean(0),
                "--",
                color=f"C{j}",
                label=f"REINFORCE ({r_est}), {name}",
            )
            axes[1, c].plot(t, cg["cos"].mean(0), color=f"C{j}", label=f"GRPO, {name}")
            axes[1, c].plot(t, cr["cos"].mean(0), "--", color=f"C{j}")
            gain = train.level_gain(cg["J"].mean(0), cr["J"].mean(0))
            axes[2, c].plot(t, gain, color=f"C{j}", label=f"{name}")
            if j == 0:
                t1, t2 = phase_bounds(gain)
                for ax in axes[:, c]:
                    ax.axvspan(0, t1, color="tab:green", alpha=0.08)
                    ax.axvspan(t1, t2, color="tab:gray", alpha=0.08)
                    ax.axvspan(t2, t[-1], color="tab:red", alpha=0.08)
                for x, txt in ((t1 / 2, "I"), ((t1 + t2) / 2, "II"), ((t2 + t[-1]) / 2, "III")):
                    axes[2, c].text(x, 1.0, txt, ha="center", va="bottom", fontsize=11)
        axes[0, c].set(ylabel="σ̄_t = mean_x σ_x", title=f"{label}, SGD, best step each")
        axes[1, c].set(ylabel="mean pairwise cos(g_x, g_z)")
        axes[2, c].axhline(1.0, color="k", lw=0.8, ls="--")
        axes[2, c].set(
            xlabel="iteration t (GRPO)", ylabel="gain: iters_REINFORCE(J_t) / t", xscale="log"
        )
        for ax in axes[:, c]:
            ax.grid(alpha=0.3)
        axes[0, c].legend(fontsize=7)
        axes[2, c].legend(fontsize=7)
    fig.suptitle("Three phases (shaded I/II/III from the exact-gradient gain curve)")
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return str(path)
