"""Issue 42, per-step optimum vs training optimum (the group-size lab's budget check): the rule a
user applies against brute force, rollouts to target with censoring, the budget run's shape and
config errors, and the ledger statistics on synthetic tables (pass, fail, inconclusive and each
negative control)."""

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from gpolab import configs, validate
from gpolab.labs.claims import lab as claims
from gpolab.labs.claims import stats_groupsize
from gpolab.labs.groupsize import budget as budgets
from gpolab.labs.groupsize import lab as groupsize
from gpolab.labs.groupsize import summary as summaries
from gpolab.theory import groupsize as theory

LEDGER = {c["id"]: c for c in claims.load(claims.LEDGER)}


# ---------------------------------------------------------------- the rule


def test_training_rule_is_the_brute_force_argmin_over_the_feasible_divisors():
    rng = np.random.default_rng(0)
    for _ in range(200):
        c = theory.Constants(*np.exp(rng.normal(size=3) * 1.5))
        N, P = int(rng.choice([12, 16, 64, 96, 256, 1024])), int(rng.choice([0, 1, 3, 8, 64]))
        rule = theory.training_rule(c, N, P)
        feasible = [G for G in range(2, N + 1) if N % G == 0 and (P == 0 or N // G <= P)]
        if P == 0:
            brute = min(feasible, key=lambda G: (theory.fixed_n_mse(c, N, G), G))
        else:
            brute = min(feasible, key=lambda G: (theory.pool_mse(c, N, G, P), G))
        assert rule["G"] == brute and list(rule["feasible"]) == feasible
        assert rule["min_G"] == feasible[0] and f"use G = {brute}:" in rule["reason"]
        if P == 0:
            assert rule["G"] == theory.best_divisor(c, N)


def test_training_rule_says_when_the_pool_binds():
    c = theory.Constants(0.0025, 0.2, 0.2)  # G* ≈ 9.9
    assert "smallest group that fits" in theory.training_rule(c, 256, 16)["reason"]
    assert theory.training_rule(c, 256, 16)["G"] == 16
    free = theory.training_rule(c, 256, 0)
    assert free["G"] == 8 and "does not depend on N" in free["reason"]
    with pytest.raises(validate.ConfigError, match="pool"):
        theory.training_rule(c, 256, -1)
    with pytest.raises(validate.ConfigError, match="N"):
        theory.training_rule(c, 1, 0)


# ---------------------------------------------------------------- rollouts to target


def test_hitting_counts_rollouts_at_the_first_step_and_censors_at_the_total():
    curve = np.array([[0.1, 0.3, 0.5, 0.6], [0.1, 0.2, 0.2, 0.3], [0.6, 0.7, 0.7, 0.7]])
    rollouts, reached = budgets.hitting(curve, 0.5, N=16, total=48)
    assert rollouts.tolist() == [32, 48, 0] and reached.tolist() == [True, False, True]


# ---------------------------------------------------------------- the budget run


def small(**kw) -> groupsize.Config:
    base = dict(
        train=True,
        budget=True,
        env="bandit",
        seeds=8,
        bandit_N=(8, 16),
        pools=(0, 4),
        bandit_total=256,
        prompts=8,
        actions=8,
        instance_seed=3,
    )
    return groupsize.Config(**{**base, **kw})


def test_budget_rows_cover_the_feasible_divisors_and_carry_the_rule():
    cfg = small()
    out = groupsize.run(cfg)
    df, s = out["results"], out["summary"]
    rows = df.groupby(["pool", "N"])["G"].apply(list).to_dict()
    assert rows == {
        (0, 8): [2, 4, 8],
        (0, 16): [2, 4, 8, 16],
        (4, 8): [2, 4, 8],
        (4, 16): [4, 8, 16],
    }
    assert (df["steps"] == 256 // df["N"]).all() and (df["rollouts"] <= 256).all()
    assert ((df["reached"] >= 0) & (df["reached"] <= 1)).all()
    assert (df["passk"] >= df["pass1"]).all()  # pass@8 ≥ pass@1, exactly from V
    assert (df["value_c1"] == df["pass1"]).all()
    assert np.allclose(df["target_J"], df["j0"] + 0.3 * (df["j_star"] - df["j0"]))
    for r in s.itertuples():
        sub = df[(df["pool"] == r.pool) & (df["N"] == r.N)]
        assert r.best_G == int(sub.loc[sub["rollouts"].idxmin(), "G"])
        assert r.best_G in stats_groupsize._gs(r.tied_G)
        c = summaries.pool_constants(sub)
        assert r.rule_G == theory.training_rule(c, r.N, r.pool)["G"]
    assert groupsize.cell_keys(cfg) != groupsize.cell_keys(cfg.replace(target=0.4))


def test_budget_config_errors_name_the_field():
    with pytest.raises(validate.ConfigError, match="bandit_total: got 100 for bandit_N = 8"):
        small(bandit_total=100).validate()
    with pytest.raises(validate.ConfigError, match="--arithmetic-total: not used"):
        configs.resolve(
            groupsize.Config, typed={"budget": True, "env": "bandit", "arithmetic_total": 64}
        )
    with pytest.raises(validate.ConfigError, match="target"):
        small(target=0.0).validate()
    with pytest.raises(validate.ConfigError, match="pools"):
        small(pools=(-1,)).validate()
    cfg = configs.resolve(groupsize.Config, typed={"budget": True})  # --budget implies --train
    assert cfg.train and cfg.budget and cfg.out == groupsize.BUDGET_OUT
    with pytest.raises(validate.ConfigError, match="--budget: not used with train = False"):
        configs.resolve(groupsize.Config, typed={"budget": True, "train": False})
    with pytest.raises(validate.ConfigError, match="--pools: not used"):
        configs.resolve(groupsize.Config, typed={"train": True, "pools": "0,8"})
    with pytest.raises(validate.ConfigError, match="--bandit-steps: not used"):
        configs.resolve(groupsize.Config, typed={"train": True, "budget": True, "bandit_steps": 5})


def test_the_budget_flag_off_keeps_the_training_configs_hash():
    from gpolab.labs.groupsize import pool as pools

    cfg = groupsize.Config(train=True)
    assert "budget" not in configs.key_settings(cfg, exclude=("budget",))
    assert pools.config_hash(cfg) == pools.config_hash(cfg.replace(pools=(0, 3)))


@pytest.mark.slow
def test_the_experiments_quick_run_has_its_shape(quick_results):
    """The session's quick run of the experiment (the one the slow checks read)."""
    cfg = quick_results.experiment("groupsize_budget")[0]
    assert cfg.budget and cfg.bandit_N == (16, 128) and cfg.pools == (0, 8)
    assert cfg.envs == ("bandit", "arithmetic") and cfg.arithmetic_N == (128,)
    out = quick_results.tables("groupsize_budget")
    assert len(out["results"]) == len(groupsize.row_ids(cfg)) == (4 + 7 + 4 + 4) + (7 + 4)
    assert len(out["summary"]) == 6


# ---------------------------------------------------------------- ledger statistics


def summary(rows) -> pd.DataFrame:
    """A synthetic budget summary: (pool, N, best_G, tied, extra columns)."""
    out = []
    for pool, N, best, tied, extra in rows:
        divisors = theory.divisors(N)
        out.append(
            {
                "env": "bandit",
                "pool": pool,
                "N": N,
                "best_G": best,
                "tied_G": ",".join(map(str, tied)),
                "tie_share": len(tied) / len(divisors),
                "best_reached": 1.0,
                "rule_G": best,
                "rule_in_ties": True,
                **extra,
            }
        )
    return pd.DataFrame(out)


def verdict(claim_id: str, tables: dict) -> str:
    values = claims.STATISTICS[LEDGER[claim_id]["statistic"]](tables)
    values.pop("detail")
    return claims.verdict(LEDGER[claim_id], values, values.pop("se"))


def results(n_seeds=256):
    return pd.DataFrame({"n_seeds": [n_seeds]})


def test_universality_passes_fails_and_its_controls_catch_flat_and_censored_curves():
    same = summary([(0, 16, 4, [4, 8], {}), (0, 64, 4, [2, 4], {})])
    assert verdict("U4-train", {"summary": same, "results": results()}) == "reproduced"
    moved = summary([(0, 16, 4, [4], {}), (0, 64, 16, [16], {})])
    assert verdict("U4-train", {"summary": moved, "results": results()}) == "partly"
    flat = summary([(0, 16, 4, [2, 4, 8, 16], {}), (0, 64, 4, [2, 4, 8, 16, 32, 64], {})])
    assert verdict("U4-train", {"summary": flat, "results": results()}) == "partly"  # control
    censored = same.assign(best_reached=[1.0, 0.0])
    assert verdict("U4-train", {"summary": censored, "results": results()}) == "partly"
    near = same.assign(best_reached=[1.0, 0.52])  # within one SE of 0.5 at 256 seeds
    assert verdict("U4-train", {"summary": near, "results": results()}) == "inconclusive"
    pools_only = {"summary": same.assign(pool=8), "results": results()}
    assert verdict("U4-train", pools_only) == "inconclusive"  # NaN: never a pass


def _rise(pool, N, c8, t1, c2):
    """A setting whose best G by J is c8 at total/8 and t1[0] at total (ties t1), t1 at total/2
    tied with c2."""
    return (
        pool,
        N,
        t1[0],
        t1,
        {
            "best_G_value_c8": c8,
            "best_G_value_c4": c8,
            "best_G_value_c2": c2[0],
            "best_G_value_c1": t1[0],
            "tied_G_value_c1": ",".join(map(str, t1)),
            "tied_G_value_c2": ",".join(map(str, c2)),
        },
    )


def test_compute_rise_passes_fails_and_its_control_catches_moves_both_ways():
    up = summary([_rise(0, 16, 4, [16], [8, 16]), _rise(8, 64, 8, [32, 64], [32])] * 3)
    assert verdict("I1", {"summary": up}) == "reproduced"
    keeps_rising = summary([_rise(0, 16, 4, [16], [8])] * 6)  # no levelling in the last doubling
    assert verdict("I1", {"summary": keeps_rising}) == "partly"
    still = summary([_rise(0, 16, 4, [4, 8], [4])] * 6)  # a move inside the ties is no rise
    assert verdict("I1", {"summary": still}) == "partly"  # no rise; only the control holds
    both = summary([_rise(0, 16, 4, [16], [16])] * 5 + [_rise(0, 64, 16, [4], [4])])
    assert verdict("I1", {"summary": both}) == "partly"  # the control: one clear fall
    few = summary([_rise(0, 16, 4, [16], [16]), _rise(0, 64, 4, [4], [4])] * 1)
    assert verdict("I1", {"summary": few}) == "inconclusive"  # 1 of 2: within one SE of 0.5


def _pair_rows(j2, j16, se=0.002, j0=0.2):
    rows = []
    for pool, B in itertools.product((0, 8), (8,)):
        rows.append({"pool": pool, "N": 2 * B, "G": 2, "value_c8": j2, "value_c8_se": se})
        rows.append({"pool": pool, "N": 16 * B, "G": 16, "pass1": j16, "pass1_se": se, "j0": j0})
        rows.append({"pool": pool, "N": 16 * B, "G": 2, "pass1": j16, "pass1_se": se, "j0": j0})
    return pd.DataFrame(rows).assign(env="bandit")


def test_two_rollouts_ratio_and_its_control():
    assert verdict("W1", {"results": _pair_rows(0.59, 0.60)}) == "reproduced"
    assert verdict("W1", {"results": _pair_rows(0.50, 0.60)}) == "partly"
    assert verdict("W1", {"results": _pair_rows(0.584, 0.60)}) == "inconclusive"  # 0.973 ± 0.005
    untrained = _pair_rows(0.2005, 0.2001, j0=0.2)  # nothing trained: ratio ≈ 1 means nothing
    assert verdict("W1", {"results": untrained}) == "partly"
    no_pair = _pair_rows(0.59, 0.60).query("G == 2")
    assert verdict("W1", {"results": no_pair}) == "inconclusive"


def test_pool_shift_needs_a_rise_at_a_finite_pool_and_none_without_one():
    shift = summary(
        [(0, 16, 4, [4], {}), (0, 256, 4, [4, 8], {}), (8, 16, 4, [4], {}), (8, 256, 32, [32], {})]
    )
    assert verdict("gpolab-pool-train", {"summary": shift}) == "reproduced"
    both = shift.assign(best_G=[4, 32, 4, 32], tied_G=["4", "32", "4", "32"])
    assert verdict("gpolab-pool-train", {"summary": both}) == "partly"  # the control fails
    tied = shift.assign(tied_G=["4", "4,8", "4", "4,8,16,32"])  # the rise is inside the ties
    assert verdict("gpolab-pool-train", {"summary": tied}) == "partly"


def test_rule_match_and_its_control():
    s = summary([(0, 16, 4, [4], {}), (0, 64, 8, [8, 16], {})] * 4)
    assert verdict("gpolab-budget-rule", {"summary": s}) == "reproduced"
    wrong = s.assign(rule_in_ties=False)
    assert verdict("gpolab-budget-rule", {"summary": wrong}) == "partly"  # the control holds
    flat = s.assign(tie_share=1.0)
    assert verdict("gpolab-budget-rule", {"summary": flat}) == "partly"
    half = s.assign(rule_in_ties=[True, False] * 4)  # 4 of 8: at the threshold, within one SE
    assert verdict("gpolab-budget-rule", {"summary": half}) == "inconclusive"
    assert math.isfinite(claims.STATISTICS["budget_rule"]({"summary": s})["se"]["rule_match_frac"])


def test_the_budget_statistics_read_each_env_on_its_own():
    """Universality asks one shared G per env (the envs' G* differ); the pool shift compares N
    within one env."""
    two = pd.concat(
        [
            summary([(0, 16, 4, [4], {}), (0, 64, 4, [4, 8], {})]),
            summary([(0, 16, 2, [2], {}), (0, 64, 2, [2], {})]).assign(env="arithmetic"),
        ]
    ).reset_index(drop=True)
    assert verdict("U4-train", {"summary": two, "results": results()}) == "reproduced"
    one_moves = two.assign(best_G=[4, 4, 2, 8], tied_G=["4", "4,8", "2", "8"])
    assert verdict("U4-train", {"summary": one_moves, "results": results()}) == "partly"
    mixed = pd.concat(
        [
            summary([(0, 16, 4, [4], {}), (0, 256, 4, [4], {})]),
            summary([(8, 16, 2, [2], {}), (8, 256, 32, [32], {})]).assign(env="arithmetic"),
        ]
    ).reset_index(drop=True)
    assert verdict("gpolab-pool-train", {"summary": mixed}) == "reproduced"
    across = mixed.assign(env=["bandit", "arithmetic", "bandit", "arithmetic"])
    assert (
        claims.STATISTICS["budget_pool_shift"]({"summary": across})["rises"] == 0
    )  # never across envs


@pytest.mark.parametrize(
    "argv, start",
    [
        (["--budget", "--pools", "0,2000000"], "pools: got 2000000; allowed: at most 1,048,576"),
        (["--budget", "--env", "bandit", "--bandit-total", "100"], "bandit_total: got 100 for"),
        (["--budget", "--target", "2"], "target: got 2"),
        (["--budget", "--pass-k", "0"], "pass_k: got 0"),
        (["--train", "--pools", "0,8"], "--pools: not used with train = True, budget = False"),
    ],
)
def test_bad_budget_flags_are_one_line_before_any_run(argv, start, tmp_path, capsys, monkeypatch):
    from gpolab import engine
    from gpolab.runner.cli import main

    monkeypatch.setattr(engine, "per_seed", lambda *a, **k: pytest.fail("computed"))
    out = tmp_path / "o"
    assert main(["groupsize", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"gpolab groupsize: error: {start}"), err
    assert not out.exists()
