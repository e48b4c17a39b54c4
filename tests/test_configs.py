"""gpolab.configs directly: deprecated names (a config's ``ALIASES`` and an env Instance's) are
read under their new names from flags, file keys (flat or in the env's subtable) and keywords,
with one note per old name per process on stderr."""

from __future__ import annotations

import argparse
import dataclasses
from typing import ClassVar

import pytest

from gpolab import configs
from gpolab.configs import option
from gpolab.labs import sweep


@pytest.fixture(autouse=True)
def fresh_notes(monkeypatch):
    monkeypatch.setattr(configs, "_NOTED", set())


def parse(cls, argv):
    parser = argparse.ArgumentParser()
    configs.add_flags(parser, cls)
    return configs.typed(parser.parse_args(argv), cls)


def test_an_old_flag_is_read_under_its_new_name_with_one_note(capsys):
    for _ in range(2):
        typed = parse(sweep.Config, ["--env", "tree", "--variants", "leaf-std"])
        cfg = configs.resolve(sweep.Config, typed=typed)
        assert cfg.estimators == ("leaf-std",)
    err = capsys.readouterr().err
    assert err == "note: --variants is deprecated; use --estimators (same meaning)\n"


def test_an_old_file_key_names_the_key_form(capsys):
    cfg = configs.resolve(sweep.Config, table={"env": "tree", "variants": ["mean-only"]})
    assert cfg.estimators == ("mean-only",)
    assert (
        capsys.readouterr().err == "note: variants is deprecated; use estimators (same meaning)\n"
    )
    sweep.Config(env="tree", variants=("leaf-std",))  # keywords: noted once already
    assert capsys.readouterr().err == ""


def test_old_and_new_name_together_is_one_error():
    with pytest.raises(configs.ConfigError, match="variants: an older name of estimators"):
        configs.resolve(sweep.Config, typed={"env": "tree", "variants": "leaf-std",
                                             "estimators": "mean-only"})  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Dummy:
    """An env Instance whose fields ``a``, ``b`` were renamed."""

    ALIASES: ClassVar[dict] = {"a": "beta_a", "b": "beta_b"}
    beta_a: float = option(1.0, "first shape")
    beta_b: float = option(2.0, "second shape")

    def validate(self) -> None:
        pass


@dataclasses.dataclass(frozen=True, init=False)
class Lab:
    LAB: ClassVar[str] = "dummylab"
    QUICK: ClassVar[dict] = {}
    INSTANCES: ClassVar[tuple] = ("env", {"dummy": Dummy})
    env: str = option("dummy", "the env")
    seeds: int = option(10, "seeds")
    instance: Dummy = option(None, "the env's settings")

    def __init__(self, **kw) -> None:
        configs.init(self, configs.aliased(type(self), kw))

    def replace(self, **changes) -> Lab:
        return configs.replace(self, **changes)

    def validate(self) -> None:
        pass


def test_instance_aliases_from_flags_file_subtable_flat_keys_and_keywords(capsys):
    assert configs.aliases(Lab) == {"a": "beta_a", "b": "beta_b"}
    cfg = configs.resolve(Lab, typed=parse(Lab, ["--a", "3", "--beta-b", "4"]))
    assert cfg.instance == Dummy(3.0, 4.0)
    assert capsys.readouterr().err == "note: --a is deprecated; use --beta-a (same meaning)\n"
    cfg = configs.resolve(Lab, table={"seeds": 5, "dummy": {"b": 6}})  # the subtable
    assert (cfg.seeds, cfg.instance) == (5, Dummy(1.0, 6.0))
    assert capsys.readouterr().err == "note: b is deprecated; use beta_b (same meaning)\n"
    assert configs.resolve(Lab, table={"a": 7}).instance == Dummy(7.0, 2.0)  # flat key
    assert Lab(a=8).instance == Dummy(8.0, 2.0) == Lab().replace(a=8).instance
    assert capsys.readouterr().err == ""  # each old name noted once per process
