"""The figure of the token-baseline lab, drawn from its saved ``results`` table."""

from __future__ import annotations

from pathlib import Path

from gpolab.kit.plots import pyplot, save


def otb_figure(tables: dict, path) -> Path:
    """One panel per policy: the best-scale MSE relative to ‖g‖² against G (log-log), one line
    per estimator with ±1 SE bars."""
    df = tables["results"]
    plt = pyplot()
    policies = list(dict.fromkeys(df["policy"]))
    fig, axes = plt.subplots(
        1, len(policies), figsize=(4.2 * len(policies), 3.8), constrained_layout=True, squeeze=False
    )
    for ax, policy in zip(axes[0], policies, strict=True):
        at = df[df["policy"] == policy]
        for i, (name, rows) in enumerate(at.groupby("estimator", sort=False)):
            rows = rows.sort_values("G")
            ax.errorbar(
                rows["G"],
                rows["rel_scaled_mse"],
                yerr=rows["rel_scaled_mse_se"],
                marker="o",
                ms=4,
                capsize=2,
                color=f"C{i}",
                label=name,
            )
        ax.set(xscale="log", yscale="log", xlabel="group size G", title=f"policy {policy}")
        ax.set_xticks(sorted(at["G"].unique()), [str(g) for g in sorted(at["G"].unique())])
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel("best-scale MSE / ‖g‖²")
    axes[0][0].legend(fontsize=8)
    fig.suptitle("verl's optimal token baseline against response-level baselines (arithmetic)")
    return save(fig, path)


def train_figure(tables: dict, path) -> Path:
    """A grid of panels, a policy per row and a learning rate per column: the mean exact J over
    training steps of each configuration (OTB at small, the reference at small and at large),
    ±1 SE bands."""
    df = tables["train"]
    plt = pyplot()
    policies, lrs = list(dict.fromkeys(df["policy"])), sorted(df["lr"].unique())
    fig, axes = plt.subplots(
        len(policies),
        len(lrs),
        figsize=(4.2 * len(lrs), 3.0 * len(policies) + 0.6),
        constrained_layout=True,
        squeeze=False,
    )
    for row, policy in zip(axes, policies, strict=True):
        for ax, lr in zip(row, lrs, strict=True):
            at = df[(df["policy"] == policy) & (df["lr"] == lr)]
            for i, ((spec, G), run) in enumerate(at.groupby(["estimator", "G"], sort=False)):
                run = run.sort_values("step")
                ax.plot(run["step"], run["J"], color=f"C{i}", label=f"{spec} G={G}")
                low, high = run["J"] - run["J_se"], run["J"] + run["J_se"]
                ax.fill_between(run["step"], low, high, color=f"C{i}", alpha=0.2)
            ax.set(title=f"policy {policy}, lr {lr:g}")
            ax.grid(alpha=0.3)
        row[0].set_ylabel("exact J = mean success")
    for ax in axes[-1]:
        ax.set_xlabel("Adam step")
    axes[0][0].legend(fontsize=8)
    fig.suptitle("training at equal steps: verl's OTB at small G against GRPO at small and large G")
    return save(fig, path)
