"""``gpolab plan``: the difficulty fit, the degenerate curve and the report from a rollout log,
against logs drawn from a known Beta difficulty distribution (exact truth)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from gpolab.labs import plan as plan_cmd
from gpolab.labs.plan import gstar_rows
from gpolab.labs.plan import lab as plan
from gpolab.runner import cli
from gpolab.theory import difficulty, fit_checks
from gpolab.validate import ConfigError

A, B = 0.6, 0.9  # true difficulty p ~ Beta(A, B): many hard and many easy prompts


def beta_log(path, *, groups=1500, G=8, steps=10, seed=0, levels=(0.0, 1.0)):
    """A table log: ``groups`` prompts of G responses over ``steps`` steps, p ~ Beta(A, B)."""
    rng = np.random.default_rng(seed)
    p = rng.beta(A, B, groups)
    z = rng.random((groups, G)) < p[:, None]
    rows = pd.DataFrame(
        {
            "step": np.repeat(np.arange(groups) % steps, G),
            "prompt": np.repeat([f"q{i}" for i in range(groups)], G),
            "reward": np.where(z, levels[1], levels[0]).ravel(),
        }
    )
    rows.to_csv(path, index=False)
    return path


def config(tmp_path, log, **kw):
    return plan.Config(log=str(log), out=str(tmp_path / "out"), draws=500, **kw)


def _counts(tables):
    groups = tables["groups"]
    return (groups["successes"].to_numpy(), groups["n"].to_numpy(), groups["prompt"].to_numpy())


def test_plan_recovers_beta_difficulty_and_degenerate_curve(tmp_path):
    """plan's numbers are the library's on the log's counts (so the coverage test below, run on
    the library, is a test of plan's intervals), and the fit passes its own checks here."""
    cfg = config(tmp_path, beta_log(tmp_path / "log.csv"))
    tables = plan.run(cfg)
    p = plan.pooled(tables)
    assert p["rewards"] == "binary" and p["G"] == 8 and p["groups"] == 1500
    c, n, prompt = _counts(tables)
    fit = difficulty.fit(c, n, clusters=prompt)
    assert (p["a"], p["b"], p["a_se"], p["b_se"]) == pytest.approx(
        (fit.a, fit.b, fit.a_se, fit.b_se), rel=1e-12
    )
    assert p["se_method"].startswith("observed information")  # every prompt once: independent
    assert abs(p["logged_z"]) < 3 and p["fit_p"] > 1e-3  # the Beta model is right here
    curve = tables["curve"].set_index("G")
    want = difficulty.degenerate_curve(fit, range(2, 257), draws=cfg.draws, seed=cfg.seed)
    for col in ("predicted", "lo", "hi", "dapo_draws"):
        assert curve[col].to_numpy() == pytest.approx(want[col].to_numpy(), rel=1e-12)
    # the smallest G under the target is the first on the curve at or below it
    assert p["G_needed"] == int(curve.index[curve["predicted"] <= cfg.target][0])
    k = tables["kappa"].set_index(["estimator", "G"])
    assert k.loc[("loo", 8), "kappa_mean"] == pytest.approx(1.0, abs=1e-9)
    assert k.loc[("grpo", 8), "kappa_mean"] == pytest.approx(
        difficulty.kappa_mix("grpo", 8, fit.a, fit.b)["kappa_mean"], rel=1e-12
    )


def repeated_prompt_log(rng, prompts=150, steps=10, per_step=45, G=8):
    """Counts of a run that draws ``per_step`` of ``prompts`` fixed prompts (p ~ Beta(A, B)) at
    each of ``steps`` steps: a prompt appears in ~3 groups, which share its p."""
    p = rng.beta(A, B, prompts)
    ids = np.concatenate([rng.permutation(prompts)[:per_step] for _ in range(steps)])
    return rng.binomial(G, p[ids]), np.full(ids.size, G), ids


def _se_matches_spread(x, s, R) -> tuple[float, float]:
    """mean(s)/sd(x) over R logs and the Monte Carlo SE of that ratio (the sample SD's relative
    error √((kurtosis − 1)/(4R)) with the mean SE's own)."""
    x, s = np.asarray(x), np.asarray(s)
    kurt = np.mean((x - x.mean()) ** 4) / np.var(x) ** 2
    return s.mean() / x.std(ddof=1), np.sqrt((kurt - 1) / (4 * R) + s.var() / (R * s.mean() ** 2))


@pytest.mark.slow
def test_plan_intervals_cover_the_truth_over_many_logs():
    """Over R = 200 simulated logs with prompts repeated across steps (the fit plan makes,
    clustered by prompt): the 95% intervals of the degenerate fraction cover the truth
    E[p^G + (1 − p)^G] in 0.95 ± 3.5 binomial SEs of the logs (3.5: four correlated G; seed
    fixed before the first run: 0.99 there, 0.953 over 300 logs of another seed), their half
    widths / 1.96 and the reported SEs of a, b and of the logged flat fraction match the spread
    of the estimates over the logs within 4 Monte Carlo SEs.  Negative control: the SEs that
    treat the groups as independent are too small by more than that (0.055 vs 0.079 for a)."""
    rng = np.random.default_rng(2026)
    R, Gs = 200, np.array([2, 8, 32, 128])
    truth = difficulty.degenerate_fraction(A, B, Gs)
    covered, pred, half, est, se, naive, flat, flat_se = [], [], [], [], [], [], [], []
    for r in range(R):
        c, n, ids = repeated_prompt_log(rng)
        fit = difficulty.fit(c, n, clusters=ids)
        curve = difficulty.degenerate_curve(fit, Gs, draws=1000, seed=r)
        covered.append((curve.lo <= truth) & (truth <= curve.hi))
        pred.append(curve.predicted)
        half.append((curve.hi - curve.lo) / (2 * 1.96))
        est.append((fit.a, fit.b))
        se.append((fit.a_se, fit.b_se))
        f0 = difficulty.fit(c, n)
        naive.append((f0.a_se, f0.b_se))
        chk = fit_checks.logged_check(c, n, fit, draws=10, clusters=ids)
        flat.append(chk["measured"])
        flat_se.append(chk["measured_se"])
    coverage = np.mean(covered, 0)
    assert np.all(np.abs(coverage - 0.95) <= 3.5 * np.sqrt(0.95 * 0.05 / R)), coverage
    assert fit.se_method.startswith("cluster-robust by prompt")
    pred, half, est, se, naive = map(np.array, (pred, half, est, se, naive))
    pairs = [(pred[:, k], half[:, k]) for k in range(Gs.size)]
    pairs += [(est[:, 0], se[:, 0]), (est[:, 1], se[:, 1]), (flat, flat_se)]
    for x, s in pairs:
        ratio, mc = _se_matches_spread(x, s, R)
        assert abs(ratio - 1) < 4 * mc, (ratio, mc)
    for k in range(2):
        ratio, mc = _se_matches_spread(est[:, k], naive[:, k], R)
        assert ratio < 1 - 4 * mc, (ratio, mc)  # independent groups: too small


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
    """The JSON's numbers against closed forms on the log's own counts: the logged flat
    fraction, the fit (the library's, on the same counts), the informative fraction at G = 2,
    2ab/((a + b)(a + b + 1)), the one at G = 8 by integration, DAPO = 1/informative, κ; and
    the report prints the same numbers."""
    from scipy import integrate, stats

    log = beta_log(tmp_path / "log.csv", groups=300)
    out = tmp_path / "out"
    assert cli.main(["plan", str(log), "--json", "--out", str(out), "--draws", "200"]) == 0
    obj = json.loads(capsys.readouterr().out)
    rows = pd.read_csv(log)
    g = rows.groupby(["step", "prompt"])["reward"].agg(["sum", "size"])
    c, n = g["sum"].to_numpy(), g["size"].to_numpy()
    assert obj["format"] == "table" and obj["G"] == 8 and obj["groups"] == 300
    assert obj["logged_degenerate_frac"] == np.mean((c == 0) | (c == n))
    fit = difficulty.fit(c, n)
    a, b = obj["a"], obj["b"]
    assert (a, b, obj["a_se"]) == pytest.approx((fit.a, fit.b, fit.a_se), rel=1e-9)
    frac = obj["predicted_degenerate_frac"]
    assert frac["2"] == pytest.approx(1 - 2 * a * b / ((a + b) * (a + b + 1)), rel=1e-12)
    pdf = lambda p: (p**8 + (1 - p) ** 8) * stats.beta.pdf(p, a, b)  # noqa: E731
    assert frac["8"] == pytest.approx(integrate.quad(pdf, 0, 1)[0], rel=1e-7)
    assert obj["dapo_draws_per_kept_group"]["8"] == pytest.approx(1 / (1 - frac["8"]), rel=1e-12)
    G_needed = next(G for G in range(2, 257) if difficulty.degenerate_fraction(a, b, G) <= 0.1)
    assert obj["G_needed"] == G_needed and str(G_needed) in obj["G_needed_text"]
    assert obj["kappa"]["loo"]["8"] == pytest.approx(1.0)
    assert obj["kappa"]["grpo"]["8"] == pytest.approx(
        difficulty.kappa_mix("grpo", 8, a, b)["kappa_mean"], rel=1e-12
    )
    assert obj["gstar"] is None and "proxy" in obj["gstar_reason"]
    for name in ("report.md", "plan.json", "plan.png", "summary.parquet", "curve.csv"):
        assert (out / name).exists()
    assert json.loads((out / "plan.json").read_text()) == obj
    assert cli.main(["plan", str(log), "--out", str(out), "--draws", "200"]) == 0
    text = capsys.readouterr().out
    assert f"Beta(a = {a:.3g} ± {obj['a_se']:.2g}, b = {b:.3g}" in text
    assert f"degenerate groups in the log: {obj['logged_degenerate_frac']:.4g}" in text
    assert f"smallest G with degenerate fraction <= 0.1: {G_needed};" in text
    assert "not estimated" in text


def test_plan_clusters_standard_errors_by_prompt(tmp_path):
    """Prompts drawn again at later steps: plan's a, b SEs, intervals and logged-fraction SE are
    the cluster-robust ones (larger than the independent-groups ones here), and it says so."""
    c, n, ids = repeated_prompt_log(np.random.default_rng(3))
    log = tmp_path / "log.csv"
    z = np.arange(8)[None, :] < c[:, None]  # c successes of 8 per group
    pd.DataFrame(
        {
            "step": np.repeat(np.arange(c.size) // 45, 8),
            "prompt": np.repeat([f"q{i}" for i in ids], 8),
            "reward": z.ravel() * 1.0,
        }
    ).to_csv(log, index=False)
    cfg = config(tmp_path, log)
    tables = plan.run(cfg)
    p = plan.pooled(tables)
    gc, gn, prompt = _counts(tables)
    fit = difficulty.fit(gc, gn, clusters=prompt)
    assert p["a_se"] == pytest.approx(fit.a_se, rel=1e-12)
    assert p["a_se"] > 1.2 * difficulty.fit(gc, gn).a_se
    assert p["se_method"].startswith("cluster-robust by prompt (")
    chk = fit_checks.logged_check(gc, gn, fit, clusters=prompt, draws=cfg.draws)
    assert p["logged_measured_se"] == pytest.approx(chk["measured_se"], rel=1e-12)
    assert "clustered by prompt" in plan.report(cfg, tables)


def test_plan_names_stray_rewards_and_binarizes_on_request(tmp_path, capsys):
    """One reward of 5.0 in a 0/1 log: read as graded, and the note names the value, its count
    and where it is; --success-threshold 1 reads the log as binary (5.0 a success)."""
    log = tmp_path / "log.csv"
    rows = pd.read_csv(beta_log(tmp_path / "clean.csv", groups=200))
    rows.loc[17, "reward"] = 5.0
    rows.to_csv(log, index=False)
    p = plan.pooled(plan.run(config(tmp_path, log)))
    assert p["rewards"] == "graded"
    assert "GRADED" in p["notes"] and "5 x1 (first at step" in p["notes"]
    assert "--success-threshold" in p["notes"]
    assert "main levels 0/1" in p["notes"]
    tables = plan.run(config(tmp_path, log, success_threshold=1.0))
    p = plan.pooled(tables)
    assert p["rewards"] == "binary" and "binarized" in p["notes"]
    rows["reward"] = (rows["reward"] >= 1).astype(float)
    g = rows.groupby(["step", "prompt"])["reward"].agg(["sum", "size"])
    assert p["a"] == pytest.approx(difficulty.fit(g["sum"], g["size"]).a, rel=1e-9)
    argv = ["plan", str(log), "--success-threshold", "inf", "--out", str(tmp_path / "o")]
    assert cli.main(argv) != 0
    assert "success_threshold" in capsys.readouterr().err
    assert "e.g. --success-threshold 1" in " ".join(cli_help("plan").split())


def cli_help(command: str) -> str:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(SystemExit):
        cli.main([command, "--help"])
    return buf.getvalue()


def test_plan_on_continuous_rewards_says_what_its_table_shows(tmp_path):
    """Continuous rewards: no two equal, so the model-free all-equal fraction is 0 at every G up
    to the log's group size and unknown beyond; the headline says G = 2 meets the target within
    that range (not "no G <= 256"), and the figure's middle panel shows the zeros."""
    from gpolab.labs.plan import plots

    rng = np.random.default_rng(4)
    log = tmp_path / "log.csv"
    pd.DataFrame(
        {
            "step": np.repeat(np.arange(40) % 5, 8),
            "prompt": np.repeat(np.arange(40), 8),
            "reward": rng.random(320),
        }
    ).to_csv(log, index=False)
    cfg = config(tmp_path, log)
    tables = plan.run(cfg)
    p = plan.pooled(tables)
    curve = tables["curve"].set_index("G")["predicted"]
    assert p["model"].startswith("empirical") and p["G_max_estimated"] == 8
    assert (curve.loc[2:8] == 0).all() and curve.loc[9:].isna().all()
    assert p["G_needed"] == 2
    text = plan.report(cfg, tables)
    assert "smallest G with degenerate fraction <= 0.1: 2 (" in text and "G <= 8" in text
    assert "no G <= 256" not in text
    plt = plots.pyplot()
    fig, ax = plt.subplots()
    plots._degenerate(ax, tables, {**p, "rewards": p["rewards"]})
    assert ax.get_yscale() == "linear"  # zeros cannot be drawn on a log axis
    assert np.array_equal(ax.lines[0].get_ydata(), np.zeros(7))  # G = 2..8
    plt.close(fig)


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
    assert cli.main(["plancheck", "--quick", "--env", "bandit", "--out", str(out)]) == 0
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
    from gpolab.integrations import rollouts

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


def test_plan_checks_figures_dir_before_computing(tmp_path, capsys, monkeypatch):

    log = beta_log(tmp_path / "log.csv", groups=50)
    blocker = tmp_path / "figs"
    blocker.write_text("")
    monkeypatch.setattr(plan, "run", lambda *a, **k: pytest.fail("computed"))
    argv = ["plan", str(log), "--out", str(tmp_path / "out"), "--figures-dir", str(blocker)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "figures-dir: got " in err[0], err


def test_the_report_says_when_the_log_cannot_pin_the_headline_G():
    """The band allows G from 8 to 256 at target 0.1: the headline says so and how many
    groups would narrow it ((width/target)² times the log's); a tight band says nothing."""
    from gpolab.labs.plan import report as plan_report

    G = np.array([2, 4, 8, 10, 16, 21, 32, 64, 128, 256])
    pred = 1.0 / G
    wide = pd.DataFrame(
        {
            "window": "all",
            "G": G,
            "predicted": pred,
            "lo": pred / 2,
            "hi": np.minimum(1.0, pred * 20),
        }
    )
    p = {"target": 0.1, "G_needed": 16, "groups": 80}
    text = plan_report.power_text(wide, p)
    width = float(wide.loc[wide["G"] == 16, "hi"].iloc[0] - wide.loc[wide["G"] == 16, "lo"].iloc[0])
    assert "allows any G from 8 to 256" in text  # lo = 1/(2G) <= 0.1 from 8; hi = 20/G from 256
    assert f"about {int(np.ceil(80 * (width / 0.1) ** 2)):,} groups (now 80)" in text
    tight = wide.assign(lo=pred * 0.95, hi=pred * 1.05)
    assert plan_report.power_text(tight, p) == ""


PRICES = [
    {"G": 4, "point": 0.02, "lo": 0.0, "hi": 0.3},
    {"G": 6, "point": 0.0, "lo": 0.0, "hi": 0.07},
    {"G": 8, "point": 0.01, "lo": 0.0, "hi": 0.2},
]
LEAD = {
    "lead_G": 6,
    "lead_for": "loo",
    "lead_excess": 0.0,
    "lead_excess_lo": 0.0,
    "lead_excess_hi": 0.07,
    "current_G": 8,
    "current_excess": 0.01,
    "current_excess_lo": 0.0,
    "current_excess_hi": 0.2,
    "budget": 48,
    "prices": json.dumps(PRICES),
}


@pytest.mark.parametrize(
    "p, start",
    [
        (
            {
                "gstar": 5.98,
                "gstar_lo": 4.6,
                "gstar_hi": 15.0,
                "gstar_proxy_groups": 960,
                "gstar_norm_rows": 1860,
                "lead_rule": "decided: the least noise at the log's constants",
            },
            "use G = 6: the least gradient noise at the log's constants among the sizes this run "
            "can set at N = 48 responses per step (B = N/G prompts); over the log's joint 95% "
            "region it costs at most 7% more noise than the best G",
        ),
        (
            {
                "gstar": None,
                "gstar_lo": 4.0,
                "gstar_hi": float("inf"),
                "gstar_c1": 1.5,
                "gstar_c1_se": 1.0,
                "prompts": 8,
                "lead_rule": "not decided",
            },
            "use G = 6: among the sizes this run can set at N = 48 responses per step (B = N/G "
            "prompts), the one whose worst excess noise over the best G is least: at most 7%, "
            "whatever the log's constants are within their joint 95% region.  G* itself is not "
            "decided: c1 = 1.5 ± 1",
        ),
        (
            {"gstar": None, "gstar_c1": -2.0, "gstar_lo": 3.0, "lead_rule": "not decided"},
            "use G = 6: among the sizes",
        ),
    ],
)
def test_the_recommendation_leads_with_one_g_and_prices_the_users(p, start):
    """One G leads (issue 56), with its worst-case price; the run's own G and the settable
    sizes next to the lead are priced; every other G says why it differs; the optimum is named."""
    from gpolab.labs.plan import gstar_text

    lines = gstar_text.recommendation({**LEAD, **p})
    assert lines[0].startswith(start)
    assert lines[1].startswith(
        "your G = 8 costs 1% more noise than the best G at the log's constants (0% .. 20% over "
        "the region)"
    )
    assert "G = 4: 2% (0% .. 30%), G = 6: 0% (0% .. 7%), G = 8 (yours): 1% (0% .. 20%)" in lines[1]
    assert lines[-1] == gstar_text.OPTIMUM and "per-step optima" in lines[-1]
    # another G in the report says why it differs from the lead
    other = gstar_text.recommendation({**LEAD, **p, "rule_G": 4, "rule_reason": "the pool"})
    assert "gpolab's training rule gives G = 4 for loo: the pool" in "\n".join(other)
    # the run's own estimator leads when modelled
    est = gstar_text.recommendation(
        {**LEAD, **p, "lead_for": "trl/grpo", "safe_G": 8, "safe_regret": 0.1}
    )
    assert est[0].startswith("use G = 6 (trl/grpo, the estimator this run trains with")
    assert "its own error is not in this bound; loo's law alone bounds G = 8 at 10%" in est[0]


def test_no_lead_says_why():
    from gpolab.labs.plan import gstar_text

    for p, said in (
        ({"gstar": None, "gstar_reason": "no proxy"}, "the log gives no G to use: no proxy"),
        (
            {"gstar": None, "gstar_c1": -2.0, "gstar_lo": 3.0},
            "the log gives no G to use: the prompt variance c1 = -2 is not above 0",
        ),
    ):
        lines = gstar_text.recommendation(p)
        assert lines[0].startswith(said) and len(lines) == 2


def test_a_size_the_batch_cannot_hold_says_how_to_change_it():
    from gpolab.labs.plan import gstar_text

    p = {**LEAD, "budget": 47, "lead_G": 6, "lead_rule": "not decided", "gstar": None}
    assert "no divisor of N = 47 in 2..256: change the batch" in gstar_text.recommendation(p)[0]


# ----------------------------------------------------------------------------- issue 40


def one_prompt_log(path, *, groups=20, G=8, p=0.4, seed=0):
    """Every group asks the same prompt, one group per step."""
    rng = np.random.default_rng(seed)
    z = rng.random((groups, G)) < p
    pd.DataFrame(
        {"step": np.repeat(np.arange(groups), G), "prompt": "q", "reward": z.ravel().astype(float)}
    ).to_csv(path, index=False)
    return path


def _plan(tmp_path, log, *flags, out="out"):
    return cli.main(["plan", str(log), "--out", str(tmp_path / out), "--draws", "100", *flags])


@pytest.mark.parametrize("flags", [(), ("--allocate",)])
def test_plan_on_one_prompt_gives_a_report_with_na_fields(tmp_path, capsys, flags):
    """issue 40 defect 4: a one-prompt log crashed (a_se = b_se = NaN formatted), with and
    without --allocate, after writing tables; now a report, the SEs "n/a (why)"."""
    # its success rate varies across steps (at a constant p the log is binomial: the fit is at
    # the binomial limit, whose SEs are n/a for that reason, issue 55)
    steps = np.random.default_rng(1).beta(2.0, 3.0, (20, 1))
    log = one_prompt_log(tmp_path / "log.csv", p=steps)
    assert _plan(tmp_path, log, *flags) == 0
    report = (tmp_path / "out" / "report.md").read_text()
    assert "one prompt:" in report and "± n/a (none: 1 prompt" in report
    assert ("## Allocation" in report) == bool(flags)
    p = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert p["prompts"] == 1 and p["a_se"] is None


def test_plan_errors_come_before_any_file(tmp_path, capsys):
    """issue 40 defects 4 and 8: --allocate on a graded or continuous log wrote report.md and
    12 files before its error; the one-group log's error was in internal terms."""
    graded = beta_log(tmp_path / "g.csv", groups=60, levels=(0.0, 0.5))
    rng = np.random.default_rng(0)
    pd.read_csv(graded).assign(reward=rng.integers(0, 3, 480) / 2).to_csv(graded, index=False)
    cont = tmp_path / "c.csv"
    pd.read_csv(graded).assign(reward=rng.random(480)).to_csv(cont, index=False)
    for log in (graded, cont):
        assert _plan(tmp_path, log, "--allocate") == 2
        assert "allocate: needs binary rewards" in capsys.readouterr().err
        assert not (tmp_path / "out").exists()
    one = tmp_path / "one.csv"
    pd.read_csv(graded).head(8).to_csv(one, index=False)
    assert _plan(tmp_path, one) == 2
    err = capsys.readouterr().err
    assert "has 1 group (8 responses to 1 prompt); plan needs at least 2 groups" in err, err
    assert "shapes" not in err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("level", [1.0, 0.0])
def test_plan_all_pass_and_all_fail_logs_give_a_report(tmp_path, capsys, level):
    """issue 40 defect 8: all-pass crashed after writing 10 tables, all-fail in scipy.  Now
    p-hat at the boundary, no fit, the curve's lo = 0.05^(G/n) (gpolab's 95% bound), G* and the
    G under the target undefined with the reason."""
    log = tmp_path / "log.csv"
    beta_log(log, groups=50)
    pd.read_csv(log).assign(reward=level).to_csv(log, index=False)
    assert _plan(tmp_path, log, "--target", "0.5") == 0
    out = tmp_path / "out"
    report = (out / "report.md").read_text()
    least = int(np.ceil(400 * np.log(0.5) / np.log(0.05)))  # 0.05^(G/400) <= 0.5: G >= 93
    assert f"p-hat = {int(level)} at the boundary" in report
    assert "G under the target: undefined" in report and f"no G below {least} keeps" in report
    assert "G* (the MSE-optimal group size)\nnot estimated: undefined: every group" in report
    p = json.loads((out / "plan.json").read_text())
    assert p["a"] is None and p["kappa"] == {} and p["G_needed"] is None
    curve = pd.read_csv(out / "curve.csv")
    assert curve["lo"].to_numpy() == pytest.approx(0.05 ** (curve["G"].to_numpy() / 400))
    assert p["G_needed_min"] == least == 93
    assert _plan(tmp_path, log, "--allocate", out="o2") == 2
    assert "allocate: needs a difficulty fit" in capsys.readouterr().err


def test_plan_replaces_an_earlier_runs_outputs_as_a_whole(tmp_path, capsys):
    """issue 40 defect 8: a run into a folder with an earlier run's files left them beside its
    own (allocation.* of an --allocate run, or old report/plan.json after a crash)."""
    log = beta_log(tmp_path / "log.csv", groups=100)
    assert _plan(tmp_path, log, "--allocate") == 0
    out = tmp_path / "out"
    assert (out / "allocation.csv").exists() and (out / "allocation.json").exists()
    assert _plan(tmp_path, log) == 0
    assert not list(out.glob("allocation.*")) and not (out / plan_cmd.STAGE).exists()
    assert "## Allocation" not in (out / "report.md").read_text()
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == sorted(
        n for n in plan_cmd.OUTPUTS if not n.startswith("allocation")
    )


def test_plan_config_runs_from_another_folder(tmp_path, capsys, monkeypatch):
    """issue 40 defect 8: config.toml kept the log's path relative to the first run's folder."""
    monkeypatch.chdir(tmp_path)
    beta_log(tmp_path / "log.csv", groups=100)
    assert cli.main(["plan", "log.csv", "--out", "first", "--draws", "100"]) == 0
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    argv = ["plan", "--config", "../first/config.toml", "--out", "again"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert (tmp_path / "elsewhere" / "again" / "report.md").exists()


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--seed", "-1"], "seed: got -1"),
        (["--log", "OTHER"], "log: given twice"),
        (["--no-allocate", "--allocate-rho", "0.5"], "--allocate-rho: not used with allocate"),
        (["--draws", "100000000"], "draws: got 100000000; allowed: at most 100,000"),
        (["--G", "1000"], "G: got 1000; allowed: at most 256"),
        (["--proxy-column", "empty"], "proxy_column: 'empty' has no value"),
        (["--length-column", "empty"], "length_column: 'empty' has no value"),
    ],
)
def test_plan_refuses_bad_flags_in_one_line(tmp_path, capsys, flags, words):
    """issue 40 defect 8: a traceback (seed -1), flags accepted silently (the second log, a
    flag --no-allocate ignores, an all-NaN proxy column) and sizes taking minutes and GBs."""
    log = beta_log(tmp_path / "log.csv", groups=50)
    pd.read_csv(log).assign(empty=np.nan).to_csv(log, index=False)
    flags = [str(beta_log(tmp_path / "o.csv", groups=50)) if f == "OTHER" else f for f in flags]
    assert _plan(tmp_path, log, *flags) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
    assert not (tmp_path / "out").exists()


def test_plan_refuses_a_log_too_large_for_memory_with_its_estimate(tmp_path, capsys, monkeypatch):
    """issue 40 defect 8: a 2M-row log was killed by the kernel with no message.  The check
    sees the available memory as less than the log's estimate."""
    from gpolab import validate
    from gpolab.integrations import rollouts

    log = beta_log(tmp_path / "log.csv", groups=50)
    monkeypatch.setattr(validate, "available_bytes", lambda: 1 << 30)
    monkeypatch.setattr(rollouts, "READ_FACTOR", 1 << 20)
    assert _plan(tmp_path, log) == 2
    err = capsys.readouterr().err
    need = rollouts.READ_FACTOR * log.stat().st_size
    assert f"log: got {str(log)!r}; needs about {validate.gib(need)} of memory" in err
    assert not (tmp_path / "out").exists()


def test_logged_check_sums_by_group_size_not_by_group():
    """The check's predicted SE (spread over draws of the mean over groups) is the same whether
    the mean runs over groups or, weighted, over distinct sizes (what bounds plan's memory)."""
    rng = np.random.default_rng(3)
    n = rng.choice([4, 8, 8, 16], 400)
    c = rng.binomial(n, rng.beta(A, B, n.size))
    fit = difficulty.fit(c, n)
    got = fit_checks.logged_check(c, n, fit, draws=300, seed=1)
    a, b = difficulty.draws(fit, 300, seed=1)
    per_draw = difficulty.degenerate_fraction(a[:, None], b[:, None], n[None]).mean(axis=1)
    assert got["predicted_se"] == pytest.approx(float(np.std(per_draw)), rel=1e-10)


def test_the_split_table_says_why_B_is_na():
    """issue 40 defect 8: --N 7 left B and informative_groups NaN without a reason."""
    from gpolab.labs.plan.report import _split_note

    at = pd.DataFrame({"G": [2, 4, 7, 8]})
    assert _split_note(at, 7) == (
        "; B and informative_groups are n/a where G does not divide N = 7: G = 2, 4, 8"
    )
    assert _split_note(at.iloc[[2]], 7) == ""


@pytest.mark.parametrize(
    "q, words",
    [
        (0.0055, "p = 0.0055; rejected at the conventional 5% level (not at 0.1%)"),
        (0.3, "p = 0.3; not rejected at the conventional 5% level"),
        (1e-5, "p = 1e-05; rejected at the 0.1% level: the Beta model MISSES the log"),
    ],
)
def test_the_fit_check_states_its_test_and_reading(q, words):
    """issue 40 defect 8: "p = 0.0055: the Beta model describes the log" (the code's cut-off
    was 1e-3): the test is named and read at the conventional 5% level."""
    from gpolab.labs.plan.report import _fit_check_text

    text = _fit_check_text({"fit_p": q, "fit_chi2": 20.0, "fit_df": 5, "se_method": "x"})
    assert text.startswith("goodness-of-fit test of the beta-binomial model (Pearson chi-square")
    assert words in text and "describes the log" not in text


# ----------------------------------------------------------------------------- the run's estimator


@pytest.mark.parametrize(
    "run,spec",
    [
        ({"scale_rewards": "group", "loss_type": "dapo"}, "trl/grpo[scale_rewards=group]"),
        ({"scale_rewards": True}, "trl/grpo[scale_rewards=group]"),
        ({"scale_rewards": False, "loss_type": "dr_grpo"}, "trl/grpo[scale_rewards=none]"),
        ({"scale_rewards": "batch"}, "trl/grpo[scale_rewards=none]"),
        ({"framework": "verl", "adv_estimator": "rloo"}, "verl/rloo"),
        (
            {"framework": "verl", "algorithm.adv_estimator": "grpo", "norm_adv_by_std_in_grpo": 0},
            "verl/grpo[norm_adv_by_std_in_grpo=false]",
        ),
        ({"framework": "verl", "adv_estimator": "gpg"}, None),
        ({"loss_type": "dapo"}, None),
        ({}, None),
    ],
)
def test_the_trainers_estimator_is_read_from_run_json(run, spec):
    from gpolab import estimators
    from gpolab.labs.plan import trainer

    got = trainer.modelled(run)
    assert got["spec"] == spec
    if spec is None:
        assert got["reason"]
        return
    estimators.check_reward_only("spec", spec, "")  # a spec with count tables
    if "loss_type" in run:
        assert run["loss_type"] in got["aggregation"]
    if run.get("scale_rewards") == "batch":
        assert "step size" in got["batch"]
    assert trainer.modelled(run, "loo")["spec"] == "loo"  # --trainer-estimator wins


def test_plan_gives_the_trainers_estimator_gstar_beside_loos(tmp_path):
    """A simulated bandit log with score norms and gradient norms (plancheck's quick sizes):
    G* of trl/grpo (transfer model) with an interval holding it, loo's on the same grid a
    neighbour of loo's 1 + √(C3/c1), and the recommendation naming the trainer's estimator."""
    from gpolab.labs.plancheck import lab as plancheck
    from gpolab.labs.plancheck import simulate
    from gpolab.theory import gstar_model

    sim = simulate.simulate_bandit(steps=15, norm_steps=60)
    paths = plancheck.write_logs(sim, tmp_path / "logs", ("table",))
    kw = dict(proxy_column=plancheck.PROXY, grad_norms=str(paths["norms"]))
    tables = plan.run(config(tmp_path, paths["table"], trainer_estimator="trl/grpo", **kw))
    p = plan.pooled(tables)
    g = p["estimator_gstar"]
    assert g in gstar_model.GRID and p["estimator_gstar_lo"] <= g <= p["estimator_gstar_hi"]
    assert p["estimator_spec"] == "trl/grpo" and p["estimator_source"] == "--trainer-estimator"
    assert p["estimator_scale"] > 1  # std normalization: E ĝ = scale · g, scale ≈ E 1/σ
    grid = np.array(gstar_model.GRID)
    below, above = grid[grid <= p["gstar"]].max(), grid[grid >= p["gstar"]].min()
    assert p["loo_model_gstar"] in (below, above)
    text = plan.report(plan.Config(log=str(paths["table"]), **kw), tables)
    head = text.splitlines()[text.splitlines().index("## Recommendation") + 1]
    assert head.startswith(f"use G = {g} (trl/grpo, the estimator this run trains with")
    assert p["lead_G"] == g and p["lead_for"] == "trl/grpo"
    assert p["current_G"] == 8 and 0 <= p["current_excess_lo"] <= p["current_excess_hi"]
    # plan.json carries every field of summary.csv's pooled row (the lead, prices, rule)
    js = plan.summary_json(plan.Config(log=str(paths["table"]), **kw), tables)
    assert {"lead_G", "current_excess_hi", "rule_G", "rule_reason", "safe_c1_max"} <= set(js)
    assert [r["G"] for r in js["prices"]] == sorted(r["G"] for r in js["prices"])
    rec = text.split("## Recommendation")[1].split("\n\n")[0]
    assert "loo's G* = " in rec and "the lead is for the run's estimator" in rec
    assert "The run's estimator: trl/grpo" in text
    loo = plan.pooled(plan.run(config(tmp_path, paths["table"], trainer_estimator="loo", **kw)))
    assert loo["estimator_gstar"] == loo["loo_model_gstar"] == p["loo_model_gstar"]
    # the training rule on the log's own constants: 480 groups of 512 prompts, none repeated
    from gpolab.theory import groupsize

    c = groupsize.Constants(p["gstar_c1"], p["gstar_C2"], p["gstar_C3"])
    assert p["rule_pool"] == 0 and p["rule_G"] == groupsize.training_rule(c, 256, 0)["G"]
    said = f"gpolab's training rule gives G = {p['rule_G']} for loo: " in text
    assert said == (p["rule_G"] != p["lead_G"])  # named only where it differs from the lead


@pytest.mark.parametrize(
    "pool, prompts, groups, want",
    [(-1, 8, 480, 8), (-1, 480, 480, 0), (0, 8, 480, 0), (64, 8, 480, 64)],
)
def test_the_training_rule_reads_the_pool(pool, prompts, groups, want):
    """--pool -1 takes the log's distinct prompts as the pool when they repeat (a finite
    dataset cycled), else prompts drawn afresh; 0 and a number are taken as given."""
    from gpolab.theory import groupsize

    p = {"prompts": prompts, "groups": groups, "budget": 64, "gstar": 5.0}
    p |= {"gstar_c1": 0.01, "gstar_C2": 0.1, "gstar_C3": 0.16}
    cfg = plan.Config(log="x", pool=pool)
    row = gstar_rows.rule_row(cfg, p)
    c = groupsize.Constants(0.01, 0.1, 0.16)
    assert row["rule_pool"] == want and row["rule_G"] == groupsize.training_rule(c, 64, want)["G"]
    assert row["rule_reason"].startswith("at N = 64 rollouts per step and")
    undecided = gstar_rows.rule_row(cfg, {**p, "gstar": None})
    assert undecided["rule_G"] is None and "decided" in undecided["rule_reason"]


def test_plan_without_the_trainers_estimator_says_loo_only(tmp_path):
    tables = plan.run(config(tmp_path, beta_log(tmp_path / "log.csv")))
    p = plan.pooled(tables)
    assert p["estimator_spec"] is None and "run.json" in p["estimator_reason"]
    assert "loo only" in plan.report(config(tmp_path, tmp_path / "log.csv"), tables)


@pytest.mark.parametrize("spec", ["verl/gpg", "trl/grpo[scale_rewards=batch]", "nosuch"])
def test_a_trainer_estimator_without_count_tables_is_one_error(tmp_path, spec):
    with pytest.raises(ConfigError, match="trainer_estimator|estimator"):
        config(tmp_path, beta_log(tmp_path / "log.csv"), trainer_estimator=spec).validate()


def test_plan_says_when_a_log_shows_no_spread_beyond_binomial_noise(tmp_path):
    """issue 55: on binomial logs the old fit stalled nats below the maximum at a finite Beta
    and its check rejected them.  Now the report says the fit is at the binomial limit, once,
    with no SE or band, and the check counts the mean as its one fitted parameter."""
    rng = np.random.default_rng(50)
    z = rng.random((3000, 8)) < 0.3
    log = tmp_path / "log.csv"
    pd.DataFrame(
        {
            "step": np.repeat(np.arange(3000) % 5, 8),
            "prompt": np.repeat([f"q{i}" for i in range(3000)], 8),
            "reward": z.ravel().astype(float),
        }
    ).to_csv(log, index=False)
    cfg = config(tmp_path, log)
    tables = plan.run(cfg)
    p = plan.pooled(tables)
    assert p["se_method"] == difficulty.BINOMIAL_LIMIT and p["a_se"] is None
    m = z.mean()
    curve = tables["curve"].set_index("G")
    assert curve.loc[8, "predicted"] == pytest.approx(m**8 + (1 - m) ** 8, abs=1e-5)
    assert curve.loc[8, "lo"] == curve.loc[8, "hi"] == curve.loc[8, "predicted"]
    assert p["fit_df"] == 5 and p["fit_p"] > 0.05  # 7 cells − 1 size − 1 (the mean)
    text = plan.report(cfg, tables)
    assert text.count("a + b → ∞") == 1 and "± n/a (at the binomial limit)" in text
