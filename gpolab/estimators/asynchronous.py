"""How asynchronous trainers compose a token's three log-probabilities into their update (issue 58).

An asynchronous trainer holds, per token, the current π_θ, the inference engine's log μ(y_t) (a
stale policy version, sampled by an engine whose probabilities differ from the trainer's) and,
in some frameworks, π_prox: the trainer's own log-probs recomputed at the version its training
step starts from (AReaL's proximal policy, verl's ``old_log_prob``).  A :class:`Correction` is
one composition: a ratio rule of :mod:`gpolab.estimators.offpolicy` (π_θ over the ``anchor``,
π_prox or μ) with its clip, times a detached train–inference weight of
:mod:`gpolab.estimators.mismatch` evaluated on (π_prox, μ).  :data:`REGISTRY` holds the
compositions the frameworks ship, each ported from the file and function named in its source,
and gpolab's sequence-IS control; :mod:`gpolab.kernels.async_rl` measures them.

Differences from the frameworks shared by every entry (gpolab's, listed once): advantages are
leave-one-out (the frameworks' group-normalized advantages target another direction, which the
std-normalization lab measures on its own), the loss sums a response's tokens and averages the
batch's responses (T × the token mean of a fixed-length batch: every framework's token-mean
there), and the clip knobs are the lab's traced ε_low, ε_high and c (each entry's ``knobs``
states its framework's values).
"""

from __future__ import annotations

import dataclasses

import chex
import jax.numpy as jnp

from gpolab import validate
from gpolab.estimators import mismatch
from gpolab.estimators import offpolicy as rules

ANCHORS = ("trainer", "engine", "interpolated", "current")  # π_prox at the step's start, μ,
# AReaL's loglinear interpolation between μ and the detached π_θ by the rollouts' age, or the
# detached π_θ itself (old log-probs taken at the update: VCPO's skip_recompute_old_log_prob)
WEIGHT_KINDS = ("none", "truncate", "mask")  # mismatch entries usable as a detached weight
OWN_RULES = {"cumtoken": ("sqrt_log", "none"), "token": ("m2",)}  # this module's (ratio: clips),
# beside estimators.offpolicy's: CTPO's cumulative token ratio and M2PO's second-moment clip
STEPS = ("fixed", "ess_sqrt")  # the step as given, or VCPO's ESS-scaled step
BASELINES = ("loo", "opob")  # leave-one-out advantages, or VCPO's off-policy optimal baseline
M2_BUDGET = 0.04  # M2PO's τ_M2 ("across all our experiments"; M2_budget in its scripts)
CTPO_CAP = 10.0  # CTPO clamps the cumulative log ratio at 10 (and each token's at ±20)


@dataclasses.dataclass(frozen=True)
class Correction:
    """One composition: ``ratio`` and ``clip`` (a rule of :mod:`gpolab.estimators.offpolicy`) of
    π_θ over the ``anchor`` (``trainer``: π_prox; ``engine``: μ; ``interpolated``: AReaL's
    log μ + α (log π_θ − log μ), π_θ detached, α from the rollouts' age; ``current``: the
    detached π_θ, which then also stands for π_prox in the weight), times the detached
    ``weight`` (an entry of :mod:`gpolab.estimators.mismatch` on (π_prox, μ), its ``options`` as
    sorted (name, value) pairs; ``none``: 1).  Two rules are this module's (:func:`objective`):
    CTPO's ``cumtoken`` ratio with its ``sqrt_log`` clip, and M2PO's ``m2`` clip of the token
    ratio; ``step`` ``ess_sqrt`` scales the update by VCPO's √min(1, ESS/N); ``baseline``
    ``opob`` replaces the leave-one-out advantages by VCPO's (:func:`opob_advantages`)."""

    ratio: str = "token"
    clip: str = "ppo"
    anchor: str = "trainer"
    weight: str = "none"
    options: tuple = ()
    step: str = "fixed"
    baseline: str = "loo"

    def validate(self) -> None:
        validate.choice("ratio", self.ratio, tuple(rules.RATIOS) + ("cumtoken",))
        own = OWN_RULES.get(self.ratio, ())
        base = rules.rule_clips(self.ratio) if self.ratio in rules.RATIOS else ()
        validate.choice("clip", self.clip, base + own)
        validate.choice("step", self.step, STEPS)
        validate.choice("baseline", self.baseline, BASELINES)
        if self.baseline == "opob" and self.weight != "verl/seq_tis":
            raise validate.ConfigError(
                f"baseline: got 'opob' with weight {self.weight!r}; allowed: with verl/seq_tis "
                "(VCPO's baseline weighs each sequence by its truncated sequence weight)"
            )
        validate.choice("anchor", self.anchor, ANCHORS)
        validate.choice("weight", self.weight, tuple(mismatch.REGISTRY))
        entry = mismatch.REGISTRY[self.weight]
        if entry.kind not in WEIGHT_KINDS or mismatch.batch_dependent(self.weight):
            raise validate.ConfigError(
                f"weight: got {self.weight!r} (a {entry.kind} entry); allowed: an entry of kind "
                f"{', '.join(WEIGHT_KINDS)} whose mean does not depend on the batch"
            )


@dataclasses.dataclass(frozen=True)
class Entry:
    """A registry entry: the composition, its source (repository, commit, file::function), the
    framework's clip knobs (ε_low, ε_high, c; None: no such clip) and what gpolab's port
    changes besides the shared differences of the module docstring."""

    correction: Correction
    source: str
    knobs: tuple
    differences: str = ""


TRL = "huggingface/trl f2cd57710ae3 trl/experimental/async_grpo/"
AREAL = "inclusionAI/AReaL 4aef98d8d818 areal/"
CTPO = "horizon-llm/CTPO acc40211dbea "
VERL = "verl-project/verl 1dda039b9c63 verl/"
VERL_LOSS = (
    VERL + "trainer/ppo/core_algos.py::compute_policy_loss_vanilla (ratio π_θ/π_old, clip 0.2, "
    "clip_ratio_c 3; pg_losses *= rollout_is_weights), workers/utils/losses.py::ppo_loss"
)
VERL_OLD = (
    "; π_old: trainer/ppo/v1/trainer_base.py::PPOTrainer._compute_old_log_prob at the step's "
    "start; 4 minibatch updates per batch (train_batch_size 1024 / ppo_mini_batch_size 256)"
)
CLAMP = "verl clamps log π_θ − log π_old at ±20 (binds only beyond e^20)"


TRL_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


def _trl_grpo(mode: str) -> Entry:
    """TRL's GRPOTrainer: PPO clip of π_θ over old_per_token_logps (the trainer's, at the
    generation step) times its vLLM IS weight ``mode`` (none: correction off or no vLLM)."""
    weight = "none" if mode == "none" else f"trl/{mode}"
    return Entry(
        Correction("token", "ppo", "trainer", weight),
        "huggingface/trl f2cd57710ae3 trl/trainer/grpo_trainer.py::GRPOTrainer._compute_loss "
        "(coef_1 = exp(per_token_logps − old_per_token_logps), clamp(1 − ε, 1 + ε_high); "
        "old_per_token_logps computed at generation when num_iterations > 1 or "
        "steps_per_generation > gradient_accumulation_steps, else the detached current ones; "
        "per_token_loss *= importance_sampling_ratio, the vLLM weight of "
        "_generate_and_score_completions: "
        + ("off" if mode == "none" else f"vllm_importance_sampling_mode {mode}")
        + "); grpo_config.py::GRPOConfig (epsilon 0.2, epsilon_high = epsilon)",
        (0.2, 0.2, None),
        "TRL normalizes advantages by the group's std (scale_rewards group) and aggregates as "
        "its loss_type (dapo: the batch's tokens); synchronous: its rollouts come from the "
        "current weights (k = 0)",
    )


def _verl(weight: str, preset: str) -> Entry:
    """verl's decoupled mode: dual-clip PPO against π_old at the step's start times ``weight``."""
    return Entry(
        Correction("token", "dual", "trainer", weight),
        f"{VERL_LOSS}{VERL_OLD}; {preset}",
        (0.2, 0.2, 3.0),
        CLAMP,
    )


REGISTRY: dict[str, Entry] = {
    "trl/async_grpo": Entry(
        Correction("token", "ppo", "engine"),
        TRL + "async_grpo_trainer.py::AsyncGRPOTrainer.compute_loss (log_ratio = log_probs − "
        "old_log_probs, the vLLM log-probs; clamp(1 − ε, 1 + ε_high)); async_grpo_config.py::"
        "AsyncGRPOConfig (epsilon 0.2, epsilon_high = epsilon, max_staleness 4: older samples "
        "dropped by RolloutQueueDataset.__iter__); no train–inference weight",
        (0.2, 0.2, None),
        "TRL normalizes advantages by the group's population std (eps 1e-8) and averages tokens "
        "per micro-batch",
    ),
    "trl/grpo": _trl_grpo("none"),
    **{f"trl/grpo_{mode}": _trl_grpo(mode) for mode in TRL_MODES},
    "areal/decoupled": Entry(
        Correction("token", "ppo", "trainer"),
        AREAL + "utils/functional/functional.py::ppo_actor_loss_fn (r = π_θ/π_prox clipped at "
        "eps_clip 0.2; rejection_sampling None by default: no behaviour weight); "
        "trainer/ppo/actor.py: π_prox recomputed once per training step (prox_logp_method "
        "recompute) for its ppo_n_minibatches (4) updates",
        (0.2, 0.2, None),
        "AReaL's defaults run use_decoupled_loss false (π_prox := the engine's: trl/async_grpo's "
        "composition); this entry is use_decoupled_loss true",
    ),
    "areal/decoupled_mask": Entry(
        Correction("token", "ppo", "trainer", "verl/token_icepop", (("is_threshold", (0.0, 5.0)),)),
        AREAL + "utils/functional/functional.py::ppo_actor_loss_fn with a rejection_sampling "
        "block at its defaults (level token, action mask, metric ratio, upper 5.0, lower None): "
        "w = π_prox/π_behav detached, tokens with w > 5 get weight 0, kept tokens their raw w",
        (0.2, 0.2, None),
        "the weight is verl's token IcePop on [0, 5] (verl clamps the log ratio at ±20; AReaL "
        "sets a non-finite w to 1)",
    ),
    "areal/a3po": Entry(
        Correction("token", "ppo", "interpolated"),
        AREAL + "trainer/ppo/actor.py::compute_prox_logp_approximations (prox_logp_method "
        "loglinear, A-3PO: no forward pass; log π_prox = log π_behav + α (log π_θ − log "
        "π_behav), π_θ detached, α = clamp(((v − 1) − v_b)/(v − v_b), 0, 1) with v the trainer's "
        "version and v_b the token's) into ppo_actor_loss_fn (clip 0.2, no behaviour weight)",
        (0.2, 0.2, None),
        "none besides the shared ones: each token's α from the previous token's version and the "
        "first token's α = 0, as AReaL's unshifted versions give",
    ),
    "verl/decoupled": _verl("none", "rollout_is null in the YAML defaults: no weight"),
    "verl/decoupled_token_is": _verl(
        "verl/token_tis", "preset decoupled_token_is (token weight truncated at 2.0)"
    ),
    "verl/decoupled_seq_is": _verl(
        "verl/seq_tis", "preset decoupled_seq_is (sequence weight truncated at 2.0)"
    ),
    "verl/decoupled_token_icepop": _verl(
        "verl/token_icepop", "preset decoupled_token_icepop (token weights outside [0.5, 5] zeroed)"
    ),
    "verl/bypass_ppo_clip": Entry(
        Correction("token", "dual", "engine"),
        VERL_LOSS + "; bypass mode (π_old := the rollout log-probs: trainer/ppo/v1/trainer_base."
        "py::PPOTrainer._compute_old_log_prob), the fully-async recipe's default (experimental/"
        "fully_async_policy: bypass_mode true, partial_rollout true)",
        (0.2, 0.2, 3.0),
        CLAMP,
    ),
    "ctpo/cumtoken": Entry(
        Correction("cumtoken", "sqrt_log", "trainer", "verl/seq_tis", (("is_threshold", 5.0),)),
        CTPO + "verl/trainer/ppo/core_algos.py::_compute_policy_loss_cum_token_la_impl (loss "
        "cum-token-cumprod-la: the prefix product of π_θ/π_old up to t, gradient through token t "
        "alone, log clamp 10; log-space clip −0.025√t, +0.05√t, dual bound 0.05√t for A < 0, "
        "from ctpo.sh) times verl's sequence TIS weight min(Π π_old/μ, 5) (ROLLOUT_IS_LEVEL "
        "sequence, ROLLOUT_IS_THRESHOLD 5.0); π_old recomputed at the step's start (bypass_mode "
        "false)",
        (0.025, 0.05, None),
        "ε_low and ε_high are CTPO's log-space coefficients of √t (LA_CLIP_LOW, LA_CLIP_HIGH); the "
        "dual bound's coefficient is tied to ε_high (LA_CLIP_C = LA_CLIP_HIGH = 0.05 in ctpo.sh); "
        "ctpo.sh runs 16 minibatch updates per batch",
    ),
    "gpolab/cumtoken_engine": Entry(
        Correction("cumtoken", "none", "engine"),
        "gpolab's variant: the ratio of CTPO's theorem (arXiv 2605.07331's abstract: the "
        "cumulative token ratio against the behaviour policy, compared with the full sequence "
        "ratio), Π_{s≤t} π_θ/μ with its gradient through token t, against the engine's μ, "
        "unclipped",
        (None, None, None),
        "not CTPO's run: ctpo/cumtoken anchors the ratio on π_old with its clip and a sequence "
        "weight on (π_old, μ); this is the pair its theorem compares, with sis",
    ),
    "m2po/m2": Entry(
        Correction("token", "m2", "engine"),
        "Infini-AI-Lab/M2PO af54a3e8feff verl/trainer/ppo/core_algos.py::compute_m2po_policy_loss "
        "(PPO's max rule on π_θ/π_behav with bounds [e^−τ, e^τ]), kpo_clip_harmful_tokens and "
        "_solve_tau_from_sorted_delta2 (τ from the harmful tokens' (log r)², M2_budget 0.04 in "
        "train-scripts/m2po-qwen-math-7b-s256.sh; floors miniclip_low/high unset); no ε-clip",
        (None, None, None),
        "the behaviour log-probs are the engine's μ (M2PO recomputes them with the trainer at the "
        "rollout's version: the same at no mismatch); τ from each minibatch of B × G responses "
        "(M2PO: per micro-batch of at most 30,000 tokens per GPU); the code's water-filling τ, "
        "not the paper's one-by-one removal (Algorithm 1), which masks fewer tokens",
    ),
    "nemo/seq_mask_tis": Entry(
        Correction("token", "ppo", "trainer", "nemo/seq_mask_tis"),
        "NVIDIA-NeMo/RL 7ea279abfbeb nemo_rl/algorithms/loss/loss_functions.py::ClippedPGLossFn."
        "__call__ (PPO clip of π_θ/π_prev, ratio_clip_min/max 0.2 in examples/configs/"
        "grpo_math_1B.yaml, times the seq-mask-tis weight of estimators.mismatch)",
        (0.2, 0.2, None),
        "ProRL v2.1 (examples/configs/prorlv2_1_moe.v2.yaml) also sets force_on_policy_ratio "
        "(π_prev := π_θ, one update per batch): m = 1 is that setup",
    ),
    "openrlhf/seq_mask_tis": Entry(
        Correction("token", "ppo", "trainer", "openrlhf/seq_mask_tis"),
        "OpenRLHF/OpenRLHF 3c3be6234e0c openrlhf/models/loss.py::PolicyLoss.forward (policy_loss_"
        "type ppo, eps_clip 0.2, times the seq-mask-tis weight of estimators.mismatch)",
        (0.2, 0.2, None),
        "OpenRLHF's dual clip is off by default (--actor.dual_clip None)",
    ),
    "gpolab/vcpo_ess": Entry(
        Correction(
            "token", "none", "current", "verl/seq_tis", (("is_threshold", 8.0),), "ess_sqrt"
        ),
        "gpolab's variant of VCPO (mit-han-lab/vcpo c7f030f0b772: recipe/fully_async_policy/shell/"
        "vcpo/math/vcpo_k=10.sh): old log-probs taken at the update (skip_recompute_old_log_prob, "
        "one step per minibatch), no clip (clip_ratio_low 1.0, high and c 1e9), verl's sequence "
        "TIS at 8, and the step scaled by √min(1, ESS/1.0) (verl/workers/actor/megatron_actor.py::"
        "_optimizer_step_with_buffer, staleness_utils.py::compute_ess_info)",
        (None, None, None),
        "without VCPO's off-policy optimal baseline (leave-one-out advantages instead; with it: "
        "vcpo/opob); VCPO scales AdamW's learning rate, gpolab the SGD step (the same under SGD)",
    ),
    "vcpo/opob": Entry(
        Correction(
            "token", "none", "current", "verl/seq_tis", (("is_threshold", 8.0),), "ess_sqrt", "opob"
        ),
        "mit-han-lab/vcpo c7f030f0b772 as its math scripts ship it (recipe/fully_async_policy/"
        "shell/vcpo/math/vcpo_k=10.sh): gpolab/vcpo_ess's composition with the off-policy optimal "
        "baseline (staleness_utils.py::compute_opob_baseline, grad_baselining scope group, "
        "agg_mode mean, use_is_weights, norm_by_std; verl/workers/actor/megatron_actor.py::"
        "_compute_grad_norms, _update_grad_buffers): advantages (R − b)/σ per group, b weighted "
        "by min(ρ, 8)² ρ² ‖∇log π(y)‖²",
        (None, None, None),
        "the baseline weights as VCPO's code computes them (its README writes w²‖∇log π‖², with "
        "one weight squared once); normalised in log space, not in float64 (the same short of "
        "ρ ≈ e^350); VCPO scales AdamW's learning rate after a gradient clip at 1, gpolab the SGD "
        "step; VCPO's loss is seq-mean-token-mean (1/L per sequence: a constant at fixed T)",
    ),
    "sis": Entry(
        Correction("sis", "none", "engine"),
        "gpolab's control: Π_t π_θ(y_t)/μ(y_t) over the engine's log-probs, unbiased for g at "
        "every θ (no framework ships it)",
        (None, None, None),
    ),
}


# ---------------------------------------------------------------- this module's rules


def objective(corr: Correction, logp, anchor, c, mask, eps_low, eps_high, clip_c):
    """(per-token objective [..., G, T], cut flags): ``corr``'s ratio rule and clip of π_θ over
    ``anchor``, :func:`gpolab.estimators.offpolicy.objective`'s or this module's CTPO and M2PO
    rules (arguments as there), times VCPO's detached step scale for ``step`` ``ess_sqrt``."""
    if corr.ratio == "cumtoken" and corr.clip == "none":
        obj, cut = _prefix(logp, anchor, c[..., None], mask), jnp.zeros(logp.shape, bool)
    elif corr.ratio == "cumtoken":
        obj, cut = _cumtoken(logp, anchor, c[..., None], mask, eps_low, eps_high)
    elif corr.clip == "m2":
        obj, cut = _m2(logp, anchor, c[..., None], mask)
    else:
        knobs = (eps_low, eps_high, clip_c)
        return rules.objective(corr.ratio, corr.clip, logp, anchor, c, mask, *knobs)
    return obj * mask, cut & (mask > 0)


def _prefix(logp, old, c, mask):
    """The cumulative token ratio without CTPO's clamps or clip: Π_{s≤t} π_θ/π_old as its value,
    its gradient through token t alone (CTPO's theorem's ratio, :func:`_cumtoken`'s R_t)."""
    return jnp.exp(_prefix_log((logp - old) * mask, logp)) * c


def _prefix_log(d, logp):
    """log R_t = sg(Σ_{s≤t} d_s) + log π_θ,t − sg(log π_θ,t): the prefix sum of the masked log
    ratios ``d`` as its value, its gradient through token t alone."""
    return rules._sg(jnp.cumsum(d, -1)) + logp - rules._sg(logp)


def _cumtoken(logp, old, c, mask, eps_low, eps_high):
    """CTPO (horizon-llm/CTPO acc40211dbea verl/trainer/ppo/core_algos.py::
    _compute_policy_loss_cum_token_la_impl, loss ``cum-token-cumprod-la``): R_t = exp(min(sg(S_t)
    + log π_θ,t − sg(log π_θ,t), 10)), S_t = Σ_{s≤t} m_s clamp(log π_θ,s − log π_old,s, ±20), so
    its value is the prefix product up to and including t and its gradient R_t ∇log π_θ,t;
    PPO's max rule against exp(clamp(log R_t, −ε_low √t, ε_high √t)), t counting the response's
    real tokens, and for A < 0 the dual bound exp(ε_high √t) (CTPO's clip_c, equal to its ε_high
    in ctpo.sh)."""
    d = jnp.clip(logp - old, -rules.LOG_RATIO_CLAMP, rules.LOG_RATIO_CLAMP) * mask
    log_r = _prefix_log(d, logp)
    capped = log_r > CTPO_CAP  # torch.clamp(max=10) passes no gradient beyond
    log_r = jnp.minimum(log_r, CTPO_CAP)
    root = jnp.sqrt(jnp.maximum(jnp.cumsum(mask, -1), 1.0))
    low, high = eps_low * root, eps_high * root
    plain = jnp.exp(log_r) * c
    held = jnp.exp(jnp.clip(log_r, -low, high)) * c
    obj = jnp.minimum(plain, held)
    floor = jnp.exp(high) * c
    cut = (held < plain) | ((c < 0) & (floor > obj)) | capped
    return jnp.where(c < 0, jnp.maximum(obj, floor), obj), cut


def _m2(logp, old, c, mask):
    """M2PO (Infini-AI-Lab/M2PO af54a3e8feff verl/trainer/ppo/core_algos.py::
    compute_m2po_policy_loss): PPO's max rule on r = π_θ/π_old with bounds [e^−τ, e^τ], τ from
    the minibatch (:func:`m2_tau`) over its harmful tokens (A > 0 and r > 1, or A < 0 and r < 1);
    bounds [0, 1e5] where their mean (log r)² is within the budget.  Written in its mask form (the
    same gradient: the max rule cuts exactly the harmful tokens beyond a bound), a token at the
    bound kept, as torch's clamp and max pass its whole gradient at the tie."""
    log_r = logp - old
    r = jnp.exp(log_r)
    a = jnp.broadcast_to(c, logp.shape)
    harm = (((a > 0) & (r > 1)) | ((a < 0) & (r < 1))) & (mask > 0)
    tau = rules._sg(m2_tau(jnp.where(harm, log_r**2, jnp.inf), M2_BUDGET))
    free = jnp.isinf(tau)
    cut = harm & jnp.where(free, r > 1e5, log_r**2 > jnp.where(free, 0.0, tau) ** 2)
    return jnp.where(cut, rules._sg(r), r) * c, cut


def m2_tau(delta2, budget):
    """M2PO's τ (``kpo_clip_harmful_tokens`` → ``_solve_tau_from_sorted_delta2``): over the
    harmful tokens' Δ² (``delta2``, inf elsewhere, any shape) sorted ascending s_0 ≤ … ≤ s_{n−1},
    the first k with s_k (n − k − 1) + Σ_{i≤k} s_i ≥ budget·n gives τ = √s_{k−1} (0 at k = 0;
    the code's −1e-12 under the root left out: it decides only the tie at s_{k−1}); inf (no
    clip) when Σ s ≤ budget·n or n = 0.  Water-filling: the tokens above τ still count in the
    mean, at τ² (the code's rule; the paper's Algorithm 1 removes them one by one)."""
    s = jnp.sort(delta2.ravel())
    finite = jnp.isfinite(s)
    n = jnp.sum(finite)
    k = jnp.arange(s.size)
    csum = jnp.cumsum(jnp.where(finite, s, 0.0))
    target = budget * n
    hit = finite & ((s - 1e-12) * (n - k - 1) + csum >= target - 1e-12)
    first = jnp.argmax(hit)
    prev = jnp.where(finite, s, 0.0)[jnp.maximum(first - 1, 0)]
    tau = jnp.where(first == 0, 0.0, jnp.sqrt(prev))
    return jnp.where((n > 0) & (csum[-1] > target), tau, jnp.inf)


def ess_ratio(log_w):
    """VCPO's ESS ratio (mit-han-lab/vcpo c7f030f0b772 recipe/fully_async_policy/
    staleness_utils.py::compute_ess_info): (Σ w)² / (N Σ w²) over the N sequence weights
    w = e^{log_w} (any shape), 1 when they are equal; computed from w / max w (VCPO's 1e-8 in
    the denominator left out: it only acts where Σ w² is below 1e-8)."""
    w = jnp.exp(log_w - jnp.max(log_w))
    return jnp.sum(w) ** 2 / (w.size * jnp.sum(w * w))


VCPO_BASE = 1.0  # VCPO's base_ess_ratio in its math scripts (0.55 in the multi-turn one)


def step_scale(corr: Correction, prox, engine, mask):
    """The update's detached scale: VCPO's √min(1, ESS/base) (``megatron_actor.py::
    _optimizer_step_with_buffer``, scaling_rule sqrt) over the minibatch's sequence weights
    Π_t π_prox/μ for ``step`` ``ess_sqrt``; 1 for ``fixed``."""
    if corr.step == "fixed":
        return 1.0
    ess = ess_ratio(jnp.sum((prox - engine) * mask, -1))  # π_prox: π_θ with anchor current
    return rules._sg(jnp.sqrt(jnp.minimum(1.0, ess / VCPO_BASE)))


def opob_advantages(rewards, log_rho, grad_sq, threshold):
    """VCPO's off-policy optimal baseline, as its code runs it (mit-han-lab/vcpo c7f030f0b772
    recipe/fully_async_policy/staleness_utils.py::compute_opob_baseline with the shipped
    ``grad_baselining`` scope group, agg_mode mean, use_is_weights, norm_by_std; the buffers of
    verl/workers/actor/megatron_actor.py::_update_grad_buffers).

    Per group, b = Σ_i W_i R_i / Σ_i W_i with W_i = ‖g_i‖² ρ_i², where g_i is the sequence's own
    loss gradient at advantage 1, min(ρ_i, C) ∇log π_θ(y_i) (``_compute_grad_norms``: the
    truncated weight is in the loss), and ρ_i = Π_t π_θ/μ untruncated; the advantage is
    (R_i − b)/σ with σ the group's population std of the raw rewards, or R_i − b where σ ≤ 1e-8
    (there b = R: the group gives 0).  The weights are normalised in log space (the code's float64
    sum overflows only beyond ρ ≈ e^350; its 1e-8 in Σ W acts only where every W is below it).

    Args:
      rewards: (..., G) raw rewards.
      log_rho: (..., G) log Π_t π_θ(y_t)/μ(y_t) (π_θ = π_old: VCPO does not recompute).
      grad_sq: (..., G) ‖∇_θ log π_θ(y)‖² of each sequence.
      threshold: C, the sequence TIS threshold (8 in VCPO's scripts).

    Returns:
      (..., G) advantages, finite wherever the inputs are (a group of equal rewards gives 0).
    """
    chex.assert_equal_shape([rewards, log_rho, grad_sq])
    log_w = 2 * jnp.minimum(log_rho, jnp.log(threshold)) + 2 * log_rho + jnp.log(grad_sq)
    top = jnp.max(log_w, -1, keepdims=True)
    w = jnp.exp(log_w - jnp.where(jnp.isfinite(top), top, 0.0))
    b = jnp.sum(w * rewards, -1, keepdims=True) / jnp.maximum(jnp.sum(w, -1, keepdims=True), 1e-30)
    sigma = jnp.std(rewards, -1, keepdims=True)
    return (rewards - b) / jnp.where(sigma > 1e-8, sigma, 1.0)


def get(name: str) -> Entry:
    """The registry entry ``name`` (one clear error naming the allowed ones)."""
    validate.choice("correction", name, tuple(REGISTRY))
    return REGISTRY[name]


KNOBS = ("eps_low", "eps_high", "clip_c")  # the clip knobs a spec may override


def parse(spec: str) -> tuple[str, dict]:
    """``"name"`` or ``"name[eps_low=…,eps_high=…,clip_c=…]"`` → (name, overrides): the knobs
    the entry's clip reads (a positive ε; c > 1), e.g. ``trl/async_grpo[eps_high=0.28]``, and
    the numeric options of its detached weight (``trl/grpo_sequence_mask[clip_max=5.0]``)."""
    name, items = validate.bracketed("correction", str(spec), "NAME or NAME[key=value,...]")
    entry = get(name)
    reads = [k for k, v in zip(KNOBS, entry.knobs, strict=True) if v is not None]
    reads += _weight_keys(entry)
    overrides = {}
    for key, eq, raw in items:
        if not eq or key not in reads:
            raise validate.ConfigError(
                f"correction {name}: option {key!r} not understood; allowed: "
                + (", ".join(f"{k}=value" for k in reads) or "none (this entry has no clip)")
            )
        low = 1.0 if key == "clip_c" else 0.0
        try:
            value = float(raw)
        except ValueError:
            value = None
        if value is None or not value > low or value == float("inf"):
            raise validate.ConfigError(
                f"correction {name} {key}: got {raw!r}; allowed: a finite number > {low:g}"
            )
        overrides[key] = value
    weights = {k: v for k, v in overrides.items() if k not in KNOBS}
    if weights:  # the weight's own checks (lower < upper, …), naming the composition
        try:
            mismatch._params(entry.correction.weight, dict(entry.correction.options) | weights)
        except validate.ConfigError as err:
            raise validate.ConfigError(f"correction {name}: {err}") from None
    low, high, _ = _merged(name, overrides)
    if entry.correction.clip == "dual" and high != low:
        raise validate.ConfigError(
            f"correction {name}: got eps_low {low!r}, eps_high {high!r}; allowed: equal values "
            "(gpolab's dual-clip rule is symmetric, as verl's defaults)"
        )
    return name, overrides


def _weight_keys(entry: Entry) -> list[str]:
    """The options of the entry's detached weight a spec may set (its mismatch entry's
    keywords whose default is a number or None: TRL's clip_max and clip_min)."""
    if entry.correction.weight == "none":
        return []
    defaults = mismatch.REGISTRY[entry.correction.weight].defaults
    return [k for k, v in defaults.items() if v is None or isinstance(v, float)]


def correction(spec: str) -> Correction:
    """The :class:`Correction` ``spec`` runs: its entry's, with the ``ppo`` clip read as
    ``higher`` (ε_low below 1, ε_high above) where the spec's ε_high differs from its ε_low
    (gpolab's ``ppo`` rule is symmetric in ε_low), and the spec's weight options over the
    entry's."""
    name, overrides = parse(spec)
    corr = REGISTRY[name].correction
    weights = {k: v for k, v in overrides.items() if k not in KNOBS}
    if weights:
        corr = dataclasses.replace(
            corr, options=tuple(sorted((dict(corr.options) | weights).items()))
        )
    low, high, _ = _merged(name, overrides)
    if corr.clip == "ppo" and high != low:
        return dataclasses.replace(corr, clip="higher")
    return corr


def knobs(spec: str) -> tuple:
    """(ε_low, ε_high, c) of ``spec``: its overrides over its framework's values (None where the
    entry reads none)."""
    return _merged(*parse(spec))


def _merged(name: str, overrides: dict) -> tuple:
    """(ε_low, ε_high, c): ``overrides`` over entry ``name``'s framework values."""
    return tuple(overrides.get(k, v) for k, v in zip(KNOBS, REGISTRY[name].knobs, strict=True))


def spec(name: str, overrides: dict | None = None) -> str:
    """The one spelling of (name, overrides) that :func:`parse` reads back: keys in
    :data:`KNOBS` order, values equal to the framework's left out."""
    entry = get(name)
    own = dict(zip(KNOBS, entry.knobs, strict=True))
    if entry.correction.weight != "none":
        own |= mismatch.REGISTRY[entry.correction.weight].defaults | dict(entry.correction.options)
    keys = [*KNOBS, *_weight_keys(entry)]
    items = [(k, overrides[k]) for k in keys if k in (overrides or {}) and overrides[k] != own[k]]
    return name + (f"[{','.join(f'{k}={float(v)!r}' for k, v in items)}]" if items else "")
