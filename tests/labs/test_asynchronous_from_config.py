"""``gpolab asynchronous --from-config``: a TRL AsyncGRPOConfig names the composition it runs
(its clip, ε_high falling back to ε as AsyncGRPOTrainer does) and the oldest rollouts it keeps
((max_staleness + 1)·weight_sync_steps − 1 optimizer steps: model_version grows once per weight
sync); every key is checked against AsyncGRPOConfig's and TrainingArguments' fields; the lab marks
the user's rows and sets them beside the best alternatives."""

import json

import pytest
import yaml

from gpolab.estimators import asynchronous as compositions
from gpolab.labs.asynchronous import from_config
from gpolab.labs.asynchronous import lab as asynchronous
from gpolab.runner.cli import main
from gpolab.validate import ConfigError


def _file(tmp_path, data, suffix=".yaml"):
    path = tmp_path / f"cfg{suffix}"
    path.write_text(json.dumps(data) if suffix == ".json" else yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    "data, spec, oldest",
    [
        ({}, "trl/async_grpo", 4),  # AsyncGRPOConfig's defaults: ε 0.2 both sides, max_staleness 4
        ({"epsilon": 0.3}, "trl/async_grpo[eps_low=0.3,eps_high=0.3]", 4),
        ({"epsilon_high": 0.28, "max_staleness": 2}, "trl/async_grpo[eps_high=0.28]", 2),
        ({"max_staleness": 4, "weight_sync_steps": 2}, "trl/async_grpo", 9),
        ({"max_staleness": 0, "per_device_train_batch_size": 8}, "trl/async_grpo", 0),
    ],
)
def test_the_setup_as_trl_runs_it(tmp_path, data, spec, oldest):
    setup = from_config.setup_of(from_config.read(_file(tmp_path, data)))
    assert (setup["correction"], setup["staleness"], setup["m"]) == (spec, oldest, 1)
    assert compositions.parse(setup["correction"])[0] == "trl/async_grpo"
    assert any("not modelled: advantages" in n for n in setup["notes"])


def test_a_trainer_dict_under_args_is_unwrapped(tmp_path):
    path = _file(tmp_path, {"args": {"epsilon_high": 0.28}}, ".json")
    assert from_config.setup_of(from_config.read(path))["correction"].endswith("[eps_high=0.28]")


@pytest.mark.parametrize(
    "data, message",
    [
        (
            {"max_stalenes": 3},
            "max_stalenes: unknown AsyncGRPOConfig key (did you mean max_staleness?)",
        ),
        (  # a GRPOConfig key makes it a GRPOConfig, which has no max_staleness
            {"vllm_importance_sampling_mode": "token_mask", "max_staleness": 1},
            "max_staleness: unknown TRL key",
        ),
        ({"max_staleness": -1}, "max_staleness: got -1"),
        ({"max_staleness": 2.5}, "max_staleness: got 2.5"),
        ({"epsilon": 1.5}, "epsilon: got 1.5"),
        ({"epsilon_high": "x"}, "epsilon_high: got 'x'"),
        ({"weight_sync_steps": 0}, "weight_sync_steps: got 0"),
        ([1, 2], "not a mapping"),
    ],
)
def test_bad_configs_are_one_error_naming_file_and_key(tmp_path, data, message):
    path = _file(tmp_path, data)
    with pytest.raises(ConfigError) as err:
        from_config.read(path)
    assert str(err.value).startswith(str(path)) and message in str(err.value)


def test_a_bad_file_stops_the_lab_before_anything_runs(tmp_path, capsys):
    out = tmp_path / "o"
    path = _file(tmp_path, {"max_staleness": "four"})
    assert main(["asynchronous", "--quick", "--out", str(out), "--from-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "max_staleness: got 'four'" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_the_lab_marks_your_rows_and_sets_them_beside_the_best(tmp_path):
    path = _file(tmp_path, {"epsilon_high": 0.28, "max_staleness": 1})
    cfg = asynchronous.Config(
        correction=("sis",),
        mismatch=("noise:0.2",),
        staleness=(0,),
        m=(2,),
        eta=(0.5,),
        rounds=2,
        seeds=32,
        curve_seeds=16,
        T=8,
        from_config=str(path),
        out=str(tmp_path / "o"),
        instance=asynchronous.markov.Instance(prompts=3, vocab=3, batch=4),
    )
    tables = asynchronous.run(cfg)
    res = tables["results"]
    assert sorted(res["staleness"].unique()) == [0, 1] and sorted(res["m"].unique()) == [1, 2]
    mine = res[res["yours"]]
    assert set(mine["correction"]) == {"trl/async_grpo[eps_high=0.28]"}
    assert set(mine["m"]) == {1} and set(mine["staleness"]) == {0, 1}
    assert mine["eps_high"].eq(0.28).all() and mine["eps_low"].eq(0.2).all()
    assert mine["clip"].eq("higher").all()  # asymmetric: the clip-higher rule
    text = asynchronous.notes(cfg, tables)
    assert "Your config" in text and "Your setup beside the best alternatives" in text
    assert tables["training"]["yours"].sum() == 2


VERL_IS = {"algorithm": {"rollout_correction": {"rollout_is": "token"}}}


@pytest.mark.parametrize(
    "data, spec, m",
    [
        ({"algorithm": {"adv_estimator": "grpo"}}, "verl/decoupled", 4),  # YAML defaults: no IS
        (VERL_IS, "verl/decoupled_token_is", 4),
        (
            {
                **VERL_IS,
                "data": {"train_batch_size": 512},
                "actor_rollout_ref": {"actor": {"ppo_epochs": 2}},
            },
            "verl/decoupled_token_is",
            4,
        ),
        ({"algorithm": {"rollout_correction": {"bypass_mode": True}}}, "verl/bypass_ppo_clip", 4),
        (
            # verl's YAML sets clip_ratio_low/high (0.2), so clip_ratio alone changes nothing
            {"actor_rollout_ref": {"actor": {"clip_ratio": 0.3, "clip_ratio_c": 5.0}}},
            "verl/decoupled[clip_c=5.0]",
            4,
        ),
        (
            {"actor_rollout_ref": {"actor": {"clip_ratio_low": 0.3, "clip_ratio_high": 0.3}}},
            "verl/decoupled[eps_low=0.3,eps_high=0.3]",
            4,
        ),
        (  # a TIS threshold of the user's own is the composition's weight option
            {
                "algorithm": {
                    "rollout_correction": {"rollout_is": "sequence", "rollout_is_threshold": 3.0}
                }
            },
            "verl/decoupled_seq_is[is_threshold=3.0]",
            4,
        ),
    ],
)
def test_verls_synchronous_trainer_is_k_0_and_its_minibatches(tmp_path, data, spec, m):
    """verl's decoupled or bypass composition at k = 0 (each batch drawn by the current weights)
    and m = ppo_epochs · train_batch_size / ppo_mini_batch_size."""
    setup = from_config.setup_of(from_config.read(_file(tmp_path, data)))
    assert (setup["correction"], setup["staleness"], setup["m"]) == (spec, 0, m)


@pytest.mark.parametrize(
    "data, message",
    [
        (
            {"actor_rollout_ref": {"actor": {"policy_loss": {"loss_mode": "gspo"}}}},
            "loss_mode gspo",
        ),
        ({"actor_rollout_ref": {"actor": {"clip_ratio_high": 0.28}}}, "clip_ratio_high 0.28"),
        ({"actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 300}}}, "a divisor of"),
        (
            {
                "algorithm": {
                    "rollout_correction": {"rollout_is": "token", "rollout_is_threshold": "0.2_4"}
                }
            },
            "has no asynchronous composition",  # IcePop bounds other than the preset's
        ),
        ({"actor_rollout_ref": {"actor": {"clip_ratoi": 0.2}}}, "unknown verl key"),
    ],
)
def test_verl_configs_it_cannot_map_are_one_error(tmp_path, data, message):
    path = _file(tmp_path, data)
    with pytest.raises(ConfigError) as err:
        from_config.read(path)
    assert str(err.value).startswith(str(path)) and message in str(err.value)


ASYNC_AREAL = {"actor": {"use_decoupled_loss": True}, "rollout": {"max_head_offpolicyness": 2}}


@pytest.mark.parametrize(
    "data, spec, oldest, m",
    [
        ({"actor": {}}, "trl/async_grpo", 0, 4),  # defaults: coupled loss, synchronous
        ({"actor": {"recompute_logprob": True}}, "areal/decoupled", 0, 4),
        (ASYNC_AREAL, "areal/decoupled", 8, 4),
        (
            {**ASYNC_AREAL, "actor": {"use_decoupled_loss": True, "rejection_sampling": {}}},
            "areal/decoupled_mask",
            8,
            4,
        ),
        (
            {
                "actor": {"use_decoupled_loss": True, "prox_logp_method": "loglinear"},
                "rollout": {"max_head_offpolicyness": 1},
            },
            "areal/a3po",
            4,
            4,
        ),
        (
            {
                "actor": {
                    "use_decoupled_loss": True,
                    "ppo_n_minibatches": 1,
                    "eps_clip_higher": 0.28,
                }
            },
            "areal/decoupled[eps_high=0.28]",
            0,
            1,
        ),
    ],
)
def test_areals_composition_and_versions(tmp_path, data, spec, oldest, m):
    """AReaL's anchor by use_decoupled_loss, recompute_logprob and prox_logp_method; one version
    per training step of ppo_n_minibatches updates, so k = max_head_offpolicyness · m."""
    setup = from_config.setup_of(from_config.read(_file(tmp_path, data)))
    assert (setup["correction"], setup["staleness"], setup["m"]) == (spec, oldest, m)


@pytest.mark.parametrize(
    "data, message",
    [
        (
            {"actor": {"eps_clp": 0.2}},
            "actor.eps_clp: unknown AReaL key (did you mean actor.eps_clip?)",
        ),
        ({"actor": {}, "rollout": {"max_head_offpolicynes": 2}}, "rollout.max_head_offpolicynes"),
        ({"actor": {}, "trainer": {}}, "trainer: unknown AReaL key"),
        ({"actor": {"behave_imp_weight_cap": 5}}, "actor.behave_imp_weight_cap"),
        ({"actor": {"prox_logp_method": "bogus"}}, "actor.prox_logp_method: got 'bogus'"),
        ({"actor": {"c_clip": 0.5}}, "actor.c_clip: got 0.5"),
        ({"actor": {"c_clip": 3.0}}, "a dual clip"),
        ({"actor": {"use_sapo_loss": True}}, "SAPO"),
        ({"actor": {"rejection_sampling": {"upper": 3.0}}}, "actor.rejection_sampling.upper"),
        ({"actor": {"rejection_sampling": {"uper": 3.0}}}, "unknown AReaL key"),
        (
            {"actor": {}, "rollout": {"max_head_offpolicyness": -1}},
            "max_head_offpolicyness: got -1",
        ),
    ],
)
def test_areal_configs_it_cannot_map_are_one_error(tmp_path, data, message):
    path = _file(tmp_path, data)
    with pytest.raises(ConfigError) as err:
        from_config.read(path)
    assert str(err.value).startswith(str(path)) and message in str(err.value)


def test_a_queue_law_is_checked_against_the_grid_that_runs(tmp_path):
    """The user's oldest rollouts join the staleness grid, so a queue law is checked against
    that grid: ages up to the config's staleness are kept, older ones still refused."""
    path = _file(tmp_path, {"max_staleness": 4})  # k = 4 joins the grid (0, 1)
    fields = dict(staleness=(0, 1), from_config=str(path), out=str(tmp_path / "o"))
    asynchronous.Config(queue=("queue:3:0",), **fields).validate()
    with pytest.raises(ConfigError, match="older than the largest staleness 4"):
        asynchronous.Config(queue=("queue:6:0",), **fields).validate()
    with pytest.raises(ConfigError, match="older than the largest staleness 1"):
        asynchronous.Config(queue=("queue:3:0",), staleness=(0, 1)).validate()


@pytest.mark.parametrize(
    "data, spec, m",
    [
        ({"loss_type": "dapo"}, "trl/grpo", 1),  # use_vllm false (its default): no IS weight
        ({"use_vllm": True}, "trl/grpo_sequence_mask", 1),  # GRPOConfig's mode and cap 3.0
        (
            {"use_vllm": True, "vllm_importance_sampling_mode": "token_truncate"}
            | {"vllm_importance_sampling_clip_max": 2.0, "epsilon_high": 0.28},
            "trl/grpo_token_truncate[eps_high=0.28,clip_max=2.0]",
            1,
        ),
        (
            {"use_vllm": True, "vllm_importance_sampling_correction": False, "num_iterations": 2}
            | {"steps_per_generation": 4, "gradient_accumulation_steps": 2},
            "trl/grpo",
            4,
        ),
        (
            {"loss_type": "grpo", "generation_batch_size": 64, "per_device_train_batch_size": 8},
            "trl/grpo",
            8,
        ),
    ],
)
def test_trls_grpo_trainer_is_k_0_with_its_vllm_weight_and_steps_per_generation(
    tmp_path, data, spec, m
):
    """A GRPOConfig (any GRPOConfig-only key): TRL's synchronous trainer, k = 0, its PPO clip over
    the trainer's old log-probs times the vLLM IS weight the mismatch reader names (with the
    user's clip_max), m = steps_per_generation × num_iterations / gradient_accumulation_steps
    (steps_per_generation from generation_batch_size on one process)."""
    setup = from_config.setup_of(from_config.read(_file(tmp_path, data)))
    assert (setup["correction"], setup["staleness"], setup["m"]) == (spec, 0, m)
    assert compositions.correction(spec).anchor == "trainer"


@pytest.mark.parametrize(
    "data, message",
    [
        ({"loss_type": "cispo"}, "loss_type: got 'cispo'"),
        ({"use_vllm": True, "importance_sampling_level": "sequence"}, "importance_sampling_level"),
        (
            {"steps_per_generation": 3, "gradient_accumulation_steps": 2},
            "steps_per_generation: got 3",
        ),
        ({"use_vllm": True, "vllm_importance_sampling_clip_min": 4.0}, "clip_min"),
        ({"loss_type": "dapo", "max_stalenes": 1}, "max_stalenes: unknown TRL key"),
    ],
)
def test_grpo_configs_it_cannot_map_are_one_error(tmp_path, data, message):
    path = _file(tmp_path, data)
    with pytest.raises(ConfigError) as err:
        from_config.read(path)
    assert str(err.value).startswith(str(path)) and message in str(err.value), str(err.value)


def test_a_spec_sets_its_weights_own_options():
    """``trl/grpo_sequence_mask[clip_max=5.0]``: the weight's option joins the composition (the
    spelling round-trips; an option the weight has not, or bounds it refuses, is one error)."""
    corr = compositions.correction("trl/grpo_sequence_mask[clip_max=5.0]")
    assert dict(corr.options) == {"clip_max": 5.0}
    assert compositions.spec(*compositions.parse("trl/grpo_sequence_mask[clip_max=3.0]")) == (
        "trl/grpo_sequence_mask"
    )
    with pytest.raises(ConfigError, match="not understood"):
        compositions.parse("trl/grpo[clip_max=2]")
    with pytest.raises(ConfigError, match="lower < upper"):
        compositions.parse("trl/grpo_token_mask[clip_min=4.0]")


FULLY_ASYNC = {"data": {"train_batch_size": 0}, "async_training": {}}


def _fully_async(**over):
    out = {**FULLY_ASYNC, **over}
    out["async_training"] = {**FULLY_ASYNC["async_training"], **over.get("async_training", {})}
    return out


@pytest.mark.parametrize(
    "data, spec, oldest, m",
    [
        # the recipe's YAML: bypass mode, staleness_threshold 0.1, 4 local steps of 1 mini-batch
        (_fully_async(), "verl/bypass_ppo_clip", 4, 4),
        (  # require_batches and ppo_epochs multiply the updates per version
            _fully_async(
                async_training={"require_batches": 4, "staleness_threshold": 0.5},
                actor_rollout_ref={"actor": {"ppo_epochs": 2}},
            ),
            "verl/bypass_ppo_clip",
            32,
            32,
        ),
        (_fully_async(async_training={"staleness_threshold": 0}), "verl/bypass_ppo_clip", 0, 4),
        (_fully_async(async_training={"staleness_threshold": 1.5}), "verl/bypass_ppo_clip", 8, 4),
        (  # the recipe's decoupled script: token TIS at 2 over π_old of the last sync
            _fully_async(
                algorithm={
                    "rollout_correction": {
                        "bypass_mode": False,
                        "rollout_is": "token",
                        "rollout_is_threshold": 2.0,
                    }
                }
            ),
            "verl/decoupled_token_is",
            4,
            4,
        ),
    ],
)
def test_verls_fully_async_recipe_is_one_round_per_version(tmp_path, data, spec, oldest, m):
    """m = trigger_parameter_sync_step × require_batches × ppo_epochs updates per policy version;
    the oldest rollouts ⌈staleness_threshold⌉ versions back (0: synchronous, as verl's docs say);
    bypass mode by the recipe's own default."""
    setup = from_config.setup_of(from_config.read(_file(tmp_path, data)))
    assert (setup["correction"], setup["staleness"], setup["m"]) == (spec, oldest, m)
    assert any("counts, not ages" in n for n in setup["notes"])


@pytest.mark.parametrize(
    "data, message",
    [
        ({"async_training": {"staleness_threshold": 0.1}}, "data.train_batch_size: absent"),
        (_fully_async(data={"train_batch_size": 1024}), "data.train_batch_size: got 1024"),
        (_fully_async(async_training={"staleness_threshold": -1}), "staleness_threshold: got -1"),
        (_fully_async(async_training={"trigger_parameter_sync_step": 0}), "sync_step: got 0"),
        (_fully_async(async_training={"stalenes_threshold": 0.1}), "did you mean"),
    ],
)
def test_fully_async_configs_verl_refuses_are_one_error(tmp_path, data, message):
    path = _file(tmp_path, data)
    with pytest.raises(ConfigError) as err:
        from_config.read(path)
    assert str(err.value).startswith(str(path)) and message in str(err.value)
