"""NeMo-RL's GRPO advantage (see :mod:`gpolab.estimators.frameworks`)."""

from __future__ import annotations

import jax.numpy as jnp

from gpolab.estimators.frameworks._common import _flat, _mean, _need_group_axis, _std1


def nemo_grpo(
    rewards,
    *,
    lengths=None,
    greedy=None,
    normalize_rewards: bool = True,
    use_leave_one_out_baseline: bool = True,
):
    """NeMo-RL ``GRPOAdvantageEstimator``: A_i = (r_i − b_i)/(s_i + 1e-6) where s_i > 0, and
    A_i = r_i − b_i where s_i = 0 ("don't sharpen the ones with no variation").

    Leave-one-out (default): b_i = mean_{j≠i} r_j and s_i = the ddof-1 std of the G − 1 others,
    from NeMo's one-pass √((E₋ᵢ[r²] − b_i²)·n/(n − 1)), n = G − 1, ``nan_to_num(0)`` — so G = 2
    has s = 0 (unnormalised r_i − r_j).  ``use_leave_one_out_baseline=False``: b = r̄, s = group
    std (ddof 1).  ``normalize_rewards=False``: A = r − b.  G = 1: baseline = reward, A = 0.
    A lone success among equal failures keeps A = 1 − b (its others have s = 0).
    Here s_i is two-pass and exactly 0 when the others are all equal (NeMo's one-pass formula can
    leave rounding noise there for non-binary rewards, which 1/(s + 1e-6) then amplifies).
    Source: ``nemo_rl/algorithms/utils.py::calculate_baseline_and_std_per_prompt`` +
    ``nemo_rl/algorithms/advantage_estimator.py::GRPOAdvantageEstimator`` (NeMo-RL 7ea279ab).

    Args:
      rewards: [..., G] float rewards of one group per leading index, G ≥ 1.
      normalize_rewards: NeMo-RL's option (static).
      use_leave_one_out_baseline: NeMo-RL's option (static).

    Returns:
      [..., G] advantages.
    """
    _need_group_axis(rewards, "nemo/grpo")
    G = rewards.shape[-1]
    if G == 1:
        return jnp.zeros_like(rewards)
    if use_leave_one_out_baseline:
        b, s = _loo_mean_std(rewards)
    else:
        b = jnp.broadcast_to(_mean(rewards), rewards.shape)
        s = jnp.where(_flat(rewards), 0.0, _std1(rewards))
    adv = jnp.where(_flat(rewards), 0.0, rewards - b)
    if not normalize_rewards:
        return adv
    return jnp.where(s > 0, adv / (s + 1e-6), adv)


def _loo_mean_std(rewards):
    """Per response the mean and the ddof-1 std of the G − 1 others (two-pass; exactly the
    common value and 0 when the others are all equal)."""
    G = rewards.shape[-1]
    b = (jnp.sum(rewards, -1, keepdims=True) - rewards) / (G - 1)
    r_ij = rewards[..., None, :]
    others = jnp.broadcast_to(~jnp.eye(G, dtype=bool), (*rewards.shape, G))  # [.., i, j≠i]
    dev = jnp.where(others, r_ij - b[..., :, None], 0.0)
    n = G - 1
    s = jnp.sqrt(jnp.sum(dev * dev, -1) / (n - 1)) if n > 1 else jnp.zeros_like(rewards)
    hi = jnp.max(jnp.where(others, r_ij, -jnp.inf), -1)
    lo = jnp.min(jnp.where(others, r_ij, jnp.inf), -1)
    s = jnp.where(hi == lo, 0.0, s)
    b = jnp.where(hi == lo, hi, b)  # exact mean of equal values
    return b, s
