"""OpenRLHF's advantage estimators (``compute_advantages_and_returns``; see
:mod:`gpolab.estimators.frameworks`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from gpolab.estimators.frameworks._common import (
    _batch_sum,
    _centre,
    _flat,
    _need,
    _need_group_axis,
    _rloo,
    _scaled,
    _std1,
)


def openrlhf_group_norm(rewards, *, lengths=None, greedy=None):
    """OpenRLHF ``group_norm``: A = (r − r̄)/(s + 1e-9), s = torch.std (ddof 1), every token.

    Not whitened afterwards.  OpenRLHF asserts n_samples_per_prompt > 1 (G = 1 would be NaN from
    the ddof-1 std); ours returns 0 for G = 1.  All-equal: 0.
    Source: ``experience_maker.py::compute_advantages_and_returns`` (OpenRLHF v0.11.0).

    Args:
      rewards: [..., G] float rewards of one group per leading index, G ≥ 1.

    Returns:
      [..., G] advantages.
    """
    _need_group_axis(rewards, "openrlhf/group_norm")
    if rewards.shape[-1] == 1:
        return jnp.zeros_like(rewards)
    return _scaled(_centre(rewards), _std1(rewards) + 1e-9, _flat(rewards))


def openrlhf_rloo(rewards, *, lengths=None, greedy=None):
    """OpenRLHF ``rloo``: A = r − (Σr − r)/(G − 1); not whitened.

    G = 1 is asserted away by OpenRLHF (0/0 = NaN); ours returns 0.  All-equal: 0.
    Source: ``experience_maker.py::compute_advantages_and_returns`` (OpenRLHF v0.11.0).

    Args:
      rewards: [..., G] float rewards of one group per leading index, G ≥ 1.

    Returns:
      [..., G] advantages.
    """
    return _rloo(rewards, "openrlhf/rloo", jnp.zeros_like)


def openrlhf_reinforce_baseline(rewards, *, lengths=None, greedy=None, no_std_norm: bool = False):
    """OpenRLHF ``reinforce_baseline``: a = r − r̄ per group, cumulative return (γ = 1, reward on
    the last token) so every token carries a, then whitened over all action tokens of the batch:

        m = Σ l·a/N,  v = Σ l·(a − m)²/N (biased),  A = (a − m)·rsqrt(max(v, 1e-8)),  N = Σ l.

    ``no_std_norm=True`` (CLI ``--algo.advantage.no_std_norm``): A = a − m.  Batch-scoped and
    length-dependent: an all-equal group gets −m·rsqrt(...), not 0.  G = 1 asserted away by
    OpenRLHF; ours: a = 0.  KL-in-reward and reward clipping are outside this function.
    Source: ``experience_maker.py::compute_advantages_and_returns`` (OpenRLHF v0.11.0).

    Args:
      rewards: [..., P, G] float rewards, a batch of P groups per leading index, G ≥ 1.
      lengths: [..., P, G] response lengths in tokens (cast to the rewards' dtype).
      no_std_norm: skip the division (static).

    Returns:
      [..., P, G] advantages.
    """
    name = "openrlhf/reinforce_baseline"
    _need_group_axis(rewards, name, batch=True)
    lengths = _need(lengths, rewards, name, "lengths", rewards.shape)
    a = _centre(rewards)
    n = _batch_sum(lengths)
    m = _batch_sum(lengths * a) / n
    if no_std_norm:
        return a - m
    var = _batch_sum(lengths * (a - m) ** 2) / n
    return (a - m) * jax.lax.rsqrt(jnp.maximum(var, 1e-8))


def openrlhf_dr_grpo(rewards, *, lengths=None, greedy=None):
    """OpenRLHF ``dr_grpo``: A = r − r̄; not whitened (only gae/reinforce/reinforce_baseline are).

    G = 1 asserted away by OpenRLHF; ours gives 0 (r − r).  All-equal: 0.
    Source: ``experience_maker.py::compute_advantages_and_returns`` (OpenRLHF v0.11.0).

    Args:
      rewards: [..., G] float rewards of one group per leading index, G ≥ 1.

    Returns:
      [..., G] advantages.
    """
    _need_group_axis(rewards, "openrlhf/dr_grpo")
    return _centre(rewards)
