"""Advantage estimators as the RL frameworks practitioners run compute them, semantics matched.

One pure, jit-traceable function per (framework, estimator), signature

    fn(rewards, *, lengths=None, greedy=None, **options) -> advantages

``rewards`` is ``(P, G)``: P prompts (the batch) times G responses each; group-scoped estimators
also take any leading shape ``(..., G)``, batch-scoped ones reduce over the last two axes, so
leading axes are independent batches.  ``lengths`` ``(P, G)`` are response lengths in tokens,
``greedy`` ``(P,)`` the reward of each prompt's greedy response.  Options carry the framework's
own names and defaults and must be static Python values under ``jax.jit``.  The result is
``(P, G)``: per response the advantage every one of its tokens gets (the frameworks broadcast a
scalar over the response mask; for token-whitened schemes the value is still one per response).
A function's ``Args:`` leave out the inputs it does not read (``lengths``, ``greedy``).

Sources read (the ``source`` of each :data:`SPECS` entry names file and function):

* verl 0.9.1 (the PyPI release) and ``b178a3cd`` (v0.7.0-125): ``verl/trainer/ppo/core_algos.py``,
  ``verl/utils/torch_functional.py::masked_whiten``, ``verl/utils/groupwise.py::group_mean_std``,
  ``verl/trainer/ppo/ray_trainer.py::compute_advantage`` (what the trainer passes).  Checked by
  running verl's own functions, both versions, on the same batches as these (G = 1, 2, 3, 4, 5,
  8; binary, graded and normal rewards; all-equal and tiny-variance groups; float32 and
  float64): ``tests/estimators/test_verl_reference.py`` holds 0.9.1's outputs and redoes the
  comparison when verl is installed.  Every verl entry equals both versions up to the float32
  rounding inside verl, except ``verl/grpo_vectorized``: it follows b178a3cd, and 0.9.1 differs
  on groups whose variance is below ``epsilon`` (see that function).
* TRL ``f2cd5771`` (v1.9.0-26): ``trl/trainer/grpo_trainer.py::_generate_and_score_completions``,
  ``trl/trainer/rloo_trainer.py`` (same method), ``trl/trainer/utils.py::nanstd``.
* OpenRLHF ``3c3be623`` (v0.11.0): ``openrlhf/trainer/ppo_utils/experience_maker.py::
  compute_advantages_and_returns``, ``openrlhf/cli/train_ppo_ray.py`` (asserts G > 1).
* NeMo-RL ``7ea279ab`` (v0.1.0-1338): ``nemo_rl/algorithms/utils.py::
  calculate_baseline_and_std_per_prompt``, ``nemo_rl/algorithms/advantage_estimator.py::
  GRPOAdvantageEstimator.compute_advantage``.
* Pass@k training (arXiv 2508.10751): the authors' ``RUCAIBox/Passk_Training``
  ``code/passk_adv.py::calc_adv`` @ ``00474d78`` and its README formulas.

Floating-point policy (gpolab's): where a framework's value is exactly 0 in real arithmetic on an
all-equal group (or an all-equal leave-one-out set), ours is exactly 0; the frameworks can return
rounding noise there (e.g. torch.mean of three 0.1s), which for std-normalised schemes is then
amplified by 1/eps.  Where a framework returns NaN, ours is finite and the docstring says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import chex
import jax
import jax.numpy as jnp

from gpolab import validate

__all__ = [
    "Spec",
    "SPECS",
    "verl_grpo",
    "verl_grpo_vectorized",
    "verl_rloo",
    "verl_rloo_vectorized",
    "verl_reinforce_plus_plus_baseline",
    "verl_opo",
    "verl_gpg",
    "verl_grpo_passk",
    "verl_remax",
    "trl_grpo",
    "trl_rloo",
    "openrlhf_group_norm",
    "openrlhf_rloo",
    "openrlhf_reinforce_baseline",
    "openrlhf_dr_grpo",
    "nemo_grpo",
    "passk_training",
    "areal_liteppo",
    "jspo",
    "jspo_plus_plus",
    "spo",
]

VERL = (
    "volcengine/verl verl/trainer/ppo/core_algos.py::{} @ verl 0.9.1 (PyPI) and b178a3cd"
    " (v0.7.0-125), outputs compared"
)
TRL = "huggingface/trl trl/trainer/{}::_generate_and_score_completions @ f2cd5771 (v1.9.0-26)"
ORLHF = (
    "OpenRLHF/OpenRLHF openrlhf/trainer/ppo_utils/experience_maker.py::"
    "compute_advantages_and_returns ({}) @ 3c3be623 (v0.11.0)"
)


# ----------------------------------------------------------------------------- helpers


def _need_group_axis(rewards: jax.Array, name: str, batch: bool = False) -> None:
    """The rewards' shape (ConfigError, the registry's message) and float dtype (chex, at trace
    time: the registry converts bool and integer rewards before they get here)."""
    if rewards.ndim < (2 if batch else 1) or rewards.shape[-1] < 1:
        want = "(..., P, G)" if batch else "(..., G)"
        raise validate.ConfigError(
            f"{name}: rewards shape {rewards.shape}; expected {want} with G >= 1"
        )
    chex.assert_type(rewards, float)


def _need(x, like: jax.Array, name: str, field: str, shape: tuple) -> jax.Array:
    if x is None:
        raise validate.ConfigError(f"{name}: needs {field}, got None")
    x = jnp.asarray(x, dtype=like.dtype)
    if x.shape != shape:
        raise validate.ConfigError(f"{name}: {field} shape {x.shape}; expected {shape}")
    return x


def _flat(x: jax.Array) -> jax.Array:
    """True (keepdims) for all-equal groups."""
    return jnp.max(x, -1, keepdims=True) == jnp.min(x, -1, keepdims=True)


def _mean(x: jax.Array) -> jax.Array:
    return jnp.mean(x, -1, keepdims=True)


def _std1(x: jax.Array) -> jax.Array:
    """torch.std (ddof 1) over the group, keepdims; two-pass; G ≥ 2."""
    d = x - _mean(x)
    return jnp.sqrt(jnp.sum(d * d, -1, keepdims=True) / (x.shape[-1] - 1))


def _centre(x: jax.Array) -> jax.Array:
    """r − r̄, exactly 0 on all-equal groups."""
    return jnp.where(_flat(x), 0.0, x - _mean(x))


def _scaled(centred: jax.Array, denom: jax.Array, flat: jax.Array) -> jax.Array:
    """centred / denom, exactly 0 where ``flat`` (denom may be 0 there)."""
    return jnp.where(flat, 0.0, centred / jnp.where(flat, 1.0, denom))


def _batch_sum(x: jax.Array) -> jax.Array:
    return jnp.sum(x, axis=(-2, -1), keepdims=True)


# ----------------------------------------------------------------------------- verl


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
    _need_group_axis(rewards, "verl/grpo")
    if rewards.shape[-1] == 1:
        return rewards / (1.0 + epsilon) if norm_adv_by_std_in_grpo else rewards
    centred = _centre(rewards)
    if not norm_adv_by_std_in_grpo:
        return centred
    return _scaled(centred, _std1(rewards) + epsilon, _flat(rewards))


def verl_grpo_vectorized(
    rewards, *, lengths=None, greedy=None, epsilon: float = 1e-6, norm_adv_by_std_in_grpo=True
):
    """verl ``grpo_vectorized``: A = (r − r̄)/(σ + epsilon), σ = √max(var₁, epsilon).

    var₁ = (Σr² − (Σr)²/G)/(G − 1) (``group_mean_std``, which floors the *variance* at the same
    ``epsilon``, so σ ≥ 10⁻³ at the default), then divides by σ + epsilon again.  Differs from
    ``verl/grpo`` when var₁ < epsilon.  Singleton: mean 0, std 1 ⇒ r/(1 + epsilon).  All-equal: 0.
    NB: verl's trainer (``ray_trainer.compute_advantage``) passes only ``config`` to this
    estimator, so ``algorithm.norm_adv_by_std_in_grpo`` does not reach it there and it always
    normalises; the function's own keyword (kept here) defaults to True.
    Version: this is b178a3cd's (v0.7.0-125).  verl 0.9.1 calls ``group_mean_std(eps=0.0)``
    (no floor; two-pass variance): there σ = √var₁ and the value equals ``verl/grpo``'s, so the
    two versions differ exactly on groups with 0 < var₁ < epsilon (e.g. [0, 1e-3, 0, 1e-3, 0]:
    0.60/−0.40 here and in b178a3cd, 1.09/−0.73 in 0.9.1).  Binary rewards never reach it
    (var₁ ≥ 1/G for a mixed group).  verl computes these statistics in float32 whatever the
    input dtype.
    Source: ``compute_grpo_vectorized_outcome_advantage`` + ``verl/utils/groupwise.py::
    group_mean_std`` (verl b178a3cd; compared with 0.9.1 too).

    Args:
      rewards: [..., G] float rewards of one group per leading index, G ≥ 1.
      epsilon: verl's epsilon (a static Python value).
      norm_adv_by_std_in_grpo: verl's option (a static Python value).

    Returns:
      [..., G] advantages.
    """
    _need_group_axis(rewards, "verl/grpo_vectorized")
    G = rewards.shape[-1]
    if G == 1:
        return rewards / (1.0 + epsilon) if norm_adv_by_std_in_grpo else rewards
    centred = _centre(rewards)
    if not norm_adv_by_std_in_grpo:
        return centred
    d = rewards - _mean(rewards)
    var = jnp.sum(d * d, -1, keepdims=True) / (G - 1)
    return _scaled(centred, jnp.sqrt(jnp.maximum(var, epsilon)) + epsilon, _flat(rewards))


def verl_rloo(rewards, *, lengths=None, greedy=None):
    """verl ``rloo`` (dict loop): A = G/(G − 1)·(r − r̄) = r − mean_{j≠i} r_j for G ≥ 2.

    Singleton group: the loop leaves the score untouched, A = r (``verl/rloo_vectorized`` gives
    0 there).  All-equal: 0.  Source: ``compute_rloo_outcome_advantage`` (verl 0.9.1 and b178a3cd).

    Args:
      rewards: [..., G] float rewards of one group per leading index, G ≥ 1.

    Returns:
      [..., G] advantages.
    """
    _need_group_axis(rewards, "verl/rloo")
    G = rewards.shape[-1]
    if G == 1:
        return rewards
    return _centre(rewards) * (G / (G - 1))


def verl_rloo_vectorized(rewards, *, lengths=None, greedy=None):
    """verl ``rloo_vectorized``: A = (G·r − Σr)/max(G − 1, 1)·[G > 1].

    Equal to ``verl/rloo`` for G ≥ 2; singleton groups get 0 (the loop version returns r).
    Source: ``compute_rloo_vectorized_outcome_advantage`` (verl 0.9.1 and b178a3cd).

    Args:
      rewards: [..., G] float rewards of one group per leading index, G ≥ 1.

    Returns:
      [..., G] advantages.
    """
    _need_group_axis(rewards, "verl/rloo_vectorized")
    G = rewards.shape[-1]
    if G == 1:
        return jnp.zeros_like(rewards)
    return _centre(rewards) * (G / (G - 1))


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


# ----------------------------------------------------------------------------- TRL


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


# ----------------------------------------------------------------------------- OpenRLHF


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
    _need_group_axis(rewards, "openrlhf/rloo")
    G = rewards.shape[-1]
    if G == 1:
        return jnp.zeros_like(rewards)
    return _centre(rewards) * (G / (G - 1))


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


# ----------------------------------------------------------------------------- NeMo-RL


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
    else:
        b = jnp.broadcast_to(_mean(rewards), rewards.shape)
        s = jnp.where(_flat(rewards), 0.0, _std1(rewards))
    adv = jnp.where(_flat(rewards), 0.0, rewards - b)
    if not normalize_rewards:
        return adv
    return jnp.where(s > 0, adv / (s + 1e-6), adv)


# ----------------------------------------------------------------------------- Pass@k training


def _comb_ratio(top: jax.Array, bottom: int, k: int) -> jax.Array:
    """C(top, k)/C(bottom, k) for integer-valued ``top`` ≤ ``bottom``, k ≤ bottom; 0 if top < 0
    (scipy.special.comb returns 0 for a negative N)."""
    out = jnp.ones_like(top)
    for i in range(k):
        out = out * (top - i) / (bottom - i)
    return jnp.where(top < 0, 0.0, out)


def passk_training(rewards, *, lengths=None, greedy=None, k: int = 4):
    """Pass@k training with analytical advantages (arXiv 2508.10751; authors' ``calc_adv``).

    Binary rewards, n = G, c = #{r = 1}:  ρ = 1 − C(n − c, k)/C(n, k),  σ = √(ρ(1 − ρ)),
        A⁺ = (1 − ρ)/(σ + 1e-6),   A⁻ = (1 − ρ − C(n − c − 1, k − 1)/C(n − 1, k − 1))/(σ + 1e-6).
    The README formulas have no eps; the code adds 1e-6 to σ (the code is followed here).
    Mirrors ``np.where(val == 1, A⁺, val)`` then ``np.where(new == 0, A⁻, new)``: rewards that
    are neither 0 nor 1 pass through unchanged (the method assumes binary rewards), and a
    positive whose A⁺ is 0 is re-assigned A⁻ (also 0 in that case).  All-equal groups: 0
    (c = 0 ⇒ A⁻ = 0; c = n ⇒ A⁺ = 0).  Needs 1 ≤ k ≤ G (else the C(n, k) = 0 division); k = 1 is
    GRPO with the population std + 1e-6.  The code has no default k; 4 is gpolab's (so the
    spec's ``min_group`` is 4: in general it is k).
    Source: ``RUCAIBox/Passk_Training code/passk_adv.py::calc_adv`` @ 00474d78.

    Args:
      rewards: [..., G] float rewards (binary: 0 or 1) of one group per leading index.
      k: the k of pass@k, 1 ≤ k ≤ G (static).

    Returns:
      [..., G] advantages.
    """
    _need_group_axis(rewards, "paper/passk-training")
    n = rewards.shape[-1]
    if not (isinstance(k, int) and 1 <= k <= n):
        raise validate.ConfigError(f"paper/passk-training: k {k!r}; allowed 1 <= k <= G = {n}")
    c = jnp.sum((rewards == 1).astype(rewards.dtype), -1, keepdims=True)
    rho = 1.0 - _comb_ratio(n - c, n, k)
    sigma = jnp.sqrt(jnp.maximum(rho * (1.0 - rho), 0.0))  # float32 ρ = 1 − 1 can be −1e-8
    adv_p = (1.0 - rho) / (sigma + 1e-6)
    adv_n = (1.0 - rho - _comb_ratio(n - c - 1, n - 1, k - 1)) / (sigma + 1e-6)
    new = jnp.where(rewards == 1, adv_p, rewards)
    return jnp.where(new == 0, adv_n, new)


# ----------------------------------------------------------------------------- cross-prompt


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

    Args:
      rewards: [..., P, G] float rewards, a batch of P groups per leading index, G ≥ 2.
      epsilon: the constant in λ's denominator (static).

    Returns:
      [..., P, G] advantages.
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


# ----------------------------------------------------------------------------- metadata


@dataclasses.dataclass(frozen=True)
class Spec:
    """One framework estimator for the registry.

    ``needs``: extra inputs ("lengths", "greedy"); ``scope``: "group" (a response's advantage
    depends on its group only) or "batch" (on the whole (P, G) batch) at the default options;
    ``batch_when``: option → the values that make a group-scoped entry batch-scoped; ``min_group``:
    smallest G the framework runs; ``reward_only``: group-scoped, no lengths, no greedy at the
    default options (exact finite-G theory applies); ``source``: repo path::function @ commit.
    """

    name: str
    fn: Callable
    needs: tuple[str, ...] = ()
    scope: str = "group"
    min_group: int = 1
    options: dict = dataclasses.field(default_factory=dict)
    source: str = ""
    reward_only: bool = True
    batch_when: dict[str, tuple] = dataclasses.field(default_factory=dict)


_EPS_NORM = {"epsilon": 1e-6, "norm_adv_by_std_in_grpo": True}

SPECS: tuple[Spec, ...] = (
    Spec(
        "verl/grpo",
        verl_grpo,
        options=dict(_EPS_NORM),
        source=VERL.format("compute_grpo_outcome_advantage"),
    ),
    Spec(
        "verl/grpo_vectorized",
        verl_grpo_vectorized,
        options=dict(_EPS_NORM),
        source="volcengine/verl verl/trainer/ppo/core_algos.py::"
        "compute_grpo_vectorized_outcome_advantage + verl/utils/groupwise.py::group_mean_std"
        " @ b178a3cd (v0.7.0-125), outputs compared; verl 0.9.1 has no variance floor",
    ),
    Spec("verl/rloo", verl_rloo, source=VERL.format("compute_rloo_outcome_advantage")),
    Spec(
        "verl/rloo_vectorized",
        verl_rloo_vectorized,
        source=VERL.format("compute_rloo_vectorized_outcome_advantage"),
    ),
    Spec(
        "verl/reinforce_plus_plus_baseline",
        verl_reinforce_plus_plus_baseline,
        needs=("lengths",),
        scope="batch",
        reward_only=False,
        source=VERL.format("compute_reinforce_plus_plus_baseline_outcome_advantage")
        + " + verl/utils/torch_functional.py::masked_whiten",
    ),
    Spec(
        "verl/opo",
        verl_opo,
        needs=("lengths",),
        reward_only=False,
        source=VERL.format("compute_opo_outcome_advantage"),
    ),
    Spec(
        "verl/gpg",
        verl_gpg,
        scope="batch",
        options={"f_norm": 1.0},
        reward_only=False,
        source=VERL.format("compute_gpg_outcome_advantage"),
    ),
    Spec(
        "verl/grpo_passk",
        verl_grpo_passk,
        min_group=2,
        options=dict(_EPS_NORM),
        source=VERL.format("compute_grpo_passk_outcome_advantage"),
    ),
    Spec(
        "verl/remax",
        verl_remax,
        needs=("greedy",),
        reward_only=False,
        source=VERL.format("compute_remax_outcome_advantage"),
    ),
    Spec(
        "trl/grpo",
        trl_grpo,
        options={"scale_rewards": "group"},
        batch_when={"scale_rewards": ("batch",)},
        source=TRL.format("grpo_trainer.py"),
    ),
    Spec(
        "trl/rloo",
        trl_rloo,
        options={"normalize_advantages": False},
        batch_when={"normalize_advantages": (True,)},
        source=TRL.format("rloo_trainer.py"),
    ),
    Spec(
        "openrlhf/group_norm", openrlhf_group_norm, min_group=2, source=ORLHF.format("group_norm")
    ),
    Spec("openrlhf/rloo", openrlhf_rloo, min_group=2, source=ORLHF.format("rloo")),
    Spec(
        "openrlhf/reinforce_baseline",
        openrlhf_reinforce_baseline,
        needs=("lengths",),
        scope="batch",
        min_group=2,
        options={"no_std_norm": False},
        reward_only=False,
        source=ORLHF.format("reinforce_baseline"),
    ),
    Spec("openrlhf/dr_grpo", openrlhf_dr_grpo, min_group=2, source=ORLHF.format("dr_grpo")),
    Spec(
        "nemo/grpo",
        nemo_grpo,
        options={"normalize_rewards": True, "use_leave_one_out_baseline": True},
        source="NVIDIA-NeMo/RL nemo_rl/algorithms/utils.py::calculate_baseline_and_std_per_prompt"
        " + nemo_rl/algorithms/advantage_estimator.py::GRPOAdvantageEstimator.compute_advantage"
        " @ 7ea279ab (v0.1.0-1338)",
    ),
    Spec(
        "paper/passk-training",
        passk_training,
        min_group=4,
        options={"k": 4},
        source="RUCAIBox/Passk_Training code/passk_adv.py::calc_adv @ 00474d78 (arXiv 2508.10751)",
    ),
    Spec(
        "areal/liteppo",
        areal_liteppo,
        scope="batch",
        reward_only=False,
        source="inclusionAI/AReaL areal/utils/data.py::Normalization (mean_level=group, "
        "std_level=batch) @ 4aef98d8 (LitePPO, arXiv 2508.08221); the example config's "
        "second, token-level adv_norm pass is not modelled",
    ),
    Spec(
        "jspo/jspo",
        jspo,
        scope="batch",
        min_group=2,
        options={"epsilon": 1e-6},
        reward_only=False,
        source="guanning03/JSPO-Official code/verl/trainer/ppo/core_algos.py::"
        "compute_jspo_outcome_advantage @ 3f8539de (James-Stein baselines)",
    ),
    Spec(
        "jspo/jspo_plus_plus",
        jspo_plus_plus,
        scope="batch",
        min_group=2,
        options={"epsilon": 1e-6},
        reward_only=False,
        source="guanning03/JSPO-Official code/verl/trainer/ppo/core_algos.py::"
        "compute_jspo_plus_plus_outcome_advantage @ 3f8539de (James-Stein baselines); "
        "js_smooth_coef 0, the code's default (the authors' run_math.sh: 0.99, not modelled)",
    ),
    Spec(
        "spo/spo",
        spo,
        needs=("baseline",),
        scope="batch",
        reward_only=False,
        source="verl-project/verl-recipe spo/spo_ray_trainer.py::RayPPOTrainer.fit @ 550d42f5 "
        "(arXiv 2509.13232); the tracker's value is the given baseline (the labs: the exact "
        "V(x), a perfect tracker; SPO's train.sh runs one response per prompt)",
    ),
)
