"""TRL's ``top_entropy_quantile`` mask (:func:`gpolab.estimators.frameworks.trl.
trl_high_entropy_mask`) against ``GRPOTrainer.get_high_entropy_mask`` of TRL 1.16.0, run from its
source with torch 2.13 (one process: the accelerator's pad and gather are the identity) on the
float32 entropies ``E`` and mask ``M`` below; ``TRL[ρ]`` is what it returned at
``threshold = 1 − ρ``, as ``_compute_loss`` calls it.
"""

import jax.numpy as jnp
import numpy as np
import pytest

from gpolab import validate
from gpolab.estimators.frameworks.trl import trl_high_entropy_mask

E = np.array(
    [
        [1.073, 0.3085, 5.3754, 0.3664, 0.1154, 1.7998, 0.4986],
        [0.5514, 0.0297, 0.7641, 1.0415, 0.2306, 1.6772, 0.2086],
        [0.7863, 0.1288, 0.9229, 0.4624, 0.6887, 2.649, 1.1145],
    ],
    np.float32,
)
M = np.array([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0]], np.float32)
TRL = {
    0.0: np.array([[0, 0, 1, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0]]),
    0.2: np.array([[1, 0, 1, 0, 0, 1, 0], [0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0]]),
    0.5: np.array([[1, 0, 1, 0, 0, 1, 0], [1, 0, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0]]),
    0.9: np.array([[1, 1, 1, 1, 0, 1, 1], [1, 0, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0]]),
}


@pytest.mark.parametrize("rho", sorted(TRL))
def test_matches_trl(rho):
    got = trl_high_entropy_mask(jnp.asarray(E), jnp.asarray(M), rho)
    np.testing.assert_array_equal(np.asarray(got), TRL[rho])


def test_rho_one_keeps_every_live_token_and_no_live_token_keeps_none():
    np.testing.assert_array_equal(np.asarray(trl_high_entropy_mask(jnp.asarray(E), M, 1.0)), M)
    none = trl_high_entropy_mask(jnp.asarray(E), jnp.zeros_like(M), 0.2)
    assert not np.asarray(none).any()


@pytest.mark.parametrize("rho", [-0.1, 1.5])
def test_rho_outside_the_unit_interval_is_one_error(rho):
    with pytest.raises(validate.ConfigError, match="top_entropy_quantile"):
        trl_high_entropy_mask(jnp.asarray(E), M, rho)
