"""The figures of the allocation lab, drawn from its saved tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpolab.kit.plots import pyplot, save

STYLE = {  # one color per rule: gpolab's in reds and purples, the published rules in the rest
    "uniform": ("k", "o", "-"),
    "uniform-gstar": ("0.5", "o", "--"),
    "gpolab-oracle": ("C3", "*", "--"),
    "gpolab-drop": ("#e377c2", "x", ":"),
    "gpolab-sample": ("C4", "P", "-."),
    "gpolab": ("C3", "s", "-"),
    "knapsack": ("C0", "^", "-"),
    "knapsack-grpo": ("C0", "^", ":"),
    "gpolab-knapsack-truth": ("C0", "*", "--"),
    "gpolab-knapsack-simple": ("C0", "^", "-."),
    "greso": ("C1", "v", "-"),
    "vip": ("C2", "D", "-"),
    "gvm": ("C9", "<", "-"),
    "gpolab-gvm-last": ("C9", "<", "-."),
    "mopps": ("C5", ">", "-"),
    "pods": ("C8", "h", "-"),
    "reinforce-ada": ("#8c6d31", "p", "-"),
    "pilot-commit": ("#17becf", "d", "-"),
    "pilot-commit-grpo": ("#17becf", "d", ":"),
    "gpolab-sgpo": ("#9467bd", "X", "-."),
    "gpolab-hora": ("#d62728", "H", ":"),
}


def _style(rule: str, i: int) -> dict:
    color, marker, line = STYLE.get(rule, (f"C{i % 10}", "o^vD<>phx"[i % 9], "-"))
    return {"color": color, "marker": marker, "ls": line}


def mse_figure(tables: dict, path) -> Path:
    """MSE (left) and cos with the exact gradient (right) against rollouts per step, one line
    per rule (Monte Carlo, ±1 SE bars)."""
    res = tables["results"]
    plt = pyplot()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.4), constrained_layout=True)
    for i, (rule, cur) in enumerate(res.groupby("rule", sort=False)):
        cur = cur.sort_values("rollouts")
        st = _style(rule, i)
        ax.errorbar(cur["rollouts"], cur["mse"], yerr=cur["mse_se"], label=rule, ms=4, **st)
        bx.errorbar(cur["rollouts"], cur["cos"], yerr=cur["cos_se"], label=rule, ms=4, **st)
    ax.set(
        xscale="log", yscale="log", xlabel="rollouts per step", ylabel="MSE of the step's gradient"
    )
    bx.set(xscale="log", xlabel="rollouts per step", ylabel="cos(ĝ, g)")
    budgets = sorted(int(b) for b in res["budget"].unique())
    for a in (ax, bx):
        a.grid(alpha=0.3, which="both")
        a.set_xticks(budgets, [str(b) for b in budgets])
        a.xaxis.set_minor_formatter(plt.NullFormatter())
    ax.legend(fontsize=7, ncol=2)
    est = res["estimator"].iloc[0] if "estimator" in res else ""
    fig.suptitle(f"Allocation rules at equal rollouts ({est}, exact gradient of the bandit)")
    return save(fig, path)


def training_figure(tables: dict, path) -> Path:
    """Suboptimality gap (left) and success rate (right) against cumulative rollouts, mean over
    runs with 95% bands."""
    tr = tables["training"]
    plt = pyplot()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.4), constrained_layout=True)
    for i, (rule, cur) in enumerate(tr.groupby("rule", sort=False)):
        st = _style(rule, i)
        x = cur["rollouts"].to_numpy()
        for a, col in ((ax, "gap"), (bx, "success")):
            y, ci = cur[col].to_numpy(), cur[f"{col}_ci"].to_numpy()
            a.plot(x, y, color=st["color"], ls=st["ls"], lw=1.3, label=rule)
            a.fill_between(x, y - ci, y + ci, color=st["color"], alpha=0.12, lw=0)
    ax.set(yscale="log", xlabel="cumulative rollouts", ylabel="suboptimality gap J* − J(θ)")
    bx.set(xlabel="cumulative rollouts", ylabel="success rate J(θ)")
    for a in (ax, bx):
        a.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    runs = int(tr["runs"].iloc[0]) if len(tr) else 0
    fig.suptitle(f"Training with each allocation rule ({runs} runs each, 95% bands)")
    return save(fig, path)


def sizes_figure(tables: dict, path) -> Path:
    """The mean group size each rule gives a prompt against its success probability, at the
    middle budget."""
    al = tables["allocation"]
    budgets = np.sort(al["budget"].unique())
    budget = budgets[len(budgets) // 2]
    cur = al[al["budget"] == budget]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.4), constrained_layout=True)
    for i, (rule, r) in enumerate(cur.groupby("rule", sort=False)):
        r = r.sort_values("p")
        st = _style(rule, i)
        ax.plot(
            r["p"],
            r["G"],
            label=rule,
            ms=4,
            lw=0,
            alpha=0.8,
            color=st["color"],
            marker=st["marker"],
        )
    ax.set(xlabel="prompt success probability p_x", ylabel="mean group size G_x", xscale="log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.suptitle(
        f"Allocated group size against difficulty (budget {budget} = "
        f"{budget // cur['prompt'].nunique()} per prompt on average)"
    )
    return save(fig, path)
