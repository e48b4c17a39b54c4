"""Tree branching (DESIGN §6, [T] arXiv 2509.24494): K thoughts × M continuations per prompt.

Each thought t_k has a success value p_k = E[Z | t_k]; its M continuations are
Z_kj | t_k ~ Bernoulli(p_k).  Two thought models:

* :class:`BetaThoughts`:   p_k ~ Beta(a, b) iid (closed forms in :mod:`gpolab.theory.tree`);
* :class:`FiniteThoughts`: T thoughts drawn from a softmax thought policy π = softmax(logits),
  thought t succeeding with probability values[t]; the thought-level objective
  J = Σ_t π_t values_t has the exact gradient ∇_logits J = π ⊙ (values − J).

Targets for a thought advantage Â_k: the population-standardized value (p_k − E p)/sd(p) and the
within-group one (p_k − p̄)/s_p (s_p with the estimator's ddof).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from gpolab import validate
from gpolab.envs.sampling import inverse_cdf

MODELS = ("beta", "finite")


@struct.dataclass
class BetaThoughts:
    a: jax.Array
    b: jax.Array


@struct.dataclass
class FiniteThoughts:
    logits: jax.Array  # (T,) thought policy logits
    values: jax.Array  # (T,) success probability of each thought


@struct.dataclass
class TreeTruth:
    mean: jax.Array  # E p
    sd: jax.Array  # sd(p) (population)
    grad: jax.Array  # (T,) ∇_logits J for finite thoughts; (0,) for Beta


def make_beta(a: float = 2.0, b: float = 3.0) -> BetaThoughts:
    validate.real("a", a, low=0.0, open_low=True)
    validate.real("b", b, low=0.0, open_low=True)
    return BetaThoughts(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32))


def make_finite(
    key: jax.Array | int = 0,
    thoughts: int = 32,
    logit_scale: float = 1.0,
    a: float = 2.0,
    b: float = 3.0,
) -> FiniteThoughts:
    """T thoughts with Gaussian logits and Beta(a, b) values."""
    validate.integer("thoughts", thoughts, 2)
    validate.real("logit_scale", logit_scale, low=0.0)
    validate.real("a", a, low=0.0, open_low=True)
    validate.real("b", b, low=0.0, open_low=True)
    key = jax.random.key(key) if isinstance(key, int) else key
    k_l, k_v = jax.random.split(key)
    return FiniteThoughts(
        logit_scale * jax.random.normal(k_l, (thoughts,)), jax.random.beta(k_v, a, b, (thoughts,))
    )


def sample_thoughts(key: jax.Array, params, K: int):
    """K thought values p (K,) and, for finite thoughts, their ids (K,) int32 (else zeros)."""
    if isinstance(params, BetaThoughts):
        return jax.random.beta(key, params.a, params.b, (K,)), jnp.zeros((K,), jnp.int32)
    probs = jax.nn.softmax(params.logits)
    ids = inverse_cdf(probs, jax.random.uniform(key, (K,), dtype=probs.dtype))
    return params.values[ids], ids


def sample_continuations(key: jax.Array, p: jax.Array, M: int) -> jax.Array:
    """(K, M) Bernoulli(p_k) rewards."""
    u = jax.random.uniform(key, (p.shape[0], M), dtype=p.dtype)
    return (u < p[:, None]).astype(p.dtype)


def exact(params) -> TreeTruth:
    if isinstance(params, BetaThoughts):
        a, b = params.a, params.b
        mean = a / (a + b)
        var = a * b / ((a + b) ** 2 * (a + b + 1))
        return TreeTruth(mean, jnp.sqrt(var), jnp.zeros((0,)))
    pi = jax.nn.softmax(params.logits)
    mean = pi @ params.values
    var = pi @ (params.values - mean) ** 2
    return TreeTruth(mean, jnp.sqrt(var), pi * (params.values - mean))


def thought_return(params: FiniteThoughts) -> jax.Array:
    """J = Σ_t π_t values_t (its gradient is ``exact(params).grad``)."""
    return jax.nn.softmax(params.logits) @ params.values


def population_target(truth: TreeTruth, p: jax.Array) -> jax.Array:
    """A_k = (p_k − E p) / sd(p)."""
    return (p - truth.mean) / truth.sd


def group_target(p: jax.Array, ddof: int = 1) -> jax.Array:
    """A_k = (p_k − p̄) / s_p within the K drawn thoughts (0 if s_p = 0)."""
    c = p - jnp.mean(p, axis=-1, keepdims=True)
    s = jnp.sqrt(jnp.sum(c**2, axis=-1, keepdims=True) / (p.shape[-1] - ddof))
    return jnp.where(s > 0, c / jnp.where(s > 0, s, 1.0), 0.0)
