"""The claims ledger: the ledger validates, rules with their standard errors and verdicts
(inconclusive within one SE, a NaN never a pass), statistics on saved tables, the generated README
table, the shipped experiments found from any working directory, and claims end to end from small
experiments, one true and one false.  Negative controls of every statistic and the README's
verdicts against `gpolab claims --quick`: tests/test_claims_readme.py (slow)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest

from gpolab.kit import output
from gpolab.labs.claims import lab as claims
from gpolab.labs.claims import report as claims_report
from gpolab.labs.claims import stats as claims_stats
from gpolab.labs.claims import stats_sweep
from gpolab.runner.cli import main
from gpolab.validate import ConfigError
from tools import readme as docs_blocks


def test_the_shipped_ledger_validates_and_covers_the_three_papers():
    ledger = claims.load(claims.LEDGER)
    assert {c["paper"] for c in ledger} == {
        *("U", "T", "N", "I", "W", "LL", "FK", "gpolab"),
        *("AS", "Q", "CT", "VX", "IP", "KP", "VC", "NM", "OT", "VP", "VR"),
    }
    assert len({c["id"] for c in ledger}) == len(ledger)
    claims.Config().validate()  # every experiment named exists, every statistic is known


PAPERS_PAGE = Path(__file__).parents[2] / "docs" / "papers.md"
NUMBERED = re.compile(r"\b(Lemma|Thm|Prop|Cor|Assumption|Fig\.|Table|Algorithm|Appendix) ?[0-9A-C]")


def _plain(text: str) -> str:
    """Markdown's escapes and line breaks removed: the words as a reader sees them."""
    return " ".join(text.replace("\\", "").split())


def test_every_paper_claim_cites_the_papers_numbering_and_quotes_the_read_text():
    """Every claim of the U-statistic paper (the one whose text was read) names a numbered result
    (Lemma, Thm, Prop, Cor, Fig., Table, …) and quotes the paper's own sentence, found word for
    word on docs/papers.md (the page that quotes the text with its location); so does every claim
    of Liu & Li's and Fang & Khazi's blogs (LL, FK: their TL;DR's words, no numbering); claims
    of the papers read from their abstracts only say so."""
    page = _plain(PAPERS_PAGE.read_text(encoding="utf-8"))
    for c in claims.load(claims.LEDGER):
        if c["paper"] in ("U", "LL", "FK", "Q", "IP", "KP", "NM", "OT", "VP", "VR"):
            if c["paper"] == "U":
                assert NUMBERED.search(c["where"]), f"{c['id']}: where names no numbered result"
            assert c.get("quote"), f"{c['id']}: no quote of the paper's sentence"
            assert _plain(c["quote"]) in page, f"{c['id']}: quote not on docs/papers.md"
        elif c["paper"] in ("T", "N", "I", "W", "AS", "CT", "VX", "VC"):  # read from abstracts only
            assert "abstract" in c["where"] and not c.get("quote"), c["id"]


@pytest.mark.parametrize(
    "values, se, verdict",
    [
        ({"a": 1.0, "b": 0.5}, {"a": 0.0, "b": 0.0}, "reproduced"),  # exact: the comparison
        ({"a": 1.5, "b": 0.5}, {"a": 0.1, "b": 0.1}, "reproduced"),  # both 5 SE clear
        ({"a": 1.0, "b": 2.0}, {"a": 0.0, "b": 0.1}, "partly"),
        ({"a": 0.0, "b": 2.0}, {"a": 0.1, "b": 0.1}, "not reproduced"),
        ({"a": 1.05, "b": 0.5}, {"a": 0.1, "b": 0.1}, "inconclusive"),  # a within one SE of 1
        ({"a": 0.95, "b": 0.5}, {"a": 0.1, "b": 0.1}, "inconclusive"),  # on either side
        ({"a": 0.95, "b": 2.0}, {"a": 0.1, "b": 0.1}, "not reproduced"),  # a fail decides
        ({"a": math.nan, "b": 0.5}, {"a": 0.0, "b": 0.0}, "inconclusive"),  # NaN: never a pass
        ({"a": 2.0, "b": 0.5}, {"b": 0.0}, "inconclusive"),  # no SE: never a pass
        ({"a": 2.0, "b": 0.5}, {"a": math.nan, "b": 0.0}, "inconclusive"),
        ({"a": math.nan, "b": 2.0}, {"a": 0.0, "b": 0.0}, "not reproduced"),
        (None, {}, "not run"),
    ],
)
def test_rules_give_the_verdict(values, se, verdict):
    claim = {"id": "x", "rules": ["a >= 1", "b < 1"]}
    assert claims.verdict(claim, values, se) == verdict
    assert verdict in claims.VERDICTS
    assert claims.verdict({**claim, "testable": False}, {"a": 1.0}, {}) == "not testable here"


def test_the_margin_is_in_standard_errors_and_says_exact_or_why_not():
    values, se = {"a": 1.3, "b": 0.5, "c": math.nan}, {"a": 0.1, "b": 0.0, "c": 0.1}
    assert claims.outcome("a >= 1", values, se)[:2] == ("pass", pytest.approx(3.0))
    assert claims.outcome("a <= 1", values, se)[:2] == ("fail", pytest.approx(-3.0))
    assert claims.margin_text("a >= 1", values, se) == "a >= 1: 1.3 (+3.0 SE)"
    assert claims.margin_text("a >= 1.25", values, se) == "a >= 1.25: 1.3 (+0.5 SE, inconclusive)"
    assert claims.margin_text("b < 1", values, se) == "b < 1: 0.5 (exact, holds)"
    assert claims.margin_text("c > 0", values, se) == "c > 0: nan (c is not measured (NaN))"
    # == with an SE can never pass: equal within noise is not equal
    assert claims.outcome("a == 1.3", values, se)[0] == "inconclusive"
    assert claims.outcome("b == 0.5", values, se)[0] == "pass"


def test_a_rule_may_compare_two_values():
    assert claims.check("matches == n", {"matches": 3, "n": 3}) is True
    assert claims.check("matches == n", {"matches": 2, "n": 3}) is False
    # the target's SE counts too, and a target without one is never a pass
    assert claims.check("a > b", {"a": 2.0, "b": 1.0}, {"a": 0.8, "b": 0.8}) is None
    assert claims.check("a > b", {"a": 2.0, "b": 1.0}, {"a": 0.1}) is None


@pytest.mark.parametrize(
    "entry, message",
    [
        ('statistic = "nope"', "statistic: got 'nope'"),
        ('rules = ["p >> 1"]', "rules: got 'p >> 1'"),
        ('colour = "red"', "colour: got 'red'; allowed: id (str)"),
    ],
)
def test_a_bad_ledger_is_one_line_naming_the_claim_and_field(tmp_path, entry, message):
    base = {
        "id": '"X1"',
        "paper": '"U"',
        "claim": '"c"',
        "experiment": '"chi2"',
        "statistic": '"chi2_law"',
        "rules": '["a >= 1"]',
    }
    key = entry.split(" = ")[0]
    lines = [f"{k} = {v}" for k, v in base.items() if k != key] + [entry]
    path = tmp_path / "ledger.toml"
    path.write_text("[[claim]]\n" + "\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=re.escape(f"ledger.toml: claim X1: {message}")):
        claims.load(path)


def test_oracle_match_statistic_on_a_table():
    # two estimators, two G; theory exact in the middle of the CI: z = 0, joint p = 1
    df = pd.DataFrame(
        {
            "estimator": ["loo", "oracle"] * 2,
            "G": [2, 2, 8, 8],
            "mse": [0.2, 0.1, 0.0264, 0.0250],
            "mse_se": [0.001] * 4,
            "theory_mse": [0.2, 0.1, 0.0264, 0.0250],
            "theory_mse_se": [0.0] * 4,
            "n_seeds": [1000] * 4,
        }
    )
    v = claims.STATISTICS["oracle_match"]({"results": df})
    se = v.pop("se")
    assert v["loo_over_oracle_at_max_G"] == pytest.approx(1.056)
    # delta method: 1.056 · √((0.001/0.0264)² + (0.001/0.025)²)
    assert se["loo_over_oracle_at_max_G"] == pytest.approx(1.056 * math.hypot(1 / 26.4, 1 / 25))
    assert v["joint_p"] == pytest.approx(1.0) and v["max_abs_z"] == 0.0 and se["joint_p"] == 0
    rules = {"rules": ["joint_p >= 0.01", "loo_over_oracle_at_max_G <= 1.05"]}
    assert claims.verdict(rules, v, se) == "inconclusive"  # 1.056 is 0.1 SE above 1.05
    assert (
        claims.verdict({"rules": ["joint_p >= 0.01", "loo_over_oracle_at_max_G <= 1.2"]}, v, se)
        == "reproduced"
    )


def test_the_ledger_page_and_the_readme_summary_are_the_ledger_in_order():
    """docs/claims.md holds the full ledger table, README.md its summary (each testable claim's
    headline, then the ids of those not testable here): both list their claims in the ledger's
    order with one verdict, and agree on the verdicts."""
    from pathlib import Path

    root = Path(__file__).parents[2]
    ledger = claims.load(claims.LEDGER)
    testable = [c for c in ledger if c.get("testable", True)]
    for path, cells, listed in (
        (root / "docs" / "claims.md", 6, ledger),
        (root / "README.md", 3, testable),
    ):
        m = docs_blocks.CLAIMS_BLOCK.search(path.read_text())
        rows = [
            r for r in m["body"].splitlines() if r.startswith("| ") and not r.startswith("| id")
        ]
        assert [r.split(" | ")[0][2:] for r in rows] == [c["id"] for c in listed], path
        for row, c in zip(rows, listed, strict=True):
            text = c["claim"] if cells == 6 else claims_report.headline(c["claim"])
            assert text.replace("|", "\\|") in row, (path, c["id"])
            assert any(f"**{v}**" in row for v in claims.VERDICTS)
            assert len(re.findall(r"(?<!\\)\|", row)) == cells + 1  # every | inside is escaped
    page = docs_blocks.claims_verdicts(root / "docs" / "claims.md")
    summary = docs_blocks.claims_verdicts(root / "README.md")
    assert summary == {i: v for i, v in page.items() if v != "not testable here"}
    assert set(page) == {c["id"] for c in ledger}
    untestable = ", ".join(c["id"] for c in ledger if not c.get("testable", True))
    assert f"each with its reason on the ledger: {untestable}." in (root / "README.md").read_text()


def test_claims_end_to_end_a_true_and_a_false_claim(tmp_path, capsys):
    """Two small sweeps: loo/oracle ≈ G/(G − 1) is 1.14 at G = 8 (the rule ≤ 1.3 holds) and 1.5 at
    G = 3 (it fails): the same rule gives "reproduced" on the first and "not reproduced" on the
    second; --json and the README blocks written from its table (`python -m tools.readme`) carry
    both, with the margins in SE.  The command writes no README: --readme is no flag of it."""
    exp = tmp_path / "experiments"
    exp.mkdir()
    for name, G in (("small_G8", "[8]"), ("small_G3", "[3]")):
        (exp / f"{name}.toml").write_text(
            f'lab = "sweep"\n[sweep]\nestimators = ["loo", "oracle"]\nG = {G}\nseeds = 3000\n'
            "prompts = 4\nactions = 8\n"
        )
    ledger = tmp_path / "ledger.toml"
    ledger.write_text(
        "".join(
            f'[[claim]]\nid = "{i}"\npaper = "U"\nclaim = "loo is within 30% of the oracle."\n'
            f'experiment = "{e}"\nstatistic = "oracle_match"\n'
            'rules = ["loo_over_oracle_at_max_G <= 1.3"]\n'
            for i, e in (("TRUE", "small_G8"), ("FALSE", "small_G3"))
        )
    )
    readme, page = tmp_path / "README.md", tmp_path / "claims.md"
    for path, kind in ((readme, "claims-summary"), (page, "claims")):
        path.write_text(
            f"intro\n{docs_blocks.claims_begin(kind)}\nSTALE\n{docs_blocks.claims_end(kind)}\nend\n"
        )
    argv = [
        "claims",
        "--ledger",
        str(ledger),
        "--experiments",
        str(exp),
        "--results",
        str(tmp_path / "results"),
        "--out",
        str(tmp_path / "out"),
    ]
    assert main(argv) == 0
    tables = output.read_tables(tmp_path / "out", claims.TABLES)
    for path in (readme, page):
        docs_blocks.write_claims(tables, path)
        text = path.read_text()
        assert text.startswith("intro\n") and text.endswith("end\n") and "STALE" not in text
        assert docs_blocks.claims_verdicts(path) == {
            "TRUE": "reproduced",
            "FALSE": "not reproduced",
        }
    text = page.read_text()
    assert re.search(r"loo_over_oracle_at_max_G <= 1.3: 1\.1\d+ \(\+\d+\.\d SE\)", text)
    assert re.search(r"loo_over_oracle_at_max_G <= 1.3: 1\.\d+ \(-\d+\.\d SE\)", text)
    # the experiments' tables are saved: a second run reads them and computes nothing
    assert (tmp_path / "results" / "small_G8" / "results.parquet").exists()
    assert main([*argv, "--json"]) == 0
    out = capsys.readouterr().out
    assert '"verdict": "reproduced"' in out and '"verdict": "not reproduced"' in out
    with pytest.raises(ConfigError, match="has no claims markers"):
        docs_blocks.write_claims(tables, tmp_path / "nope.md")
    before = readme.read_text()
    with pytest.raises(SystemExit) as stop:  # no such flag: the command writes no file
        main([*argv, "--readme", str(readme)])
    assert stop.value.code == 2
    assert "unrecognized arguments: --readme" in capsys.readouterr().err
    assert readme.read_text() == before


def test_the_shipped_experiments_are_found_from_any_working_directory(tmp_path, monkeypatch):
    """`gpolab claims` outside the repository used to fail ("experiment: got 'bandit_mse_vs_G'"):
    the default is the experiments shipped with the package (package data), and the package-data
    pattern of pyproject.toml covers every experiment."""
    import tomllib
    from pathlib import Path

    from gpolab.kit import experiments

    monkeypatch.chdir(tmp_path)
    cfg = claims.Config(results=str(tmp_path / "r"), out=str(tmp_path / "o"))
    cfg.validate()
    assert cfg.experiment_dir() == experiments.DEFAULT_DIR and experiments.DEFAULT_DIR.is_dir()
    exp = experiments.load(cfg.experiment_dir() / "bandit_mse_vs_G.toml")
    assert exp.config(True, cfg.results).out == str(tmp_path / "r" / "bandit_mse_vs_G-quick")
    with pytest.raises(ConfigError, match="experiments: got 'nope'"):
        cfg.replace(experiments="nope").validate()
    root = Path(__file__).parents[2]
    data = tomllib.loads((root / "pyproject.toml").read_text())
    patterns = data["tool"]["setuptools"]["package-data"]["gpolab"]
    shipped = {p.name for pat in patterns for p in (root / "gpolab").glob(pat)}
    assert {p.name for p in (root / "experiments").glob("*.toml")} <= shipped
    assert experiments.SHIPPED.resolve() == (root / "experiments").resolve()


def _gain_table(rows):
    cols = ["comparison", "setting", "G", "control", "gain", "gain_ci_low", "gain_ci_high"]
    return pd.DataFrame([dict(zip(cols, r, strict=True)) for r in rows])


def test_group_size_gain_with_one_sampled_G_is_not_testable_not_a_comparison_with_itself():
    """gpolab-N4 compared G = 32 with itself when one G was sampled (quick sizes)."""
    g = _gain_table([("admissible", "rho=0", 32.0, False, 1.35, 1.34, 1.37)])
    v = claims.STATISTICS["group_size_gain"]({"gain": g})
    se, detail = v.pop("se"), v.pop("detail")
    assert math.isnan(v["gain_small_G"]) and math.isnan(v["gain_large_G"])
    assert "not testable at these sizes" in detail
    rules = {"rules": ["gain_small_G < 1.1", "gain_large_G > 1.1"]}
    assert claims.verdict(rules, v, se) == "inconclusive"


def test_fading_needs_a_decrease_that_matters():
    """N3 passed on any decrease (1.47 → 1.38): now at most half the excess over 1 may be left."""
    inf = math.inf
    g = _gain_table(
        [
            ("admissible", "rho=0", inf, False, 1.47, 1.47, 1.47),
            ("admissible", "rho=0.9", inf, False, 1.38, 1.38, 1.38),
            ("oracle step", "rho=0.9", inf, False, 0.84, 0.84, 0.84),
        ]
    )
    v = claims.STATISTICS["gain_fades"]({"gain": g})
    se = v.pop("se")
    assert v["excess_kept"] == pytest.approx(0.38 / 0.47)
    ledger = {c["id"]: c for c in claims.load(claims.LEDGER)}
    assert claims.check("excess_kept <= 0.5", v, se) is False
    assert claims.verdict(ledger["N3"], v, se) == "partly"
    g.loc[1, ["gain", "gain_ci_low", "gain_ci_high"]] = 1.2
    v = claims.STATISTICS["gain_fades"]({"gain": g})
    assert claims.verdict(ledger["N3"], v, v.pop("se")) == "reproduced"


def test_a_tied_best_group_size_never_matches_the_prediction():
    """U6 counted winners tied over 3-4 G as matches; the shares carry a binomial SE, so 4 of 8
    is within one SE of the rule's 0.5: inconclusive, not a pass."""
    s = pd.DataFrame(
        {
            "env": ["bandit"] * 4 + ["arithmetic"] * 4,
            "N": [64] * 8,
            "schedule": ["constant"] * 8,
            "interior_minimum": [True] * 8,
            "empirical_best_G": [8, 8, 8, 8, 4, 4, 4, 4],
            "predicted_best_G": [8] * 4 + [4] * 4,
            "tied_G": ["4,8,16"] * 4 + ["4"] * 4,
        }
    )
    v = claims.STATISTICS["train_optimum"]({"summary": s})
    se = v.pop("se")
    assert v["matches_prediction_frac"] == 0.5 and v["separated_frac"] == 0.5
    assert se["matches_prediction_frac"] == pytest.approx(math.sqrt(0.25 / 8))
    ledger = {c["id"]: c for c in claims.load(claims.LEDGER)}
    assert claims.verdict(ledger["U6"], v, se) == "inconclusive"
    s["tied_G"] = "4,8"
    v = claims.STATISTICS["train_optimum"]({"summary": s})
    assert v["matches_prediction_frac"] == 0.0
    assert claims.verdict(ledger["U6"], v, v.pop("se")) == "partly"  # the interior still holds


def test_a_nan_recovery_is_never_covered():
    """gpolab-4 counted a NaN G* with the interval [5.31, inf] as covered."""
    df = pd.DataFrame(
        {
            "format": ["trl"] * 2,
            "env": ["bandit"] * 2,
            "quantity": ["mean", "G*"],
            "G": [8.0, math.nan],
            "truth": [0.3, 6.07],
            "recovered": [0.31, math.nan],
            "lo": [0.28, 5.31],
            "hi": [0.34, math.inf],
            "covered": [True, True],
        }
    )
    v = claims.STATISTICS["plan_recovery"]({"results": df})
    se = v.pop("se")
    assert v["uncovered"] == 1
    assert claims.check("uncovered == 0", v, se) is False


def test_mean_baseline_z_uses_the_bias_standard_error():
    """gpolab-mean (formerly U1-mean) divided the bias² error by the MSE's SE: an unbiased
    estimator scored z = 2.88 and passed; with the bias²'s own SE it is far off, and 'biased'
    needs bias² 3 SE above 0."""
    n, V, theory = 20_000, 0.05, 6.74e-4
    df = pd.DataFrame(
        {
            "estimator": ["mean", "loo", "oracle"],
            "G": [2] * 3,
            "mse": [0.0506, 0.143, 0.0988],
            "mse_se": [2.3e-4, 1e-3, 7e-4],
            "variance": [V, 0.143, 0.0988],
            "bias_sq": [0.0, 0.0, 0.0],
            "theory_bias_sq": [theory, 0.0, 0.0],
            "n_seeds": [n] * 3,
        }
    )
    rules = {"rules": ["bias_theory_abs_z <= 3", "bias_z >= 3", "lowest_mse_gap > 0"]}
    v = claims.STATISTICS["mean_baseline"]({"results": df})  # an unbiased "mean": bias² 0
    se = v.pop("se")
    assert theory / 2.3e-4 == pytest.approx(2.93, abs=0.01)  # the old z: a pass at <= 3
    assert v["bias_theory_abs_z"] > 8 and v["bias_z"] == 0  # bias² SE ≤ 8.2e-5
    assert claims.verdict(rules, v, se) == "partly"  # only its low MSE holds
    df.loc[0, "bias_sq"] = 6.65e-4  # the full-size measurement
    v = claims.STATISTICS["mean_baseline"]({"results": df})
    assert claims.verdict(rules, v, v.pop("se")) == "reproduced"


def test_a_nan_p_value_is_never_a_bonferroni_pass():
    """Python's min(1.0, nan) is 1.0: a diverged run's NaN KS p-value used to read as p = 1."""
    assert claims_stats.bonferroni([0.2, 0.3]) == pytest.approx(0.4)
    assert math.isnan(claims_stats.bonferroni([0.2, float("nan")]))
    assert math.isnan(claims_stats.bonferroni([]))
    assert claims.check("p >= 0.01", {"p": claims_stats.bonferroni([float("nan")])}) is None


def test_no_exact_theory_rows_give_a_nan_joint_test_not_a_crash():
    import pandas as pd

    rows = pd.DataFrame(
        {
            "estimator": ["loo"],
            "G": [4],
            "mse": [1.0],
            "mse_se": [0.1],
            "theory_mse": [float("nan")],
            "n_seeds": [100],
        }
    )
    assert all(math.isnan(v) for v in stats_sweep._joint(rows))


def test_an_exact_equality_rule_does_not_hang_on_the_last_bit():
    assert claims.check("x == 0", {"x": 1e-17}) is True
    assert claims.check("x == 0", {"x": 1e-3}) is False


@pytest.mark.parametrize(
    "claim, headline",
    [
        ("Short claim.", "Short claim."),
        ("A: rest. More.", "A."),
        ("Under (a: b) it holds. Then more.", "Under (a: b) it holds."),
        ("x " * 100, ("x " * (claims_report.HEADLINE // 2)).strip() + " …"),
    ],
)
def test_the_readme_summary_shows_each_claims_first_clause(claim, headline):
    assert claims_report.headline(claim) == headline


def test_a_short_one_clause_claim_is_its_own_headline():
    assert claims_report.headline("a | b") == "a | b"


def test_a_claim_whose_statistic_reads_nothing_runs_no_experiment(tmp_path):
    """A claim not testable here with the statistic ``not_measured`` gets its verdict and reason
    without its experiment being run or read (the full asynchronous run is not computed for the
    claims that only name it)."""
    exp = tmp_path / "experiments"
    exp.mkdir()
    (exp / "small.toml").write_text(
        'lab = "sweep"\n[sweep]\nestimators = ["loo"]\nG = [4]\nseeds = 100\nprompts = 2\n'
        "actions = 4\n"
    )
    ledger = tmp_path / "ledger.toml"
    ledger.write_text(
        '[[claim]]\nid = "X"\npaper = "gpolab"\nwhere = "here"\nclaim = "untestable"\n'
        'experiment = "small"\nstatistic = "not_measured"\ntestable = false\nreason = "why"\n'
    )
    cfg = claims.Config(
        ledger=str(ledger),
        experiments=str(exp),
        results=str(tmp_path / "results"),
        out=str(tmp_path / "out"),
    )
    row = claims.run(cfg)["claims"].iloc[0]
    assert (row["verdict"], row["reason"]) == ("not testable here", "why")
    assert not (tmp_path / "results").exists()
