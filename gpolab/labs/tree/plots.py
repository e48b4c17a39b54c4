"""Figures of the tree lab, drawn from its saved ``results`` and ``floor`` tables only."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpolab.kit.plots import pyplot, save, seeds_label
from gpolab.labs.sweep.plots import tree_heatmap
from gpolab.theory import tree_overlap
from gpolab.theory.tree import rank, recommend


def tag(df) -> str:
    """ "Beta(2, 3), thought-std, ddof 1, 20,000 seeds" from the table (a finite model: "loglinear
    policy over 32 possible thoughts", the thought set, not the thoughts K a tree samples)."""
    row = df.iloc[0]
    model = f"Beta({row['a']:g}, {row['b']:g})" if row["model"] == "beta" else None
    model = model or f"{row['model']} policy over {int(row['thoughts'])} possible thoughts"
    return f"{model}, {row['variant']}, ddof {int(row['ddof'])}, {seeds_label(df)}"


def floor(tables: dict, path) -> Path:
    """Conditional variance vs K (log x) for each M: Monte Carlo ± 2 SE, the O(1/K) theory
    (×), and the exact K → ∞ floor as a dashed horizontal line."""
    df = tables["results"]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4), constrained_layout=True)
    for i, (M, sub) in enumerate(df.sort_values("K").groupby("M")):
        c = f"C{i}"
        K = sub["K"].to_numpy(float)
        ax.errorbar(
            K, sub["variance"], 2 * sub["variance_se"], fmt="o-", color=c, ms=4, label=f"M = {M}"
        )
        ax.plot(K, sub["theory_variance"], "x", color=c, ms=6)
        ax.axhline(sub["theory_floor"].iloc[0], color=c, ls="--", lw=1)
    ax.plot([], [], "k--", lw=1, label="exact K→∞ floor")
    ax.plot([], [], "kx", label="O(1/K) theory")
    Ks = sorted(df["K"].unique())
    ax.set(xscale="log", xlabel="K (thoughts per prompt)", ylabel="E Var(Â_k | thought values)")
    ax.set_xticks(Ks, labels=map(str, Ks))
    ax.minorticks_off()
    ax.set_title(f"Floor in K ({tag(df)})")
    ax.legend(fontsize=8, ncol=2)
    ax.grid(alpha=0.3)
    return save(fig, path)


def variance_vs_M(tables: dict, path) -> Path:
    """Conditional variance vs M, log-log, at the largest K: Monte Carlo, the exact floor dashed
    (the saved ``floor`` table), and a slope −1 reference; the slope fitted over M ≥ 16 in the
    legend."""
    df, curve = tables["results"], tables["floor"].sort_values("M")
    plt = pyplot()
    K = int(df["K"].max())
    sub = df[df["K"] == K].sort_values("M")
    fig, ax = plt.subplots(figsize=(6.0, 4.4), constrained_layout=True)
    ax.errorbar(
        sub["M"].to_numpy(float),
        sub["variance"],
        2 * sub["variance_se"],
        fmt="o",
        color="C0",
        label=f"Monte Carlo, K = {K}",
    )
    grid = curve["M"].to_numpy(float)
    ax.plot(grid, curve["theory_floor"], "k--", lw=1.2, label="exact K→∞ floor")
    big = sub[sub["M"] >= 16]
    if len(big) >= 2:
        slope = np.polyfit(np.log(big["M"]), np.log(big["variance"]), 1)[0]
        ref = big["variance"].iloc[-1] * big["M"].iloc[-1] / grid
        ax.plot(grid, ref, ":", color="C3", label=f"slope −1 (fit over M ≥ 16: {slope:.3f})")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="M (continuations per thought)",
        ylabel="E Var(Â_k | thought values)",
    )
    ax.set_title(f"Variance vs M ({tag(df)})")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    return save(fig, path)


def heatmap(tables: dict, path) -> Path:
    """The MSE over the (K, M) grid with equal-budget diagonals (the sweep's tree heatmap)."""
    df = tables["results"]
    return tree_heatmap(df, path, value="mse", title=tag(df))


def budget(tables: dict, path) -> Path:
    """Fixed leaf budget: the score of every split, tokens per effective thought
    (L_think + M·L_answer)/corr² (bars with 2 SE where Monte Carlo, the recommended one red,
    hatched where it ties with the recommendation), and the degenerate share on the right axis
    (measured ○, exact ×)."""
    df = tables["results"].sort_values("K")
    if "score" not in df:
        df = rank(df)
    best = recommend(df)
    plt = pyplot()
    x = np.arange(len(df))
    fig, ax = plt.subplots(figsize=(6.6, 4.4), constrained_layout=True)
    splits = list(zip(df["K"], df["M"], strict=True))
    colors = ["C3" if (K, M) == (best["K"], best["M"]) else "C0" for K, M in splits]
    bars = ax.bar(
        x,
        df["score"],
        yerr=2 * df["score_se"].fillna(0.0),
        color=colors,
        alpha=0.8,
        label="tokens per effective thought (red: recommended)",
    )
    for bar, tie in zip(bars, df["tie"], strict=True):
        if tie:
            bar.set_hatch("//")
    ax.set_xticks(x, labels=[f"K={K}\nM={M}" for K, M in splits], fontsize=7)
    ax.set(
        ylabel="(L_think + M L_answer) / corr²", yscale="log", xlabel="split of the leaf budget K·M"
    )
    ax2 = ax.twinx()
    ax2.plot(x, df["degenerate_frac"], "o", color="C2", label="degenerate share (Monte Carlo)")
    ax2.plot(x, df["theory_degenerate_frac"], "x", color="k", label="degenerate share (exact)")
    ax2.set(
        ylabel="P(all K thought values equal)",
        ylim=(0, max(0.05, 1.1 * df["theory_degenerate_frac"].max())),
    )
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=8)
    verdict = "" if best["distinguishable"] else " (tie within noise)"
    if best["candidates"] == 1:
        verdict = " (only one candidate)"
    ax.set_title(f"K·M = {int(df['budget'].iloc[0])}, {tag(df)}{verdict}")
    return save(fig, path)


def overlap(tables: dict, path) -> Path:
    """Loglinear model at a leaf budget: left, the whole-budget gradient's cos² against the
    overlap ρ for every split at the run's L_think/L_answer (exact lines, Monte Carlo ± 2 SE at
    the run's ρ); right, the best split's M over (ρ, L_think/L_answer), exact where it exists,
    with the boundary (the smallest ρ at which M > 1 pays) as a line."""
    df = tables["results"].sort_values("K")
    geometry = float(df["ov_target_sq"].iloc[0]), float(df["ov_strategy_dot"].iloc[0])
    rho = np.linspace(0.0, 0.99, 100)
    plt = pyplot()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10.5, 4.2), constrained_layout=True)
    _cos2_by_overlap(ax, df, rho, *geometry)
    _best_split_map(plt, ax2, df, rho, *geometry)
    fig.suptitle(tag(df))
    return save(fig, path)


def _cos2_by_overlap(ax, df, rho, tt: float, c: float) -> None:
    """:func:`overlap`'s left panel: each split's exact cos² against ρ, Monte Carlo ± 2 SE."""
    ratio = float(df["think_len"].iloc[0] / df["answer_len"].iloc[0])
    styles = ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)))
    markers = ("s", "^", "v", "D", "P", "X")
    for i, (_, r) in enumerate(df.iterrows()):  # each split its own line style and marker:
        w = r[[f"theory_ov_{m}" for m in tree_overlap.MOMENTS]].to_numpy(np.float64)
        y = tree_overlap.cos2(w, rho, tt, c, r["trees"])[0]  # close curves stay readable
        ax.plot(
            rho,
            y,
            color=f"C{i}",
            ls=styles[i % len(styles)],
            marker=markers[i % 6],
            markevery=(2 * i, 12),
            ms=5,
            label=f"K={int(r['K'])}, M={int(r['M'])}",
        )
        ax.errorbar(
            r["overlap"], r["grad_cos2"], 2 * r["grad_cos2_se"], fmt="o", color=f"C{i}", ms=4
        )
    ax.set(
        xlabel="overlap ρ of the thoughts' features",
        ylabel="cos² (whole-budget gradient)",
        title=f"L_think/L_answer = {ratio:g}; lines exact, ● Monte Carlo ± 2 SE",
    )
    ax.legend(fontsize=8)


def _best_split_map(plt, ax2, df, rho, tt: float, c: float) -> None:
    """:func:`overlap`'s right panel: the best split's M over (ρ, L_think/L_answer) and the
    boundary."""
    ratios = np.geomspace(1 / 64, 4, 25)
    wins = tree_overlap.winners(df, tt, c, overlaps=rho[::3], ratios=ratios)
    grid = wins.pivot(index="ratio", columns="overlap", values="M")
    leaves = int(df["leaves"].iloc[0])
    Ms = np.unique(grid.to_numpy())  # the winning splits: one colour each (a discrete legend)
    colors = plt.get_cmap("viridis")(np.linspace(0.0, 1.0, max(len(Ms), 2)))[: len(Ms)]
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    ax2.pcolormesh(
        grid.columns,
        grid.index,
        np.searchsorted(Ms, grid.to_numpy()),
        shading="nearest",
        cmap=ListedColormap(colors),
        vmin=-0.5,
        vmax=len(Ms) - 0.5,
    )
    star = tree_overlap.boundary(wins)["rho_star"]
    (line,) = ax2.plot(
        [star[r] for r in ratios], ratios, "w-", lw=2, label="boundary (M > 1 pays right of it)"
    )
    ax2.set(
        yscale="log",
        xlabel="overlap ρ",
        ylabel="L_think / L_answer",
        title=f"best split K x M of {leaves} leaves per prompt",
    )
    patches = [
        Patch(color=col, label=f"M = {int(M)} (K = {leaves // int(M)})")
        for M, col in zip(Ms, colors, strict=True)
    ]
    ax2.legend(handles=[*patches[::-1], line], fontsize=8, loc="lower right", framealpha=0.9)
