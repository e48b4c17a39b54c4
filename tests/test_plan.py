"""``gpolab plan``: the difficulty fit, the degenerate curve and the report from a rollout log,
against logs drawn from a known Beta difficulty distribution (exact truth)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from gpolab import cli
from gpolab.labs import plan
from gpolab.theory import difficulty
from gpolab.validate import ConfigError

A, B = 0.6, 0.9  # true difficulty p ~ Beta(A, B): many hard and many easy prompts


def beta_log(path, *, groups=1500, G=8, steps=10, seed=0, levels=(0.0, 1.0)):
    """A table log: ``groups`` prompts of G responses over ``steps`` steps, p ~ Beta(A, B)."""
    rng = np.random.default_rng(seed)
    p = rng.beta(A, B, groups)
    z = rng.random((groups, G)) < p[:, None]
    rows = pd.DataFrame({
        "step": np.repeat(np.arange(groups) % steps, G),
        "prompt": np.repeat([f"q{i}" for i in range(groups)], G),
        "reward": np.where(z, levels[1], levels[0]).ravel(),
    })  # fmt: skip
    rows.to_csv(path, index=False)
    return path


def config(tmp_path, log, **kw):
    return plan.Config(log=str(log), out=str(tmp_path / "out"), draws=500, **kw)


def test_plan_recovers_beta_difficulty_and_degenerate_curve(tmp_path):
    cfg = config(tmp_path, beta_log(tmp_path / "log.csv"))
    tables = plan.run(cfg)
    p = plan.pooled(tables)
    assert p["rewards"] == "binary" and p["G"] == 8 and p["groups"] == 1500
    assert abs(p["a"] - A) < 3 * p["a_se"] and abs(p["b"] - B) < 3 * p["b_se"]
    assert abs(p["logged_z"]) < 3 and p["fit_p"] > 1e-3  # the Beta model is right here
    curve = tables["curve"].set_index("G")
    for G in (2, 8, 32, 128):
        truth = float(difficulty.degenerate_fraction(A, B, G))
        lo, hi = curve.loc[G, ["lo", "hi"]]
        width = hi - lo
        assert lo - 0.5 * width <= truth <= hi + 0.5 * width, (G, truth, lo, hi)
    # the smallest G under the target is the first on the curve at or below it
    want = int(curve.index[curve["predicted"] <= cfg.target][0])
    assert p["G_needed"] == want
    k = tables["kappa"].set_index(["estimator", "G"])
    assert k.loc[("loo", 8), "kappa_mean"] == pytest.approx(1.0, abs=1e-9)
    assert k.loc[("grpo", 8), "kappa_mean"] > 1.5  # std normalization up-weights hard/easy


def test_plan_fit_fails_its_check_when_a_mass_of_prompts_is_impossible(tmp_path):
    rng = np.random.default_rng(1)
    groups, G = 1500, 8
    p = np.where(rng.random(groups) < 0.4, 0.0, rng.beta(2.0, 2.0, groups))
    z = rng.random((groups, G)) < p[:, None]
    log = tmp_path / "log.csv"
    pd.DataFrame({"prompt": np.repeat(np.arange(groups), G), "reward": z.ravel() * 1.0}).to_csv(
        log, index=False
    )
    tables = plan.run(config(tmp_path, log))
    summary = plan.pooled(tables)
    assert summary["fit_p"] < 1e-6  # the count histogram rejects the Beta model
    assert "MISSES" in plan.report(config(tmp_path, log), tables)


def test_plan_windows_and_levels(tmp_path):
    cfg = config(tmp_path, beta_log(tmp_path / "log.csv", levels=(-1.0, 1.0)), window=5)
    tables = plan.run(cfg)
    s = tables["summary"]
    assert list(s["window"]) == ["0-4", "5-9", "all"]
    assert s["groups"].iloc[:2].sum() == s["groups"].iloc[2]
    p = plan.pooled(tables)
    assert (p["low"], p["high"]) == (-1.0, 1.0)


def test_plan_says_why_no_gstar(tmp_path):
    p = plan.pooled(plan.run(config(tmp_path, beta_log(tmp_path / "log.csv"))))
    assert p["gstar"] is None and "proxy" in p["gstar_reason"]


def test_plan_graded_rewards(tmp_path):
    rng = np.random.default_rng(2)
    groups, G = 400, 8
    probs = rng.dirichlet([0.5, 0.5, 0.5], groups)
    draws = np.array([rng.choice(3, G, p=q) for q in probs]) * 0.5  # rewards 0, 0.5, 1
    log = tmp_path / "log.csv"
    pd.DataFrame({"prompt": np.repeat(np.arange(groups), G), "reward": draws.ravel()}).to_csv(
        log, index=False
    )
    tables = plan.run(config(tmp_path, log))
    p = plan.pooled(tables)
    assert p["rewards"] == "graded" and tables["kappa"].empty
    measured = float(np.mean([len(set(r)) == 1 for r in draws]))
    assert p["logged_measured"] == pytest.approx(measured)
    assert "binary" in p["gstar_reason"]


def test_cli_plan_json_and_report(tmp_path, capsys):
    log = beta_log(tmp_path / "log.csv", groups=300)
    out = tmp_path / "out"
    assert cli.main(["plan", str(log), "--json", "--out", str(out), "--draws", "200"]) == 0
    obj = json.loads(capsys.readouterr().out)
    for key in (
        "format",
        "steps",
        "prompts",
        "G",
        "a",
        "b",
        "logged_degenerate_frac",
        "predicted_degenerate_frac",
        "dapo_draws_per_kept_group",
        "kappa",
        "gstar",
    ):
        assert key in obj
    assert obj["format"] == "table" and obj["G"] == 8
    assert set(obj["predicted_degenerate_frac"]) >= {"2", "8", "256"}
    assert obj["kappa"]["loo"]["8"] == pytest.approx(1.0)
    for name in ("report.md", "plan.json", "plan.png", "summary.parquet", "curve.csv"):
        assert (out / name).exists()
    assert cli.main(["plan", str(log), "--out", str(out), "--draws", "200"]) == 0
    text = capsys.readouterr().out
    assert "Beta(a = " in text and "not estimated" in text


@pytest.mark.parametrize(
    "argv, words",
    [
        (["plan"], "log: missing"),
        (["plan", "no/such/log.csv"], "does not exist"),
        (["plan", "LOG", "--target", "2"], "target"),
        (["plan", "LOG", "--format", "wandb"], "format"),
        (["plan", "LOG", "--estimators", "nope"], "nope"),
    ],
)
def test_cli_plan_bad_input_is_one_line(tmp_path, capsys, argv, words):
    log = beta_log(tmp_path / "log.csv", groups=50)
    argv = [str(log) if a == "LOG" else a for a in argv]
    assert cli.main([*argv, "--out", str(tmp_path / "out")]) != 0
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing written before the input is checked


def test_grad_norms_file_errors(tmp_path):
    bad = tmp_path / "norms.csv"
    pd.DataFrame({"batch": [8, 8], "grad_norm": [1.0, 2.0]}).to_csv(bad, index=False)
    with pytest.raises(ConfigError, match="one batch size"):
        plan.read_norms(bad)
    pd.DataFrame({"B": [8, 16]}).to_csv(bad, index=False)
    with pytest.raises(ConfigError, match="batch"):
        plan.read_norms(bad)


@pytest.mark.slow
def test_plancheck_recovers_the_bandit_truth_from_every_format(tmp_path, capsys):
    """Logs simulated from the bandit, written as TRL, verl and a table: the three reads agree
    exactly, and the truth (degenerate curve, logged fraction, mean difficulty, G*) lies in
    plan's 95% intervals (fixed seed; the curve's points share one fit, so they are one check)."""
    out = tmp_path / "pc"
    assert cli.main(["plancheck", "--quick", "--envs", "bandit", "--out", str(out)]) == 0
    df = pd.read_parquet(out / "results.parquet")
    assert set(df["format"]) == {"trl", "verl", "table"}
    spread = df.groupby(["quantity", "G"], dropna=False)["recovered"].agg(np.ptp)
    assert float(spread.max()) == 0.0
    checked = df[df["covered"].notna()]
    assert checked["covered"].all(), checked[~checked["covered"].astype(bool)]
    assert {"G*", "degenerate fraction", "mean difficulty"} <= set(checked["quantity"])
    assert (out / "logs" / "bandit" / "trl" / "completions").is_dir()
    assert "truth inside the 95% interval" in capsys.readouterr().out


@pytest.mark.parametrize("fmt", ["trl", "verl"])
def test_cli_plan_reads_framework_folders(tmp_path, capsys, fmt):
    from gpolab import rollouts

    f = pd.read_csv(beta_log(tmp_path / "log.csv", groups=200))
    f = f.assign(completion="y", output="y", gts="0", correct=f["reward"], score=f["reward"])
    if fmt == "trl":
        rollouts.write_trl(tmp_path / "run", f, reward_columns=("correct",))
        log = tmp_path / "run" / "completions"
    else:
        rollouts.write_verl(tmp_path / "run", f)
        log = tmp_path / "run"
    argv = ["plan", str(log), "--json", "--out", str(tmp_path / "out"), "--draws", "100"]
    assert cli.main(argv) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["format"] == fmt and obj["G"] == 8 and obj["groups"] == 200 and obj["steps"] == 10
