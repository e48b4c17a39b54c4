"""The numpy reference agrees with the engine; `gpolab bench --quick` runs end to end."""

import json

import jax
import numpy as np

from gpolab import cells, engine
from gpolab.bench import numpy_ref
from gpolab.cli import main
from gpolab.envs import bandit
from gpolab.theory import mse as theory

KEYS = {
    "workload",
    "seeds_per_s",
    "numpy_seeds_per_s",
    "speedup_vs_numpy",
    "rng_bound_fraction",
    "compile_s",
    "peak_rss_mb",
}


def test_numpy_reference_matches_engine_and_theory():
    params = bandit.make(1, prompts=6, actions=10)
    truth = bandit.exact(params)
    G, n = 5, 30_000
    f64 = lambda x: np.asarray(x, np.float64)  # noqa: E731
    np_mse, np_se = numpy_ref.w1_mse(
        7,
        f64(bandit.policy(params)),
        f64(params.success),
        f64(truth.g_local),
        f64(truth.prompt_probs),
        G,
        n,
    )
    m = engine.run(
        cells.bandit_error,
        cells.BanditCell(("loo",), G),
        (params, truth, 1e-4),
        jax.random.key(7),
        n,
    )
    s = engine.error_stats(m, "loo/err", "loo/sq")
    assert abs(np_mse - s.mse) < 4 * np.hypot(np_se, s.mse_se)
    assert abs(np_mse - theory.mse(truth, "loo", G)) < 4 * np_se


def test_bench_quick_end_to_end(capsys):
    """W1's reported MSE (engine) and numpy MSE against the exact finite-G MSE of loo on the same
    bandit (16 × 64, G = 16) within 4 of their standard errors; the ratios against the rates the
    row reports separately; every workload ran its seeds."""
    assert main(["bench", "--quick", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) >= 5 and all(KEYS <= set(r) for r in rows)
    w1 = rows[0]
    assert w1["workload"] == "W1 tabular 16x64 G=16 loo" and w1["n_seeds"] == 20_000
    params = bandit.make(0, prompts=16, actions=64)
    exact = theory.mse(bandit.exact(params), "loo", 16)
    assert abs(w1["mse"] - exact) < 4 * w1["mse_se"], (w1["mse"], w1["mse_se"], exact)
    # numpy's 4,000 seeds: the same statistic, so its SE is the engine's scaled by √(20000/4000)
    assert abs(w1["numpy_mse"] - exact) < 4 * w1["mse_se"] * np.sqrt(20_000 / 4_000)
    assert w1["numpy_agrees"] is True
    np.testing.assert_allclose(w1["speedup_vs_numpy"], w1["seeds_per_s"] / w1["numpy_seeds_per_s"])
    np.testing.assert_allclose(w1["rng_bound_fraction"], w1["seeds_per_s"] / w1["rng_seeds_per_s"])
    assert w1["peak_rss_mb"] > 0
    for r in rows:
        if "n_seeds" in r and r.get("seeds_per_s"):
            assert r["seeds_per_s"] > 0 and r["n_seeds"] >= 1
