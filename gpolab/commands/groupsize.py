"""``gpolab groupsize``: the optimal group size at a fixed per-step budget N = B·G.

[U] arXiv 2603.01162 Thm 7; DESIGN §3–4.  Default mode (fixed θ): the Monte Carlo MSE of the loo
mini-batch gradient over every divisor G ≥ 2 of each N on the bandit, against the exact
[c1·G + C2 + C3/(G − 1)]/N, with the predicted and empirical best G per N.  ``--train``: SGD with
N responses per step on the bandit and the arithmetic surrogate, the final suboptimality gap per
G over many seeds, for each N and step schedule.  Writes results.parquet, results.csv,
summary.json and groupsize_mse.png / groupsize_train.png to ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses

HELP = {
    "N": "comma list of per-step budgets N = B*G (every divisor G >= 2 is measured)",
    "seeds": "Monte Carlo seeds per cell (fixed) or SGD runs per cell (train)",
    "chunk": "seeds per compiled chunk (0: sized to the CPU cache; results do not depend on it)",
    "seed": "master PRNG seed; seed i uses fold_in(key, i)",
    "kind": "bandit policy: tabular or loglinear",
    "prompts": "bandit: number of prompts P",
    "actions": "bandit: actions per prompt A",
    "logit_scale": "bandit: std of the initial logits",
    "success_a": "bandit: success probabilities ~ Beta(success_a, success_b)",
    "success_b": "bandit: success probabilities ~ Beta(success_a, success_b)",
    "instance_seed": "seed of the bandit instance / arithmetic questions and pre-training",
    "envs": "train: comma list of bandit, arithmetic",
    "schedules": "train: comma list of constant, decay (eta_t = eta0 / (1 + t/tau))",
    "bandit_N": "train, bandit: comma list of budgets N per step",
    "bandit_steps": "train, bandit: SGD steps",
    "bandit_eta_constant": "train, bandit: constant step size",
    "bandit_eta_decay": "train, bandit: eta0 of the decaying schedule",
    "bandit_tau": "train, bandit: tau of the decaying schedule",
    "arithmetic_N": "train, arithmetic: comma list of budgets N per step",
    "arithmetic_steps": "train, arithmetic: SGD steps",
    "arithmetic_eta_constant": "train, arithmetic: constant step size",
    "arithmetic_eta_decay": "train, arithmetic: eta0 of the decaying schedule",
    "arithmetic_tau": "train, arithmetic: tau of the decaying schedule",
    "questions": "train, arithmetic: number of questions",
    "hidden": "train, arithmetic: GRU width",
    "policy": "train, arithmetic: starting policy base, instruct or icl",
    "truth_samples": "train, arithmetic: sequences per question for the Monte Carlo S2 of the "
    "prediction",
}

# --quick: each mode under a minute on 2 CPU cores (flags given explicitly still win)
QUICK_FIXED = {"seeds": 2000}
QUICK_TRAIN = {
    "seeds": 64,
    "bandit_N": (64,),
    "bandit_steps": 60,
    "arithmetic_N": (16,),
    "arithmetic_steps": 20,
    "questions": 100,
    "truth_samples": 32,
}


def _configs():
    from gpolab.groupsize import FixedConfig, TrainConfig

    return FixedConfig, TrainConfig


def register(sub) -> None:
    p = sub.add_parser(
        "groupsize",
        help="optimal group size G at a fixed budget N = B*G (2603.01162 Thm 7)",
        description="Fixed theta (default): Monte Carlo MSE of the leave-one-out mini-batch "
        "gradient over every divisor G of N on the bandit, against the exact fixed-N MSE and its "
        "minimiser 1 + sqrt(C3/c1) (the paper: sqrt(c3/c1)).  --train: final suboptimality gap "
        "of SGD with N responses per step over many seeds, per G, N and step schedule, on the "
        "bandit and the arithmetic surrogate.",
    )
    p.add_argument("--train", action="store_true", help="run the SGD training check")
    p.add_argument("--quick", action="store_true", help="a reduced size (< 1 minute)")
    p.add_argument("--json", action="store_true", help="print rows and summary as JSON lines")
    p.add_argument(
        "--out", default=None, help="output directory (default: results/groupsize[-train])"
    )
    fixed, train = _field_sets()
    seen = set()
    for f in fixed + train:
        if f.name in seen:
            continue
        seen.add(f.name)
        flag = "--" + f.name.replace("_", "-")
        shown = ",".join(map(str, f.default)) if isinstance(f.default, tuple) else f.default
        p.add_argument(
            flag, dest=f.name, type=str, default=None, help=f"{HELP[f.name]} (default: {shown})"
        )
    p.set_defaults(func=run)


def _field_sets():
    """The fields of both configs, read without importing JAX (parsed from the dataclasses)."""
    FixedConfig, TrainConfig = _configs()
    return list(dataclasses.fields(FixedConfig)), list(dataclasses.fields(TrainConfig))


def _coerce(cls, name: str, text):
    """A flag's text (or a quick override) as the type of the field's default."""
    from gpolab import validate

    default = getattr(cls(), name)
    if not isinstance(text, str):
        return text
    try:
        if isinstance(default, tuple):
            kind = type(default[0])
            return tuple(kind(s.strip()) for s in text.split(",") if s.strip())
        return type(default)(text)
    except ValueError:
        kind = "a comma list" if isinstance(default, tuple) else f"a {type(default).__name__}"
        raise validate.ConfigError(f"{name}: got {text!r}; allowed: {kind}") from None


def build_config(args: argparse.Namespace):
    """The chosen mode's config: dataclass defaults, then --quick, then the flags given."""
    from gpolab import validate

    FixedConfig, TrainConfig = _configs()
    cls = TrainConfig if args.train else FixedConfig
    names = {f.name for f in dataclasses.fields(cls)}
    other = {f.name for f in dataclasses.fields(FixedConfig if args.train else TrainConfig)}
    changes = dict((QUICK_TRAIN if args.train else QUICK_FIXED) if args.quick else {})
    for name in names | other:
        value = getattr(args, name, None)
        if value is None:
            continue
        if name not in names:
            mode = "--train" if args.train else "the fixed-theta mode"
            raise validate.ConfigError(
                f"{name}: not a setting of {mode}; allowed: {', '.join(sorted(names))}"
            )
        changes[name] = value
    return cls(**{k: _coerce(cls, k, v) for k, v in changes.items()})


def plot_fixed(df, summary: list[dict], path) -> str:
    """MSE vs G at fixed N: one line per N (log axes, 95% CI bands), the exact curve over
    continuous G dashed, the exact minimiser 1 + √(C3/c1) and the paper's √(c3/c1) marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from gpolab.theory import groupsize as theory

    fig, ax = plt.subplots(figsize=(6.4, 4.6), constrained_layout=True)
    c = theory.Constants(*(summary[0][k] for k in ("c1", "C2", "C3", "C2_se", "C3_se")))
    for i, s in enumerate(summary):
        N = s["N"]
        sub = df[df["N"] == N].sort_values("G")
        color = f"C{i}"
        G = sub["G"].to_numpy(float)
        ax.plot(G, sub["mse"], "o", color=color, ms=5, mfc="none", label=f"N = {N} (Monte Carlo)")
        ax.fill_between(G, sub["mse_ci_low"], sub["mse_ci_high"], color=color, alpha=0.25, lw=0)
        grid = np.geomspace(2, N, 200)
        ax.plot(grid, [theory.fixed_n_mse(c, N, g) for g in grid], "--", color=color, lw=1)
        best = sub.loc[sub["mse"].idxmin()]
        ax.plot(best["G"], best["mse"], "*", color=color, ms=11)
    ax.axvline(
        c.g_star_exact,
        color="k",
        ls=":",
        lw=1.2,
        label=f"exact G* = 1 + √(C3/c1) = {c.g_star_exact:.2f}",
    )
    ax.axvline(
        c.g_star_paper, color="0.5", ls="-.", lw=1, label=f"paper √(c3/c1) = {c.g_star_paper:.2f}"
    )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="group size G (B = N/G prompts)",
        ylabel="MSE of the loo mini-batch gradient",
        title="Fixed budget N = B·G: MSE vs G (★ empirical best, dashed exact)",
    )
    ax.set_xscale("log", base=2)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)


def plot_train(df, summary: list[dict], path) -> str:
    """Final gap vs G with 95% CI, one panel per env, one line per (N, schedule); the predicted
    best divisor per N and the continuous G* marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(dict.fromkeys(df["env"]))
    fig, axes = plt.subplots(
        1, len(envs), figsize=(5.6 * len(envs), 4.4), constrained_layout=True, squeeze=False
    )
    for ax, env in zip(axes[0], envs, strict=True):
        sub_env = df[df["env"] == env]
        lines = list(dict.fromkeys(zip(sub_env["N"], sub_env["schedule"], strict=True)))
        for N, schedule in lines:
            sub = sub_env[(sub_env["N"] == N) & (sub_env["schedule"] == schedule)].sort_values("G")
            color, style = (
                f"C{sorted(set(sub_env['N'])).index(N)}",
                ("-" if schedule == "constant" else "--"),
            )
            r = sub.iloc[0]
            label = (
                f"N={N}, η={r['eta0']:g}"
                if schedule == "constant"
                else f"N={N}, η={r['eta0']:g}/(1+t/{r['tau']:g})"
            )
            ax.plot(sub["G"], sub["gap"], style, marker="o", ms=4, color=color, label=label)
            ax.fill_between(
                sub["G"], sub["gap_ci_low"], sub["gap_ci_high"], color=color, alpha=0.2, lw=0
            )
            best = sub.loc[sub["gap"].idxmin()]
            ax.plot(best["G"], best["gap"], "*", color=color, ms=11)
        s = next(s for s in summary if s["env"] == env)
        ax.axvline(
            s["g_star_exact"],
            color="k",
            ls=":",
            lw=1.2,
            label=f"predicted G* at θ0 = {s['g_star_exact']:.2f} (paper {s['g_star_paper']:.2f})",
        )
        r0 = sub_env.iloc[0]
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="group size G (B = N/G prompts per step)",
            ylabel="final gap J* − J(θ_n)",
            title=f"{env}: {int(r0['steps'])} SGD steps, {int(r0['n_seeds'])} seeds "
            f"(gap at θ0 {r0['gap0']:.3f})",
        )
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.suptitle("Final suboptimality gap vs group size at a fixed budget N = B·G (★ best G)")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)


def run(args) -> int:
    import json
    import time
    from pathlib import Path

    import pandas as pd

    from gpolab import groupsize
    from gpolab.output import prepare as check_writable
    from gpolab.output import write_tables

    cfg = build_config(args)
    (groupsize.validate_train if args.train else groupsize.validate_fixed)(cfg)
    out = args.out or ("results/groupsize-train" if args.train else "results/groupsize")
    check_writable(out)
    start = time.perf_counter()

    def show(row) -> None:
        if args.json:
            print(json.dumps(row), flush=True)
        elif args.train:
            print(
                f"{row['env']} N={row['N']} {row['schedule']} G={row['G']}: gap "
                f"{row['gap']:.4g} [{row['gap_ci_low']:.4g}, {row['gap_ci_high']:.4g}] "
                f"({row['seconds']:.1f}s)",
                flush=True,
            )
        else:
            print(
                f"N={row['N']} G={row['G']}: mse {row['mse']:.4g} [{row['mse_ci_low']:.4g}, "
                f"{row['mse_ci_high']:.4g}] exact {row['theory_mse']:.4g} "
                f"({row['seconds']:.1f}s)",
                flush=True,
            )

    if args.train:
        rows, summary = groupsize.run_train(cfg, on_row=show)
    else:
        rows, summary = groupsize.run_fixed(cfg, on_row=show)
    df = pd.DataFrame(rows)
    paths = write_tables(out, {"results": df})
    (Path(out) / "summary.json").write_text(json.dumps(summary, indent=1))
    plot = plot_train if args.train else plot_fixed
    fig = plot(
        df, summary, Path(out) / ("groupsize_train.png" if args.train else "groupsize_mse.png")
    )
    for s in summary:
        if args.json:
            print(json.dumps({"summary": s}))
            continue
        where = f"{s['env']} N={s['N']} {s['schedule']}" if args.train else f"N={s['N']}"
        print(
            f"{where}: empirical best G {s['empirical_best_G']} (tied within CI: "
            f"{s['tied_G']}); predicted best divisor {s['predicted_best_G']}, "
            f"G* = 1 + sqrt(C3/c1) = {s['g_star_exact']:.3f} ± {s['g_star_se']:.3f}, "
            f"paper sqrt(c3/c1) = {s['g_star_paper']:.3f}"
        )
    if not args.json:
        print(f"wrote {', '.join(map(str, paths))}, {fig} ({time.perf_counter() - start:.1f}s)")
    return 0
