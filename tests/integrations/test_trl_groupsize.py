"""The real-trainer group-size comparison (``tools/trl_groupsize.py``): its bookkeeping against
hand-computed cases (any venv), and the whole harness at CI size in the TRL venv (slow: TRL's
GRPOTrainer at G = 2 and 4 with 8 rollouts per step, 2 seeds, 30 steps, the base run with
PlanCallback and ``gpolab plan --quick`` on it).  The harness test checks the bookkeeping, not the
verdict (docs/plan.md, "Checked against a real trainer", holds the full-size run)."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from tools import trl_groupsize as tg


# ---- bookkeeping -------------------------------------------------------------------------------
def test_first_reach_is_the_first_full_window_at_the_target():
    r = [0.0, 0.0, 1.0, 1.0, 1.0]  # window means (2 steps): 0, 0.5, 1, 1
    assert tg.first_reach(r, 0.5, 2) == 3
    assert tg.first_reach(r, 1.0, 2) == 4
    assert tg.first_reach(r, 1.01, 2) == math.inf  # never: kept as ∞, not dropped
    assert tg.first_reach([1.0], 0.5, 2) == math.inf  # no full window


def test_median_interval_keeps_runs_that_never_reached_and_never_gives_nan():
    x = [100.0, 200.0, 300.0, 400.0, 500.0]
    med, lo, hi = tg.median_interval(x, boot=500)
    assert med == np.median(x) and lo <= med <= hi and 100 <= lo and hi <= 500
    med, lo, hi = tg.median_interval([100.0, math.inf, math.inf], boot=500)
    assert med == math.inf and hi == math.inf and lo == 100.0  # 2 of 3 never reached
    med, lo, hi = tg.median_interval([100.0, 200.0, math.inf, math.inf], boot=500)
    assert med == math.inf and not any(map(math.isnan, (med, lo, hi)))
    assert tg.median_interval([7.0, 7.0], boot=50) == (7.0, 7.0, 7.0)


def test_paired_difference_resamples_seeds_jointly():
    x, y = np.array([300.0, 500.0, 400.0]), np.array([100.0, 300.0, 200.0])  # x = y + 200 per seed
    assert tg.paired_difference(x, y, boot=500) == (200.0, 200.0, 200.0)  # paired: no spread
    d, lo, hi = tg.paired_difference(x, y[::-1], boot=500)  # seeds unmatched: a spread
    assert d == 200.0 and lo < 200.0 < hi
    inf = math.inf  # both medians never reached: 0, never NaN
    assert tg.paired_difference([inf, inf], [inf, inf], boot=50) == (0.0, 0.0, 0.0)


def rows(medians, intervals, plan=(4.0, 3.0, 6.0)):
    return [
        {
            "G": G,
            "rollouts_median": m,
            "rollouts_lo": lo,
            "rollouts_hi": hi,
            "plan_gstar": plan[0],
            "plan_lo": plan[1],
            "plan_hi": plan[2],
        }
        for G, m, (lo, hi) in zip((2, 4, 8), medians, intervals, strict=True)
    ]


def test_compare_agrees_when_the_separated_best_G_lies_in_plans_interval():
    c = tg.compare(rows([900, 300, 800], [(800, 1000), (250, 350), (700, 900)]))
    assert (c["verdict"], c["best"], c["tied"], c["inside"]) == ("agree", 4, [4], [4])
    assert c["text"].startswith("agree: fastest G = 4 (300 rollouts to target")


def test_compare_disagrees_when_it_lies_outside_negative_control():
    c = tg.compare(rows([900, 300, 800], [(800, 1000), (250, 350), (700, 900)], (12, 9, 20)))
    assert (c["verdict"], c["best"], c["inside"]) == ("disagree", 4, [])
    assert "does not hold it" in c["text"]


def test_compare_is_inconclusive_when_intervals_overlap():
    c = tg.compare(rows([320, 300, 800], [(250, 400), (250, 350), (700, 900)], (12, 2, 20)))
    assert (c["verdict"], c["best"], c["tied"], c["inside"]) == ("inconclusive", 4, [2, 4], [2, 4])
    assert "not told apart from G = 2" in c["text"]


def test_compare_names_the_G_the_paired_reading_finds_slower():
    r = rows([320, 300, 800], [(250, 400), (250, 350), (700, 900)], (12, 2, 20))
    for x, lo in zip(r, (10.0, 0.0, -5.0), strict=True):
        x["diff_lo"] = lo
    c = tg.compare(r)
    assert c["verdict"] == "inconclusive" and c["slower"] == [2]  # the verdict: the overlap
    assert "paired by seed, G = 2 slower than it" in c["text"]


def test_compare_without_a_reached_G_or_a_plan_bound_makes_no_comparison():
    inf = math.inf
    c = tg.compare(rows([inf, inf, inf], [(300, inf)] * 3))
    assert c["verdict"] == "no comparison" and c["best"] is None
    c = tg.compare(rows([900, 300, 800], [(800, 1000), (250, 350), (700, 900)], (*[math.nan] * 3,)))
    assert c["verdict"] == "no comparison" and c["best"] == 4
    # an undecided plan: its lower bound is compared, and said to be a bound
    c = tg.compare(rows([900, 300, 800], [(800, 1000), (250, 350), (700, 900)], (math.nan, 3, inf)))
    assert c["verdict"] == "agree" and "bound G* >= 3" in c["text"]


def test_plan_gstar_reads_the_runs_estimator_first_and_open_ends_as_infinity():
    loo = {"gstar": 5.9, "gstar_lo": 4.6, "gstar_hi": 15.0, "gstar_reason": None}
    want = {"gstar": 5.9, "lo": 4.6, "hi": 15.0, "model": "loo", "reason": None}
    got = tg.plan_gstar(loo)
    assert math.isnan(got.pop("safe_G")) and math.isnan(got.pop("safe_regret")) and got == want
    # the safe G: the run's estimator's where plan gives it, else loo's
    safe = {**loo, "safe_G": 6, "safe_regret": 0.08}
    assert (tg.plan_gstar(safe)["safe_G"], tg.plan_gstar(safe)["safe_regret"]) == (6, 0.08)
    both = {**safe, "estimator_gstar": 8, "estimator_safe_G": 8, "estimator_safe_regret": 0.05}
    assert (tg.plan_gstar(both)["safe_G"], tg.plan_gstar(both)["safe_regret"]) == (8, 0.05)
    est = {
        **loo,
        "estimator_spec": "trl/grpo[scale_rewards=group]",
        "estimator_gstar": 8,
        "estimator_gstar_lo": 4,
        "estimator_gstar_hi": 8,
        "estimator_grid_max": 8,  # "4 or more": the grid's top is no upper bound
        "estimator_reason": None,
    }
    p = tg.plan_gstar(est)
    assert (p["gstar"], p["lo"], p["hi"], p["model"]) == (8, 4, math.inf, est["estimator_spec"])
    p = tg.plan_gstar({**est, "gstar": None})
    assert p["model"] == f"{est['estimator_spec']}; loo's G*: not estimated"
    p = tg.plan_gstar({**loo, "estimator_spec": "trl/grpo", "estimator_gstar": None})
    assert p["gstar"] == 5.9 and p["model"] == "loo; the run's estimator trl/grpo: not estimated"
    undecided = {"gstar": None, "gstar_lo": 3.3, "gstar_hi": "inf", "gstar_reason": "c1 ..."}
    p = tg.plan_gstar(undecided)
    assert math.isnan(p["gstar"]) and p["lo"] == 3.3 and p["hi"] == math.inf and p["reason"]


def test_summarize_counts_every_seed_and_the_final_rewards_standard_error():
    runs = pd.DataFrame(
        {
            "G": [2, 2, 2, 4, 4, 4],
            "seed": [0, 1, 2] * 2,
            "rollouts_to_target": [64.0, math.inf, 128.0, 32.0, 32.0, 64.0],
            "final": [0.4, 0.5, 0.6, 0.5, 0.5, 0.5],
        }
    )
    s = {**tg.QUICK, "quick": True, "boot": 100}
    plan = {"gstar": 4.0, "lo": 3.0, "hi": 6.0, "model": "loo"}
    out = tg.summarize(runs, s, plan)
    assert list(out.columns) == tg.COLUMNS and list(out["G"]) == [2, 4]
    assert list(out["seeds"]) == [3, 3] and list(out["reached"]) == [2, 3]
    assert list(out["rollouts_median"]) == [128.0, 32.0]
    assert list(out["diff_median"]) == [96.0, 0.0]  # against the fastest, G = 4
    assert out["final_se"].iloc[0] == pytest.approx(0.1 / math.sqrt(3))
    assert list(out["B"]) == [s["rollouts"] // 2, s["rollouts"] // 4]


def test_bad_settings_are_one_line_before_any_run(tmp_path, capsys):
    csv = tmp_path / "g.csv"
    args = ["--quick", "--rollouts", "12", "--gs", "8", "--out", str(tmp_path / "o")]
    assert tg.main([*args, "--csv", str(csv)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--rollouts 12 is not a multiple of G = 8" in err
    assert not csv.exists() and not (tmp_path / "o").exists()


# ---- the harness, TRL venv ---------------------------------------------------------------------
@pytest.mark.slow
def test_the_harness_at_ci_size(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("trl")
    csv, runs_csv, plans_csv = tmp_path / "g.csv", tmp_path / "r.csv", tmp_path / "p.csv"
    argv = ["--quick", "--out", str(tmp_path / "o"), "--csv", str(csv), "--runs-csv", str(runs_csv)]
    argv += ["--plans-csv", str(plans_csv)]
    assert tg.main(argv) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    g, r = pd.read_csv(csv), pd.read_csv(runs_csv)
    q = tg.QUICK
    assert list(g.columns) == tg.COLUMNS and list(g["G"]) == list(q["gs"])
    assert len(r) == len(q["gs"]) * q["seeds"]
    for G, d in r.groupby("G"):
        row = g[g["G"] == G].iloc[0]
        t = d["rollouts_to_target"].to_numpy()
        assert row["seeds"] == q["seeds"] and row["reached"] == np.isfinite(t).sum()
        assert row["B"] * G == row["rollouts_per_step"] == q["rollouts"]
        reached = t[np.isfinite(t)]  # whole steps of N rollouts, at least one full window
        assert np.all(reached % q["rollouts"] == 0)
        assert np.all(reached >= q["window"] * q["rollouts"])
        assert row["rollouts_lo"] <= row["rollouts_median"] <= row["rollouts_hi"]
        assert 0 <= row["final_mean"] <= 1 and row["final_mean"] == pytest.approx(d["final"].mean())
    curves = pd.read_csv(tmp_path / "o" / "rewards.csv")  # TRL's logged reward of every step
    assert len(curves) == len(r) * q["steps"]
    for run in r.itertuples():
        c = curves[(curves["G"] == run.G) & (curves["seed"] == run.seed)]["reward"].to_numpy()
        reach = tg.first_reach(c, q["target"], q["window"]) * q["rollouts"]
        assert run.rollouts_to_target == reach
        assert run.final == pytest.approx(c[-q["window"] :].mean())
    plan = tg.plan_gstar(json.loads((tmp_path / "o" / "plan-G4" / "plan.json").read_text()))
    plans = pd.read_csv(plans_csv)
    assert list(plans.columns) == tg.PLAN_COLUMNS and list(plans["base_G"]) == [q["base"]]
    assert plans["groups"].iloc[0] == q["steps"] * q["rollouts"] // q["base"]
    for key, col in (("gstar", "plan_gstar"), ("lo", "plan_lo"), ("hi", "plan_hi")):
        assert np.allclose(g[col], plan[key], equal_nan=True)
    assert (g["plan_model"].fillna("") == plan["model"]).all()
    assert tg.compare(g)["text"] in printed  # the printed comparison is the table's
    assert (tmp_path / "o" / f"base-G{q['base']}" / "gpolab" / "grad_norms.csv").is_file()
    again = tmp_path / "g2.csv"  # --resummarize: the same tables from the stored files alone
    argv = ["--quick", "--resummarize", "--out", str(tmp_path / "o"), "--csv", str(again)]
    assert tg.main([*argv, "--runs-csv", str(runs_csv), "--plans-csv", str(plans_csv)]) == 0
    assert again.read_text() == csv.read_text()


# ---- the docs block ----------------------------------------------------------------------------
def test_the_docs_block_is_the_stored_table_and_its_comparison():
    """docs/plan.md's block renders its stored values, which equal the committed CSV's (TRL is
    not rerun in the main venv); its comparison line is :func:`compare` of the CSV's rows; a
    number that differs from the CSV is caught."""
    from tools import readme

    block = readme.BLOCKS["trl-groupsize"]
    found = readme.blocks_of(readme.files(readme.Path(__file__).resolve().parents[2]))
    fresh = block.extract({})
    assert readme.stale(block, found["trl-groupsize"], fresh) == []
    rows = pd.read_csv(readme.Path(__file__).resolve().parents[2] / readme.TRL_CSV)
    assert f"**Comparison**: {tg.compare(rows)['text']}." in found["trl-groupsize"]["body"]
    edited = {**fresh, "G=4 rollouts_median": (fresh["G=4 rollouts_median"][0] + 24, 0.0)}
    assert readme.compare(edited, fresh)
