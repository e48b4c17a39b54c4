"""Claims statistics on the std-normalization labs (``gpolab train``, ``gpolab stdnorm``,
``gpolab curvature``): iteration gains against the predicted ones, the arcsin direction and
Lemma 11's ratio, the curvature constants.
"""

from __future__ import annotations

import math

import numpy as np

from gpolab.labs.claims.stats import exact_statistic, ratio_and_se, statistic


def _ci_se(lo, hi) -> float:
    """The SE behind a two-sided 95% normal interval."""
    return float((hi - lo) / (2 * 1.959963984540054))


def _gain_se(row) -> float:
    """A gain's SE from its 95% interval (0 where the interval is a point: exact gradients)."""
    if "gain_ci_low" not in row or not math.isfinite(row["gain_ci_low"]):
        return 0.0
    return _ci_se(row["gain_ci_low"], row["gain_ci_high"])


def gain_fades(t: dict) -> dict:
    """ "Fades": the excess gain (gain − 1) at the highest ρ is at most half of that at ρ = 0 —
    a decrease that matters, not any decrease.  Exact gradients: the gains are deterministic."""
    g = t["gain"]
    exact = g[~np.isfinite(g["G"]) & ~g["control"].astype(bool)]
    adm = exact[exact["comparison"].str.startswith("admissible")].set_index("setting")
    orc = exact[exact["comparison"].str.startswith("oracle")].set_index("setting")
    hi = max(k for k in adm.index if k.startswith("rho=") and k != "rho=0")
    g0, gh, go = adm.loc["rho=0"], adm.loc[hi], orc.loc[hi]
    kept, kept_se = ratio_and_se(gh["gain"] - 1, _gain_se(gh), g0["gain"] - 1, _gain_se(g0))
    return statistic(
        f"exact gradients, admissible steps: gain {g0['gain']:.3g} at ρ = 0, "
        f"{gh['gain']:.3g} at {hi.replace('rho=', 'ρ = ')} ({100 * kept:.0f}% of "
        f"the excess over 1 kept); against the interference-aware oracle step "
        f"{go['gain']:.3g}",
        gain_rho0=(float(g0["gain"]), _gain_se(g0)),
        excess_kept=(kept, kept_se),
        oracle_gain_rho_high=(float(go["gain"]), _gain_se(go)),
    )


def group_size_gain(t: dict) -> dict:
    """The sampled-group gain at the smallest and the largest G (SE from their 95% intervals);
    NaN, not testable at these sizes, when one G was sampled."""
    g = t["gain"]
    adm = g[g["comparison"].str.startswith("admissible") & (g["setting"] == "rho=0")]
    sampled = adm[np.isfinite(adm["G"])].set_index("G")
    small, large = sampled.index.min(), sampled.index.max()
    one = small == large
    lo, hi = sampled.loc[small], sampled.loc[large]
    nan = math.nan
    return statistic(
        ("one sampled G: not testable at these sizes; " if one else "")
        + ", ".join(
            f"G = {int(k)}: {r.gain:.3g} ({r.gain_ci_low:.3g}–{r.gain_ci_high:.3g})"
            for k, r in sampled.iterrows()
        ),
        gain_small_G=(nan if one else float(lo["gain"]), nan if one else _gain_se(lo)),
        gain_large_G=(nan if one else float(hi["gain"]), nan if one else _gain_se(hi)),
    )


def curvature_bounds(t: dict) -> dict:
    f = t["fits"].set_index("quantity")
    return {
        "se": {},
        "detail": f"tightest constants {f.loc['grad_norm', 'max_ratio']:.3f} (bound 2) and "
        f"{f.loc['hess_norm', 'max_ratio']:.3f} (bound 4)",
    }


def stdnorm_gain(t: dict) -> dict:
    """Exact-gradient gains and norm ratios (deterministic: SE 0) and the best tuned sampled gain
    (SE from its 95% interval)."""
    g = t["gain"]
    adm = g[g["comparison"].str.startswith("admissible") & (g["setting"] == "rho=0")]
    base = adm[~np.isfinite(adm["G"])].iloc[0]
    tuned = g[(g["comparison"] == "tuned") & ~g["control"] & np.isfinite(g["G"])]
    if len(tuned):
        best = tuned.loc[tuned["gain_ci_low"].idxmax()]
        tuned_gain, tuned_se = float(best["gain"]), _gain_se(best)
    else:
        tuned_gain, tuned_se = math.nan, math.nan
    sampled = adm[np.isfinite(adm["G"])]
    sampled_txt = ", ".join(f"G = {int(r.G)}: {r.gain:.3g}" for r in sampled.itertuples())
    return statistic(
        f"admissible steps, ρ = 0, exact gradients: iterations gain "
        f"{base['gain']:.3g} vs predicted {base['pred_gain']:.3g} (a ratio of upper "
        f"bounds); gradient-norm ratio {base['gnorm_ratio']:.3g} vs predicted "
        f"{base['pred_gnorm_ratio']:.3g} (the quantity the reconstructed bound "
        f"covers); sampled groups {sampled_txt}; tuned steps: best gain "
        f"{tuned_gain:.3g} ± {tuned_se:.2g}",
        gain_over_predicted=(float(base["gain"] / base["pred_gain"]), 0.0),
        gnorm_ratio_over_predicted=(float(base["gnorm_ratio"] / base["pred_gnorm_ratio"]), 0.0),
        tuned_gain=(tuned_gain, tuned_se),
    )


def _arcsin_rows(t: dict):
    return t["arcsin_direction"].sort_values("G")


def arcsin_direction(t: dict) -> dict:
    """Proposition 13 on the exact mean direction (count tables, SE 0): its relative error to
    ∇E[2 arcsin √V] at the largest G and at G = 8 (NaN without that G), the steps in G where that
    error does not fall, and how much closer it is to ∇𝒥 than to ∇E V at the largest G (cos
    difference)."""
    d = _arcsin_rows(t)
    err = d["rel_err"].to_numpy(np.float64)
    last = d.iloc[-1]
    closer = float(last["cos_arcsin"] - last["cos_plain"])
    at8 = d.loc[d["G"] == 8, "rel_err"]
    return exact_statistic(
        "‖E ĝ − ∇𝒥‖/‖∇𝒥‖ by G: "
        + ", ".join(f"{int(r.G)}: {r.rel_err:.3g}" for r in d.itertuples())
        + f"; at G = {int(last['G'])} cos(E ĝ, ∇𝒥) = {last['cos_arcsin']:.5f}, cos(E ĝ, ∇E V) "
        f"= {last['cos_plain']:.4f} (cos(∇𝒥, ∇E V) = {last['cos_target_plain']:.4f})",
        rel_err_at_max_G=float(err[-1]),
        non_decreasing_steps=int(np.sum(np.diff(err) >= 0)),
        closer_to_arcsin=closer,
        rel_err_at_G8=float(at8.iloc[0]) if len(at8) else math.nan,
    )


def lemma11_ratio(t: dict) -> dict:
    """Lemma 11: E‖ĝ − U_std‖²/E‖U_std‖² exactly (SE 0) at the largest G and the steps where it
    does not fall; the measured ratios against the exact ones (Σ z², χ² over G: a p-value)."""
    from scipy.stats import chi2

    d = _arcsin_rows(t)
    exact = d["u_ratio_exact"].to_numpy(np.float64)
    z = ((d["u_ratio"] - d["u_ratio_exact"]) / d["u_ratio_se"]).to_numpy(np.float64)
    p = float(chi2.sf(np.sum(z**2), len(z))) if np.all(np.isfinite(z)) else math.nan
    return exact_statistic(
        "exact E‖ĝ − U‖²/E‖U‖² by G: "
        + ", ".join(
            f"{int(r.G)}: {r.u_ratio_exact:.3g} (measured {r.u_ratio:.3g} ± {r.u_ratio_se:.2g})"
            for r in d.itertuples()
        )
        + f"; measured vs exact p = {p:.2g}",
        ratio_at_max_G=float(exact[-1]),
        non_decreasing_steps=int(np.sum(np.diff(exact) >= 0)),
        joint_p=p,
    )


STATISTICS = (
    gain_fades,
    group_size_gain,
    curvature_bounds,
    stdnorm_gain,
    arcsin_direction,
    lemma11_ratio,
)
