"""Shared sampling primitive of every environment."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


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
