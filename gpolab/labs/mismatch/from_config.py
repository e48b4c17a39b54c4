"""Which mismatch correction a trainer's own config runs: :func:`read` loads a TRL GRPOConfig
(JSON or YAML, as ``GRPOConfig.to_dict()`` or ``trl grpo --config`` has it) or a verl config
(hydra YAML, nested or dotted keys); :func:`correction_of` names the
:data:`gpolab.estimators.mismatch.REGISTRY` entry with the user's own values as overrides, or
None with the reason, and names each setting that changes the gradient but is not modelled.

Keys: every key is checked against the framework's own list (``framework_keys.toml``, read from
the sources it names).  TRL: GRPOConfig's fields with TrainingArguments' (what ``GRPOConfig(**d)``
accepts under a supported transformers) and the script, model and dataset arguments ``trl grpo
--config`` accepts.  verl: the fields of the dataclasses behind the sections read
(``algorithm``, ``algorithm.rollout_correction``, ``actor_rollout_ref.actor``, its
``policy_loss``, ``actor_rollout_ref.rollout``), which verl's ``omega_conf_to_dataclass`` rejects
any other key of.  An unknown or duplicate key, a mapping or a wrong type where a read key wants
a value, and each combination the framework raises for at start-up is one ConfigError naming the
key, before anything runs.

Defaults: an absent key takes what a run of the framework gets.  TRL f2cd57710ae3: GRPOConfig's
defaults.  verl 1dda039b9c63: its YAML defaults (``trainer/config/ppo_trainer.yaml`` and the
files of its defaults list: ``algorithm/rollout_correction.yaml`` ``rollout_is: null``,
``rollout/rollout.yaml`` ``calculate_log_probs: True``, ``trainer.use_v1: true``), not its Python
dataclass defaults (``RolloutCorrectionConfig.rollout_is = "sequence"``,
``RolloutConfig.calculate_log_probs = False``): verl runs through hydra, whose composed YAML
``omega_conf_to_dataclass`` merges over the dataclass defaults, so a YAML-launched run gets null;
the Python defaults reach only code that builds the dataclass itself."""

from __future__ import annotations

import difflib
import json
import os
import re
from pathlib import Path

import yaml

from gpolab.estimators import mismatch
from gpolab.labs.mismatch.framework_settings import (
    ACTOR,
    ALLOWED,
    DEEPEST,
    F32_MAX,
    LOO,
    PAIRED,
    POLICY,
    RATIO_1,
    RC,
    ROLLOUT,
    RS_OPTIONS,
    SECTIONS,
    SEQ_LOSS,
    TRL,
    TRL_AGG,
    TRL_ALL,
    TRL_OWN,
    VERL,
    bad,
    checked_values,
    is_threshold,
    rs_thresholds,
)
from gpolab.validate import ConfigError

__all__ = ["read", "correction_of"]

# ------------------------------------------------------------------------- reading a file


class _Loader(yaml.SafeLoader):
    """yaml.safe_load's loader with a duplicate key an error (OmegaConf's loader, which verl's
    hydra uses, rejects one) and 1e-4 a float (as OmegaConf and TRL's argparse types read it;
    YAML 1.1 reads a string)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _unique(pairs) -> dict:
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


LOADERS = {
    ".json": ("JSON", lambda text: json.loads(text, object_pairs_hook=_unique)),
    ".yaml": ("YAML", lambda text: yaml.load(text, _Loader)),  # noqa: S506 (a safe loader)
}
LOADERS[".yml"] = LOADERS[".yaml"]


def stamp(path: str):
    """The file's modification time (ns), or None where it cannot be read (the reader then gives
    the one error naming it): a key that re-reads a config file when it changes."""
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def load(path, allowed: str = ALLOWED):
    """The parsed content of a JSON or YAML config file; one :class:`ConfigError` naming the file
    (and ``allowed``) for an unknown suffix, an unreadable file or text that does not parse."""
    path = Path(path)
    kind, parse = LOADERS.get(path.suffix.lower(), (None, None))
    if parse is None:
        got = path.suffix or "(no suffix)"
        raise ConfigError(f"{path}: unknown format {got!r}; allowed: {allowed}")
    try:
        return parse(path.read_text())
    except OSError as err:
        raise ConfigError(f"{path}: cannot read ({err.strerror}); allowed: {allowed}") from None
    except UnicodeDecodeError as err:
        why = f"not UTF-8 text (byte {err.start})"
        raise ConfigError(f"{path}: {why}; allowed: {allowed}") from None
    except (ValueError, yaml.YAMLError) as err:
        why = str(getattr(err, "problem", None) or err).splitlines()[0]
        mark = getattr(err, "problem_mark", None)
        why += "" if mark is None else f", line {mark.line + 1}"
        raise ConfigError(f"{path}: not valid {kind} ({why}); allowed: {allowed}") from None


def read(path) -> dict:
    """The settings of a TRL or verl config file as one dict (verl: dotted keys), checked as
    :func:`correction_of` checks them; one :class:`ConfigError` naming the file (and the key)
    for an unreadable, unknown, foreign or invalid file."""
    return checked(load(path), f"{path}: ")


def checked(data, where: str) -> dict:
    """:func:`read`'s settings of a loaded file's content ``data``: every check, each error
    starting with ``where`` (the file)."""
    flat, framework = _settings(data, where)
    (_trl if framework == "trl" else _verl)(flat, where)
    return flat


def _flat(data: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in data.items():
        key = prefix + str(key).lstrip("+")  # hydra's "+key=value" appends
        out.update(_flat(value, key + ".") if isinstance(value, dict) and value else {key: value})
    return out


def _near(key: str, known) -> str:
    near = difflib.get_close_matches(key, list(known), 1, 0.8)
    return f" (did you mean {near[0]}?)" if near else ""


def mapping(data, where: str, allowed: str, own) -> dict:
    """``data`` as a config's mapping: a Trainer's dict holding the settings under
    ``training_args`` or ``args`` (and none of the config's ``own`` keys) unwrapped; anything but a
    mapping is one ConfigError."""
    if not isinstance(data, dict):
        got = type(data).__name__
        raise ConfigError(f"{where}a {got} at the top level, not a mapping; allowed: {allowed}")
    for inner in ("training_args", "args"):
        if isinstance(data.get(inner), dict) and not own & set(data):
            data = data[inner]
    return data


def _settings(data, where: str) -> tuple[dict, str]:
    """(settings, "trl" or "verl"): verl's flattened to dotted keys, TRL's top-level keys as
    given; a Trainer's dict holding them under ``training_args`` or ``args`` is unwrapped."""
    data = mapping(data, where, ALLOWED, TRL_OWN)
    top = {str(k).lstrip("+").split(".")[0] for k in data}
    verl = bool(top & {"algorithm", "actor_rollout_ref"})
    trl = any(k in TRL_OWN or str(k).startswith("vllm_importance_sampling") for k in data)
    if verl == trl:
        what = "both TRL and verl keys" if verl else "neither TRL nor verl keys"
        hints = "".join(_near(str(k), TRL_OWN) for k in data)[:200]
        raise ConfigError(f"{where}{what}{hints}; allowed: {ALLOWED}")
    if verl:
        return _flat(data), "verl"
    for key in data:
        if key not in TRL_ALL:
            raise ConfigError(
                f"{where}{key}: unknown TRL key{_near(str(key), TRL_ALL)}; allowed: the fields "
                "GRPOConfig(**d) accepts (with TrainingArguments'), or trl grpo --config's "
                "(gpolab/labs/mismatch/framework_keys.toml)"
            )
    return dict(data), "trl"


# ------------------------------------------------------------------------- the mapping


def correction_of(settings: dict) -> dict:
    """name (a REGISTRY key or None), overrides (``estimate_weights`` keywords from the user's
    values), framework, text (one sentence), unmodelled (the settings that change the gradient
    and are not modelled) and notes (caveats, the reason first when None; each unmodelled
    setting's detail last)."""
    flat, framework = _settings(settings, "")
    name, overrides, what, notes, unmodelled = (_trl if framework == "trl" else _verl)(flat, "")
    labels = [label for label, _ in unmodelled]
    if name is None:
        text = f"{framework}: {what}; no gpolab entry measures it ({notes[0]})."
    else:
        given = ", ".join(f"{k}={v}" for k, v in overrides.items())
        text = f"{framework}: {what}; gpolab measures it as {name}" + (f" ({given})" * bool(given))
        text += f"; not modelled, each changes your gradient: {', '.join(labels)}" * bool(labels)
        text += "."
    notes = notes + [f"not modelled: {label}: {detail}" for label, detail in unmodelled]
    return dict(
        name=name,
        overrides=overrides,
        framework=framework,
        text=text,
        unmodelled=labels,
        notes=notes,
    )


def _checked(name, overrides, where):
    """The entry's own checks of the user's values (as estimate_weights would), naming the file."""
    if name is not None:
        try:
            mismatch._params(name, overrides)
        except ConfigError as err:
            raise ConfigError(f"{where}{err}") from None


def _trl(s: dict, where: str):
    v = checked_values(s, TRL, where)
    loss, mode, level = (
        v["loss_type"],
        v["vllm_importance_sampling_mode"],
        v["importance_sampling_level"],
    )
    on = v["use_vllm"] and v["vllm_importance_sampling_correction"]
    notes = []
    if (cap := v["vllm_importance_sampling_cap"]) is not None:  # GRPOConfig.__post_init__
        v["vllm_importance_sampling_clip_max"] = cap
        notes.append(f"vllm_importance_sampling_cap {cap} (deprecated) is clip_max, as in TRL")
    clip_min, clip_max = _clips(v)
    _trl_raises(s, v, where)
    unmodelled = _trl_unmodelled(v, on)
    if not on:
        why = (
            "vLLM IS correction off (vllm_importance_sampling_correction false): `none`"
            if v["use_vllm"]
            else "use_vllm false: the trainer samples from π_θ itself, no IS correction (`none`)"
        )
        whose = "vLLM rollouts, uncorrected" if v["use_vllm"] else "the trainer's own rollouts"
        return "none", {}, f"loss_type {loss} on {whose}", [why, *notes], unmodelled
    if clip_max is None:
        notes.append(
            "vllm_importance_sampling_clip_max None: no upper bound; gpolab passes float32's "
            "largest value, so only an overflowed ratio (inf, which TRL keeps) differs"
        )
    over = {"clip_max": F32_MAX if clip_max is None else clip_max, "clip_min": clip_min}
    if (delta := v["off_policy_mask_threshold"]) is not None:
        over["off_policy_mask"] = delta
    what = f"loss_type {loss} with the vLLM IS weight {mode} [{clip_min}, {clip_max}]"
    what += f" and the off-policy sequence mask at {delta}" * (delta is not None)
    what += ", importance_sampling_level sequence" * (level == "sequence")
    name, over, notes = _trl_entry(v, loss, mode, level, over, notes)
    _checked(name, over, where)
    return name, over, what, notes, unmodelled


def _clips(v: dict) -> tuple:
    """TRL's (clip_min, clip_max) of the vLLM IS weight."""
    return v["vllm_importance_sampling_clip_min"], v["vllm_importance_sampling_clip_max"]


def _trl_raises(s: dict, v: dict, where: str) -> None:
    """The combinations GRPOConfig.__post_init__ and GRPOTrainer.__init__ raise for: one
    ConfigError naming the key."""
    loss, mode = v["loss_type"], v["vllm_importance_sampling_mode"]
    on = v["use_vllm"] and v["vllm_importance_sampling_correction"]
    clip_min, clip_max = _clips(v)
    raises = [
        (
            clip_min is not None and clip_max is not None and clip_min >= clip_max,
            "vllm_importance_sampling_clip_min",
            clip_min,
            f"less than vllm_importance_sampling_clip_max ({clip_max})",
        ),
        (
            v["vllm_importance_sampling_correction"]
            and mode.endswith("truncate")
            and clip_min is None
            and clip_max is None,
            "vllm_importance_sampling_clip_max",
            None,
            f"a bound (clip_max or clip_min) with vllm_importance_sampling_mode {mode}",
        ),
        (
            loss == "vespo" and on and not mode.startswith("token"),
            "vllm_importance_sampling_mode",
            mode,
            "token_truncate or token_mask with vespo",
        ),
        (
            s.get("generation_batch_size") is not None
            and s.get("steps_per_generation") is not None,
            "steps_per_generation",
            s.get("steps_per_generation"),
            "null when generation_batch_size is set (one of the two)",
        ),
        (
            bool(s.get("auto_find_batch_size")),
            "auto_find_batch_size",
            s.get("auto_find_batch_size"),
            "false (GRPO's batch holds whole groups)",
        ),
    ]
    for wrong, key, value, allowed in raises:
        if wrong:
            raise bad(where, key, value, f"{allowed}, as TRL raises otherwise")


def _trl_entry(v, loss, mode, level, over, notes):
    """(name, overrides, notes) of TRL's vLLM-corrected loss; name None with the reason first."""
    if loss == "vespo":  # a sequence mode is refused before (TRL raises)
        gamma = {k: v[f"vespo_{k}"] for k in ("k_pos", "lambda_pos", "k_neg", "lambda_neg")}
        return f"trl/vespo_{mode}", {**over, **gamma}, notes
    if level == "sequence" and mode.startswith("token") and loss in SEQ_LOSS:
        why = (
            f"importance_sampling_level sequence with {mode}: TRL multiplies the per-sequence "
            "loss (B, 1) by the per-token IS weights (B, T), so every token's coefficient is "
            "A·mean_t ρ̃_t, the sequence's mean token weight; no registry entry"
        )
        return None, {}, [why, *notes]
    if loss != "cispo":
        notes.append(RATIO_1.format(loss, "only the vLLM IS weight acts"))
    elif (eps := v["epsilon_high"]) is None:
        eps = v["epsilon"]
        notes.append(
            f"TRL's CISPO with epsilon_high unset caps the ratio at epsilon = {eps} (an absolute "
            "cap; TRL's docs recommend epsilon_high 5.0)"
        )
    if loss == "cispo" and mode == "sequence_mask":
        return "trl/cispo", {"eps_high": eps, **over}, notes
    if loss == "cispo" and eps < 1:
        why = f"trl/cispo is registered with sequence_mask only; {mode} with a cap {eps} < 1 is not"
        return None, {}, [why, *notes]
    if loss == "cispo":
        notes.append(f"CISPO's cap {eps} ≥ 1 does not bind at ratio 1: trl/{mode}'s weights")
    if loss in TRL_AGG:
        notes.append(f"TRL's {loss} normalises {TRL_AGG[loss]}; trl/{mode} as dapo (all tokens)")
    return f"trl/{mode}", over, notes


def _trl_advantages(v: dict) -> tuple[str, str]:
    """(label, detail) of TRL's advantages against the lab's leave-one-out ones."""
    if v["multi_objective_aggregation"] == "normalize_then_sum":
        return (
            "multi_objective_aggregation normalize_then_sum",
            f"TRL normalises each reward per group, then the sum over the batch; {LOO}",
        )
    scale = {True: "group", False: "none"}.get(v["scale_rewards"], v["scale_rewards"])
    adv = {
        "group": "(r − group mean)/(group std + 1e-4)",
        "batch": "(r − group mean)/(batch std + 1e-4)",
        "none": "r − group mean, (G−1)/G times the lab's (the same direction)",
    }
    return f"scale_rewards {scale}", f"TRL's advantages are {adv[scale]}; {LOO}"


LATER = "updates after the first on a batch see a ratio ≠ 1; the lab measures the first"


def _kept(found) -> list[tuple[str, str]]:
    """The (label, detail) of each (applies, label, detail) of ``found`` that applies."""
    return [(label, detail) for applies, label, detail in found if applies]


def _trl_unmodelled(v: dict, on: bool = False) -> list[tuple[str, str]]:
    """(label, detail) of each TRL setting that changes the gradient and the lab does not model
    (``on``: the vLLM IS weight is on, whose entries take the off-policy mask as an option)."""
    mask, rho, delta = v["off_policy_mask_threshold"], v["top_entropy_quantile"], v["delta"]
    clipped = (
        delta is not None and delta < 1 and v["loss_type"] in ("grpo", "bnpo", "dr_grpo", "dapo")
    )
    found = (
        (v["beta"], f"beta {v['beta']}", "a KL penalty against the reference model"),
        (
            mask is not None and not on and v["use_vllm"],
            f"off_policy_mask_threshold {mask}",
            f"TRL drops each sequence with A < 0 whose mean log μ − log π_θ exceeds {mask} "
            "(DeepSeek-V3.2's off-policy sequence mask); with the vLLM IS correction off no "
            "registry entry has it (on, the trl/* entries take it as off_policy_mask)",
        ),
        (
            rho < 1,
            f"top_entropy_quantile {rho}",
            f"only the top {rho:g} of tokens by entropy enter the loss; the lab's entries weight "
            "every token",
        ),
        (
            v["entropy_coef"] or v["use_adaptive_entropy"],
            f"entropy_coef {v['entropy_coef']}",
            "an entropy bonus in the loss",
        ),
        (
            clipped,
            f"delta {delta}",
            "the two-sided clip caps the ratio 1 at delta < 1, so tokens with A > 0 get no "
            "gradient",
        ),
        (
            v["mask_truncated_completions"],
            "mask_truncated_completions true",
            "truncated completions leave the loss",
        ),
        (v["num_iterations"] > 1, f"num_iterations {v['num_iterations']}", LATER),
    )
    return [_trl_advantages(v), *_kept(found)]


def _verl(s: dict, where: str):
    for sec in SECTIONS:  # a value where verl wants a mapping
        if sec in s and s[sec] != {} and not (sec == RC and s[sec] is None):
            raise bad(where, sec, s[sec], "a mapping" + " or null" * (sec == RC))
    for key in s:
        sec = next((x for x in DEEPEST if key.startswith(x + ".")), None)
        if sec is not None and key[len(sec) + 1 :].split(".")[0] not in SECTIONS[sec]:
            known = [f"{sec}.{k}" for k in SECTIONS[sec]]
            raise ConfigError(
                f"{where}{key}: unknown verl key{_near(key, known)}; allowed: the fields of "
                f"{sec} (verl 1dda039b9c63; gpolab/labs/mismatch/framework_keys.toml)"
            )
    for key in VERL:
        if any(k.startswith(key + ".") for k in s):
            raise bad(where, key, {}, VERL[key][1][1] if VERL[key][1] else "a value")
    notes = []
    if RC in s or not any(k.startswith(RC + ".") for k in s):
        s = {k: v for k, v in s.items() if not k.startswith(RC + ".")}
        notes.append(f"{RC} absent or null: off, as verl's ppo_trainer.yaml default")
    v = checked_values(s, VERL, where)
    thr = v[f"{RC}.rollout_is_threshold"]
    thr = None if thr is None else is_threshold(where, thr)
    rs = v[f"{RC}.rollout_rs"]
    opts = list(dict.fromkeys(o.strip() for o in (rs or "").split(",") if o.strip()))
    if rs is not None and (not opts or any(o not in RS_OPTIONS for o in opts)):
        raise bad(where, f"{RC}.rollout_rs", rs, VERL[f"{RC}.rollout_rs"][1][1])
    rs_thr = rs_thresholds(where, opts, v[f"{RC}.rollout_rs_threshold"]) if opts else []
    if v[f"{RC}.bypass_mode"] and not v[f"{ROLLOUT}.calculate_log_probs"]:
        raise bad(
            where,
            f"{ROLLOUT}.calculate_log_probs",
            False,
            "true with bypass_mode true "
            "(verl raises: bypass mode takes the rollout's log-probs as π_old)",
        )
    found = (_bypass if v[f"{RC}.bypass_mode"] else _decoupled)(v, thr, opts, rs_thr, notes)
    _checked(found[0], found[1], where)
    return (*found, _verl_unmodelled(s, v))


def _eps(v: dict) -> dict:
    ratio = v[f"{ACTOR}.clip_ratio"]
    return {
        f"eps_{side}": ratio if (e := v[f"{ACTOR}.clip_ratio_{side}"]) is None else e
        for side in ("low", "high")
    }


def _bypass(v, thr, opts, rs_thr, notes):
    """Bypass mode (π_old := μ).  verl's v1 trainer (trainer.use_v1, its default) only swaps
    π_old (trainer_base._compute_old_log_prob) and runs loss_mode's loss, with no IS or RS; the
    legacy one replaces the loss by bypass_mode (rollout_corr_helper.apply_bypass_mode):
    loss_type ppo_clip (vanilla PPO, RS applied, no IS weight) or reinforce."""
    loss, loss_type = v[f"{POLICY}.loss_mode"], v[f"{RC}.loss_type"]
    is_, rs = v[f"{RC}.rollout_is"], v[f"{RC}.rollout_rs"]
    own = {"sapo": {"tau_pos": v[f"{ACTOR}.tau_pos"], "tau_neg": v[f"{ACTOR}.tau_neg"]}}
    clip = {**_eps(v), "clip_c": v[f"{ACTOR}.clip_ratio_c"]}
    if v["trainer.use_v1"]:
        what = f"bypass mode (π_old := the rollout's μ; verl's v1 trainer), loss_mode {loss}"
        unused = [f"rollout_is {is_}"] * bool(is_) + [f"rollout_rs {rs}"] * bool(opts)
        unused += [f"loss_type {loss_type}"] * (loss_type != "ppo_clip")
        if unused:
            notes.append(
                f"{', '.join(unused)}: not applied by verl's v1 trainer in bypass mode "
                "(it runs the correction in decoupled mode only)"
            )
        if loss == "vanilla":
            return "verl/bypass_ppo_clip", clip, what, notes
        if loss in PAIRED:
            return f"verl/{loss}", own.get(loss, _eps(v)), what, notes
        return None, {}, what, [f"loss_mode {loss}: no registry entry for its gradient", *notes]
    what = f"bypass mode (verl's legacy trainer, trainer.use_v1 false), loss_type {loss_type}"
    if loss != "vanilla":
        notes.append(f"loss_mode {loss} is replaced by bypass_mode (apply_bypass_mode)")
    if opts:
        return None, {}, what, [f"no registry entry pairs bypass with rollout_rs {rs}", *notes]
    if loss_type == "reinforce":
        why = "bypass reinforce (preset bypass_pg_is) is not in the registry"
        return None, {}, what, [why, *notes]
    notes += [f"rollout_is {is_} has no effect: bypass ppo_clip has no IS weight"] * bool(is_)
    return "verl/bypass_ppo_clip", clip, what, notes


def _decoupled(v, thr, opts, rs_thr, notes):
    """Decoupled mode (π_old recomputed): the IS weight and RS mask of rollout_corr_helper, when
    the rollout's log-probs exist (calculate_log_probs) and rollout_is_threshold is set."""
    loss, is_, rs = v[f"{POLICY}.loss_mode"], v[f"{RC}.rollout_is"], v[f"{RC}.rollout_rs"]
    what = f"decoupled mode, loss_mode {loss}, rollout_is {is_}" + f" ({thr})" * bool(is_)
    what += f", rollout_rs {rs}" + f" ({v[f'{RC}.rollout_rs_threshold']})" * bool(opts)
    if not v[f"{ROLLOUT}.calculate_log_probs"] and (is_ or opts):
        notes.append(
            f"{ROLLOUT}.calculate_log_probs false: no rollout log-probs, so verl skips "
            "the rollout correction (ray_trainer, trainer_base): `none`"
        )
        is_, opts = None, []
    if is_ and thr is None:
        notes.append(f"rollout_is {is_} with rollout_is_threshold null: verl applies no IS weight")
        is_ = None
    if is_ and v[f"{RC}.rollout_is_batch_normalize"]:
        why = "rollout_is_batch_normalize true: no batch-normalised entry"
        return None, {}, what, [why, *notes]
    if loss not in ("vanilla", *PAIRED):
        return None, {}, what, [f"loss_mode {loss}: no registry entry for its gradient", *notes]
    if loss == "geo_mean" and (is_ or opts):
        why = "GMPO weights a sequence by the geometric mean of its IS weights; no registry entry"
        return None, {}, what, [why, *notes]
    level = {"token": "token", "sequence": "seq"}.get(is_)
    kind = "icepop" if isinstance(thr, tuple) else "tis"
    if not is_ and not opts:
        name, over = "none", {}
        notes = notes or ["rollout_is and rollout_rs null (verl's YAML default): no correction"]
    elif not opts:
        name, over = f"verl/{level}_{kind}", {"is_threshold": thr}
    elif not is_ and len(opts) == 1 and f"verl/rs_{opts[0]}" in mismatch.REGISTRY:
        name, over = f"verl/rs_{opts[0]}", {"rs_threshold": rs_thr[0]}
    elif (level, kind, opts) == ("seq", "tis", ["seq_sum_k1"]):
        name, over = "verl/seq_is_rs", {"is_threshold": thr, "rs_threshold": rs_thr[0]}
    else:
        have = "verl/rs_{token_k1, seq_sum_k1, seq_mean_k1, seq_mean_k3} alone, verl/seq_is_rs"
        why = f"rollout_is {is_} ({kind}) with rollout_rs {rs}: not in the registry ({have})"
        return None, {}, what, [why, *notes]
    if loss != "vanilla":
        acts = "only the IS/RS weights act" if over else "no IS/RS weight acts: `none`"
        notes.append(RATIO_1.format(loss, acts))
    # gspo and sapo force seq-mean-token-mean; GMPO's mean over sequences of (1/T)Σ_t is it too
    agg = dict.fromkeys(("gspo", "sapo", "geo_mean"), "seq-mean-token-mean")
    agg = agg.get(loss, v[f"{ACTOR}.loss_agg_mode"])
    if agg != "token-mean":
        notes.append(f"verl aggregates {agg} here; {name} (closest entry) aggregates token-mean")
    return name, over, what, notes


def _verl_unmodelled(s: dict, v: dict) -> list[tuple[str, str]]:
    """(label, detail) of each verl setting that changes the gradient and the lab does not model."""
    adv, norm = v["algorithm.adv_estimator"], v["algorithm.norm_adv_by_std_in_grpo"]
    grpo = adv in ("grpo", "grpo_vectorized")
    form = "r − group mean, (G−1)/G times the lab's (the same direction)"
    form = "(r − group mean)/(group std + 1e-6)" if norm else form
    default = " (verl's YAML default)" * ("algorithm.adv_estimator" not in s)
    kl, entropy, epochs = (
        v[f"{ACTOR}.{k}"] for k in ("kl_loss_coef", "entropy_coeff", "ppo_epochs")
    )
    found = (
        (
            grpo,
            f"algorithm.adv_estimator {adv} with norm_adv_by_std_in_grpo {str(norm).lower()}",
            f"verl's advantages are {form}; {LOO}",
        ),
        (
            not grpo and adv not in ("rloo", "rloo_vectorized"),
            f"algorithm.adv_estimator {adv}{default}",
            f"verl's {adv} advantages" + " (a critic's)" * (adv == "gae") + f"; {LOO}",
        ),
        (
            v["algorithm.use_kl_in_reward"],
            "algorithm.use_kl_in_reward true",
            "a KL penalty in the reward",
        ),
        (
            v[f"{ACTOR}.use_kl_loss"],
            f"{ACTOR}.use_kl_loss true (kl_loss_coef {kl})",
            "a KL loss against the reference model",
        ),
        (entropy, f"{ACTOR}.entropy_coeff {entropy}", "an entropy bonus"),
        (epochs > 1, f"{ACTOR}.ppo_epochs {epochs}", LATER),
    )
    return _kept(found)
