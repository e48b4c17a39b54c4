"""The asynchronous claims' statistics (issue 58: AS-law, Q-first-order) on small synthetic tables
with known slopes: each recovers the power it was built with, the ledger's rules decide as stated
(a bias of order √(S·η) or a gap that does not vanish fails), the control fails where SIS is
biased, and a NaN is never a pass.  Their runs on the quick tables: the slow claims check."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from gpolab.labs.claims import lab as claims
from gpolab.labs.claims import stats_async

LEDGER = {c["id"]: c for c in claims.load(claims.LEDGER)}
TOKEN = "trl/async_grpo[eps_low=1000000000.0,eps_high=1000000000.0]"


def _row(correction, k, eta, size, bias, sis_bias=0.0):
    own = correction == "sis"
    return {
        "correction": correction,
        "staleness": k,
        "eta": eta,
        "mismatch": f"noise:{size:g}",
        "mismatch_size": size,
        "update": 0,
        "T": 256,
        "n_seeds": 1024,
        "bias_sq_paired": 0.0 if own else bias,
        "bias_sq_paired_se": 0.0 if own else 0.05 * bias + 1e-12,
        "bias_sq": sis_bias if own else bias,
        "bias_sq_se": 1e-3,
        "mse": 1.5,
    }


def _law(power=1.0, sis_bias=0.0):
    """The staleness-law experiment's first updates: ‖bias‖ = 0.1 (k·η)^power for two biased
    compositions, SIS's bias² against g ``sis_bias``."""
    rows = [
        _row(c, k, eta, 0.0, (0.1 * (k * eta) ** power) ** 2, sis_bias)
        for c in ("areal/decoupled", "trl/async_grpo", "sis")
        for k in (0, 1, 2, 4, 8)
        for eta in (0.05, 0.1, 0.2, 0.4)
    ]
    updates = pd.DataFrame(rows)
    from gpolab.labs.asynchronous import analysis

    updates["switch"] = 0
    return {"updates": updates, "staleness_law": analysis.staleness_law(updates)}


def _measure(fn, t):
    v = fn(t)
    v.pop("detail")
    return v, v.pop("se")


def test_the_staleness_law_recovers_a_linear_bias_and_its_collapse():
    v, se = _measure(stats_async.async_staleness_law, _law())
    assert v["slope_k_min"] == pytest.approx(2.0) and v["slope_eta_min"] == pytest.approx(2.0)
    assert v["collapse_min"] == pytest.approx(1.0) and v["control_p"] == 1.0
    assert claims.verdict(LEDGER["AS-law"], v, se) == "reproduced"


def test_a_bias_of_order_root_s_eta_or_a_biased_control_fails():
    v, se = _measure(stats_async.async_staleness_law, _law(power=0.5))
    assert v["slope_k_min"] == pytest.approx(1.0)
    assert claims.check("slope_k_min >= 1.5", v, se) is False
    assert claims.verdict(LEDGER["AS-law"], v, se) == "partly"
    v, se = _measure(stats_async.async_staleness_law, _law(sis_bias=0.01))  # 10 SE
    assert claims.check("control_p >= 0.01", v, se) is False


def test_an_unresolved_composition_is_never_skipped_into_a_pass():
    t = _law()
    law = t["staleness_law"]
    law.loc[law["correction"] == "trl/async_grpo", "slope_k"] = math.nan
    v, se = _measure(stats_async.async_staleness_law, t)
    assert math.isnan(v["slope_k_min"]) and claims.check("slope_k_min >= 1.5", v, se) is None


def _first_order(gap_power=1.0, origin=0.0):
    """The first-order experiment's first updates: token IS with ‖bias‖ = noise^gap_power at
    k = 0, 0.01·k at no noise, ``origin`` at both 0; SIS unbiased."""
    rows = []
    for size in (0.0, 0.025, 0.05, 0.1, 0.2):
        for k in (0, 1, 2, 4, 8):
            if k and size:
                continue
            bias = origin if not (k or size) else (size**gap_power if size else 0.01 * k) ** 2
            rows += [_row(c, k, 0.1, size, bias) for c in (TOKEN, "sis")]
    return {"updates": pd.DataFrame(rows)}


def test_the_first_order_gap_vanishes_at_the_origin_and_grows_linearly_in_each():
    v, se = _measure(stats_async.async_first_order, _first_order())
    assert v["slope_gap"] == pytest.approx(2.0) and v["slope_stale"] == pytest.approx(2.0)
    assert v["origin_rel"] == 0.0 and v["control_p"] == 1.0
    assert claims.verdict(LEDGER["Q-first-order"], v, se) == "reproduced"


def test_a_gap_at_the_origin_or_a_square_root_growth_fails():
    v, se = _measure(stats_async.async_first_order, _first_order(origin=1e-3))
    assert claims.check("origin_rel <= 1e-6", v, se) is False
    v, se = _measure(stats_async.async_first_order, _first_order(gap_power=0.5))
    assert claims.check("slope_gap >= 1.5", v, se) is False
    assert claims.verdict(LEDGER["Q-first-order"], v, se) == "partly"
