"""Analysis of the std-normalization lab's training curves (:mod:`gpolab.labs.stdnorm.lab`, which
re-exports these names): iterations to target and the best step size, the per-run summary, the
gain of GRPO over REINFORCE against the reconstructed gain law (theory §7), seed-mean curves
with the level gain along training, and the phases of that gain."""

from __future__ import annotations

import math

import numpy as np

from gpolab.theory import curvature


def curve_id(row) -> tuple:
    """(regime, setting, method, G, optimizer): a run's curves."""
    return (row["regime"], row["setting"], row["method"], row["G"], row["optimizer"])


def hit_time(curve: np.ndarray, target: float) -> np.ndarray:
    """First t with curve[..., t] ≥ target (float, inf where never), over the last axis."""
    reached = curve >= target
    first = np.argmax(reached, axis=-1).astype(float)
    return np.where(reached.any(axis=-1), first, np.inf)


def best_lr_index(J: np.ndarray, target: float) -> int:
    """Step size (axis 0 of J (L, S, T+1)) whose seed-mean curve reaches ``target`` first; ties
    and never-reached broken by the larger mean final J."""
    mean = J.mean(axis=1)
    t = hit_time(mean, target)
    order = np.lexsort((-mean[:, -1], t))
    return int(order[0])


def level_gain(J_fast: np.ndarray, J_slow: np.ndarray) -> np.ndarray:
    """Iteration gain along the trajectory: for each t, (iterations the slow curve needs to reach
    J_fast[t]) / t; nan where the slow curve never gets there (or t = 0)."""
    t = np.arange(J_fast.shape[-1], dtype=float)
    slow_best = np.maximum.accumulate(J_slow)
    need = np.searchsorted(slow_best, J_fast, side="left").astype(float)
    need = np.where(need >= J_slow.shape[-1], np.nan, need)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(t > 0, need / t, np.nan)


def bootstrap_hit_ratio(
    J_num: np.ndarray, J_den: np.ndarray, target: float, n_boot: int = 200, seed: int = 0
) -> tuple[float, float]:
    """95% bootstrap interval (over seeds, resampled independently for both curves) of
    hit_time(mean J_num) / hit_time(mean J_den); J_* are (S, T+1)."""
    rng = np.random.default_rng(seed)
    ratios = []
    for _ in range(n_boot):
        a = J_num[rng.integers(0, J_num.shape[0], J_num.shape[0])].mean(axis=0)
        b = J_den[rng.integers(0, J_den.shape[0], J_den.shape[0])].mean(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratios.append(hit_time(a, target) / hit_time(b, target))
    ratios = np.asarray(ratios)
    if not np.isfinite(ratios).any():
        return float("nan"), float("nan")
    ratios = ratios[~np.isnan(ratios)]
    return float(np.quantile(ratios, 0.025)), float(np.quantile(ratios, 0.975))


def summarize(res: dict, target: float, optimum: float) -> dict:
    """Best step size and the per-run report of one configuration's curves.  Trajectory averages
    (σ̄, σ_max, cosine, ḡ) run over the iterations before the seed-mean curve hits ``target``."""
    from gpolab.engine import Z95  # deferred: jax

    J = res["J"]
    i = best_lr_index(J, target)
    Jb = J[i]  # (S, T+1)
    mean = Jb.mean(axis=0)
    T = hit_time(mean, target)
    per_seed = hit_time(Jb, target)
    end = int(T) if np.isfinite(T) else Jb.shape[-1] - 1
    window = slice(0, max(end, 1))
    gap = optimum - Jb[:, -1]
    sbar = res["sigma_bar"][i].mean(axis=0)[window]
    smax_t = res["sigma_max"][i].mean(axis=0)[window]
    S = Jb.shape[0]
    return dict(
        lr_index=i,
        best_lr=float(res["lrs"][i]),
        iters=float(T),
        iters_seed_median=float(np.median(per_seed)),
        reached_frac=float(np.mean(np.isfinite(per_seed))),
        final_J=float(mean[-1]),
        final_J_se=float(Jb[:, -1].std(ddof=1) / np.sqrt(S)) if S > 1 else 0.0,
        gap_mean=float(gap.mean()),
        gap_q10=float(np.quantile(gap, 0.1)),
        gap_q50=float(np.quantile(gap, 0.5)),
        gap_q90=float(np.quantile(gap, 0.9)),
        sigma_bar=float(sbar.mean()),
        sigma_max=float(res["sigma_max"][i].max(axis=0)[window].max()),
        sigma_max_iter=float(smax_t.mean()),
        sigma_eff=float(res["sigma_eff"][i].mean(axis=0)[window].mean()),
        cos_mean=float(res["cos"][i].mean(axis=0)[window].mean()),
        cos_final=float(res["cos"][i].mean(axis=0)[-1]),
        gbar_rms=float(np.sqrt(np.mean(res["gbar"][i].mean(axis=0)[window] ** 2))),
        zero_frac=float(res["zero_frac"][i].mean()),
        ci_half=float(Z95 * Jb.std(axis=0, ddof=1).max() / np.sqrt(S)) if S > 1 else 0.0,
    )


COMPARISONS = {
    # name: (regime, REINFORCE methods, σ_max of the prediction)
    "admissible 1/L": ("admissible", ("reinforce",), "const"),
    "oracle 1/L_t": ("admissible", ("reinforce-iterate",), "iterate"),
    "tuned": ("tuned", None, "max"),  # None: every unnormalized estimator run (limit ∇J)
}
GAIN_COLUMNS = tuple(
    (
        "comparison setting rho control optimizer G reinforce lr_grpo lr_reinforce iters_reinforce "
        "iters_grpo gain gain_ci_low gain_ci_high pred_gain gnorm_ratio pred_gnorm_ratio sigma_bar "
        "sigma_max cos_mean cos_final n_seeds target curv_const"
    ).split()
)

# the gain table's columns read from GRPO's summary row as they are
GRPO_KEYS = (
    "setting rho control optimizer G sigma_bar cos_mean cos_final n_seeds curv_const".split()
)


def unnormalized(methods) -> list[str]:
    """The tuned methods that are REINFORCE: estimators whose G = ∞ limit is ∇J (registry)."""
    from gpolab import estimators  # deferred: jax
    from gpolab.engine import train

    def limit(spec: str) -> str:
        entry, options = estimators.bind(train.spec_of(spec))
        return entry.limit_for(options)

    return [m for m in set(methods) if limit(m) == "gradient"]


def gain_table(summary, curves: dict, target: float):
    """Per comparison, setting, optimizer and G: iterations to ``target`` of GRPO and REINFORCE
    (tuned: the faster unnormalized estimator), the measured gain with a bootstrap CI over seeds
    (exact runs: one trajectory, no CI) and the prediction of the reconstructed gain law along
    GRPO's trajectory:
    σ_max/σ̄ in iterations (σ_max = 1/2 for the a-priori 1/L step; for the oracle 1/L_t step
    σ_max → mean_t s(θ_t)/κ, :func:`gpolab.theory.curvature.predicted_gain_iterate`, which is
    max_x σ_x at ρ = 0 and σ̄ at ρ = 1; the trajectory max for tuned steps), √(σ̄/σ_max) in the
    average gradient norm — compared with the measured ratio of rms_t mean_x ‖g_x(θ_t)‖ (GRPO over
    REINFORCE) over GRPO's iterations to target."""
    import pandas as pd  # deferred: pandas (`gpolab train --help` stays fast)

    rows = []
    for name, (regime, methods, smax_kind) in COMPARISONS.items():
        sub = summary[summary.regime == regime]
        for _, grp in sub.groupby(["setting", "optimizer", "G"], sort=False):
            g = grp[grp.method == "grpo"]
            r = grp[grp.method.isin(methods or unnormalized(grp.method))]
            if g.empty or r.empty:
                continue
            r = r.sort_values(["iters", "final_J"], ascending=[True, False]).iloc[0]
            rows.append(_gain_row(name, smax_kind, g.iloc[0], r, curves, target))
    return pd.DataFrame(rows, columns=list(GAIN_COLUMNS))


def _gain_row(name: str, smax_kind: str, g, r, curves: dict, target: float) -> dict:
    """One comparison: GRPO's summary row ``g`` against REINFORCE's ``r``."""
    Jg = curves[curve_id(g)]["J"]
    Jr = curves[curve_id(r)]["J"]
    lo, hi = bootstrap_hit_ratio(Jr, Jg, target) if Jg.shape[0] > 1 else (math.nan, math.nan)
    smax = {
        "const": 0.5,
        "iterate": g.sigma_bar
        * curvature.predicted_gain_iterate(g.sigma_eff, g.sigma_bar, int(g.prompts), g.rho),
        "max": g.sigma_max,
    }[smax_kind]
    cr = curves[curve_id(r)]["gbar"].mean(axis=0)
    end = int(g.iters) if np.isfinite(g.iters) else cr.size - 1
    r_rms = float(np.sqrt(np.mean(cr[: max(end, 1)] ** 2)))
    return {k: g[k] for k in GRPO_KEYS} | dict(
        comparison=name,
        reinforce=r.method,
        lr_grpo=g.best_lr,
        lr_reinforce=r.best_lr,
        iters_reinforce=r.iters,
        iters_grpo=g.iters,
        gain=float(np.float64(r.iters) / g.iters) if np.isfinite(g.iters) else np.nan,
        gain_ci_low=lo,
        gain_ci_high=hi,
        pred_gain=smax / g.sigma_bar,
        gnorm_ratio=g.gbar_rms / r_rms,
        pred_gnorm_ratio=float(np.sqrt(g.sigma_bar / smax)),
        sigma_max=smax,
        target=target,
    )


PHASE_AGAINST = ("reinforce-iterate", "reinforce", "loo")  # the phases' comparison, by priority


CURVE_KEYS = "regime setting rho control method G optimizer n_seeds target".split()


def curve_table(summary, curves: dict):
    """Seed-mean curves of every run at its best step size, one row per (run, t): J with its 95%
    half-width, σ̄_t, max_x σ_x, the mean pairwise gradient cosine, ḡ_t, and for REINFORCE runs
    ``level_gain``: GRPO's level gain over them at GRPO's J_t (same regime, instance, G and
    optimizer; the first max(5, T/50) iterations left out: a ratio of a few iterations is not a
    rate)."""
    import pandas as pd  # deferred: pandas (`gpolab train --help` stays fast)

    from gpolab.engine import Z95  # deferred: jax

    frames = []
    for _, row in summary.iterrows():
        c = curves[curve_id(row)]
        J = c["J"]
        S, n = J.shape
        half = Z95 * J.std(axis=0, ddof=1) / np.sqrt(S) if S > 1 else np.full(n, np.nan)
        gain = np.full(n, np.nan)
        grpo = curves.get((row.regime, row.setting, "grpo", row.G, row.optimizer))
        if row.method != "grpo" and grpo is not None:
            gain = level_gain(grpo["J"].mean(0), J.mean(0))
            gain[: max(5, gain.size // 50)] = np.nan
        cols = {k: row[k] for k in CURVE_KEYS} | {
            "t": np.arange(n),
            "J": J.mean(0),
            "J_ci_half": half,
        }
        cols |= {k: c[k].mean(0) for k in ("sigma_bar", "sigma_max", "cos", "gbar")}
        frames.append(pd.DataFrame(cols | {"level_gain": gain}))
    return pd.concat(frames, ignore_index=True)


def phase_bounds(gain: np.ndarray) -> tuple[int, int]:
    """Phase boundaries from the level gain g(t) (nan-tolerant): phase I (acceleration) until g
    first reaches 90% of its peak, phase III (saturation) from the first time after the peak
    that g falls below 90% of it (or the end), phase II in between."""
    g = np.where(np.isfinite(gain), gain, np.nan)
    if not np.isfinite(g).any():
        return len(g) - 1, len(g) - 1
    peak = np.nanmax(g)
    t1 = int(np.nanargmax(g >= 0.9 * peak))
    tp = int(np.nanargmax(g))
    after = np.where((np.arange(len(g)) > tp) & (g < 0.9 * peak))[0]
    t2 = int(after[0]) if after.size else len(g) - 1
    return t1, max(t2, t1)


def phase_table(curve_df):
    """Per (regime, instance, G, optimizer) with GRPO and a REINFORCE comparison: the phases
    (:func:`phase_bounds`) of GRPO's level gain against the oracle 1/L_t step (else the a-priori
    1/L step, else RLOO; with the equal-σ control the oracle gain is 1)."""
    import pandas as pd  # deferred: pandas (`gpolab train --help` stays fast)

    rows = []
    keys = ["regime", "setting", "G", "optimizer"]
    for (regime, setting, G, opt), grp in curve_df.groupby(keys, sort=False):
        methods = set(grp.method)
        against = next((m for m in PHASE_AGAINST if m in methods), None)
        if "grpo" not in methods or against is None:
            continue
        gain = grp[grp.method == against].level_gain.to_numpy()
        t1, t2 = phase_bounds(gain)
        first = grp.iloc[0]
        peak = float(np.nanmax(gain)) if np.isfinite(gain).any() else math.nan
        values = (regime, setting, first.rho, first.control, G, opt, against, t1, t2)
        rows.append((*values, len(gain) - 1, peak))
    columns = "regime setting rho control G optimizer against t1 t2 t_end peak_gain".split()
    return pd.DataFrame(rows, columns=columns)
