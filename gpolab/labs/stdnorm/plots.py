"""Figures of the std-normalization lab, drawn from its saved tables only (``summary``,
``gain``, ``curves``, ``phases``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpolab.kit.plots import pyplot, save, seeds_label

LABELS = {
    "grpo": "GRPO (std per prompt)",
    "grpo[scale=batch]": "GRPO (batch std)",
    "grpo-batch": "GRPO (batch std)",  # tables saved before the spec spelling
    "mean": "REINFORCE, mean baseline",
    "loo": "REINFORCE, RLOO",
    "vanilla": "REINFORCE, no baseline",
    "reinforce": "REINFORCE (RLOO), η = 1/L",
    "reinforce-iterate": "REINFORCE (RLOO), η_t = 1/L_t (oracle)",
}
LEVEL_METHODS = ("reinforce", "reinforce-iterate", "loo")  # the level gains the phases show


def _G_name(G) -> str:
    return "∞ (exact)" if not np.isfinite(G) else f"{G:g}"


def _run_curves(curves, regime, setting, G, optimizer, method=None):
    """The rows of ``curves`` of one run (or of every method of one comparison)."""
    sel = (curves.regime == regime) & (curves.setting == setting)
    sel &= (curves.G == G) & (curves.optimizer == optimizer)
    if method is not None:
        sel &= curves.method == method
    return curves[sel]


def curves_figure(tables: dict, path) -> Path:
    """J_t (mean over seeds, 95% CI band) per method, main setting: admissible steps (the two
    largest G, ∞ first) and tuned steps (the first optimizer, the two largest G), whichever
    regimes ran; the target dashed."""
    summary, curves = tables["summary"], tables["curves"]
    plt = pyplot()
    main = summary.setting.iloc[0]
    panels = []
    for regime in ("admissible", "tuned"):
        sub = summary[(summary.regime == regime) & (summary.setting == main)]
        if sub.empty:
            continue
        opt = sub.optimizer.iloc[0]
        for G in sorted(sub.G.unique(), key=lambda g: -g)[:2]:
            panels.append((regime, opt, G, sub[(sub.G == G) & (sub.optimizer == opt)]))
    fig, axes = plt.subplots(
        1, len(panels), figsize=(4.6 * len(panels), 4), constrained_layout=True, squeeze=False
    )
    for ax, (regime, opt, G, sub) in zip(axes[0], panels, strict=True):
        for j, m in enumerate(sub.method):
            cur = _run_curves(curves, regime, main, G, opt, m)
            ax.plot(cur.t, cur.J, color=f"C{j}", label=LABELS.get(m, m))
            if cur.n_seeds.iloc[0] > 1:
                lo, hi = cur.J - cur.J_ci_half, cur.J + cur.J_ci_half
                ax.fill_between(cur.t, lo, hi, color=f"C{j}", alpha=0.2, lw=0)
        ax.axhline(sub.target.iloc[0], color="k", ls="--", lw=1)
        seeds = "" if not np.isfinite(G) else f", {seeds_label(sub)}"
        title = f"{regime}, {main}, {opt}, G = {_G_name(G)}{seeds}"
        ax.set(xlabel="iteration t", ylabel="J_t", title=title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    return save(fig, path)


def gain_figure(tables: dict, path) -> Path:
    """(a) measured gain (iterations to target, REINFORCE over GRPO; 95% bootstrap CI for
    sampled runs) against ρ for the admissible a-priori and oracle steps, predictions thin
    dashed, equal-σ control as open squares; (b) the same against the mean pairwise gradient
    cosine; (c) tuned steps (best on the grid each): measured against predicted σ_max/σ̄."""
    gains = tables["gain"]
    plt = pyplot()
    fig, axes = plt.subplots(
        1, 3, figsize=(16, 4.8), constrained_layout=True, gridspec_kw=dict(width_ratios=[5, 5, 4])
    )
    _admissible_panels(axes[0], axes[1], gains)
    c = gains.curv_const.dropna()
    law = f"curvature law, c = {c.iloc[0]:g}" if len(c) else "curvature law"
    axes[0].set(
        xlabel="ρ (shared-block weight)",
        ylabel="gain = iters_REINFORCE / iters_GRPO",
        title=f"(a) admissible steps ({law})",
    )
    axes[1].set(
        xlabel="mean pairwise cosine of g_x (GRPO, before target)",
        ylabel="gain",
        title="(b) gain against gradient alignment",
    )
    _tuned_panel(axes[2], gains[gains.comparison == "tuned"])
    for ax in axes:
        ax.axhline(1.0, color="k", lw=0.8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6.5)
    sampled = gains[np.isfinite(gains.G.astype(float))]
    seeds = f"; {seeds_label(sampled)} per sampled run" if len(sampled) else ""
    fig.suptitle(
        "Convergence gain of std-normalized GRPO over REINFORCE "
        f"(SGD, target J = {gains.target.iloc[0]:g}{seeds})"
    )
    return save(fig, path)


def _admissible_panels(ax_rho, ax_cos, gains) -> None:
    colors = {"admissible 1/L": "C0", "oracle 1/L_t": "C2"}
    marks = ["o", "s", "^", "D", "v"]
    adm = gains[gains.comparison.isin(list(colors))]
    Gs = sorted(adm.G.unique(), key=lambda g: -g)  # ∞ first
    for name, color in colors.items():
        for j, G in enumerate(Gs):
            grp = adm[(adm.comparison == name) & (adm.G == G)]
            if grp.empty:
                continue
            gname = "G = ∞" if not np.isfinite(G) else f"G = {G:g}"
            main = grp[~grp.control.astype(bool)].sort_values("rho")
            err = np.vstack([main.gain - main.gain_ci_low, main.gain_ci_high - main.gain])
            err = np.where(np.isfinite(err), np.abs(err), 0.0)
            ls = "-" if j == 0 else (0, (4, 2 * j))
            style = dict(
                marker=marks[j % 5], ls=ls, color=color, capsize=3, label=f"{name}, {gname}"
            )
            for ax, x in ((ax_rho, main.rho), (ax_cos, main.cos_mean)):
                ax.errorbar(x, main.gain, yerr=err, **style)
                if j == 0:
                    ax.plot(x, main.pred_gain, ":", color=color, lw=1.5, label=f"predicted, {name}")
            ctrl = grp[grp.control.astype(bool)]
            x = ctrl.rho - 0.02 * (j + 1)
            ax_rho.plot(
                x, ctrl.gain, marker=marks[j % 5], ls="none", color=color, mfc="none", ms=10
            )
    ax_rho.plot([], [], "ks", mfc="none", ms=10, label="equal-σ control (ρ = 0, offset)")


def _tuned_panel(ax, tuned) -> None:
    labels = []
    for i, (_, row) in enumerate(tuned.iterrows()):
        gname = "∞" if not np.isfinite(row.G) else f"{row.G:g}"
        labels.append(f"{row.setting}\n{row.optimizer} G={gname}")
        lo = row.gain - row.gain_ci_low if np.isfinite(row.gain_ci_low) else 0.0
        hi = row.gain_ci_high - row.gain if np.isfinite(row.gain_ci_high) else 0.0
        label = "measured (95% CI)" if i == 0 else None
        ax.errorbar(i, row.gain, yerr=[[abs(lo)], [abs(hi)]], fmt="ko", capsize=3, label=label)
        ax.plot(i, row.pred_gain, "r_", ms=14, mew=2, label="predicted σ_max/σ̄" if i == 0 else None)
    ax.set_xticks(range(len(labels)), labels, fontsize=6, rotation=60)
    ax.set(ylabel="gain", title="(c) tuned steps (best of the grid each)")


def phase_selection(summary):
    """(regime, rows) the phase figure shows: the admissible exact runs without the control,
    else the tuned exact SGD runs; None when neither has a GRPO run."""
    base = summary[~summary.control.astype(bool) & ~np.isfinite(summary.G)]
    for regime in ("admissible", "tuned"):
        sub = base[(base.regime == regime) & (base.optimizer == "sgd")]
        if (sub.method == "grpo").any():
            return regime, sub
    return None


def phases_figure(tables: dict, path) -> Path:
    """Exact gradients (admissible steps, else tuned SGD): σ̄_t, the mean pairwise gradient
    cosine and the level gain (iterations REINFORCE needs to reach GRPO's J_t, over t) along
    GRPO's trajectory, one column per ρ (smallest and largest), the phases of the ``phases``
    table shaded."""
    plt = pyplot()
    regime, sub = phase_selection(tables["summary"])
    rhos = sorted(sub.rho.unique())
    show = [rhos[0]] + ([rhos[-1]] if len(rhos) > 1 else [])
    size = dict(figsize=(5.5 * len(show), 8), sharex=True, constrained_layout=True, squeeze=False)
    fig, axes = plt.subplots(3, len(show), **size)
    for c, rho in enumerate(show):
        label = sub[sub.rho == rho].setting.iloc[0]
        _phase_column(axes[:, c], tables, regime, label)
        for ax in axes[:, c]:
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle(
        "Gain along training (I/II/III: heuristic phases from the gain vs the oracle step)"
    )
    return save(fig, path)


def _phase_column(axes, tables: dict, regime: str, label: str) -> None:
    curves, phases = tables["curves"], tables["phases"]
    here = _run_curves(curves, regime, label, np.inf, "sgd")
    cg = here[here.method == "grpo"]
    if cg.empty:
        return
    t = cg.t.to_numpy()
    axes[0].plot(t, cg.sigma_bar, color="C0", label="σ̄_t (GRPO)")
    axes[0].plot(t, cg.sigma_max, color="C0", ls=":", label="max_x σ_x (GRPO)")
    axes[0].plot(t, cg.J, color="k", lw=1, label="J_t (GRPO)")
    axes[1].plot(t, cg.cos, color="C0", label="GRPO")
    for j, m in enumerate(LEVEL_METHODS):
        cr = here[here.method == m]
        if cr.empty:
            continue
        axes[2].plot(cr.t, cr.level_gain, color=f"C{j + 1}", label=f"vs {LABELS.get(m, m)}")
        axes[1].plot(cr.t, cr.cos, color=f"C{j + 1}", ls="--", label=LABELS.get(m, m))
    at = (phases.regime == regime) & (phases.setting == label)
    ph = phases[at & ~np.isfinite(phases.G) & (phases.optimizer == "sgd")]
    if not ph.empty:
        t1, t2 = int(ph.t1.iloc[0]), int(ph.t2.iloc[0])
        for ax in axes:
            ax.axvspan(0, t1, color="tab:green", alpha=0.08)
            ax.axvspan(t1, t2, color="tab:gray", alpha=0.08)
            ax.axvspan(t2, t[-1], color="tab:red", alpha=0.08)
        for x, txt in ((t1 / 2, "I"), ((t1 + t2) / 2, "II"), ((t2 + t[-1]) / 2, "III")):
            axes[2].text(x, 1.0, txt, ha="center", va="bottom", fontsize=11)
    axes[0].set(ylabel="σ (and J)", title=f"{label}, {regime} steps, G = ∞")
    axes[1].set(ylabel="mean pairwise cos(g_x, g_z)", ylim=(-0.05, 1.0))
    axes[2].axhline(1.0, color="k", lw=0.8, ls="--")
    axes[2].set(xlabel="iteration t (GRPO)", ylabel="level gain at GRPO's J_t")


def arcsin_figure(tables: dict, path) -> Path:
    """The arcsin regime: 1 − cos and the relative error of the exact finite-G mean direction
    against ∇𝒥 (and 1 − cos against ∇E V), and Lemma 11's ratio (measured ± 2 SE, exact line),
    over G."""
    d = tables["arcsin_direction"].sort_values("G")
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 4), constrained_layout=True)
    ax = axes[0]
    ax.loglog(d.G, 1 - d.cos_arcsin, "o-", label="1 − cos(E ĝ, ∇J_arcsin)")
    ax.loglog(d.G, d.rel_err, "s-", label="‖E ĝ − ∇J_arcsin‖/‖∇J_arcsin‖")
    ax.loglog(d.G, 1 - d.cos_plain, "^--", label="1 − cos(E ĝ, ∇E V)")
    ax.set(xlabel="G", title="exact mean direction (count tables), θ = 0")
    ax = axes[1]
    ax.errorbar(d.G, d.u_ratio, yerr=2 * d.u_ratio_se, fmt="o", label="measured ± 2 SE")
    ax.plot(d.G, d.u_ratio_exact, "k-", lw=1, label="exact")
    ax.set(xscale="log", yscale="log", xlabel="G", title="Lemma 11: E‖ĝ − U‖² / E‖U‖²")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(
        "Prop. 13 and Lemma 11 (arXiv 2603.01162, App. A), log-linear bandit; "
        f"{int(d['draws'].iloc[0]):,} draws per G"
    )
    return save(fig, path)
