"""Figures of the off-policy lab, drawn from its saved ``results`` table: the paired bias² (each
update minus the SIS update on the same draws, which SIS — the unbiased control, not drawn —
makes the bias against g for loo-type advantages), the MSE against a fresh on-policy update at
the same θ and the clipped-token fraction, against the minibatch updates m per rollout batch or
the staleness k; one line per rule, one row of panels per step size shown."""

from __future__ import annotations

from pathlib import Path

from gpolab.estimators.offpolicy import rule_name as _rule
from gpolab.kit.plots import pyplot, save, seeds_label, suptitle

STYLE = {"none": "-", "ppo": "--", "higher": "-.", "dual": ":", "weight": "-"}


def _etas(df) -> list:
    """At most three step sizes: the smallest, the middle and the largest."""
    etas = sorted(df["eta"].unique())
    return sorted({etas[0], etas[len(etas) // 2], etas[-1]})


def _family(name: str) -> str:
    """A rule's colour family: its ratio name before any clip or KL suffix."""
    return name.split("/")[0].split(" ")[0]


def _figure(df, axis: str, fixed: dict, path, title: str) -> Path:
    for col, val in fixed.items():
        df = df[df[col] == val]
    first = df.iloc[0]
    keep = {c: first[c] for c in ("policy", "advantage") if c in df and isinstance(first[c], str)}
    for c, v in keep.items():
        df = df[df[c] == v]
    etas = _etas(df)
    cols = 4 if (df["clip_frac"] > 0).any() else 3  # no clipped token: no clip panel
    fig, axes = pyplot().subplots(
        len(etas),
        cols,
        figsize=(4.3 * cols, 3.3 * len(etas)),
        squeeze=False,
        constrained_layout=True,
    )
    rules = list(dict.fromkeys(_rule(r) for _, r in df.iterrows()))
    colors = {f: f"C{i}" for i, f in enumerate(dict.fromkeys(map(_family, rules)))}
    floor = max(float(df["bias_sq_paired_se"][df["bias_sq_paired_se"] > 0].median()), 1e-30)
    for row, eta in zip(axes, etas, strict=True):
        d = df[df["eta"] == eta]
        for name in rules:
            g = d[[_rule(r) == name for _, r in d.iterrows()]].sort_values(axis)
            if not g.empty:
                _lines(row, g, axis, name, colors[_family(name)])
        _labels(row, axis, eta, floor, sorted(d[axis].unique()))
    axes[0][1].legend(fontsize=7, ncol=2)
    where = ", ".join(f"{k} {v}" for k, v in keep.items())
    suptitle(
        fig,
        f"{title} ({df['env'].iloc[0]}{', ' + where if where else ''}, G = "
        f"{int(first['G'])}, {seeds_label(df)})",
    )
    return save(fig, path)


def _lines(row, g, axis: str, name: str, color: str) -> None:
    """One rule's lines in a row of panels: paired bias², the two excesses, the clip fraction."""
    style = dict(color=color, marker="o", ms=3, ls=STYLE.get(g["clip"].iloc[0], "-"), label=name)
    if g["ratio"].iloc[0] != "sis":  # the control: its paired bias is 0 by definition
        row[0].errorbar(
            g[axis], g["bias_sq_paired"], yerr=g["bias_sq_paired_se"], capsize=2, **style
        )
    row[1].errorbar(g[axis], 1 + g["excess_mse"], yerr=g["excess_mse_se"], capsize=2, **style)
    row[2].errorbar(g[axis], 1 + g["excess_scaled"], yerr=g["excess_scaled_se"], capsize=2, **style)
    if len(row) == 4:
        row[3].plot(g[axis], g["clip_frac"], **style)


def _labels(row, axis: str, eta: float, floor: float, ticks: list) -> None:
    """A row's axes: scales, the safe-reuse line, labels and ticks."""
    row[0].set(yscale="symlog", ylabel=f"η = {eta:g}\nbias² vs g (paired with SIS; ±1 SE)")
    row[0].set_yscale("symlog", linthresh=floor)
    for ax in row[1:3]:
        ax.axhline(1.1, color="k", lw=0.8, ls=":", label="+10% (safe reuse)")
    row[1].set(ylabel="MSE / MSE of a fresh on-policy\nupdate at the same θ")
    row[2].set(ylabel="the same at the best rescaling\n(scale-free: the direction)")
    if len(row) == 4:
        row[3].set(ylabel="clipped-token fraction")
    for ax in row:
        ax.set(xscale="log" if axis == "m" else "linear", xlabel=axis)
        ax.set_xticks(ticks, [str(int(t)) for t in ticks])
        ax.minorticks_off() if axis == "m" else None
        ax.grid(alpha=0.3)


def reuse_figure(tables: dict, path) -> Path:
    """bias², MSE/MSE(m = 1) and the clip fraction against m, at staleness 0."""
    df = tables["results"]
    return _figure(
        df,
        "m",
        {"staleness": df["staleness"].min()},
        path,
        "Minibatch reuse: m updates per rollout batch",
    )


def staleness_figure(tables: dict, path) -> Path:
    """The same against the staleness k, at m = 1."""
    df = tables["results"]
    return _figure(
        df, "staleness", {"m": df["m"].min()}, path, "Stale rollouts: k policy versions behind"
    )
