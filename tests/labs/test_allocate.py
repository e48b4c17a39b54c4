"""``gpolab allocate``: the allocation theory against brute force and numerical integration, every
rule's exact MSE (given its allocation) against its own Monte Carlo, the rules' semantics, the
command's rows and bad input, and ``plan --allocate``."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from gpolab.labs.allocate import lab, rules, static, steps
from gpolab.runner import cli
from gpolab.theory import allocation as theory

SMALL = dict(
    prompts=8,
    actions=4,
    budget=(16, 40),
    cap=16,
    seeds=3000,
    history=4,
    runs=5,
    steps=4,
    train_budget=24,
)


def _curves(spec, P=7, g_max=12, rho=0.05, seed=0):
    a1, a0, _ = theory.tables(spec, g_max)
    p = np.random.default_rng(seed).beta(0.5, 2.0, P)
    return theory.curves(a1, a0, p, rho * p * (1 - p), np.ones(P), p), a1, a0


def _brute(curve, budget, options):
    """Exact knapsack by dynamic programming over the prompts."""
    best = {0: 0.0}
    for row in curve:
        nxt = {}
        for n, v in best.items():
            for g in options:
                if n + g <= budget and v + row[g] < nxt.get(n + g, math.inf):
                    nxt[n + g] = v + row[g]
        best = nxt
    return best


@pytest.mark.parametrize("spec", ["loo", "grpo", "mean", "nemo/grpo", "verl/grpo_passk"])
def test_curves_are_the_count_table_moments_at_every_g(spec):
    from gpolab.theory import exact

    a1, a0, _ = theory.tables(spec, 12)
    p = np.array([0.0, 0.03, 0.3, 0.9, 1.0])
    gsq, S2, e_wz2 = np.array([0, 0.01, 0.1, 0.02, 0]), np.ones(5), np.array([0, 0.02, 0.3, 0.9, 1])
    got = theory.all_curves(a1, a0, p, gsq, S2, e_wz2)
    for G in range(2, 13):
        m = exact.moments(exact.registry_table(spec, G), G, p, gsq, S2, e_wz2)
        for name in ("mse", "second_moment", "kappa"):
            np.testing.assert_allclose(got[name][:, G], getattr(m, name), rtol=1e-9, atol=1e-15)
    np.testing.assert_array_equal(got["mse"][:, :2], np.stack([gsq, gsq], 1))


@pytest.mark.parametrize("budget", [14, 20, 33, 50])
def test_greedy_is_the_exact_optimum_for_convex_loo_curves(budget):
    curve, *_ = _curves("loo")
    assert theory.is_convex(curve)
    G = theory.greedy(curve, np.ones(len(curve)), budget)
    assert G.sum() == budget and G.min() >= 2
    dp = _brute(curve, budget, range(2, curve.shape[1]))
    assert theory.step_mse(curve, np.ones(len(curve)), G) == pytest.approx(dp[budget], rel=1e-12)


@pytest.mark.parametrize("budget", [8, 20, 40])
def test_lagrangian_with_drops_matches_brute_force(budget):
    curve, *_ = _curves("loo", rho=0.3)
    G = theory.lagrangian(curve, np.ones(len(curve)), budget)
    assert G.sum() <= budget and not np.any(G == 1)
    dp = _brute(curve, budget, [0, *range(2, curve.shape[1])])
    best = min(dp.values())
    # optimal on the lower convex hulls: within one prompt's rounding of the exact knapsack
    got = theory.step_mse(curve, np.ones(len(curve)), G)
    assert best <= got + 1e-15
    assert got <= best + np.max(np.abs(np.diff(curve, axis=1)))


def test_grpo_curves_are_not_convex_and_say_so():
    curve, *_ = _curves("grpo")
    assert not theory.is_convex(curve)


@pytest.mark.parametrize("spec", ["loo", "grpo", "mean"])
def test_posterior_curves_are_the_exact_beta_average(spec):
    _, a1, a0 = _curves(spec)
    rho, a, b = 0.1, 2.5, 6.0
    x = np.linspace(1e-7, 1 - 1e-7, 40001)
    w = stats.beta.pdf(x, a, b)
    w /= w.sum()
    pointwise = theory.curves(a1, a0, x, rho * x * (1 - x), np.ones_like(x), x)
    got = theory.posterior_curves(a1, a0, np.array([a]), np.array([b]), rho)[0]
    np.testing.assert_allclose(got, w @ pointwise, rtol=1e-6, atol=1e-12)


def test_loo_posterior_curve_at_rho_zero_is_sigma2_over_g_minus_1():
    _, a1, a0 = _curves("loo")
    a, b = 3.0, 5.0
    got = theory.posterior_curves(a1, a0, np.array([a]), np.array([b]), 0.0)[0]
    s2 = a * b / ((a + b) * (a + b + 1))
    G = np.arange(2, got.shape[0])
    np.testing.assert_allclose(got[2:], s2 / (G - 1), rtol=1e-12)


def test_sampled_design_spends_the_budget_and_beats_uniform():
    cfg = lab.Config(**{**SMALL, "seeds": 16})
    env = steps.Bandit.of(cfg.instance)
    t = env.truth(env.policy(env.theta))
    a1, a0, _ = theory.tables("loo", 16)
    o = steps.oracle_curves(t, a1, a0)
    pi, G, mse = theory.sampled_design(o["second_moment"], o["kappa"], t["gsq"], env.f, 24)[:3]
    assert np.all((pi > 0) & (pi <= 1)) and np.all(G >= 2)
    assert float(pi @ G) == pytest.approx(24, abs=1.0)
    uniform = steps.exact_given(o, env.f, np.full(8, 3), np.ones(8))
    assert mse < uniform


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return {est: lab.run(lab.Config(**SMALL, estimator=est)) for est in ("loo", "grpo")}


# the tests of one module-scoped run on one pytest-xdist worker: it runs once, not once per worker
SMALL_RUN = pytest.mark.xdist_group("allocate-small")


@SMALL_RUN
@pytest.mark.parametrize("est", ["loo", "grpo"])
def test_every_rule_exact_mse_given_its_allocation_matches_its_monte_carlo(small, est):
    res = small[est]["results"]
    fixed = res[res["theory_mse"].notna()]
    assert set(fixed["rule"]) == {
        r for r, x in rules.RULES.items() if x.kind in ("allocate", "staged")
    }
    se = np.hypot(fixed["mse_se"], fixed["theory_mse_se"])
    z = (fixed["mse"] - fixed["theory_mse"]) / np.where(se > 0, se, 1)  # se 0: all dropped
    assert np.all(np.abs(z) < 4.5), fixed.assign(z=z)[["rule", "budget", "mse", "theory_mse", "z"]]
    other = res[res["theory_mse"].isna()]
    assert set(other["rule"]) == {"pods", "reinforce-ada", "pilot-commit", "pilot-commit-grpo"}
    assert other["theory"].str.startswith("none:").all()


@SMALL_RUN
def test_rollouts_are_the_budget_where_a_rule_fixes_them(small):
    res = small["loo"]["results"]
    for rule in ("uniform", "gpolab-oracle", "gpolab", "knapsack", "vip", "mopps", "pods"):
        cur = res[res["rule"] == rule]
        assert np.allclose(cur["rollouts"], cur["budget"]), rule
    hora = res[res["rule"] == "gpolab-hora"]
    assert np.allclose(hora["rollouts"], hora["budget"])
    pc = res[res["rule"] == "pilot-commit"]  # every prompt's pilots, commits at most N/2
    pilots = [steps.stage_size(n, SMALL["prompts"]) * SMALL["prompts"] for n in pc["budget"]]
    assert np.all(pc["rollouts"] <= pc["budget"]) and np.all(pc["rollouts"] >= pilots)
    for rule in ("gvm", "gpolab-gvm-last", "greso", "gpolab-sgpo"):  # past the cap: not spent
        cur = res[res["rule"] == rule]
        assert np.all(cur["rollouts"] <= cur["budget"]) and np.all(cur["rollouts"] > 0)
    ada = res[res["rule"] == "reinforce-ada"]
    assert np.all(ada["rollouts"] >= ada["budget"])
    sample = res[res["rule"] == "gpolab-sample"]
    assert np.allclose(sample["rollouts"], sample["budget"], rtol=0.05)


@SMALL_RUN
def test_unbiased_rules_are_unbiased_and_drops_are_not(small):
    res = small["loo"]["results"].set_index(["rule", "budget"])
    for rule in (
        "uniform",
        "uniform-gstar",
        "gpolab-oracle",
        "gpolab",
        "gpolab-sample",
        "knapsack",
        "vip",
    ):  # every prompt kept, or reweighted by 1/P(kept)
        for budget in SMALL["budget"]:
            r = res.loc[(rule, budget)]
            assert abs(r["bias_sq"]) < 4 * r["bias_sq_se"], (rule, budget)
    # negative control: dropping prompts (G = 0, no reweighting) is biased
    for rule in ("gpolab-drop", "mopps"):
        r = res.loc[(rule, 16)]
        assert r["bias_sq"] > 4 * r["bias_sq_se"] and r["kept"] < SMALL["prompts"], rule
    assert (
        res.loc[("gpolab-drop", 16)]["theory_mse"] <= res.loc[("gpolab-oracle", 16)]["theory_mse"]
    )


def test_reinforce_ada_stops_when_both_outcomes_reach_half_the_group():
    z = np.zeros((1, 3, 16), bool)
    z[0, 0, [0, 3]] = True  # two successes in round 1 (r = 4): done after round 1
    z[0, 1, [9, 10]] = True  # successes in round 3
    use, gen, adv = steps.used_responses(rules.RULES["reinforce-ada"], None, z, budget=12)
    assert gen.tolist() == [[4, 12, 16]]  # third prompt never succeeds: all 4 rounds
    assert use.sum(-1).tolist() == [[2, 2, 2]]  # n = r/2 = 2 responses kept
    assert z[0, 0][use[0, 0]].tolist() == [True, False]  # one success, one failure
    np.testing.assert_allclose(adv[0, 1, 9], 1 - 2 / 12)  # A = r − rate of everything drawn


def test_pods_keeps_the_most_balanced_half():
    z = np.zeros((1, 2, 8), bool)
    z[0, 0, :1] = True  # 1 success of 8: keep it and 3 failures
    z[0, 1, :6] = True  # 6 of 8: keep 2 and 2
    use, gen, _ = steps.used_responses(rules.RULES["pods"], np.array([[8, 8]]), z, budget=16)
    assert use.sum(-1).tolist() == [[4, 4]] and gen.tolist() == [[8, 8]]
    assert (z & use).sum(-1).tolist() == [[1, 2]]


@SMALL_RUN
def test_training_rows_have_intervals_and_cumulative_rollouts(small):
    tr = small["loo"]["training"]
    assert set(tr["rule"]) == set(rules.RULES)
    first = tr[tr["step"] == 0]
    assert np.allclose(first["rollouts"], 0) and first["gap"].nunique() == 1
    uni = tr[tr["rule"] == "uniform"]
    assert np.allclose(np.diff(uni["rollouts"]), SMALL["train_budget"])
    assert (tr["gap_ci"] >= 0).all() and (tr["runs"] == 5).all()


def test_json_rows_carry_the_issue_columns(tmp_path, capsys):
    argv = [
        "allocate",
        "--prompts",
        "8",
        "--actions",
        "4",
        "--budget",
        "16,32",
        "--cap",
        "16",
        "--seeds",
        "64",
        "--runs",
        "5",
        "--steps",
        "3",
        "--train-budget",
        "16",
        "--rules",
        "uniform,gpolab,knapsack",
        "--out",
        str(tmp_path / "o"),
        "--json",
    ]
    assert cli.main(argv) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    static = [r for r in rows if r["table"] == "results"]
    trained = [r for r in rows if r["table"] == "training"]
    assert {"rule", "budget", "mse", "cos", "snr", "rollouts", "source"} <= set(static[0])
    assert {"rule", "rollouts", "gap", "gap_ci", "success_ci"} <= set(trained[0])
    assert all(r["source"] for r in static)
    for name in lab.TABLES:
        assert (tmp_path / "o" / f"{name}.parquet").exists()
    assert (tmp_path / "o" / "allocate_training.png").stat().st_size > 1000


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--budget", "8"], "budget: got 8"),
        (["--estimator", "verl/gpg"], "estimator"),
        (["--kind", "loglinear"], "kind"),
        (["--rules", "nope"], "rules"),
        (["--runs", "3"], "runs"),
    ],
)
def test_bad_input_is_one_line_before_anything_is_written(tmp_path, capsys, argv, words):
    assert cli.main(["allocate", *argv, "--out", str(tmp_path / "o")]) != 0
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_every_rule_cites_a_source_and_a_reading():
    for r in rules.RULES.values():
        assert (
            r.source
            and r.reads in rules.READS
            and r.kind in ("allocate", "downsample", "sequential", "staged", "pilot")
        )


def test_plan_allocate_writes_a_table_a_script_applies(tmp_path, capsys):
    rng = np.random.default_rng(1)
    p = rng.beta(0.5, 2.0, 200)
    z = rng.random((3, 200, 8)) < p[None, :, None]
    log = pd.DataFrame(
        {
            "step": np.repeat(np.arange(3), 200 * 8),
            "prompt": np.tile(np.repeat([f"q{i}" for i in range(200)], 8), 3),
            "reward": z.ravel().astype(float),
        }
    )
    path = tmp_path / "log.csv"
    log.to_csv(path, index=False)
    out = tmp_path / "o"
    assert cli.main(["plan", str(path), "--allocate", "--draws", "100", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "## Allocation" in text
    table = pd.read_csv(out / "allocation.csv")
    assert len(table) == 200 and table["G"].sum() == 8 * 200 and table["G"].min() >= 2
    doc = json.loads((out / "allocation.json").read_text())
    assert doc["G"]["q0"] == int(table.set_index("prompt").loc["q0", "G"])
    assert doc["predicted_mse_ratio"] < 1  # by construction no worse than the log's G
    # harder prompts (posterior p near 0) get fewer responses at rho = 0 (G − 1 ∝ σ)
    t = table.sort_values("p_mean")
    assert t["G"].iloc[:20].mean() < t["G"].iloc[-20:].mean() or t["p_mean"].iloc[-1] > 0.5


# ---- issue 40: Knapsack RL and GVM-RAFT as their authors run them, each rule on its own objective


@pytest.mark.parametrize(
    "p, valid, budget, max_n, want",
    [
        # fallback: Σ int(cost) = 3 + 8 = 11 < 24 left, the excess 13 to the p̂ = 0 prompt
        ([0.5, 0.25, 0.0, 1.0], [1, 1, 1, 1], 32, 16, [6, 9, 15, 2]),
        ([0.5, 0.125, 0.0, 0.0], [1, 1, 1, 1], 64, 128, [7, 17, 20, 20]),
        # no prompt with 0 < p̂ < 1: the rest to the p̂ = 0 ones, an invalid prompt counting as one
        ([0.0, 1.0, 0.0, 0.0], [1, 1, 1, 0], 24, 128, [6, 2, 6, 10]),
    ],
)
def test_knapsack_matches_the_authors_sampling_budget_by_knapsack(p, valid, budget, max_n, want):
    """Hand vectors: liziniu/KnapsackRL exploration_utils.sampling_budget_by_knapsack(states,
    budget // P, max_n=max_n) with states [validity, p̂, 8] gives ``want`` (run on their code);
    gpolab's old port gave all-equal prompts the minimum and no cost model."""
    got = rules.knapsack_one(np.array(p), np.array(valid, bool), budget, max_n)
    assert got.tolist() == want
    np.testing.assert_allclose(
        rules.knapsack_cost([0.5, 0.9, 0.0, 1.0]),
        [np.log(0.1) / np.log(0.5), np.log(0.1) / np.log(0.9), np.inf, 0],
    )


def test_knapsack_reads_the_latest_16_rewards():
    """Their update_sample_state: a group of 16 or more gives its own rate, a smaller one the
    rate of the latest 16 rewards across groups; 8 rewards make a prompt valid."""
    state = steps.fresh_state(1, 1)
    z = np.zeros((1, 1, 20), bool)
    for n, wins in ((8, 8), (4, 0), (20, 5), (2, 2)):
        z[:] = False
        z[..., :wins] = True
        state = steps.observe(state, np.array([[wins]]), np.array([[n]]), 1.0, z)
    # latest 16: the 2 successes, then the last 14 of the 20-group (their reversed order: all
    # failures here), so 2 of 16; the 20-group alone gave 5/20 one step earlier
    assert state["kn_p"][0, 0] == pytest.approx(2 / 16)
    assert state["kn_count"][0, 0] == 34
    one = steps.observe(
        steps.fresh_state(1, 1),
        np.array([[3]]),
        np.array([[4]]),
        1.0,
        np.array([[[1, 1, 1, 0]]], bool),
    )
    view = steps.view_of(
        lab.Config(prompts=1, actions=2),
        steps.Bandit.of(lab.Config(prompts=1, actions=2).instance),
        np.full((1, 2), 0.5),
        one,
        None,
        None,
        None,
    )
    # 4 rewards seen: not valid yet (their min_buffer_length 8), the prompt gets n = N/P
    assert one["kn_p"][0, 0] == 0.75 and rules.knapsack(view, 8, None).tolist() == [[8]]


def test_gvm_reads_a_fresh_first_stage_counted_in_the_rollouts():
    """GVM-RAFT's scripts draw a first stage for every prompt each iteration: a prompt last seen
    at p̂ = 0 is not starved when its fresh stage succeeds (gpolab's old port read the last step
    only and gave it nothing), and the first stage is counted in the rollouts spent."""
    cfg = lab.Config(prompts=2, actions=2, budget=(8,), cap=8)
    env = steps.Bandit.of(cfg.instance)
    pi = env.policy(env.theta)
    state = steps.observe(steps.fresh_state(1, 2), np.array([[0, 1]]), np.array([[2, 2]]), 1.0)
    a1, a0, _ = steps._tables("loo", 8)
    view = dataclasses.replace(steps.view_of(cfg, env, pi, state, a1, a0, None), gnorm=np.ones(2))
    M = steps.response_slots(cfg, 8)
    z = np.zeros((1, 2, M), bool)
    z[0, :, 0] = True  # stage 1 (2 per prompt): one success each
    a = np.broadcast_to(np.argmin(pi, -1)[None, :, None], (1, 2, M))  # a score norm ≈ 1
    out = {}
    for name in ("gvm", "gpolab-gvm-last"):
        G, _, gen, _, n, _, _ = steps.step(
            rules.RULES[name], view, 8, pi, env.success, a, z, np.random.default_rng(0)
        )
        out[name] = (G[0].tolist(), gen[0].tolist(), n[0].tolist())
    assert out["gpolab-gvm-last"][0][0] == 0  # the old port: starved
    G, gen, n = out["gvm"]
    assert G[0] > 0 and sum(gen) == 8 and gen == [2 + g for g in G] and n == G
    assert (
        static.own_objectives(
            np.array([n]), np.array([[1, 1]]), np.array([gen]), np.array([0.5, 0.5])
        )["update_cost"][0]
        == 0.5
    )


@SMALL_RUN
def test_own_objective_columns_against_enumeration(small):
    """Uniform G keeps G = N/P responses for every prompt: Knapsack RL's value is Σ_x value(G,
    p_x) exactly and the share of groups with both outcomes has mean 1 − p^G − (1 − p)^G."""
    res = small["loo"]["results"].set_index(["rule", "budget"])
    cfg = lab.Config(**SMALL)
    env = steps.Bandit.of(cfg.instance)
    V = env.truth(env.policy(env.theta))["V"]
    for budget in SMALL["budget"]:
        G = budget // SMALL["prompts"]
        r = res.loc[("uniform", budget)]
        assert r["knapsack_value"] == pytest.approx(np.sum(rules.knapsack_value(G, V)), rel=1e-9)
        both = 1 - V**G - (1 - V) ** G
        se = math.sqrt(np.sum(both * (1 - both))) / SMALL["prompts"] / math.sqrt(SMALL["seeds"])
        assert abs(r["nonzero_groups"] - both.mean()) < 5 * se
        assert r["update_cost"] == 1.0
    pods = res.xs("pods", level="rule")["update_cost"]  # trains on max(G/2, 2) of G
    G = np.array(SMALL["budget"]) // SMALL["prompts"]
    np.testing.assert_allclose(pods, np.maximum(G // 2, 2) / G)
    gvm = res.xs("gvm", level="rule")["update_cost"]  # the first stage is not trained on
    stage = np.array([steps.stage_size(n, SMALL["prompts"]) for n in SMALL["budget"]])
    trained = 1 - stage * SMALL["prompts"] / np.array(SMALL["budget"])
    assert gvm.iloc[0] == trained[0] and np.all(gvm <= trained + 1e-12), (gvm, trained)
