"""Engine: chunk-size invariance, no retracing on seed count, moments against a known law."""

import chex
import jax
import jax.numpy as jnp
import numpy as np

from gpolab import engine
from gpolab.engine import devices
from gpolab.envs import bandit
from gpolab.kernels import grouped


def setup():
    params = bandit.make(0, prompts=4, actions=8)
    return (params, bandit.exact(params), bandit.outcome_tables(params), np.float32(1e-4))


CELL = grouped.BanditCell(("loo", "grpo"), G=4)


def test_per_seed_draws_are_bitwise_independent_of_batching():
    args = setup()
    key = jax.random.key(0)
    idx = jnp.arange(7000, dtype=jnp.uint32)
    whole = engine.per_seed(grouped.bandit_error, CELL, key, args, idx)
    parts = [
        engine.per_seed(grouped.bandit_error, CELL, key, args, idx[i : i + 1000])
        for i in range(0, 7000, 1000)
    ]
    for name in ("loo", "grpo"):
        joined = np.concatenate([np.asarray(p[name]["err"]) for p in parts])
        np.testing.assert_array_equal(joined, np.asarray(whole[name]["err"]))


def test_results_do_not_depend_on_chunk_size():
    args = setup()
    key = jax.random.key(1)
    a = engine.run(grouped.bandit_error, CELL, args, key, 20_000, chunk=1000)
    b = engine.run(grouped.bandit_error, CELL, args, key, 20_000, chunk=7000)
    assert a.sums.keys() == b.sums.keys() and a.sumsq.keys() == b.sumsq.keys() == {
        "degenerate",
        "loo/sq",
        "grpo/sq",
        *(f"{e}/{k}" for e in ("loo", "grpo") for k in ("cos", "dot", "norm2")),
    }
    for k in a.sums:
        np.testing.assert_allclose(a.sums[k], b.sums[k], rtol=1e-5, atol=1e-7)
    for k in a.sumsq:
        np.testing.assert_allclose(a.sumsq[k], b.sumsq[k], rtol=1e-5, atol=1e-7)
    # and both equal the direct per-seed computation
    direct = engine.per_seed(
        grouped.bandit_error, CELL, key, args, jnp.arange(20_000, dtype=jnp.uint32)
    )
    np.testing.assert_allclose(
        a.mean("loo/sq"), np.mean(np.asarray(direct["loo"]["sq"], np.float64)), rtol=1e-5
    )


def test_no_recompile_when_only_seed_count_changes():
    args = setup()
    key = jax.random.key(2)
    cell = grouped.BanditCell(("loo",), G=6)
    engine.run(grouped.bandit_error, cell, args, key, 100, chunk=512)
    before = engine.TRACES[("bandit_error", cell)]
    for n in (1, 511, 512, 513, 3000):
        engine.run(grouped.bandit_error, cell, args, key, n, chunk=512)
    assert engine.TRACES[("bandit_error", cell)] == before == 1
    # new continuous values (eps, success probabilities) do not retrace either
    params, truth, tables, _ = args
    engine.run(
        grouped.bandit_error, cell, (params, truth, tables, np.float32(1e-8)), key, 100, chunk=512
    )
    assert engine.TRACES[("bandit_error", cell)] == 1


def test_auto_chunk_is_a_memoised_power_of_two_that_does_not_change_results():
    args = setup()
    key = jax.random.key(4)
    cell = grouped.BanditCell(("loo",), G=7)
    chunk = engine.auto_chunk(grouped.bandit_error, cell, key, args)
    assert 8 <= chunk <= 8192 and chunk & (chunk - 1) == 0
    probed = engine.TRACES[("bandit_error", cell)]  # the probe's trace
    a = engine.run(grouped.bandit_error, cell, args, key, 3000)  # chunk=AUTO
    engine.run(grouped.bandit_error, cell, args, key, 2999)
    assert engine.auto_chunk(grouped.bandit_error, cell, key, args) == chunk
    assert engine.TRACES[("bandit_error", cell)] <= probed + 1  # no second probe, one chunk size
    # a run of fewer seeds than the chunk: the power of two at or above its seed count, the same
    # numbers as the full chunk's
    assert engine._placed(grouped.bandit_error, cell, key, args, 0, None, 5)[1] == 8
    assert engine._placed(grouped.bandit_error, cell, key, args, 0, None, 8)[1] == 8
    short = engine.run(grouped.bandit_error, cell, args, key, 5)
    padded = engine.run(grouped.bandit_error, cell, args, key, 5, chunk=chunk)
    for k in short.sums:
        np.testing.assert_allclose(short.sums[k], padded.sums[k], rtol=1e-5, atol=1e-9)
    b = engine.run(grouped.bandit_error, cell, args, key, 3000, chunk=1000)
    for k in a.sums:
        np.testing.assert_allclose(a.sums[k], b.sums[k], rtol=1e-5, atol=1e-9)
    # more temporaries per seed (five estimators, G = 64) never get a larger chunk
    big = grouped.BanditCell(("vanilla", "oracle", "loo", "mean", "grpo"), G=64)
    assert engine.auto_chunk(grouped.bandit_error, big, key, args) <= chunk


def test_auto_chunk_is_kept_next_to_the_persistent_compilation_cache(tmp_path):
    args = setup()
    key = jax.random.key(5)
    cell = grouped.BanditCell(("loo",), G=9)
    old = jax.config.jax_compilation_cache_dir, jax.config.jax_enable_compilation_cache
    jax.config.update("jax_compilation_cache_dir", str(tmp_path))
    jax.config.update("jax_enable_compilation_cache", True)  # `gpolab bench` turns it off
    try:
        chunk = engine.auto_chunk(grouped.bandit_error, cell, key, args)
        assert (tmp_path / "gpolab-auto-chunk.json").exists()
        engine.forget_chunks()  # as in a new process
        probed = engine.TRACES[("bandit_error", cell)]
        assert engine.auto_chunk(grouped.bandit_error, cell, key, args) == chunk
        assert engine.TRACES[("bandit_error", cell)] == probed  # read back, not probed again
    finally:
        jax.config.update("jax_compilation_cache_dir", old[0])
        jax.config.update("jax_enable_compilation_cache", old[1])
        engine.forget_chunks()


def test_a_short_run_skips_the_idle_sub_chunks_of_its_call():
    args = setup()
    key = jax.random.key(6)
    assert engine.sub_chunks(8) == 64 and engine.sub_chunks(8192) == 2
    m = engine.run(grouped.bandit_error, CELL, args, key, 13, chunk=8)  # 2 of 64 sub-chunks
    direct = engine.per_seed(grouped.bandit_error, CELL, key, args, np.arange(13, dtype=np.uint32))
    for name in ("loo", "grpo"):
        sq = np.asarray(direct[name]["sq"], np.float64)
        np.testing.assert_allclose(m.sums[f"{name}/sq"], sq.sum(), rtol=1e-6)
        np.testing.assert_allclose(m.sumsq[f"{name}/sq"], (sq * sq).sum(), rtol=1e-6)


def test_per_seed_function_traces_once_under_chex():
    args = setup()
    counted = chex.assert_max_traces(grouped.bandit_error, n=1)
    fn = jax.jit(jax.vmap(counted, in_axes=(None, 0, None)), static_argnums=0)
    keys = engine.seed_keys(jax.random.key(0), jnp.arange(64, dtype=jnp.uint32))
    fn(CELL, keys, args)
    fn(CELL, keys, args)  # a second call must hit the cache


def gaussian(cell, key, args):
    mu, sd = args
    x = mu + sd * jax.random.normal(key, (3,))
    return {"err": x, "sq": jnp.sum(x**2)}


MU = jnp.array([0.5, -1.0, 0.0])
SD = 2.0


def test_moments_and_error_stats_recover_a_known_law():
    """e ~ N(mu, sd²) iid in 3 coordinates: mse = Σ mu² + 3 sd², variance = 3 sd², bias² = Σ mu²,
    each within 4 of its own standard error (exact here), and the reported SE within 3% of the
    exact one."""
    sd = jnp.float32(SD)
    n = 50_000
    m = engine.run(gaussian, "g", (MU, sd), jax.random.key(3), n, chunk=4096)
    s = engine.error_stats(m)
    mse_true = float(jnp.sum(MU**2) + 3 * sd**2)
    # SE of mean ‖e‖²: Var‖e‖² = Σ_i (2 sd⁴ + 4 mu_i² sd²)
    se = np.sqrt(float(jnp.sum(2 * sd**4 + 4 * MU**2 * sd**2)) / n)
    assert abs(s.mse - mse_true) < 4 * se
    # the SE estimate itself: its relative SE is √((κ − 1)/(4n)) ≈ 0.3% here (κ the kurtosis)
    assert abs(s.mse_se - se) < 0.03 * se
    half = engine.Z95 * s.mse_se
    np.testing.assert_allclose([s.mse_ci_low, s.mse_ci_high], [s.mse - half, s.mse + half])
    # variance: Σ_i sample var, each with SE sd² √(2/(n−1))
    var_se = np.sqrt(3) * float(sd**2) * np.sqrt(2 / (n - 1))
    assert abs(s.variance - 3 * sd**2) < 4 * var_se
    # bias² = mse − variance ≈ ‖ē‖² − tr Cov/n; its SE: Var ‖ē‖² ≈ 4 Σ mu_i² sd²/n
    bias_se = np.sqrt(4 * float(jnp.sum(MU**2)) * float(sd**2) / n)
    assert abs(s.bias_sq - float(jnp.sum(MU**2))) < 4 * bias_se + 4 * float(sd**2) / n


def test_mse_confidence_interval_covers_at_its_nominal_rate():
    """1,000 independent replications of 400 seeds: the 95% CI [mse_ci_low, mse_ci_high] covers
    the exact MSE in 95% ± 4 binomial SE (0.028) of them.  A wrong SE (factor 0.8 or 1.25) or
    z value (1.645) gives coverage 0.89 / 0.99 / 0.90 and fails."""
    reps, n = 1000, 400
    mse_true = float(jnp.sum(MU**2) + 3 * SD**2)
    args = (MU, jnp.float32(SD))
    covered = 0
    for r in range(reps):
        m = engine.run(
            gaussian, "g", args, jax.random.fold_in(jax.random.key(31), r), n, chunk=512, mesh=None
        )
        s = engine.error_stats(m)
        covered += s.mse_ci_low < mse_true < s.mse_ci_high
    rate = covered / reps
    assert abs(rate - 0.95) < 4 * np.sqrt(0.95 * 0.05 / reps), rate


def test_full_precision_matmuls_change_nothing_on_cpu():
    """The CLI asks for full-float32 products (GPU TF32 / TPU bfloat16 otherwise); on CPU the
    log-linear bandit (its truth and estimates are matrix products) stays bitwise the same."""
    params = bandit.make(1, prompts=4, actions=8, kind="loglinear", dim=3)
    cell, key = grouped.BanditCell(("loo", "grpo"), G=4), jax.random.key(7)

    def once():
        truth = bandit.exact(params)
        m = engine.run(
            grouped.bandit_error,
            cell,
            (params, truth, bandit.outcome_tables(params), np.float32(1e-4)),
            key,
            300,
            64,
        )
        return np.asarray(truth.g), m.sums["loo/sq"], m.sums["grpo/err"]

    old = jax.config.jax_default_matmul_precision
    before = once()
    try:
        engine.full_precision()
        assert jax.config.jax_default_matmul_precision == "highest"
        after = once()
    finally:
        jax.config.update("jax_default_matmul_precision", old)
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_counted_cache_is_at_most_16_mib_per_core(monkeypatch):
    """A VM that reports its socket's whole L3 (480 MiB on 2 cores) is counted 32 MiB: the auto
    chunk is sized for the cache a core can use (issue 32); smaller caches are taken as reported."""
    import os

    for reported, cores, counted in (
        (480 << 20, 2, 32 << 20),
        (32 << 20, 2, 32 << 20),
        (8 << 20, 4, 8 << 20),
    ):
        engine.cache_bytes.cache_clear()
        monkeypatch.setattr(devices, "reported_cache_bytes", lambda r=reported: r)
        monkeypatch.setattr(os, "sched_getaffinity", lambda _, c=cores: set(range(c)))
        assert engine.cache_bytes() == counted
    engine.cache_bytes.cache_clear()


def test_a_run_traces_its_kernel_once_and_keeps_the_layout_of_that_trace():
    """The output layout (where each output sits in the packed sums) comes from the trace that
    builds the executable: an explicit chunk (no probe) traces the kernel once per cell, with a
    Python-float argument too.  After :func:`engine.forget_chunks` the executable is still in
    jit's cache, and the layout is read again by one trace of its own; the sums are the same."""
    traced = []

    def fn(cell, key, args):
        traced.append(cell)
        x = jax.random.normal(key, (3,)) * args
        return {"v": x, "s": jnp.sum(x), "inner": {"m": x[:2].reshape(2, 1)}}

    key = jax.random.key(3)
    m = engine.run(fn, 7, 2.0, key, 40, chunk=8, mesh=None)
    assert len(traced) == 1
    engine.forget_chunks()
    again = engine.run(fn, 7, 2.0, key, 40, chunk=8, mesh=None)
    assert len(traced) == 2
    raw = engine.per_seed(fn, 7, key, 2.0, np.arange(40))
    for path, x in (("v", raw["v"]), ("s", raw["s"]), ("inner/m", raw["inner"]["m"])):
        np.testing.assert_allclose(m.sums[path], np.sum(np.asarray(x, np.float64), 0), rtol=1e-5)
        np.testing.assert_array_equal(m.sums[path], again.sums[path])
    assert m.sums["inner/m"].shape == (2, 1)
