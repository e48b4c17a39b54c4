"""The claims ledger: the ledger validates, rules and verdicts, statistics on saved tables, the
generated README table, and one claim end to end from a small experiment."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest

from gpolab.cli import main
from gpolab.labs import claims
from gpolab.validate import ConfigError


def test_the_shipped_ledger_validates_and_covers_the_three_papers():
    ledger = claims.load(claims.LEDGER)
    assert {c["paper"] for c in ledger} == {"U", "T", "N", "gpolab"}
    assert len({c["id"] for c in ledger}) == len(ledger)
    claims.Config().validate()  # every experiment named exists, every statistic is known


@pytest.mark.parametrize(
    "values, verdict",
    [
        ({"a": 1.0, "b": 0.5}, "reproduced"),
        ({"a": 1.0, "b": 2.0}, "partly"),
        ({"a": 0.0, "b": 2.0}, "not reproduced"),
        ({"a": math.nan, "b": 0.5}, "partly"),  # a NaN value never passes a rule
        (None, "not run"),
    ],
)
def test_rules_give_the_verdict(values, verdict):
    claim = {"id": "x", "rules": ["a >= 1", "b < 1"]}
    assert claims.verdict(claim, values) == verdict
    assert claims.verdict({**claim, "testable": False}, {"a": 1.0}) == "not testable here"


def test_a_rule_may_compare_two_values():
    assert claims.check("matches == n", {"matches": 3, "n": 3}) is True
    assert claims.check("matches == n", {"matches": 2, "n": 3}) is False


@pytest.mark.parametrize(
    "entry, message",
    [
        ('statistic = "nope"', "statistic: got 'nope'"),
        ('rules = ["p >> 1"]', "rules: got 'p >> 1'"),
        ('colour = "red"', "colour: got 'red'; allowed: id (str)"),
    ],
)
def test_a_bad_ledger_is_one_line_naming_the_claim_and_field(tmp_path, entry, message):
    base = {"id": '"X1"', "paper": '"U"', "claim": '"c"', "experiment": '"chi2"',
            "statistic": '"chi2_law"', "rules": '["a >= 1"]'}  # fmt: skip
    key = entry.split(" = ")[0]
    lines = [f"{k} = {v}" for k, v in base.items() if k != key] + [entry]
    path = tmp_path / "ledger.toml"
    path.write_text("[[claim]]\n" + "\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=re.escape(f"ledger.toml: claim X1: {message}")):
        claims.load(path)


def test_oracle_match_statistic_on_a_table():
    # two estimators, two G; theory exact in the middle of the CI: z = 0, joint p = 1
    df = pd.DataFrame({"estimator": ["loo", "oracle"] * 2, "G": [2, 2, 8, 8],
                       "mse": [0.2, 0.1, 0.0264, 0.0250], "mse_se": [0.001] * 4,
                       "theory_mse": [0.2, 0.1, 0.0264, 0.0250], "theory_mse_se": [0.0] * 4,
                       "n_seeds": [1000] * 4})  # fmt: skip
    v = claims.oracle_match({"results": df})
    assert v["loo_over_oracle_at_max_G"] == pytest.approx(1.056)
    assert v["joint_p"] == pytest.approx(1.0) and v["max_abs_z"] == 0.0
    assert claims.verdict({"rules": ["joint_p >= 0.01", "loo_over_oracle_at_max_G <= 1.05"]},
                          v) == "partly"  # fmt: skip


def test_readme_table_is_the_ledger_in_order():
    from pathlib import Path

    text = (Path(__file__).parents[1] / "README.md").read_text()
    block = text.split(claims.BEGIN)[1].split(claims.END)[0]
    rows = [r for r in block.splitlines() if r.startswith("| ") and not r.startswith("| id")]
    ledger = claims.load(claims.LEDGER)
    assert [r.split(" | ")[0][2:] for r in rows] == [c["id"] for c in ledger]
    for row, c in zip(rows, ledger, strict=True):
        assert c["claim"] in row and any(f"**{v}**" in row for v in claims.VERDICTS)
        assert len(re.findall(r"(?<!\\)\|", row)) == 6  # 5 cells: every | inside is escaped


def test_one_claim_end_to_end_from_a_small_experiment(tmp_path, capsys):
    exp = tmp_path / "experiments"
    exp.mkdir()
    (exp / "bandit_mse_vs_G.toml").write_text(
        'lab = "sweep"\n[sweep]\nestimators = ["loo", "oracle"]\nG = [2, 8]\nseeds = 3000\n'
        "prompts = 4\nactions = 8\n"
    )
    ledger = tmp_path / "ledger.toml"
    ledger.write_text(
        '[[claim]]\nid = "U1"\npaper = "U"\nclaim = "loo matches the oracle."\n'
        'experiment = "bandit_mse_vs_G"\nstatistic = "oracle_match"\n'
        'rules = ["joint_p >= 0.001", "loo_over_oracle_at_max_G <= 2"]\n'
    )
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{claims.BEGIN}\nold\n{claims.END}\nend\n")
    argv = ["claims", "--ledger", str(ledger), "--experiments", str(exp), "--results",
            str(tmp_path / "results"), "--out", str(tmp_path / "out")]  # fmt: skip
    assert main([*argv, "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith("intro\n") and text.endswith("end\n") and "old" not in text
    assert "| U1 | arXiv 2603.01162" in text and "**reproduced**" in text
    # the experiment's tables are saved: a second run reads them and computes nothing
    assert (tmp_path / "results" / "bandit_mse_vs_G" / "results.parquet").exists()
    assert main([*argv, "--json"]) == 0
    out = capsys.readouterr().out
    assert '"verdict": "reproduced"' in out
    assert main([*argv, "--readme", str(tmp_path / "nope.md")]) == 2
    assert "has no claims markers" in capsys.readouterr().err
