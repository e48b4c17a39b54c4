"""The figure of ``gpolab plan``, drawn from its saved summary, curve, kappa and groups tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpolab.kit.plots import pyplot, save

BARS = 64  # at most this many bars in the count histogram (a log of G = 65,536 drew 65,537)


def _pooled(tables: dict) -> dict:
    s = tables["summary"]
    return s[s["window"] == "all"].iloc[0].to_dict()


def _difficulty(ax, tables: dict, p: dict) -> None:
    """Per-group success rate c/n against the fitted beta-binomial at the modal n."""
    from scipy import stats

    g = tables["groups"]
    if p["rewards"] != "binary":
        ax.hist(g["mean"], bins=30, color="0.6")
        ax.set_xlabel("group mean reward (graded rewards)")
        ax.set_title("rewards per group", fontsize=9)
        return
    n = int(p["G"])
    at = g[g["n"] == n]
    counts = np.bincount(at["successes"].astype(int), minlength=n + 1) / max(len(at), 1)
    start = np.unique(np.linspace(0, n + 1, min(n + 1, BARS) + 1).astype(int))[:-1]
    width = np.diff(np.append(start, n + 1))  # counts c in [start, start + width) share a bar
    x = (start + (width - 1) / 2) / n
    shown = f"log ({len(at):,} groups of {n}" + (
        f", {width.max()} counts a bar)" if n >= BARS else ")"
    )
    ax.bar(x, np.add.reduceat(counts, start), width=0.8 * width / n, color="0.65", label=shown)
    if np.isfinite(p["a"]):  # all-pass or all-fail logs have no fit
        fit = np.add.reduceat(stats.betabinom.pmf(np.arange(n + 1), n, p["a"], p["b"]), start)
        ax.plot(x, fit, "o-", color="C3", ms=3, label=f"Beta({p['a']:.2g}, {p['b']:.2g}) fit")
    ax.set_xlabel("success rate c/n of a group")
    ax.set_ylabel("share of groups")
    ax.set_title("difficulty: log vs beta-binomial fit", fontsize=9)
    ax.legend(fontsize=7)


def _degenerate(ax, tables: dict, p: dict) -> None:
    """The curve where it has a number (log y when some value is positive, else linear with a
    note saying why it is flat: a model-free curve of continuous rewards is 0 at every G it
    covers and unknown beyond the log's smallest group)."""
    c = tables["curve"]
    c = c[c["window"] == "all"]
    if c["predicted"].isna().all() and c["lo"].notna().any():  # all-pass or all-fail: no fit
        ax.plot(c["G"], c["lo"], "--", color="C0", label="95% lower bound (no fit)")
    c = c[np.isfinite(c["predicted"].astype(float))]
    empirical = str(p.get("model", "")).startswith("empirical")
    label = "estimated from the log's groups" if empirical else "predicted (exact under the fit)"
    ax.plot(c["G"], c["predicted"], "o-" if len(c) < 20 else "-", ms=3, color="C0", label=label)
    if c["lo"].notna().any():
        ax.fill_between(c["G"], c["lo"], c["hi"], color="C0", alpha=0.2, label="95% of the fit")
    measured = p.get("logged_measured")
    if measured is not None and np.isfinite(measured):
        se = p.get("logged_measured_se")
        se = se if se is not None and np.isfinite(se) else 0.0
        ax.errorbar([p["G"]], [measured], yerr=[1.96 * se], fmt="o", color="C3", label="logged")
    ax.axhline(p["target"], color="0.5", ls=":", lw=1, label=f"target {p['target']:g}")
    ax.set_xscale("log", base=2)
    if (c["predicted"] > 0).any():
        ax.set_yscale("log")
    else:
        ax.set_ylim(-0.05, 1.05)
    if empirical:
        top = int(p.get("G_max_estimated", c["G"].max() if len(c) else 2))
        why = f"no model for these rewards: estimated for G <= {top} only"
        if not (c["predicted"] > 0).any():
            why += f"\nno group of the log is all-equal: 0 at every G <= {top}"
        ax.text(0.5, 0.55, why, ha="center", fontsize=7, transform=ax.transAxes)
    ax.set_xlabel("group size G")
    ax.set_ylabel("degenerate (all-equal) groups")
    ax.set_title("zero-signal groups by G", fontsize=9)
    ax.legend(fontsize=7)


def _kappa(ax, tables: dict) -> None:
    k = tables["kappa"]
    if k.empty:
        why = "kappa needs binary rewards\nand a difficulty fit"
        ax.text(0.5, 0.5, why, ha="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    for name, sub in k.groupby("estimator", sort=False):
        ax.plot(sub["G"], sub["kappa_mean"], "o-", ms=3, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("group size G")
    ax.set_ylabel("mean kappa over the fitted difficulties")
    ax.set_title("estimator weight at this difficulty mix (loo = 1)", fontsize=9)
    ax.legend(fontsize=6)


def plan_figure(tables: dict, path) -> Path:
    """Difficulty histogram vs the fit, the degenerate curve with the logged check, and κ by G."""
    plt = pyplot()
    p = _pooled(tables)
    fig, axes = plt.subplots(1, 3, figsize=(14, 4), constrained_layout=True)
    _difficulty(axes[0], tables, p)
    _degenerate(axes[1], tables, p)
    _kappa(axes[2], tables)
    fig.suptitle(
        f"gpolab plan: {p['format']} log, {int(p['steps'])} steps, {int(p['groups']):,} groups",
        fontsize=10,
    )
    return save(fig, path)


def plancheck_figure(tables: dict, path) -> Path:
    """Per env: the degenerate-group curve, truth against what ``plan`` recovered from the log
    (with its 95% band), and G* truth against the estimate in the title."""
    plt = pyplot()
    df = tables["results"]
    df = df[df["format"] == df["format"].iloc[0]]
    envs = list(dict.fromkeys(df["env"]))
    fig, axes = plt.subplots(
        1, len(envs), figsize=(5.5 * len(envs), 4), squeeze=False, constrained_layout=True
    )
    for ax, env in zip(axes[0], envs, strict=True):
        sub = df[df["env"] == env]
        c = sub[sub["quantity"] == "degenerate fraction"]
        ax.plot(c["G"], c["truth"], "k.-", label="truth (exact)")
        ax.plot(c["G"], c["recovered"], "C0-", label="recovered from the log")
        ax.fill_between(c["G"], c["lo"], c["hi"], color="C0", alpha=0.2, label="95% interval")
        logged = sub[sub["quantity"] == "logged degenerate fraction"].iloc[0]
        err = [[logged["recovered"] - logged["lo"]], [logged["hi"] - logged["recovered"]]]
        ax.errorbar(
            [logged["G"]],
            [logged["recovered"]],
            yerr=err,
            fmt="o",
            color="C3",
            label="measured in the log",
        )
        gs = sub[sub["quantity"] == "G*"].iloc[0]
        title = f"{env}: G* truth {gs['truth']:.3g}"
        if np.isfinite(gs["recovered"]):
            title += f", recovered {gs['recovered']:.3g} [{gs['lo']:.3g}, {gs['hi']:.3g}]"
        ax.set_title(title, fontsize=9)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("group size G")
        ax.set_ylabel("degenerate (all-equal) groups")
        ax.legend(fontsize=7)
    return save(fig, path)
