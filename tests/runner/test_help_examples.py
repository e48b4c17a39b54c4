"""Every command's --help ends with two or three examples, and every example is valid: it parses,
and a lab's example resolves to a validated config (its flags exist and its mode uses them)."""

from __future__ import annotations

import importlib
import shlex

import pytest

from gpolab.kit.command import config_from_args
from gpolab.runner import cli

COMMANDS = cli.commands()  # {name: module}, found by listing the labs and the runner's commands
EXAMPLES = {name: module.EXAMPLES for name, module in COMMANDS.items()}
NOT_LABS = {"bench", "figures", "estimators"}
LAB_OF = {"train": "stdnorm"}  # `gpolab train` is the stdnorm lab's second name


def test_every_command_has_two_or_three_examples():
    for name, examples in EXAMPLES.items():
        assert 2 <= len(examples) <= 3, name
        assert all(ex.startswith(f"gpolab {name}") for ex in examples), name


@pytest.mark.parametrize("name", COMMANDS)
def test_help_ends_with_the_examples(name, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main([name, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    tail = out[out.rindex("examples:") :].splitlines()[1:]
    assert [line.strip() for line in tail if line.strip()] == list(EXAMPLES[name])


@pytest.mark.parametrize("example", [ex for name in COMMANDS for ex in EXAMPLES[name]], ids=str)
def test_example_parses_and_resolves(example, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # plan's examples name a log: there it exists (validate checks)
    (tmp_path / "completions.parquet").touch()
    (tmp_path / "rollouts").mkdir()
    (tmp_path / "grpo_config.yaml").write_text("use_vllm: true\n")  # offpolicy --from-config
    argv = shlex.split(example)[1:]
    args = cli.build_parser(argv).parse_args(argv)  # an unknown flag exits here
    name = argv[0]
    if name in NOT_LABS:
        return
    lab = importlib.import_module(f"gpolab.labs.{LAB_OF.get(name, name)}.lab")
    if name == "plan" and getattr(args, "LOG", None):
        args.log = args.LOG
    cfg = config_from_args(lab, args)  # validated: a flag the mode ignores is an error
    assert isinstance(cfg, lab.Config)


# ----------------------------------------------------------------------------- help defaults


def _help_defaults(name: str) -> tuple[object, dict]:
    """(the command's parser, {dest: the text of "(default: ...)"} of every flag that takes a
    value); on/off flags (store_true, --x/--no-x) and positionals show no default value."""
    import argparse
    import re

    parser = cli.build_parser([name])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub = sub.choices[name]
    shown = {}
    for action in sub._actions:
        match = re.search(r"\(default: ([^()]*(?:\([^()]*\)[^()]*)*)\)\s*$", action.help or "")
        value = action.option_strings and action.nargs != 0  # a positional's "all" is no value
        if match and value and not isinstance(action, argparse.BooleanOptionalAction):
            shown[action.dest] = " ".join(match.group(1).split())
    return sub, shown


def _in_mode(text: str, mode: list[str]) -> str:
    """The default ``text`` (``A; with --env tree: B``) states for the mode typed as ``mode``."""
    base, *modes = text.split("; with ")
    return dict(m.split(": ", 1) for m in modes).get(" ".join(mode), base)


def _modes(cls) -> list[list[str]]:
    from gpolab import configs

    out = [[]]
    for field, value in getattr(cls, "MODES", {}):
        out.append([configs.flag(field)] if value is True else [configs.flag(field), str(value)])
    spec = configs.instances(cls)
    out += [[configs.flag(spec[0]), env] for env in (spec[1] if spec else ())]
    return out


@pytest.mark.parametrize("name", COMMANDS)
def test_every_help_default_is_the_value_a_run_uses(name, tmp_path, monkeypatch):
    """Issue 40, item 8: `allocate --help` showed --prompts 16, --actions 64, --logit-scale 1.0,
    --success-b 1.0 where runs used 64, 8, 2.0, 2.0; `sweep --env tree` ran thought-std where
    help showed the bandit's estimators.  Each default shown is compared with the config a run
    resolves (the command's own parser and resolution), in every mode that changes defaults."""
    from gpolab import configs
    from gpolab.engine import progress
    from gpolab.runner.commands import figures

    monkeypatch.chdir(tmp_path)
    (tmp_path / "completions.parquet").touch()
    parser, shown = _help_defaults(name)
    assert _in_mode(shown.pop("max_hours", "24; 0: no limit"), []).startswith(
        f"{progress.MAX_SECONDS / 3600:g};"
    )
    if name in NOT_LABS:
        args = parser.parse_args([])
        if name == "figures":
            assert (shown.pop("out"), shown.pop("figures_dir")) == figures.folders(args)[:2]
        for dest, text in shown.items():
            if getattr(args, dest) is not None:
                assert text == str(getattr(args, dest)), (name, dest)
        return
    lab = importlib.import_module(f"gpolab.labs.{LAB_OF.get(name, name)}.lab")
    checked = set()
    for mode in _modes(lab.Config):
        argv = [*(["completions.parquet"] if name == "plan" else []), *mode]
        args = parser.parse_args(argv)
        if name == "plan" and getattr(args, "LOG", None):
            args.log = args.LOG
        cfg, typed = config_from_args(lab, args), configs.typed(args, lab.Config)
        for field in configs.names(lab.Config):
            if field in shown and field not in typed and configs.used(cfg, field):
                value = configs.value(cfg, field)
                text = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
                assert _in_mode(shown[field], mode) == text, (name, mode, field)
                checked.add(field)
    assert checked, name
