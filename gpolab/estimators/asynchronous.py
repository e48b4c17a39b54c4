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

from gpolab import validate
from gpolab.estimators import mismatch
from gpolab.estimators import offpolicy as rules

ANCHORS = ("trainer", "engine", "interpolated")  # π_prox at the step's start, μ, or AReaL's
# loglinear interpolation between μ and the detached π_θ by the rollouts' age
WEIGHT_KINDS = ("none", "truncate", "mask")  # mismatch entries usable as a detached weight


@dataclasses.dataclass(frozen=True)
class Correction:
    """One composition: ``ratio`` and ``clip`` (a rule of :mod:`gpolab.estimators.offpolicy`) of
    π_θ over the ``anchor`` (``trainer``: π_prox; ``engine``: μ; ``interpolated``: AReaL's
    log μ + α (log π_θ − log μ), π_θ detached, α from the rollouts' age), times the detached
    ``weight`` (an entry of :mod:`gpolab.estimators.mismatch` on (π_prox, μ), its ``options`` as
    sorted (name, value) pairs; ``none``: 1)."""

    ratio: str = "token"
    clip: str = "ppo"
    anchor: str = "trainer"
    weight: str = "none"
    options: tuple = ()

    def validate(self) -> None:
        validate.choice("ratio", self.ratio, tuple(rules.RATIOS))
        validate.choice("clip", self.clip, rules.rule_clips(self.ratio))
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
    "sis": Entry(
        Correction("sis", "none", "engine"),
        "gpolab's control: Π_t π_θ(y_t)/μ(y_t) over the engine's log-probs, unbiased for g at "
        "every θ (no framework ships it)",
        (None, None, None),
    ),
}


def get(name: str) -> Entry:
    """The registry entry ``name`` (one clear error naming the allowed ones)."""
    validate.choice("correction", name, tuple(REGISTRY))
    return REGISTRY[name]


KNOBS = ("eps_low", "eps_high", "clip_c")  # the clip knobs a spec may override


def parse(spec: str) -> tuple[str, dict]:
    """``"name"`` or ``"name[eps_low=…,eps_high=…,clip_c=…]"`` → (name, overrides): the knobs
    the entry's clip reads (a positive ε; c > 1), e.g. ``trl/async_grpo[eps_high=0.28]``."""
    name, items = validate.bracketed("correction", str(spec), "NAME or NAME[key=value,...]")
    entry = get(name)
    reads = [k for k, v in zip(KNOBS, entry.knobs, strict=True) if v is not None]
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
    low, high, _ = _merged(name, overrides)
    if entry.correction.clip == "dual" and high != low:
        raise validate.ConfigError(
            f"correction {name}: got eps_low {low!r}, eps_high {high!r}; allowed: equal values "
            "(gpolab's dual-clip rule is symmetric, as verl's defaults)"
        )
    return name, overrides


def correction(spec: str) -> Correction:
    """The :class:`Correction` ``spec`` runs: its entry's, with the ``ppo`` clip read as
    ``higher`` (ε_low below 1, ε_high above) where the spec's ε_high differs from its ε_low
    (gpolab's ``ppo`` rule is symmetric in ε_low)."""
    name, overrides = parse(spec)
    corr = REGISTRY[name].correction
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
    own = dict(zip(KNOBS, get(name).knobs, strict=True))
    items = [(k, overrides[k]) for k in KNOBS if k in (overrides or {}) and overrides[k] != own[k]]
    return name + (f"[{','.join(f'{k}={float(v)!r}' for k, v in items)}]" if items else "")
