"""Which asynchronous setup a trainer's own config runs (``gpolab asynchronous --from-config``):
:func:`read` loads a TRL ``AsyncGRPOConfig`` (JSON or YAML, as ``AsyncGRPOConfig.to_dict()``
or a launcher's YAML has it) and :func:`setup_of` names the composition (``trl/async_grpo`` with
the user's clip), the oldest rollouts it trains on in updates, and every setting that changes the
gradient but is not modelled.

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

from gpolab.estimators import asynchronous as compositions
from gpolab.labs.mismatch.framework_settings import KEYS, _n, bad, checked_values
from gpolab.labs.mismatch.from_config import _near, load, mapping
from gpolab.validate import ConfigError

__all__ = ["read", "setup_of"]

SOURCE = "huggingface/trl f2cd57710ae3 trl/experimental/async_grpo/"
OWN = frozenset(KEYS["trl"]["async_grpo_config"])
ALL = OWN | frozenset(KEYS["trl"]["training_args"])
ALLOWED = (
    "a TRL AsyncGRPOConfig as JSON (.json) or YAML (.yaml, .yml): its fields (epsilon, "
    "epsilon_high, max_staleness, weight_sync_steps, ...) and TrainingArguments'"
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
    """The settings of an AsyncGRPOConfig file, checked as :func:`setup_of` checks them; one
    ConfigError naming the file (and the key) for an unreadable, unknown or invalid file."""
    data = load(path, ALLOWED)
    where = f"{path}: "
    data = mapping(data, where, ALLOWED, OWN)
    for key in data:
        if key not in ALL:
            raise ConfigError(
                f"{where}{key}: unknown AsyncGRPOConfig key{_near(str(key), ALL)}; allowed: the "
                "fields AsyncGRPOConfig(**d) accepts, with TrainingArguments' "
                "(gpolab/labs/mismatch/framework_keys.toml)"
            )
    setup_of(data, where)
    return dict(data)


def setup_of(settings: dict, where: str = "") -> dict:
    """correction (a spec of :mod:`gpolab.estimators.asynchronous`), staleness (the oldest
    kept rollouts, in optimizer steps), m (1), G (num_generations), text (one sentence) and
    notes (each setting not modelled, with what the lab does instead)."""
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
