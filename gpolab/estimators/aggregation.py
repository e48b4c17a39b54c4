"""Loss aggregation: how a trainer turns per-token losses into one scalar, as gradient weights.

At the rollout policy (ratio 1, no clipping, no KL) every trainer's policy loss is
−Σ_i Σ_{t<L_i} c_i A_i ratio_{i,t}, so its gradient is −Σ_i c_i A_i W_i with W_i = Σ_t
∇ log π(y_{i,t} | x, y_{i,<t}) the sequence score: a mode is its weights c_i over the N
responses of a batch.  gpolab's estimators so far are ``seq-mean-token-sum`` (c_i = 1/N).

Modes (verl's names; verl/trainer/ppo/core_algos.py::agg_loss in verl 0.9.1 from PyPI and in
b178a3cd (v0.7.0-125), both differentiated per token against :func:`loss_weights` in
tests/estimators/test_verl_reference.py, one data-parallel rank):

=========================== ===================== =====================================
mode                        c_i                   verl ``agg_loss`` branch
=========================== ===================== =====================================
``token-mean``              1 / Σ_batch L_j       masked_sum(loss) / batch_num_tokens
``token-sum``               1                     masked_sum(loss) (× dp_size: the global sum)
``seq-mean-token-sum``      1 / N                 sum_t per sequence, mean over sequences
``seq-mean-token-mean``     1 / (N L_i)           mean_t per sequence, mean over sequences
``seq-mean-token-sum-norm`` 1 / (N L_norm)        seq-mean, then / loss_scale_factor
=========================== ===================== =====================================

``token-sum`` (verl PR #7197, 4730d46b, in 0.9.0; read at 1dda039b): the plain sum over the
mini-batch's tokens, each rank's local sum times dp_size so that the averaged gradient is the
global sum: N times ``seq-mean-token-sum`` (the same direction; an MSE N² times larger at the
same step size).

``seq-mean-token-sum-norm``: verl 0.9.1 takes the seq-mean and divides it by
``loss_scale_factor`` (default ``loss_mask.shape[-1]``, the padded response width of the
tensor: the rollout's configured ``response_length`` where the agent loop pads to it, the
micro-batch's longest response in the nested-tensor engine path): c_i = 1/(N L_norm), TRL's
``dr_grpo`` form (trl/trainer/grpo_trainer.py::_compute_loss, TRL f2cd5771 and 1.16.0:
sum / (size(0) · max_completion_length)), the one here, so that every mode has the scale of a
mean.  b178a3cd divided the *sum* over sequences (no 1/N): c_i = 1/L_norm, N times this one.
A constant factor changes the MSE, not the direction (``cos``, ``scaled_mse``).

TRL ``loss_type`` (same function) → mode, :data:`TRL_LOSS_TYPES`: ``grpo`` = seq-mean-token-mean
(mean over tokens, then over the local batch); ``bnpo`` = token-mean over the *local* (per
process, per micro-batch) tokens; ``dapo`` (TRL's default) = token-mean over the tokens of the
*global* batch (``num_items_in_batch`` gathered over processes, divided by num_processes;
TRL 1.16.0 also scales it by gradient-accumulation steps / steps_per_generation);
``dr_grpo`` = seq-mean-token-sum-norm with L_norm = ``max_completion_length``, a config
constant.  grpo/bnpo/dr_grpo also divide by the gradient-accumulation steps, so with equal
micro-batches they equal the modes on the whole batch; bnpo does not (its token count is each
micro-batch's).  verl's legacy dp_actor likewise computes token-mean per micro-batch and scales
by 1/gradient_accumulation (verl/workers/actor/dp_actor.py::update_policy).
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from gpolab import validate

__all__ = [
    "LOSS_AGG_MODES",
    "DEFAULT_LOSS_AGG",
    "TRL_LOSS_TYPES",
    "loss_weights",
    "relative_weights",
    "check_loss_agg",
]

LOSS_AGG_MODES = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)
DEFAULT_LOSS_AGG = "seq-mean-token-sum"  # gpolab's estimators: ĝ = (1/N) Σ_i A_i W_i
# TRL GRPOTrainer loss_type → the mode of its gradient (see the module docstring for the scopes)
TRL_LOSS_TYPES = {
    "grpo": "seq-mean-token-mean",
    "bnpo": "token-mean",  # normalizer: tokens of the local (per-process) micro-batch
    "dapo": "token-mean",  # normalizer: tokens of the global batch
    "dr_grpo": "seq-mean-token-sum-norm",  # L_norm = max_completion_length
}


def check_loss_agg(mode: str, field: str = "loss_agg") -> None:
    """Plain-Python check of a mode name."""
    validate.choice(field, mode, LOSS_AGG_MODES)


def _check_lengths(lengths: jax.Array, norm_length) -> None:
    """Trace-time checks: float lengths with at least one (non-empty) batch axis, scalar L_norm."""
    chex.assert_type(lengths, float)
    chex.assert_axis_dimension_gteq(lengths, -1, 1)
    if norm_length is not None:
        chex.assert_rank(norm_length, 0)


def loss_weights(mode: str, lengths: jax.Array, *, norm_length=None) -> jax.Array:
    """Weights c_i (same shape as ``lengths``) of ``mode`` over a batch: ∇loss = −Σ_i c_i A_i W_i.

    Every axis of ``lengths`` (tokens per response, > 0) is the batch (N = lengths.size):
      token-mean               c_i = 1 / Σ_j L_j          (verl token-mean; TRL dapo/bnpo)
      token-sum                c_i = 1                    (verl token-sum, ≥ 0.9.0)
      seq-mean-token-sum       c_i = 1 / N                (verl seq-mean-token-sum)
      seq-mean-token-mean      c_i = 1 / (N L_i)          (verl seq-mean-token-mean; TRL grpo)
      seq-mean-token-sum-norm  c_i = 1 / (N L_norm)       (TRL dr_grpo, verl 0.9.1)
    ``norm_length``: L_norm, a constant (verl ``loss_scale_factor``, TRL ``max_completion_length``);
    None = the batch's longest response (the padded width of a tensor padded to the batch max).
    See verl/trainer/ppo/core_algos.py::agg_loss and trl/trainer/grpo_trainer.py::_compute_loss.

    Args:
      mode: one of :data:`LOSS_AGG_MODES` (static).
      lengths: [...] float response lengths in tokens, every axis the batch (e.g. [P, G]).
      norm_length: [] L_norm, or None.

    Returns:
      [...] float weights c_i, the shape of ``lengths``.
    """
    check_loss_agg(mode, "mode")
    _check_lengths(lengths, norm_length)
    n = lengths.size
    if mode == "token-mean":
        return jnp.broadcast_to(1.0 / jnp.sum(lengths), lengths.shape)
    if mode == "token-sum":
        return jnp.ones_like(lengths)
    if mode == "seq-mean-token-sum":
        return jnp.full_like(lengths, 1.0 / n)
    if mode == "seq-mean-token-mean":
        return 1.0 / (n * lengths)
    norm = jnp.max(lengths) if norm_length is None else jnp.asarray(norm_length, lengths.dtype)
    return jnp.broadcast_to(1.0 / (n * norm), lengths.shape)


def relative_weights(mode: str, lengths: jax.Array, *, norm_length=None) -> jax.Array:
    """N · c_i: the factor by which ``mode`` multiplies each response's weight in gpolab's
    seq-mean-token-sum estimate ĝ = (1/N) Σ_i A_i W_i (1 for that mode, 1/L_i for
    seq-mean-token-mean, N/Σ L for token-mean, N for token-sum, 1/L_norm for
    seq-mean-token-sum-norm).

    Args:
      mode: one of :data:`LOSS_AGG_MODES` (static).
      lengths: [...] float response lengths in tokens, every axis the batch (e.g. [P, G]).
      norm_length: [] L_norm, or None.

    Returns:
      [...] float factors N·c_i, the shape of ``lengths``.
    """
    check_loss_agg(mode, "mode")
    _check_lengths(lengths, norm_length)
    if mode == "token-mean":
        return jnp.broadcast_to(lengths.size / jnp.sum(lengths), lengths.shape)
    if mode == "token-sum":
        return jnp.full_like(lengths, lengths.size)
    if mode == "seq-mean-token-sum":
        return jnp.ones_like(lengths)
    if mode == "seq-mean-token-mean":
        return 1.0 / lengths
    norm = jnp.max(lengths) if norm_length is None else jnp.asarray(norm_length, lengths.dtype)
    return jnp.broadcast_to(1.0 / norm, lengths.shape)
