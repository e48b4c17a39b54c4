"""``gpolab train``: SGD / Adam training of GRPO against REINFORCE on the log-linear bandit.

DESIGN §7, [N] arXiv 2601.23135.  Two regimes, both with exact diagnostics at every iterate:

* ``admissible`` — the premise of [N, Thm 1]: every method at its theoretically admissible step
  from the curvature law ‖H_x‖ ≤ cB²σ_x (:func:`gpolab.theory.curvature.admissible_steps`):
  GRPO at η = N/(cB²κ), REINFORCE (RLOO) at η = 1/L = N/(cB²σ_max κ) with σ_max = 1/2, and
  REINFORCE told the current smoothness constant (η_t = N/(cB²κ σ_max(θ_t)), an oracle; with equal
  σ_x across prompts it coincides with GRPO — the control).  Every ``--rho`` and the equal-σ
  control, exact gradients (G = ∞) and ``--gain-G`` sampled groups.
* ``tuned`` — every estimator × G (and G = ∞) × optimizer at its best step size on a log grid
  (vmapped over seeds and step sizes in one jit per configuration), for the first ``--rho`` and
  the control.

Reports per run: iterations to ``--target``, the final suboptimality gap, σ̄ and the mean pairwise
per-prompt gradient cosine along the trajectory; the gain of GRPO over REINFORCE against the
predicted σ_max/σ̄ (iterations) and √(σ̄/σ_max) (average gradient norm); finite-sample bias of
E ĝ_grpo at θ₀ (eps, ddof, zero-variance groups).
"""

from __future__ import annotations

import argparse

import numpy as np

GROUPSIZE_ENVS = ("bandit", "arithmetic")  # B·G = N training lives with the group-size lab
ENVS = ("loglinear", *GROUPSIZE_ENVS)
REGIMES = ("admissible", "tuned")
DEFAULTS = dict(
    seeds=16,
    steps=200,
    adm_steps=800,
    adm_seeds=16,
    G="2,8",
    estimators="grpo,mean,loo,grpo-batch",
    optimizers="sgd,adam",
    rho="0,0.3,0.6,0.9",
    bias_seeds=4096,
    lr_grid="1:10000:5",
    adam_lr_grid="0.01:1:3",
    gain_G="8,32",
)
QUICK = dict(
    seeds=4,
    steps=60,
    adm_steps=500,
    adm_seeds=4,
    G="8",
    estimators="grpo,loo",
    optimizers="sgd",
    rho="0,0.9",
    bias_seeds=256,
    lr_grid="10:1000:3",
    adam_lr_grid="0.03:0.3:2",
    gain_G="32",
)


def register(sub) -> None:
    p = sub.add_parser(
        "train",
        help="train GRPO vs REINFORCE (admissible and tuned steps, many seeds); gain and phases",
        description="Policy-gradient training on the log-linear bandit of arXiv 2601.23135 "
        "(DESIGN §7).  Writes summary.csv, gain.csv, finite_sample.csv and figures to --out.",
    )
    p.add_argument(
        "--env",
        default="loglinear",
        help="loglinear (this lab); bandit or arithmetic: SGD at a fixed budget N = B*G per "
        "step, the group-size lab's training check (gpolab groupsize --train; --seeds, --steps, "
        "--seed, --quick and --out carry over)",
    )
    p.add_argument("--regimes", default="admissible,tuned", help="comma list of admissible, tuned")
    p.add_argument("--estimators", default=DEFAULTS["estimators"], help="comma list (tuned regime)")
    p.add_argument(
        "--G", default=DEFAULTS["G"], help="comma list of group sizes, tuned (inf is added)"
    )
    p.add_argument(
        "--optimizers", default=DEFAULTS["optimizers"], help="comma list of sgd, adam (tuned)"
    )
    p.add_argument("--steps", type=int, default=None, help="tuned-regime steps (default: 200)")
    p.add_argument("--seeds", type=int, default=None, help="tuned-regime seeds (default: 16)")
    p.add_argument(
        "--lr-grid",
        default=DEFAULTS["lr_grid"],
        help="SGD step sizes: comma list or lo:hi:n log grid",
    )
    p.add_argument(
        "--adam-lr-grid", default=DEFAULTS["adam_lr_grid"], help="Adam step sizes (as --lr-grid)"
    )
    p.add_argument(
        "--adm-steps",
        type=int,
        default=DEFAULTS["adm_steps"],
        help="admissible-regime steps (default: 800)",
    )
    p.add_argument(
        "--adm-seeds",
        type=int,
        default=DEFAULTS["adm_seeds"],
        help="admissible-regime seeds (default: 16)",
    )
    p.add_argument(
        "--curv-const", type=float, default=4.0, help="c in L_x = cB²σ_x (default: 4, the bound)"
    )
    p.add_argument("--rho", default=DEFAULTS["rho"], help="comma list of ρ (first = main)")
    p.add_argument(
        "--control",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the equal-σ control (identical prompts)",
    )
    p.add_argument("--target", type=float, default=0.9, help="target J for iterations-to-target")
    p.add_argument(
        "--gain-G", default=DEFAULTS["gain_G"], help="comma list: sampled G, admissible regime"
    )
    p.add_argument("--eps", type=float, default=1e-4, help="grpo eps added to the std")
    p.add_argument("--ddof", type=int, default=1, help="grpo std ddof, 0 or 1")
    p.add_argument(
        "--bias-seeds", type=int, default=DEFAULTS["bias_seeds"], help="seeds of the bias table"
    )
    p.add_argument("--prompts", type=int, default=32, help="prompts N")
    p.add_argument("--responses", type=int, default=256, help="responses per prompt (>= 256)")
    p.add_argument("--block", type=int, default=8, help="feature block size k")
    p.add_argument(
        "--align", type=float, default=1.0, help="reward alignment with features (default: 1)"
    )
    p.add_argument("--seed", type=int, default=0, help="master PRNG seed")
    p.add_argument("--quick", action="store_true", help="tiny run (< 1 minute)")
    p.add_argument("--out", default=None, help="output directory (default: results/train)")
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
    regimes = [r.strip() for r in args.regimes.split(",") if r.strip()]
    for r in regimes or [""]:
        validate.choice("regimes", r, REGIMES)
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
    validate.integer("adm-steps", args.adm_steps, 1)
    validate.integer("adm-seeds", args.adm_seeds, 1)
    validate.real("curv-const", args.curv_const, low=0.0, open_low=True)
    gain_Gs = parse_list("gain-G", args.gain_G, int)
    for G in gain_Gs:
        validate.integer("gain-G", G, 2)
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
    return regimes, estimators, Gs, optimizers, rhos, grids, gain_Gs


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
    """Best step size and the per-run report of one configuration's curves.  Trajectory averages
    (σ̄, σ_max, cosine, ḡ) run over the iterations before the seed-mean curve hits ``target``."""
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
    smax_t = res["sigma_max"][i].mean(axis=0)[window]
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
        sigma_max=float(res["sigma_max"][i].max(axis=0)[window].max()),
        sigma_max_iter=float(smax_t.mean()),
        sigma_eff=float(res["sigma_eff"][i].mean(axis=0)[window].mean()),
        cos_mean=float(res["cos"][i].mean(axis=0)[window].mean()),
        cos_final=float(res["cos"][i].mean(axis=0)[-1]),
        gbar_rms=float(np.sqrt(np.mean(res["gbar"][i].mean(axis=0)[window] ** 2))),
        zero_frac=float(res["zero_frac"][i].mean()),
        ci_half=float(Z95 * Jb.std(axis=0, ddof=1).max() / np.sqrt(S)) if S > 1 else 0.0,
    )


def admissible_runs(args, rho: float) -> list[tuple[str, str, str, float]]:
    """(method, estimator, step rule, η) of the admissible regime at ρ."""
    from gpolab.theory import curvature

    eta = curvature.admissible_steps(args.prompts, rho, c=args.curv_const)
    return [
        ("grpo", "grpo", "constant", eta["grpo"]),
        ("reinforce", "loo", "constant", eta["reinforce"]),
        ("reinforce-iterate", "loo", "curvature", eta["reinforce_iterate"]),
    ]


def groupsize_train(args) -> int:
    """``--env bandit|arithmetic``: the training check of ``gpolab groupsize --train`` for that
    env (SGD with N = B·G responses per step, final gap per G over many seeds)."""
    from gpolab.commands import run_lab
    from gpolab.labs import groupsize

    typed = {"train": True, "env": args.env, "seed": args.seed, "out": args.out,
             "seeds": args.seeds, f"{args.env}_steps": args.steps}  # fmt: skip
    cfg = groupsize.resolve({k: v for k, v in typed.items() if v is not None}, quick=args.quick)
    flags = argparse.Namespace(fresh=False, json=False, figures_dir=args.figures_dir)
    return run_lab(groupsize, flags, cfg)


def run(args) -> int:
    import json
    import shutil
    import time
    from pathlib import Path

    import jax
    import pandas as pd

    from gpolab import train

    if args.env in GROUPSIZE_ENVS:
        return groupsize_train(args)
    for k, v in (QUICK if args.quick else DEFAULTS).items():  # the size of flags left unset
        if getattr(args, k) in (None, DEFAULTS[k]):
            setattr(args, k, v)
    args.out = args.out or "results/train"
    regimes, estimators, Gs, optimizers, rhos, grids, gain_Gs = check(args)
    env = train.loglinear_env()
    key = jax.random.key(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    settings = [(f"rho={r:g}", r, False) for r in rhos]
    if args.control:
        settings.append(("control", rhos[0], True))
    rows, curves = [], {}
    t_start = time.perf_counter()

    def record(regime, label, rho, equal, method, estimator, G, opt, step, lrs, res, seconds):
        res["lrs"] = np.asarray(lrs)
        row = dict(
            regime=regime,
            setting=label,
            rho=rho,
            prompts=args.prompts,
            control=equal,
            method=method,
            estimator=estimator,
            step_rule=step,
            optimizer=opt,
            G=float("inf") if G == train.EXACT else G,
        )
        row.update(summarize(res, args.target, env.optimum))
        row["seconds"] = seconds
        rows.append(row)
        curves[(regime, label, method, row["G"], opt)] = {
            k: v[row["lr_index"]] for k, v in res.items() if k != "lrs"
        }
        print(
            f"{regime:>10} {label:>8} {opt:4} G={row['G']:<4} {method:17} lr={row['best_lr']:<8.3g}"
            f" iters={row['iters']:<6g} final J={row['final_J']:.4f} ({seconds:.1f} s)",
            flush=True,
        )

    for label, rho, equal in settings:
        params = make_env(args, rho, equal)
        if "admissible" in regimes:
            for G in (train.EXACT, *gain_Gs):
                for method, e, step, lr in admissible_runs(args, rho):
                    run_ = train.Run(e, G, "sgd", args.adm_steps, args.ddof, step)
                    t0 = time.perf_counter()
                    res = train.train(run_, env, key, params, [lr], args.adm_seeds, args.eps)
                    dt = time.perf_counter() - t0
                    record(
                        "admissible", label, rho, equal, method, e, G, "sgd", step, [lr], res, dt
                    )
        if "tuned" in regimes and (equal or rho == rhos[0]):
            for opt in optimizers:
                for G in [*Gs, train.EXACT]:
                    for e in estimators:
                        run_ = train.Run(e, G, opt, args.steps, args.ddof)
                        t0 = time.perf_counter()
                        res = train.train(run_, env, key, params, grids[opt], args.seeds, args.eps)
                        dt = time.perf_counter() - t0
                        record(
                            "tuned",
                            label,
                            rho,
                            equal,
                            e,
                            e,
                            G,
                            opt,
                            "constant",
                            grids[opt],
                            res,
                            dt,
                        )
    summary = pd.DataFrame(rows)
    gains = gain_table(summary, curves, args.target)
    bias = bias_table(args, env, key, sorted({*Gs, *gain_Gs}))
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
        plot_phases(summary, curves, args, out / "train_phases.png"),
    ]
    if args.figures_dir:
        Path(args.figures_dir).mkdir(parents=True, exist_ok=True)
        for f in figs[1:]:
            shutil.copy(f, Path(args.figures_dir) / Path(f).name)
    total = time.perf_counter() - t_start
    (out / "run.json").write_text(json.dumps(dict(seconds=total, args=vars(args)), default=str))
    cols = [
        "regime",
        "setting",
        "optimizer",
        "G",
        "method",
        "best_lr",
        "iters",
        "final_J",
        "gap_q50",
        "sigma_bar",
        "cos_mean",
        "zero_frac",
    ]
    gcols = [
        "comparison",
        "setting",
        "optimizer",
        "G",
        "reinforce",
        "iters_reinforce",
        "iters_grpo",
        "gain",
        "gain_ci_low",
        "gain_ci_high",
        "pred_gain",
        "gnorm_ratio",
        "pred_gnorm_ratio",
        "cos_mean",
    ]
    with pd.option_context("display.width", 220, "display.max_columns", 30):
        print(summary[cols].to_string(index=False, float_format="%.4g"))
        print()
        print(gains[gcols].to_string(index=False, float_format="%.3g"))
        print()
        print(bias.to_string(index=False, float_format="%.3g"))
    print(
        f"\nwrote {out}/summary.csv, gain.csv, finite_sample.csv, {', '.join(figs)};"
        f" total {total:.1f} s"
    )
    return 0


COMPARISONS = {
    # name: (regime, REINFORCE methods, σ_max of the prediction)
    "admissible 1/L": ("admissible", ("reinforce",), "const"),
    "oracle 1/L_t": ("admissible", ("reinforce-iterate",), "iterate"),
    "tuned": ("tuned", ("mean", "loo", "vanilla"), "max"),
}


def gain_table(summary, curves, target: float):
    """Per comparison, setting, optimizer and G: iterations to ``target`` of GRPO and REINFORCE
    (tuned: the faster unnormalized estimator), the measured gain with a bootstrap CI over seeds
    (exact runs: one trajectory, no CI) and the prediction of [N, Thm 1] along GRPO's trajectory:
    σ_max/σ̄ in iterations (σ_max = 1/2 for the a-priori 1/L step; for the oracle 1/L_t step
    σ_max → mean_t s(θ_t)/κ, :func:`gpolab.theory.curvature.predicted_gain_iterate`, which is
    max_x σ_x at ρ = 0 and σ̄ at ρ = 1; the trajectory max for tuned steps), √(σ̄/σ_max) in the
    average gradient norm — compared with the measured ratio of rms_t mean_x ‖g_x(θ_t)‖ (GRPO over
    REINFORCE) over GRPO's iterations to target."""
    import pandas as pd

    from gpolab import train
    from gpolab.theory import curvature

    rows = []
    for name, (regime, methods, smax_kind) in COMPARISONS.items():
        sub = summary[summary.regime == regime]
        for (label, opt, G), grp in sub.groupby(["setting", "optimizer", "G"], sort=False):
            g = grp[grp.method == "grpo"]
            r = grp[grp.method.isin(methods)]
            if g.empty or r.empty:
                continue
            g = g.iloc[0]
            r = r.sort_values(["iters", "final_J"], ascending=[True, False]).iloc[0]
            Jg = curves[(regime, label, "grpo", G, opt)]["J"]
            Jr = curves[(regime, label, r.method, G, opt)]["J"]
            if Jg.shape[0] > 1:
                lo, hi = train.bootstrap_hit_ratio(Jr, Jg, target)
            else:
                lo = hi = float("nan")
            smax = {
                "const": 0.5,
                "iterate": g.sigma_bar
                * curvature.predicted_gain_iterate(g.sigma_eff, g.sigma_bar, int(g.prompts), g.rho),
                "max": g.sigma_max,
            }[smax_kind]
            cr = curves[(regime, label, r.method, G, opt)]["gbar"].mean(axis=0)
            end = int(g.iters) if np.isfinite(g.iters) else cr.size - 1
            r_rms = float(np.sqrt(np.mean(cr[: max(end, 1)] ** 2)))
            rows.append(
                dict(
                    comparison=name,
                    setting=label,
                    rho=g.rho,
                    control=g.control,
                    optimizer=opt,
                    G=G,
                    reinforce=r.method,
                    lr_grpo=g.best_lr,
                    lr_reinforce=r.best_lr,
                    iters_reinforce=r.iters,
                    iters_grpo=g.iters,
                    gain=float(np.float64(r.iters) / g.iters) if np.isfinite(g.iters) else np.nan,
                    gain_ci_low=lo,
                    gain_ci_high=hi,
                    pred_gain=smax / g.sigma_bar,
                    gnorm_ratio=g.gbar_rms / r_rms,
                    pred_gnorm_ratio=float(np.sqrt(g.sigma_bar / smax)),
                    sigma_bar=g.sigma_bar,
                    sigma_max=smax,
                    cos_mean=g.cos_mean,
                    cos_final=g.cos_final,
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
    "reinforce": "REINFORCE (RLOO), η = 1/L",
    "reinforce-iterate": "REINFORCE (RLOO), η_t = 1/L_t (oracle)",
}


def plot_curves(summary, curves, args, path) -> str:
    """J_t (mean over seeds, 95% CI band) per method, main setting: admissible steps (G = ∞ and
    --gain-G) and tuned steps (SGD, the largest sampled G), whichever regimes ran."""
    from gpolab.engine import Z95

    plt = _pyplot()
    main = summary.setting.iloc[0]
    panels = []
    for regime in ("admissible", "tuned"):
        sub = summary[(summary.regime == regime) & (summary.setting == main)]
        if sub.empty:
            continue
        opt = sub.optimizer.iloc[0]
        for G in sorted(sub.G.unique(), key=lambda g: -g)[:2]:
            panels.append((regime, opt, G, sub[(sub.G == G) & (sub.optimizer == opt)]))
    fig, axes = plt.subplots(
        1, len(panels), figsize=(4.6 * len(panels), 4), constrained_layout=True, squeeze=False
    )
    for ax, (regime, opt, G, sub) in zip(axes[0], panels, strict=True):
        for j, m in enumerate(sub.method):
            J = curves[(regime, main, m, G, opt)]["J"]
            mean = J.mean(axis=0)
            t = np.arange(mean.size)
            ax.plot(t, mean, color=f"C{j}", label=LABELS.get(m, m))
            if J.shape[0] > 1:
                h = Z95 * J.std(axis=0, ddof=1) / np.sqrt(J.shape[0])
                ax.fill_between(t, mean - h, mean + h, color=f"C{j}", alpha=0.2, lw=0)
        ax.axhline(args.target, color="k", ls="--", lw=1)
        name = "∞ (exact)" if not np.isfinite(G) else f"{G:g}"
        ax.set(xlabel="iteration t", ylabel="J_t", title=f"{regime}, {main}, {opt}, G = {name}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)


def plot_gain(gains, path) -> str:
    """(a) measured gain (iterations to target, REINFORCE over GRPO; 95% bootstrap CI for
    sampled runs) against ρ for the admissible a-priori and oracle steps, predictions thin
    dashed, equal-σ control as open squares; (b) the same against the mean pairwise gradient
    cosine; (c) tuned steps (best on the grid each): measured against predicted σ_max/σ̄."""
    plt = _pyplot()
    fig, axes = plt.subplots(
        1, 3, figsize=(16, 4.8), constrained_layout=True, gridspec_kw=dict(width_ratios=[5, 5, 4])
    )
    colors = {"admissible 1/L": "C0", "oracle 1/L_t": "C2"}
    marks = ["o", "s", "^", "D", "v"]
    adm = gains[gains.comparison.isin(list(colors))]
    Gs = sorted(adm.G.unique(), key=lambda g: -g)  # ∞ first
    for name, color in colors.items():
        for j, G in enumerate(Gs):
            grp = adm[(adm.comparison == name) & (adm.G == G)]
            if grp.empty:
                continue
            gname = "G = ∞" if not np.isfinite(G) else f"G = {G:g}"
            main = grp[~grp.control].sort_values("rho")
            err = np.vstack([main.gain - main.gain_ci_low, main.gain_ci_high - main.gain])
            err = np.where(np.isfinite(err), np.abs(err), 0.0)
            ls = "-" if j == 0 else (0, (4, 2 * j))
            for ax, x in ((axes[0], main.rho), (axes[1], main.cos_mean)):
                ax.errorbar(
                    x,
                    main.gain,
                    yerr=err,
                    marker=marks[j % 5],
                    ls=ls,
                    color=color,
                    capsize=3,
                    label=f"{name}, {gname}",
                )
                if j == 0:
                    ax.plot(x, main.pred_gain, ":", color=color, lw=1.5, label=f"predicted, {name}")
            ctrl = grp[grp.control]
            axes[0].plot(
                ctrl.rho - 0.02 * (j + 1),
                ctrl.gain,
                marker=marks[j % 5],
                ls="none",
                color=color,
                mfc="none",
                ms=10,
            )
    axes[0].plot([], [], "ks", mfc="none", ms=10, label="equal-σ control (ρ = 0, offset)")
    axes[0].set(
        xlabel="ρ (shared-block weight)",
        ylabel="gain = iters_REINFORCE / iters_GRPO",
        title="(a) admissible steps (curvature law, c = 4)",
    )
    axes[1].set(
        xlabel="mean pairwise cosine of g_x (GRPO, before target)",
        ylabel="gain",
        title="(b) gain against gradient alignment",
    )
    tuned = gains[gains.comparison == "tuned"]
    labels = []
    for i, (_, row) in enumerate(tuned.iterrows()):
        gname = "∞" if not np.isfinite(row.G) else f"{row.G:g}"
        labels.append(f"{row.setting}\n{row.optimizer} G={gname}")
        lo = row.gain - row.gain_ci_low if np.isfinite(row.gain_ci_low) else 0.0
        hi = row.gain_ci_high - row.gain if np.isfinite(row.gain_ci_high) else 0.0
        axes[2].errorbar(
            i,
            row.gain,
            yerr=[[abs(lo)], [abs(hi)]],
            fmt="ko",
            capsize=3,
            label="measured (95% CI)" if i == 0 else None,
        )
        axes[2].plot(
            i, row.pred_gain, "r_", ms=14, mew=2, label="predicted σ_max/σ̄" if i == 0 else None
        )
    axes[2].set_xticks(range(len(labels)), labels, fontsize=6, rotation=60)
    axes[2].set(ylabel="gain", title="(c) tuned steps (best of the grid each)")
    for ax in axes:
        ax.axhline(1.0, color="k", lw=0.8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6.5)
    fig.suptitle("Convergence gain of std-normalized GRPO over REINFORCE (SGD, target J)")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)


def phase_bounds(gain: np.ndarray) -> tuple[int, int]:
    """Phase boundaries from the level gain g(t) (nan-tolerant): phase I (acceleration) until g
    first reaches 90% of its peak, phase III (saturation) from the first time after the peak
    that g falls below 90% of it (or the end), phase II in between."""
    g = np.where(np.isfinite(gain), gain, np.nan)
    if not np.isfinite(g).any():
        return len(g) - 1, len(g) - 1
    peak = np.nanmax(g)
    t1 = int(np.nanargmax(g >= 0.9 * peak))
    tp = int(np.nanargmax(g))
    after = np.where((np.arange(len(g)) > tp) & (g < 0.9 * peak))[0]
    t2 = int(after[0]) if after.size else len(g) - 1
    return t1, max(t2, t1)


def plot_phases(summary, curves, args, path) -> str:
    """Admissible regime, exact gradients: σ̄_t, the mean pairwise gradient cosine and the level
    gain (iterations REINFORCE needs to reach GRPO's J_t, over t) along GRPO's trajectory, one
    column per ρ (smallest and largest) — the phases shaded from the gain against the oracle
    1/L_t step."""
    from gpolab import train

    plt = _pyplot()
    sub = summary[(summary.regime == "admissible") & ~summary.control & ~np.isfinite(summary.G)]
    if sub.empty:
        sub = summary[~summary.control & (summary.optimizer == "sgd")]
        regime, G = "tuned", float("inf")
    else:
        regime, G = "admissible", float("inf")
    rhos = sorted(sub.rho.unique())
    show = [rhos[0]] + ([rhos[-1]] if len(rhos) > 1 else [])
    fig, axes = plt.subplots(
        3,
        len(show),
        figsize=(5.5 * len(show), 8),
        sharex=True,
        constrained_layout=True,
        squeeze=False,
    )
    for c, rho in enumerate(show):
        label = sub[sub.rho == rho].setting.iloc[0]
        kg = (regime, label, "grpo", G, "sgd")
        if kg not in curves:
            continue
        cg = curves[kg]
        t = np.arange(cg["J"].shape[-1])
        axes[0, c].plot(t, cg["sigma_bar"].mean(0), color="C0", label="σ̄_t (GRPO)")
        axes[0, c].plot(t, cg["sigma_max"].mean(0), color="C0", ls=":", label="max_x σ_x (GRPO)")
        axes[0, c].plot(t, cg["J"].mean(0), color="k", lw=1, label="J_t (GRPO)")
        axes[1, c].plot(t, cg["cos"].mean(0), color="C0", label="GRPO")
        first = None
        for j, m in enumerate(("reinforce", "reinforce-iterate", "loo")):
            kr = (regime, label, m, G, "sgd")
            if kr not in curves:
                continue
            gain = train.level_gain(cg["J"].mean(0), curves[kr]["J"].mean(0))
            gain[: max(5, t.size // 50)] = np.nan  # a ratio of a few iterations: not a rate
            axes[2, c].plot(t, gain, color=f"C{j + 1}", label=f"vs {LABELS.get(m, m)}")
            axes[1, c].plot(
                t, curves[kr]["cos"].mean(0), color=f"C{j + 1}", ls="--", label=LABELS.get(m, m)
            )
            if m == "reinforce-iterate" or first is None:
                first = gain  # phases from the oracle comparison (the control's gain is 1)
        if first is not None:
            t1, t2 = phase_bounds(first)
            for ax in axes[:, c]:
                ax.axvspan(0, t1, color="tab:green", alpha=0.08)
                ax.axvspan(t1, t2, color="tab:gray", alpha=0.08)
                ax.axvspan(t2, t[-1], color="tab:red", alpha=0.08)
            for x, txt in ((t1 / 2, "I"), ((t1 + t2) / 2, "II"), ((t2 + t[-1]) / 2, "III")):
                axes[2, c].text(x, 1.0, txt, ha="center", va="bottom", fontsize=11)
        axes[0, c].set(ylabel="σ (and J)", title=f"{label}, {regime} steps, G = ∞")
        axes[1, c].set(ylabel="mean pairwise cos(g_x, g_z)", ylim=(-0.05, 1.0))
        axes[2, c].axhline(1.0, color="k", lw=0.8, ls="--")
        axes[2, c].set(xlabel="iteration t (GRPO)", ylabel="level gain at GRPO's J_t")
        for ax in axes[:, c]:
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle(
        "Gain along training (I/II/III: heuristic phases from the gain vs the oracle step)"
    )
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)
