"""Figures of response lengths and loss aggregation (``gpolab sweep --loss-agg``), from the
sweep's saved ``results`` table only."""

from __future__ import annotations

from pathlib import Path

from gpolab.kit.plots import pyplot, save, seeds_label

PANELS = (
    ("bias_sq", "bias²  ‖E ĝ − g‖²", "log"),
    ("mse", "MSE  E‖ĝ − g‖²", "log"),
    ("scaled_mse", "scale-free MSE (best rescaling)", "log"),
    ("cos", "cos(ĝ, g)", "linear"),
)
STYLES = ("o-", "s--", "^:", "d-.")


def loss_agg_figure(tables: dict, path: str | Path) -> Path:
    """One panel per statistic (bias², MSE, scale-free MSE, cos) against G: colour = loss
    aggregation mode, marker/line = estimator; exact bias² (where covered) as crosses.  Against
    the sequence-level gradient g, so a mode's constant factor shows in bias² and MSE and not in
    the scale-free MSE or cos.  Titled from the table (length model, instance, seeds)."""
    df = tables["results"]
    row = df.iloc[0]
    plt = pyplot()
    fig, axes = plt.subplots(
        1, len(PANELS), figsize=(4.2 * len(PANELS), 4.2), constrained_layout=True
    )
    modes = list(dict.fromkeys(df["loss_agg"]))
    names = list(dict.fromkeys(df["estimator"]))
    for ax, (col, label, scale) in zip(axes, PANELS, strict=True):
        for i, mode in enumerate(modes):
            for j, name in enumerate(names):
                sub = df[(df["loss_agg"] == mode) & (df["estimator"] == name)].sort_values("G")
                G = sub["G"].to_numpy(float)
                ax.plot(
                    G,
                    sub[col].to_numpy(float),
                    STYLES[j % len(STYLES)],
                    color=f"C{i}",
                    ms=4,
                    mfc="none",
                    lw=1,
                )
                if col == "bias_sq" and "theory_bias_sq" in sub:
                    ax.plot(G, sub["theory_bias_sq"].to_numpy(float), "x", color=f"C{i}", ms=6)
        ax.set(xscale="log", yscale=scale, xlabel="group size G", title=label)
        Gs = sorted(df["G"].dropna().unique())
        ax.set_xticks(Gs, labels=[str(int(g)) for g in Gs])
        ax.minorticks_off()
        ax.grid(alpha=0.3, which="both")
    for i, mode in enumerate(modes):
        axes[0].plot([], [], "-", color=f"C{i}", label=mode)
    for j, name in enumerate(names):
        axes[0].plot([], [], STYLES[j % len(STYLES)], color="k", mfc="none", label=name)
    axes[0].plot([], [], "kx", label="exact bias² (closed form)")
    axes[0].legend(fontsize=7)
    fig.suptitle(
        f"loss aggregation, lengths = {row['lengths']}, {row['env']} "
        f"P={row.get('prompts')}, A={row.get('actions')}, {seeds_label(df)}"
    )
    return save(fig, path)
