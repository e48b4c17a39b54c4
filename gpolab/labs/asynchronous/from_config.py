"""Which asynchronous setup a trainer's own config runs (``gpolab asynchronous --from-config``):
:func:`read` loads a TRL ``AsyncGRPOConfig`` (JSON or YAML, as ``AsyncGRPOConfig.to_dict()``
or a launcher's YAML has it), a TRL ``GRPOConfig`` (synchronous: k = 0; its keys and values
checked by :mod:`gpolab.labs.mismatch.from_config`, whose vLLM IS entry names the weight), an
AReaL config or a config of verl's synchronous PPO trainer (hydra YAML) and
:func:`setup_of` names the composition (``trl/async_grpo`` with the user's clip, or verl's
decoupled or bypass composition), the oldest rollouts it trains on in updates, its minibatch
updates per batch, and every setting that changes the gradient but is not modelled.

verl (verl-project/verl 1dda039b9c63): the keys and values are read and checked by
:mod:`gpolab.labs.mismatch.from_config` (the same file its mismatch lab reads), whose correction
names the composition (no rollout correction: ``verl/decoupled``; token or sequence TIS at the
user's threshold, the spec's option; token IcePop at the preset's [0.5, 5]; bypass mode with the
vanilla loss: ``verl/bypass_ppo_clip``). The synchronous trainer draws each batch from the current
weights (k = 0, mismatched) and updates on its mini-batches in turn:
``trainer/ppo/v1/trainer_base.py::PPOTrainer._update_actor`` passes ``ppo_mini_batch_size`` (×
rollout.n) and ``ppo_epochs`` to ``workers/engine_workers.py``, whose
``tensordict_utils.make_iterator`` asserts that the mini batch divides the batch: m = ppo_epochs ·
data.train_batch_size / ppo_mini_batch_size (4 at the YAML defaults 1024 and 256). verl's
fully-async recipe (a file with ``async_training``: :func:`_verl_fully_async`) is one round per
policy version, its oldest rollouts ⌈staleness_threshold⌉ versions back.

Source: huggingface/trl f2cd57710ae3, ``trl/experimental/async_grpo/async_grpo_config.py::
AsyncGRPOConfig`` (its fields and defaults) on ``trl/trainer/base_config.py::_BaseConfig`` and
transformers' ``TrainingArguments`` (the keys of ``framework_keys.toml``'s ``[trl]`` table);
``async_grpo_trainer.py``: ``epsilon_high`` None means ``epsilon`` (``AsyncGRPOTrainer.__init__``);
``model_version`` grows by one per weight sync, every ``weight_sync_steps`` optimizer steps
(``_sync_weight``), and ``RolloutQueueDataset.__iter__`` drops a sample whose version lags the
trainer's by more than ``max_staleness``: a kept sample is at most (max_staleness + 1) ·
weight_sync_steps − 1 optimizer steps old.  Each sample is used by one optimizer step (m = 1).
An unknown key, or a wrong value of a key read, is one ConfigError naming it before anything
runs."""

from __future__ import annotations

import math

from gpolab.estimators import asynchronous as compositions
from gpolab.estimators import mismatch
from gpolab.labs.mismatch import from_config as mismatch_config
from gpolab.labs.mismatch.framework_settings import (
    ACTOR,
    BOOL,
    KEYS,
    TRL,
    TRL_OWN,
    VERL,
    _n,
    _one,
    bad,
    checked_values,
)
from gpolab.labs.mismatch.from_config import _near, load, mapping
from gpolab.validate import ConfigError

__all__ = ["read", "setup_of"]

SOURCE = "huggingface/trl f2cd57710ae3 trl/experimental/async_grpo/"
OWN = frozenset(KEYS["trl"]["async_grpo_config"])
ALL = OWN | frozenset(KEYS["trl"]["training_args"])
ALLOWED = (
    "a TRL AsyncGRPOConfig as JSON (.json) or YAML (.yaml, .yml): its fields (epsilon, "
    "epsilon_high, max_staleness, weight_sync_steps, ...) and TrainingArguments', or a "
    "GRPOConfig (use_vllm, loss_type, vllm_importance_sampling_*, ...); a verl config "
    "(algorithm.*, actor_rollout_ref.*, async_training.* for its fully-async recipe) or an "
    "AReaL one (actor.*, rollout.*) as YAML"
)
TRL_ASYNC = {  # key: (AsyncGRPOConfig's default, check)
    "epsilon": (0.2, _n(0, open_low=True)),
    "epsilon_high": (None, _n(0, none=True, open_low=True)),
    "max_staleness": (4, _n(0, integer=True)),
    "weight_sync_steps": (1, _n(1, integer=True)),
    "num_generations": (8, _n(2, integer=True)),
    "temperature": (1.0, _n(0, open_low=True)),
    "learning_rate": (1e-6, _n(0)),
}
UNMODELLED = (  # settings that change the gradient, and what the lab does instead
    (
        "advantages",
        "TRL scales by the group's population std (eps 1e-8); the lab's are leave-one-out",
    ),
    ("learning_rate", "AdamW's step; the lab takes SGD steps of size eta (its grid)"),
    (
        "aggregation",
        "TRL's token mean over each micro-batch across ranks; the lab's responses "
        "all have T tokens",
    ),
)


def read(path) -> dict:
    """The settings of an AsyncGRPOConfig or verl file (verl: dotted keys), checked as
    :func:`setup_of` checks them; one ConfigError naming the file (and the key) for an
    unreadable, unknown or invalid file."""
    data = load(path, ALLOWED)
    where = f"{path}: "
    data = mapping(data, where, ALLOWED, OWN)
    if _is_verl(data):
        if _is_fully_async(mismatch_config._flat(data)):
            data = _recipe(data, where)  # the recipe's YAML under the user's keys
        flat = mismatch_config.checked(data, where)  # every verl key and value, naming the file
        setup_of(flat, where)
        return flat
    if _is_areal(data):
        _areal_keys(data, where)
        setup_of(data, where)
        return dict(data)
    if _is_trl_grpo(data):
        setup_of(data, where)  # GRPOConfig's keys and values, checked by the mismatch reader
        return dict(data)
    for key in data:
        if key not in ALL:
            raise ConfigError(
                f"{where}{key}: unknown AsyncGRPOConfig key{_near(str(key), ALL)}; allowed: the "
                "fields AsyncGRPOConfig(**d) accepts, with TrainingArguments' "
                "(gpolab/labs/mismatch/framework_keys.toml)"
            )
    setup_of(data, where)
    return dict(data)


GRPO_ONLY = TRL_OWN - OWN  # GRPOConfig's own fields that AsyncGRPOConfig has not


def _is_trl_grpo(data: dict) -> bool:
    """A TRL GRPOConfig: some key is GRPOConfig's and not AsyncGRPOConfig's (a file of keys both
    have, or of TrainingArguments' only, is read as an AsyncGRPOConfig)."""
    return any(str(k) in GRPO_ONLY for k in data)


def _is_areal(data: dict) -> bool:
    return isinstance(data.get("actor"), dict) and not _is_verl(data)


def _is_verl(data: dict) -> bool:
    top = {str(k).lstrip("+").split(".")[0] for k in data}
    return bool(top & {"algorithm", "actor_rollout_ref", "async_training"})


def setup_of(settings: dict, where: str = "") -> dict:
    """correction (a spec of :mod:`gpolab.estimators.asynchronous`), staleness (the oldest
    kept rollouts, in optimizer steps), m (updates per batch), G (the config's group size), text
    (one sentence) and notes (each setting not modelled, with what the lab does instead)."""
    if _is_verl(settings):
        if _is_fully_async(settings):
            return _verl_fully_async(settings, where)
        return _verl(settings, where)
    if _is_areal(settings):
        return _areal(settings, where)
    if _is_trl_grpo(settings):
        return _trl_grpo(settings, where)
    v = checked_values(settings, TRL_ASYNC, where)
    if v["epsilon"] >= 1:
        raise bad(
            where,
            "epsilon",
            v["epsilon"],
            "a number in (0, 1): the ratio's lower clip is 1 − epsilon",
        )
    low = v["epsilon"]
    high = low if v["epsilon_high"] is None else v["epsilon_high"]
    spec = compositions.spec("trl/async_grpo", {"eps_low": low, "eps_high": high})
    oldest = (v["max_staleness"] + 1) * v["weight_sync_steps"] - 1
    text = (
        f"TRL AsyncGRPOTrainer with epsilon {low:g}, epsilon_high {high:g}: PPO clip against the "
        f"vLLM log-probs, no IS weight; rollouts up to {oldest} optimizer steps old "
        f"(max_staleness {v['max_staleness']}, weight_sync_steps {v['weight_sync_steps']}), "
        f"each used once; gpolab measures it as {spec} at k <= {oldest}, m = 1"
    )
    notes = [f"not modelled: {k}: {why}" for k, why in UNMODELLED]
    notes.append(
        f"num_generations {v['num_generations']}: the lab's G is its own --G (pass --G "
        f"{v['num_generations']} for your group size)"
    )
    if v["temperature"] != 1.0:
        notes.append(
            f"temperature {v['temperature']:g}: TRL scores log_softmax(logits/T) and vLLM returns "
            "processed log-probs, so it adds no mismatch; the lab's --mismatch is the engine's"
        )
    notes.append(
        "a weight sync pauses vLLM and keeps its requests, so a response may span two versions "
        "(the lab's --switch)"
    )
    return dict(
        correction=spec, staleness=oldest, m=1, G=v["num_generations"], text=text, notes=notes
    )


TRL_STEPS = {  # the keys m is read from: GRPOConfig's and TrainingArguments' defaults
    "gradient_accumulation_steps": (1, _n(1, integer=True)),
    "steps_per_generation": (None, _n(1, integer=True, none=True)),
    "generation_batch_size": (None, _n(1, integer=True, none=True)),
    "per_device_train_batch_size": (8, _n(1, integer=True)),
}
PPO_LOSSES = ("dapo", "grpo", "bnpo", "dr_grpo", "luspo")  # TRL's PPO-clip losses


def _trl_grpo(settings: dict, where: str) -> dict:
    """TRL's GRPOTrainer (synchronous: k = 0): PPO clip over old_per_token_logps times its vLLM
    IS weight (the mismatch reader's entry and the user's bounds), m = steps_per_generation ·
    num_iterations / gradient_accumulation_steps optimizer steps per generation batch."""
    try:
        found = mismatch_config.correction_of(settings)
    except ConfigError as err:
        raise ConfigError(f"{where}{err}") from None
    v = checked_values(settings, TRL | TRL_STEPS, where)
    loss, level = v["loss_type"], v["importance_sampling_level"]
    if loss not in PPO_LOSSES or level != "token":
        key, value = (
            ("loss_type", loss) if loss not in PPO_LOSSES else ("importance_sampling_level", level)
        )
        raise bad(
            where,
            key,
            value,
            f"loss_type one of {', '.join(PPO_LOSSES)} with importance_sampling_level token "
            "(the asynchronous lab runs TRL's token-level PPO-clip losses; `gpolab mismatch "
            "--from-config` measures the others at the scored θ)",
        )
    low = v["epsilon"]
    high = low if v["epsilon_high"] is None else v["epsilon_high"]
    if low >= 1:
        raise bad(
            where, "epsilon", low, "a number in (0, 1): the ratio's lower clip is 1 − epsilon"
        )
    name = "trl/grpo" if found["name"] == "none" else f"trl/grpo_{found['name'].split('/')[1]}"
    weight = {k: x for k, x in found["overrides"].items() if x is not None}
    spec = compositions.spec(name, {"eps_low": low, "eps_high": high, **weight})
    gas, spg, gbs = (
        v[k]
        for k in ("gradient_accumulation_steps", "steps_per_generation", "generation_batch_size")
    )
    scored = "at the scored θ"  # the mismatch lab's notes on its first update; here m covers it
    drop = (scored, "num_iterations", "use_vllm false")  # said here for this lab
    notes = [n for n in found["notes"] if not any(d in n for d in drop)]
    if spg is None and gbs is not None:  # GRPOConfig.__post_init__ with one process
        spg = gbs // v["per_device_train_batch_size"]
        notes.append(
            f"generation_batch_size {gbs}: steps_per_generation {spg} on one process "
            "(TRL divides by per_device_train_batch_size × the number of processes)"
        )
    spg = gas if spg is None else spg
    micro = spg * v["num_iterations"]
    if micro % gas:
        raise bad(
            where,
            "steps_per_generation",
            spg,
            f"steps_per_generation × num_iterations a multiple of gradient_accumulation_steps "
            f"({gas}): the lab's m is a whole number of optimizer steps per generation batch",
        )
    m = micro // gas
    if weight.get("off_policy_mask") is not None and m > 1:
        notes.append(
            f"off_policy_mask_threshold {weight['off_policy_mask']}: TRL compares μ with the "
            "current π_θ at each step; the lab computes the weight once per batch, at π_prox (the "
            "same at the batch's first update)"
        )
    clip_min, clip_max = (
        v["vllm_importance_sampling_clip_min"],
        v["vllm_importance_sampling_clip_max"],
    )
    is_weight = (
        "no vLLM IS weight"
        if name == "trl/grpo"
        else f"the vLLM IS weight {v['vllm_importance_sampling_mode']} [{clip_min}, {clip_max}]"
    )
    text = (
        f"TRL GRPOTrainer, loss_type {loss}, PPO clip (epsilon {low:g}, epsilon_high {high:g}) "
        f"over the trainer's old log-probs times {is_weight}; synchronous (k = 0), {m} "
        "optimizer step(s) per generation batch "
        f"(steps_per_generation {spg}, num_iterations {v['num_iterations']}, "
        f"gradient_accumulation_steps {gas}); gpolab measures it as {spec} at k = 0, m = {m}"
    )
    if not v["use_vllm"]:
        notes.append(
            "use_vllm false: the trainer samples from π_θ itself, with no engine mismatch (read "
            "the rows of the lab's smallest --mismatch, or pass --mismatch noise:0)"
        )
    notes.append(
        f"num_generations {v['num_generations']}: the lab's G is its own --G (pass --G "
        f"{v['num_generations']} for your group size)"
    )
    return dict(correction=spec, staleness=0, m=m, G=v["num_generations"], text=text, notes=notes)


VERL_BATCH = {  # the batch sizes m is read from (verl's YAML defaults)
    "data.train_batch_size": (1024, _n(1, integer=True)),
    f"{ACTOR}.ppo_mini_batch_size": (256, _n(1, integer=True)),
    "actor_rollout_ref.rollout.n": (1, _n(1, integer=True)),
}
VERL_WEIGHTS = {  # the mismatch entry → the composition (a TIS threshold is its spec's option)
    "none": "verl/decoupled",
    "verl/token_tis": "verl/decoupled_token_is",
    "verl/seq_tis": "verl/decoupled_seq_is",
    "verl/token_icepop": "verl/decoupled_token_icepop",
}


def _verl_weight(found: dict) -> tuple[str | None, dict]:
    """(the decoupled composition of the mismatch reader's entry, its weight's options): a
    number (a TIS threshold) becomes the spec's option; bounds (IcePop's pair) must be the
    preset's, which no spec option sets."""
    name = VERL_WEIGHTS.get(found["name"])
    if name is None:
        return None, {}
    own = compositions.REGISTRY[name].correction
    preset = mismatch.REGISTRY[own.weight].defaults if own.weight != "none" else {}
    options = {}
    for key, value in found["overrides"].items():
        if isinstance(value, tuple):
            if value != preset.get(key):
                return None, {}
        else:
            options[key] = value
    return name, options


def _verl(flat: dict, where: str) -> dict:
    """verl's synchronous trainer: the composition its rollout correction and loss give, k = 0,
    m = ppo_epochs · train_batch_size / ppo_mini_batch_size."""
    found = mismatch_config.correction_of(flat)
    v = checked_values(flat, VERL | VERL_BATCH, where)
    batch, mini = v["data.train_batch_size"], v[f"{ACTOR}.ppo_mini_batch_size"]
    if batch < mini or batch % mini:
        raise bad(
            where,
            f"{ACTOR}.ppo_mini_batch_size",
            mini,
            f"a divisor of data.train_batch_size ({batch}), as verl asserts",
        )
    m = v[f"{ACTOR}.ppo_epochs"] * batch // mini
    low = v[f"{ACTOR}.clip_ratio_low"]
    high = v[f"{ACTOR}.clip_ratio_high"]
    ratio = v[f"{ACTOR}.clip_ratio"]
    low, high = (ratio if e is None else e for e in (low, high))
    bypass = v["algorithm.rollout_correction.bypass_mode"]
    loss = v["actor_rollout_ref.actor.policy_loss.loss_mode"]
    options = {}
    if bypass:
        name = "verl/bypass_ppo_clip" if found["name"] == "verl/bypass_ppo_clip" else None
    else:
        name, options = _verl_weight(found) if loss == "vanilla" else (None, {})
    mode = "bypass" if bypass else "decoupled"
    if name is None:
        why = (
            f"loss_mode {loss}: gpolab's verl compositions run the vanilla (dual-clip PPO) loss"
            if loss != "vanilla"
            else f"{found['text']} has no asynchronous composition (gpolab's: no correction, "
            "token or sequence TIS at any threshold, token IcePop [0.5, 5], bypass PPO)"
        )
        raise ConfigError(f"{where}{why}")
    if low != high:
        raise ConfigError(
            f"{where}{ACTOR}.clip_ratio_low {low!r} and clip_ratio_high {high!r}: gpolab's "
            "dual-clip rule is symmetric; allowed: equal values (verl's defaults)"
        )
    knobs = {"eps_low": low, "eps_high": high, "clip_c": v[f"{ACTOR}.clip_ratio_c"]}
    spec = compositions.spec(name, knobs | options)
    text = (
        f"verl's synchronous trainer in {mode} mode ({found['text'].rstrip('.')}); each batch "
        f"drawn by the current weights and used over m = {m} mini-batch updates "
        f"(ppo_epochs {v[f'{ACTOR}.ppo_epochs']} × train_batch_size {batch} / "
        f"ppo_mini_batch_size {mini}); gpolab measures it as {spec} at k = 0, m = {m}"
    )
    notes = [n for n in found["notes"] if n.startswith("not modelled")]
    notes.append(f"rollout.n {v['actor_rollout_ref.rollout.n']}: the lab's G is its own --G")
    return dict(
        correction=spec,
        staleness=0,
        m=m,
        G=v["actor_rollout_ref.rollout.n"],
        text=text,
        notes=notes,
    )


ASYNC = "async_training"
FULLY_ASYNC = {  # verl/experimental/fully_async_policy/config/fully_async_ppo_trainer.yaml
    f"{ASYNC}.staleness_threshold": (0.1, _n(0)),  # the rollouter asserts ≥ 0
    f"{ASYNC}.trigger_parameter_sync_step": (4, _n(1, integer=True)),  # asserted ≥ 1
    f"{ASYNC}.require_batches": (1, _n(1, integer=True)),
    f"{ASYNC}.partial_rollout": (True, BOOL),
    f"{ASYNC}.use_trainer_do_validate": (False, BOOL),
    f"{ASYNC}.use_dynamic_resource_scheduling": (False, BOOL),
    f"{ASYNC}.dynamic_schedule_policy": ("default", None),
    f"{ASYNC}.dynamic_schedule_deactivate_ratio": (0.3, _n(0)),
    f"{ASYNC}.dynamic_schedule_enable_rebalance": (True, BOOL),
    f"{ASYNC}.concurrent_samples_per_replica": (16, _n(1, integer=True)),
    "data.train_batch_size": (0, _one(0)),  # the rollouter asserts 0 (the trainer pulls)
    "data.gen_batch_size": (1, _one(1)),  # asserted 1
}
RECIPE = {  # the recipe's YAML over ppo_trainer.yaml's defaults, where the file leaves them
    "algorithm.rollout_correction.bypass_mode": True,
    "actor_rollout_ref.rollout.calculate_log_probs": True,
    "actor_rollout_ref.actor.use_rollout_log_probs": True,
}


def _is_fully_async(flat: dict) -> bool:
    return any(str(k).lstrip("+").split(".")[0] == ASYNC for k in flat)


def _recipe(data: dict, where: str) -> dict:
    """A fully-async config's settings with the recipe's own defaults (:data:`RECIPE`) where the
    file has none, its ``async_training`` keys checked against the recipe's YAML (hydra's struct
    config refuses others) and their values as the recipe asserts them."""
    flat = mismatch_config._flat(data)
    for key in flat:
        if key.startswith(ASYNC + ".") and key not in FULLY_ASYNC:
            known = [k for k in FULLY_ASYNC if k.startswith(ASYNC)]
            raise ConfigError(
                f"{where}{key}: unknown key of verl's fully-async recipe{_near(key, known)}; "
                "allowed: the async_training fields of fully_async_ppo_trainer.yaml (verl "
                "1dda039b9c63)"
            )
    checked_values(flat, FULLY_ASYNC, where)
    if "data.train_batch_size" not in flat:
        raise ConfigError(
            f"{where}data.train_batch_size: absent, so ppo_trainer.yaml's 1024; allowed: 0, as "
            "verl's fully-async rollouter asserts (its trainer pulls require_batches × "
            "ppo_mini_batch_size prompts per local step)"
        )
    return _with_recipe(flat)


def _with_recipe(flat: dict) -> dict:
    """``flat`` over the recipe's defaults (:data:`RECIPE`), unless the file sets the rollout
    correction to null (off, as the user says)."""
    rc = "algorithm.rollout_correction"
    return flat if rc in flat and flat[rc] is None else {**RECIPE, **flat}


def _verl_fully_async(flat: dict, where: str) -> dict:
    """verl's fully-async recipe (verl/experimental/fully_async_policy, 1dda039b9c63): the
    composition the synchronous reader gives for its loss (bypass mode by the recipe's default),
    one policy version per ``trigger_parameter_sync_step`` local steps of ``require_batches`` ×
    ``ppo_epochs`` mini-batch updates (m), and rollouts up to ⌈staleness_threshold⌉ versions
    old (gpolab's reading of the rollouter's sample budget)."""
    flat = _with_recipe(flat)
    v = checked_values(flat, VERL_BATCH | FULLY_ASYNC, where)
    K, req = v[f"{ASYNC}.trigger_parameter_sync_step"], v[f"{ASYNC}.require_batches"]
    epochs = checked_values(flat, VERL, where)[f"{ACTOR}.ppo_epochs"]
    m = K * req * epochs
    s = v[f"{ASYNC}.staleness_threshold"]
    versions = math.ceil(s)
    sync = {**flat, "data.train_batch_size": m * v[f"{ACTOR}.ppo_mini_batch_size"] // epochs}
    base = _verl(sync, where)  # the composition, its clip and weight: the synchronous reader's
    spec, oldest = base["correction"], versions * m
    mode = "bypass" if "bypass" in spec else "decoupled"
    text = (
        f"verl's fully-async recipe in {mode} mode: {spec.split('[')[0]}'s composition, one "
        f"weight sync every {K} local steps of {req} × {epochs} mini-batch update(s) (m = {m} "
        f"updates per policy version), staleness_threshold {s:g}: rollouts up to {versions} "
        f"version(s) old; gpolab measures it as {spec} at k <= {oldest}, m = {m}"
    )
    notes = list(base["notes"])
    notes.append(
        f"staleness_threshold {s:g}: the rollouter starts at most (1 + s) × {K} × "
        f"require_batches × ppo_mini_batch_size samples per version, counting those still queued "
        "or in flight at the sync (FullyAsyncRollouter.set_max_required_samples, reset_staleness); "
        "gpolab's reading: when the rollouter outpaces the trainer, about a share min(s, 1) of a "
        f"version's samples is carried over from the one before (k = {m} at the version's start), "
        "the rest are fresh (k = 0), and a threshold above 1 reaches ⌈s⌉ versions back; it "
        "bounds counts, not ages, so the rows at k = 0 and at your oldest k bracket your setup"
    )
    if v[f"{ASYNC}.partial_rollout"]:
        notes.append(
            "partial_rollout true: a response interrupted by a weight sync resumes under the new "
            "weights, its early tokens one version older than its later ones, each with its own "
            "log-prob (the lab's --switch moves the engine one update on, not one version)"
        )
    if mode == "decoupled":
        notes.append(
            "decoupled mode: π_old is the version of the last sync (FullyAsyncTrainer."
            "_compute_old_log_prob restores it), the lab's π_prox at the round's start with one "
            "round per version"
        )
    return dict(base, staleness=oldest, m=m, text=text, notes=notes)


AREAL = KEYS["areal"]
AREAL_LEGACY = ("behave_imp_weight_cap", "behave_imp_weight_mode")  # cli_args.py L2915


def _areal_keys(data: dict, where: str) -> None:
    """Every key of the top level, ``actor``, ``rollout`` and ``actor.rejection_sampling``
    against AReaL's dataclasses (unknown: one error, as OmegaConf's structured merge raises)."""
    sections = (
        ("", data, AREAL["top"]),
        ("actor.", data.get("actor"), AREAL["actor"]),
        ("rollout.", data.get("rollout"), AREAL["rollout"]),
        (
            "actor.rejection_sampling.",
            (data.get("actor") or {}).get("rejection_sampling"),
            AREAL["rejection_sampling"],
        ),
    )
    for prefix, section, known in sections:
        if section is None:
            continue
        if not isinstance(section, dict):
            raise bad(where, prefix.rstrip("."), section, "a mapping")
        for key in section:
            if prefix == "actor." and key in AREAL_LEGACY:
                raise bad(
                    where,
                    f"actor.{key}",
                    section[key],
                    "actor.rejection_sampling (AReaL "
                    "raises for the removed key: _migrate_legacy_rejection_sampling)",
                )
            if key not in known:
                full = [prefix + k for k in known]
                raise ConfigError(
                    f"{where}{prefix}{key}: unknown AReaL key{_near(prefix + str(key), full)}; "
                    f"allowed: the fields of its dataclass (AReaL 4aef98d8d818; "
                    "gpolab/labs/mismatch/framework_keys.toml)"
                )


AREAL_ACTOR = {  # key: (PPOActorConfig's default, check); cli_args.py L1389-1585
    "use_decoupled_loss": (False, _one(True, False)),
    "recompute_logprob": (False, _one(True, False)),
    "prox_logp_method": ("recompute", _one("recompute", "loglinear", "metrics")),
    "eps_clip": (0.2, _n(0, 1, open_low=True)),
    "eps_clip_higher": (None, _n(0, none=True, open_low=True)),
    "c_clip": (None, _n(1, none=True, open_low=True)),  # functional.py asserts c_clip > 1
    "ppo_n_minibatches": (4, _n(1, integer=True)),
    "importance_sampling_level": ("token", _one("token", "sequence")),
    "use_sapo_loss": (False, _one(True, False)),
}
AREAL_MASK = {
    "level": "token",
    "action": "mask",
    "metric": "ratio",
    "agg": "mean",
    "upper": 5.0,
    "lower": None,
}  # RejectionSamplingConfig's defaults (L1252-1308)


def _areal(data: dict, where: str) -> dict:
    """AReaL's composition, its clip, m = ppo_n_minibatches, k = max_head_offpolicyness · m."""
    actor = checked_values(data.get("actor") or {}, AREAL_ACTOR, f"{where}actor.")
    rollout = checked_values(
        data.get("rollout") or {},
        {"max_head_offpolicyness": (0, _n(0, integer=True))},
        f"{where}rollout.",
    )
    rs = (data.get("actor") or {}).get("rejection_sampling")
    for key, value in (rs or {}).items():
        if value != AREAL_MASK[key]:
            raise bad(
                where,
                f"actor.rejection_sampling.{key}",
                value,
                f"{AREAL_MASK[key]} (gpolab's areal/decoupled_mask is the block's defaults)",
            )
    decoupled = actor["use_decoupled_loss"]
    method = actor["prox_logp_method"]
    reasons = [
        (actor["use_sapo_loss"], "actor.use_sapo_loss true: SAPO has no gpolab composition"),
        (
            actor["importance_sampling_level"] != "token",
            "actor.importance_sampling_level sequence: no gpolab composition",
        ),
        (
            actor["c_clip"] is not None,
            "actor.c_clip set (a dual clip): gpolab's AReaL compositions have none",
        ),
        (
            decoupled and method == "loglinear" and rs is not None,
            "A-3PO with a rejection_sampling block: no gpolab composition",
        ),
    ]
    for wrong, why in reasons:
        if wrong:
            raise ConfigError(f"{where}{why}")
    if not decoupled:
        name = "areal/decoupled" if actor["recompute_logprob"] else "trl/async_grpo"
    elif method == "loglinear":
        name = "areal/a3po"
    else:
        name = "areal/decoupled_mask" if rs is not None else "areal/decoupled"
    low = actor["eps_clip"]
    high = low if actor["eps_clip_higher"] is None else actor["eps_clip_higher"]
    spec = compositions.spec(name, {"eps_low": low, "eps_high": high})
    m = actor["ppo_n_minibatches"]
    ofp = rollout["max_head_offpolicyness"]
    anchor = {
        "trl/async_grpo": "the engine's log-probs (use_decoupled_loss false, recompute_logprob "
        "false: the composition of trl/async_grpo)",
        "areal/decoupled": "the trainer's recomputed log-probs",
        "areal/decoupled_mask": "the recomputed log-probs, tokens with π_prox/μ > 5 masked",
        "areal/a3po": "A-3PO's log-linear proximal policy",
    }[name]
    text = (
        f"AReaL PPO (eps_clip {low:g}, upper {high:g}) against {anchor}; {m} minibatch updates "
        f"per training step (one version), rollouts up to {ofp} versions = {ofp * m} updates old "
        f"(max_head_offpolicyness {ofp}); gpolab measures it as {spec} at k <= {ofp * m}, m = {m}"
    )
    notes = [
        "not modelled: advantages: AReaL's adv_norm and reward settings; the lab's are "
        "leave-one-out",
        "AReaL bounds the rollouts it starts (StalenessManager.get_capacity), not each trained "
        "sample's age: a slow sample can be older than max_head_offpolicyness",
    ]
    if name == "areal/a3po" and m > 1:
        notes.append(
            "A-3PO's α reads versions, one per training step of m updates; the lab counts one "
            "version per update, so its α at k updates differs from AReaL's at k/m versions"
        )
    if rs is not None and not decoupled:
        notes.append(
            "actor.rejection_sampling without use_decoupled_loss: AReaL ignores it (it warns)"
        )
    return dict(correction=spec, staleness=ofp * m, m=m, G=None, text=text, notes=notes)
