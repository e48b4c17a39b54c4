"""Figures of the estimator zoo, drawn from its saved ``results`` and ``kappa`` tables only."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpolab.engine.stats import families
from gpolab.kit.plots import pyplot, save, seeds_label


def _heatmap(ax, grid, rows, cols, *, cmap, norm, fmt, title):
    im = ax.imshow(grid, aspect="auto", cmap=cmap, norm=norm)
    ax.set_xticks(range(len(cols)), [str(c) for c in cols])
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    ax.set_xlabel("G")
    ax.set_title(title, fontsize=9)
    for (i, j), v in np.ndenumerate(grid):
        if np.isfinite(v):
            ax.text(j, i, fmt(v), ha="center", va="center", fontsize=6)
    return im


def zoo_figure(tables: dict, path) -> Path:
    """Per env (rows): MSE relative to the first-order law trΣ_oracle/G (left; how much worse
    than the oracle baseline to first order, bias included) and snr relative to loo (right;
    direction quality, invariant to rescaling the advantages), estimator × G."""
    plt = pyplot()
    df = tables["results"]
    envs = list(dict.fromkeys(df["env"]))
    estimators = list(dict.fromkeys(df["estimator"]))
    fig, axes = plt.subplots(
        len(envs),
        2,
        figsize=(11, 0.28 * len(estimators) * len(envs) + 1.5),
        constrained_layout=True,
        squeeze=False,
    )
    for row, env in zip(axes, envs, strict=True):
        _env_row(fig, row, df[df["env"] == env], env, estimators)
    return save(fig, path)


def _env_row(fig, row, sub, env: str, estimators: list) -> None:
    """One env's two heatmaps of :func:`zoo_figure` (``sub``: its rows)."""
    from matplotlib.colors import LogNorm, TwoSlopeNorm

    Gs = sorted(sub["G"].unique())
    rel = sub.assign(rel=sub["mse"] / sub["theory_first_order"])
    mse = rel.pivot(index="estimator", columns="G", values="rel").reindex(estimators)
    snr = sub.pivot(index="estimator", columns="G", values="snr_vs_loo").reindex(estimators)
    label = f"{env}: {seeds_label(sub)}"
    finite = mse.to_numpy(float)[np.isfinite(mse.to_numpy(float))]
    im = _heatmap(
        row[0],
        mse.to_numpy(float),
        estimators,
        Gs,
        cmap="viridis",
        norm=LogNorm(max(finite.min(), 1e-3), finite.max()),
        fmt=lambda v: f"{v:.2g}",
        title=f"{label}\nMSE / (tr Σ_oracle / G)",
    )
    fig.colorbar(im, ax=row[0], shrink=0.8)
    vals = snr.to_numpy(float)
    lo, hi = np.nanmin(vals), np.nanmax(vals)
    norm = TwoSlopeNorm(1.0, min(lo, 0.99), max(hi, 1.01))
    im = _heatmap(
        row[1],
        vals,
        estimators,
        Gs,
        cmap="RdBu",
        norm=norm,
        fmt=lambda v: f"{v:.2f}",
        title=f"{label}\nsnr / snr(loo) (scale-invariant; > 1 better)",
    )
    fig.colorbar(im, ax=row[1], shrink=0.8)


def kappa_figure(tables: dict, path) -> Path:
    """κ_G(p) against p, one panel per G: the weight each reward-only estimator gives a prompt
    of difficulty p (estimators whose curves agree to 0.1% share a line); 1/√(p(1 − p)) dashed,
    the G → ∞ limit of std-normalized GRPO."""

    plt = pyplot()
    kappa = tables["kappa"]
    Gs = sorted(kappa["G"].unique())
    fig, axes = plt.subplots(
        1,
        len(Gs),
        figsize=(4.2 * len(Gs), 4.6),
        sharey=True,
        constrained_layout=True,
        squeeze=False,
    )
    for ax, G in zip(axes[0], Gs, strict=True):
        for names, curve in families(kappa[kappa["G"] == G]):
            label = ", ".join(names[:3]) + (f" +{len(names) - 3}" if len(names) > 3 else "")
            ax.plot(curve["p"], curve["kappa"], lw=1.3, label=label)
        p = np.linspace(0.005, 0.995, 400)
        ax.plot(p, 1 / np.sqrt(p * (1 - p)), "k--", lw=0.8, label="1/√(p(1−p))")
        ax.set_ylim(0, 6)
        ax.set_xlabel("p = P(success | prompt)")
        ax.set_title(f"G = {G}")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("κ_G(p):  E[ĝ_x | p] = κ g_x")
    axes[0][-1].legend(fontsize=6, loc="upper center")
    return save(fig, path)
