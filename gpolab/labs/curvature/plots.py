"""The figure of the curvature lab, drawn from its saved ``curvature`` and ``fits`` tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpolab.kit.plots import pyplot, save

PANELS = {
    # quantity: (y label, bound label)
    "grad_norm": ("‖g_x‖ = ‖∇p_x‖", "2Bσ_x (bound)"),
    "hess_norm": ("‖H_x‖_op = ‖∇²p_x‖_op", "4B²σ_x (bound)"),
}


def curvature_figure(tables: dict, path) -> Path:
    """Two panels: ‖g_x‖ and ‖H_x‖_op against σ_x, the bound dashed, the tightest fitted
    constant dotted; the title names B and the number of θ drawn."""
    df, fits = tables["curvature"], tables["fits"].set_index("quantity")
    plt = pyplot()
    s = np.linspace(0, 0.5, 50)
    bound = float(fits["bound"].iloc[0])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), constrained_layout=True)
    for ax, (col, (ylabel, blabel)) in zip(axes, PANELS.items(), strict=True):
        fit = fits.loc[col]
        scale = bound ** (2 if col == "hess_norm" else 1)
        ax.scatter(df["sigma"], df[col], s=3, alpha=0.25, color="C0", label="exact, random θ")
        ax.plot(s, fit.bound_const * scale * s, "k--", lw=1.4, label=blabel)
        c = fit.max_ratio
        ax.plot(s, c * scale * s, ":", color="C3", lw=1.6, label=f"tightest C·σ_x, C = {c:.3f}")
        ax.set(xlabel="reward std σ_x = √(p_x(1 − p_x))", ylabel=ylabel, xlim=(0, 0.52))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    thetas = df["theta"].nunique()
    fig.suptitle(
        f"Curvature law on the log-linear bandit (B = {bound:g}, {thetas:,} random θ), "
        "arXiv 2601.23135"
    )
    return save(fig, path)
