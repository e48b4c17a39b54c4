"""Grouped kernels: one group of G responses per prompt, every estimator on the same draws.

The bandit's (:func:`bandit_error`; the graded bandit's :func:`graded_error`) and the arithmetic
surrogate's (:func:`arithmetic_error`) gradient errors against the exact gradient, under a loss
aggregation (:func:`aggregate`); the
protocol is :mod:`gpolab.kernels`'.  Each ``*Cell`` dataclass is the static part of a
measurement; the traced part travels in ``args``.  :func:`best_scale` summarises the moments.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from gpolab import estimators
from gpolab.envs import arithmetic, bandit, graded

GREEDY = 0x9E3  # fold_in tag of the greedy response's reward draw (other draws stay the same)
# the arithmetic surrogate's chunk on CPU: its compilation (~4 s) outweighs what the engine's
# chunk probe could save at a sweep's few thousand seeds; 32 was the fastest of 4…32 seeds per
# chunk.  On an accelerator 32 seeds would leave it idle: there the chunk is automatic (0).
ARITHMETIC_CHUNK = 32


def arithmetic_chunk() -> int:
    """:func:`arithmetic_error`'s chunk: :data:`ARITHMETIC_CHUNK` on CPU, else 0 (the engine's
    automatic chunk)."""
    return ARITHMETIC_CHUNK if jax.default_backend() == "cpu" else 0


def cell_weights(cell, rewards: jax.Array, inputs: dict, eps) -> jax.Array:
    """(E, P, G) gradient weights of every estimator spec of ``cell`` on rewards (P, G), on the
    same draws.  ``inputs``: name → thunk for baseline / lengths / greedy; each input some
    estimator needs is built once, the others never.  The cell's ``scale``/``ddof`` and the
    traced ``eps`` reach the estimators that read them."""
    shared = {"scale": cell.scale, "ddof": cell.ddof, "eps": eps}
    needs = [estimators.resolve(spec).needs for spec in cell.estimators]
    built = {name: inputs[name]() for name in set().union(*needs)}
    return jnp.stack(
        [
            estimators.gradient_weights(spec, rewards, **{n: built[n] for n in need}, **shared)
            for spec, need in zip(cell.estimators, needs, strict=True)
        ]
    )


def per_estimator(names, prefix: str = "", **columns) -> dict:
    """``{prefix + name: {column: values[i]}}`` for estimator i of ``names`` (specs or bound
    specs, rows named as given) and each (E, ...) array of ``columns``."""
    return {
        f"{prefix}{name}": {k: v[i] for k, v in columns.items()} for i, name in enumerate(names)
    }


@dataclasses.dataclass(frozen=True)
class BanditCell:
    """Every estimator in ``estimators`` is applied to the same draws (common random numbers).

    ``B=0``: every prompt gets one group (reports Σ_x f(x) MSE(x));
    ``B=b``: a mini-batch of b iid prompts (reports the mini-batch MSE).
    ``mean_error=False`` keeps only ‖e‖² per seed (MSE and its CI; no bias/variance split, no
    cosine or best-scale statistics).
    """

    estimators: tuple  # specs (str) or bound specs (estimators.Bound), rows named as given
    G: int
    B: int = 0
    scale: str = "group"
    ddof: int = 1
    mean_error: bool = True
    loss_agg: str = estimators.DEFAULT_LOSS_AGG  # verl loss_agg_mode (estimators.aggregation)
    norm_length: float | None = None  # L_norm of seq-mean-token-sum-norm (None: batch max)


def bandit_inputs(key, params, truth, prompts, actions, lengths_dtype=None) -> dict:
    """The bandit's thunks for :func:`cell_weights` (built only for the estimators that need
    them): the oracle baseline V(x), the responses' lengths (cast to ``lengths_dtype`` when
    given) and the greedy response's reward (its own ``fold_in`` stream)."""

    def lengths():
        out = bandit.response_length(params, prompts, actions)
        return out if lengths_dtype is None else out.astype(lengths_dtype)

    return {
        "baseline": lambda: truth.V[prompts],
        "lengths": lengths,
        "greedy": lambda: bandit.greedy_rewards(jax.random.fold_in(key, GREEDY), params, prompts),
    }


def bandit_error(cell: BanditCell, key: jax.Array, args) -> dict:
    """Errors of gradient estimates against the exact gradient.  ``args = (params, truth, tables,
    eps)``: the instance, its exact truth and its alias tables
    (:func:`gpolab.envs.bandit.outcome_tables`).

    Returns ``{name: {"err": e, "sq": ‖e‖²}}`` per estimator plus the degenerate-group fraction.
    """
    params, truth, tables, eps = args
    prompts, k_group = _bandit_prompts(cell, key, params)
    actions, rewards = bandit.sample(k_group, params, prompts, cell.G, tables)
    inputs = bandit_inputs(key, params, truth, prompts, actions)
    return _bandit_errors(cell, params, truth, prompts, actions, rewards, inputs, eps)


def graded_error(cell: BanditCell, key: jax.Array, args) -> dict:
    """:func:`bandit_error` on the graded bandit (:mod:`gpolab.envs.graded`): ``args = (params,
    truth, tables, eps)`` with its :class:`~gpolab.envs.graded.GradedParams`, truth and alias
    tables; rewards on its grid, the greedy response's reward drawn from its reward law."""
    params, truth, tables, eps = args
    prompts, k_group = _bandit_prompts(cell, key, params.bandit)
    actions, rewards = graded.sample(k_group, params, prompts, cell.G, tables)
    k_greedy = jax.random.fold_in(key, GREEDY)
    inputs = bandit_inputs(key, params.bandit, truth, prompts, actions) | {
        "greedy": lambda: graded.greedy_rewards(k_greedy, params, prompts)
    }
    return _bandit_errors(cell, params.bandit, truth, prompts, actions, rewards, inputs, eps)


def _bandit_prompts(cell: BanditCell, key: jax.Array, params) -> tuple[jax.Array, jax.Array]:
    """(prompts, the group draws' key): every prompt once (B = 0) or B iid from f."""
    if cell.B == 0:
        return jnp.arange(params.num_prompts, dtype=jnp.int32), key
    k_prompts, k_group = jax.random.split(key)
    return bandit.sample_prompts(k_prompts, params, cell.B), k_group


def _bandit_errors(cell, params, truth, prompts, actions, rewards, inputs, eps) -> dict:
    """The statistics of :func:`bandit_error` for drawn ``actions`` and ``rewards`` (B, G)."""
    out = {"degenerate": jnp.mean(estimators.degenerate(rewards).astype(rewards.dtype))}
    weights = cell_weights(cell, rewards, inputs, eps)  # (E, B, G)
    weights = aggregate(cell, weights, inputs["lengths"])
    ghat = jax.vmap(bandit.weighted_scores, in_axes=(None, None, None, 0))(
        params, prompts, actions, weights
    )  # (E, B, d), one batched scatter
    if cell.B == 0:
        err = jnp.sqrt(truth.prompt_probs)[None, :, None] * (ghat - truth.g_local[None])
        err = err.reshape(len(cell.estimators), -1)
        total = jax.vmap(bandit.prompt_average, in_axes=(None, 0))(params, ghat)
    else:
        total = jax.vmap(bandit.to_global, in_axes=(None, None, 0))(params, prompts, ghat)
        err = total - truth.g[None]
    sq = jnp.sum(err**2, axis=-1)
    if not cell.mean_error:  # ‖e‖² only: the statistic of gpolab bench's W1 and its references
        return {**out, **per_estimator(cell.estimators, sq=sq)}
    cos = cosine(total, truth.g)
    if cell.B == 0:  # per-prompt weighting, as the MSE: Σ_x f(x) ĝ_x·g_x and Σ_x f(x) ‖ĝ_x‖²
        f = truth.prompt_probs
        dot = jnp.einsum("p,epd,pd->e", f, ghat, truth.g_local)
        norm2 = jnp.einsum("p,epd->e", f, ghat**2)
    else:
        dot, norm2 = total @ truth.g, jnp.sum(total**2, axis=-1)
    return {**out, **per_estimator(cell.estimators, err=err, sq=sq, cos=cos, dot=dot, norm2=norm2)}


def cosine(estimates: jax.Array, target: jax.Array) -> jax.Array:
    """(E,) cosine of each row of ``estimates`` (E, D) with ``target`` (D,); 0 for a zero row."""
    norms = jnp.linalg.norm(estimates, axis=-1) * jnp.linalg.norm(target)
    dots = estimates @ target
    return jnp.where(norms > 0, dots / jnp.where(norms > 0, norms, 1.0), 0.0)


@dataclasses.dataclass(frozen=True)
class ArithmeticCell:
    """``Q`` questions drawn uniformly per seed, one group of G answers each; every estimator on
    the same draws.  The per-seed mean of ‖ĝ_x − g_x‖² over the Q questions is unbiased for the
    average per-question MSE Σ_x f(x) MSE(x)."""

    estimators: tuple  # specs (str) or bound specs (estimators.Bound), rows named as given
    G: int
    Q: int = 8
    scale: str = "group"
    ddof: int = 1
    loss_agg: str = estimators.DEFAULT_LOSS_AGG  # verl loss_agg_mode (estimators.aggregation)
    norm_length: float | None = None  # L_norm of seq-mean-token-sum-norm (None: batch max)
    lengths: str = "one"  # one: filler + thoughts + answer for all; generated: up to <eos>


def arithmetic_error(cell: ArithmeticCell, key: jax.Array, args) -> dict:
    """``args = (params, truth, questions, eps)``: the Q groups of a seed are one batch (what a
    batch-scoped estimator normalizes over); one forward pass per group and one backward pass per
    estimator (a vjp with E cotangents).  ``cos``: cosine between the batch's gradient estimate
    (1/Q) Σ ĝ_x and its exact gradient (1/Q) Σ g_x."""
    params, truth, questions, eps = args
    idx, feats, answers, tokens, rewards = arithmetic_draws(cell, key, params, questions)
    inputs = {  # built only for the estimators that need them
        "baseline": lambda: truth.V[idx],
        "lengths": lambda: arithmetic_lengths(cell, params, tokens, rewards),
        "greedy": lambda: jax.lax.map(
            lambda a: arithmetic.greedy_reward(params, *a), (feats, answers)
        ),
    }
    weights = cell_weights(cell, rewards, inputs, eps)  # (E, Q, G)
    weights = aggregate(cell, weights, inputs["lengths"])
    moments = question_moments(
        arithmetic.gradient_estimates, params, feats, tokens, weights, truth.g_local[idx]
    )
    out = {"degenerate": jnp.mean(estimators.degenerate(rewards).astype(moments["sq"].dtype))}
    return {**out, **per_estimator(cell.estimators, **moments)}


def arithmetic_draws(cell, key: jax.Array, params, questions) -> tuple:
    """One seed's draws: ``cell.Q`` question indices (uniform), their features and answers, one
    group of ``cell.G`` sampled sequences each (Q, G, length) and their rewards (Q, G)."""
    k_q, k_g = jax.random.split(key)
    idx = jax.random.randint(k_q, (cell.Q,), 0, questions.features.shape[0])
    feats, answers = questions.features[idx], questions.answers[idx]
    tokens = jax.lax.map(
        lambda a: arithmetic.sample(a[0], params, a[1], cell.G),
        (jax.random.split(k_g, cell.Q), feats),
    )  # (Q, G, length)
    return idx, feats, answers, tokens, jax.vmap(arithmetic.rewards)(tokens, answers)


def question_moments(estimate, params, feats, tokens, weights, g_x) -> dict:
    """Per-question means of ``sq`` = ‖ĝ_x − g_x‖², ``dot`` = ĝ_x·g_x, ``norm2`` = ‖ĝ_x‖² (each
    (E,)) and ``cos``, the cosine of the batch's Σ_x ĝ_x with Σ_x g_x, over the Q questions;
    ``estimate(params, feat, tokens, w)`` → (E, D) for one question's weights ``w`` (weights:
    (E, Q, ...)), scanned over the questions (one question's Jacobian in memory at a time)."""

    def add(carry, a):
        feat, tok, w, g = a
        ghat = estimate(params, feat, tok, w)  # (E, D)
        sq, dot, norm2 = jnp.sum((ghat - g[None]) ** 2, -1), ghat @ g, jnp.sum(ghat**2, -1)
        return (carry[0] + ghat, carry[1] + jnp.stack([sq, dot, norm2])), None

    E = weights.shape[0]
    zero = (jnp.zeros((E, g_x.shape[-1]), g_x.dtype), jnp.zeros((3, E), g_x.dtype))
    (total, sums), _ = jax.lax.scan(add, zero, (feats, tokens, jnp.swapaxes(weights, 0, 1), g_x))
    sq, dot, norm2 = sums / feats.shape[0]  # per-question means
    return {"sq": sq, "dot": dot, "norm2": norm2, "cos": cosine(total, jnp.sum(g_x, axis=0))}


def aggregate(cell, weights: jax.Array, lengths) -> jax.Array:
    """(E, B, G) weights of ``cell.loss_agg`` (verl loss_agg_mode) from the seq-mean-token-sum
    weights: each response's weight times N·c_i (:func:`gpolab.estimators.relative_weights`),
    the batch being the cell's B·G responses.  The default mode returns ``weights`` untouched
    (bit-identical) and never builds the lengths (``lengths``: a thunk)."""
    if cell.loss_agg == estimators.DEFAULT_LOSS_AGG:
        return weights
    factor = estimators.relative_weights(cell.loss_agg, lengths(), norm_length=cell.norm_length)
    return weights * factor[None].astype(weights.dtype)


def arithmetic_lengths(cell, params, tokens: jax.Array, rewards: jax.Array) -> jax.Array:
    """(Q, G) response lengths: the constant filler + thoughts + answer (``lengths="one"``) or
    what each response generated up to its first <eos> (``"generated"``)."""
    if cell.lengths == "generated":
        return arithmetic.generated_lengths(params, tokens).astype(rewards.dtype)
    return jnp.full_like(rewards, arithmetic.response_length(params))


def best_scale(m, name: str, target_sq: float) -> dict:
    """The scale-invariant score (theory §11, applied to gradients) of estimator ``name`` from
    the moments ``m`` of its ``dot`` (ĝ·g) and ``norm2`` (‖ĝ‖²): the MSE after the best single
    rescaling c* = E[ĝ·g]/E‖ĝ‖², ``scaled_mse`` = ‖g‖² − E[ĝ·g]²/E‖ĝ‖² (same averaging as the
    MSE).  Shrinking ĝ toward 0 does not lower it, so it ranks directions, not step sizes."""
    dot, norm2 = float(m.mean(f"{name}/dot")), float(m.mean(f"{name}/norm2"))
    if norm2 <= 0:
        return {"best_scale": math.nan, "scaled_mse": target_sq}
    return {"best_scale": dot / norm2, "scaled_mse": target_sq - dot**2 / norm2}
