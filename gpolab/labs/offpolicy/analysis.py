"""The off-policy lab's derived tables (:mod:`gpolab.labs.offpolicy.lab`): Thm 12's ``scaling``
slopes, the ``safe_reuse`` limits and the ``winners`` of each (η, m), from its ``results`` and
``updates`` tables."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from gpolab.estimators.offpolicy import rule_name

SAFE = 1.10  # "safe reuse": MSE within 10% of the on-policy update's


RULE = ["env", "policy", "advantage", "ratio", "clip", "kl", "kappa"]


def _groups(df, keys):
    keys = [k for k in keys if k in df]
    return df.groupby(keys, dropna=False, sort=False)


def fit_slope(x, y, se):
    """Weighted least squares of log y on log x (weights from se/y); (slope, its SE, points).
    Points with y ≤ 3·se (bias within noise) are left out; fewer than 2 points: NaN."""
    x, y, se = _resolved(x, y, se)
    x, y, se = x[x > 0], y[x > 0], se[x > 0]
    if len(x) < 2:
        return math.nan, math.nan, len(x)
    lx, ly, w = np.log(x), np.log(y), (y / se) ** 2
    X = np.stack([np.ones_like(lx), lx], 1)
    cov = np.linalg.inv(X.T @ (w[:, None] * X))
    beta = cov @ X.T @ (w * ly)
    resid = ly - X @ beta
    dof = len(x) - 2
    scale = max(1.0, float(np.sum(w * resid**2) / dof)) if dof > 0 else 1.0  # overdispersion
    return float(beta[1]), float(math.sqrt(cov[1, 1] * scale)), len(x)


BIAS = "bias_sq_paired"  # the scaling fits read the paired bias (the precise one)


ROUNDING = 1e-8  # a paired bias² below this share of the MSE is float rounding (rules that agree)


def _resolved(x, y, se, mse=None):
    """The points of (x, y, se) with y more than 3 SE above 0 (and above ``ROUNDING``·mse), in x
    order."""
    x, y, se = (np.asarray(a, float) for a in (x, y, se))
    floor = 0.0 if mse is None else ROUNDING * np.asarray(mse, float)
    ok = (y > 3 * se) & (y > floor) & (se > 0) & np.isfinite(y)
    order = np.argsort(x[ok])
    return x[ok][order], y[ok][order], se[ok][order]


def scaling(updates, results):
    """Thm 12's order per rule, from the paired bias² (the policy-gradient part minus the SIS
    update on the same draws, unbiased for loo-type advantages), each slope with its SE and
    z = (slope − 2)/SE:

    * ``slope_eta``: in η over every resolved step size (epoch average, largest m, staleness 0);
      ``slope_eta_low`` over the three smallest resolved (the order as η → 0) and
      ``slope_eta_high`` over the two largest (the growth at the largest steps);
    * ``slope_lag``: one update's bias² in its lag k + j (lag ≥ 1) at the smallest η whose lags
      resolve at least three points (``lag_eta``)."""
    rows = []
    for key, g in _groups(results, RULE):
        rec = dict(zip([k for k in RULE if k in results], _tuple(key), strict=True))
        at = g[(g["staleness"] == g["staleness"].min()) & (g["m"] == g["m"].max())]
        x, y, se = _resolved(at["eta"], at[BIAS], at[BIAS + "_se"], at["mse"])
        s_eta, se_eta, n_eta = fit_slope(x, y, se)
        low, high = fit_slope(x[:3], y[:3], se[:3]), fit_slope(x[-2:], y[-2:], se[-2:])
        s_lag, se_lag, lag_eta = _lag_slope(updates, rec)
        rows.append(
            {
                **rec,
                "m": int(at["m"].max()) if len(at) else None,
                "slope_eta": s_eta,
                "slope_eta_se": se_eta,
                "points_eta": n_eta,
                "z_eta": _z(s_eta, se_eta),
                "slope_eta_low": low[0],
                "slope_eta_low_se": low[1],
                "slope_eta_high": high[0],
                "slope_eta_high_se": high[1],
                "slope_lag": s_lag,
                "slope_lag_se": se_lag,
                "z_lag": _z(s_lag, se_lag),
                "lag_eta": lag_eta,
                "why_nan": "" if np.isfinite(s_eta) else WHY_NAN[rec["ratio"] == "sis"],
            }
        )
    return pd.DataFrame(rows)


WHY_NAN = (  # a rule's slope in η that cannot be fitted: why (index: is it the SIS control)
    "bias² within 3 SE (or float rounding) of 0 at all but < 2 step sizes (unbiased, or too "
    "few seeds)",
    "the SIS update is the control",
)


def _tuple(key) -> tuple:
    return key if isinstance(key, tuple) else (key,)


def _z(slope: float, se: float) -> float:
    """How many SE the slope lies from Thm 12's 2."""
    return (slope - 2) / se if se > 0 else math.nan


def _lag_slope(updates, rec: dict) -> tuple:
    """(slope, its SE, η) of one update's bias² in its lag k + j ≥ 1 for the rule ``rec``, at the
    smallest η whose lags resolve at least three points (NaNs where none does)."""
    u = updates
    for k in rec:
        u = u[(u[k] == rec[k]) | (u[k].isna() & pd.isna(rec[k]))]
    for eta, ge in sorted(u[u["lag"] >= 1].groupby("eta"), key=lambda kv: kv[0]):
        ge = ge.groupby("lag", as_index=False)[[BIAS, BIAS + "_se", "mse"]].mean()
        s, se_s, n = fit_slope(*_resolved(ge["lag"], ge[BIAS], ge[BIAS + "_se"], ge["mse"]))
        if np.isfinite(s) and n >= 3:
            return s, se_s, float(eta)
    return math.nan, math.nan, math.nan


def largest_safe(rows: pd.DataFrame, col: str, excess: str, limit: float) -> tuple:
    """(the largest ``col`` whose ``excess`` — and every smaller one's — is at most ``limit``,
    or None; "inconclusive" when a deciding margin is inside one SE (``excess + '_se'``), else
    "ok").  NaN never passes."""
    best, status = None, "ok"
    for _, r in rows.sort_values(col).iterrows():
        margin = limit - r[excess]
        if not np.isfinite(margin) or abs(margin) < r[excess + "_se"]:
            status = "inconclusive"
        if not margin >= 0:
            break
        best = int(r[col])
    return best, status


def safe_reuse(results):
    """Per rule and η: the largest m (staleness 0) and the largest staleness k (smallest m) whose
    excess over a fresh on-policy update at the same θ — and every smaller one's — is at most
    ``SAFE`` − 1 (10%), by MSE (``safe_m``, ``safe_staleness``) and by the scale-free MSE at the
    best rescaling (``*_scaled``: a clipped update shrinks, which lowers its MSE without making
    its direction better).  ``*_status``: "inconclusive" when a deciding margin is inside one SE
    (from the seed splits; the rows are paired)."""
    keys = [k for k in RULE + ["eta"] if k in results]
    rows = []
    for key, g in _groups(results, keys):
        rec = dict(zip(keys, _tuple(key), strict=True))
        out = dict(rec)
        for col, sel in (
            ("m", g[g["staleness"] == g["staleness"].min()]),
            ("staleness", g[g["m"] == g["m"].min()]),
        ):
            out[f"tested_{col}"] = int(sel[col].max()) if len(sel) else None
            for suffix, excess in (("", "excess_mse"), ("_scaled", "excess_scaled")):
                best, status = largest_safe(sel, col, excess, SAFE - 1)
                out[f"safe_{col}{suffix}"] = best
                out[f"safe_{col}{suffix}_status"] = status
        rows.append(out)
    return pd.DataFrame(rows)


def winners(results):
    """Per (policy, advantage, kl, kappa, η, m) at staleness 0: the rule whose updates come
    closest, scale-free, to a fresh on-policy update at the same θ (lowest ``excess_scaled``;
    the MSEs of different rules sit at different θ, their excesses do not, and a clipped update's
    smaller MSE is partly its smaller step), and whether its lead over the runner-up exceeds one
    SE; its excess by plain MSE beside it."""
    df = results[results["staleness"] == results["staleness"].min()]
    keys = [k for k in ("policy", "advantage", "kl", "kappa", "eta", "m") if k in df]
    rows = []
    for key, g in _groups(df, keys):
        g = g.sort_values("excess_scaled")
        best = g.iloc[0]
        rec = dict(zip(keys, _tuple(key), strict=True))
        # rules giving the same updates (token = sequence = sis on one-token responses) tie
        same = np.isclose(g["excess_scaled"], best["excess_scaled"], rtol=1e-5, atol=1e-9)
        names = " = ".join(rule_name(r) for _, r in g[same].iterrows())
        names = "every rule (the same update)" if same.all() else names
        lead = ""
        if (~same).any():
            second = g[~same].iloc[0]
            gap = second["excess_scaled"] - best["excess_scaled"]
            se = max(best["excess_scaled_se"], second["excess_scaled_se"])
            lead = ("clear of " if gap > se else "within 1 SE of ") + rule_name(second)
        row = {k: v for k, v in rec.items() if k in ("eta", "m") or (isinstance(v, str) and v)}
        row |= {"best": names, "excess_scaled": float(best["excess_scaled"])}
        rows.append(row | {"excess_mse": float(best["excess_mse"]), "lead": lead})
    return pd.DataFrame(rows)
