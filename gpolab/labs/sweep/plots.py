"""Figures of the sweep lab, drawn from its saved ``results`` table only."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpolab.kit.plots import pyplot, save, seeds_label

LABELS = {
    "vanilla": "REINFORCE (no baseline)",
    "oracle": "oracle baseline V(x)",
    "loo": "GRPO-type / RLOO (leave-one-out)",
    "ustat": "U-statistic",
    "mean": "Dr.GRPO (mean incl. self)",
    "grpo": "GRPO (std-normalized)",
}


def mse_vs_G_figure(tables: dict, path) -> Path:
    """:func:`mse_vs_G` titled from the table (env, instance, seeds actually run)."""
    df = tables["results"]
    row = df.iloc[0]
    if row["env"] == "arithmetic":
        title = (
            f"arithmetic surrogate, {row['questions']} questions, filler {row['filler']}, "
            f"{seeds_label(df)} × {row['per_seed']} questions"
        )
    else:
        title = f"{row['kind']} bandit, P={row['prompts']}, A={row['actions']}, {seeds_label(df)}"
    return mse_vs_G(df, path, title=title)


def tree_heatmap_figure(tables: dict, path) -> Path:
    df = tables["results"]
    return tree_heatmap(df, path, title=f"tree ({df['model'].iloc[0]} thoughts), {seeds_label(df)}")


def mse_vs_G(df, path: str | Path, title: str | None = None) -> Path:
    """Log-log MSE against G per estimator, 95% CI bands, exact theory dashed (with the band its
    own Monte Carlo inputs carry, if any) and the first-order law trΣ_or/G dotted.  One panel per
    ``policy`` when the table has several (the arithmetic surrogate)."""
    plt = pyplot()
    policies = [p for p in df.get("policy", []) if isinstance(p, str)]
    policies = list(dict.fromkeys(policies)) or [None]
    fig, axes = plt.subplots(
        1,
        len(policies),
        figsize=(6.4 if len(policies) == 1 else 4.6 * len(policies), 4.4),
        constrained_layout=True,
        sharey=True,
        squeeze=False,
    )
    for ax, policy in zip(axes[0], policies, strict=True):
        sub = df if policy is None else df[df["policy"] == policy]
        _mse_panel(ax, sub)
        if policy is not None:
            v = sub["mean_V"].iloc[0] if "mean_V" in sub else np.nan
            ax.set_title(f"{policy} (mean V = {v:.2f})" if np.isfinite(v) else policy)
    axes[0][0].legend(fontsize=7 if len(policies) > 1 else 8)
    if policies == [None]:
        axes[0][0].set_title(title or "Gradient MSE vs group size")
    else:
        fig.suptitle(title or "Gradient MSE vs group size")
    return save(fig, path)


def _mse_panel(ax, df) -> None:
    for i, (name, sub) in enumerate(df.groupby("estimator", sort=False)):
        sub = sub.sort_values("G")
        G = sub["G"].to_numpy(dtype=float)
        color = f"C{i}"
        theory = sub["theory_mse"].to_numpy(dtype=float)
        has_theory = np.isfinite(theory).any()
        ax.plot(
            G,
            sub["mse"],
            "o" if has_theory else "o-",
            color=color,
            ms=5,
            mfc="none",
            label=LABELS.get(name, name),
        )
        ax.fill_between(G, sub["mse_ci_low"], sub["mse_ci_high"], color=color, alpha=0.2, lw=0)
        if has_theory:
            ax.plot(G, theory, "--", color=color, lw=1.2)
            se = sub.get("theory_mse_se")
            if se is not None and np.nanmax(se.to_numpy(dtype=float), initial=0) > 0:
                band = 1.96 * se.to_numpy(dtype=float)
                ax.fill_between(G, theory - band, theory + band, color=color, alpha=0.15, lw=0)
    first = df.drop_duplicates("G").sort_values("G") if "theory_first_order" in df else None
    if first is not None and np.isfinite(first["theory_first_order"].to_numpy(float)).any():
        ax.plot(first["G"], first["theory_first_order"], "k:", lw=1.2, label="trΣ_or / G")
    ax.plot([], [], "ko", mfc="none", label="Monte Carlo (95% CI band)")
    ax.plot([], [], "k--", lw=1.2, label="exact finite-G theory")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="group size G (responses per prompt)",
        ylabel="gradient MSE  E‖ĝ − g‖²  (log scale)",
    )
    Gs = sorted(df["G"].dropna().unique())
    ax.set_xticks(Gs, labels=map(str, Gs))
    ax.minorticks_off()
    ax.grid(alpha=0.3, which="both")


def tree_heatmap(df, path: str | Path, value: str = "mse", title: str | None = None) -> Path:
    """K × M heatmap of ``value`` (log colour scale), each cell labelled with its value, and the
    equal-budget lines (K·M every other power of two) dashed, named in a legend under the plot."""
    plt = pyplot()
    from matplotlib.colors import LogNorm

    grid = df.pivot_table(index="K", columns="M", values=value, aggfunc="mean").sort_index()
    grid = grid.reindex(sorted(grid.columns), axis=1)
    Ks, Ms = grid.index.to_numpy(), grid.columns.to_numpy()
    fig, ax = plt.subplots(figsize=(6.2, 4.6), constrained_layout=True)
    data = grid.to_numpy(dtype=float)
    positive = data[np.isfinite(data) & (data > 0)]
    norm = LogNorm(positive.min(), positive.max()) if positive.size else None
    im = ax.imshow(data, origin="lower", cmap="viridis", norm=norm, aspect="auto")
    for i, K in enumerate(Ks):
        for j, M in enumerate(Ms):
            bright = norm is not None and np.isfinite(data[i, j]) and norm(data[i, j]) > 0.6
            ax.text(
                j,
                i,
                f"{data[i, j]:.3g}\nK·M={K * M}",
                ha="center",
                va="center",
                fontsize=7,
                color="k" if bright else "w",
            )
    budget = np.log2(np.outer(Ks, Ms).astype(float))
    if len(Ks) > 1 and len(Ms) > 1:
        levels = np.arange(np.ceil(budget.min()), np.floor(budget.max()) + 1, 2)
        ax.contour(budget, levels=levels, colors="w", linewidths=0.8, linestyles="--", alpha=0.6)
        if len(levels):
            budgets = ", ".join(f"{2 ** int(j):,}" for j in levels)
            fig.legend(
                handles=[plt.Line2D([], [], color="0.45", lw=0.8, ls="--")],
                labels=[f"white dashed: equal leaf budget K·M = {budgets}"],
                loc="outside lower center",
                fontsize=8,
                frameon=False,
            )
    ax.set_xticks(range(len(Ms)), labels=map(str, Ms))
    ax.set_yticks(range(len(Ks)), labels=map(str, Ks))
    ax.set(xlabel="M (continuations per thought)", ylabel="K (thoughts)")
    fig.colorbar(im, ax=ax, label=f"{value}: thought advantage vs (p − E p)/sd(p)")
    ax.set_title(title or "Tree branching: MSE over (K, M)")
    return save(fig, path)
