"""Shared sampling primitives of every environment: the two-level inverse-CDF draw and the
alias method."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np


def _blocks(probs: jax.Array) -> tuple[jax.Array, jax.Array, int]:
    """The CDF along the last axis cut into blocks of b ≈ √C entries, padded with +inf (never ≤
    u): (..., nb, b); the total mass (..., 1); and b."""
    cdf = jnp.cumsum(probs, axis=-1)
    total = cdf[..., -1:]
    C = probs.shape[-1]
    b = max(1, round(math.sqrt(C)))
    nb = -(-C // b)
    if nb * b > C:
        cdf = jnp.concatenate([cdf, jnp.full(cdf.shape[:-1] + (nb * b - C,), jnp.inf)], -1)
    return cdf.reshape(cdf.shape[:-1] + (nb, b)), total, b


def inverse_cdf(probs: jax.Array, u: jax.Array) -> jax.Array:
    """Categorical draws along the last axis of ``probs`` for uniforms ``u`` (int32).

    One uniform per draw and an inverse-CDF lookup, instead of noise over every category.
    ``probs`` is (C,) with ``u`` of any shape, or (B, C) with ``u`` of shape (B, n).
    Categories of probability 0 are never drawn: the draw is the number of CDF entries ≤ u·total
    (``searchsorted(cdf, u, side="right")``), found in two levels: the CDF is cut into blocks of
    b ≈ √C entries; counting the block ends ≤ u picks the block, counting inside it gives the
    index.  Every step is a vectorisable compare-and-count with one gather of b contiguous
    values, where a binary search needs log₂C dependent gathers: on CPU 3× faster for C = 64
    (bitwise identical draws; see ``gpolab bench``).
    """
    if probs.ndim == 1:
        return inverse_cdf(probs[None], u.reshape(1, -1)).reshape(u.shape)
    blocks, total, b = _blocks(probs)  # (B, nb, b)
    u = u * total
    block = jnp.minimum(jnp.sum(blocks[:, None, :, -1] <= u[..., None], -1), blocks.shape[1] - 1)
    rows = jax.vmap(lambda bl, i: bl[i])(blocks, block)  # (B, n, b)
    idx = block * b + jnp.sum(rows <= u[..., None], -1)
    return jnp.minimum(idx, probs.shape[-1] - 1).astype(jnp.int32)


def inverse_cdf_rows(probs: jax.Array, rows: jax.Array, u: jax.Array) -> jax.Array:
    """One draw from ``probs[rows[i]]`` (probs (P, C)) per uniform ``u[i]``: the same draws as
    ``inverse_cdf(probs[rows], u[:, None])[:, 0]``, gathering only row i's ≈ √C block ends and
    one block instead of a whole row per draw."""
    blocks, total, b = _blocks(probs)  # (P, nb, b)
    C = probs.shape[-1]
    x = u * total[rows, 0]
    block = jnp.minimum(jnp.sum(blocks[rows, :, -1] <= x[:, None], -1), blocks.shape[1] - 1)
    idx = block * b + jnp.sum(blocks[rows, block] <= x[:, None], -1)
    return jnp.minimum(idx, C - 1).astype(jnp.int32)


def alias_tables(probs) -> tuple[np.ndarray, np.ndarray]:
    """Walker's alias tables of each row of ``probs`` (..., C), built once on the host (Vose's
    O(C) construction, float64): ``(keep (..., C) float, alias (..., C) int32)``.  A draw picks a
    column i uniformly and keeps it with probability keep[i], else takes alias[i]
    (:func:`alias_draw`): the row's law exactly, up to the rounding of keep.  Categories of
    probability 0 get keep 0 and are never drawn unless a row has no mass at all (then uniform).
    """
    p = np.asarray(probs, np.float64)
    flat = p.reshape(-1, p.shape[-1])
    C = flat.shape[1]
    keep = np.ones_like(flat)
    alias = np.tile(np.arange(C, dtype=np.int32), (flat.shape[0], 1))
    for r, row in enumerate(flat):
        total = row.sum()
        scaled = row * (C / total) if total > 0 else np.ones(C)
        small = [i for i in range(C) if scaled[i] < 1.0]
        large = [i for i in range(C) if scaled[i] >= 1.0]
        while small and large:
            s, big = small.pop(), large[-1]
            keep[r, s], alias[r, s] = scaled[s], big
            scaled[big] -= 1.0 - scaled[s]
            if scaled[big] < 1.0:
                small.append(large.pop())
        for i in small + large:  # what rounding left: exactly 1 in exact arithmetic
            keep[r, i] = 1.0
    return keep.reshape(p.shape), alias.reshape(p.shape)


def alias_draw(keep: jax.Array, alias: jax.Array, u: jax.Array) -> jax.Array:
    """Categorical draws along the last axis from alias tables (:func:`alias_tables`), one
    uniform each: column i = ⌊u·C⌋, kept when the fraction u·C − i < keep[i], else alias[i].
    O(1) per draw (two gathers) where :func:`inverse_cdf` counts over √C entries twice.
    ``keep``/``alias`` (C,) with ``u`` of any shape, or (B, C) with ``u`` (B, n)."""
    if keep.ndim == 1:
        return alias_draw(keep[None], alias[None], u.reshape(1, -1)).reshape(u.shape)
    C = keep.shape[-1]
    x = u * C
    i = jnp.minimum(x.astype(jnp.int32), C - 1)
    stay = (x - i) < jnp.take_along_axis(keep, i, axis=-1)
    return jnp.where(stay, i, jnp.take_along_axis(alias, i, axis=-1)).astype(jnp.int32)
