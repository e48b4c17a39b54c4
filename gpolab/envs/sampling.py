"""Shared sampling primitive of every environment."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


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
    cdf = jnp.cumsum(probs, axis=-1)
    u = u * cdf[..., -1:]
    C = probs.shape[-1]
    b = max(1, round(math.sqrt(C)))
    nb = -(-C // b)
    if nb * b > C:  # pad with +inf: never ≤ u
        cdf = jnp.concatenate([cdf, jnp.full(cdf.shape[:-1] + (nb * b - C,), jnp.inf)], -1)
    blocks = cdf.reshape(cdf.shape[:-1] + (nb, b))  # (B, nb, b)
    block = jnp.minimum(jnp.sum(blocks[:, None, :, -1] <= u[..., None], -1), nb - 1)  # (B, n)
    rows = jax.vmap(lambda bl, i: bl[i])(blocks, block)  # (B, n, b)
    idx = block * b + jnp.sum(rows <= u[..., None], -1)
    return jnp.minimum(idx, C - 1).astype(jnp.int32)
