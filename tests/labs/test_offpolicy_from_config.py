"""gpolab.labs.offpolicy.from_config: a TRL GRPOConfig or verl config file names the mismatch
correction it runs, with the user's values as overrides that ``estimate_weights`` accepts; a bad
file is one ConfigError naming it."""

import json

import jax.numpy as jnp
import numpy as np
import pytest

from gpolab.estimators import mismatch
from gpolab.labs.offpolicy import from_config
from gpolab.validate import ConfigError

RC = "algorithm:\n  rollout_correction:\n"
ACTOR = "actor_rollout_ref:\n  actor:\n"
VLLM = {"use_vllm": True, "num_generations": 8, "learning_rate": 1e-6}  # as to_dict() has them

CASES = [  # file, text, name, overrides, a note's fragment ("": no notes)
    ("trl.json", json.dumps(VLLM), "trl/sequence_mask", {"clip_max": 3.0, "clip_min": None},
     "ratio is 1"),
    ("trl.yaml", "use_vllm: true\nvllm_importance_sampling_mode: token_truncate\n"
     "vllm_importance_sampling_cap: 2.0\n", "trl/token_truncate", {"clip_max": 2.0},
     "deprecated"),
    ("off.json", json.dumps({**VLLM, "vllm_importance_sampling_correction": False}), "none", {},
     "vLLM IS correction off"),
    ("own.json", json.dumps({"loss_type": "grpo"}), "none", {}, "use_vllm false"),
    ("args.json", json.dumps({"training_args": dict(VLLM, loss_type="cispo", epsilon_high=None)}),
     "trl/cispo", {"eps_high": 0.2}, "caps the ratio at epsilon = 0.2"),
    ("grpo.json", json.dumps({**VLLM, "loss_type": "grpo"}), "trl/sequence_mask", {},
     "per sequence (token mean)"),
    ("seq.yaml", RC + "    rollout_is: sequence\n    rollout_is_threshold: 2.0\n", "verl/seq_tis",
     {"is_threshold": 2.0}, ""),
    ("ice.yml", RC + "    rollout_is: token\n    rollout_is_threshold: '0.5_5.0'\n",
     "verl/token_icepop", {"is_threshold": (0.5, 5.0)}, ""),
    ("rs.yaml", RC + "    rollout_rs: seq_sum_k1\n    rollout_rs_threshold: 0.5_2.0\n",
     "verl/rs_seq_sum_k1", {"rs_threshold": (0.5, 2.0)}, ""),
    ("isrs.yaml", RC + "    rollout_is: sequence\n    rollout_rs: seq_sum_k1\n"
     "    rollout_rs_threshold: 2.0\n", "verl/seq_is_rs",
     {"is_threshold": 2.0, "rs_threshold": 2.0}, ""),
    ("bypass.yaml", RC + "    bypass_mode: true\n    loss_type: ppo_clip\n" + ACTOR
     + "    clip_ratio_high: 0.28\n", "verl/bypass_ppo_clip",
     {"eps_low": 0.2, "eps_high": 0.28, "clip_c": 3.0}, ""),
    ("gspo.yaml", RC + "    bypass_mode: true\n" + ACTOR + "    clip_ratio_low: 3.0e-4\n"
     "    clip_ratio_high: 4.0e-4\n    policy_loss:\n      loss_mode: gspo\n", "verl/gspo",
     {"eps_low": 3e-4, "eps_high": 4e-4}, "gpolab's pairing"),
    ("absent.yaml", ACTOR + "    clip_ratio: 0.2\n", "none", {}, "absent or null"),
    ("flat.json", json.dumps({"actor_rollout_ref.actor.policy_loss.loss_mode": "sapo",
                              "algorithm.rollout_correction": None}), "none", {}, "ratio is 1"),
]  # fmt: skip


def _weights(name, overrides):
    """estimate_weights (finite) on two sequences of 3 tokens, π/μ = e^0.9 ≈ 2.46 on one."""
    logp = jnp.log(jnp.full((2, 3), 0.5))
    d = jnp.array([[0.9, -0.1, 0.0], [0.2, 0.0, -0.3]])
    est = mismatch.estimate_weights(
        name, jnp.array([1.0, -1.0]), logp, logp - d, jnp.ones((2, 3)), **overrides
    )
    assert np.all(np.isfinite(est.w))
    return np.asarray(est.w)


@pytest.mark.parametrize("file, text, name, overrides, note", CASES)
def test_each_mapping_names_a_registry_entry_with_accepted_overrides(
    tmp_path, file, text, name, overrides, note
):
    (tmp_path / file).write_text(text)
    got = from_config.correction_of(from_config.read(tmp_path / file))
    assert got["name"] == name and name in mismatch.REGISTRY
    assert got["overrides"].items() >= overrides.items()
    assert got["framework"] == ("verl" if "algorithm" in text or "actor_rollout" in text else "trl")
    assert name in got["text"] and got["text"].endswith(".")
    assert any(note in n for n in got["notes"]) if note else got["notes"] == [], got["notes"]
    _weights(name, got["overrides"])


def test_the_deprecated_cap_lands_in_the_weights(tmp_path):
    """cap 2.0 truncates the e^0.9 token at 2.0 where the default 3.0 keeps 2.46."""
    got = from_config.correction_of(dict(VLLM, vllm_importance_sampling_mode="token_truncate",
                                         vllm_importance_sampling_cap=2.0))  # fmt: skip
    w, w_default = _weights(got["name"], got["overrides"]), _weights(got["name"], {})
    assert w[0, 0] / w[0, 1] == pytest.approx(2.0 / np.exp(-0.1), rel=1e-5)
    assert w_default[0, 0] / w_default[0, 1] == pytest.approx(np.exp(1.0), rel=1e-5)


@pytest.mark.parametrize(
    "settings, missing",
    [({RC.split(":")[0]: {"rollout_correction": {"rollout_rs": "token_k2",
                                                 "rollout_rs_threshold": 0.01}}}, "token_k2"),
     ({"algorithm.rollout_correction.rollout_is": "token",
       "algorithm.rollout_correction.rollout_rs": "seq_sum_k1",
       "algorithm.rollout_correction.rollout_rs_threshold": 2.0}, "not in the registry"),
     ({"algorithm.rollout_correction.bypass_mode": True,
       "algorithm.rollout_correction.loss_type": "reinforce"}, "bypass_pg_is"),
     ({**VLLM, "loss_type": "vespo"}, "vespo")],
)  # fmt: skip
def test_combinations_the_registry_lacks_give_none_with_the_reason(settings, missing):
    got = from_config.correction_of(settings)
    assert got["name"] is None and got["overrides"] == {}
    assert missing in got["notes"][0] and "no gpolab entry" in got["text"]


@pytest.mark.parametrize(
    "file, text, message",
    [("missing.json", None, "cannot read"), ("bad.json", "{", "not valid JSON"),
     ("list.yaml", "- a\n- b\n", "a list at the top level"),
     ("other.json", json.dumps({"lr": 1e-3, "model": "x"}), "neither TRL nor verl"),
     ("cfg.toml", "a = 1\n", "unknown format"), ("bad.yaml", "a: [\n", "not valid YAML")],
)  # fmt: skip
def test_a_bad_file_is_one_config_error_naming_it(tmp_path, file, text, message):
    path = tmp_path / file
    if text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError) as err:
        from_config.read(path)
    assert str(err.value).startswith(f"{path}: {message}") and "allowed:" in str(err.value)


def test_a_bad_value_names_its_field():
    with pytest.raises(ConfigError, match=r"^algorithm\.rollout_correction\.rollout_rs_threshold"):
        from_config.correction_of({"algorithm.rollout_correction.rollout_rs": "seq_sum_k1"})
    with pytest.raises(ConfigError, match=r"^vllm_importance_sampling_mode: got 'seq'"):
        from_config.correction_of(dict(VLLM, vllm_importance_sampling_mode="seq"))
    with pytest.raises(ConfigError, match=r"^algorithm\.rollout_correction\.rollout_is_threshold"):
        from_config.correction_of({"algorithm.rollout_correction.rollout_is_threshold": "abc"})
