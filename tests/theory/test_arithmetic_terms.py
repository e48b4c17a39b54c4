"""``python -m gpolab.theory.arithmetic_terms``: its flags are the arithmetic instance's own (one
declaration, one flag mechanism) and bad input is one line, before any pre-training.  The terms
themselves are checked against the exact truth in tests/envs/test_arithmetic_strength.py."""

from __future__ import annotations

import dataclasses

import pytest

from gpolab.envs import arithmetic
from gpolab.theory import arithmetic_terms


def test_flags_are_the_instance_fields(capsys):
    with pytest.raises(SystemExit):
        arithmetic_terms.main(["--help"])
    out = capsys.readouterr().out
    for f in dataclasses.fields(arithmetic.Instance):
        assert "--" + f.name.replace("_", "-") in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--questions", "x"], "questions: got 'x'"),
        (["--strength", "0.9,0.1,0.5"], "strength: got (0.9, 0.1, 0.5)"),
    ],
)
def test_bad_input_is_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        arithmetic_terms.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
