"""Every command's --help ends with two or three examples, and every example is valid: it parses,
and a lab's example resolves to a validated config (its flags exist and its mode uses them)."""

from __future__ import annotations

import importlib
import shlex

import pytest

from gpolab import cli
from gpolab.commands import config_from_args

NOT_LABS = {"bench", "figures", "estimators"}
LAB_OF = {"train": "stdnorm"}  # `gpolab train` is the stdnorm lab's second name


def test_every_command_has_two_or_three_examples():
    assert set(cli.EXAMPLES) == set(cli.COMMANDS)
    for name, examples in cli.EXAMPLES.items():
        assert 2 <= len(examples) <= 3, name
        assert all(ex.startswith(f"gpolab {name}") for ex in examples), name


@pytest.mark.parametrize("name", cli.COMMANDS)
def test_help_ends_with_the_examples(name, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main([name, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    tail = out[out.rindex("examples:") :].splitlines()[1:]
    assert [line.strip() for line in tail if line.strip()] == list(cli.EXAMPLES[name])


@pytest.mark.parametrize(
    "example", [ex for name in cli.COMMANDS for ex in cli.EXAMPLES[name]], ids=str
)
def test_example_parses_and_resolves(example, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # plan's examples name a log: there it exists (validate checks)
    (tmp_path / "completions.parquet").touch()
    (tmp_path / "rollouts").mkdir()
    argv = shlex.split(example)[1:]
    args = cli.build_parser(argv).parse_args(argv)  # an unknown flag exits here
    name = argv[0]
    if name in NOT_LABS:
        return
    lab = importlib.import_module(f"gpolab.labs.{LAB_OF.get(name, name)}")
    if name == "plan" and getattr(args, "LOG", None):
        args.log = args.LOG
    cfg = config_from_args(lab, args)  # validated: a flag the mode ignores is an error
    assert isinstance(cfg, lab.Config)
