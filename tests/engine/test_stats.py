"""gpolab.engine.stats: the labs' shared statistics over result tables."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from gpolab.engine import stats


def cells(mse, se, theory=None):
    n = len(mse)
    return pd.DataFrame(
        {
            "env": ["bandit"] * n,
            "estimator": ["loo"] * n,
            "G": range(2, 2 + n),
            "mse": mse,
            "mse_se": se,
            "theory_mse": theory or [1.0] * n,
            "theory_mse_se": [0.0] * n,
            "n_seeds": [100] * n,
        }
    )


def test_joint_test_is_a_chi2_of_the_cells_z():
    t = stats.joint_test(cells([1.1, 0.9], [0.1, 0.1]), ("estimator",))
    # z = ±1 in each of 2 cells: sum z² = 2 on 2 degrees of freedom, p = exp(−1)
    assert t["cells"] == 2 and t["joint_p"] == pytest.approx(math.exp(-1.0))
    assert t["max_abs_z"] == pytest.approx(1.0) and t["reason"] is None
    assert stats.joint_test(cells([1.0], [0.1], [math.nan])) is None  # no theory: no test


def test_a_cell_without_a_finite_z_is_nan_with_its_reason_never_a_pass():
    t = stats.joint_test(cells([1.0, 1.0], [0.1, 0.0]), ("estimator",))
    assert math.isnan(t["joint_p"]) and "zero or non-finite standard error" in t["reason"]
    (line,) = stats.agreement(cells([1.0, 1.0], [0.1, 0.0]))
    assert "no test, not a pass" in line


def test_families_merge_estimators_with_the_same_kappa_curve():
    k = pd.DataFrame(
        {
            "estimator": ["a", "a", "b", "b", "c", "c"],
            "G": [8] * 6,
            "kappa": [1.0, 2.0, 1.0, 2.0 * (1 + 1e-5), 1.0, 3.0],
        }
    )
    assert [names for names, _ in stats.families(k)] == [["a", "b"], ["c"]]
