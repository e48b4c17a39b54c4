"""Shared statistics of the labs and their figures: Monte Carlo against exact theory as one test
(sweep, zoo, claims) and estimator families with the same κ curve (zoo's table and figure).
Plain numpy/pandas over result tables; nothing here runs an env."""

from __future__ import annotations

import math

import numpy as np


def joint_test(rows, by=("policy", "estimator")) -> dict | None:
    """Monte Carlo against the exact theory as one statistic (None without exact theory).

    z = (mse − theory_mse)/se per cell (se combines the Monte Carlo SE with the theory's own where
    its inputs are Monte Carlo).  Each G draws from its own key stream, so an estimator's cells
    are independent and Σ_G z² ~ χ²(#cells) under the theory; the estimators of one G share draws
    (and some coincide), so they are combined by Bonferroni: joint p = min(1, E · min_e p_e),
    valid under any dependence.  (On the arithmetic surrogate the theory's Monte Carlo S2 is
    shared by every G of a policy: there the χ² is approximate.)  A cell with no finite z (fewer
    than 2 seeds, an overflowed estimator) makes every p NaN with its ``reason``: a NaN is never
    a pass (``min(1, nan)`` used to read 1)."""
    from scipy.stats import chi2  # scipy: heavy, only where a test is run

    rows = rows[np.isfinite(rows["theory_mse"].astype(float))]
    if rows.empty:
        return None
    se = np.hypot(rows["mse_se"].astype(float), rows["theory_mse_se"].fillna(0).astype(float))
    with np.errstate(divide="ignore", invalid="ignore"):
        z2 = ((rows["mse"].astype(float) - rows["theory_mse"].astype(float)) / se) ** 2
    keys = [k for k in by if k in rows and rows[k].notna().any()]
    per = rows.assign(z2=z2).groupby(keys, sort=False)["z2"].agg(["sum", "count"])
    p = chi2.sf(per["sum"], per["count"])
    bad = ~np.isfinite(z2.to_numpy())
    if bad.any():  # a NaN is never a pass: no p-value where a cell has no finite z
        return {
            "cells": len(rows),
            "groups": len(per),
            "min_p": math.nan,
            "worst": None,
            "joint_p": math.nan,
            "max_abs_z": math.nan,
            "reason": f"{int(bad.sum())} of {len(rows)} cells have no finite z "
            f"({_no_z_reason(rows[bad])})",
        }
    return {
        "cells": len(rows),
        "groups": len(per),
        "min_p": float(np.min(p)),
        "worst": per.index[int(np.argmin(p))],
        "joint_p": min(1.0, len(per) * float(np.min(p))),
        "max_abs_z": float(np.sqrt(z2.max())),
        "reason": None,
    }


def _no_z_reason(rows) -> str:
    """Why the cells ``rows`` have no finite z."""
    if "n_seeds" in rows and (rows["n_seeds"].astype(float) < 2).any():
        return "fewer than 2 seeds: no standard error"
    if not np.isfinite(rows["mse"].astype(float)).all():
        return "a non-finite Monte Carlo MSE: the estimator overflowed or divided by zero"
    return "a zero or non-finite standard error"


def agreement(results) -> list[str]:
    """One line per env: :func:`joint_test` of its cells."""
    lines = []
    for env, rows in results.groupby("env", sort=False):
        t = joint_test(rows)
        if t is not None and t["reason"] is not None:
            lines.append(f"{env}: joint p = nan: {t['reason']} (no test, not a pass)")
        elif t is not None:
            lines.append(
                f"{env}: {t['cells']} cells with exact theory; per estimator, sum of z^2 over its "
                f"G (independent draws) vs chi^2: smallest p {t['min_p']:.3g} ({t['worst']}); "
                f"joint p (Bonferroni over {t['groups']}) = {t['joint_p']:.3g}; largest |z| "
                f"{t['max_abs_z']:.2f}"
            )
    return lines


def families(kappa, rtol: float = 1e-3):
    """[(names, curve)]: estimators whose κ curves agree to ``rtol`` (0.1%: grpo's eps 1e-4,
    1e-6 and 1e-9 differ by less) merged into one family."""
    out: list[tuple[list, object]] = []
    for name, curve in kappa.groupby("estimator", sort=False):
        for names, ref in out:
            if len(ref) == len(curve) and np.allclose(ref["kappa"], curve["kappa"], rtol=rtol):
                names.append(name)
                break
        else:
            out.append(([name], curve))
    return out
