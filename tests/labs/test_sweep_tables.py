"""Issue 41, "theory as tables": the sweep's exact columns are one table computed from the config
(and the env's truth) alone, without the engine, joined on the keys with the Monte Carlo rows;
the joined table is the result table."""

from __future__ import annotations

import pandas as pd
import pytest

from gpolab import engine
from gpolab.labs.sweep import lab as sweep
from gpolab.labs.sweep import units

SMALL = dict(seeds=300, prompts=3, actions=4)
CONFIGS = {
    "bandit": dict(estimators=("loo", "grpo", "mean"), G=(2, 4), **SMALL),
    "loss_agg": dict(
        estimators=("grpo", "mean"),
        G=(2, 4),
        lengths="independent",
        loss_agg=("seq-mean-token-sum", "token-mean"),
        B=2,
        **SMALL,
    ),
    "dynamic": dict(estimators=("loo", "grpo"), G=(2, 4), B=2, dynamic_sampling=True, **SMALL),
    "tree": dict(
        env="tree", estimators=("thought-std", "mean-only"), K=(2, 4), M=(1, 2), seeds=300
    ),
}


def _no_engine(*args, **kw):
    raise AssertionError("the theory table ran the engine")


@pytest.mark.parametrize("name", CONFIGS)
def test_theory_table_comes_from_the_config_alone_and_joins_on_the_keys(name, monkeypatch):
    """The env's theory table (one row per key of its grid, built without the engine) holds
    exactly the result table's exact columns, value for value, and the Monte Carlo rows hold
    none of them."""
    cfg = sweep.Config(**CONFIGS[name])
    df = sweep.run_sweep(cfg)
    env = units.ENVS[cfg.env]
    grid = env.grid(cfg)
    assert list(grid.columns) == list(env.KEYS) and len(grid) == len(df)
    monkeypatch.setattr(engine, "run", _no_engine)
    theory = env.theory(cfg, grid, sweep.make_setup(cfg))
    exact = [c for c in theory if c not in env.KEYS]
    assert exact and all(c.startswith("theory") or c == "mean_V" for c in exact)
    pd.testing.assert_frame_equal(theory[list(env.KEYS)], grid)
    ordered = [c for c in df if c in exact]  # the result table's order
    pd.testing.assert_frame_equal(theory[ordered], df[ordered], check_exact=True)


def test_a_run_computes_the_theory_table_once_not_row_by_row(monkeypatch):
    """Several units (one per G) and several rows each: one call of the env's theory, over the
    whole grid."""
    cfg = sweep.Config(**CONFIGS["bandit"])
    env, calls = units.ENVS[cfg.env], []
    original = type(env).theory

    def counted(self, cfg, grid, setup):
        calls.append(len(grid))
        return original(self, cfg, grid, setup)

    monkeypatch.setattr(type(env), "theory", counted)
    df = sweep.run_sweep(cfg)
    assert calls == [len(df)] == [6]
