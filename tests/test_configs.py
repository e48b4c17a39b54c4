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
from gpolab.labs.plan import lab as plan
from gpolab.labs.plancheck import lab as plancheck
from gpolab.labs.sweep import lab as sweep
from gpolab.labs.zoo import lab as zoo


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


@pytest.mark.parametrize(
    "cls,argv,field,value,note",
    [
        (zoo.Config, ["--envs", "bandit"], "env", ("bandit",), "--envs is deprecated; use --env"),
        (plancheck.Config, ["--envs", "arithmetic"], "env", ("arithmetic",),
         "--envs is deprecated; use --env"),
        (plan.Config, ["--log", ".", "--budget", "512"], "N", 512,
         "--budget is deprecated; use --N"),
    ],
)  # fmt: skip
def test_renamed_lab_flags_keep_the_old_spelling_with_a_note(cls, argv, field, value, note, capsys):
    cfg = configs.resolve(cls, typed=parse(cls, argv))
    assert getattr(cfg, field) == value
    assert capsys.readouterr().err == f"note: {note} (same meaning)\n"
    old = argv[-2].lstrip("-")
    assert getattr(cls(**{old: value}), field) == value  # the old keyword, noted once already
    assert capsys.readouterr().err == ""


def test_figures_out_is_the_results_root_and_the_old_spellings_say_so(capsys):
    from gpolab.runner.cli import build_parser
    from gpolab.runner.commands import figures

    def folders(*argv):
        return figures.folders(build_parser(["figures"]).parse_args(["figures", *argv]))

    assert folders() == ("results", "figures", [])
    assert folders("--out", "r", "--figures-dir", "f") == ("r", "f", [])
    assert folders("--out", "r") == ("r", "figures", [figures.OUT_NOTE])
    note = "note: --results is deprecated; use --out (same meaning)"
    assert folders("--results", "r", "--figures-dir", "f") == ("r", "f", [note])
    with pytest.raises(configs.ConfigError, match="results: an older name of out"):
        folders("--results", "r", "--out", "s")
