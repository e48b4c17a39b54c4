"""Which mismatch correction a trainer's own config runs: :func:`read` loads a TRL GRPOConfig
(JSON or YAML, as ``GRPOConfig.to_dict()`` writes it) or a verl config (hydra YAML, nested or
dotted keys); :func:`correction_of` names the :data:`gpolab.estimators.mismatch.REGISTRY` entry
with the user's own values as overrides, or None with the reason.  Absent keys take the sources'
defaults: TRL f2cd57710ae3 ``trl/trainer/grpo_config.py::GRPOConfig``; verl 1dda039b9c63
``trainer/config/algorithm/rollout_correction.yaml`` and ``trainer/config/actor/actor.yaml``."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from gpolab.estimators import mismatch
from gpolab.validate import ConfigError, choice

__all__ = ["read", "correction_of"]

ALLOWED = (
    "a TRL GRPOConfig or a verl config as JSON (.json) or YAML (.yaml, .yml); TRL keys: "
    "use_vllm, loss_type, vllm_importance_sampling_*; verl keys: algorithm.rollout_correction.*, "
    "actor_rollout_ref.actor.*"
)
LOADERS = {".json": ("JSON", json.loads), ".yaml": ("YAML", yaml.safe_load)}
LOADERS[".yml"] = LOADERS[".yaml"]
TRL_KEYS = {"use_vllm", "loss_type", "epsilon", "epsilon_high", "num_generations", "beta"}
TRL = dict(use_vllm=False, vllm_importance_sampling_correction=True,
           vllm_importance_sampling_mode="sequence_mask", vllm_importance_sampling_clip_max=3.0,
           vllm_importance_sampling_clip_min=None, vllm_importance_sampling_cap=None,
           loss_type="dapo", epsilon=0.2, epsilon_high=None, beta=0.0)  # fmt: skip
TRL_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
PER_SEQ = "per sequence (token mean), then over sequences"
TRL_AGG = {  # grpo_trainer.py::_compute_loss normalisers other than dapo's global token count
    "grpo": PER_SEQ, "sapo": PER_SEQ, "bnpo": "by the local batch's token count",
    "dr_grpo": "by B·max_completion_length", "luspo": "as sequence losses times their length",
}  # fmt: skip
F32_MAX = 3.4028234663852886e38  # float(np.finfo(np.float32).max): finite for _params
RC, ACTOR = "algorithm.rollout_correction", "actor_rollout_ref.actor"
VERL = {f"{RC}.rollout_is": None, f"{RC}.rollout_is_threshold": 2.0, f"{RC}.rollout_rs": None,
        f"{RC}.rollout_rs_threshold": None, f"{RC}.bypass_mode": False,
        f"{RC}.loss_type": "ppo_clip", f"{RC}.rollout_is_batch_normalize": False,
        f"{ACTOR}.policy_loss.loss_mode": "vanilla", f"{ACTOR}.clip_ratio": 0.2,
        f"{ACTOR}.clip_ratio_low": 0.2, f"{ACTOR}.clip_ratio_high": 0.2,
        f"{ACTOR}.clip_ratio_c": 3.0, f"{ACTOR}.tau_pos": 1.0, f"{ACTOR}.tau_neg": 1.05,
        f"{ACTOR}.loss_agg_mode": "token-mean"}  # fmt: skip
THRESHOLDS = ("rollout_is_threshold", "rollout_rs_threshold")
RS_OPTIONS = [f"{s}_k{k}" for s in ("token", "seq_sum", "seq_mean") for k in (1, 2, 3)]
RS_OPTIONS += ["seq_max_k2", "seq_max_k3"]
PAIRED = ("gspo", "geo_mean", "cispo", "sapo")  # verl losses the registry evaluates in bypass
RATIO_1 = "at the scored θ (π_θ = π_old) the {} loss's own ratio is 1; {}"


def read(path) -> dict:
    """The settings of a TRL or verl config file as one flat dict (dotted keys); one
    :class:`ConfigError` naming the file for an unreadable, unknown or foreign file."""
    path = Path(path)
    kind, load = LOADERS.get(path.suffix.lower(), (None, None))
    if load is None:
        got = path.suffix or "(no suffix)"
        raise ConfigError(f"{path}: unknown format {got!r}; allowed: {ALLOWED}")
    try:
        data = load(path.read_text())
    except OSError as err:
        raise ConfigError(f"{path}: cannot read ({err.strerror}); allowed: {ALLOWED}") from None
    except UnicodeDecodeError as err:
        why = f"not UTF-8 text (byte {err.start})"
        raise ConfigError(f"{path}: {why}; allowed: {ALLOWED}") from None
    except (ValueError, yaml.YAMLError) as err:
        why = str(err).splitlines()[0]
        raise ConfigError(f"{path}: not valid {kind} ({why}); allowed: {ALLOWED}") from None
    return _settings(data, str(path))[0]


def _flat(data: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in data.items():
        key = prefix + str(key).lstrip("+")  # hydra's "+key=value" appends
        out.update(_flat(value, key + ".") if isinstance(value, dict) and value else {key: value})
    return out


def _settings(data, where: str) -> tuple[dict, str]:
    """(flat settings, "trl" or "verl"); a Trainer's dict holding them under ``training_args``
    or ``args`` is unwrapped."""
    if not isinstance(data, dict):
        got = type(data).__name__
        raise ConfigError(f"{where}: a {got} at the top level, not a mapping; allowed: {ALLOWED}")
    for inner in ("training_args", "args"):
        if isinstance(data.get(inner), dict) and not TRL_KEYS & set(data):
            data = data[inner]
    flat = _flat(data)
    verl = any(k.split(".")[0] in ("algorithm", "actor_rollout_ref") for k in flat)
    trl = any(k in TRL_KEYS or k.startswith("vllm_importance_sampling") for k in flat)
    if verl == trl:
        what = "both TRL and verl keys" if verl else "neither TRL nor verl keys"
        raise ConfigError(f"{where}: {what}; allowed: {ALLOWED}")
    return flat, "verl" if verl else "trl"


def correction_of(settings: dict) -> dict:
    """name (a REGISTRY key or None), overrides (``estimate_weights`` keywords from the user's
    values), framework, text (one sentence) and notes (caveats; the reason first when None)."""
    flat, framework = _settings(settings, "settings")
    name, overrides, what, notes = (_trl if framework == "trl" else _verl)(flat)
    if name is None:
        text = f"{framework}: {what}; no gpolab entry measures it ({notes[0]})."
    else:
        mismatch._params(name, overrides)  # the user's values, checked as the entry checks them
        given = ", ".join(f"{k}={v}" for k, v in overrides.items())
        text = f"{framework}: {what}; gpolab measures it as {name}" + (f" ({given})" * bool(given))
        text += "."
    return dict(name=name, overrides=overrides, framework=framework, text=text, notes=notes)


def _trl(s: dict):
    get = lambda k: s.get(k, TRL[k])  # noqa: E731
    for key in ("use_vllm", "vllm_importance_sampling_correction"):
        choice(key, get(key), (True, False))
    loss, mode = get("loss_type"), get("vllm_importance_sampling_mode")
    choice("loss_type", loss, ["dapo", "cispo", "vespo", *TRL_AGG])
    choice("vllm_importance_sampling_mode", mode, TRL_MODES)
    notes = [f"beta {get('beta')}: the KL penalty (not IS-weighted) is not measured"]
    notes = notes * bool(get("beta"))
    if not get("use_vllm"):
        why = "use_vllm false: the trainer samples from π_θ itself, no IS correction (`none`)"
        return "none", {}, f"loss_type {loss} on the trainer's own rollouts", [why, *notes]
    if not get("vllm_importance_sampling_correction"):
        why = "vLLM IS correction off (vllm_importance_sampling_correction false): `none`"
        return "none", {}, f"loss_type {loss} on vLLM rollouts, uncorrected", [why, *notes]
    clip_max = get("vllm_importance_sampling_clip_max")
    clip_min = get("vllm_importance_sampling_clip_min")
    if (cap := get("vllm_importance_sampling_cap")) is not None:
        clip_max = cap
        notes.append(f"vllm_importance_sampling_cap {cap} (deprecated) is clip_max, as in TRL")
    if clip_max is None:
        notes.append(
            "vllm_importance_sampling_clip_max None: no upper bound; gpolab passes float32's "
            "largest value, so only an overflowed ratio (inf, which TRL keeps) differs"
        )
    over = {"clip_max": F32_MAX if clip_max is None else clip_max, "clip_min": clip_min}
    what = f"loss_type {loss} with the vLLM IS weight {mode} [{clip_min}, {clip_max}]"
    if loss == "vespo":
        why = "vespo folds the IS weight into its sequence log-weight; no registry entry"
        return None, {}, what, [why, *notes]
    if loss != "cispo":
        notes.append(RATIO_1.format(loss, "only the vLLM IS weight acts"))
    elif (eps := get("epsilon_high")) is None:
        eps = get("epsilon")
        notes.append(
            f"TRL's CISPO with epsilon_high unset caps the ratio at epsilon = {eps} (an absolute "
            "cap; TRL's docs recommend epsilon_high 5.0)"
        )
    if loss == "cispo" and mode == "sequence_mask":
        return "trl/cispo", {"eps_high": eps, **over}, what, notes
    if loss == "cispo" and eps < 1:
        why = f"trl/cispo is registered with sequence_mask only; {mode} with a cap {eps} < 1 is not"
        return None, {}, what, [why, *notes]
    if loss == "cispo":
        notes.append(f"CISPO's cap {eps} ≥ 1 does not bind at ratio 1: trl/{mode}'s weights")
    if loss in TRL_AGG:
        notes.append(f"TRL's {loss} normalises {TRL_AGG[loss]}; trl/{mode} as dapo (all tokens)")
    return f"trl/{mode}", over, what, notes


def _threshold(field: str, value):
    """verl's threshold strings: "U" a float, "L_U" a pair (as rollout_corr_helper parses; a
    comma list, one per RS option, is kept)."""
    try:
        if isinstance(value, str) and "," not in value:
            return tuple(map(float, value.split("_"))) if "_" in value else float(value)
    except ValueError:
        raise ConfigError(f"{field}: got {value!r}; allowed: a number U or 'L_U'") from None
    return value


def _verl(s: dict):
    get = lambda k: s.get(k, VERL[k])  # noqa: E731
    if s.get(RC, {}) is None or not any(k.startswith(RC) for k in s):
        s = {k: v for k, v in s.items() if not k.startswith(RC)}
        notes = [f"{RC} absent or null: off, as verl's rollout_correction.yaml default"]
    else:
        notes = []
    is_, rs = get(f"{RC}.rollout_is"), get(f"{RC}.rollout_rs")
    thr, rs_thr = (_threshold(f"{RC}.{k}", get(f"{RC}.{k}")) for k in THRESHOLDS)
    bypass, loss_type = get(f"{RC}.bypass_mode"), get(f"{RC}.loss_type")
    loss = get(f"{ACTOR}.policy_loss.loss_mode")
    choice(f"{RC}.rollout_is", is_, (None, "token", "sequence"))
    choice(f"{RC}.bypass_mode", bypass, (True, False))
    choice(f"{RC}.loss_type", loss_type, ("ppo_clip", "reinforce"))
    opts = [o.strip() for o in str(rs or "").split(",") if o.strip()]
    for opt in opts:
        choice(f"{RC}.rollout_rs", opt, RS_OPTIONS)
    if opts and rs_thr is None:
        raise ConfigError(
            f"{RC}.rollout_rs_threshold: got None; allowed: a threshold for rollout_rs {rs!r} "
            "(verl requires one)"
        )
    ratio = get(f"{ACTOR}.clip_ratio")
    eps = {f"eps_{side}": ratio if (v := get(f"{ACTOR}.clip_ratio_{side}")) is None else v
           for side in ("low", "high")}  # fmt: skip
    own = {"sapo": {"tau_pos": get(f"{ACTOR}.tau_pos"), "tau_neg": get(f"{ACTOR}.tau_neg")}}
    if bypass:
        what = f"bypass mode (old_log_prob := μ's), loss_type {loss_type}, loss_mode {loss}"
        if opts:
            return None, {}, what, [f"no registry entry pairs bypass with rollout_rs {rs}", *notes]
        if loss in PAIRED:
            notes.append("verl's bypass runs only ppo_clip/reinforce: this is gpolab's pairing")
            notes += [f"rollout_is {is_} is not part of gpolab's pairing"] * bool(is_)
            return f"verl/{loss}", own.get(loss, eps), what, notes
        if loss_type == "reinforce":
            why = "bypass reinforce (preset bypass_pg_is) is not in the registry"
            return None, {}, what, [why, *notes]
        notes += [f"rollout_is {is_} has no effect: bypass ppo_clip has no IS weight"] * bool(is_)
        return "verl/bypass_ppo_clip", {**eps, "clip_c": get(f"{ACTOR}.clip_ratio_c")}, what, notes
    what = f"decoupled mode, loss_mode {loss}, rollout_is {is_}" + f" ({thr})" * bool(is_)
    what += f", rollout_rs {rs}" + f" ({rs_thr})" * bool(opts)
    if get(f"{RC}.rollout_is_batch_normalize"):
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
        name, over = f"verl/rs_{opts[0]}", {"rs_threshold": rs_thr}
    elif (level, kind, opts) == ("seq", "tis", ["seq_sum_k1"]):
        name, over = "verl/seq_is_rs", {"is_threshold": thr, "rs_threshold": rs_thr}
    else:
        have = "verl/rs_{token_k1, seq_sum_k1, seq_mean_k1, seq_mean_k3} alone, verl/seq_is_rs"
        why = f"rollout_is {is_} ({kind}) with rollout_rs {rs}: not in the registry ({have})"
        return None, {}, what, [why, *notes]
    if loss != "vanilla":
        acts = "only the IS/RS weights act" if over else "no IS/RS weight acts: `none`"
        notes.append(RATIO_1.format(loss, acts))
    # gspo and sapo force seq-mean-token-mean; GMPO's mean over sequences of (1/T)Σ_t is it too
    agg = dict.fromkeys(("gspo", "sapo", "geo_mean"), "seq-mean-token-mean")
    agg = agg.get(loss, get(f"{ACTOR}.loss_agg_mode"))
    if agg != "token-mean":
        notes.append(f"verl aggregates {agg} here; {name} (closest entry) aggregates token-mean")
    return name, over, what, notes
