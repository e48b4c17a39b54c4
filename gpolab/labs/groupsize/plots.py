"""Figures of the group-size lab, drawn from its saved ``results``, ``summary`` and ``curve``
tables only."""

from __future__ import annotations

from pathlib import Path

from gpolab.kit.plots import pyplot, save, seeds_label

EXACT = {"color": "k", "ls": ":", "lw": 1.2}  # the exact G* = 1 + √(C3/c1)
PAPER = {"color": "0.5", "ls": "-.", "lw": 1}  # the paper's √(c3/c1)


def _log_axes(ax, **labels) -> None:
    """Log-log axes (G in powers of 2) with a grid and ``labels`` (xlabel, ylabel, title)."""
    ax.set(xscale="log", yscale="log", **labels)
    ax.set_xscale("log", base=2)
    ax.grid(alpha=0.3, which="both")


def fixed_figure(tables: dict, path) -> Path:
    """MSE vs G at fixed N: one line per N (log axes, 95% CI bands), the exact curve over
    continuous G dashed, the exact minimiser 1 + √(C3/c1) and the paper's √(c3/c1) marked."""
    plt = pyplot()
    df, summary, curve = tables["results"], tables["summary"], tables["curve"]
    fig, ax = plt.subplots(figsize=(6.4, 4.6), constrained_layout=True)
    for i, N in enumerate(summary["N"]):
        sub = df[df["N"] == N].sort_values("G")
        color = f"C{i}"
        G = sub["G"].to_numpy(float)
        ax.plot(G, sub["mse"], "o", color=color, ms=5, mfc="none", label=f"N = {N} (Monte Carlo)")
        ax.fill_between(G, sub["mse_ci_low"], sub["mse_ci_high"], color=color, alpha=0.25, lw=0)
        line = curve[curve["N"] == N]
        ax.plot(line["G"], line["theory_mse"], "--", color=color, lw=1)
        best = sub.loc[sub["mse"].idxmin()]
        ax.plot(best["G"], best["mse"], "*", color=color, ms=11)
    s = summary.iloc[0]
    ax.axvline(
        s["g_star_exact"], **EXACT, label=f"exact G* = 1 + √(C3/c1) = {s['g_star_exact']:.2f}"
    )
    ax.axvline(s["g_star_paper"], **PAPER, label=f"paper √(c3/c1) = {s['g_star_paper']:.2f}")
    _log_axes(
        ax,
        xlabel="group size G (B = N/G prompts)",
        ylabel="MSE of the loo mini-batch gradient",
        title=f"MSE vs G at fixed N = B·G, {seeds_label(df)} (★ best, dashed exact)",
    )
    ax.legend(fontsize=8)
    return save(fig, path)


def train_figure(tables: dict, path) -> Path:
    """Final gap vs G with 95% CI, one panel per env, one line per (N, schedule); the empirical
    best G starred and the G* predicted at θ0 marked."""
    plt = pyplot()
    df, summary = tables["results"], tables["summary"]
    envs = list(dict.fromkeys(df["env"]))
    fig, axes = plt.subplots(
        1, len(envs), figsize=(5.6 * len(envs), 4.4), constrained_layout=True, squeeze=False
    )
    for ax, env in zip(axes[0], envs, strict=True):
        sub_env = df[df["env"] == env]
        Ns = sorted(set(sub_env["N"]))
        for N, schedule in dict.fromkeys(zip(sub_env["N"], sub_env["schedule"], strict=True)):
            sub = sub_env[(sub_env["N"] == N) & (sub_env["schedule"] == schedule)].sort_values("G")
            color, style = f"C{Ns.index(N)}", "-" if schedule == "constant" else "--"
            r = sub.iloc[0]
            eta = (
                f"{r['eta0']:g}" if schedule == "constant" else f"{r['eta0']:g}/(1+t/{r['tau']:g})"
            )
            ax.plot(
                sub["G"], sub["gap"], style, marker="o", ms=4, color=color, label=f"N={N}, η={eta}"
            )
            ax.fill_between(
                sub["G"], sub["gap_ci_low"], sub["gap_ci_high"], color=color, alpha=0.2, lw=0
            )
            best = sub.loc[sub["gap"].idxmin()]
            ax.plot(best["G"], best["gap"], "*", color=color, ms=11)
        s = summary[summary["env"] == env].iloc[0]
        label = f"predicted G* at θ0 = {s['g_star_exact']:.2f} (paper {s['g_star_paper']:.2f})"
        ax.axvline(s["g_star_exact"], **EXACT, label=label)
        r0 = sub_env.iloc[0]
        _log_axes(
            ax,
            xlabel="group size G (B = N/G prompts per step)",
            ylabel="final gap J* − J(θ_n)",
            title=f"{env}: {int(r0['steps'])} SGD steps, {seeds_label(sub_env)} "
            f"(gap at θ0 {r0['gap0']:.3f})",
        )
        ax.legend(fontsize=7)
    fig.suptitle("Final suboptimality gap vs group size at a fixed budget N = B·G (★ best G)")
    return save(fig, path)


def budget_figure(tables: dict, path) -> Path:
    """Rollouts to the target success rate vs G at equal total rollouts: one row of panels per
    env, one panel per pool size P, one line per N (95% CI bands), the best G starred and the
    rule's G ringed."""
    plt = pyplot()
    df, summary = tables["results"], tables["summary"]
    envs, Ps = list(dict.fromkeys(summary["env"])), list(dict.fromkeys(summary["pool"]))
    fig, axes = plt.subplots(
        len(envs),
        len(Ps),
        figsize=(4.2 * len(Ps), 3.6 * len(envs)),
        constrained_layout=True,
        squeeze=False,
    )
    for ax, (env, P) in zip(axes.flat, [(e, P) for e in envs for P in Ps], strict=True):
        mine = df[(df["env"] == env) & (df["pool"] == P)]
        for i, s in enumerate(
            summary[(summary["env"] == env) & (summary["pool"] == P)].itertuples()
        ):
            sub = mine[mine["N"] == s.N].sort_values("G")
            G = sub["G"].to_numpy(float)
            color = f"C{i}"
            ax.plot(G, sub["rollouts"], "o-", color=color, ms=4, lw=1, label=f"N = {s.N}")
            ax.fill_between(
                G, sub["rollouts_ci_low"], sub["rollouts_ci_high"], color=color, alpha=0.2, lw=0
            )
            at = sub.set_index("G")
            ax.plot(s.best_G, at.loc[s.best_G, "rollouts"], "*", color=color, ms=11)
            ax.plot(s.rule_G, at.loc[s.rule_G, "rollouts"], "o", mfc="none", color="k", ms=10)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("group size G")
        where = "prompts drawn afresh" if P == 0 else f"pool of P = {P} prompts"
        total = f"censored at {int(mine['total'].iloc[0]):,}" if len(mine) else ""
        ax.set_title(f"{env}: {where} ({total})", fontsize=9)
        ax.legend(fontsize=7)
    for row in axes:
        row[0].set_ylabel(f"rollouts to close {df['target'].iloc[0]:.0%} of the gap")
    fig.suptitle(f"Training optimum vs rule (★ best, ○ rule's G); {seeds_label(df)}", fontsize=9)
    return save(fig, path)
