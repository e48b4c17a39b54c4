"""gpolab's OTB (:func:`gpolab.estimators.frameworks.verl.verl_optimal_token_baseline`) against
verl's own ``compute_optimal_token_baseline_advantage`` (verl/trainer/ppo/core_algos.py @
1dda039b9c63).

``VERL`` below is what that function returned, run from its own source (the function's text
taken from the file and executed with torch 2.13 in float64), on the batch of :data:`GROUPS`
(one flat batch grouped by ``index``, as verl's trainer calls it), with ``handle_zero_tail`` True
(its default) and False.  The groups: one strictly longest response (its baseline is zeroed from
the second-longest length on), tied longest (no zero tail), a longest response whose zero tail
starts at t = 1, and a singleton (no baseline).  ``P`` and ``S``: the sampled token's probability
π_t and Σπ² per token (verl's ``exp(old_log_probs)`` and ``sum_pi_squared``).
"""

import jax.numpy as jnp
import numpy as np
import pytest

from gpolab import engine
from gpolab.estimators.frameworks.verl import verl_optimal_token_baseline

T = 6
GROUPS = (  # (rewards, lengths)
    ([1.0, 0.0, 0.5, 1.0], [6, 3, 4, 2]),
    ([0.3, 0.7, 0.0], [5, 5, 2]),
    ([1.0, 0.0], [1, 6]),
    ([0.25], [4]),
)
P = np.array(
    [
        [0.623, 0.293, 0.087, 0.065, 0.782, 0.871],
        [0.596, 0.707, 0.539, 0.892, 0.784, 0.052],
        [0.822, 0.08, 0.707, 0.208, 0.827, 0.537],
        [0.32, 0.43, 0.075, 0.162, 0.654, 0.632],
        [0.604, 0.395, 0.947, 0.933, 0.667, 0.635],
        [0.67, 0.4, 0.172, 0.699, 0.523, 0.329],
        [0.487, 0.851, 0.891, 0.372, 0.564, 0.34],
        [0.585, 0.354, 0.402, 0.851, 0.254, 0.611],
        [0.126, 0.799, 0.758, 0.265, 0.839, 0.103],
        [0.353, 0.185, 0.455, 0.767, 0.258, 0.097],
    ]
)
S = np.array(
    [
        [0.424, 0.259, 0.173, 0.564, 0.612, 0.759],
        [0.355, 0.854, 0.392, 0.796, 0.615, 0.842],
        [0.676, 0.864, 0.5, 0.44, 0.684, 0.896],
        [0.859, 0.468, 0.706, 0.498, 0.523, 0.729],
        [0.432, 0.688, 0.897, 0.87, 0.445, 0.683],
        [0.842, 0.874, 0.112, 0.791, 0.885, 0.866],
        [0.237, 0.878, 0.812, 0.758, 0.484, 0.286],
        [0.742, 0.839, 0.313, 0.724, 0.454, 0.845],
        [0.132, 0.686, 0.591, 0.123, 0.704, 0.113],
        [0.706, 0.51, 0.843, 0.588, 0.773, 0.153],
    ]
)
VERL = {
    True: np.array(
        [
            [0.112437191504792, 0.293203110836749, 0.398343867077045, 0.232137032247737, 1, 1],
            [-0.887562808495208, -0.706796889163251, -0.601656132922955, -0, -0, -0],
            [
                -0.387562808495208,
                -0.206796889163251,
                -0.101656132922955,
                -0.267862967752263,
                -0,
                -0,
            ],
            [0.112437191504792, 0.293203110836749, -0, -0, -0, -0],
            [
                -0.123255809673854,
                -0.158973540137158,
                -0.270279617842953,
                -0.283186754828798,
                -0.29700996553777,
                0,
            ],
            [
                0.276744190326146,
                0.241026459862842,
                0.129720382157047,
                0.116813245171202,
                0.10299003446223,
                0,
            ],
            [-0.423255809673854, -0.458973540137158, -0, -0, -0, 0],
            [0.606060608773687, 0, 0, 0, 0, 0],
            [-0.393939391226313, 0, 0, 0, 0, 0],
            [0.25, 0.25, 0.25, 0.25, 0, 0],
        ]
    ),
    False: np.array(
        [
            [
                0.112437191504792,
                0.293203110836749,
                0.398343867077045,
                0.232137032247737,
                3.00120039931073e-09,
                2.98596591896683e-09,
            ],
            [-0.887562808495208, -0.706796889163251, -0.601656132922955, -0, -0, -0],
            [
                -0.387562808495208,
                -0.206796889163251,
                -0.101656132922955,
                -0.267862967752263,
                -0,
                -0,
            ],
            [0.112437191504792, 0.293203110836749, -0, -0, -0, -0],
            [
                -0.123255809673854,
                -0.158973540137158,
                -0.270279617842953,
                -0.283186754828798,
                -0.29700996553777,
                0,
            ],
            [
                0.276744190326146,
                0.241026459862842,
                0.129720382157047,
                0.116813245171202,
                0.10299003446223,
                0,
            ],
            [-0.423255809673854, -0.458973540137158, -0, -0, -0, 0],
            [0.606060608773687, 0, 0, 0, 0, 0],
            [-0.393939391226313, 0, 0, 0, 0, 0],
            [0.25, 0.25, 0.25, 0.25, 0, 0],
        ]
    ),
}


def _ours(zero_tail: bool, dtype) -> np.ndarray:
    out, row = [], 0
    for rewards, lengths in GROUPS:
        G = len(rewards)
        mask = (np.arange(T)[None] < np.asarray(lengths)[:, None]).astype(dtype)
        w = 1 - 2 * P[row : row + G] + S[row : row + G]
        a = verl_optimal_token_baseline(
            jnp.asarray(rewards, dtype),
            jnp.asarray(mask),
            jnp.asarray(w, dtype),
            handle_zero_tail=zero_tail,
        )
        out.append(np.asarray(a, np.float64))
        row += G
    return np.concatenate(out)


@pytest.mark.parametrize("zero_tail", [True, False])
def test_matches_verl_float64(zero_tail):
    with engine.float64_mode(True):
        ours = _ours(zero_tail, np.float64)
    np.testing.assert_allclose(ours, VERL[zero_tail], rtol=0, atol=1e-12)


@pytest.mark.parametrize("zero_tail", [True, False])
def test_matches_verl_float32(zero_tail):
    np.testing.assert_allclose(_ours(zero_tail, np.float32), VERL[zero_tail], rtol=0, atol=1e-6)


def test_zero_tail_and_singleton():
    """The longest response's tail keeps its return (baseline 0), without the option it is 0
    (its own return is the only one left in B_t, up to epsilon); a singleton's advantage is its
    reward."""
    assert np.all(VERL[True][0, 4:] == 1.0)
    np.testing.assert_allclose(VERL[False][0, 4:], 0.0, atol=1e-8)  # epsilon's trace
    assert np.all(VERL[True][9, :4] == 0.25)
    ours = _ours(True, np.float32)
    assert np.isfinite(ours).all()
    assert np.all(
        ours * (np.arange(T)[None] >= np.concatenate([l for _, l in GROUPS])[:, None]) == 0
    )


def test_equal_rewards_give_zero_and_all_zero_energy_is_finite():
    """An all-equal group: B_t = R wherever the group's energy is positive, so A = 0; with no
    energy at all (every π_t = 1: W = 0) the epsilon leaves B = 0 and A = R, finite."""
    mask = jnp.ones((3, 4))
    a = verl_optimal_token_baseline(jnp.full((3,), 0.7), mask, jnp.full((3, 4), 0.3))
    np.testing.assert_allclose(np.asarray(a), 0.0, atol=1e-6)
    b = verl_optimal_token_baseline(jnp.asarray([1.0, 0.0, 1.0]), mask, jnp.zeros((3, 4)))
    assert np.isfinite(np.asarray(b)).all()
    np.testing.assert_allclose(np.asarray(b)[:, 0], [1.0, 0.0, 1.0])


def test_equal_energy_is_the_group_mean():
    """Equal lengths and one energy for every token of the group: W_t is the same for every
    response, so B_t is the group mean r̄ (the response itself included) on every token."""
    r = jnp.asarray([1.0, 0.0, 0.25, 0.5])
    a = verl_optimal_token_baseline(r, jnp.ones((4, 3)), jnp.full((4, 3), 0.4))
    np.testing.assert_allclose(np.asarray(a), np.repeat((r - r.mean())[:, None], 3, 1), atol=1e-6)
