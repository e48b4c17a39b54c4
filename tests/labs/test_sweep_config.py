"""The sweep's config: its grid plus the env's ``instance``; flat flags and file keys, the
env's subtable (``[sweep.bandit]``) as the canonical file form, and one dump that reads back."""

from __future__ import annotations

import dataclasses
import tomllib

import pytest

from gpolab import configs, validate
from gpolab.envs import arithmetic, bandit, tree
from gpolab.labs.sweep import lab as sweep


def test_config_is_the_grid_plus_one_instance():
    fields = [f.name for f in dataclasses.fields(sweep.Config)]
    assert len(fields) <= 15 and fields[-1] == "instance"
    for env, cls in (
        ("bandit", bandit.Instance),
        ("tree", tree.Instance),
        ("arithmetic", arithmetic.Instance),
    ):
        assert isinstance(sweep.Config(env=env).instance, cls)
    assert sweep.Config(env="tree").estimators == ("thought-std",)


def test_flat_keywords_build_the_instance():
    cfg = sweep.Config(prompts=3, actions=4)
    assert cfg.instance == bandit.Instance(prompts=3, actions=4) and cfg.instance.prompts == 3
    t = sweep.Config(env="tree", estimators=("leaf-std",), K=(2,))
    assert t.estimators == ("leaf-std",) and t.instance.K == (2,)
    with pytest.raises(validate.ConfigError, match="^variants: unknown field"):  # removed name
        sweep.Config(env="tree", variants=("leaf-std",))
    with pytest.raises(validate.ConfigError, match="prompts: not used with env = tree"):
        sweep.Config(env="tree", prompts=3)
    assert cfg.replace(env="tree").instance == tree.Instance()


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(env="tree", model="finite", thoughts=5),
        dict(env="arithmetic", policy=("icl",), filler=8),
        dict(B=4, dynamic_sampling=True, kind="loglinear", dim=3),
    ],
)
def test_dump_writes_the_subtable_and_reads_back_to_the_same_config(tmp_path, kw):
    cfg = configs.resolve(sweep.Config, table=kw)
    text = configs.dumps(cfg, "sweep")
    data = tomllib.loads(text)
    assert set(data["sweep"][cfg.env]) == {
        f.name for f in dataclasses.fields(cfg.instance) if configs.used(cfg, f.name)
    }
    path = tmp_path / "c.toml"
    path.write_text(text)
    _, table, _ = configs.split_file(path, "sweep")
    assert configs.resolve(sweep.Config, table=table) == cfg


def test_flat_file_keys_still_load_and_mixing_forms_is_one_error(tmp_path):
    flat, nested = tmp_path / "flat.toml", tmp_path / "nested.toml"
    flat.write_text('[sweep]\nenv = "bandit"\nprompts = 8\n')
    nested.write_text('[sweep]\nenv = "bandit"\n[sweep.bandit]\nprompts = 8\n')
    tables = [configs.split_file(p, "sweep")[1] for p in (flat, nested)]
    assert configs.resolve(sweep.Config, table=tables[0]) == configs.resolve(
        sweep.Config, table=tables[1]
    )
    both = tmp_path / "both.toml"
    both.write_text("[sweep]\nprompts = 8\n[sweep.bandit]\nprompts = 9\n")
    with pytest.raises(validate.ConfigError, match=r"\[sweep.bandit\] prompts: also given"):
        configs.split_file(both, "sweep")
    other = tmp_path / "other.toml"
    other.write_text('[sweep]\nenv = "tree"\n[sweep.bandit]\nprompts = 8\n')
    with pytest.raises(
        validate.ConfigError,
        match=r"other.toml \[sweep\] prompts: not used with "
        "env = tree; it applies only when env is bandit",
    ):
        configs.resolve(
            sweep.Config, table=configs.split_file(other, "sweep")[1], source=str(other)
        )


def test_sweep_lab_never_branches_on_the_env_name():
    import inspect

    assert "env ==" not in inspect.getsource(sweep)


def test_quick_sizes_of_another_envs_instance_are_not_used():
    sizes = {"seeds": 300, "K": (2,), "truth_samples": 16}
    cfg = configs.resolve(sweep.Config, table={"env": "arithmetic"}, quick=sizes)
    assert cfg.seeds == 300 and cfg.instance.truth_samples == 16
    assert configs.resolve(sweep.Config, table={"env": "tree"}, quick=sizes).instance.K == (2,)
