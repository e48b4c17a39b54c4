"""TRL's advantage estimators (``GRPOTrainer``, ``RLOOTrainer``; see
:mod:`gpolab.estimators.frameworks`)."""

from __future__ import annotations

import jax.numpy as jnp

from gpolab import validate
from gpolab.estimators.frameworks._common import (
    _batch_sum,
    _centre,
    _flat,
    _need_group_axis,
    _scaled,
    _std1,
)


def trl_grpo(rewards, *, lengths=None, greedy=None, scale_rewards="group"):
    """TRL ``GRPOTrainer``: A = (r − r̄)/(s + 1e-4), r̄ the group mean and

    ``scale_rewards="group"`` (default; also ``True``): s = nanstd of the group (ddof 1);
    ``"batch"``: s = nanstd of all P·G rewards (ddof 1), mean still per group;
    ``"none"`` (also ``False``): A = r − r̄.  eps 1e-4 is hard-coded.  G = 1: s = 0 and A = 0
    (TRL's ``num_generations == 1`` branch); a batch of one reward has s = 0.  All-equal group: 0.
    (``multi_objective_aggregation="sum_then_normalize"``, the default, single reward.)
    Source: ``trl/trainer/grpo_trainer.py::_generate_and_score_completions`` (TRL f2cd5771).

    Args:
      rewards: [..., G] float rewards of one group per leading index ([..., P, G], the batch, for
        ``scale_rewards="batch"``), G ≥ 1.
      scale_rewards: ``group``/``True``, ``batch`` or ``none``/``False`` (static).

    Returns:
      [..., G] advantages.
    """
    scale = {True: "group", False: "none"}.get(scale_rewards, scale_rewards)
    if scale not in ("group", "batch", "none"):
        raise validate.ConfigError(
            f"trl/grpo: scale_rewards {scale_rewards!r}; allowed group, batch, none"
        )
    _need_group_axis(rewards, "trl/grpo", batch=scale == "batch")
    centred = _centre(rewards)
    if scale == "none":
        return centred
    if scale == "group":
        if rewards.shape[-1] == 1:
            return jnp.zeros_like(rewards)
        return _scaled(centred, _std1(rewards) + 1e-4, _flat(rewards))
    n = rewards.shape[-2] * rewards.shape[-1]
    if n == 1:
        return centred / 1e-4
    d = rewards - _batch_sum(rewards) / n
    s = jnp.sqrt(_batch_sum(d * d) / (n - 1))
    return centred / (s + 1e-4)


def trl_rloo(rewards, *, lengths=None, greedy=None, normalize_advantages: bool = False):
    """TRL ``RLOOTrainer``: A = r − mean_{j≠i} r_j = r − (Σr − r)/(G − 1).

    ``normalize_advantages=True``: then A ← (A − mean_batch A)/(nanstd_batch A + 1e-4) over all
    P·G advantages (ddof 1).  G = 1: A = 0 (TRL's branch).  A batch of one advantage gives NaN in
    TRL (ddof 1), which its ``nan_to_num`` turns into 0; ours is 0.  Rewards are taken as given:
    TRL subtracts ``beta``·KL (default beta 0.05) and applies ``reward_clip_range`` before this.
    Source: ``trl/trainer/rloo_trainer.py::_generate_and_score_completions`` (TRL f2cd5771).

    Args:
      rewards: [..., G] float rewards of one group per leading index ([..., P, G] for
        ``normalize_advantages=True``), G ≥ 1.
      normalize_advantages: whiten over the batch (static).

    Returns:
      [..., G] advantages.
    """
    _need_group_axis(rewards, "trl/rloo", batch=normalize_advantages)
    G = rewards.shape[-1]
    adv = jnp.zeros_like(rewards) if G == 1 else _centre(rewards) * (G / (G - 1))
    if not normalize_advantages:
        return adv
    n = rewards.shape[-2] * G
    if n == 1:
        return jnp.zeros_like(adv)
    d = adv - _batch_sum(adv) / n
    return d / (jnp.sqrt(_batch_sum(d * d) / (n - 1)) + 1e-4)
