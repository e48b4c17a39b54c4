"""Input checks and reductions the framework ports share."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from gpolab import validate


def _need_group_axis(rewards: jax.Array, name: str, batch: bool = False) -> None:
    """The rewards' shape (ConfigError, the registry's message) and float dtype (chex, at trace
    time: the registry converts bool and integer rewards before they get here)."""
    if rewards.ndim < (2 if batch else 1) or rewards.shape[-1] < 1:
        want = "(..., P, G)" if batch else "(..., G)"
        raise validate.ConfigError(
            f"{name}: rewards shape {rewards.shape}; expected {want} with G >= 1"
        )
    chex.assert_type(rewards, float)


def _need(x, like: jax.Array, name: str, field: str, shape: tuple) -> jax.Array:
    if x is None:
        raise validate.ConfigError(f"{name}: needs {field}, got None")
    x = jnp.asarray(x, dtype=like.dtype)
    if x.shape != shape:
        raise validate.ConfigError(f"{name}: {field} shape {x.shape}; expected {shape}")
    return x


def _flat(x: jax.Array) -> jax.Array:
    """True (keepdims) for all-equal groups."""
    return jnp.max(x, -1, keepdims=True) == jnp.min(x, -1, keepdims=True)


def _mean(x: jax.Array) -> jax.Array:
    return jnp.mean(x, -1, keepdims=True)


def _var1(x: jax.Array) -> jax.Array:
    """torch.var (ddof 1) over the group, keepdims; two-pass; G ≥ 2."""
    d = x - _mean(x)
    return jnp.sum(d * d, -1, keepdims=True) / (x.shape[-1] - 1)


def _std1(x: jax.Array) -> jax.Array:
    """torch.std (ddof 1) over the group, keepdims; two-pass; G ≥ 2."""
    return jnp.sqrt(_var1(x))


def _centre(x: jax.Array) -> jax.Array:
    """r − r̄, exactly 0 on all-equal groups."""
    return jnp.where(_flat(x), 0.0, x - _mean(x))


def _scaled(centred: jax.Array, denom: jax.Array, flat: jax.Array) -> jax.Array:
    """centred / denom, exactly 0 where ``flat`` (denom may be 0 there)."""
    return jnp.where(flat, 0.0, centred / jnp.where(flat, 1.0, denom))


def _batch_sum(x: jax.Array) -> jax.Array:
    return jnp.sum(x, axis=(-2, -1), keepdims=True)


def _rloo(rewards: jax.Array, name: str, singleton) -> jax.Array:
    """G/(G − 1)·(r − r̄) = r − mean_{j≠i} r_j (0 on all-equal groups); ``singleton(rewards)``
    for G = 1, which has no leave-one-out set."""
    _need_group_axis(rewards, name)
    G = rewards.shape[-1]
    if G == 1:
        return singleton(rewards)
    return _centre(rewards) * (G / (G - 1))
