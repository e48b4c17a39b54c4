"""gpolab.labs.mismatch.from_config: a TRL GRPOConfig or verl config file names the mismatch
correction it runs, with the user's values as overrides that ``estimate_weights`` accepts, and
each setting that changes the gradient but is not modelled; a bad file (an unknown or duplicate
key, a wrong value, a combination the framework raises for) is one ConfigError naming the file and
the key, before anything is computed or written (issue 55's probes, one test each)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpolab.estimators import mismatch
from gpolab.labs.mismatch import framework_settings as settings
from gpolab.labs.mismatch import from_config
from gpolab.runner.cli import main
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
     {"is_threshold": 2.0, "rs_threshold": (0.5, 2.0)}, ""),  # k1's U alone: L = 1/U
    ("bypass.yaml", RC + "    bypass_mode: true\n    loss_type: ppo_clip\n" + ACTOR
     + "    clip_ratio_high: 0.28\n", "verl/bypass_ppo_clip",
     {"eps_low": 0.2, "eps_high": 0.28, "clip_c": 3.0}, ""),
    ("gspo.yaml", RC + "    bypass_mode: true\n" + ACTOR + "    clip_ratio_low: 3.0e-4\n"
     "    clip_ratio_high: 4.0e-4\n    policy_loss:\n      loss_mode: gspo\n", "verl/gspo",
     {"eps_low": 3e-4, "eps_high": 4e-4}, ""),  # verl's v1 trainer (its default) runs gspo vs μ
    ("v0.yaml", RC + "    bypass_mode: true\n" + ACTOR + "    policy_loss:\n      loss_mode: gspo\n"
     "trainer:\n  use_v1: false\n", "verl/bypass_ppo_clip", {"eps_high": 0.2},
     "replaced by bypass_mode"),  # the legacy trainer's apply_bypass_mode
    ("thr.yaml", RC + "    rollout_is_threshold: 3.0\n", "none", {}, "YAML default"),
    ("exp.yaml", RC + "    bypass_mode: true\n" + ACTOR + "    clip_ratio_high: 1e-3\n",
     "verl/bypass_ppo_clip", {"eps_high": 1e-3}, ""),  # 1e-3 a float, as OmegaConf reads it
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
    own = [n for n in got["notes"] if not n.startswith("not modelled")]
    assert any(note in n for n in own) if note else own == [], got["notes"]
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
     ({"algorithm.rollout_correction.bypass_mode": True, "trainer.use_v1": False,
       "algorithm.rollout_correction.loss_type": "reinforce"}, "bypass_pg_is")],
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


# ------------------------------------------------------------------------- issue 55's probes
SMALL = ["--prompts", "3", "--batch", "4", "--G", "4", "--seeds", "256"]


def _refused(tmp_path, capsys, text, *fragments, file="cfg.yaml"):
    """The lab refuses ``text`` as --from-config in one line naming the file and each fragment
    (the key), exit 2, with no output folder written."""
    path, out = tmp_path / file, tmp_path / "o"
    path.write_text(text)
    assert main(["mismatch", *SMALL, "--from-config", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and "Traceback" not in err, err
    assert all(f in err for f in fragments), err
    assert not out.exists()
    return err


def test_trl_sequence_level_with_token_is_is_refused_with_what_trl_computes(tmp_path, capsys):
    """importance_sampling_level sequence: TRL's (B, 1) loss times the (B, T) vLLM weights gives
    every token A·mean_t ρ̃_t (checked through TRL's dapo loss written out here), which is not
    trl/token_truncate's A·ρ̃_t; the reader refuses instead of mapping it there."""
    logp_old = jnp.log(jnp.array([[0.5, 0.25, 0.4]]))
    rho = jnp.array([[2.0, 0.5, 1.5]])  # ρ̃_t, detached
    A = 1.3

    def trl_loss(logp):  # grpo_trainer._compute_loss, importance_sampling_level "sequence", dapo
        coef_1 = jnp.exp(jnp.mean(logp - logp_old, -1, keepdims=True))  # (B, 1)
        per_token_loss = -jnp.minimum(coef_1 * A, jnp.clip(coef_1, 0.8, 1.2) * A) * rho  # (B, T)
        return jnp.sum(per_token_loss) / logp.size

    coef = -jax.grad(trl_loss)(logp_old) * logp_old.size
    np.testing.assert_allclose(coef, A * jnp.mean(rho) * jnp.ones((1, 3)), rtol=1e-6)
    assert not np.allclose(coef, A * rho)  # trl/token_truncate's coefficients
    text = VLLM_YAML + "importance_sampling_level: sequence\n"
    got = from_config.correction_of(
        {**VLLM, "importance_sampling_level": "sequence",
         "vllm_importance_sampling_mode": "token_truncate"})  # fmt: skip
    assert got["name"] is None and "A·mean_t ρ̃_t" in got["notes"][0]
    _refused(tmp_path, capsys, text + "vllm_importance_sampling_mode: token_mask\n",
             "importance_sampling_level sequence", "mean_t")  # fmt: skip
    seq = dict(VLLM, importance_sampling_level="sequence")  # sequence IS: the same weight
    assert from_config.correction_of(seq)["name"] == "trl/sequence_mask"


VLLM_YAML = "use_vllm: true\n"
VERL_RC = RC


@pytest.mark.parametrize(
    "text, key, near",
    [(VLLM_YAML + "vllm_importance_sampling_clipmax: 1.5\n", "vllm_importance_sampling_clipmax",
      "vllm_importance_sampling_clip_max"),
     ("use_vlm: true\nloss_type: dapo\n", "use_vlm", "use_vllm"),
     (RC + "    rollout_iss: token\n", "algorithm.rollout_correction.rollout_iss",
      "algorithm.rollout_correction.rollout_is"),
     (ACTOR + "    policy_loss:\n      loss_mod: gspo\n", "policy_loss.loss_mod", "loss_mode"),
     ("actor_rollout_ref.actor.clip_ratio_hi: 0.3\n", "clip_ratio_hi", "clip_ratio_high")],
)  # fmt: skip
def test_an_unknown_key_is_one_line_naming_it_and_its_close_match(
    tmp_path, capsys, text, key, near
):
    """Before: the TRL typo gave the default cap 3 and the verl typo `none`, silently."""
    err = _refused(tmp_path, capsys, text, key, near)
    assert "unknown" in err


def test_keys_the_frameworks_accept_are_accepted():
    """TrainingArguments' fields (GRPOConfig(**d) takes them), trl grpo --config's script and model
    arguments, dict-valued fields, and verl's own keys in the sections read."""
    trl = dict(
        VLLM,
        output_dir="o",
        per_device_train_batch_size=4,
        model_name_or_path="Qwen",
        model_init_kwargs={"dtype": "bfloat16"},
        report_to=["wandb"],
        env={"A": "1"},
    )
    assert from_config.correction_of(trl)["name"] == "trl/sequence_mask"
    verl = {"algorithm": {"gamma": 1.0, "kl_ctrl": {"kl_coef": 0.001},
                          "rollout_correction": {"rollout_is": "token"}},
            "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 256, "optim": {"lr": 1e-6},
                                            "policy_loss": {"clip_cov_ratio": 2e-4}},
                                  "rollout": {"n": 8, "temperature": 1.0}},
            "trainer": {"total_epochs": 1}, "data": {"train_batch_size": 1024}}  # fmt: skip
    assert from_config.correction_of(verl)["name"] == "verl/token_tis"


def test_the_key_lists_hold_every_key_the_reader_reads():
    for key in settings.TRL:
        assert key in settings.TRL_ALL, key
    for key in settings.VERL:
        sec = next((s for s in settings.DEEPEST if key.startswith(s + ".")), None)
        assert sec is None or key[len(sec) + 1 :] in settings.SECTIONS[sec], key


@pytest.mark.parametrize(
    "settings, label",
    [({**VLLM, "vllm_importance_sampling_correction": False, "off_policy_mask_threshold": 0.5},
      "off_policy_mask_threshold 0.5"),  # the mask without an IS entry to carry it
     ({**VLLM, "top_entropy_quantile": 0.2}, "top_entropy_quantile 0.2"),
     ({**VLLM, "beta": 0.04}, "beta 0.04"),
     ({**VLLM, "num_iterations": 2}, "num_iterations 2"),
     ({**VLLM, "delta": 0.9}, "delta 0.9"),
     ({**VLLM}, "scale_rewards group"),  # TRL's default: std-normalised advantages
     ({**VLLM, "scale_rewards": False}, "scale_rewards none"),
     ({"algorithm.adv_estimator": "grpo", "algorithm.rollout_correction.rollout_is": "token"},
      "adv_estimator grpo with norm_adv_by_std_in_grpo true"),  # verl's default normalisation
     ({"algorithm.rollout_correction.rollout_is": "token"}, "adv_estimator gae"),
     ({"actor_rollout_ref.actor.use_kl_loss": True}, "use_kl_loss true"),
     ({"actor_rollout_ref.actor.ppo_epochs": 2}, "ppo_epochs 2")],
)  # fmt: skip
def test_each_gradient_setting_not_modelled_is_named_in_the_sentence(settings, label):
    """Before: dropped without a word (the lab measures leave-one-out advantages only)."""
    got = from_config.correction_of(settings)
    assert got["name"] is not None and label in got["text"], got["text"]
    assert "not modelled, each changes your gradient" in got["text"]
    assert any(n.startswith("not modelled: ") and label in n for n in got["notes"])


def test_trls_vespo_is_its_gamma_weight_on_the_token_ratios():
    """TRL 1.16.0's VESPO (token modes only: TRL raises otherwise): A·φ(w), φ(w) = e^(λ + k log w
    − λw), w = exp Σ_t clamp(log ρ̃_t, log 1e-8, 20), (k, λ) = (2, 3) for A ≥ 0 and (3, 2) else."""
    import math

    import jax.numpy as jnp

    from gpolab.estimators import mismatch

    got = from_config.correction_of(
        {
            **VLLM,
            "loss_type": "vespo",
            "vllm_importance_sampling_mode": "token_mask",
            "vespo_k_pos": 1.5,
        }  # fmt: skip
    )
    assert got["name"] == "trl/vespo_token_mask" and got["overrides"]["k_pos"] == 1.5
    A = jnp.array([1.0, -1.0, 1.0])
    d = jnp.array([[0.1, 0.1], [0.2, -2.0], [0.0, 1.5]])  # log π_old − log μ; e^1.5 > 3: masked
    m = jnp.ones((3, 2))
    w = mismatch.correction("trl/vespo_token_mask", A, d, jnp.zeros_like(d), m).coef[:, 0]

    def phi(log_w, k, lam):
        return math.exp(lam + k * log_w - lam * math.exp(log_w))

    want = [phi(0.2, 2, 3), -phi(-1.8, 3, 2), phi(math.log(1e-8), 2, 3)]
    assert [float(x) for x in w] == pytest.approx(want, rel=1e-5)
    truncated = mismatch.correction("trl/vespo_token_truncate", A, d, jnp.zeros_like(d), m)
    assert float(truncated.coef[2, 0]) == pytest.approx(phi(math.log(3.0), 2, 3), rel=1e-5)


def test_trls_off_policy_sequence_mask_is_its_entrys_option():
    """TRL 1.16.0's off_policy_mask_threshold δ (GRPOTrainer.get_off_policy_mask) rides on the
    vLLM IS entry: a sequence with A < 0 whose mean log μ − log π_θ exceeds δ is dropped (0 on
    its tokens, still in the denominator); A ≥ 0 or a mean at most δ keeps it."""
    import jax.numpy as jnp

    from gpolab.estimators import mismatch

    got = from_config.correction_of({**VLLM, "off_policy_mask_threshold": 0.5})
    assert got["name"] == "trl/sequence_mask" and got["overrides"]["off_policy_mask"] == 0.5
    assert "off_policy_mask_threshold" not in " ".join(got["unmodelled"])
    A = jnp.array([1.0, -1.0, -1.0, -1.0])
    d = jnp.array([[-0.8, -0.8], [-0.8, -0.8], [-0.4, -0.6], [-0.1, -0.1]])  # log π_θ − log μ
    m = jnp.ones((4, 2))
    w = mismatch.correction("trl/token_truncate", A, d, jnp.zeros_like(d), m, off_policy_mask=0.5)
    assert [bool(x) for x in w.flagged[:, 0]] == [False, True, False, False]  # means .8, .8, .5, .1
    assert float(w.coef[1].sum()) == 0.0 and float(w.kept.sum()) == 8.0
    off = mismatch.correction("trl/token_truncate", A, d, jnp.zeros_like(d), m)
    assert not bool(off.flagged.any())  # TRL's default: no mask


def test_verl_v1_bypass_applies_no_correction_and_ignores_loss_type():
    """verl's v1 trainer (trainer.use_v1, its YAML default) only swaps π_old in bypass mode."""
    got = from_config.correction_of(
        {
            "algorithm.rollout_correction.bypass_mode": True,
            "algorithm.rollout_correction.loss_type": "reinforce",
            "algorithm.rollout_correction.rollout_is": "sequence",
        }
    )
    assert got["name"] == "verl/bypass_ppo_clip"
    assert any("loss_type reinforce" in n and "not applied" in n for n in got["notes"])


def test_leave_one_out_advantages_and_default_settings_name_nothing():
    got = from_config.correction_of(
        {"algorithm.adv_estimator": "rloo", "algorithm.rollout_correction.rollout_is": "token"}
    )
    assert got["unmodelled"] == [] and "not modelled" not in got["text"]


@pytest.mark.parametrize(
    "text, fragments",
    [(VLLM_YAML + "vllm_importance_sampling_mode: token_truncate\n"
      "vllm_importance_sampling_clip_max: null\n", ("vllm_importance_sampling_clip_max", "bound")),
     (VLLM_YAML + "vllm_importance_sampling_clip_min: 2.0\nvllm_importance_sampling_cap: 1.5\n",
      ("vllm_importance_sampling_clip_min", "less than")),
     (VLLM_YAML + "loss_type: vespo\n", ("vllm_importance_sampling_mode", "vespo")),
     (VLLM_YAML + "num_generations: 1\n", ("num_generations",)),
     (VLLM_YAML + "generation_batch_size: 64\nsteps_per_generation: 2\n",
      ("steps_per_generation",))],
)  # fmt: skip
def test_what_trl_raises_for_at_start_up_is_refused(tmp_path, capsys, text, fragments):
    """GRPOConfig.__post_init__ / GRPOTrainer.__init__; before: both bounds null was accepted."""
    _refused(tmp_path, capsys, text, *fragments)


def test_verl_without_rollout_log_probs_skips_the_correction_as_verl_does(tmp_path, capsys):
    """calculate_log_probs false: no rollout_log_probs in the batch, so verl's trainer skips the
    correction (decoupled) or raises (bypass); before: verl/token_tis."""
    off = {"algorithm.rollout_correction.rollout_is": "token",
           "actor_rollout_ref.rollout.calculate_log_probs": False}  # fmt: skip
    got = from_config.correction_of(off)
    assert got["name"] == "none" and "calculate_log_probs false" in got["notes"][0]
    text = (
        RC
        + "    bypass_mode: true\nactor_rollout_ref:\n  rollout:\n    calculate_log_probs: false\n"
    )
    _refused(tmp_path, capsys, text, "calculate_log_probs", "bypass")
    null = {"algorithm.rollout_correction.rollout_is": "token",
            "algorithm.rollout_correction.rollout_is_threshold": None}  # fmt: skip
    assert from_config.correction_of(null)["name"] == "none"  # verl: no threshold, no IS


@pytest.mark.parametrize(
    "text, fragments",
    [(VLLM_YAML + "loss_type: cispo\nvllm_importance_sampling_mode: token_truncate\n"
      "epsilon_high: abc\n", ("epsilon_high", "'abc'")),  # before: a TypeError traceback
     (VLLM_YAML + "loss_type: cispo\nvllm_importance_sampling_mode: token_truncate\n"
      "epsilon: null\n", ("epsilon: got None",)),  # before: a TypeError traceback
     (VLLM_YAML + "vllm_importance_sampling_clip_max: [1, 2]\n",
      ("vllm_importance_sampling_clip_max", "[1, 2]")),  # before: failed after a cell, '[1'
     (RC + "    rollout_rs: seq_sum_k1\n    rollout_rs_threshold: [0.5, 2.0]\n",
      ("rollout_rs_threshold", "[0.5, 2.0]")),
     (VLLM_YAML + "vllm_importance_sampling_clip_max:\n  value: 1.5\n",
      ("vllm_importance_sampling_clip_max", "a mapping")),  # before: dropped, cap 3
     (RC + "    rollout_is:\n      level: token\n", ("rollout_is", "a mapping")),
     (VLLM_YAML + "vllm_importance_sampling_clip_max: 1.5\nvllm_importance_sampling_clip_max: 9\n",
      ("duplicate key 'vllm_importance_sampling_clip_max'", "line 3")),  # before: 9, silently
     (RC + "    rollout_rs: seq_mean_k3\n    rollout_rs_threshold: 0.5_2.0\n",
      ("rollout_rs_threshold", "single upper bound")),
     (RC + "    rollout_rs: ''\n", ("rollout_rs",))],
)  # fmt: skip
def test_the_new_user_trials_inputs_are_one_line_before_anything_runs(
    tmp_path, capsys, text, fragments
):
    _refused(tmp_path, capsys, text, *fragments)


def test_a_duplicate_json_key_is_refused(tmp_path, capsys):
    text = '{"use_vllm": true, "epsilon": 0.2, "epsilon": 0.3}'
    _refused(tmp_path, capsys, text, "duplicate key 'epsilon'", file="cfg.json")


def test_verl_absent_keys_take_its_yaml_defaults_not_its_python_ones():
    """RolloutCorrectionConfig's Python default rollout_is is "sequence"; a hydra run gets
    rollout_correction.yaml's null, and so does the reader (its docstring says why)."""
    got = from_config.correction_of({"algorithm.rollout_correction.bypass_mode": False})
    assert got["name"] == "none"
    assert "rollout_is: null" in from_config.__doc__ and '"sequence"' in from_config.__doc__
