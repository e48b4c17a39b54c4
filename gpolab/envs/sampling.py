"""Shared sampling primitive of every environment."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def inverse_cdf(probs: jax.Array, u: jax.Array) -> jax.Array:
    """Categorical draws along the last axis of ``probs`` for uniforms ``u`` (int32).

    One uniform per draw and a binary search of the CDF, instead of noise over every category.
    ``probs`` is (C,) with ``u`` of any shape, or (B, C) with ``u`` of shape (B, n).
    Categories of probability 0 are never drawn (``side="right"``).
    """
    cdf = jnp.cumsum(probs, axis=-1)
    u = u * (cdf[..., -1:] if cdf.ndim == 2 else cdf[-1])
    search = lambda c, v: jnp.searchsorted(c, v, side="right")  # noqa: E731
    idx = jax.vmap(search)(cdf, u) if cdf.ndim == 2 else search(cdf, u)
    return jnp.minimum(idx, probs.shape[-1] - 1).astype(jnp.int32)
