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


def trl_high_entropy_mask(entropies, mask, top_entropy_quantile: float = 1.0):
    """TRL's ``top_entropy_quantile`` token mask (``GRPOTrainer.get_high_entropy_mask``, TRL
    1.16.0; the ρ of "Beyond the 80/20 Rule", arXiv 2506.01939): the threshold is the
    (1 − ρ)-quantile (``torch.quantile``, linear interpolation) of the entropies of every live
    token of the batch passed in (TRL: one micro-batch, gathered over processes), and a token is
    kept where its entropy is at least that threshold and it is live.  ρ = 1 (TRL's default)
    skips the mask; a batch with no live token keeps none.

    Args:
      entropies: [..., T] per-token entropies of the policy.
      mask: [..., T] 1 on live tokens.
      top_entropy_quantile: ρ in [0, 1].

    Returns:
      [..., T] float mask (1 kept, 0 dropped).
    """
    validate.real("top_entropy_quantile", top_entropy_quantile, low=0.0, high=1.0)
    live = mask > 0
    if top_entropy_quantile >= 1.0:
        return live.astype(entropies.dtype)
    threshold = jnp.nanquantile(jnp.where(live, entropies, jnp.nan), 1.0 - top_entropy_quantile)
    keep = live & (entropies * mask >= threshold)
    return jnp.where(jnp.any(live), keep, False).astype(entropies.dtype)
