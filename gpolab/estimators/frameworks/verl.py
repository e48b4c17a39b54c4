"""verl's advantage estimators (``verl/trainer/ppo/core_algos.py``; see
:mod:`gpolab.estimators.frameworks` for the versions read and the floating-point policy)."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from gpolab import validate
from gpolab.estimators.frameworks._common import (
    _batch_sum,
    _centre,
    _flat,
    _mean,
    _need,
    _need_group_axis,
    _rloo,
    _scaled,
    _std1,
    _var1,
)


def verl_grpo(
    rewards, *, lengths=None, greedy=None, epsilon: float = 1e-6, norm_adv_by_std_in_grpo=True
):
    """verl ``grpo``: A = (r − r̄)/(s + epsilon), s = torch.std (ddof 1) of the group.

    ``norm_adv_by_std_in_grpo=False``: A = r − r̄ (Dr. GRPO).  Per-group dict loop over ``uid``.
    Singleton group (G = 1): verl sets mean 0, std 1, so A = r/(1 + epsilon) (or r unnormalised;
    verl's std is a float32 ``torch.tensor(1.0)``, so its float64 value is r/1.00000095, 5e-8
    relative from ours).  All-equal group: 0.
    Source: ``compute_grpo_outcome_advantage`` (verl 0.9.1 and b178a3cd).

    Args:
      rewards: [..., G] float rewards of one group per leading index, G ≥ 1.
      epsilon: verl's epsilon (a static Python value).
      norm_adv_by_std_in_grpo: verl's option (a static Python value).

    Returns:
      [..., G] advantages.
    """
    return _verl_grpo(rewards, "verl/grpo", epsilon, norm_adv_by_std_in_grpo, 0.0)


def _verl_grpo(rewards, name: str, epsilon: float, norm: bool, floor: float) -> jax.Array:
    """The body both grpo variants share: A = (r − r̄)/(√max(var₁, floor) + epsilon) (r − r̄
    without ``norm``); singleton r/(1 + epsilon) (r without ``norm``); all-equal 0.  var₁ ≥ 0,
    so ``floor`` 0 is exactly √var₁, the torch.std of ``verl/grpo``."""
    _need_group_axis(rewards, name)
    if rewards.shape[-1] == 1:
        return rewards / (1.0 + epsilon) if norm else rewards
    centred = _centre(rewards)
    if not norm:
        return centred
    sigma = jnp.sqrt(jnp.maximum(_var1(rewards), floor))
    return _scaled(centred, sigma + epsilon, _flat(rewards))


def verl_grpo_vectorized(
    rewards, *, lengths=None, greedy=None, epsilon: float = 1e-6, norm_adv_by_std_in_grpo=True
):
    """verl ``grpo_vectorized``: A = (r − r̄)/(σ + epsilon), σ = √var₁ (two-pass, ddof 1).

    As verl ships it (0.9.1 and 1dda039b9c63): ``group_mean_std(eps=0.0)`` centres the scores
    before squaring and floors the variance at 0, so the value is ``verl/grpo``'s (verl computes
    these statistics in float32 whatever the input dtype).  Singleton: mean 0, std 1 ⇒
    r/(1 + epsilon).  All-equal: 0.
    NB: verl's trainer (``ray_trainer.compute_advantage``) passes only ``config`` to this
    estimator, so ``algorithm.norm_adv_by_std_in_grpo`` does not reach it there and it always
    normalises; the function's own keyword (kept here) defaults to True.
    Before (b178a3cd, v0.7.0-125, which gpolab followed until 2026-12-07): the variance was
    floored at ``epsilon`` (σ ≥ 10⁻³) and divided by σ + epsilon, which shrank low-variance
    groups' advantages (verl PR#6348: rewards 1.0 and 1.00001 gave ±0.0050 where ``grpo`` gives
    ±0.62); ``tests/estimators/test_verl_reference.py`` keeps that version's outputs.
    Source: ``compute_grpo_vectorized_outcome_advantage`` + ``verl/utils/groupwise.py::
    group_mean_std`` (verl 1dda039b9c63; 0.9.1's outputs compared).

    Args and returns: as :func:`verl_grpo`.
    """
    return _verl_grpo(rewards, "verl/grpo_vectorized", epsilon, norm_adv_by_std_in_grpo, 0.0)


def verl_rloo(rewards, *, lengths=None, greedy=None):
    """verl ``rloo`` (dict loop): A = G/(G − 1)·(r − r̄) = r − mean_{j≠i} r_j for G ≥ 2.

    Singleton group: the loop leaves the score untouched, A = r (``verl/rloo_vectorized`` gives
    0 there).  All-equal: 0.  Source: ``compute_rloo_outcome_advantage`` (verl 0.9.1 and b178a3cd).

    Args:
      rewards: [..., G] float rewards of one group per leading index, G ≥ 1.

    Returns:
      [..., G] advantages.
    """
    return _rloo(rewards, "verl/rloo", lambda r: r)


def verl_rloo_vectorized(rewards, *, lengths=None, greedy=None):
    """verl ``rloo_vectorized``: A = (G·r − Σr)/max(G − 1, 1)·[G > 1].

    Equal to ``verl/rloo`` for G ≥ 2; singleton groups get 0 (the loop version returns r).
    Source: ``compute_rloo_vectorized_outcome_advantage`` (verl 0.9.1 and b178a3cd).

    Args:
      rewards: [..., G] float rewards of one group per leading index, G ≥ 1.

    Returns:
      [..., G] advantages.
    """
    return _rloo(rewards, "verl/rloo_vectorized", jnp.zeros_like)


def _verl_masked_whiten(a: jax.Array, lengths: jax.Array) -> jax.Array:
    """verl ``masked_whiten(values, mask)`` of a per-response value repeated ``lengths`` times.

    mean = Σ l·a/(N + 1e-8), var = Σ l·(a − mean)²/(N + 1e-8) · N/(N − 1), N = Σ l (masked_mean
    adds 1e-8 to the count; masked_var is unbiased), out = (a − mean)·rsqrt(var + 1e-8).
    verl raises for N ≤ 1; here the Bessel factor is 1 then (finite).
    """
    n = _batch_sum(lengths)
    mean = _batch_sum(lengths * a) / (n + 1e-8)
    var = _batch_sum(lengths * (a - mean) ** 2) / (n + 1e-8)
    var = var * jnp.where(n > 1, n / jnp.where(n > 1, n - 1, 1.0), 1.0)
    return (a - mean) * jax.lax.rsqrt(var + 1e-8)


def verl_reinforce_plus_plus_baseline(rewards, *, lengths=None, greedy=None):
    """verl ``reinforce_plus_plus_baseline``: a = r − r̄ per group, broadcast over the response's
    tokens, then ``masked_whiten`` over every response token of the batch (token-weighted):

        m = Σ l·a/(N + 1e-8),  v = Σ l·(a − m)²/(N + 1e-8)·N/(N − 1),  A = (a − m)/√(v + 1e-8),

    N = Σ l over the batch (unbiased token variance, eps 1e-8 inside the rsqrt, shift_mean=True).
    Batch-scoped and length-dependent: an all-equal group gets −m/√(v + 1e-8), not 0; an
    all-equal batch gets 0.  Singleton group: mean 0, so a = r.  verl raises when the batch has
    a single token (N = 1); ours is finite.  ``epsilon`` in verl's signature is unused.
    Source: ``compute_reinforce_plus_plus_baseline_outcome_advantage`` + ``verl/utils/
    torch_functional.py::masked_whiten/masked_var/masked_mean`` (verl 0.9.1 and b178a3cd).

    Args:
      rewards: [..., P, G] float rewards, a batch of P groups per leading index, G ≥ 1.
      lengths: [..., P, G] response lengths in tokens (cast to the rewards' dtype).

    Returns:
      [..., P, G] advantages.
    """
    name = "verl/reinforce_plus_plus_baseline"
    _need_group_axis(rewards, name, batch=True)
    lengths = _need(lengths, rewards, name, "lengths", rewards.shape)
    a = rewards if rewards.shape[-1] == 1 else _centre(rewards)
    return _verl_masked_whiten(a, lengths)


def verl_opo(rewards, *, lengths=None, greedy=None):
    """verl ``opo``: A = r − b with the length-weighted group baseline b = Σ_j l_j r_j / Σ_j l_j
    (self included; l = response_mask.sum(-1)).

    Singleton group: b = 0, A = r.  All-equal group: 0.  A group whose lengths sum to 0 is 0/0
    in verl; ours falls back to the plain mean there.  Source: ``compute_opo_outcome_advantage``
    (verl 0.9.1 and b178a3cd).

    Args:
      rewards: [..., G] float rewards of one group per leading index, G ≥ 1.
      lengths: [..., G] response lengths in tokens (cast to the rewards' dtype).

    Returns:
      [..., G] advantages.
    """
    _need_group_axis(rewards, "verl/opo")
    lengths = _need(lengths, rewards, "verl/opo", "lengths", rewards.shape)
    if rewards.shape[-1] == 1:
        return rewards
    total = jnp.sum(lengths, -1, keepdims=True)
    weighted = jnp.sum(lengths * rewards, -1, keepdims=True) / jnp.where(total > 0, total, 1.0)
    b = jnp.where(total > 0, weighted, _mean(rewards))
    return jnp.where(_flat(rewards), 0.0, rewards - b)


def verl_gpg(rewards, *, lengths=None, greedy=None, f_norm: float = 1.0):
    """verl ``gpg``: A = α·(r − r̄)/f_norm with α = B / max(#{r ≠ 0 in the batch}, 1),
    B = P·G the batch's response count (``alpha = bsz / count_nonzero(scores).clamp(min=1)``).

    Batch-scoped through α (it counts non-zero *rewards*, not non-degenerate groups; verl's α is
    float32 whatever the rewards' dtype, ours is the rewards' dtype).  The
    ``alpha`` keyword of verl's function is overwritten, so it is not an option; ``f_norm``
    (default 1.0) is.  Singleton: mean 0, A = α r/f_norm.  All-equal group: 0.
    Source: ``compute_gpg_outcome_advantage`` (verl 0.9.1 and b178a3cd).

    Args:
      rewards: [..., P, G] float rewards, a batch of P groups per leading index, G ≥ 1.
      f_norm: verl's divisor (static).

    Returns:
      [..., P, G] advantages.
    """
    _need_group_axis(rewards, "verl/gpg", batch=True)
    B = rewards.shape[-2] * rewards.shape[-1]
    m = _batch_sum((rewards != 0).astype(rewards.dtype))
    alpha = B / jnp.maximum(m, 1.0)
    centred = rewards if rewards.shape[-1] == 1 else _centre(rewards)
    return alpha * centred / f_norm


def verl_grpo_passk(
    rewards, *, lengths=None, greedy=None, epsilon: float = 1e-6, norm_adv_by_std_in_grpo=True
):
    """verl ``grpo_passk`` (arXiv 2503.19595): only the group's best response is credited,

        A_{argmax} = (r_max − r_2nd)/(s + epsilon),  every other A = 0,

    s = torch.std (ddof 1) of the group; ``norm_adv_by_std_in_grpo=False`` drops the division
    (verl reads it from ``config``).  Ties at the top give r_max − r_2nd = 0, so which index
    torch.topk picks does not matter.  All-equal: 0.  G < 2 raises (as verl does).
    Source: ``compute_grpo_passk_outcome_advantage`` (verl 0.9.1 and b178a3cd).

    Args:
      rewards: [..., G] float rewards of one group per leading index, G ≥ 2.
      epsilon: verl's epsilon (a static Python value).
      norm_adv_by_std_in_grpo: verl's option (a static Python value).

    Returns:
      [..., G] advantages. One non-zero entry per group at most.
    """
    _need_group_axis(rewards, "verl/grpo_passk")
    G = rewards.shape[-1]
    if G < 2:
        raise validate.ConfigError(
            f"verl/grpo_passk: Pass@k requires at least 2 samples per group, got {G}"
        )
    top, idx = jax.lax.top_k(rewards, 2)
    adv = top[..., :1] - top[..., 1:]
    if norm_adv_by_std_in_grpo:
        adv = _scaled(adv, _std1(rewards) + epsilon, adv == 0)
    return jax.nn.one_hot(idx[..., 0], G, dtype=rewards.dtype) * adv


def verl_remax(rewards, *, lengths=None, greedy=None):
    """verl ``remax``: A = r − r_greedy(x), the greedy response's reward as baseline.

    Token-level: returns are the reverse cumulative sum of the token rewards (the outcome reward
    sits on the last token, so every token's return is r) minus ``reward_baselines``.
    Source: ``compute_remax_outcome_advantage`` (verl 0.9.1 and b178a3cd).

    Args:
      rewards: [..., G] float rewards of one group per leading index, G ≥ 1.
      greedy: [...] the greedy response's reward of each group.

    Returns:
      [..., G] advantages.
    """
    _need_group_axis(rewards, "verl/remax")
    greedy = _need(greedy, rewards, "verl/remax", "greedy", rewards.shape[:-1])
    return rewards - greedy[..., None]


def verl_optimal_token_baseline(
    rewards, mask, energy, *, handle_zero_tail: bool = True, epsilon: float = 1e-8
) -> jax.Array:
    """verl ``optimal_token_baseline`` (OTB, arXiv 2602.07078): one baseline per token position.

    Per group and position t, B_t = Σ_i G_t W_t m_t / (Σ_i W_t m_t + epsilon) over the group's
    responses i, **the response itself included**, with W_t = Σ_{j ≤ t} w_j m_j the cumulative
    "realized energy" and w_j = 1 − 2π_j + Σ_a π_j(a)² (the squared norm of ∂ log π(y_j)/∂logits,
    computed by the caller from the sampling policy's probabilities); A_t = (G_t − B_t) m_t.  G_t
    is the reward-to-go: with the outcome reward on each response's last token (verl's reward
    managers) it is R on every live token.  ``handle_zero_tail`` (verl's default True): where one
    response is strictly the longest, its baseline is 0 from the second-longest length on (there
    B_t would be its own return).  G = 1: no baseline, A_t = R m_t.  Not modelled: the
    ``rollout_is_weights`` option (w × ρ̄², off-policy; gpolab measures OTB on-policy).
    Source: volcengine/verl ``verl/trainer/ppo/core_algos.py::
    compute_optimal_token_baseline_advantage`` @ 1dda039b9c63 (``tests/estimators/
    test_verl_otb.py`` runs that function's own code on the same inputs where torch is installed
    and otherwise compares with its outputs stored there).

    Args:
      rewards: [..., G] outcome rewards.
      mask: [..., G, T] 1 on each response's live tokens (a prefix), 0 on padding.
      energy: [..., G, T] per-token w_t = 1 − 2π_t + Σπ².
      handle_zero_tail: verl's option of the same name.
      epsilon: verl's ``epsilon`` (added to the denominator).

    Returns:
      [..., G, T] per-token advantages.
    """
    chex.assert_equal_shape([mask, energy])
    chex.assert_equal_shape_prefix([rewards, mask], rewards.ndim)
    returns = rewards[..., None] * mask
    if rewards.shape[-1] == 1:
        return returns
    W = jnp.cumsum(energy * mask, axis=-1)
    num = jnp.sum(returns * W * mask, axis=-2, keepdims=True)
    baseline = num / (jnp.sum(W * mask, axis=-2, keepdims=True) + epsilon)
    baseline = jnp.broadcast_to(baseline, mask.shape)
    if handle_zero_tail:
        L = jnp.sum(mask, axis=-1)  # [..., G]
        top = jnp.max(L, axis=-1, keepdims=True)
        second = jnp.sort(L, axis=-1)[..., -2:-1]
        unique = (jnp.sum(L == top, -1, keepdims=True) == 1) & (top > second)
        lead = (1,) * (L.ndim - 1)
        longest = jnp.arange(L.shape[-1]).reshape(lead + (-1,)) == jnp.argmax(L, -1)[..., None]
        t = jnp.arange(mask.shape[-1]).reshape(lead + (1, -1))
        tail = (unique & longest)[..., None] & (t >= second[..., None])
        baseline = jnp.where(tail, 0.0, baseline)
    return (returns - baseline) * mask
