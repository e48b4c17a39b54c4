"""The G to use when a log does not decide G* (gpolab's worst-case regret rule,
:func:`gpolab.theory.gstar.safe_g`): by hand, against loo's closed-form G*, and its controls.
Its coverage on known truth: tests/labs/test_plancheck.py."""

import numpy as np
import pytest

from gpolab.theory import gstar


def test_regret_bound_by_hand():
    # two points of the region; grid 2, 4, 8.  Point 1's best is 4, point 2's is 8.
    noise = [[3.0, 2.0, 2.5], [4.0, 2.0, 1.0]]
    out = gstar.regret_bound(noise, [2, 4, 8])
    # worst regret: G=2: max(0.5, 3) = 3; G=4: max(0, 1) = 1; G=8: max(0.25, 0) = 0.25
    assert out == {"G": 8, "regret": pytest.approx(0.25), "used": 2}
    # a point with a non-positive noise is left out; none usable: no G
    assert gstar.regret_bound([[1.0, -1.0, 2.0], *noise], [2, 4, 8])["used"] == 2
    assert gstar.regret_bound([[0.0, 1.0, 1.0]], [2, 4, 8])["G"] is None
    assert gstar.regret_bound([], [2, 4, 8]) == {
        "G": None,
        "regret": pytest.approx(np.nan, nan_ok=True),
        "used": 0,
    }


def test_loo_noise_is_minimised_at_the_closed_form_gstar():
    c1, g_sq, s, a = 0.3, 0.2, 2.0, 3.0
    grid = np.arange(2, 2001)
    noise = gstar.loo_noise(np.array([c1]), np.array([g_sq]), np.array([s]), np.array([a]), grid)
    C3 = s + c1 + g_sq
    assert grid[np.argmin(noise[0])] == round(1 + np.sqrt(C3 / c1))
    # N·MSE = c1 G + C2 + C3/(G − 1) with C2 = a − E‖g_X‖², by hand at G = 4
    assert noise[0][2] == pytest.approx(c1 * 4 + (a - c1 - g_sq) + C3 / 3)


def test_constant_box_spans_the_intervals_and_cuts_c1_at_zero():
    rng = np.random.default_rng(0)
    reps = np.column_stack([rng.normal(0.0, 1.0, 4000), rng.normal(1, 0.1, (4000, 3))])
    box = gstar.constant_box(reps, steps=5)
    assert box.shape == (5 * 8, 4)
    assert box[:, 0].min() == 0.0 and box[:, 0].max() == pytest.approx(1.96, abs=0.1)
    lo, hi = np.quantile(reps[:, 3], [0.025, 0.975])
    assert set(np.round(box[:, 3], 12)) == {round(lo, 12), round(hi, 12)}


def test_a_known_log_gives_gstars_grid_neighbour_at_no_regret():
    """Replicates all equal to one set of constants: the region is a point, so G is the grid's
    best and its regret 0; spread c1 and the regret is above 0 (control)."""
    c1, g_sq, s, a = 0.05, 0.0, 1.0, 2.0
    reps = np.tile([c1, g_sq, s, a], (50, 1))
    out = gstar.safe_g(reps, N=1024)
    grid = np.array(gstar.GRID)
    best = grid[np.argmin(gstar.loo_noise(*reps[:1].T, grid)[0])]
    assert out["G"] == best and out["regret"] == 0.0
    wide = reps.copy()
    wide[:, 0] = np.linspace(-0.05, 0.5, 50)
    assert gstar.safe_g(wide, N=1024)["regret"] > 0.0


def test_c1_at_zero_points_to_the_largest_group_the_budget_allows():
    """c1 = 0: noise falls with G up to the budget, so G is the largest grid size <= N."""
    reps = np.tile([0.0, 0.1, 1.0, 2.0], (20, 1))
    assert gstar.safe_g(reps, N=40) == {"G": 40, "regret": 0.0, "used": 41 * 8}
