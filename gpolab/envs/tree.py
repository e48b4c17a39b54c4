"""Tree branching (theory §6, [T] arXiv 2509.24494): K thoughts × M continuations per prompt.

Each thought t_k has a success value p_k = E[Z | t_k]; its M continuations are
Z_kj | t_k ~ Bernoulli(p_k).  Two thought models:

* :class:`BetaThoughts`:   p_k ~ Beta(a, b) iid (closed forms in :mod:`gpolab.theory.tree`);
* :class:`FiniteThoughts`: T thoughts drawn from a softmax thought policy π = softmax(logits),
  thought t succeeding with probability values[t]; the thought-level objective
  J = Σ_t π_t values_t has the exact gradient ∇_logits J = π ⊙ (values − J);
* ``loglinear``: the same finite thoughts under a log-linear policy π(t) ∝ exp(θ·φ_t) whose
  features share a component with ``overlap`` ρ (:func:`strategy_feature`; the geometry is in
  :mod:`gpolab.theory.tree_overlap`): the draws are the finite model's, only the gradient's
  metric changes.

Targets for a thought advantage Â_k: the population-standardized value (p_k − E p)/sd(p) and the
within-group one (p_k − p̄)/s_p (s_p with the estimator's ddof).

Samplers (both exact; measured on 2 CPU cores, 1.28M draws): ``jax.random.beta`` takes 2.2 s, so
for integer (a, b) :func:`sample_beta_int` draws p = X/(X + Y) from sums of exponentials; only the
success counts S_k ~ Binomial(M, p_k) of the continuations matter, drawn by :func:`sample_counts`.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
from flax import struct

from gpolab import configs, validate
from gpolab.configs import option
from gpolab.envs.sampling import inverse_cdf

NAME = "tree"
MODELS = ("beta", "finite", "loglinear")
FINITE_MODELS = ("finite", "loglinear")  # finite thought sets (a softmax over thoughts)


@dataclasses.dataclass(frozen=True)
class Instance(configs.Config):
    """The tree's settings: its thought model and the (K, M) grid of thoughts × continuations
    (shapes: every (K, M) is one compiled cell)."""

    # the names stored cell keys (and result columns) were written with
    STORED_NAMES: ClassVar[dict] = {"beta_a": "a", "beta_b": "b"}

    model: str = option(
        "beta",
        "thought values: beta (p ~ Beta(a, b)), finite (softmax "
        "thought policy) or loglinear (finite thoughts, features that share a "
        "component: --overlap)",
    )
    beta_a: float = option(2.0, "thought values p ~ Beta(beta_a, beta_b): beta_a")
    beta_b: float = option(3.0, "thought values p ~ Beta(beta_a, beta_b): beta_b")
    thoughts: int = option(
        32, "finite model: number of distinct thoughts", when={"model": FINITE_MODELS}
    )
    overlap: float = option(
        0.0,
        "loglinear model: overlap rho in [0, 1) of the thoughts' "
        "features (0: orthogonal, the finite model; -> 1: thoughts on the "
        "same side of the average alike)",
        when={"model": ("loglinear",)},
    )
    instance_seed: int = option(0, "seed of the random bandit / thought set / questions")
    K: tuple[int, ...] = option((2, 4, 8, 16), "comma list of thought counts (>= 2)")
    M: tuple[int, ...] = option((1, 2, 4, 8), "comma list of continuations per thought (>= 1)")

    def validate(self) -> None:
        validate.integers("K", self.K, 2)
        validate.integers("M", self.M, 1)
        validate.tree_leaves(self.K, self.M)
        validate.choice("model", self.model, MODELS)
        validate.real("beta_a", self.beta_a, low=0.0, open_low=True)
        validate.real("beta_b", self.beta_b, low=0.0, open_low=True)
        validate.integer("thoughts", self.thoughts, 2)
        validate.integer("instance_seed", self.instance_seed, 0)
        check_overlap(self.overlap)


def check_overlap(rho: float) -> None:
    """ρ ∈ [0, 1): at ρ = 1 the features span one line and cannot carry the thought logits."""
    try:
        ok = 0.0 <= float(rho) < 1.0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise validate.ConfigError(f"overlap: got {rho!r}; allowed: a finite number in [0, 1)")


def make(inst: Instance) -> BetaThoughts | FiniteThoughts:
    """The thought model of ``inst`` (finite thoughts drawn with its ``instance_seed``; the
    loglinear model's thoughts are the finite model's)."""
    if inst.model == "beta":
        return make_beta(inst.beta_a, inst.beta_b)
    return make_finite(inst.instance_seed, inst.thoughts, a=inst.beta_a, b=inst.beta_b)


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
    # drawn in float32 and cast: float64 mode gives the same thoughts for the same key
    f32, real = jnp.float32, jnp.zeros(()).dtype
    logits = f32(logit_scale) * jax.random.normal(k_l, (thoughts,), f32)
    values = jax.random.beta(k_v, f32(a), f32(b), (thoughts,), f32)
    return FiniteThoughts(logits.astype(real), values.astype(real))


def sample_thoughts(key: jax.Array, params, K: int):
    """K thought values p (K,) and, for finite thoughts, their ids (K,) int32 (else zeros)."""
    if isinstance(params, BetaThoughts):
        return jax.random.beta(key, params.a, params.b, (K,)), jnp.zeros((K,), jnp.int32)
    probs = jax.nn.softmax(params.logits)
    ids = inverse_cdf(probs, jax.random.uniform(key, (K,), dtype=probs.dtype))
    return params.values[ids], ids


INVERSION_FROM = 9  # M at which counts come from CDF inversion instead of M uniforms
INVERSION_UPTO = 120  # (1 − q)^M with q ≤ ½ stays a normal float32 up to here; above: binomial


def integer_beta(model: str, a: float, b: float) -> tuple[int, int] | None:
    """(a, b) when Beta(a, b) thoughts can use :func:`sample_beta_int` (integers, a + b ≤ 64),
    else None (``jax.random.beta``).  The compiled shape depends on (a, b), so they are static."""
    ints = model == "beta" and float(a).is_integer() and float(b).is_integer()
    return (int(a), int(b)) if ints and a + b <= 64 else None


def sample_beta_int(key: jax.Array, a: int, b: int, shape: tuple[int, ...]) -> jax.Array:
    """Beta(a, b) for integer a, b: X/(X + Y), X ~ Gamma(a), Y ~ Gamma(b) as sums of
    exponentials −log U (exact; a + b uniforms per draw)."""
    e = -jnp.log1p(-jax.random.uniform(key, (*shape, a + b)))  # U ∈ [0, 1) → E ∈ [0, ∞)
    x = jnp.sum(e[..., :a], axis=-1)
    return x / (x + jnp.sum(e[..., a:], axis=-1))


def sample_counts(key: jax.Array, p: jax.Array, M: int) -> jax.Array:
    """Success counts S_k ~ Binomial(M, p_k) of M Bernoulli(p_k) continuations, float (K,).

    Only the counts matter (the leaves are binary, every advantage variant is a function of
    them).  M < 9: Σ_j 1[U_j < p_k] (M uniforms); 9 ≤ M ≤ 120: inversion of one uniform through
    the CDF built by the recurrence P(s) = P(s − 1)·(M − s + 1)/s·q/(1 − q) from
    P(0) = (1 − q)^M, q = min(p, 1 − p) (no underflow; 5× faster than ``jax.random.binomial`` at
    M = 64, exact up to float32 rounding of the CDF); M > 120: ``jax.random.binomial``.
    """
    if M < INVERSION_FROM:
        u = jax.random.uniform(key, (p.shape[0], M), dtype=p.dtype)
        return jnp.sum(u < p[:, None], -1).astype(p.dtype)
    if M > INVERSION_UPTO:
        return jax.random.binomial(key, M, p).astype(p.dtype)
    u = jax.random.uniform(key, p.shape, dtype=p.dtype)
    flip = p > 0.5
    q = jnp.where(flip, 1 - p, p)
    ratio = q / (1 - q)
    pmf = (1 - q) ** M
    cdf, count = pmf, jnp.zeros_like(p)
    for s in range(1, M + 1):  # unrolled: M is static
        count = count + (u >= cdf)
        pmf = pmf * ((M - s + 1) / s) * ratio
        cdf = cdf + pmf
    return jnp.where(flip, M - count, count)


def leaves(counts: jax.Array, M: int) -> jax.Array:
    """Binary leaves (K, M) with Z_kj = 1[j < S_k] (same V̂_k and leaf std as the drawn ones)."""
    return (jnp.arange(M)[None, :] < counts[:, None]).astype(counts.dtype)


def thought_gradient(adv: jax.Array, ids: jax.Array, pi: jax.Array) -> jax.Array:
    """ĝ = (1/K) Σ_k Â_k (e_{t_k} − π), the thought-level policy gradient (T,)."""
    K = adv.shape[0]
    return jnp.zeros_like(pi).at[ids].add(adv) / K - pi * jnp.mean(adv)


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


def strategy_feature(params: FiniteThoughts) -> jax.Array:
    """ψ (T,): the shared feature of the loglinear model, the standardized indicator that a
    thought beats the policy's average, ψ_t = (1[v_t > J] − P)/√(P(1 − P)), P = Σ_t π_t 1[v_t > J]
    (E_π ψ = 0, E_π ψ² = 1; the features are φ_t = √(1 − ρ) e_t + √ρ ψ_t u)."""
    pi = jax.nn.softmax(params.logits)
    above = (params.values > pi @ params.values).astype(pi.dtype)
    P = pi @ above
    return (above - P) / jnp.sqrt(P * (1 - P))


def population_target(truth: TreeTruth, p: jax.Array) -> jax.Array:
    """A_k = (p_k − E p) / sd(p)."""
    return (p - truth.mean) / truth.sd


def group_target(p: jax.Array, ddof: int = 1) -> jax.Array:
    """A_k = (p_k − p̄) / s_p within the K drawn thoughts (0 if s_p = 0)."""
    c = p - jnp.mean(p, axis=-1, keepdims=True)
    s = jnp.sqrt(jnp.sum(c**2, axis=-1, keepdims=True) / (p.shape[-1] - ddof))
    return jnp.where(s > 0, c / jnp.where(s > 0, s, 1.0), 0.0)
