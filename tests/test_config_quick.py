"""A config file's ``[quick]`` table is checked whenever the file is read (issue 55): an invalid
value, a value of the wrong type or an unknown key in ``[quick]`` is one error line naming the
file, the table and the key, with or without ``--quick``, before anything is computed or
written.  Before, ``[quick]`` was applied (and so checked) only under ``--quick``: a run without
it accepted ``[quick] eta = [-1.0]`` silently."""

from __future__ import annotations

import pytest

from gpolab.kit import running
from gpolab.kit.command import config_from_args
from gpolab.labs.offpolicy import lab as offpolicy
from gpolab.runner.cli import build_parser, main

BAD = [  # ([quick] lines, the error line's text after "gpolab offpolicy: error: ")
    ("eta = [-1.0]", "my.toml [quick] eta: got -1.0; allowed: a finite number in (0.0, inf]"),
    ("etaa = [1.0]", "my.toml [quick] etaa: unknown field; allowed: env, "),
    ('seeds = "many"', "my.toml [quick] seeds: got 'many'; allowed: an integer"),
]


@pytest.fixture(autouse=True)
def no_run(monkeypatch):
    """A config that passed would run the lab (minutes): fail fast instead."""

    def execute(*args, **kwargs):
        raise AssertionError("the lab ran: the config was accepted")

    monkeypatch.setattr(running, "execute", execute)


def _file(tmp_path, quick: str):
    path = tmp_path / "my.toml"
    path.write_text(f'[offpolicy]\nenv = "bandit"\nseeds = 64\n\n[quick]\n{quick}\n')
    return path


@pytest.mark.parametrize("with_quick", [False, True], ids=["full", "quick"])
@pytest.mark.parametrize("quick,message", BAD, ids=["eta", "unknown", "type"])
def test_a_bad_quick_table_is_one_line_with_or_without_quick(
    quick, message, with_quick, tmp_path, capsys
):
    out = tmp_path / "o"
    argv = ["offpolicy", "--config", str(_file(tmp_path, quick)), "--out", str(out)]
    assert main(argv + ["--quick"] * with_quick) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"gpolab offpolicy: error: {message}"), err
    assert not out.exists()  # refused before anything is written


def test_a_quick_value_a_flag_overrides_is_still_checked(tmp_path, capsys):
    """The typed ``--seeds`` wins over ``[quick] seeds`` in the run, but the file is still
    wrong: it is named, not skipped."""
    path = _file(tmp_path, 'seeds = "many"')
    argv = ["offpolicy", "--config", str(path), "--seeds", "32", "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    assert "my.toml [quick] seeds: got 'many'" in capsys.readouterr().err


def _config(argv):
    args = build_parser(argv).parse_args(argv)
    return config_from_args(offpolicy, args)


def test_a_valid_quick_table_applies_only_under_quick(tmp_path):
    path = str(_file(tmp_path, "eta = [2.0, 4.0]\nstaleness = [0]"))
    full = _config(["offpolicy", "--config", path])
    assert (full.seeds, full.eta) == (64, offpolicy.Config().eta)  # [quick] not applied
    quick = _config(["offpolicy", "--config", path, "--quick"])
    assert (quick.eta, quick.staleness) == ((2.0, 4.0), (0,))
    assert quick.seeds == offpolicy.Config.QUICK["seeds"]  # quick sizes over the file's table
    typed = _config(["offpolicy", "--config", path, "--quick", "--eta", "8"])
    assert typed.eta == (8.0,)  # a typed flag still wins
