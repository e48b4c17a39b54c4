"""The framework settings :mod:`gpolab.labs.mismatch.from_config` reads: each framework's key
lists (``framework_keys.toml``), the keys that change the mismatch correction with their
defaults and checks (:data:`TRL`, :data:`VERL`: plain data, key → (default, check)), and the
parsers of verl's threshold strings.  See :mod:`gpolab.labs.mismatch.from_config` for the
sources and the commits read."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

from gpolab.validate import ConfigError

KEYS = tomllib.loads(Path(__file__).with_name("framework_keys.toml").read_text())
TRL_ALL = frozenset(KEYS["trl"]["grpo_config"] + KEYS["trl"]["training_args"] + KEYS["trl"]["cli"])
TRL_OWN = frozenset(KEYS["trl"]["grpo_config"]) - set(KEYS["trl"]["training_args"])
RC, ACTOR = "algorithm.rollout_correction", "actor_rollout_ref.actor"
POLICY, ROLLOUT = f"{ACTOR}.policy_loss", "actor_rollout_ref.rollout"
SECTIONS = {s: frozenset(KEYS["verl"][s]) for s in ("algorithm", RC, ACTOR, POLICY, ROLLOUT)}
DEEPEST = sorted(SECTIONS, key=len, reverse=True)
ALLOWED = (
    "a TRL GRPOConfig or a verl config as JSON (.json) or YAML (.yaml, .yml); TRL keys: "
    "use_vllm, loss_type, vllm_importance_sampling_*; verl keys: algorithm.rollout_correction.*, "
    "actor_rollout_ref.actor.*"
)
TRL_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
PER_SEQ = "per sequence (token mean), then over sequences"
TRL_AGG = {  # grpo_trainer.py::_compute_loss normalisers other than dapo's global token count
    "grpo": PER_SEQ,
    "sapo": PER_SEQ,
    "bnpo": "by the local batch's token count",
    "dr_grpo": "by B·max_completion_length",
    "luspo": "as sequence losses times their length",
}
SEQ_LOSS = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo", "sapo")  # a (B, 1) loss at sequence level
F32_MAX = 3.4028234663852886e38  # float(np.finfo(np.float32).max): finite for _params
RS_OPTIONS = [f"{s}_k{k}" for s in ("token", "seq_sum", "seq_mean") for k in (1, 2, 3)]
RS_OPTIONS += ["seq_max_k2", "seq_max_k3"]
PAIRED = ("gspo", "geo_mean", "cispo", "sapo")  # losses with a registry entry against μ
RATIO_1 = "at the scored θ (π_θ = π_old) the {} loss's own ratio is 1; {}"
LOO = "the lab's advantages are leave-one-out, r − the mean of the others"


# ------------------------------------------------------------------------- values


def _n(low=-math.inf, high=math.inf, *, none=False, integer=False, open_low=False):
    """(test, allowed text) of a number in [low, high] ((low, high] if open_low), or null."""

    def test(v) -> bool:
        if v is None:
            return none
        kind = int if integer else (int, float)
        if isinstance(v, bool) or not isinstance(v, kind) or not math.isfinite(v):
            return False
        return (v > low if open_low else v >= low) and v <= high

    what = "an integer" if integer else "a finite number"
    what += f" {'>' if open_low else '≥'} {low:g}" * (low > -math.inf)
    what += f" and ≤ {high:g}" * (high < math.inf) + " or null" * none
    return test, what


def _one(*options):
    """(test, allowed text) of one of ``options`` (true/false only as booleans)."""
    test = lambda v: any(v == o and type(v) is type(o) for o in options)  # noqa: E731
    return test, ", ".join("null" if o is None else str(o).lower() for o in options)


def _text(v) -> bool:
    return v is None or isinstance(v, str)


BOOL = _one(True, False)
AGG_MODES = (  # verl's loss_agg_mode
    "token-mean token-sum seq-mean-token-sum seq-mean-token-sum-norm seq-mean-token-mean"
).split()
TRL = {  # key: (GRPOConfig's default, check); trl/trainer/grpo_config.py f2cd57710ae3
    "use_vllm": (False, BOOL),
    "vllm_importance_sampling_correction": (True, BOOL),
    "vllm_importance_sampling_mode": ("sequence_mask", _one(*TRL_MODES)),
    "vllm_importance_sampling_clip_max": (3.0, _n(0, none=True)),
    "vllm_importance_sampling_clip_min": (None, _n(0, none=True)),
    "vllm_importance_sampling_cap": (None, _n(0, none=True)),
    "loss_type": ("dapo", _one("dapo", "cispo", "vespo", *TRL_AGG)),
    "importance_sampling_level": ("token", _one("token", "sequence")),
    "epsilon": (0.2, _n(0)),
    "epsilon_high": (None, _n(0, none=True)),
    "delta": (None, _n(none=True)),
    "beta": (0.0, _n()),
    "scale_rewards": ("group", _one("group", "batch", "none", True, False)),
    "multi_objective_aggregation": (
        "sum_then_normalize",
        _one("sum_then_normalize", "normalize_then_sum"),
    ),
    "off_policy_mask_threshold": (None, _n(none=True)),
    "vespo_k_pos": (2.0, _n(0)),  # TRL 1.16.0's VESPO gamma weights
    "vespo_lambda_pos": (3.0, _n(0)),
    "vespo_k_neg": (3.0, _n(0)),
    "vespo_lambda_neg": (2.0, _n(0)),
    "top_entropy_quantile": (1.0, _n(0, 1)),
    "entropy_coef": (0.0, _n()),
    "use_adaptive_entropy": (False, BOOL),
    "mask_truncated_completions": (False, BOOL),
    "num_iterations": (1, _n(1, integer=True)),
    "num_generations": (8, _n(2, integer=True)),  # GRPOConfig raises below 2
}
VERL = {  # key: (the YAML default of a hydra run, check); verl 1dda039b9c63
    f"{RC}.rollout_is": (None, _one(None, "token", "sequence")),
    f"{RC}.rollout_is_threshold": (2.0, None),  # parsed by is_threshold
    f"{RC}.rollout_rs": (None, (_text, "null or a comma list of " + ", ".join(RS_OPTIONS))),
    f"{RC}.rollout_rs_threshold": (None, None),  # parsed by rs_thresholds
    f"{RC}.bypass_mode": (False, BOOL),
    f"{RC}.loss_type": ("ppo_clip", _one("ppo_clip", "reinforce")),
    f"{RC}.rollout_is_batch_normalize": (False, BOOL),
    f"{POLICY}.loss_mode": ("vanilla", _one(*KEYS["verl"]["loss_modes"])),
    f"{ACTOR}.clip_ratio": (0.2, _n(0)),
    f"{ACTOR}.clip_ratio_low": (0.2, _n(0, none=True)),
    f"{ACTOR}.clip_ratio_high": (0.2, _n(0, none=True)),
    f"{ACTOR}.clip_ratio_c": (3.0, _n(1, open_low=True)),  # core_algos asserts > 1
    f"{ACTOR}.tau_pos": (1.0, _n(0, open_low=True)),
    f"{ACTOR}.tau_neg": (1.05, _n(0, open_low=True)),
    f"{ACTOR}.loss_agg_mode": ("token-mean", _one(*AGG_MODES)),
    f"{ACTOR}.use_kl_loss": (False, BOOL),
    f"{ACTOR}.kl_loss_coef": (0.001, _n()),
    f"{ACTOR}.entropy_coeff": (0.0, _n()),
    f"{ACTOR}.ppo_epochs": (1, _n(1, integer=True)),
    f"{ROLLOUT}.calculate_log_probs": (True, BOOL),
    "algorithm.adv_estimator": ("gae", _one(*KEYS["verl"]["adv_estimators"])),
    "algorithm.norm_adv_by_std_in_grpo": (True, BOOL),
    "algorithm.use_kl_in_reward": (False, BOOL),
    "trainer.use_v1": (True, BOOL),
}


def bad(where: str, key: str, value, allowed: str) -> ConfigError:
    got = "a mapping" if isinstance(value, dict) else repr(value)
    got = got if len(got) <= 60 else got[:57] + "..."
    return ConfigError(f"{where}{key}: got {got}; allowed: {allowed}")


def checked_values(s: dict, table: dict, where: str) -> dict:
    """Every key of ``table`` at the user's value (checked) or the default."""
    for key, (_, check) in table.items():
        if key in s and check is not None and not check[0](s[key]):
            raise bad(where, key, s[key], check[1])
    return {key: s.get(key, default) for key, (default, _) in table.items()}


def _pair(where: str, key: str, spec, text: str) -> tuple[float, float]:
    lo, _, hi = text.partition("_")
    try:
        return float(lo), float(hi)
    except ValueError:
        raise bad(where, key, spec, "a number U or a string 'L_U'") from None


def is_threshold(where: str, spec):
    """verl's rollout_is_threshold (rollout_corr_helper._parse_rollout_is_threshold): a number
    U (TIS) or "U", or "L_U" (IcePop), positive, L ≤ U."""
    key = f"{RC}.rollout_is_threshold"
    if isinstance(spec, bool) or not isinstance(spec, (int, float, str)):
        raise bad(where, key, spec, "a number U or a string 'L_U' (positive, L ≤ U)")
    text = str(spec).strip()
    value = (
        _pair(where, key, spec, text) if "_" in text else _pair(where, key, spec, "1_" + text)[1]
    )
    for v in value if isinstance(value, tuple) else (value,):
        if not (math.isfinite(v) and v > 0):
            raise bad(where, key, spec, "positive bounds (verl raises)")
    if isinstance(value, tuple) and value[0] > value[1]:
        raise bad(where, key, spec, "L ≤ U (verl raises)")
    return value


def rs_thresholds(where: str, options: list, spec) -> list:
    """verl's per-option rollout_rs_threshold (_parse_rollout_rs_thresholds): one shared or one
    per option, comma separated; k1: "L_U" or U (L = 1/U), k2/k3: a positive U."""
    key = f"{RC}.rollout_rs_threshold"
    if spec is None:
        raise bad(
            where, key, None, f"a threshold for rollout_rs {','.join(options)} (verl requires one)"
        )
    if isinstance(spec, bool) or not isinstance(spec, (int, float, str)):
        raise bad(where, key, spec, "a number or a string, one threshold per rollout_rs option")
    parts = [p.strip() for p in str(spec).split(",") if p.strip()]
    if len(parts) not in (1, len(options)):
        raise bad(where, key, spec, f"one threshold, or {len(options)} (one per option)")
    out = []
    parts = parts * len(options) if len(parts) == 1 else parts
    for option, part in zip(options, parts, strict=True):
        k1 = option.endswith("k1")
        if "_" in part and not k1:
            raise bad(where, key, spec, f"a single upper bound for {option} (verl raises)")
        lo, hi = _pair(where, key, spec, part if "_" in part else "1_" + part)
        if "_" not in part:  # k1: U alone means L = 1/U; k2, k3 have an upper bound only
            lo = 1 / hi if k1 and hi > 0 else hi
        if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
            raise bad(where, key, spec, f"positive bounds, L ≤ U, for {option} (verl raises)")
        out.append((lo, hi) if k1 else hi)
    return out
