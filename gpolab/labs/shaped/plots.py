"""The figure of the shaped-reward lab, drawn from its saved ``training`` table only."""

from __future__ import annotations

from pathlib import Path

from gpolab.kit.plots import pyplot, save

STYLE = {"acc": "-", "score": "--"}


def training_figure(tables: dict, path) -> Path:
    """Accuracy J_acc over SGD steps, one colour per λ, solid = metric acc, dashed = score
    (±1 standard error shaded)."""
    df = tables["training"]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2), constrained_layout=True)
    for i, lam in enumerate(sorted(df["shaping_weight"].unique())):
        for metric, style in STYLE.items():
            d = df[(df["shaping_weight"] == lam) & (df["metric"] == metric)].sort_values("step")
            if d.empty:
                continue
            ax.plot(d["step"], d["J_acc"], style, color=f"C{i}", label=f"λ = {lam:g}, {metric}")
            lo, hi = d["J_acc"] - d["J_acc_se"], d["J_acc"] + d["J_acc_se"]
            ax.fill_between(d["step"], lo, hi, color=f"C{i}", alpha=0.2, lw=0)
    ax.set(xlabel="SGD step", ylabel="accuracy J_acc(θ) (exact)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("DAPO filter metric under a shaped reward: acc vs score", fontsize=10)
    return save(fig, path)
