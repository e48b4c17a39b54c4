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
    assert main(["bench", "--quick", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) >= 5 and all(KEYS <= set(r) for r in rows)
    w1 = rows[0]
    assert w1["numpy_agrees"] is True
    assert w1["speedup_vs_numpy"] == w1["seeds_per_s"] / w1["numpy_seeds_per_s"]
    assert 0 < w1["rng_bound_fraction"] and w1["peak_rss_mb"] > 0
