"""The shaped-reward claim's statistic (verl-recipe PR #125's phantom gradient) on small synthetic
tables: a phantom share and an accuracy gap pass the proposed rules, a margin within one SE is
inconclusive, a broken control fails, and a missing cell (NaN) is never a pass."""

from __future__ import annotations

import math

import pandas as pd

from gpolab.labs.claims import lab as claims
from gpolab.labs.claims import stats_shaped

RULES = [
    "score_allfail_share > 0.1",
    "acc_allfail_share == 0",
    "cos_drop > 0",
    "acc_gap > 0",
    "control_diff == 0",
]
CLAIM = {"rules": RULES}


def _grad(lam, metric, share, cos, se=0.001):
    return dict(
        shaping_weight=lam,
        metric=metric,
        n_seeds=20000,
        allfail_share=share,
        allfail_share_se=se if share else 0.0,
        cos_acc=cos,
        cos_acc_se=se,
    )


def _train(lam, metric, step, J, se=0.001):
    return dict(shaping_weight=lam, metric=metric, step=step, J_acc=J, J_acc_se=se if step else 0.0)


def _tables(share=0.5, cos=(0.28, 0.09), end=(0.26, 0.16), control=0.0, se=0.001):
    g = [_grad(0.0, m, 0.0, 0.33) for m in ("acc", "score")]
    g[1]["cos_acc"] += control
    g += [_grad(0.3, "acc", 0.0, cos[0], se), _grad(0.3, "score", share, cos[1], se)]
    tr = []
    for lam, (a, s) in ((0.0, (0.27, 0.27)), (0.3, end)):
        for metric, J in (("acc", a), ("score", s)):
            tr += [_train(lam, metric, 0, 0.10), _train(lam, metric, 200, J, se)]
    return {"gradient": pd.DataFrame(g), "training": pd.DataFrame(tr)}


def _measure(t):
    v = stats_shaped.shaped_phantom(t)
    v.pop("detail")
    return v, v.pop("se")


def test_a_phantom_share_and_an_accuracy_gap_reproduce():
    v, se = _measure(_tables())
    assert v["score_allfail_share"] == 0.5 and v["acc_allfail_share"] == 0.0
    assert math.isclose(v["cos_drop"], 0.19) and math.isclose(v["acc_gap"], 0.10)
    assert math.isclose(v["score_gain"], 0.06) and v["control_diff"] == 0.0
    assert math.isclose(se["acc_gap"], math.hypot(0.001, 0.001))
    assert claims.verdict(CLAIM, v, se) == "reproduced"


def test_no_phantom_fails_and_a_margin_within_one_se_is_inconclusive():
    v, se = _measure(_tables(share=0.05, cos=(0.28, 0.30), end=(0.26, 0.27)))
    assert claims.check("score_allfail_share > 0.1", v, se) is False
    assert claims.check("cos_drop > 0", v, se) is False
    assert claims.check("acc_gap > 0", v, se) is False
    v, se = _measure(_tables(cos=(0.2805, 0.28), end=(0.2605, 0.26)))
    assert claims.check("cos_drop > 0", v, se) is None  # 0.0005 < SE 0.0014
    assert claims.check("acc_gap > 0", v, se) is None
    assert claims.verdict(CLAIM, v, se) == "inconclusive"


def test_a_broken_control_fails():
    v, se = _measure(_tables(control=0.01))
    assert math.isclose(v["control_diff"], 0.01)
    assert claims.check("control_diff == 0", v, se) is False
    assert claims.verdict(CLAIM, v, se) == "partly"


def test_a_missing_cell_is_never_a_pass():
    t = _tables()
    t["gradient"] = t["gradient"][t["gradient"]["metric"] != "score"]  # no score rows
    v, se = _measure(t)
    assert math.isnan(v["score_allfail_share"]) and math.isnan(v["cos_drop"])
    assert claims.check("score_allfail_share > 0.1", v, se) is None
    t = _tables()
    t["gradient"] = t["gradient"][t["gradient"]["shaping_weight"] > 0]  # no λ = 0 control
    t["training"] = t["training"][t["training"]["shaping_weight"] > 0]
    v, se = _measure(t)
    assert math.isnan(v["control_diff"]) and claims.check("control_diff == 0", v, se) is None
    t = _tables()
    only_zero = {k: d[d["shaping_weight"] == 0.0] for k, d in t.items()}  # no λ > 0
    v, se = _measure(only_zero)
    assert all(math.isnan(v[k]) for k in ("score_allfail_share", "cos_drop", "acc_gap"))
    assert claims.verdict(CLAIM, v, se) != "reproduced"
