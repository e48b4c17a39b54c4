"""Figures of the χ² lab, drawn from its saved ``results``, ``samples`` and ``law`` tables only
(the predicted law's CDF is a saved grid, uniform in √x; quantiles invert it).  With several G
the QQ and ECDF figures show the first G (:func:`at_G`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpolab.kit.plots import pyplot, save, seeds_label


def at_G(tables: dict, G: int | None = None) -> dict:
    """The tables restricted to group size ``G`` (default: the first G of ``results``); tables
    saved before the G column are returned as they are (one G)."""
    if "G" not in tables["samples"]:
        return tables
    G = int(tables["results"]["G"].iloc[0]) if G is None else G
    return {k: t[t["G"] == G] if "G" in t else t for k, t in tables.items()}


def _law(tables: dict, name: str):
    """(√x grid, CDF) of estimator ``name``'s predicted law."""
    law = tables["law"][tables["law"]["estimator"] == name]
    return np.sqrt(law["x"].to_numpy(float)), np.maximum.accumulate(law["cdf"].to_numpy(float))


def ppf(tables: dict, name: str, p) -> np.ndarray:
    t, cdf = _law(tables, name)
    return np.interp(np.asarray(p, float), cdf, t) ** 2


def cdf(tables: dict, name: str, x) -> np.ndarray:
    t, F = _law(tables, name)
    return np.interp(np.sqrt(np.clip(np.asarray(x, float), 0, None)), t, F)


def _samples(tables: dict, name: str, n: int) -> np.ndarray:
    s = tables["samples"]
    return np.sort(s.loc[(s["estimator"] == name) & (s["n"] == n), "scaled_gap"].to_numpy(float))


def _panels(tables: dict):
    plt = pyplot()
    names = list(dict.fromkeys(tables["results"]["estimator"]))
    fig, axes = plt.subplots(
        1, len(names), figsize=(3.3 * len(names), 3.4), constrained_layout=True, squeeze=False
    )
    return fig, zip(axes[0], names, strict=True)


def qq_figure(tables: dict, path) -> Path:
    """QQ plot at the largest n, one panel per estimator: sampled n·Δ against the predicted
    quantiles of Σ w_k χ²₁."""
    tables = at_G(tables)
    df = tables["results"]
    n = int(df["n"].max())
    fig, panels = _panels(tables)
    for ax, name in panels:
        x = _samples(tables, name, n)
        q = ppf(tables, name, (np.arange(1, x.size + 1) - 0.5) / x.size)
        ax.plot(q, x, ".", ms=2, color="C0")
        top = max(q[-1], x[-1])
        ax.plot([0, top], [0, top], "k--", lw=1)
        ax.set(title=name, xlabel="predicted quantile", ylabel=f"n·Δ at n = {n}")
        ax.grid(alpha=0.3)
    fig.suptitle(
        f"QQ: n·Δ(θ_n) vs Σ w_k χ²₁ (Thm 8, arXiv 2603.01162), G = {df['G'].iloc[0]}, "
        f"{seeds_label(df)}"
    )
    return save(fig, path)


def ecdf_figure(tables: dict, path) -> Path:
    """ECDF of n·Δ at every n against the predicted weighted-χ² CDF, one panel per estimator."""
    tables = at_G(tables)
    df = tables["results"]
    fig, panels = _panels(tables)
    for ax, name in panels:
        hi = float(ppf(tables, name, 0.995))
        grid = np.linspace(0, hi, 300)
        for n in sorted(set(df.loc[df["estimator"] == name, "n"])):
            x = _samples(tables, name, n)
            ax.step(x, np.arange(1, x.size + 1) / x.size, where="post", lw=1, label=f"n = {n}")
        ax.plot(grid, cdf(tables, name, grid), "k--", lw=1.3, label="Imhof CDF")
        ax.set(title=name, xlabel="n·Δ(θ_n)", ylabel="CDF", xlim=(0, hi))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(
        f"ECDF of n·Δ(θ_n) vs the predicted weighted-χ² CDF, G = {df['G'].iloc[0]}, "
        f"{seeds_label(df)}"
    )
    return save(fig, path)


def differences(tables: dict, name: str, base: str = "oracle"):
    """At the largest n, per G: (G, predicted Σw_name − Σw_base, mean paired difference of n·Δ,
    its standard error); seeds pair by index (the same draws when the run was ``paired``)."""
    df, s = tables["results"], tables["samples"]
    n = int(df["n"].max())
    last = df[df["n"] == n].set_index(["estimator", "G"])["predicted_mean"]
    s = s[s["n"] == n].sort_values("seed")
    out = []
    for G in sorted(set(df["G"])):
        a = s.loc[(s["estimator"] == name) & (s["G"] == G), "scaled_gap"].to_numpy(float)
        b = s.loc[(s["estimator"] == base) & (s["G"] == G), "scaled_gap"].to_numpy(float)
        d = a - b
        out.append((int(G), last[name, G] - last[base, G], d.mean(), d.std(ddof=1) / d.size**0.5))
    return np.array(out)


def rate_figure(tables: dict, path) -> Path:
    """G²·(Σw − Σw_oracle) against G, one panel per estimator besides the oracle: the prediction
    (line) and the mean paired difference of n·Δ at the largest n with its 95% interval (points).
    Corollary 9 (arXiv 2603.01162) makes loo's curve bounded; vanilla's grows like G here."""
    plt = pyplot()
    df = tables["results"]
    names = [e for e in dict.fromkeys(df["estimator"]) if e != "oracle"]
    fig, axes = plt.subplots(
        1, len(names), figsize=(4.2 * len(names), 3.6), constrained_layout=True, squeeze=False
    )
    for ax, name in zip(axes[0], names, strict=True):
        G, pred, mean, se = differences(tables, name).T
        ax.plot(G, G**2 * pred, "k-", lw=1.2, label="predicted G²(Σw − Σw_oracle)")
        ax.errorbar(
            G,
            G**2 * mean,
            yerr=1.96 * G**2 * se,
            fmt="o",
            ms=4,
            capsize=3,
            label=f"G² × mean n·Δ difference, n = {int(df['n'].max()):,}",
        )
        ax.axhline(0, color="0.6", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set(title=f"{name} − oracle", xlabel="G", ylabel="G² × difference")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"limit weights against G (Cor. 9, 10 of arXiv 2603.01162), {seeds_label(df)}")
    return save(fig, path)
