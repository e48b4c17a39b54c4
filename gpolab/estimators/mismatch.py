"""Rollout–training mismatch corrections: the per-token gradient coefficients each framework's
correction gives at the trainer's current θ = θ_old.

The engine samples y ~ μ; the trainer's π_θ differs per token.  At θ = θ_old (the first update
after the rollout: π_θ/π_old = 1, clipping against π_old does not bind) each correction's
gradient is ĝ = Σ_i Σ_t w_{i,t} ∇_θ log π_θ(y_{i,t} | prefix), w = coef × its aggregation's
factor.  ``coef`` multiplies ∇log π_θ(y_t) in the (ascent) gradient of the per-token (GMPO:
per-sequence) loss; it is a function of d_t = log π_θ(y_t) − log μ(y_t) (TRL's and decoupled
verl's π_old/μ and bypass verl's π_θ/μ are the same numbers here).  Derivations are gpolab's,
from the losses as the sources write them (ρ = e^d, m the mask, T = Σ_t m_t):

- ``none``: A.  ``trl/<level>_<mode>``: A·ρ̃, ρ̃ the detached vLLM IS weight that multiplies the
  whole per-token PPO surrogate (gradient A∇log π at ratio 1): ρ_t, or exp(Σ m d) per sequence,
  no clamp (inf on overflow); truncate clamp(ρ, C_min, C_max), mask ρ·1[C_min ≤ ρ ≤ C_max].
- ``verl/<level>_tis``: A·min(w, U), w = exp(clamp(d_t, ±20)) or exp(clamp(Σ m d, ±20));
  ``verl/<level>_icepop``: A·w·1[L ≤ w ≤ U]; ``verl/rs_<stat>``: A on kept tokens, a rejected
  token leaves the loss and verl's token-mean denominator.
- ``verl/gspo``: A·s·1[uncut], s = exp(min(Σ m d / T, 10)); cut: the PPO max rule on s against
  [1−ε_l, 1+ε_h] (A > 0 and s > 1+ε_h, or A < 0 and s < 1−ε_l), or the clamp at 10 binds.
- ``verl/geo_mean`` (GMPO): loss_i = −Ā·exp(Σ m x̂ / (T+1e-8)), x̂ = d clipped sign-aware to
  [−ε_l, ε_h] in log space ⇒ coef = Ā·ratio/(T+1e-8)·1[token uncut] (1/T is part of the
  derivative; the aggregation is a mean over sequences).  verl's ±20 clamp is commented out:
  a mean log ratio beyond exp's range gives ±inf, as verl's does.
- ``verl/cispo``: loss −sg(r̂)·A·log π_θ ⇒ A·r̂, r̂ = clamp(exp(clamp(d, ±20)), 1−ε_l, 1+ε_h).
- ``verl/sapo``: loss −A·σ(τ(r−1))·4/τ, ∂/∂log π = 4σ(1−σ)·r ⇒ A·4σ(z)σ(−z)·r, z = τ(r−1),
  r = exp(clamp(d, ±20)) (0 where the clamp binds), τ = τ_pos if A > 0 else τ_neg.
- ``verl/bypass_ppo_clip``: A·r·1[uncut], r = exp(clamp(d, ±20)); cut: the PPO max rule,
  r > clip_ratio_c for A < 0 (dual clip), or |d| > 20 (torch's clamp passes no gradient).
- ``nemo/seq_mask_tis``, ``openrlhf/seq_mask_tis``: A·ρ_t·1[L ≤ exp(mean_t d) ≤ U], ρ_t = e^d
  untruncated, the mask on the sequence's geometric mean (not its product, as verl's seq
  IcePop); masked sequences stay in the denominator.
- ``trl/cispo``: TRL's CISPO ratio is π_θ/π_old = 1, capped absolutely at ε_high, times the vLLM
  IS weight (sequence_mask, 3.0): A·min(1, ε_high)·ρ̃.

The ratio losses (gspo, geo_mean, cispo, sapo, bypass_ppo_clip) are what verl runs in bypass mode
under its default v1 trainer (``trainer.use_v1: true``): old_log_prob := the rollout log-probs and
``policy_loss.loss_mode``'s own loss, no IS or RS weight, so their ratio is π_θ/μ at π_θ = π_old.
verl's legacy trainer (``use_v1: false``) instead replaces the loss by its bypass PPO-clip or
REINFORCE (only ``verl/bypass_ppo_clip`` is that).
Aggregations (w/coef): ``dapo`` 1/Σ_batch mask (TRL: masked weights count as zeros);
``token-mean`` 1/Σ_batch kept; ``seq-mean-token-mean`` 1/(N·T_i) over kept; ``seq-mean`` 1/N.
Counts below 1 are taken as 1: the numerator is then 0.  verl's token-mean divides by the
batch's kept-token count with no epsilon (core_algos.py::agg_loss, batch_num_tokens =
loss_mask.sum()), so an all-rejected batch is 0/0, a NaN loss, and the actor skips the step (its
grad norm is not finite): the same zero update.  Where the denominator counts the kept tokens of
the whole batch (verl's rejection under token-mean: :func:`batch_dependent`), the *mean* update
depends on the batch size; elsewhere it does not.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from gpolab import validate

__all__ = [
    "REGISTRY",
    "Weights",
    "Estimate",
    "Correction",
    "correction",
    "estimate_weights",
    "parse",
    "spec",
    "batch_dependent",
    "sequence_weight_bound",
]

CLAMP = 20.0  # verl's SAFETY_BOUND on log ratios (rollout_corr_helper.py, core_algos.py)
GSPO_CLAMP = 10.0  # verl's GSPO: log s_i,t clamped at max 10
TRL = "huggingface/trl f2cd57710ae3 "
TRL_IS = (
    TRL + "trl/trainer/grpo_trainer.py::GRPOTrainer._generate_and_score_completions (ratio), "
    "_compute_loss (per_token_loss *= ratio; loss_type dapo); grpo_config.py::GRPOConfig "
    "(vllm_importance_sampling_mode={}, clip_max 3.0, clip_min None); off_policy_mask: "
    "trl 1.16.0 get_off_policy_mask (off_policy_mask_threshold, default None: off)"
)
VERL = "verl-project/verl 1dda039b9c63 verl/trainer/"
VERL_IS = VERL + "ppo/rollout_corr_helper.py::compute_rollout_correction_weights"
VERL_RS = VERL + "ppo/rollout_corr_helper.py::compute_rollout_rejection_mask"
AGG = "; actor loss_agg_mode token-mean"
AT = " at θ where π_θ = π_old"
V1_BYPASS = (  # what verl's default trainer does with bypass_mode true
    "verl's default v1 trainer (trainer.use_v1 true) runs it in bypass mode: "
    "ppo/v1/trainer_base.py::PPOTrainer._compute_old_log_prob sets old_log_probs := "
    "rollout_log_probs (no IS or RS weight: _compute_advantage skips the correction) and "
    "verl/workers/utils/losses.py::ppo_loss runs policy_loss.loss_mode's loss"
)
LEGACY = (
    "; the legacy trainer (use_v1 false: ppo/ray_trainer.py::RayPPOTrainer.fit → "
    "ppo/rollout_corr_helper.py::apply_bypass_mode) replaces loss_mode by "
    "ppo/core_algos.py::compute_policy_loss_bypass_mode (loss_type ppo_clip or reinforce), so "
    "it does not run this loss against μ"
)
BYPASS = f"; {V1_BYPASS}{LEGACY}{AT}"


class Weights(NamedTuple):
    """coef (..., T): the gradient coefficient of ∇log π_θ(y_t) before aggregation (0 off
    ``kept``); kept (..., T) float: tokens in the loss and its denominator; flagged (..., T) bool:
    real tokens whose weight was truncated, masked, rejected or whose gradient was cut."""

    coef: jax.Array
    kept: jax.Array
    flagged: jax.Array


class Estimate(NamedTuple):
    """w (..., T): ĝ = Σ w ∇log π_θ(y_t) over the batch; flagged_share []: flagged / real tokens."""

    w: jax.Array
    flagged_share: jax.Array


@dataclasses.dataclass(frozen=True)
class Correction:
    """A registry entry: fn(A, d, m, **params) -> Weights; the framework's source; token or
    sequence level; kind; the loss aggregation; default keyword values (the allowed keywords)."""

    fn: Callable
    source: str
    level: str
    kind: str
    aggregation: str
    defaults: dict


def _seq_sum(x, m):
    return jnp.sum(x * m, -1, keepdims=True)


def _seq_mean(x, m):
    """The mean over a sequence's real tokens (an empty row counts as one token, mean 0)."""
    return _seq_sum(x, m) / jnp.maximum(jnp.sum(m, -1, keepdims=True), 1.0)


def _out(coef, m, flagged, kept=None):
    """Weights with coef broadcast to the tokens and zeroed off ``kept`` (without inf·0)."""
    kept = m if kept is None else kept
    coef = jnp.where(kept > 0, jnp.broadcast_to(coef, m.shape), 0.0)
    return Weights(coef, kept, jnp.broadcast_to(flagged, m.shape) & (m > 0))


def _ppo_cut(v, A, lo, hi):
    """PPO's max rule: the gradient through ratio v is cut iff A > 0 and v > hi, or A < 0 and
    v < lo (v inside [lo, hi], or clipped on the side that does not bind, keeps it)."""
    return ((A > 0) & (v > hi)) | ((A < 0) & (v < lo))


def _trl_ratio(d, m, level, mode, clip_max, clip_min):
    """TRL's vLLM IS weight ρ̃ (..., 1 or T) and its flags; exp without clamp (inf on overflow)."""
    rho = jnp.exp(_seq_sum(d, m) if level == "sequence" else d)
    lo = 0.0 if clip_min is None else clip_min  # ρ ≥ 0: the same as TRL's open bound
    if mode == "truncate":
        w = jnp.clip(rho, lo, clip_max)
        return w, w != rho
    cut = (rho < lo) | (rho > clip_max)
    return jnp.where(cut, 0.0, rho), cut


def _trl_out(coef, A, d, m, flagged, delta):
    """:func:`_out` of a TRL coefficient under its off-policy sequence mask
    (``GRPOTrainer.get_off_policy_mask``, DeepSeek-V3.2's Eq. 9; ``off_policy_mask_threshold``
    δ, None: off): a sequence with A < 0 whose mean log μ − log π_θ over real tokens exceeds δ
    gets 0 and is flagged; dropped sequences stay in the denominator."""
    if delta is None:
        return _out(coef, m, flagged)
    keep = (A >= 0) | (_seq_mean(-d, m) <= delta)
    return _out(jnp.where(keep, coef, 0.0), m, flagged | ~keep)


def trl_is(A, d, m, *, level, mode, clip_max, clip_min, off_policy_mask):
    w, cut = _trl_ratio(d, m, level, mode, clip_max, clip_min)
    return _trl_out(A * w, A, d, m, cut, off_policy_mask)


def trl_cispo(A, d, m, *, eps_high, clip_max, clip_min, off_policy_mask):
    w, cut = _trl_ratio(d, m, "sequence", "mask", clip_max, clip_min)
    coef = A * jnp.minimum(1.0, eps_high) * w
    return _trl_out(coef, A, d, m, cut | (eps_high < 1.0), off_policy_mask)


def _verl_is(d, m, level, bounds):
    """verl's IS weight: TIS (bounds = (None, U)) or IcePop (L, U) on exp(clamp(·, ±20))."""
    log_w = d if level == "token" else _seq_sum(d, m)
    w = jnp.exp(jnp.clip(log_w, -CLAMP, CLAMP))
    lo, hi = bounds
    if lo is None:
        return jnp.minimum(w, hi), w > hi
    cut = (w < lo) | (w > hi)
    return jnp.where(cut, 0.0, w), cut


def _rs_keep(d, m, stat, k, threshold):
    """verl's rejection: keep iff the statistic of k_t (k1 = −lr, k2 = lr²/2, k3 = e^lr − 1 − lr,
    lr = clamp(d, ±20)) lies in [log L, log U] (k1) or is ≤ U (k2, k3); token or per sequence."""
    lr = jnp.clip(d, -CLAMP, CLAMP)
    kt = {1: -lr, 2: 0.5 * lr * lr, 3: jnp.exp(lr) - 1.0 - lr}[k]
    if stat == "seq_sum":
        kt = _seq_sum(kt, m)
    elif stat == "seq_mean":
        kt = _seq_mean(kt, m)
    if k == 1:
        return (kt >= jnp.log(threshold[0])) & (kt <= jnp.log(threshold[1]))
    return kt <= threshold


def verl_corr(A, d, m, *, level=None, rs=None, is_threshold=None, rs_threshold=None):
    """verl's decoupled rollout correction: IS weight (level token/sequence) and/or RS (rs =
    (stat, k)); the policy loss at ratio 1 has gradient A·w on kept tokens."""
    w, cut = jnp.ones_like(A), jnp.zeros(A.shape, bool)
    if level is not None:
        bounds = is_threshold if isinstance(is_threshold, tuple) else (None, is_threshold)
        w, cut = _verl_is(d, m, level, bounds)
    kept = m
    if rs is not None:
        keep = _rs_keep(d, m, *rs, rs_threshold)
        kept = m * keep
        cut = cut | ~keep
    return _out(A * w, m, cut, kept)


def verl_gspo(A, d, m, *, eps_low, eps_high):
    log_s = _seq_mean(d, m)
    s = jnp.exp(jnp.minimum(log_s, GSPO_CLAMP))
    cut = _ppo_cut(s, A, 1.0 - eps_low, 1.0 + eps_high) | (log_s > GSPO_CLAMP)
    return _out(jnp.where(cut, 0.0, A * s), m, cut)


def verl_geo_mean(A, d, m, *, eps_low, eps_high):
    sgn = jnp.sign(A)
    x_hat = sgn * jnp.minimum(sgn * d, sgn * jnp.clip(d, -eps_low, eps_high))
    length = jnp.sum(m, -1, keepdims=True) + 1e-8
    ratio = jnp.exp(_seq_sum(x_hat, m) / length)
    a_bar = _seq_sum(jnp.broadcast_to(A, m.shape), m) / length
    cut = _ppo_cut(d, A, -eps_low, eps_high)
    return _out(jnp.where(cut, 0.0, a_bar * ratio / length), m, cut)


def verl_cispo(A, d, m, *, eps_low, eps_high):
    r = jnp.exp(jnp.clip(d, -CLAMP, CLAMP))
    r_hat = jnp.clip(r, 1.0 - eps_low, 1.0 + eps_high)
    return _out(A * r_hat, m, r_hat != r)


def verl_sapo(A, d, m, *, tau_pos, tau_neg):
    r = jnp.exp(jnp.clip(d, -CLAMP, CLAMP))
    z = jnp.where(A > 0, tau_pos, tau_neg) * (r - 1.0)
    cut = jnp.abs(d) > CLAMP
    gate = 4.0 * jax.nn.sigmoid(z) * jax.nn.sigmoid(-z) * r
    return _out(jnp.where(cut, 0.0, A * gate), m, cut)


def verl_bypass_ppo_clip(A, d, m, *, eps_low, eps_high, clip_c):
    r = jnp.exp(jnp.clip(d, -CLAMP, CLAMP))
    cut = _ppo_cut(r, A, 1.0 - eps_low, 1.0 + eps_high) | ((A < 0) & (r > clip_c))
    cut = cut | (jnp.abs(d) > CLAMP)
    return _out(jnp.where(cut, 0.0, A * r), m, cut)


def seq_mask_tis(A, d, m, *, is_threshold):
    """seq-mask-tis: the token weight e^d, untruncated, on sequences whose geometric-mean weight
    exp(mean_t d) lies in [L, U]; 0 on the others, which stay in the denominator."""
    lo, hi = is_threshold
    geo = jnp.exp(_seq_mean(d, m))
    cut = (geo < lo) | (geo > hi)
    return _out(jnp.where(cut, 0.0, A * jnp.exp(d)), m, cut)


VESPO_LOG_FLOOR = math.log(1e-8)  # TRL's lower clamp of the log weights (the authors' code's)


def trl_vespo(
    A, d, m, *, mode, clip_max, clip_min, k_pos, lambda_pos, k_neg, lambda_neg, off_policy_mask
):
    """TRL's VESPO (``GRPOTrainer.get_gamma_weights``, loss_type vespo): the coefficient A·φ(w),
    φ(w) = exp(λ + k log w − λ w) (φ(1) = 1), (k, λ) by the sign of A (λ at least 1e-4), w the
    sequence weight: here, at π_θ = π_old, exp of Σ_t clamp(log ρ̃_t, log 1e-8, 20) over the
    per-token vLLM ratios ρ̃ of ``mode`` (TRL raises for a sequence mode), clamped again; a
    masked ρ̃_t = 0 counts log 1e-8; non-finite φ is 0."""
    w, cut = _trl_ratio(d, m, "token", mode, clip_max, clip_min)
    log_rho = jnp.clip(jnp.log(w), VESPO_LOG_FLOOR, 20.0)  # padding: ρ̃ = 1, as TRL's
    log_w = jnp.clip(jnp.sum(log_rho, -1, keepdims=True), VESPO_LOG_FLOOR, 20.0)
    pos = A >= 0
    k = jnp.where(pos, k_pos, k_neg)
    lam = jnp.maximum(jnp.where(pos, lambda_pos, lambda_neg), 1e-4)
    phi = jnp.exp(lam + k * log_w - lam * jnp.exp(log_w))
    phi = jnp.where(jnp.isfinite(phi), phi, 0.0)
    return _trl_out(A * phi, A, d, m, cut, off_policy_mask)


def _vespo_entry(mode):
    return _entry(
        trl_vespo,
        "huggingface/trl 1.16.0 trl/trainer/grpo_trainer.py::GRPOTrainer.get_gamma_weights and "
        "_compute_loss (loss_type vespo: −φ(w)·A·log π, the vLLM ratio inside w and not applied "
        f"again; dapo's normalizer; GRPOTrainer.__init__ requires a token mode: {mode}); "
        "grpo_config.py (vespo_k_pos 2, vespo_lambda_pos 3, vespo_k_neg 3, vespo_lambda_neg 2, "
        "clip_max 3.0)",
        "sequence",
        "loss",
        "dapo",
        {"mode": mode.split("_")[1]},
        clip_max=3.0,
        clip_min=None,
        k_pos=2.0,
        lambda_pos=3.0,
        k_neg=3.0,
        lambda_neg=2.0,
        off_policy_mask=None,
    )


def no_correction(A, d, m):
    return _out(A, m, jnp.zeros(A.shape, bool))


def _entry(fn, source, level, kind, aggregation, static=None, **defaults):
    """A registry entry; ``static`` (Python choices: level, mode, RS statistic) is bound to fn."""
    fn = functools.partial(fn, **(static or {}))
    return Correction(fn, source, level, kind, aggregation, defaults)


def _trl_entry(level, mode):
    source = TRL_IS.format(f"{level}_{mode}")
    static = {"level": level, "mode": mode}
    return _entry(
        trl_is,
        source,
        level,
        mode,
        "dapo",
        static,
        clip_max=3.0,
        clip_min=None,
        off_policy_mask=None,
    )


def _is_entry(level, threshold, why):
    source = f"{VERL_IS} (rollout_is={level}, rollout_is_threshold {threshold}: {why}){AGG}"
    kind = "mask" if isinstance(threshold, tuple) else "truncate"
    return _entry(
        verl_corr, source, level, kind, "token-mean", {"level": level}, is_threshold=threshold
    )


def _rs_entry(name, stat, k, threshold, why):
    source = f"{VERL_RS} (rollout_rs={name}, rollout_rs_threshold {threshold}: {why}){AGG}"
    level = "token" if stat == "token" else "sequence"
    return _entry(
        verl_corr, source, level, "reject", "token-mean", {"rs": (stat, k)}, rs_threshold=threshold
    )


GPOLAB = "no preset; gpolab's choice: the bounds of preset"
REGISTRY: dict[str, Correction] = {
    "none": _entry(
        no_correction,
        "gpolab: no correction, the rollouts used as if drawn from π_θ",
        "token",
        "none",
        "token-mean",
    ),
    **{
        f"trl/{lv}_{mode}": _trl_entry(lv, mode)
        for lv in ("token", "sequence")
        for mode in ("truncate", "mask")
    },
    "trl/cispo": _entry(
        trl_cispo,
        TRL + "trl/trainer/grpo_trainer.py::GRPOTrainer._compute_loss (loss_type="
        "'cispo': clamp(coef_1, max=epsilon_high), coef_1 = π_θ/π_old = 1 here) times the vLLM "
        "IS weight (sequence_mask, 3.0); epsilon_high 5.0 as TRL's docs recommend (unset, it "
        "falls back to epsilon = 0.2); TRL has no bypass mode",
        "sequence",
        "mask",
        "dapo",
        eps_high=5.0,
        clip_max=3.0,
        clip_min=None,
        off_policy_mask=None,
    ),
    "verl/token_tis": _is_entry("token", 2.0, "preset decoupled_token_is"),
    "verl/seq_tis": _is_entry("sequence", 2.0, "preset decoupled_seq_is"),
    "verl/token_icepop": _is_entry("token", (0.5, 5.0), "preset decoupled_token_icepop"),
    "verl/seq_icepop": _is_entry("sequence", (0.5, 5.0), f"{GPOLAB} decoupled_token_icepop"),
    "verl/rs_token_k1": _rs_entry(
        "token_k1", "token", 1, (0.5, 2.0), f"{GPOLAB} decoupled_seq_is_rs"
    ),
    "verl/rs_seq_sum_k1": _rs_entry(
        "seq_sum_k1", "seq_sum", 1, (0.5, 2.0), "preset decoupled_seq_is_rs"
    ),
    "verl/rs_seq_mean_k1": _rs_entry(
        "seq_mean_k1", "seq_mean", 1, (0.999, 1.001), "preset decoupled_geo_rs, Geo-RS"
    ),
    "verl/rs_seq_mean_k3": _rs_entry("seq_mean_k3", "seq_mean", 3, 0.01, "preset decoupled_k3_rs"),
    "verl/seq_is_rs": _entry(
        verl_corr,
        f"{VERL_IS} + compute_rollout_rejection_mask: preset decoupled_seq_is_rs "
        "(sequence TIS 2.0, seq_sum_k1 '0.5_2.0')" + AGG,
        "sequence",
        "truncate+reject",
        "token-mean",
        {"level": "sequence", "rs": ("seq_sum", 1)},
        is_threshold=2.0,
        rs_threshold=(0.5, 2.0),
    ),
    "verl/gspo": _entry(
        verl_gspo,
        VERL + "ppo/core_algos.py::compute_policy_loss_gspo; ε 3e-4/4e-4 from "
        "examples/gspo_trainer/run_qwen3_8b_fsdp.sh" + BYPASS,
        "sequence",
        "loss",
        "seq-mean-token-mean",
        eps_low=3e-4,
        eps_high=4e-4,
    ),
    "verl/geo_mean": _entry(
        verl_geo_mean,
        VERL + "ppo/core_algos.py::compute_policy_loss_geo_mean; ε 0.4 from "
        "examples/gmpo_trainer/README.md" + BYPASS,
        "sequence",
        "loss",
        "seq-mean",
        eps_low=0.4,
        eps_high=0.4,
    ),
    "verl/cispo": _entry(
        verl_cispo,
        VERL + "ppo/core_algos.py::compute_policy_loss_cispo; ε_low 10, ε_high 0.2 "
        "from examples/cispo_trainer/run_qwen3_8b_fsdp.sh" + AGG + BYPASS,
        "token",
        "truncate",
        "token-mean",
        eps_low=10.0,
        eps_high=0.2,
    ),
    "verl/sapo": _entry(
        verl_sapo,
        VERL + "ppo/core_algos.py::compute_policy_loss_sapo; ActorConfig tau_pos "
        "1.0, tau_neg 1.05" + BYPASS,
        "token",
        "loss",
        "seq-mean-token-mean",
        tau_pos=1.0,
        tau_neg=1.05,
    ),
    "trl/vespo_token_truncate": _vespo_entry("token_truncate"),
    "trl/vespo_token_mask": _vespo_entry("token_mask"),
    "nemo/seq_mask_tis": _entry(
        seq_mask_tis,
        "NVIDIA-NeMo/RL 7ea279abfbeb nemo_rl/algorithms/loss/loss_functions.py::ClippedPGLossFn."
        "__call__ (truncated_importance_sampling_type seq-mask-tis: exp(prev − generation "
        "log-probs) per token, kept where the sequence's geometric mean lies in [ratio_min, "
        "ratio]; no defaults: 0.999 and 1.002 from examples/configs/prorlv2_1_moe.v2.yaml); "
        "masked_mean over the batch's valid tokens",
        "sequence",
        "mask",
        "dapo",
        is_threshold=(0.999, 1.002),
    ),
    "openrlhf/seq_mask_tis": _entry(
        seq_mask_tis,
        "OpenRLHF/OpenRLHF 3c3be6234e0c openrlhf/models/loss.py::PolicyLoss.forward (vllm_is_"
        "correction_type seq-mask-tis: exp(old − rollout log-probs) per token, untruncated "
        "although its comment says clamped, on sequences whose geometric mean lies in "
        "is_correction_threshold, default [0.5, 5.0] in openrlhf/cli/train_ppo_ray.py); masked "
        "sequences stay in the denominator",
        "sequence",
        "mask",
        "dapo",
        is_threshold=(0.5, 5.0),
    ),
    "verl/bypass_ppo_clip": _entry(
        verl_bypass_ppo_clip,
        VERL + "ppo/core_algos.py::compute_policy_loss_vanilla against μ "
        "(ActorConfig ε 0.2/0.2, clip_ratio_c 3.0): " + V1_BYPASS + " (loss_mode vanilla, its "
        "default); the legacy trainer (use_v1 false) runs the same numbers through "
        "compute_policy_loss_bypass_mode (loss_type ppo_clip, no IS weight, no RS: preset "
        "bypass_ppo_clip)" + AT + AGG,
        "token",
        "loss",
        "token-mean",
        eps_low=0.2,
        eps_high=0.2,
        clip_c=3.0,
    ),
}


def _params(name: str, overrides: dict) -> dict:
    """The entry's defaults with ``overrides``, checked in plain Python where concrete ("L_U"
    strings become pairs; a single U for an RS k1 pair means (1/U, U), as verl's)."""
    validate.choice("correction", name, REGISTRY)
    defaults = REGISTRY[name].defaults
    params = dict(defaults)
    for key, value in overrides.items():
        validate.choice(f"{name} keyword", key, list(defaults) or ["(no keywords)"])
        field, pair = f"{name} {key}", isinstance(defaults[key], tuple)
        if isinstance(value, str):
            try:
                value = tuple(float(v) for v in value.split("_"))
            except ValueError:
                raise validate.ConfigError(f"{field}: got {value!r}; allowed: 'L_U'") from None
        if pair and key == "rs_threshold" and isinstance(value, (int, float)) and value > 0:
            value = (1.0 / value, value)
        if pair != isinstance(value, tuple) or (pair and len(value) != 2):
            want = "a pair (L, U) or 'L_U'" if pair else "a number"
            raise validate.ConfigError(f"{field}: got {value!r}; allowed: {want}")
        for v in value if pair else (value,):
            if isinstance(v, (int, float)) or (v is None and defaults[key] is not None):
                validate.real(field, v, 0.0, math.inf, open_low=key.startswith("tau"))
        params[key] = value
    bounds = [params[k] for k in defaults if isinstance(defaults[k], tuple)]
    bounds += [(params["clip_min"], params["clip_max"])] if "clip_max" in params else []
    for lo, hi in bounds:
        if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and lo >= hi:
            raise validate.ConfigError(f"{name} bounds: got ({lo}, {hi}); allowed: lower < upper")
    return params


def correction(name: str, A, logp, logp_mu, mask, **overrides) -> Weights:
    """The per-token coefficients of correction ``name`` (see the module docstring).

    Args:
      name: a key of :data:`REGISTRY` (static).
      A: [...] float advantage of each sequence (every axis the batch).
      logp: [..., T] float log π_θ(y_t) of the trainer (= π_old).
      logp_mu: [..., T] float log μ(y_t) of the sampler.
      mask: [..., T] float, 1 on real tokens, 0 on padding.
      **overrides: the entry's keywords (``REGISTRY[name].defaults``), floats may be traced.

    Returns:
      Weights(coef [..., T], kept [..., T] float, flagged [..., T] bool).
    """
    params = _params(name, overrides)
    chex.assert_equal_shape([logp, logp_mu, mask])
    chex.assert_rank(A, logp.ndim - 1)
    chex.assert_equal_shape_prefix([logp, A], A.ndim)
    chex.assert_type([A, logp, logp_mu, mask], float)
    d = jnp.where(mask > 0, logp - logp_mu, 0.0)  # padding: ratio 1, never inf - inf
    return REGISTRY[name].fn(A[..., None], d, mask, **params)


def estimate_weights(name: str, A, logp, logp_mu, mask, **overrides) -> Estimate:
    """Per-token weights w with the denominator included, ĝ = Σ_batch Σ_t w ∇log π_θ(y_t), and
    the share of real tokens flagged (arguments as :func:`correction`).

    Returns:
      Estimate(w [..., T] float, flagged_share [] float).
    """
    coef, kept, flagged = correction(name, A, logp, logp_mu, mask, **overrides)
    agg = REGISTRY[name].aggregation
    counts = jnp.sum(mask if agg == "dapo" else kept, -1, keepdims=True)
    if agg in ("dapo", "token-mean"):
        w = coef / jnp.maximum(jnp.sum(counts), 1.0)
    else:  # seq-mean-token-mean, seq-mean (GMPO: 1/T_i is in its coef)
        w = coef / (A.size * (jnp.maximum(counts, 1.0) if agg == "seq-mean-token-mean" else 1.0))
    share = jnp.sum(flagged) / jnp.maximum(jnp.sum(mask), 1.0)
    return Estimate(w, share.astype(w.dtype))


def batch_dependent(name: str) -> bool:
    """Whether entry ``name``'s mean update depends on the batch size: its denominator counts the
    kept tokens of the whole batch (token-mean after rejection), so E ĝ at B prompts is a ratio of
    sums, not B times one prompt's term."""
    entry = REGISTRY[name]
    return entry.aggregation == "token-mean" and "reject" in entry.kind


def sequence_weight_bound(name: str, overrides: dict | None = None) -> float | None:
    """The largest per-sequence weight ω(y) of an entry whose coefficient is A·ω(y), ω a function
    of the response alone (sequence-level IS, truncated or masked, no rejection, no cut that reads
    A): TRL's cap (∞ without one; times min(1, ε_high) for CISPO), verl's upper threshold (at most
    e^20, its clamp).  None for every other entry."""
    entry, params = REGISTRY[name], _params(name, overrides or {})
    fn = entry.fn.func
    if entry.level != "sequence" or "reject" in entry.kind:
        return None
    if fn in (trl_is, trl_cispo):
        cap = math.inf if params["clip_max"] is None else float(params["clip_max"])
        return cap * (min(1.0, params["eps_high"]) if fn is trl_cispo else 1.0)
    if fn is verl_corr and entry.fn.keywords.get("level") == "sequence":
        t = params["is_threshold"]
        return min(float(t[1] if isinstance(t, tuple) else t), math.exp(CLAMP))
    return None


def parse(spec: str) -> tuple[str, dict]:
    """``"name"`` or ``"name[key=value,...]"`` → (name, overrides) checked as :func:`correction`
    checks them: a number, ``none`` (no bound) or a pair ``L_U``, e.g.
    ``verl/seq_tis[is_threshold=1e9]`` or ``trl/token_truncate[clip_max=2,clip_min=none]``."""
    name, items = validate.bracketed("correction", str(spec), "NAME or NAME[key=value,...]")
    overrides = {}
    for key, eq, raw in items:
        if not eq:
            raise validate.ConfigError(
                f"correction {name}: option {key!r} not understood; allowed: key=value"
            )
        try:
            pair = tuple(float(v) for v in raw.split("_")) if "_" in raw else None
            value = None if raw.lower() == "none" else (pair or float(raw))
        except ValueError:
            raise validate.ConfigError(
                f"correction {name} {key}: got {raw!r}; allowed: a number, none or 'L_U'"
            ) from None
        overrides[key] = value
    _params(name, overrides)
    return name, overrides


def spec(name: str, overrides: dict | None = None) -> str:
    """The one spelling of (name, overrides) that :func:`parse` reads back: keys sorted, values
    equal to the entry's defaults left out (``verl/token_tis[is_threshold=2]`` is
    ``verl/token_tis``)."""

    def text(v):
        if v is None:
            return "none"
        if isinstance(v, tuple):
            return "_".join(repr(float(x)) for x in v)
        return repr(float(v)) if isinstance(v, (int, float)) else str(v)

    given = _params(name, overrides or {})  # checked, "L_U" strings as pairs
    same = lambda k, v: v == REGISTRY[name].defaults[k]  # noqa: E731 (the default: not spelled)
    items = sorted((k, v) for k, v in given.items() if k in (overrides or {}) and not same(k, v))
    return name + (f"[{','.join(f'{k}={text(v)}' for k, v in items)}]" if items else "")
