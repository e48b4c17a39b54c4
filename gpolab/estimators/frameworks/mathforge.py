"""DGPO's advantages (MathForge, arXiv 2601.20614): the group's mean absolute deviation in place
of its std, and the authors' batch reweighting (see :mod:`gpolab.estimators.frameworks`).

Source: ``AMAP-ML/MathForge trl-0.20.0/trl/trainer/grpo_trainer.py::
_generate_and_score_completions`` (L1678–1744) and ``grpo_config.py`` (L581–593) @ 83edda02.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from gpolab import validate
from gpolab.estimators.frameworks._common import _centre, _need, _need_group_axis

_TINY = 1e-8  # torch.isclose(x, 0)'s atol: |x| <= 1e-8 (rtol · 0 = 0)


def _dgae(centred: jax.Array) -> jax.Array:
    """G·(r − r̄)/(Σ_g |r_g − r̄| + 1e-4) of group-centred rewards (0 where they are 0)."""
    G = centred.shape[-1]
    extent = jnp.sum(jnp.abs(centred), -1, keepdims=True)
    return G * centred / (extent + 1e-4)


def mathforge_dgae(rewards, *, lengths=None, greedy=None):
    """DGPO's difficulty-balanced group advantage (DGAE): the group's deviations divided by
    their mean absolute deviation (around the mean, not the median) instead of their std,

        A_g = G·(r_g − r̄) / (Σ_k |r_k − r̄| + 1e-4) = (r_g − r̄)/(MAD + 1e-4/G),

    so Σ_g |A_g| = G·Σ|d|/(Σ|d| + 1e-4) ≈ G for every group that is not all-equal: each question
    moves the policy by the same total amount whatever its difficulty.  Binary rewards, c of G
    correct (0 < c < G): A = G/(2c) on a correct response and −G/(2(G − c)) on a wrong one (up
    to the 1e-4, which is hard-coded).  All-equal group: exactly 0 (the authors' torch.mean can
    leave rounding noise there, then multiplied by G/1e-4), never NaN.
    This is the advantage alone (the code's ``enable_dgpo`` branch of ``scale_rewards=True``,
    TRL 0.20's default); the reweighting DGPO ships with it is :func:`mathforge_dgpo`.
    Source: ``AMAP-ML/MathForge trl-0.20.0/trl/trainer/grpo_trainer.py::
    _generate_and_score_completions`` L1721–1726 @ 83edda02.

    Args:
      rewards: [..., G] float rewards of one group per leading index, G ≥ 2.

    Returns:
      [..., G] advantages.
    """
    _need_group_axis(rewards, "mathforge/dgae")
    return _dgae(_centre(rewards))


def mathforge_dgpo(
    rewards, *, lengths=None, greedy=None, enable_dgpo_dqw: bool = True, dgpo_dqw_temp: float = 2.0
):
    """DGPO as the authors' scripts run it (``--enable_dgpo True --enable_dgpo_dqw True
    --dgpo_dqw_temp 2.0``): :func:`mathforge_dgae` times two batch factors,

        A = DGAE · ζ · w_p,
        ζ = (Σ_batch l) / (Σ_{non-degenerate groups} l)     (``zero_mask_ratio``; 1 if none),
        w_p = n·softmax_{p non-degenerate}(−r̄'_p / T)      (DQW; n = #non-degenerate groups),

    l the response lengths in tokens (equal lengths when not given: ζ = P/n), a group degenerate
    when torch.isclose(std₁, 0) (std ≤ 1e-8), r̄'_p the group's mean reward with an all-wrong
    mean (isclose(r̄, 0)) read as 1, T = ``dgpo_dqw_temp``; degenerate groups keep w = 1 (their
    A is 0).  Harder questions (lower r̄) get w > 1.  ζ undoes the share of the batch's tokens
    that degenerate groups hold in TRL's ``bnpo`` token mean (the recipes' default loss_type).
    Batch-scoped.  The third factor, ``global_balancing_ratio`` = processes · local tokens /
    global tokens, is 1 on one process and not modelled.
    Source: ``AMAP-ML/MathForge trl-0.20.0/trl/trainer/grpo_trainer.py::
    _generate_and_score_completions`` L1678–1744 @ 83edda02 (defaults: ``grpo_config.py``
    L581–593).

    Args:
      rewards: [..., P, G] float rewards, a batch of P groups per leading index, G ≥ 2.
      lengths: [..., P, G] response lengths in tokens (optional: equal lengths).
      enable_dgpo_dqw: the question weights w (static); False: w = 1.
      dgpo_dqw_temp: the softmax temperature T > 0 (static).

    Returns:
      [..., P, G] advantages.
    """
    _need_group_axis(rewards, "mathforge/dgpo", batch=True)
    if not dgpo_dqw_temp > 0:
        raise validate.ConfigError(
            f"mathforge/dgpo: dgpo_dqw_temp {dgpo_dqw_temp!r}; allowed: a number > 0"
        )
    centred = _centre(rewards)
    G = rewards.shape[-1]
    std = jnp.sqrt(jnp.sum(centred * centred, -1) / max(G - 1, 1))  # (..., P)
    live = std > _TINY  # ~is_std_zero
    n = jnp.sum(live, -1, keepdims=True).astype(rewards.dtype)  # (..., 1)
    any_live = n > 0
    if lengths is None:
        tokens = jnp.full(rewards.shape[:-1], float(G), rewards.dtype)  # (..., P)
    else:
        tokens = jnp.sum(_need(lengths, rewards, "mathforge/dgpo", "lengths", rewards.shape), -1)
    live_tokens = jnp.sum(jnp.where(live, tokens, 0.0), -1, keepdims=True)
    total = jnp.sum(tokens, -1, keepdims=True)
    zeta = jnp.where(any_live, total / jnp.where(any_live, live_tokens, 1.0), 1.0)
    adv = _dgae(centred) * zeta[..., None]
    if not enable_dgpo_dqw:
        return adv
    mean = jnp.mean(rewards, -1)
    mean = jnp.where(jnp.abs(mean) <= _TINY, 1.0, mean)  # all-wrong groups read as solved
    logit = jnp.where(live, -mean / dgpo_dqw_temp, -jnp.inf)
    top = jnp.max(logit, -1, keepdims=True)
    top = jnp.where(any_live, top, 0.0)  # the largest live logit (−inf when none is live)
    e = jnp.where(live, jnp.exp(logit - top), 0.0)
    w = jnp.where(live, n * e / jnp.maximum(jnp.sum(e, -1, keepdims=True), _TINY), 1.0)
    return adv * w[..., None]
