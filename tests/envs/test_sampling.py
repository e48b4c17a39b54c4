"""The two-level inverse-CDF sampler equals searchsorted(cdf, u·total, side="right"): the same
draw for every uniform, except where u·total lies within float32 rounding of a CDF entry (two
programs may round a cumulative sum differently on another CPU; the last bit decides nothing)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpolab.envs.sampling import inverse_cdf


def reference(probs, u):
    cdf = jnp.cumsum(probs, axis=-1)
    idx = jax.vmap(lambda c, v: jnp.searchsorted(c, v * c[-1], side="right"))(cdf, u)
    return jnp.minimum(idx, probs.shape[-1] - 1)


def assert_same_draws(probs, u, got, want):
    """``got`` == ``want`` except at uniforms within float32 rounding of a CDF entry between
    the two draws (and at most 0.1% of them)."""
    got, want = np.asarray(got), np.asarray(want)
    bad = np.argwhere(got != want)
    assert len(bad) <= max(1, got.size // 1000), f"{len(bad)} of {got.size} draws differ"
    cdf = np.cumsum(np.asarray(probs, np.float64), -1)
    for r, j in bad:
        x = float(u[r, j]) * cdf[r, -1]
        lo, hi = sorted((int(got[r, j]), int(want[r, j])))
        gap = np.min(np.abs(cdf[r, lo:hi] - x))
        assert gap <= 8 * np.finfo(np.float32).eps * cdf[r, -1], (r, j, lo, hi, gap)


@pytest.mark.parametrize("C", [2, 3, 5, 12, 16, 63, 64, 100, 1000])
def test_equals_binary_search_bitwise(C):
    k1, k2, k3 = jax.random.split(jax.random.key(C), 3)
    probs = jax.nn.softmax(3 * jax.random.normal(k1, (6, C)))
    probs = jnp.where(jax.random.uniform(k3, (6, C)) < 0.3, 0.0, probs)  # zero-probability cells
    probs = probs.at[:, C // 2].set(0.5)  # every row keeps some mass
    if C > 2:
        probs = probs.at[:, 0].set(0.0).at[:, -1].set(0.0)
    u = jax.random.uniform(k2, (6, 4000))
    u = u.at[:, :3].set(jnp.array([0.0, 1 - 2**-24, 0.5]))
    got = inverse_cdf(probs, u)
    assert_same_draws(probs, u, got, reference(probs, u))
    drawn = np.asarray(got)
    assert not np.any(np.take_along_axis(np.asarray(probs), drawn, -1) == 0)


def test_one_dimensional_probs_keep_the_shape_of_u():
    probs = jnp.array([0.1, 0.0, 0.6, 0.3])
    u = jax.random.uniform(jax.random.key(0), (3, 5, 7))
    got = inverse_cdf(probs, u)
    assert got.shape == u.shape and got.dtype == jnp.int32
    flat = u.reshape(1, -1)
    assert_same_draws(probs[None], flat, got.reshape(1, -1), reference(probs[None], flat))


@pytest.mark.parametrize("C", [3, 16, 64, 100])
def test_per_row_draws_equal_gathering_whole_rows(C):
    from gpolab.envs.sampling import inverse_cdf_rows

    k1, k2, k3 = jax.random.split(jax.random.key(C + 1), 3)
    probs = jax.nn.softmax(2 * jax.random.normal(k1, (7, C)))
    rows = jax.random.randint(k2, (3000,), 0, 7)
    u = jax.random.uniform(k3, (3000,))
    got = inverse_cdf_rows(probs, rows, u)
    for want in (inverse_cdf(probs[rows], u[:, None]), reference(probs[rows], u[:, None])):
        assert_same_draws(probs[rows], u[:, None], got[:, None], want)
