"""The numpy reference agrees with the engine; `gpolab bench --quick` runs end to end."""

import argparse
import json

import jax
import numpy as np
import pytest

from gpolab import bench, engine
from gpolab.bench import numba_ref, numpy_ref
from gpolab.envs import bandit
from gpolab.kernels import grouped
from gpolab.runner.cli import main
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
    np_mse, np_se = numpy_ref.w1_mse(7, bench.w1_reference(params, truth, G), n)
    m = engine.run(
        grouped.bandit_error,
        grouped.BanditCell(("loo",), G),
        (params, truth, bandit.outcome_tables(params), 1e-4),
        jax.random.key(7),
        n,
    )
    s = engine.error_stats(m, "loo/err", "loo/sq")
    assert abs(np_mse - s.mse) < 4 * np.hypot(np_se, s.mse_se)
    assert abs(np_mse - theory.mse(truth, "loo", G)) < 4 * np_se


@pytest.mark.slow
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
    stages = [r for r in rows if r["workload"].startswith("W1 profile: + ")]
    assert [r["workload"][len("W1 profile: + ") :] for r in stages] == list(bench.W1_STAGES)
    assert all(r["chunk"] == w1["chunk"] and r["n_seeds"] == 20_000 for r in stages)
    np.testing.assert_allclose(sum(r["stage_share"] for r in stages), 1.0)  # telescoping cuts
    np.testing.assert_allclose(sum(r["stage_us"] for r in stages), 1e6 / stages[-1]["seeds_per_s"])
    static, trained = [r for r in rows if r["workload"].startswith("allocate")]
    assert static["n_seeds"] == 256 and static["compile_s"] > 0  # the lab's quick seeds
    assert trained["n_seeds"] == 5 * 60 and trained["seeds_per_s"] > 0
    (off,) = [r for r in rows if r["workload"].startswith("offpolicy")]
    np.testing.assert_allclose(off["updates_per_s"], off["seeds_per_s"] * 8 * 4, rtol=1e-6)
    assert off["vs_one_eta_at_a_time"] > 0
    (mm,) = [r for r in rows if r["workload"].startswith("mismatch kernel")]
    assert mm["n_seeds"] == 256 and mm["seeds_per_s"] > 0 and mm["dp_vs_enumeration"] > 0
    (loop,) = [r for r in rows if r["workload"].startswith("async loop")]
    assert loop["n_seeds"] == 64 and loop["value_gradient_vs_autodiff"] > 0
    np.testing.assert_allclose(loop["updates_per_s"], loop["seeds_per_s"] * 16, rtol=1e-6)
    peers = [r for r in rows if "numba" in r["workload"]]
    if numba_ref.missing() is not None:
        assert peers == [] and "numba_seeds_per_s" not in w1
        return
    assert rows[1:3] == peers and [p["workload"] for p in peers] == list(
        bench.NUMBA_NAMES.values()
    )  # right after W1: the alias peer, then the binary-search one, ratios from the same run
    for peer in peers:
        assert peer["n_seeds"] == 10_000 and peer["agrees_with_W1"] is True
        np.testing.assert_allclose(peer["gpolab_speedup"], w1["seeds_per_s"] / peer["seeds_per_s"])
        assert abs(peer["mse"] - exact) < 4 * peer["mse_se"]


@pytest.mark.parametrize("draw", numba_ref.DRAWS)
def test_numba_peer_matches_exact_mse_whatever_the_thread_count(draw):
    """The numba kernel's loo MSE, by either draw, against the exact finite-G MSE (6 × 10 bandit,
    G = 5) within 4 SE; per-seed streams make its errors identical on 1 thread and on all."""
    numba = pytest.importorskip("numba")
    params = bandit.make(1, prompts=6, actions=10)
    truth = bandit.exact(params)
    ref = bench.w1_reference(params, truth, 5)
    mse, se = numba_ref.w1_mse(7, ref, 30_000, draw=draw)
    assert abs(mse - theory.mse(truth, "loo", 5)) < 4 * se
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = numba_ref.w1_errors(7, ref, 1_000, draw)
    finally:
        numba.set_num_threads(threads)
    np.testing.assert_array_equal(one, numba_ref.w1_errors(7, ref, 1_000, draw))
    assert not np.array_equal(one, numba_ref.w1_errors(8, ref, 1_000, draw))  # seeds differ


def test_without_numba_no_peer_row_and_one_note_line(monkeypatch, capsys):
    """numba absent: W1 carries no numba fields, run_bench adds no row, and `gpolab bench`
    prints one note line (table) or one stderr line (--json)."""
    monkeypatch.setattr(numba_ref, "missing", lambda: "numba is not installed (test)")
    params = bandit.make(1, prompts=4, actions=6)
    ref = bench.w1_reference(params, bandit.exact(params), 4)
    cfg = bench.BenchConfig(numpy_seeds=200, numba_seeds=200)
    best = bench._in_turn(cfg, lambda: np.zeros(()), ref)
    assert set(best) == {"engine_s", "numpy_s", "numpy"}
    row = {"workload": "W1 tabular 16x64 G=16 loo", "seeds_per_s": 2.0, "numpy_seeds_per_s": 1.0}
    row |= {"speedup_vs_numpy": 2.0, "rng_seeds_per_s": 4.0, "rng_bound_fraction": 0.5}
    row |= {"numpy_agrees": True, "compile_s": 0.1, "peak_rss_mb": 1.0}
    assert bench.numba_rows(row) == []
    sweep = {"workload": "default sweep", "seeds_per_s": 1.0, "compile_share": 0.5}
    sweep |= {"cold_s": 2.0, "rerun_s": 1.5, "warm_s": 1.0, "rerun_compile_share": 0.3}
    monkeypatch.setattr(bench, "run_bench", lambda cfg, on_row=None: [row, sweep])
    monkeypatch.setattr(bench, "machine", lambda info=None: "test machine")
    from gpolab.runner.commands import bench as command

    args = argparse.Namespace(
        quick=True, chunk=0, seeds=None, json=False, ledger=None, baseline=None
    )
    assert command.run(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if "numba" in line] == [
        "note: no numba peer row: numba is not installed (test)"
    ]
    assert command.run(argparse.Namespace(**{**vars(args), "json": True})) == 0
    got = capsys.readouterr()
    assert "numba" not in got.out
    assert got.err.splitlines()[-1] == "note: no numba peer row: numba is not installed (test)"
