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
    """Replicates all equal to one set of constants: the region is a point, so G is the best
    size the run can set and its regret 0; spread c1 and the regret is above 0 (control).
    (c1 = 0.03: no tie between two sizes.)"""
    c1, g_sq, s, a = 0.03, 0.0, 1.0, 2.0
    reps = np.tile([c1, g_sq, s, a], (50, 1))
    out = gstar.safe_g(reps, N=1024)
    grid = np.array(gstar.settable(1024))
    best = grid[np.argmin(gstar.loo_noise(*reps[:1].T, grid)[0])]
    assert out["G"] == best and out["regret"] == 0.0
    wide = reps.copy()
    wide[:, 0] = np.linspace(-0.05, 0.5, 50)
    assert gstar.safe_g(wide, N=1024)["regret"] > 0.0


def test_c1_at_zero_points_to_the_largest_group_the_budget_allows():
    """c1 = 0 exactly (no spread): noise falls with G up to the budget, so G is the largest
    size <= N the run can set, at no regret."""
    reps = np.tile([0.0, 0.1, 1.0, 2.0], (20, 1))
    out = gstar.safe_g(reps, N=40)
    assert (out["G"], out["regret"]) == (40, 0.0)


def test_settable_sizes_divide_the_batch():
    assert gstar.settable(48) == [2, 3, 4, 6, 8, 12, 16, 24, 48]
    assert gstar.settable(1024) == [2, 4, 8, 16, 32, 64, 128, 256]
    assert gstar.settable(47.0) == [G for G in gstar.GRID if G <= 47] + [47]  # prime
    assert gstar.settable(1) == [2]


def test_the_region_is_the_joint_ellipsoid_and_never_stops_at_zero():
    """Independent normal replicates with SD 1: the region's points lie on the χ²₄(95%)
    ellipsoid (radius 3.08 SDs) around the mean, its centre first; a c1 whose replicates lie
    below 0 is centred at 0, so the region still reaches 3.08 SDs above 0 (the old box of
    marginal intervals stopped at 0 there: a bound of 0% at the largest G)."""
    from scipy.stats import chi2

    rng = np.random.default_rng(0)
    reps = np.column_stack([rng.normal(1.0, 1.0, 4000), rng.normal(5.0, 1.0, (4000, 3))])
    pts = gstar.region(reps)
    r = np.sqrt(chi2.ppf(0.95, 4))
    assert pts[0] == pytest.approx(reps.mean(0))
    z = (pts[1:] - reps.mean(0)) / reps.std(0)
    keep = pts[1:, 0] > 0  # not cut at 0
    assert np.linalg.norm(z[keep], axis=1) == pytest.approx(r, rel=0.05)
    assert pts[:, 0].max() == pytest.approx(1.0 + r, rel=0.05)
    below = reps.copy()
    below[:, 0] -= 5.0  # c1's replicates around -4: every one below 0
    assert gstar.constant_box(below)[:, 0].max() == 0.0
    assert gstar.region(below)[:, 0].max() == pytest.approx(r, rel=0.05)
    assert gstar.safe_g(below, N=256, box=True)["regret"] == 0.0  # the old rule: 0% at G = N
    assert gstar.safe_g(below, N=256)["regret"] > 0.0
