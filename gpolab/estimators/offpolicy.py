"""Off-policy update rules: importance ratios with their clipping, and KL-penalty estimators.

Rollouts y ~ π_old; the update at θ weighs each token's score s_t = ∇_θ log π_θ(y_t | x, y_<t)
by a rule of the per-token ratios ρ_t = π_θ / π_old (theory §13).  Every rule is one pure
function returning the per-token *objective* whose gradient in θ is the update, as the trainers
write their losses (the negative), so clipping zeroes the gradient exactly where their autodiff
does.  Arrays are ``(..., G, T)`` (tokens last); ``c`` ``(..., G)`` is the response's gradient
weight (A_g/G for advantage estimators, :func:`gpolab.estimators.gradient_weights`), and the
sign of ``c`` is the sign of the advantage.  Every rule gives c_g Σ_t s_t at θ = θ_old (all
ρ_t = 1): on-policy they are the same estimate.

The ratio rules compare at one loss aggregation, the token sum per response (seq-mean-token-sum,
unbiased on-policy); GSPO's own length normalization is a loss aggregation
(:mod:`gpolab.estimators.aggregation`), not part of its ratio.

=================== ====================================================== =====================
rule                gradient of one response (clip = none)                 where it is from
=================== ====================================================== =====================
``none``            c Σ_t s_t (the rollouts treated as on-policy)          REINFORCE
``token``           c Σ_t ρ_t s_t                                          PPO / GRPO
``sequence``        c r Σ_t s_t, r = exp(mean_t log ρ_t) (geometric mean)  GSPO's ratio
``gspo``            ``sequence/higher`` at GSPO's ε (3e-4, 4e-4)           GSPO as shipped
``sis``             c (Π_t ρ_t) Σ_t s_t (unbiased, y-independent baseline) [U] App. A μ^(g)
``cispo``           c Σ_t sg(clamp(ρ_t, 1 − ε_low, 1 + ε_high)) s_t at     CISPO as shipped
                    verl's recipe's ε (10, 0.2): sg(min(ρ_t, 1.2))
``cispo-two-sided`` the same clamp at the lab's ε (0.2, 0.28): [0.8, 1.28]  gpolab's variant
=================== ====================================================== =====================

``gspo`` and ``cispo`` are the authors' rules at their shipped settings (:data:`GSPO_EPS`,
:data:`CISPO_EPS`: the lab's defaults ``gspo_eps_*``, ``cispo_eps_*``); ``sequence`` under the
lab's clip modes and ``cispo-two-sided`` are gpolab's variants at the lab's PPO/DAPO ε (before
issue 55 they were the lab's only GSPO and CISPO rows).

Clipping (``token`` and ``sequence``): ``ppo`` the objective min(ρc, clip(ρ, 1 − ε, 1 + ε)c)
(symmetric ε = ε_low), ``higher`` the same with ε_low, ε_high (DAPO's clip-higher), ``dual``
ppo's clip (symmetric ε_low) and, for c < 0, the floor c·clip_c: verl's
``compute_policy_loss_vanilla`` at its defaults (clip_ratio_low = clip_ratio_high = 0.2,
clip_ratio_c = 3), where the floor max(·, −A·clip_ratio_c) of the loss acts only for A < 0.  A
token with c > 0 and 1 + ε_low < ρ is clipped by ``dual`` as by ``ppo``.  verl's GSPO loss has no
clip_ratio_c: ``sequence/dual`` is gpolab's extension (TRL's ``delta`` at
importance_sampling_level="sequence" gives its gradient).

KL estimators (per token, d_t = log π_θ − log π_ref, on the rollouts without an IS ratio, as
GRPO and verl add them): k1 = d, k2 = d²/2, k3 = e^(−d) + d − 1 (verl clamps d to ±20 and k3 to
±10; so does gpolab's).  Their expected gradients on-policy (gpolab's derivation, theory §13):
k1 → 0, k2 → ∇KL(π_θ‖π_ref) exactly, k3 → ∇KL(π_ref‖π_θ) (the reverse KL's gradient) where
the clamps do not bind.  ``k3_ratio`` is TRL's default since its ``use_bias_correction_kl``
(1.16.0): k3 unclamped times the ratio π_θ/π_old, the ratio differentiable, so that on-policy
E ∇(ρ k3) = ∇ E_π k3 = ∇KL(π_θ‖π_ref) exactly (gpolab's one-line check of the DeepSeek-V3.2
property TRL cites).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import chex
import jax
import jax.numpy as jnp

from gpolab import validate

__all__ = [
    "RATIOS",
    "CLIPS",
    "KLS",
    "GSPO_EPS",
    "CISPO_EPS",
    "Rule",
    "objective",
    "kl_terms",
    "rule_clips",
    "rule_name",
]

VERL = "volcengine/verl 0.9.1 verl/trainer/ppo/core_algos.py::{}"
TRL = "huggingface/trl 1.16.0 trl/trainer/grpo_trainer.py::GRPOTrainer._compute_loss ({})"
# the authors' shipped clip settings (ε_low, ε_high), as verl-project/verl 1dda039b9c63 ships them
GSPO_EPS = (3e-4, 4e-4)  # examples/gspo_trainer/run_qwen3_8b_fsdp.sh; GSPO paper v2 §5.1
CISPO_EPS = (10.0, 0.2)  # examples/cispo_trainer/run_qwen3_8b_fsdp.sh: 10 = no lower clamp


@dataclasses.dataclass(frozen=True)
class Rule:
    """A registered ratio rule or KL estimator: its name, function, what it is and its source."""

    name: str
    fn: Callable
    doc: str
    source: str
    clips: tuple[str, ...] = ("none",)  # the clip modes it takes


def _sg(x):
    return jax.lax.stop_gradient(x)


def _clipped(ratio, c, clip, eps_low, eps_high, clip_c):
    """The PPO objective of ``ratio`` (a differentiable tensor) and whether each token's
    gradient is cut (clipped), for clip = none / ppo / higher / dual (dual: ppo's symmetric clip
    and, for c < 0, the floor clip_c·c, as verl's compute_policy_loss_vanilla)."""
    if clip == "none":
        return ratio * c, jnp.zeros(ratio.shape, bool)
    high = eps_high if clip == "higher" else eps_low  # ppo and dual: symmetric (verl's defaults)
    plain, capped = ratio * c, jnp.clip(ratio, 1 - eps_low, 1 + high) * c
    obj = jnp.minimum(plain, capped)
    cut = capped < plain
    if clip == "dual":
        floor = clip_c * c
        obj = jnp.where(c < 0, jnp.maximum(obj, floor), obj)
        cut = cut | ((c < 0) & (floor > jnp.minimum(plain, capped)))
    return obj, cut


def ratio_none(logp, old, c, mask, clip, eps_low, eps_high, clip_c):
    """c · log π_θ per token: the rollouts used as if drawn from π_θ (no correction)."""
    return c * logp, jnp.zeros(logp.shape, bool)


LOG_RATIO_CLAMP = 20.0  # verl clamps log ρ_t to ±20 before exp (vanilla, cispo)
LOG_SEQ_CLAMP = 10.0  # and GSPO's log sequence ratio to at most 10


def ratio_token(logp, old, c, mask, clip, eps_low, eps_high, clip_c):
    """PPO/GRPO: the per-token ratio ρ_t = exp(log π_θ − log π_old), clipped per token (log ρ_t
    clamped to ±20 first, as verl)."""
    log_ratio = jnp.clip(logp - old, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return _clipped(jnp.exp(log_ratio), c, clip, eps_low, eps_high, clip_c)


def ratio_sequence(logp, old, c, mask, clip, eps_low, eps_high, clip_c):
    """GSPO: r = exp(Σ_t mask (log π_θ − log π_old) / |y|), on every token as sg(r)·π_t/sg(π_t)
    (so its gradient is r·s_t; its log clamped at 10, as verl), clipped per response."""
    length = jnp.maximum(jnp.sum(mask, -1, keepdims=True), 1.0)
    log_r = jnp.sum((logp - old) * mask, -1, keepdims=True) / length
    log_s = jnp.minimum(_sg(log_r) + logp - _sg(logp), LOG_SEQ_CLAMP)  # verl's clamp
    return _clipped(jnp.exp(log_s), c, clip, eps_low, eps_high, clip_c)


def ratio_sis(logp, old, c, mask, clip, eps_low, eps_high, clip_c):
    """Sequential IS: the whole sequence's ratio Π_t ρ_t on every token's score, sg(Π ρ)·c·log π
    (its gradient c (Π_t ρ_t) Σ_t s_t; unbiased for g(θ) with a baseline independent of y).  No
    clamp: no trainer runs it, and a clamp would bias it; an overflow is reported as NaN."""
    log_w = jnp.sum((logp - old) * mask, -1, keepdims=True)
    return _sg(jnp.exp(log_w)) * c * logp, jnp.zeros(logp.shape, bool)


def ratio_cispo(logp, old, c, mask, clip, eps_low, eps_high, clip_c):
    """CISPO: the clipped ratio as a stop-gradient weight, sg(clamp(ρ_t, 1 − ε_low,
    1 + ε_high))·c·log π (no token's gradient is cut, only reweighted; log ρ_t clamped to ±20
    first, as verl).  ε_low ≥ 1 is no lower clamp (verl's recipe's 10)."""
    ratio = jnp.exp(jnp.clip(logp - old, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    w = jnp.clip(ratio, 1 - eps_low, 1 + eps_high)
    return _sg(w) * c * logp, w != ratio


CLIPS = ("none", "ppo", "higher", "dual")
_CLIPPED = CLIPS
RATIOS: dict[str, Rule] = {
    r.name: r
    for r in (
        Rule(
            "none",
            ratio_none,
            "c·Σ_t s_t: no correction (on-policy REINFORCE on stale data)",
            "gpolab/estimators/offpolicy.py::ratio_none",
        ),
        Rule(
            "token",
            ratio_token,
            "per-token ratio ρ_t (PPO/GRPO); clip none/ppo/higher/dual",
            VERL.format("compute_policy_loss_vanilla")
            + " (dual: its defaults, clip_ratio_c 3)"
            + "; "
            + TRL.format('importance_sampling_level="token"'),
            _CLIPPED,
        ),
        Rule(
            "sequence",
            ratio_sequence,
            "GSPO's sequence ratio exp(mean_t log ρ_t) under the lab's clip modes at the lab's ε "
            "(gpolab's variants; gspo is GSPO as shipped): none/ppo/higher, and dual: gpolab's "
            "extension (verl's GSPO loss has no dual clip)",
            VERL.format("compute_policy_loss_gspo")
            + "; "
            + TRL.format('importance_sampling_level="sequence"')
            + "; clip dual: gpolab's extension (no clip_ratio_c in compute_policy_loss_gspo; "
            "TRL's delta at the sequence level gives its gradient)",
            _CLIPPED,
        ),
        Rule(
            "gspo",
            ratio_sequence,
            "GSPO as its authors ship it: the sequence ratio in PPO's min with clip(r, "
            "1 − ε_low, 1 + ε_high) per response at ε (3e-4, 4e-4) (the lab's gspo_eps_*)",
            VERL.format("compute_policy_loss_gspo")
            + "; clip_ratio_low 3e-4, clip_ratio_high 4e-4 from verl-project/verl 1dda039b9c63 "
            "examples/gspo_trainer/run_qwen3_8b_fsdp.sh (GSPO paper v2 §5.1; TRL's "
            "paper_index: epsilon 3e-4, epsilon_high 4e-4)",
            ("higher",),
        ),
        Rule(
            "sis",
            ratio_sis,
            "sequential IS Π_t ρ_t (unbiased; [U] App. A's μ^(g))",
            "arXiv 2603.01162 Appendix A (g†'s SIS ratio μ^(g))",
        ),
        Rule(
            "cispo",
            ratio_cispo,
            "CISPO as its authors ship it: sg(clamp(ρ_t, 1−ε_low, 1+ε_high)) as a weight at "
            "verl's recipe's ε (10, 0.2): sg(min(ρ_t, 1.2)), no lower clamp (lab: cispo_eps_*)",
            VERL.format("compute_policy_loss_cispo")
            + "; clip_ratio_low 10, clip_ratio_high 0.2 from verl-project/verl 1dda039b9c63 "
            "examples/cispo_trainer/run_qwen3_8b_fsdp.sh (its README: 'effectively unclamped on "
            "lower side'); TRL's loss_type='cispo' is one-sided too, clamp(ρ, max=epsilon_high)",
            ("weight",),
        ),
        Rule(
            "cispo-two-sided",
            ratio_cispo,
            "gpolab's CISPO variant: the clamp at the lab's eps_low, eps_high (0.2, 0.28): "
            "[0.8, 1.28], a lower clamp neither verl's recipe nor TRL has",
            "gpolab's variant of " + VERL.format("compute_policy_loss_cispo"),
            ("weight",),
        ),
    )
}


def kl_k1(d):
    """k1 = log π_θ − log π_ref."""
    return d


def kl_k2(d):
    """k2 = ½ (log π_θ − log π_ref)²."""
    return 0.5 * d * d


KL_LOG_CLAMP, KL_CLAMP = 20.0, 10.0  # verl's low_var_kl: log(π_ref/π) to ±20, k3 to ±10


def kl_k3(d):
    """k3 = π_ref/π_θ − log(π_ref/π_θ) − 1 (Schulman's low-variance estimator; GRPO's), with
    verl's clamps (log ratio to ±20, k3 to ±10: a clamped token has no gradient)."""
    kl = jnp.clip(-d, -KL_LOG_CLAMP, KL_LOG_CLAMP)
    return jnp.clip(jnp.exp(kl) - kl - 1, -KL_CLAMP, KL_CLAMP)


KLS: dict[str, Rule] = {
    r.name: r
    for r in (
        Rule("none", jnp.zeros_like, "no KL term", "gpolab (the loss has no KL term)"),
        Rule(
            "k1",
            kl_k1,
            "k1 = log π/π_ref; expected gradient 0 on-policy",
            VERL.format('kl_penalty_forward ("kl", "k1")'),
        ),
        Rule(
            "k2",
            kl_k2,
            "k2 = ½ (log π/π_ref)²; expected gradient ∇KL(π‖π_ref) on-policy",
            VERL.format('kl_penalty_forward ("mse", "k2")'),
        ),
        Rule(
            "k3",
            kl_k3,
            "k3 = π_ref/π − log(π_ref/π) − 1; expected gradient ∇KL(π_ref‖π)",
            VERL.format('kl_penalty_forward ("low_var_kl", "k3"; its clamps)')
            + "; "
            + TRL.format("per_token_kl, beta > 0, use_bias_correction_kl=False"),
        ),
        Rule(
            "k3_ratio",
            kl_k3,  # times the ratio in kl_terms (it needs π_old)
            "k3 · π_θ/π_old (the ratio differentiable); expected gradient ∇KL(π‖π_ref)",
            "huggingface/trl 1.16.0 trl/trainer/grpo_trainer.py::GRPOTrainer._compute_loss "
            "(per_token_kl = exp(ref − logp) − (ref − logp) − 1, times coef_1 = exp(logp − "
            "old_per_token_logps) with use_bias_correction_kl, its default True; no clamps)",
        ),
    )
}


def rule_name(row) -> str:
    """``ratio`` or ``ratio/clip`` (and `` +kl``) of a result row (``none`` and the clip of a
    rule that takes one mode, e.g. cispo's ``weight`` and gspo's ``higher``, are not named)."""
    only = len(RATIOS[row["ratio"]].clips) == 1 if row["ratio"] in RATIOS else False
    clip = "" if row["clip"] in ("none", "weight") or only else f"/{row['clip']}"
    kl = "" if row.get("kl", "none") == "none" else f" +{row['kl']}"
    return f"{row['ratio']}{clip}{kl}"


def rule_clips(ratio: str) -> tuple[str, ...]:
    """The clip modes ``ratio`` takes."""
    validate.choice("ratio", ratio, tuple(RATIOS))
    return RATIOS[ratio].clips


def objective(ratio, clip, logp, old, c, mask, eps_low, eps_high, clip_c):
    """(per-token objective (..., G, T), clipped-token flags): Σ mask·objective has gradient
    Σ_g Σ_t (the rule's weight) s_t.  ``c`` is (..., G); ``clip`` one of ``rule_clips(ratio)``
    (the ``weight`` of cispo and the ``none`` of unclipped rules are the same call).

    Args:
      ratio: a name of :data:`RATIOS` (static).
      clip: one of ``rule_clips(ratio)`` (static).
      logp: [..., G, T] float log π_θ of every token.
      old: [..., G, T] float log π_old of every token.
      c: [..., G] float gradient weight of each response.
      mask: [..., G, T] float, 1 on the response's tokens, 0 on padding.
      eps_low: [] the clip constant ε_low.
      eps_high: [] the clip constant ε_high.
      clip_c: [] verl's clip_ratio_c (the dual clip's floor).

    Returns:
      ([..., G, T] float objective, [..., G, T] bool clipped-token flags).
    """
    _check_tokens(logp, old, mask)
    chex.assert_rank(c, logp.ndim - 1)
    chex.assert_equal_shape_prefix([logp, c], c.ndim)
    chex.assert_type(c, float)
    chex.assert_rank([eps_low, eps_high, clip_c], 0)
    validate.choice("clip", clip, rule_clips(ratio))
    fn = RATIOS[ratio].fn
    clip = "none" if clip == "weight" else clip
    obj, cut = fn(logp, old, c[..., None], mask, clip, eps_low, eps_high, clip_c)
    return obj * mask, cut & (mask > 0)


def kl_terms(kl: str, logp, ref, mask, old=None):
    """Per-token KL estimator values of ``kl`` at d = logp − ref, masked.

    Args:
      kl: a name of :data:`KLS` (static).
      logp: [..., G, T] float log π_θ of every token.
      ref: [..., G, T] float log π_ref of every token.
      mask: [..., G, T] float, 1 on the response's tokens, 0 on padding.
      old: [..., G, T] float log π_old of every token (``k3_ratio`` only: TRL's coef_1).

    Returns:
      [..., G, T] float KL estimates, 0 on padding.
    """
    _check_tokens(logp, ref, mask)
    validate.choice("kl", kl, tuple(KLS))
    if kl == "k3_ratio":
        if old is None:
            raise ValueError("kl_terms: k3_ratio needs the old log-probs (old=...)")
        _check_tokens(logp, old, mask)
        d = jnp.where(mask > 0, logp - ref, 0.0)
        k3 = jnp.exp(-d) + d - 1  # TRL's, no clamps
        return k3 * jnp.exp(jnp.where(mask > 0, logp - old, 0.0)) * mask
    return KLS[kl].fn(logp - ref) * mask


def _check_tokens(logp: jax.Array, other: jax.Array, mask: jax.Array) -> None:
    """Trace-time checks of per-token arrays [..., G, T]: same shape, rank ≥ 2, float."""
    chex.assert_equal_shape([logp, other, mask])
    chex.assert_axis_dimension_gteq(logp, -2, 1)
    chex.assert_type([logp, other, mask], float)
