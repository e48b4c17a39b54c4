"""Estimators whose baseline or scale reaches across prompts: AReaL's LitePPO, JSPO's
James-Stein baselines, SPO's tracked value (see :mod:`gpolab.estimators.frameworks`)."""

from __future__ import annotations

import jax.numpy as jnp

from gpolab import validate
from gpolab.estimators.frameworks._common import _batch_sum, _centre, _need, _need_group_axis


def areal_liteppo(rewards, *, lengths=None, greedy=None):
    """AReaL LitePPO reward normalization (arXiv 2508.08221's group-level mean, batch-level std):

        A = (r − r̄_group) / (√(Σ_batch (r − r̄_group)² / (N − 1)) + eps),   N = P·G,

    the std over the whole batch of the *group-centred* rewards (AReaL's ``_compute_std`` centres
    on the mean it is given: here the group mean; ``std_unbiased=True``: N − 1), eps 1e-5
    (AReaL's ``NormConfig`` default; fixed here: an option named ``eps`` would take the labs'
    shared grpo ``eps``).
    Not TRL's ``scale_rewards="batch"``, whose std is of the raw rewards around the batch mean.
    All-equal groups give 0; an all-equal batch gives 0.  Batch-scoped.  AReaL applies it to
    per-response rewards (after its reward bias/scaling/clipping, here identity); its second,
    token-weighted ``adv_norm`` pass of the example config is not modelled.
    Source: ``inclusionAI/AReaL areal/utils/data.py::Normalization`` (mean_level="group",
    std_level="batch") and ``examples/math/gsm8k_liteppo.yaml`` @ 4aef98d8.

    Args:
      rewards: [..., P, G] float rewards, a batch of P groups per leading index, G ≥ 1.

    Returns:
      [..., P, G] advantages.
    """
    _need_group_axis(rewards, "areal/liteppo", batch=True)
    centred = _centre(rewards)
    n = rewards.shape[-2] * rewards.shape[-1]
    if n == 1:
        return centred
    s = jnp.sqrt(_batch_sum(centred * centred) / (n - 1))
    return centred / (s + 1e-5)


def _jspo(rewards, name: str, epsilon: float, own_out: bool):
    """The James–Stein baseline of JSPO (see :func:`jspo`); ``own_out``: λ and the batch mean
    from the other prompts only."""
    _need_group_axis(rewards, name, batch=True)
    P, m = rewards.shape[-2], rewards.shape[-1]
    if m < 2:
        raise validate.ConfigError(f"{name}: G = {m}; allowed G >= 2 (a leave-one-out mean)")
    centred = _centre(rewards)
    loo = rewards - m / (m - 1) * centred  # the RLOO mean, exactly r on an all-equal group
    mu = jnp.mean(rewards, -1)  # (..., P) prompt means
    var = jnp.sum(centred * centred, -1) / (m - 1) / m  # unbiased variance / m
    if own_out and P > 1:
        b = (jnp.sum(mu, -1, keepdims=True) - mu) / (P - 1)
        v2 = (jnp.sum(var, -1, keepdims=True) - var) / (P - 1)
        s2 = (jnp.sum(mu * mu, -1, keepdims=True) - mu * mu) / (P - 1) - b * b
        s2 = jnp.maximum(s2, 0.0)
    elif own_out:  # one prompt: no other prompt to shrink toward
        return rewards - loo
    else:
        b = jnp.mean(mu, -1, keepdims=True)
        v2 = jnp.mean(var, -1, keepdims=True)
        s2 = jnp.mean((mu - b) ** 2, -1, keepdims=True)
    lam = (v2 / (v2 + s2 + epsilon))[..., None]
    flat = jnp.max(rewards, (-2, -1), keepdims=True) == jnp.min(rewards, (-2, -1), keepdims=True)
    toward = jnp.where(flat, 0.0, rewards - jnp.broadcast_to(b[..., None], rewards.shape))
    return (1 - lam) * (rewards - loo) + lam * toward


def jspo(rewards, *, lengths=None, greedy=None, epsilon: float = 1e-6):
    """JSPO (James–Stein baseline; the authors' code for "Variance-Reduced RL for Large Reasoning
    Models via James-Stein Baselines", matched to arXiv 2511.03710 by title and authors):

        A = r − [(1 − λ) · mean_{k≠g} r_k + λ · b],   λ = v²/(v² + s² + ε),

    v² the mean over prompts of (unbiased within-group variance)/G, s² the (ddof 0) variance of
    the prompt means around b, the mean of the prompt means; here λ, b, v² and s² of a prompt are
    computed from the *other* prompts only (``compute_jspo_outcome_advantage``).  One prompt: loo.
    No std division.  An all-equal group in a varied batch gets λ(r − b), not 0.  Batch-scoped.
    Source: ``guanning03/JSPO-Official code/verl/trainer/ppo/core_algos.py::
    compute_jspo_outcome_advantage`` @ 3f8539de.

    Args:
      rewards: [..., P, G] float rewards, a batch of P groups per leading index, G ≥ 2.
      epsilon: the constant in λ's denominator (static).

    Returns:
      [..., P, G] advantages.
    """
    return _jspo(rewards, "jspo/jspo", epsilon, own_out=True)


def jspo_plus_plus(rewards, *, lengths=None, greedy=None, epsilon: float = 1e-6):
    """JSPO++: :func:`jspo` with one λ and b for the whole batch (every prompt included;
    ``compute_jspo_plus_plus_outcome_advantage``, its EMA smoothing off: ``js_smooth_coef`` 0, the
    function's and the config's default; the authors' ``code/run_math.sh`` sets 0.99, which
    smooths λ and b over training steps: state across steps, not modelled).
    Source: ``guanning03/JSPO-Official code/verl/trainer/ppo/core_algos.py::
    compute_jspo_plus_plus_outcome_advantage`` @ 3f8539de.

    Args and returns: as :func:`jspo`.
    """
    return _jspo(rewards, "jspo/jspo_plus_plus", epsilon, own_out=False)


def spo(rewards, *, baseline, lengths=None, greedy=None):
    """SPO (Single-stream Policy Optimization, arXiv 2509.13232): a per-prompt value tracker v̂(x)
    replaces the group baseline, then the batch is z-scored:

        a = r − v̂(x),   A = (a − mean_batch a) / (std_batch a + 1e-8)   (torch.std: ddof 1).

    ``baseline`` is v̂(x), shape (P,): in SPO the tracker's α/(α + β), updated after each step as
    α ← ρα + r, β ← ρβ + (1 − r) with ρ = clip(2^(−D/0.06), ·, 0.96) from the prompt's KL; in the
    labs it is the exact V(x) (the tracker's ideal) unless given.  The tracker and SPO's
    prioritized prompt sampling (∝ √(v̂(1 − v̂)) + 0.05) are not modelled.  A batch of one
    response: 0.  Batch-scoped.
    Source: ``verl-project/verl-recipe spo/spo_ray_trainer.py::RayPPOTrainer.fit`` @ 550d42f5.

    Args:
      rewards: [..., P, G] float rewards, a batch of P groups per leading index, G ≥ 1.
      baseline: [..., P] the tracker's value v̂(x) of each prompt.

    Returns:
      [..., P, G] advantages.
    """
    _need_group_axis(rewards, "spo/spo", batch=True)
    v = _need(baseline, rewards, "spo/spo", "baseline", rewards.shape[:-1])
    a = rewards - v[..., None]
    n = rewards.shape[-2] * rewards.shape[-1]
    if n == 1:
        return jnp.zeros_like(rewards)
    d = a - _batch_sum(a) / n
    flat = jnp.max(a, (-2, -1), keepdims=True) == jnp.min(a, (-2, -1), keepdims=True)
    d = jnp.where(flat, 0.0, d)
    return d / (jnp.sqrt(_batch_sum(d * d) / (n - 1)) + 1e-8)
