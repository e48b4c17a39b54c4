"""gpolab.configs directly: one base for every settings class (each lab's ``Config``, each env's
``Instance``), and the names the one-release deprecation layer accepted are gone: each is one
error naming it (CHANGELOG.md lists each with its replacement)."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

import pytest

import gpolab.envs
from gpolab import configs
from gpolab.envs import bandit, tree
from gpolab.kit import running
from gpolab.labs.sweep import lab as sweep
from gpolab.labs.zoo import lab as zoo
from gpolab.runner.cli import build_parser, main


def settings_classes() -> list[type]:
    """Every lab's Config and every env's Instance."""
    found = [running.get(name).Config for name in running.names()]
    for info in pkgutil.iter_modules(gpolab.envs.__path__):
        module = importlib.import_module(f"gpolab.envs.{info.name}")
        if dataclasses.is_dataclass(getattr(module, "Instance", None)):
            found.append(module.Instance)
    return found


def test_every_settings_class_has_the_one_base_and_no_replace_of_its_own():
    classes = settings_classes()
    assert len(classes) >= 17  # 12 labs and 5 envs at the time of writing
    for cls in classes:
        assert issubclass(cls, configs.Config), cls
        assert "replace" not in vars(cls), f"{cls.__module__}.{cls.__name__} copies replace"
        assert cls.__dataclass_params__.frozen, cls


def test_the_base_adds_no_field_and_keeps_equality_and_hashing():
    assert not dataclasses.is_dataclass(configs.Config)  # a plain base: the fields are the class's
    a, b = bandit.Instance(), bandit.Instance()
    assert a == b and hash(a) == hash(b) and a != tree.Instance()


def test_replace_coerces_by_the_field_type_and_names_an_unknown_field():
    inst = bandit.Instance().replace(prompts="3", B="2")
    assert (inst.prompts, inst.B) == (3, 2) and isinstance(inst, bandit.Instance)
    cfg = sweep.Config().replace(G="2,4", env="tree", K="2")
    assert cfg.G == (2, 4) and cfg.instance == tree.Instance(K=(2,))
    with pytest.raises(configs.ConfigError, match="^prompt: unknown field; allowed: env, "):
        sweep.Config().replace(prompt=3)


REMOVED = [  # (lab, old name, new name): the one-release spellings, removed
    ("sweep", "variants", "estimators"),
    ("chi2", "env_seed", "instance_seed"),
    ("tree", "a", "beta_a"),
    ("tree", "b", "beta_b"),
    ("tree", "budget", "leaves"),
    ("plan", "budget", "N"),
    ("zoo", "envs", "env"),
    ("plancheck", "envs", "env"),
]


@pytest.mark.parametrize("lab,old,new", REMOVED)
def test_a_removed_name_is_one_error_naming_it_in_every_form(lab, old, new, tmp_path, capsys):
    cls = running.get(lab).Config
    assert new in configs.names(cls) and old not in configs.names(cls)
    unknown = f"^{old}: unknown field; allowed: "
    with pytest.raises(configs.ConfigError, match=unknown):  # typed flags
        configs.resolve(cls, typed={old: "8"})
    path = tmp_path / "old.toml"
    path.write_text(f'lab = "{lab}"\n[{lab}]\n{old} = 8\n')
    _, table, _ = configs.split_file(path, lab)
    with pytest.raises(configs.ConfigError, match=rf"^old.toml \[{lab}\] {old}: unknown field"):
        configs.resolve(cls, table=table, source=str(path))
    with pytest.raises(configs.ConfigError, match=unknown):
        cls().replace(**{old: 8})
    flag = configs.flag(old)
    log = [str(tmp_path)] if lab == "plan" else []  # plan's positional rollout log
    with pytest.raises(SystemExit) as exit_:
        main([lab, *log, flag, "8", "--out", str(tmp_path / "out")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"unrecognized arguments: {flag} 8" in err and "deprecated" not in err
    assert not (tmp_path / "out").exists()


def test_a_removed_keyword_is_an_error_naming_it():
    with pytest.raises(configs.ConfigError, match="^variants: unknown field; allowed: "):
        sweep.Config(env="tree", variants=("leaf-std",))
    with pytest.raises(TypeError, match="envs"):
        zoo.Config(envs=("bandit",))


def test_lab_flags_are_not_abbreviated():
    """``--a`` was tree's old name of --beta-a; with argparse's prefix matching it would now
    silently set --answer-len.  A lab's flags match only in full."""
    parser = build_parser(["tree"])
    with pytest.raises(SystemExit):
        parser.parse_args(["tree", "--a", "3"])
    assert parser.parse_args(["tree", "--answer-len", "3"]).answer_len == "3"


def test_figures_out_is_the_results_root_and_results_is_gone(capsys):
    from gpolab.runner.commands import figures

    def folders(*argv):
        return figures.folders(build_parser(["figures"]).parse_args(["figures", *argv]))

    assert folders() == ("results", "figures")
    assert folders("--out", "r") == ("r", "figures")
    assert folders("--out", "r", "--figures-dir", "f") == ("r", "f")
    with pytest.raises(SystemExit):
        folders("--results", "r")
    assert "unrecognized arguments: --results r" in capsys.readouterr().err


def test_no_module_forwards_attributes_or_keeps_old_names():
    import gpolab

    with pytest.raises(AttributeError, match="SweepConfig"):
        gpolab.SweepConfig  # noqa: B018
    assert not hasattr(sweep, "SweepConfig")
    with pytest.raises(AttributeError):
        sweep.Config().prompts  # noqa: B018  (the instance's field: cfg.instance.prompts)
    assert sweep.Config().instance.prompts == bandit.Instance().prompts
    for name in ("aliases", "aliased", "old_keywords"):
        assert not hasattr(configs, name), name


def test_one_parser_reads_name_and_bracketed_options():
    """``NAME[key=value,...]`` (estimators' options, mismatch corrections) is read by one parser:
    items keep their raw text, an item without ``=`` is returned for its caller to name, and a
    text of another shape is one error naming the field."""
    from gpolab.validate import ConfigError, bracketed

    assert bracketed("x", " dr_grpo ", "NAME") == ("dr_grpo", [])
    assert bracketed("x", "a[k=1, m = none,]", "NAME") == (
        "a",
        [("k", "=", "1"), ("m", "=", "none")],
    )
    assert bracketed("x", "a[flag]", "NAME") == ("a", [("flag", "", "")])
    for bad in ("", "[k=1]", "a[k=1", "a]", "a[b][c]", "a[k=[1]]", None):
        with pytest.raises(ConfigError, match=r"^x: got .*; allowed: NAME$"):
            bracketed("x", bad, "NAME")
