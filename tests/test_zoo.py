"""The estimator zoo lab: rankings invariant to rescaling, κ against DESIGN §8's numbers, exact
theory against Monte Carlo for the framework estimators (bandit and arithmetic surrogate)."""

from __future__ import annotations

import numpy as np
import pytest

from gpolab import estimators
from gpolab.labs import zoo
from gpolab.labs.sweep import Config as SweepConfig
from gpolab.labs.sweep import run_sweep


def half_loo(rewards):
    """A user's estimator that only shrinks: 0.5 × leave-one-out."""
    return 0.5 * estimators.loo_advantages(rewards)


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    estimators.register("test/half_loo", half_loo, min_group=2, source="tests")
    cfg = zoo.Config(envs=("bandit",), estimators=("loo", "mean", "grpo", "nemo/grpo",
                     "verl/gpg", "test/half_loo", "paper/passk-training"), G=(2, 4),
                     seeds=3000, kappa_G=(8,), kappa_points=10,
                     out=str(tmp_path_factory.mktemp("zoo")))  # fmt: skip
    return zoo.run(cfg)


def test_a_shrunk_estimator_wins_on_mse_but_not_on_the_ranking(tables):
    df = tables["results"].set_index(["estimator", "G"])
    for G in (2, 4):
        half, loo = df.loc[("test/half_loo", G)], df.loc[("loo", G)]
        assert half["mse"] < loo["mse"]  # shrinking toward 0 lowers the MSE here...
        # ...but not the scale-invariant score: ĝ/2 has exactly loo's direction on every seed
        assert half["snr_vs_loo"] == pytest.approx(1.0, rel=1e-5)
        assert half["cos"] == pytest.approx(loo["cos"], rel=1e-5)
        assert half["theory_snr_vs_loo"] == pytest.approx(1.0, rel=1e-9)
        # a user's reward-only function gets the exact theory automatically
        assert half["theory"] == "count table"
        assert abs(half["mse"] - half["theory_mse"]) < 4 * half["mse_se"]
    assert df.loc[("mean", 4), "snr_vs_loo"] == pytest.approx(1.0, rel=1e-5)
    assert df.loc[("verl/gpg", 4), "theory"].startswith("none: is batch-scoped")
    # pass@k training (k = 4) runs only where it is defined
    assert ("paper/passk-training", 2) not in df.index and ("paper/passk-training", 4) in df.index


def test_kappa_table_matches_design_numbers(tables):
    k = tables["kappa"]
    at = k[np.isclose(k["p"], 0.05)].set_index("estimator")["kappa"]
    # DESIGN §8: at p = 0.05, G = 8: grpo (ddof 1, eps 1e-4) 2.31, NeMo's leave-one-out std
    # 1.47, loo exactly 1, mean 1 − 1/G
    assert at["grpo"] == pytest.approx(2.31, abs=0.005)
    assert at["nemo/grpo"] == pytest.approx(1.47, abs=0.005)
    assert at["loo"] == pytest.approx(1.0, abs=1e-12)
    assert at["mean"] == pytest.approx(7 / 8, abs=1e-12)
    assert at["test/half_loo"] == pytest.approx(0.5, abs=1e-12)
    assert "verl/gpg" not in at.index  # batch-scoped: no κ
    names = [n for n, _ in zoo.families(k)]
    assert ["loo"] in names and ["grpo"] in names


def test_report_notes_and_figures(tables, tmp_path):
    cfg = zoo.Config(envs=("bandit",))
    text = zoo.report(cfg, tables)
    assert "bandit, G = 4" in text and "test/half_loo" in text
    assert "p=0.05 2.31" in zoo.notes(cfg, tables)
    for name, draw in zoo.figures(tables).items():
        assert draw(tables, tmp_path / name).stat().st_size > 10_000


@pytest.mark.slow
def test_framework_theory_matches_monte_carlo_on_the_arithmetic_surrogate(tmp_path):
    """Exact count-table theory of framework estimators vs Monte Carlo on the arithmetic
    surrogate, whose S2 is itself a Monte Carlo estimate: |MC − theory| < 4 combined SE."""
    specs = ("grpo", "nemo/grpo", "verl/grpo_passk", "paper/passk-training[k=2]", "verl/opo")
    cfg = SweepConfig(env="arithmetic", estimators=specs, G=(4,), seeds=600, policy=("instruct",),
                      questions=60, truth_samples=128, out=str(tmp_path))  # fmt: skip
    df = run_sweep(cfg).set_index("estimator")
    for spec in specs:
        row = df.loc[spec]
        se = np.hypot(row["mse_se"], row["theory_mse_se"])
        assert abs(row["mse"] - row["theory_mse"]) < 4 * se, (spec, row["mse"], row["theory_mse"])
    # the theory is not trivially wide: grpo and nemo differ by many standard errors
    gap = abs(df.loc["grpo", "theory_mse"] - df.loc["nemo/grpo", "theory_mse"])
    assert gap > 4 * df.loc["grpo", "mse_se"]
