"""Figure of ``gpolab sweep --dynamic-sampling``, drawn from its saved ``results`` table only:
what DAPO dynamic sampling costs (groups drawn per kept group) and buys (MSE and the scale-free
scaled MSE of the kept-groups estimate against plain sampling at the same responses per step)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpolab.kit.plots import pyplot, save, seeds_label
from gpolab.labs.sweep.plots import LABELS
from gpolab.theory.dynamic import LOOP_COLUMN, RATE_COLUMN


def dynamic_figure(tables: dict, path: str | Path) -> Path:
    """(1) groups drawn per kept group vs G: measured (95% CI), exact with the cap (dashed),
    verl's loop without it (dash-dot) and the per-group rate 1/q (dotted); (2) MSE of the
    kept-groups estimate (solid) and of plain sampling with the same mean responses per step
    (dashed); (3) the same for the scaled MSE.  Titled from the table (instance, seeds)."""
    df = tables["results"]
    row = df.iloc[0]
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4), constrained_layout=True)
    first = df.drop_duplicates("G").sort_values("G")
    G = first["G"].to_numpy(float)
    ax = axes[0]
    ci = first["draws_per_kept_group_ci_high"] - first["draws_per_kept_group"]
    ax.errorbar(G, first["draws_per_kept_group"], yerr=ci, fmt="ko", mfc="none", label="measured")
    ax.plot(G, first["theory_draws_per_kept_group"], "k--", label="exact (verl batches, cap)")
    if LOOP_COLUMN in first:  # tables saved before the column existed lack it
        ax.plot(G, first[LOOP_COLUMN], "-.", color="0.6", label="exact (verl batches, no cap)")
    rate = RATE_COLUMN if RATE_COLUMN in first else "theory_draws_per_kept_group_nocap"
    ax.plot(G, first[rate], "k:", label="1/q (per group: no batches, no cap)")
    ax.set(ylabel="groups drawn / groups kept", title="cost")
    for i, (name, sub) in enumerate(df.groupby("estimator", sort=False)):
        sub, c = sub.sort_values("G"), f"C{i}"
        Gs = sub["G"].to_numpy(float)
        for ax, dyn, plain in (
            (axes[1], "mse", "plain_mse"),
            (axes[2], "scaled_mse", "plain_scaled_mse"),
        ):
            ax.plot(Gs, sub[dyn], "o-", color=c, mfc="none", label=LABELS.get(name, name))
            ax.plot(Gs, sub[plain], "s--", color=c, ms=4)
    for ax in axes[1:]:
        ax.plot([], [], "k-", label="dynamic (kept groups)")
        ax.plot([], [], "k--", label="plain, same responses/step")
        ax.set(yscale="log")
    axes[1].set(ylabel="gradient MSE  E‖ĝ − g‖²", title="raw MSE (step size included)")
    axes[2].set(ylabel="scaled MSE (best rescaling)", title="direction only")
    axes[2].legend(fontsize=7)
    axes[0].legend(fontsize=8)
    for ax in axes:
        ax.set(xscale="log", xlabel="group size G")
        ax.set_xticks(G, labels=[str(int(g)) for g in G])
        ax.minorticks_off()
        ax.grid(alpha=0.3)
    fig.suptitle(
        f"DAPO dynamic sampling, {row['kind']} bandit P={row['prompts']}, A={row['actions']}, "
        f"B={row['B']}, max_draws={row['max_draws']}, {seeds_label(df)}"
    )
    return save(fig, path)


def has_dynamic(df) -> bool:
    return "dynamic_sampling" in df and bool(np.any(df["dynamic_sampling"].fillna(False)))
