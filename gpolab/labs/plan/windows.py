"""``gpolab plan``'s per-window analysis: the difficulty fit (binary rewards), the boundary and
graded cases, the degenerate curve's rows and the κ table (:mod:`gpolab.labs.plan.lab`)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from gpolab import estimators
from gpolab.labs.plan.config import Config
from gpolab.labs.plan.report import MAX_G, report_sizes
from gpolab.theory import difficulty, fit_checks, graded

GRADED_LEVELS = 10  # at most this many distinct reward values: a Dirichlet-multinomial fit


def modal(values) -> int:
    """The most common value (the smallest of tied ones)."""
    return int(pd.Series(values).mode().iloc[0])


def _base(groups, window: str, n, G: int) -> dict:
    """The columns every window's summary row has: its steps, groups, prompts and sizes."""
    steps = groups["step"]
    return {
        "window": window,
        "steps": int(steps.nunique()),
        "first_step": int(steps.min()),
        "last_step": int(steps.max()),
        "groups": len(groups),
        "prompts": int(groups["prompt"].nunique()),
        "responses": int(n.sum()),
        "G": G,
        "G_min": int(n.min()),
        "G_max": int(n.max()),
    }


def analyze_window(cfg: Config, groups, levels, window: str, frame) -> tuple[dict, pd.DataFrame]:
    """The summary row and the curve of one window of groups (``frame``: the log's rows)."""
    n = groups["n"].to_numpy()
    G = modal(n)
    base = _base(groups, window, n, G)
    per_step = len(groups) / base["steps"]
    budget = cfg.N or int(round(per_step * G))
    grid = list(range(2, MAX_G + 1))
    if levels is None:
        rows = frame[frame["group"].isin(groups["group"])]
        return _graded_window(cfg, rows, groups, base, grid, budget)
    c = groups["successes"].to_numpy()
    if c.sum() in (0, n.sum()):
        return _boundary_window(cfg, groups, base, levels, grid, budget)
    prompt = groups["prompt"].to_numpy()  # a prompt's groups share its p: clustered SEs
    fit = difficulty.fit(c, n, clusters=prompt)
    check = fit_checks.logged_check(c, n, fit, draws=cfg.draws, seed=cfg.seed, clusters=prompt)
    counts = fit_checks.count_check(c, n, fit)
    curve = difficulty.degenerate_curve(fit, grid, draws=cfg.draws, seed=cfg.seed)
    a, b = difficulty.draws(fit, cfg.draws, seed=cfg.seed)
    row = {
        **base,
        "rewards": "binary",
        "low": levels[0],
        "high": levels[1],
        "success_rate": float(groups["successes"].sum() / n.sum()),
        **_fit_columns(fit, a / (a + b)),
        **_check_columns(check),
        "fit_chi2": counts["chi2"],
        "fit_df": counts["df"],
        "fit_p": counts["p_value"],
        "target": cfg.target,
        "budget": budget,
        "G_needed": difficulty.g_needed(fit, cfg.target, grid),
    }
    if base["prompts"] == 1:
        row["fit_reason"] = (
            "one prompt: the Beta fit describes how its success rate varies across steps, "
            "not a spread of difficulty across prompts, and has no standard errors (they need "
            ">= 2 prompts)"
        )
    return row, _curve_rows(curve, window, budget)


def _fit_columns(fit, mean_draws) -> dict:
    """The Beta fit's columns: a, b and their SEs, the mean difficulty with the 95% band of its
    parametric draws ``mean_draws``, the log-likelihood and three quantiles."""
    mean_lo, mean_hi = np.quantile(mean_draws, [0.025, 0.975])
    return {
        "a": fit.a,
        "b": fit.b,
        "a_se": fit.a_se,
        "b_se": fit.b_se,
        "se_method": fit.se_method,
        "mean_p": fit.mean,
        "mean_p_lo": float(mean_lo),
        "mean_p_hi": float(mean_hi),
        "loglik": fit.loglik,
        "p10": fit.quantile(0.1),
        "p50": fit.quantile(0.5),
        "p90": fit.quantile(0.9),
    }


def _boundary_window(
    cfg: Config, groups, base, levels, grid, budget: int
) -> tuple[dict, pd.DataFrame]:
    """Every response succeeded (or every one failed): p-hat = 1 (0) at the boundary, no Beta
    fit.  What the log still says (gpolab's bound): with no failure in n responses that are
    independent given their prompts' p, P(none | mean p) = prod p_i <= (mean p)^n, so at 95%
    the mean success rate is >= 0.05^(1/n); and E[p^G] >= (mean p)^G (Jensen), so the degenerate
    fraction at G is >= 0.05^(G/n) (the curve's ``lo``; ``hi`` = 1, ``predicted`` NaN)."""
    total = int(groups["n"].sum())
    passed = bool(groups["successes"].sum() > 0)
    bound = 0.05 ** (1.0 / total)
    lo = bound ** np.asarray(grid, float)
    why = (
        f"every one of the {total:,} responses {'succeeded' if passed else 'failed'} "
        f"(p-hat = {int(passed)} at the boundary): no prompt varies, so there is no spread "
        "of difficulty to fit (a, b, kappa and the fit checks need at least one success "
        "and one failure)"
    )
    row = {
        **base,
        "rewards": "binary",
        "low": levels[0],
        "high": levels[1],
        "success_rate": float(passed),
        **dict.fromkeys(("a", "b", "a_se", "b_se"), math.nan),
        "fit_reason": why,
        "mean_p": float(passed),
        "mean_p_lo": bound if passed else 0.0,
        "mean_p_hi": 1.0 if passed else 1.0 - bound,
        "logged_groups": len(groups),
        "logged_measured": 1.0,
        "logged_measured_se": 0.0,
        "target": cfg.target,
        "budget": budget,
        "G_needed": None,
        "G_needed_min": next((G for G, v in zip(grid, lo, strict=True) if v <= cfg.target), None),
    }
    curve = pd.DataFrame(
        {"G": grid, "predicted": math.nan, "lo": lo, "hi": 1.0, "dapo_draws": math.nan}
    )
    return row, _curve_rows(curve, base["window"], budget)


def _check_columns(check: dict) -> dict:
    return {f"logged_{k}" if not k.startswith("logged") else k: v for k, v in check.items()}


def _curve_rows(curve, window: str, budget: int):
    """The curve with the split at budget N: B = N/G prompts (G dividing N), informative groups
    B·(1 − degenerate) per step."""
    G = curve["G"].to_numpy().astype(int)
    B = np.where(budget % G == 0, budget // G, math.nan)
    split = {"budget": budget, "B": B, "informative_groups": B * (1 - curve["predicted"])}
    return pd.DataFrame({"window": window, **curve.assign(G=G), **split})


def _graded_window(cfg: Config, rows, groups, base, grid, budget: int) -> tuple[dict, pd.DataFrame]:
    """Graded rewards: Dirichlet-multinomial over at most GRADED_LEVELS values, else measured
    zero-std fractions and the unbiased all-equal estimate for G up to the smallest group."""
    measured = float(groups["degenerate"].mean())
    row = {
        **base,
        "rewards": "graded",
        "mean_reward": float(np.average(groups["mean"], weights=groups["n"])),
        "logged_measured": measured,
        "target": cfg.target,
        "budget": budget,
    }
    table = pd.crosstab(rows["group"], rows["reward"])  # groups x reward values
    counts = table.to_numpy()
    prompt = groups.set_index("group").loc[table.index, "prompt"].to_numpy()
    if counts.shape[1] <= GRADED_LEVELS:
        fit = graded.fit_graded(counts, clusters=prompt)
        check = graded.logged_check_graded(counts, fit, clusters=prompt)
        pred = graded.degenerate_fraction_graded(fit.alpha, np.asarray(grid, float))
        row |= {
            "model": "dirichlet-multinomial",
            "se_method": fit.se_method,
            **_check_columns(check),
            "G_max_estimated": grid[-1],
        }
    else:
        per_group = [g.to_numpy() for _, g in rows.groupby("group")["reward"]]
        pred = graded.degenerate_unbiased(per_group, np.asarray(grid))
        row |= {
            "model": "empirical (U-statistic, G up to the smallest group)",
            "logged_measured_se": fit_checks.mean_se(
                groups["degenerate"].to_numpy(float), groups["prompt"].to_numpy()
            ),
            "G_max_estimated": int(min(base["G_min"], grid[-1])),
        }
    # the smallest G whose estimate is <= target, among the G with an estimate
    row["G_needed"] = next((G for G, v in zip(grid, pred, strict=True) if v <= cfg.target), None)
    curve = pd.DataFrame(
        {
            "G": grid,
            "predicted": pred,
            "lo": np.nan,
            "hi": np.nan,
            "dapo_draws": difficulty.dapo_draws(pred),
        }
    )
    return row, _curve_rows(curve, base["window"], budget)


def kappa_table(cfg: Config, whole: dict):
    """κ of each estimator averaged over the pooled fit, at ``cfg.G`` ∪ {the log's G}."""
    cols = ["estimator", "G", "kappa_mean", "kappa_p10", "kappa_p50", "kappa_p90", "reason"]
    if whole.get("rewards") != "binary" or not math.isfinite(whole["a"]):
        return pd.DataFrame(columns=cols)
    rows = []
    for name in cfg.estimators:
        spec = estimators.bound(name)  # resolved once for every G
        for G in report_sizes(cfg, whole["G"]):
            if G >= estimators.minimum_G(spec):
                k = difficulty.kappa_mix(spec, G, whole["a"], whole["b"])
                rows.append({"estimator": name, "G": G, **{c: k.get(c) for c in cols[2:]}})
    return pd.DataFrame(rows, columns=cols)
