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
