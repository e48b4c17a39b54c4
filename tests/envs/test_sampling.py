"""The two-level inverse-CDF sampler equals searchsorted(cdf, u·total, side="right"): the same
draw for every uniform, except where u·total lies within float32 rounding of a CDF entry (two
programs may round a cumulative sum differently on another CPU; the last bit decides nothing)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpolab.envs.sampling import alias_draw, alias_tables, inverse_cdf


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


def _alias_law(keep, alias):
    """The exact law of an alias draw: column i kept w.p. keep[i], else alias[i], i uniform."""
    C = keep.shape[-1]
    law = keep / C
    np.add.at(law, alias, (1.0 - keep) / C)
    return law


@pytest.mark.parametrize("C", [1, 2, 3, 7, 64, 128, 1000])
def test_alias_tables_reproduce_the_law_exactly(C):
    """Exact identity (float64): the alias tables' law is the row's distribution, zero-mass
    categories included (never drawn: their keep is 0 and no column aliases them)."""
    rng = np.random.default_rng(C)
    probs = rng.dirichlet(np.full(C, 0.3), size=4)
    probs[:, : C // 3] = 0.0  # zero-probability categories
    probs[:, -1] += 0.1
    probs /= probs.sum(-1, keepdims=True)
    keep, alias = alias_tables(probs)
    assert keep.shape == probs.shape and alias.dtype == np.int32
    for r in range(len(probs)):
        np.testing.assert_allclose(_alias_law(keep[r], alias[r]), probs[r], atol=1e-13)
        never = probs[r] == 0
        assert np.all(keep[r][never] == 0) and not np.isin(np.flatnonzero(never), alias[r]).any()


def _vose_one_row(row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vose's construction of one row, the plain loop (the reference of the lockstep build)."""
    C = len(row)
    keep, alias = np.ones(C), np.arange(C, dtype=np.int32)
    total = row.sum()
    scaled = row * (C / total) if total > 0 else np.ones(C)
    small = [i for i in range(C) if scaled[i] < 1.0]
    large = [i for i in range(C) if scaled[i] >= 1.0]
    while small and large:
        s, big = small.pop(), large[-1]
        keep[s], alias[s] = scaled[s], big
        scaled[big] -= 1.0 - scaled[s]
        if scaled[big] < 1.0:
            small.append(large.pop())
    for i in small + large:
        keep[i] = 1.0
    return keep, alias


@pytest.mark.parametrize("C", [1, 2, 5, 64, 128])
def test_alias_tables_of_every_row_at_once_are_the_one_row_loops_bit_for_bit(C):
    """The rows run Vose's steps in lockstep: the same tables, bit for bit, as the loop over one
    row (so the same draws), on peaked, flat, uniform, zero-mass and all-zero rows."""
    rng = np.random.default_rng(C)
    probs = np.concatenate([rng.dirichlet(np.full(C, a), size=5) for a in (0.05, 0.5, 5.0)])
    probs[0], probs[1] = 0.0, 1.0 / C
    probs[2, : C // 2] = 0.0
    keep, alias = alias_tables(probs.reshape(3, 5, C))
    for r, row in enumerate(probs):
        want_keep, want_alias = _vose_one_row(row)
        assert np.array_equal(keep.reshape(-1, C)[r], want_keep)
        assert np.array_equal(alias.reshape(-1, C)[r], want_alias)


def test_alias_draws_follow_the_law_and_the_inverse_cdf_sampler():
    """Statistical: 400,000 draws over 128 outcomes (fixed key) against the law (χ² test) and
    against inverse_cdf's draws from other uniforms (two-sample χ²); the negative control, alias
    tables of another law, fails."""
    from scipy import stats

    rng = np.random.default_rng(7)
    probs = rng.dirichlet(np.full(128, 0.5))
    keep, alias = alias_tables(probs)
    k1, k2 = jax.random.split(jax.random.key(3))
    n = 400_000
    a = np.asarray(
        alias_draw(jnp.asarray(keep, jnp.float32), jnp.asarray(alias), jax.random.uniform(k1, (n,)))
    )
    b = np.asarray(inverse_cdf(jnp.asarray(probs, jnp.float32), jax.random.uniform(k2, (n,))))
    ca, cb = np.bincount(a, minlength=128), np.bincount(b, minlength=128)
    live = probs * n >= 5
    assert (
        stats.chisquare(ca[live], probs[live] * n * ca[live].sum() / (probs[live] * n).sum()).pvalue
        > 1e-3
    )
    assert stats.chi2_contingency(np.stack([ca[live], cb[live]])).pvalue > 1e-3
    other_keep, other_alias = alias_tables(rng.dirichlet(np.full(128, 0.5)))
    c = np.asarray(
        alias_draw(
            jnp.asarray(other_keep, jnp.float32),
            jnp.asarray(other_alias),
            jax.random.uniform(k1, (n,)),
        )
    )
    cc = np.bincount(c, minlength=128)
    assert stats.chi2_contingency(np.stack([cc[live], cb[live]])).pvalue < 1e-6


def test_alias_draw_rows_and_degenerate_rows():
    probs = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.5, 0.0, 0.5]])
    keep, alias = alias_tables(probs)
    u = jnp.linspace(0.0, 0.999999, 12, dtype=jnp.float32)
    d = np.asarray(alias_draw(jnp.asarray(keep), jnp.asarray(alias), jnp.tile(u, (3, 1))))
    assert np.all(d[0] == 1) and set(d[1]) <= {0, 1, 2} and set(d[2]) <= {0, 2}
