"""Claims statistics on the χ² lab's tables (``gpolab chi2``): the limiting law of n·gap and the
rate of Σw − Σw_oracle in G.
"""

from __future__ import annotations

import math

import numpy as np

from gpolab.labs.claims.stats import bonferroni, exact_statistic, statistic


def chi2_law(t: dict) -> dict:
    """At the largest n: z of each estimator's empirical mean of n·gap against the predicted
    Σ w_k (SE from its 95% CI) and the KS p-value against the predicted law, each combined over
    the estimators by Bonferroni (valid however the estimators' runs are related).  p-values are
    their own tests: SE 0."""
    from scipy.stats import norm

    df = t["results"]
    last = df[df["n"] == df["n"].max()]
    se = (last["ci_high"] - last["ci_low"]) / (2 * 1.959964)
    z = ((last["empirical_mean"] - last["predicted_mean"]) / se).to_numpy(float)
    mean_p = bonferroni(2 * norm.sf(np.abs(z)))
    ks = bonferroni(last["ks_pvalue"].to_numpy(float))
    return exact_statistic(
        f"n = {int(last['n'].iloc[0]):,}, {len(last)} estimators, "
        f"{int(last['n_seeds'].iloc[0]):,} seeds: mean of n·gap vs Σ w_k, z = "
        + ", ".join(f"{v:.2f}" for v in z)
        + f" (Bonferroni p = {mean_p:.2g}); KS p (Bonferroni) = "
        f"{ks:.2g}",
        mean_p_bonferroni=mean_p,
        ks_p_bonferroni=ks,
    )


def _log_slope(G, y, se) -> tuple[float, float]:
    """Weighted least-squares slope of log y on log G (weights (y/se)², the delta method) and
    its SE; NaN unless every y is positive and every se finite and positive."""
    G, y, se = (np.asarray(a, np.float64) for a in (G, y, se))
    if len(G) < 2 or not (np.all(y > 0) and np.all(np.isfinite(se)) and np.all(se > 0)):
        return math.nan, math.nan
    x, w = np.log(G), (y / se) ** 2
    xm = np.sum(w * x) / np.sum(w)
    sxx = np.sum(w * (x - xm) ** 2)
    slope = float(np.sum(w * (x - xm) * (np.log(y) - np.sum(w * np.log(y)) / np.sum(w))) / sxx)
    return slope, float(1 / math.sqrt(sxx))


def _rate_table(t: dict) -> dict:
    """Per estimator besides the oracle: (G, predicted Σw − Σw_oracle, mean paired n·Δ
    difference at the largest n, its SE) (:func:`gpolab.labs.chi2.plots.differences`)."""
    from gpolab.labs.chi2.plots import differences

    names = [e for e in dict.fromkeys(t["results"]["estimator"]) if e != "oracle"]
    return {name: differences(t, name) for name in names}


def _rate_joint(rates: dict) -> tuple[float, float]:
    """Σ z² of the measured differences against the predicted ones (every G, χ² per estimator,
    Bonferroni over estimators) and the largest |z|."""
    from scipy.stats import chi2

    ps, zmax = [], 0.0
    for d in rates.values():
        z = (d[:, 2] - d[:, 1]) / d[:, 3]
        if not np.all(np.isfinite(z)):
            return math.nan, math.nan
        ps.append(float(chi2.sf(np.sum(z**2), len(z))))
        zmax = max(zmax, float(np.max(np.abs(z))))
    return min(1.0, len(ps) * min(ps)), zmax


def _no_cells(estimator: str, names: tuple, measured: str) -> dict:
    """Every value NaN when the tables hold no ``estimator`` cells (SE 0, NaN for ``measured``)."""
    se = dict.fromkeys(names, 0.0) | {measured: math.nan}
    return {**dict.fromkeys(names, math.nan), "se": se, "detail": f"no {estimator} cells"}


def chi2_rate(t: dict) -> dict:
    """Corollary 9: Σw_loo − Σw_oracle against G on a log-log scale.  ``loo_slope`` is the
    weighted least-squares slope of the measured paired differences of n·Δ at the largest n (its
    SE by the delta method; expected −2), ``loo_slope_exact`` that of the predicted weights' sums
    (Lyapunov, exact: SE 0), ``joint_p`` the measured differences against the predicted ones."""
    rates = _rate_table(t)
    if "loo" not in rates:
        return _no_cells("loo", ("loo_slope", "loo_slope_exact", "joint_p"), "loo_slope")
    G, pred, mean, se = rates["loo"].T
    slope, slope_se = _log_slope(G, mean, se)
    exact = _log_slope(G, pred, pred * 1e-3)[0] if (pred > 0).all() else math.nan
    joint, zmax = _rate_joint(rates)
    return statistic(
        f"log-log slope of Σw_loo − Σw_oracle over G = "
        f"{', '.join(str(int(g)) for g in G)}: measured {slope:.2f} ± {slope_se:.2f}"
        f", predicted {exact:.2f}; G² × measured difference: "
        + ", ".join(f"{g**2 * m:.3g}" for g, m in zip(G, mean, strict=True))
        + f"; measured vs predicted differences joint p = {joint:.2g}, largest |z| "
        f"{zmax:.2f}",
        loo_slope=(slope, slope_se),
        loo_slope_exact=(exact, 0.0),
        joint_p=(joint, 0.0),
    )


def chi2_prompt_only(t: dict) -> dict:
    """Corollary 10 for the prompt-only baseline 0 (vanilla): the G where its predicted Σw is not
    above the oracle's (exact: SE 0), the log-log slope of its measured excess (SE: delta
    method) and the measured differences against the predicted ones (``joint_p``)."""
    rates = _rate_table(t)
    if "vanilla" not in rates:
        return _no_cells(
            "vanilla", ("excess_violations", "vanilla_slope", "joint_p"), "vanilla_slope"
        )
    G, pred, mean, se = rates["vanilla"].T
    bad = int((pred <= 0).sum())
    res = t["results"]
    last = res[res["n"] == res["n"].max()].set_index(["estimator", "G"])["weights"]
    low = [float(min(last["vanilla", g]) / min(last["oracle", g]) - 1) for g in G]
    slope, slope_se = _log_slope(G, mean, se)
    joint, zmax = _rate_joint(rates)
    return statistic(
        f"Σw_vanilla − Σw_oracle, predicted at G = "
        f"{', '.join(str(int(g)) for g in G)}: "
        + ", ".join(f"{p:.3g}" for p in pred)
        + f" ({bad} not above 0); smallest weight, vanilla against the oracle: "
        + ", ".join(f"{100 * x:+.1f}%" for x in low)
        + f"; measured log-log slope {slope:.2f} ± "
        f"{slope_se:.2f}; joint p = {joint:.2g}, largest |z| {zmax:.2f}",
        excess_violations=(bad, 0.0),
        vanilla_slope=(slope, slope_se),
        joint_p=(joint, 0.0),
    )


STATISTICS = (chi2_law, chi2_rate, chi2_prompt_only)
