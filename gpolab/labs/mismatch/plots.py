"""The mismatch lab's figure, drawn from its saved ``results`` table: each correction's
MSE/‖g‖² (at the measured batch and at 512 prompts), cos, scale and truncated share against the
response length T or the sequence KL."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpolab.estimators.mismatch import CLAMP  # verl's clamp on a sequence's summed log-ratio
from gpolab.kit.plots import pyplot, save, seeds_label, suptitle
from gpolab.labs.mismatch import decision


def mismatch_figure(tables: dict, path) -> Path:
    """MSE/‖g‖² at the measured batch and at 512 prompts
    (:func:`gpolab.labs.mismatch.decision.at_batch`), cos(E ĝ, g), scale E ĝ·g/‖g‖² and the
    truncated share, against the response length T (one column per mismatch) or, with one T,
    against the exact sequence KL(μ‖π) (one column); one line per correction (solid: token level,
    dashed: sequence level; the user's own config thick)."""
    plt = pyplot()
    df = tables["results"]
    big = decision.at_batch(df, decision.LARGE_B)
    by_kl = df["T"].nunique() == 1 and df["mismatch"].nunique() > 1
    x, xlabel = ("mismatch_kl_seq", "KL(μ‖π) per sequence") if by_kl else ("T", "response length T")
    panels = (
        [("T", df["T"].iloc[0])] if by_kl else [("mismatch", m) for m in df["mismatch"].unique()]
    )
    fig, axes = plt.subplots(
        5,
        len(panels),
        figsize=(4.6 * len(panels) + 2.6, 15.5),
        squeeze=False,
        constrained_layout=True,
    )
    for col, (field, value) in enumerate(panels):
        d = df[df[field] == value]
        _column(axes[:, col], d, big, x, list(dict.fromkeys(df["correction"])))
        axes[0][col].set(title=f"T = {value}" if by_kl else f"mismatch {value}")
        for ax in axes[:, col]:
            ax.set(xscale="log", xlabel=xlabel)
            if not by_kl:
                ticks = sorted(d["T"].unique())
                ax.set_xticks(ticks, [str(int(t)) for t in ticks])
                ax.xaxis.set_minor_locator(plt.NullLocator())
            ax.grid(alpha=0.3)
            if by_kl:
                ax.axvline(CLAMP, color="k", lw=0.8, ls=":", label="verl's ±20 clamp")
    for ax, label in zip(axes[:, 0], YLABELS, strict=True):
        ax.set(ylabel=label.format(B=int(df["B"].iloc[0]), large=decision.LARGE_B))
    axes[0][-1].legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    first = df.iloc[0]
    suptitle(
        fig,
        "Rollout–training mismatch: each correction against the exact gradient "
        f"({first['env']}, B = {int(first['B'])}, G = {int(first['G'])}, {seeds_label(df)})",
    )
    return save(fig, path)


YLABELS = (
    "MSE / ‖g‖², B = {B} (±1 SE)",
    "MSE / ‖g‖² at {large} prompts\n(verl's rejections: measured)",
    "cos(E ĝ, g) (±1 SE)",
    "scale E ĝ·g / ‖g‖² (±1 SE)\n(1: no shrinkage, 0: collapsed)",
    "share of tokens truncated,\nmasked, rejected or cut",
)


def _column(ax, d, big, x: str, names: list) -> None:
    """One column of panels (one mismatch, or one T): a line per correction of ``names``."""
    cmap = pyplot().get_cmap("tab20")
    mse_small, mse_large = [], []  # what each log panel draws
    for i, name in enumerate(names):
        g = d[d["correction"] == name].sort_values(x)
        if g.empty:
            continue
        mine = g["yours"].any()
        style = dict(
            color=cmap(i % 20),
            marker="o",
            ms=3,
            lw=2.6 if mine else 1.1,
            ls="--" if g["level"].iloc[0] == "sequence" else "-",
            label=name + (" (yours)" if mine else ""),
        )
        b = big.loc[g.index]
        ax[0].errorbar(g[x], g["rel_mse"], yerr=g["rel_mse_se"], capsize=2, **style)
        ax[1].errorbar(g[x], b["rel_mse"], yerr=b["mse_se"] / g["g_sq"], capsize=2, **style)
        mse_small += list(g["rel_mse"])
        mse_large += list(b["rel_mse"])
        ax[2].errorbar(g[x], g["cos"], yerr=g["cos_se"], capsize=2, **style)
        ax[3].errorbar(g[x], g["scale"], yerr=g["scale_se"], capsize=2, **style)
        ax[4].plot(g[x], g["truncated_share"], **style)
    _log_axis(ax[0], mse_small)
    _log_axis(ax[1], mse_large)


def _log_axis(ax, values) -> None:
    """A log y axis for the panel's ``values``.  Where some are ≤ 0 (an MSE extrapolated as bias² +
    variance·B/512 is negative when the unbiased bias² estimate is), a symlog axis instead,
    linear below the smallest positive value; a note in the panel says how many, and how many are
    withheld (NaN: a row the sampler cannot resolve has no MSE): no point leaves the axis
    silently."""
    v = np.asarray(values, dtype=float)
    withheld = int((~np.isfinite(v)).sum())
    v = v[np.isfinite(v)]
    low = int((v <= 0).sum())
    notes = [f"{withheld} withheld (unresolved rows: no MSE)"] if withheld else []
    if not low:
        ax.set_yscale("log")
    else:
        linthresh = float(v[v > 0].min()) if (v > 0).any() else 1.0
        ax.set_yscale("symlog", linthresh=linthresh)
        ax.axhline(0.0, color="k", lw=0.6)
        notes.insert(
            0, f"{low} value{'s' * (low > 1)} ≤ 0: symlog axis,\nlinear below {linthresh:.2g}"
        )
    if notes:
        ax.text(0.02, 0.02, "\n".join(notes), fontsize=6.5, transform=ax.transAxes, va="bottom")
