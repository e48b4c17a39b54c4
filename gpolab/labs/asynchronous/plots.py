"""Figures of the asynchronous lab, drawn from its saved tables: what staleness does to each
composition's update (excess MSE over a fresh on-policy update, the bias against the exact
gradient, cos and the clipped share against k) and the training curves on the exact J."""

from __future__ import annotations

from pathlib import Path

from gpolab.kit.plots import pyplot, save, seeds_label, suptitle

PANELS = (
    ("excess_mse", "MSE / fresh update's MSE − 1", "symlog"),
    ("bias_sq", "bias² against the exact g", "symlog"),
    ("cos", "E cos(ĝ, g)", "linear"),
    ("clip_frac", "clipped share", "linear"),
)


def _middle(values) -> float:
    values = sorted(set(values))
    return values[len(values) // 2]


def _colors(df) -> dict:
    """One colour per composition: the default cycle up to 10, tab20's 20 beyond (no two share)."""
    names = list(dict.fromkeys(df["correction"]))
    if len(names) <= 10:
        return {c: f"C{i}" for i, c in enumerate(names)}
    cmap = pyplot().get_cmap("tab20")
    return {c: cmap(i % 20) for i, c in enumerate(names)}


def staleness_figure(tables: dict, path) -> Path:
    """Per mismatch (rows) at the middle η and the largest m: each composition's epoch against
    the staleness k, one line per composition (dashed: gpolab's control)."""
    df = tables["results"]
    eta, m = _middle(df["eta"]), df["m"].max()
    df = df[(df["eta"] == eta) & (df["m"] == m)]
    mismatches = list(dict.fromkeys(df["mismatch"]))
    plt = pyplot()
    fig, axes = plt.subplots(
        len(mismatches),
        len(PANELS),
        figsize=(4.2 * len(PANELS) + 2.4, 3.3 * len(mismatches)),
        squeeze=False,
        constrained_layout=True,
    )
    colors = _colors(df)
    for row, mismatch in zip(axes, mismatches, strict=True):
        d = df[df["mismatch"] == mismatch]
        for name, g in d.groupby("correction", sort=False):
            g = g.sort_values("staleness")
            ls = "--" if "/" not in name else "-"
            for ax, (col, _, _) in zip(row, PANELS, strict=True):
                ax.plot(
                    g["staleness"], g[col], ls, marker="o", ms=3, color=colors[name], label=name
                )
        for ax, (_, ylabel, scale) in zip(row, PANELS, strict=True):
            ax.set(xlabel="staleness k (versions)", ylabel=ylabel, title=f"mismatch {mismatch}")
            if scale == "symlog":
                ax.set_yscale("symlog", linthresh=1e-3)
            ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    first = df.iloc[0]
    suptitle(
        fig,
        f"Asynchronous updates against the exact gradient (T = {int(first['T'])}, B = "
        f"{int(first['B'])}, G = {int(first['G'])}, η = {eta:g}, m = {int(m)}, {seeds_label(df)})",
    )
    return save(fig, path)


def curves_figure(tables: dict, path) -> Path:
    """Exact J against the updates done, at the middle η and the largest m: one panel per
    mismatch and staleness law (the smallest and largest fixed k, then each queue law), one line
    per composition (±1 SE band), exact gradient ascent dashed black."""
    df = tables["curves"]
    eta, m = _middle(df["eta"]), df["m"].max()
    df = df[(df["eta"] == eta) & (df["m"] == m)]
    fixed = df[df["law"].str.startswith("k=")]
    ks = sorted({fixed["staleness"].min(), fixed["staleness"].max()})
    laws = [f"k={k}" for k in ks] + [w for w in dict.fromkeys(df["law"]) if not w.startswith("k=")]
    mismatches = list(dict.fromkeys(df["mismatch"]))
    plt = pyplot()
    fig, axes = plt.subplots(
        len(laws),
        len(mismatches),
        figsize=(4.8 * len(mismatches) + 2.4, 3.4 * len(laws)),
        squeeze=False,
        constrained_layout=True,
    )
    colors = _colors(df)
    for row, law in zip(axes, laws, strict=True):
        for ax, mismatch in zip(row, mismatches, strict=True):
            d = df[(df["mismatch"] == mismatch) & (df["law"] == law)]
            for name, g in d.groupby("correction", sort=False):
                g = g.sort_values("updates")
                ls = "--" if "/" not in name else "-"
                ax.plot(g["updates"], g["J"], ls, color=colors[name], label=name)
                ax.fill_between(
                    g["updates"],
                    g["J"] - g["J_se"],
                    g["J"] + g["J_se"],
                    color=colors[name],
                    alpha=0.15,
                )
            a = d.drop_duplicates("updates").sort_values("updates")
            ax.plot(a["updates"], a["J_ascent"], "k--", lw=0.9, label="exact gradient ascent")
            ax.set(xlabel="updates (policy versions)", ylabel="exact J")
            ax.set(title=f"mismatch {mismatch}, staleness {law}")
            ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    first = df.iloc[0]
    suptitle(
        fig,
        f"Training on the exact expected reward (T = {int(first['T'])}, B = {int(first['B'])}, "
        f"G = {int(first['G'])}, η = {eta:g}, m = {int(m)}, {seeds_label(df)})",
    )
    return save(fig, path)
