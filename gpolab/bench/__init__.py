"""``gpolab bench``: throughput of the engine, as ratios measured in one run.

Workloads (all through the real engine, :func:`gpolab.engine.run`):
* ``W1``: tabular softmax bandit, 16 prompts × 64 actions, G = 16, loo, squared error per seed
  against the exact gradient; compared with the numpy reference (:mod:`gpolab.bench.numpy_ref`,
  same statistic, checked equal within standard error) and with the PRNG bound (a per-seed
  function that only draws the same uniforms and sums them).  W1 and numpy are each the fastest
  of :data:`REPEATS` timings, the bound the fastest of :data:`RNG_CHUNKS`
  on all devices or one.  When numba is installed (``gpolab[bench]``), a numba peer of W1
  (:mod:`gpolab.bench.numba_ref`: ``prange`` over seeds, the same alias draw, the same
  statistic) is timed in the same turns, its MSE checked equal to W1's within standard error,
  and reported as a row of its own with ``gpolab_speedup`` = W1's seeds/s over its seeds/s.
* ``loglinear``: log-linear bandit (d = 8), G = 16, five estimators on common draws.
* ``tree``: Beta(2, 3) thoughts, K = 8, M = 8, thought-std advantages.
* ``arithmetic``: the GRU LLM surrogate (instruct policy, 64 filler tokens), G = 16, 8 questions
  per seed, five estimators (one forward pass and five backward passes per group).
* ``offpolicy``: ``gpolab offpolicy``'s per-seed function (token ratio, the default bandit,
  m = 8 minibatch updates, 4 step sizes vmapped): seeds/s, updates/s and the ratio to the same
  work one step size per call.
* ``mismatch kernel``: the rollout–training mismatch kernel on the Markov env at T = 256, the
  DP's exact gradient against enumeration at T = 8 and its time at T and 4T.
* ``async loop``: the asynchronous-RL kernel on the Markov env at T = 256 (verl's decoupled
  token IS, m = 4 updates at staleness 0 and 2, 2 step sizes): seeds/s, updates/s and the exact
  gradient by autodiff over the same by ``markov.value_gradient``.
* ``W1 profile``: W1's per-seed function cut after each step (uniforms, alias draw, loo
  weights, scatter-add of the scores, error and sums), each cut timed at W1's chunk: where the
  time goes on this machine (``stage_us``, ``stage_share``).
* ``allocate``: ``gpolab allocate``'s numpy Monte Carlo: one budget of its static results (every
  rule on common draws) and the training runs of gpolab-sample.
* ``train``: SGD on the log-linear bandit of theory §7 (32 prompts × 256 responses), grpo,
  G = 8, 200 steps, 4 step sizes × 64 seeds in one jit; one "seed" here is one training run.
* ``W1-scaling-*``: W1 at growing seed counts (linear scaling, one compilation).
* ``W1-G64-rss``: W1 at G = 64 for 10⁶ seeds in a fresh process: peak resident memory.
* ``default sweep``: ``gpolab sweep``'s default in a fresh process, cold, re-run from the
  persistent XLA cache, and warm: the share of compile time in the first two.

``compile_s`` is the first one-call run of the workload minus the same run again (the
compilation of the executable that then runs, sharded as it runs), plus the chunk probe of
:func:`gpolab.engine.auto_chunk` where the chunk is automatic; ``chunk`` is the seeds per
compiled chunk it ran with.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import jaxlib
import numpy as np

from gpolab import engine, envs
from gpolab.engine import train
from gpolab.envs import arithmetic as arithmetic_env
from gpolab.envs import bandit, markov
from gpolab.envs import loglinear as loglinear_env
from gpolab.envs import tree as tree_env
from gpolab.estimators import asynchronous as async_corrections
from gpolab.kernels import async_rl as async_kernel
from gpolab.kernels import grouped
from gpolab.kernels import offpolicy as offpolicy_kernel
from gpolab.kernels import rollout_mismatch as mismatch_kernel
from gpolab.kernels import tree as tree_kernel
from gpolab.labs.allocate import lab as allocate_lab
from gpolab.labs.offpolicy import lab as offpolicy_lab
from gpolab.theory import allocation

RNG_CHUNKS = (1024, 4096, 8192)  # chunks the PRNG bound is timed at (the fastest counts)
REPEATS = 3  # W1 and its numpy reference, timed in turn: the fastest of 3 each (shared CPUs vary)
FIVE = ("vanilla", "oracle", "loo", "mean", "grpo")  # the sweep's default estimators


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    quick: bool = False
    seeds: int = 400_000  # per throughput measurement (quick: 20,000)
    numpy_seeds: int = 40_000  # numpy reference (quick: 4,000)
    numba_seeds: int = 100_000  # numba peer, when installed (quick: 10,000)
    chunk: int = 0  # 0: the engine's auto_chunk (each row reports its chunk)
    seed: int = 0


def peak_rss_mb() -> float:
    """Peak resident memory of this process image (VmHWM; ru_maxrss survives exec on Linux)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _timed(f):
    """(seconds, result) of one call of ``f`` (its arrays ready)."""
    start = time.perf_counter()
    out = jax.block_until_ready(f())
    return time.perf_counter() - start, out


def _timed_run(fn, cell, args, key, n, chunk, one_device=False):
    """(seconds, compile seconds, Moments, chunk) of a steady-state run: compiled, then timed;
    on every device of the process (the engine's default) or on one.  Compile seconds = the
    chunk probe + the first one-call run − the same run again (the executable that then runs)."""
    mesh = None if one_device else engine.local_mesh()
    start = time.perf_counter()
    chunk = chunk or engine.auto_chunk(fn, cell, key, args, mesh)
    once = lambda: engine.run(fn, cell, args, key, chunk, chunk, mesh=mesh)  # noqa: E731
    _timed(once)  # compiles
    compile_s = time.perf_counter() - start - _timed(once)[0]
    seconds, m = _timed(lambda: engine.run(fn, cell, args, key, n, chunk, mesh=mesh))
    return seconds, compile_s, m, chunk


def _uniforms_cell(cell, key, args):
    """PRNG bound: draw the workload's uniforms for one seed and nothing else."""
    return {"s": jnp.sum(jax.random.uniform(key, cell[1]))}


def _row(workload, n, seconds, compile_s, **extra):
    return {
        "workload": workload,
        "n_seeds": n,
        "chunk": None,
        "seeds_per_s": n / seconds,
        "compile_s": compile_s,
        "peak_rss_mb": peak_rss_mb(),
        **extra,
    }


def _w1_inputs(cfg: BenchConfig, G: int = 16) -> tuple:
    """W1's (args, key, cell): the 16 × 64 tabular bandit, loo at G, ‖e‖² per seed only (the
    numpy reference's statistic)."""
    params = bandit.make(bandit.Instance(prompts=16, actions=64))
    args = (params, bandit.exact(params), bandit.outcome_tables(params), np.float32(1e-4))
    return args, jax.random.key(cfg.seed), grouped.BanditCell(("loo",), G=G, mean_error=False)


def w1(cfg: BenchConfig, G: int = 16, n: int | None = None, numpy: bool = True) -> dict:
    n = n or cfg.seeds
    args, key, cell = _w1_inputs(cfg, G)
    params, truth, *_ = args
    seconds, compile_s, m, chunk = _timed_run(grouped.bandit_error, cell, args, key, n, cfg.chunk)
    stats = engine.error_stats(m, "loo/err", "loo/sq")
    row = _row(
        f"W1 tabular 16x64 G={G} loo",
        n,
        seconds,
        compile_s,
        chunk=chunk,
        mse=stats.mse,
        mse_se=stats.mse_se,
    )
    if not numpy:
        return row
    rng_cell = ("uniforms", (16, G))  # one uniform per response
    # the bound at its fastest chunk and device layout (all devices or one), so the fraction is
    # never flattered by a slow denominator
    rng_s = min(
        _timed_run(_uniforms_cell, rng_cell, None, key, n, c, one)[0]
        for c in RNG_CHUNKS
        for one in (False, True)
    )
    ref = w1_reference(params, truth, G)
    again = lambda: engine.run(grouped.bandit_error, cell, args, key, n, chunk)  # noqa: E731
    best = _in_turn(cfg, again, ref)
    seconds = min(seconds, best.pop("engine_s"))
    np_rate = cfg.numpy_seeds / best.pop("numpy_s")
    np_mse, np_se = best.pop("numpy")
    row.update(
        seeds_per_s=n / seconds,
        numpy_seeds_per_s=np_rate,
        speedup_vs_numpy=n / seconds / np_rate,
        rng_seeds_per_s=n / rng_s,
        rng_bound_fraction=rng_s / seconds,
        numpy_mse=np_mse,
        numpy_agrees=_agree(np_mse, np_se, stats.mse, stats.mse_se),
    )
    if "numba_s" in best:
        row.update(_numba_columns(cfg, best, n / seconds, stats))
    return row


PROFILE = "W1 profile: + "  # the profile rows' workload: PROFILE + the step
W1_STAGES = (
    "uniforms",
    "alias draw",
    "loo weights",
    "scatter-add scores",
    "error and sums",
)  # W1's per-seed function, cut after each step (the last: all)


def _w1_prefix(cell, key, args):
    """W1's per-seed function cut after the step ``cell[0]`` (``cell = (stage, BanditCell)``):
    the calls :func:`gpolab.kernels.grouped.bandit_error` makes up to there, their outputs
    summed into one scalar so that nothing is left out of the program; the last stage is
    ``bandit_error`` itself."""
    stage, bc = cell
    if stage == W1_STAGES[-1]:
        return grouped.bandit_error(bc, key, args)
    params, truth, tables, eps = args
    prompts = jnp.arange(params.num_prompts, dtype=jnp.int32)
    dtype = params.success.dtype
    if stage == W1_STAGES[0]:  # the PRNG bound's function, at W1's chunk
        return _uniforms_cell(("uniforms", (params.num_prompts, bc.G)), key, None)
    actions, rewards = bandit.sample(key, params, prompts, bc.G, tables)
    if stage == W1_STAGES[1]:
        return {"s": jnp.sum(rewards) + jnp.sum(actions).astype(dtype)}
    inputs = grouped.bandit_inputs(key, params, truth, prompts, actions)
    weights = grouped.cell_weights(bc, rewards, inputs, eps)
    weights = grouped.aggregate(bc, weights, inputs["lengths"])
    if stage == W1_STAGES[2]:
        return {"s": jnp.sum(weights) + jnp.sum(actions).astype(dtype)}
    ghat = jax.vmap(bandit.weighted_scores, in_axes=(None, None, None, 0))(
        params, prompts, actions, weights
    )
    return {"s": jnp.sum(ghat)}


def _w1_inverse_cdf_draw(cell, key, args):
    """W1's first two steps (its uniforms and one categorical draw per response) with the
    two-level inverse CDF (W1's sampler before the alias method) instead: the same law from the
    same uniforms, summed into one scalar as :func:`_w1_prefix`'s cuts."""
    params = args[0]
    prompts = jnp.arange(params.num_prompts, dtype=jnp.int32)
    dtype = params.success.dtype
    actions, rewards = bandit.sample(key, params, prompts, cell)
    return {"s": jnp.sum(rewards) + jnp.sum(actions).astype(dtype)}


def w1_profile(cfg: BenchConfig, chunk: int) -> list[dict]:
    """Where W1's time goes: W1's per-seed function cut after each step (:data:`W1_STAGES`), run
    through the engine at W1's chunk, each cut timed in turn (the fastest of :data:`REPEATS`).
    One row per step: ``seeds_per_s`` of the function up to it, ``stage_us`` = the step's own
    wall time per seed on all devices (the difference of two cuts' times; within the timing
    noise it can come out slightly negative) and ``stage_share`` = that over the whole
    function's time per seed (the shares add up to 1).  The draw's row adds
    ``alias_vs_inverse_cdf``: the same two steps' time with the inverse CDF
    (:func:`_w1_inverse_cdf_draw`) over its cut's (uniforms and alias draw)."""
    args, key, cell = _w1_inputs(cfg)
    mesh, n = engine.local_mesh(), cfg.seeds
    runs = {
        s: (lambda s=s: engine.run(_w1_prefix, (s, cell), args, key, n, chunk, mesh=mesh))
        for s in W1_STAGES
    }
    runs["inverse"] = lambda: engine.run(
        _w1_inverse_cdf_draw, cell.G, args[:1], key, n, chunk, mesh=mesh
    )
    for f in runs.values():
        _timed(f)  # compiles
    best = dict.fromkeys(runs, math.inf)
    for _ in range(REPEATS):
        for s, f in runs.items():
            best[s] = min(best[s], _timed(f)[0])
    total, before, rows = best[W1_STAGES[-1]], 0.0, []
    for s in W1_STAGES:
        rows.append(
            {
                **_row(PROFILE + s, n, best[s], None, chunk=chunk),
                "stage_us": 1e6 * (best[s] - before) / n,
                "stage_share": (best[s] - before) / total,
            }
        )
        before = best[s]
    # W1's uniforms and alias draw (O(1) per draw) against the same law by the inverse CDF
    rows[1]["alias_vs_inverse_cdf"] = best["inverse"] / best[W1_STAGES[1]]
    return rows


# the numba peers' column prefixes in W1's row: the alias draw (the engine's sampler) and the
# binary-search inverse CDF (the peer before issue 44, kept so the two ratios meet in one run)
NUMBA = {"alias": "numba", "binary": "numba_binary"}
NUMBA_NAMES = {
    "alias": "W1 numba peer (prange over seeds, alias draw)",
    "binary": "W1 numba peer (prange over seeds, binary-search inverse CDF)",
}


def _numba_columns(cfg: BenchConfig, best: dict, rate: float, stats) -> dict:
    """W1's numba peers' columns (rate, MSE and agreement with the engine's), one prefix per
    draw of :data:`NUMBA`."""
    out = {}
    for p in NUMBA.values():
        nb_rate = cfg.numba_seeds / best[f"{p}_s"]
        nb_mse, nb_se = best[p]
        out.update(
            {
                f"{p}_n_seeds": cfg.numba_seeds,
                f"{p}_seeds_per_s": nb_rate,
                f"speedup_vs_{p}": rate / nb_rate,
                f"{p}_mse": nb_mse,
                f"{p}_mse_se": nb_se,
                f"{p}_compile_s": best[f"{p}_compile_s"],
                f"{p}_agrees": _agree(nb_mse, nb_se, stats.mse, stats.mse_se),
            }
        )
    return out


def _agree(mse, se, mse2, se2) -> bool:
    """Two independent MSE estimates equal within 4 standard errors of their difference."""
    return bool(abs(mse - mse2) < 4 * np.hypot(se, se2))


def w1_reference(params, truth, G: int):
    """The bandit ``params`` with its exact ``truth`` and group size ``G`` as the references'
    :class:`gpolab.bench.numpy_ref.W1` (float64 numpy)."""
    from gpolab.bench import numpy_ref

    f64 = lambda x: np.asarray(x, np.float64)  # noqa: E731
    pi, success = f64(bandit.policy(params)), f64(params.success)
    return numpy_ref.W1(pi, success, f64(truth.g_local), f64(truth.prompt_probs), G)


def _in_turn(cfg: BenchConfig, engine_once, ref) -> dict:
    """The engine (compiled and timed once by the caller), the numpy reference and, when
    installed, the numba peers (:data:`NUMBA`), timed in turn: the fastest of :data:`REPEATS`
    timings each (the engine's first is the caller's), so all meet the same machine.

    Returns ``engine_s``, ``numpy_s``, ``numpy`` = (mse, se) and, with numba, per peer prefix p
    ``p_s``, ``p`` = (mse, se) and ``p_compile_s`` (its first small call minus the same again).
    """
    from gpolab.bench import numba_ref, numpy_ref

    best = {"engine_s": math.inf, "numpy_s": math.inf}
    peers = NUMBA if numba_ref.missing() is None else {}
    for draw, p in peers.items():
        small = lambda d=draw: numba_ref.w1_errors(cfg.seed, ref, 1_000, d)  # noqa: E731
        first = _timed(small)[0]
        best.update({f"{p}_s": math.inf, f"{p}_compile_s": first - _timed(small)[0]})
    for r in range(REPEATS):
        if r:  # the caller timed the engine once already
            best["engine_s"] = min(best["engine_s"], _timed(engine_once)[0])
        t, best["numpy"] = _timed(lambda: numpy_ref.w1_mse(cfg.seed, ref, cfg.numpy_seeds))
        best["numpy_s"] = min(best["numpy_s"], t)
        for draw, p in peers.items():
            t, best[p] = _timed(
                lambda d=draw: numba_ref.w1_mse(cfg.seed, ref, cfg.numba_seeds, draw=d)
            )
            best[f"{p}_s"] = min(best[f"{p}_s"], t)
    return best


def numba_rows(w1_row: dict) -> list[dict]:
    """W1's numba peers as rows of their own (none when numba did not run): seeds/s, the ratio
    to numpy, and ``gpolab_speedup`` = W1's seeds/s over the peer's."""
    if "numba_seeds_per_s" not in w1_row:
        return []
    rows = []
    for draw, p in NUMBA.items():
        rate = w1_row[f"{p}_seeds_per_s"]
        rows.append(
            {
                "workload": NUMBA_NAMES[draw],
                "n_seeds": w1_row[f"{p}_n_seeds"],
                "chunk": None,
                "seeds_per_s": rate,
                "compile_s": w1_row[f"{p}_compile_s"],
                "peak_rss_mb": peak_rss_mb(),
                "numpy_seeds_per_s": w1_row["numpy_seeds_per_s"],
                "speedup_vs_numpy": rate / w1_row["numpy_seeds_per_s"],
                "gpolab_speedup": w1_row[f"speedup_vs_{p}"],
                "mse": w1_row[f"{p}_mse"],
                "mse_se": w1_row[f"{p}_mse_se"],
                "agrees_with_W1": w1_row[f"{p}_agrees"],
            }
        )
    return rows


def loglinear(cfg: BenchConfig) -> dict:
    params = bandit.make(0, prompts=16, actions=64, kind="loglinear", dim=8)
    args = (params, bandit.exact(params), bandit.outcome_tables(params), np.float32(1e-4))
    cell = grouped.BanditCell(FIVE, G=16)
    n = cfg.seeds // 2
    seconds, compile_s, _, chunk = _timed_run(
        grouped.bandit_error, cell, args, jax.random.key(cfg.seed), n, cfg.chunk
    )
    return _row("loglinear 16x64 d=8 G=16, 5 estimators", n, seconds, compile_s, chunk=chunk)


def tree(cfg: BenchConfig) -> dict:
    params = tree_env.make_beta(2.0, 3.0)
    args = (params, tree_env.exact(params), np.float32(1e-4))
    n = cfg.seeds // 2
    seconds, compile_s, _, chunk = _timed_run(
        tree_kernel.tree_error,
        tree_kernel.TreeCell(8, 8),
        args,
        jax.random.key(cfg.seed),
        n,
        cfg.chunk,
    )
    return _row("tree Beta(2,3) K=8 M=8", n, seconds, compile_s, chunk=chunk)


def arithmetic(cfg: BenchConfig) -> dict:
    instance = arithmetic_env.Instance(policy=("instruct",))
    a = arithmetic_env.make(instance)["instruct"]
    args = (a.policy, jax.jit(arithmetic_env.exact)(a), a.questions, np.float32(1e-4))
    cell = grouped.ArithmeticCell(FIVE, G=16, Q=instance.per_seed)
    n = 64 if cfg.quick else 2048
    key, chunk = jax.random.key(cfg.seed), grouped.arithmetic_chunk()
    seconds, compile_s, _, chunk = _timed_run(grouped.arithmetic_error, cell, args, key, n, chunk)
    return _row(
        "arithmetic surrogate G=16, 8 questions/seed, 5 estimators",
        n,
        seconds,
        compile_s,
        chunk=chunk,
    )


def offpolicy(cfg: BenchConfig, etas: int = 4) -> dict:
    """``gpolab offpolicy``'s per-seed function: the token rule on the default bandit (16 × 64,
    every prompt a group of G = 8), m = 8 minibatch updates, ``etas`` step sizes vmapped in one
    executable; ``vs_one_eta_at_a_time`` = the same work run one step size per call over it."""
    cfg_lab = offpolicy_lab.Config(
        ratio=("token",),
        clip=("none",),
        m=(8,),
        staleness=(0,),
        eta=tuple(16.0 * 2.0**i for i in range(etas)),
    )
    unit = {"policy": "", **offpolicy_lab.rule_ids(cfg_lab)[0]}
    n = 256 if cfg.quick else 8192
    key = jax.random.key(cfg.seed)
    cell, args = offpolicy_lab.inputs(cfg_lab, unit)
    all_s, compile_s, _, chunk = _timed_run(offpolicy_kernel.per_seed, cell, args, key, n, 0)
    one_s = sum(
        _timed_run(
            offpolicy_kernel.per_seed,
            cell,
            offpolicy_lab.inputs(cfg_lab, unit, (eta,))[1],
            key,
            n,
            chunk,
        )[0]
        for eta in cfg_lab.eta
    )
    return _row(
        f"offpolicy token bandit 16x64 G=8, m=8, {etas} step sizes",
        n,
        all_s,
        compile_s,
        chunk=chunk,
        updates_per_s=n * 8 * etas / all_s,
        vs_one_eta_at_a_time=one_s / all_s,
    )


def _exact_grad(params, theta):
    return markov.exact(params, theta).g


def mismatch(cfg: BenchConfig, T: int = 256, T_enum: int = 8) -> dict:
    """The rollout–training mismatch kernel (:mod:`gpolab.kernels.rollout_mismatch`) on the Markov
    env at T tokens (8 prompts × 4 responses per seed, ``trl/sequence_mask``, noise 0.05), and
    the env's exact gradient by dynamic programming against enumerating all 4^T_enum responses
    of each of its 8 prompts at T_enum: ``dp_vs_enumeration`` = enumeration's seconds over the
    DP's (both compiled first, the same θ; their gradients agree to 1e-5, checked here); the
    exact gradient's time at T (``exact_grad_ms``) and at 4T over it (``exact_grad_4T_over_T``:
    the DP is O(T²A²), so 16 is its order)."""
    params = markov.make(markov.Instance(length=T))
    theta = markov.init_theta(params)
    mu = markov.behaviour_logits(params, theta, "noise", 0.05)
    args = (params, theta, mu, markov.exact(params, theta).g)
    cell = mismatch_kernel.Cell("trl/sequence_mask", 8, 4)
    n = 256 if cfg.quick else 2048
    key = jax.random.key(cfg.seed)
    seconds, compile_s, _, chunk = _timed_run(mismatch_kernel.per_seed, cell, args, key, n, 0)
    enum_s, dp_s, long_s = _markov_exact_timings(T, T_enum)
    return _row(
        f"mismatch kernel, Markov env T={T}, 8x4 per seed, trl/sequence_mask",
        n,
        seconds,
        compile_s,
        chunk=chunk,
        dp_vs_enumeration=enum_s / dp_s,
        exact_grad_ms=1e3 * long_s[T],
        exact_grad_4T_over_T=long_s[4 * T] / long_s[T],
    )


def _markov_exact_timings(T: int, T_enum: int) -> tuple[float, float, dict]:
    """(enumeration's seconds, the DP's seconds) of the Markov env's exact gradient at T_enum
    (both compiled first, the same θ; their gradients agree to 1e-5, checked here) and the DP's
    seconds at T and 4T (``{length: seconds}``)."""
    small = markov.make(markov.Instance(length=T_enum))
    ys = jnp.array(np.indices((small.vocab,) * T_enum).reshape(T_enum, -1).T, jnp.int32)
    P = small.num_prompts
    every = jnp.broadcast_to(ys, (P, *ys.shape))
    hit = (jnp.sum(ys == 0, -1)[None, :] >= small.k[:, None]).astype(jnp.float32)

    def enumerated(t, every, hit):  # the responses are arguments, not folded constants
        lp = markov.table_logp(small, markov.table(small, t), jnp.arange(P), every)
        return jnp.mean(jnp.sum(jnp.exp(jnp.sum(lp, -1)) * hit, -1))

    t0 = markov.init_theta(small)
    by_enum = jax.jit(jax.grad(enumerated))
    by_dp = jax.jit(lambda t: markov.exact(small, t).g)
    g_enum = by_enum(t0, every, hit).block_until_ready()
    g_dp = by_dp(t0).block_until_ready()
    if not np.allclose(g_enum, g_dp, atol=1e-5):
        raise RuntimeError("markov: the DP gradient differs from enumeration")
    enum_s = min(_timed(lambda: by_enum(t0, every, hit))[0] for _ in range(3))
    dp_s = min(_timed(lambda: by_dp(t0))[0] for _ in range(3))
    long_s = {}  # the DP at T and 4T: O(T²) predicts 16×
    for length in (T, 4 * T):
        p = markov.make(markov.Instance(length=length))
        t_p = markov.init_theta(p)
        grad = jax.jit(functools.partial(_exact_grad, p))
        grad(t_p).block_until_ready()
        long_s[length] = min(_timed(functools.partial(grad, t_p))[0] for _ in range(3))
    return enum_s, dp_s, long_s


def async_loop(cfg: BenchConfig, T: int = 256) -> dict:
    """The asynchronous-RL kernel (:mod:`gpolab.kernels.async_rl`) on the Markov env at T tokens:
    verl's decoupled mode with token IS (``verl/decoupled_token_is``), a noise 0.05 engine, 8
    prompts × 4 responses per minibatch, m = 4 updates at staleness 0 and 2, 2 step sizes
    vmapped (16 updates per seed, each against the exact gradient at its θ); ``updates_per_s``;
    ``value_gradient_vs_autodiff`` = the exact gradient by reverse-mode autodiff through the
    DP (:func:`gpolab.envs.markov.exact`'s) over the same by :func:`~gpolab.envs.markov.
    value_gradient` (the kernel's), seconds over seconds on 64 θ vmapped, both compiled (equal
    to 1e-4 relative, checked here)."""
    params = markov.make(markov.Instance(length=T))
    theta = markov.init_theta(params)
    entry = async_corrections.get("verl/decoupled_token_is")
    cap = markov.count_cap(params)
    cell = async_kernel.Cell(entry.correction, "noise", 4, 8, 4, (0, 2), cap)
    args = async_kernel.inputs(cell, params, theta, [0.5, 1.0], 0.05, *entry.knobs)
    n = 64 if cfg.quick else 512
    key = jax.random.key(cfg.seed)
    seconds, compile_s, _, chunk = _timed_run(async_kernel.per_seed, cell, args, key, n, 0)
    thetas = theta[None] + 0.01 * jax.random.normal(key, (64, *theta.shape), theta.dtype)
    by_autodiff = jax.jit(jax.vmap(jax.grad(functools.partial(markov.expected_return, params))))
    by_recursion = jax.jit(jax.vmap(lambda t: markov.value_gradient(params, t, cap)[1]))
    g_auto, g_rec = by_autodiff(thetas), by_recursion(thetas)
    if not np.allclose(g_auto, g_rec, rtol=0, atol=1e-4 * float(jnp.abs(g_auto).max())):
        raise RuntimeError("markov: value_gradient differs from autodiff")
    auto_s = min(_timed(lambda: by_autodiff(thetas))[0] for _ in range(3))
    rec_s = min(_timed(lambda: by_recursion(thetas))[0] for _ in range(3))
    return _row(
        f"async loop, Markov env T={T}, 8x4 per minibatch, m=4, k in (0, 2), 2 step sizes",
        n,
        seconds,
        compile_s,
        chunk=chunk,
        updates_per_s=n * 16 / seconds,
        value_gradient_vs_autodiff=auto_s / rec_s,
    )


def allocate(cfg: BenchConfig) -> list[dict]:
    """``gpolab allocate``'s Monte Carlo, in numpy (group sizes differ per prompt and per seed,
    and some rules read rewards between rounds): one budget (N = 256) of its static results,
    every rule on common draws (the lab's default instance and rules; ``compile_s`` = the count
    tables of G = 2..cap, jit-compiled once per process), and one training run set of its
    slowest rule (gpolab-sample, which solves its design every step): steps/s over runs × steps."""
    quick = allocate_lab.Config.QUICK
    sizes = {k: quick[k] for k in ("seeds", "runs", "steps")} if cfg.quick else {}
    lab_cfg = allocate_lab.Config(**sizes, seed=cfg.seed)  # the lab's own (quick) sizes
    tables_s, _ = _timed(lambda: allocation.tables(lab_cfg.estimator, lab_cfg.cap))
    static_s, _ = _timed(lambda: allocate_lab.static_rows(lab_cfg, 256))
    train_s, _ = _timed(lambda: allocate_lab.train_rows(lab_cfg, "gpolab-sample"))
    steps = lab_cfg.runs * lab_cfg.steps
    return [
        _row(
            f"allocate static, N=256, {len(lab_cfg.rules)} rules on common draws (numpy)",
            lab_cfg.seeds,
            static_s,
            tables_s,
        ),
        _row(
            f"allocate training, gpolab-sample, {lab_cfg.runs} runs x {lab_cfg.steps} steps "
            "(1 seed = 1 step)",
            steps,
            train_s,
            None,
        ),
    ]


def training(cfg: BenchConfig) -> dict:
    """Seed-runs per second of ``gpolab train``'s compiled loop (jit(vmap lr)(vmap seed)(scan))."""
    params = loglinear_env.make(cfg.seed)
    env, run = envs.get("loglinear"), train.Run("grpo", 8, steps=200)
    lrs, seeds = np.geomspace(1.0, 100.0, 4), 16 if cfg.quick else 64
    key = jax.random.key(cfg.seed)
    times = []
    for _ in range(2):  # compiling, then cached
        start = time.perf_counter()
        train.train(run, env, key, params, lrs, seeds)
        times.append(time.perf_counter() - start)
    n = seeds * len(lrs)
    return _row(
        "loglinear training, grpo G=8, 200 SGD steps (1 seed = 1 run)",
        n,
        times[1],
        times[0] - times[1],
    )


def rss_subprocess(n: int, G: int = 64, chunk: int = 0) -> dict:
    """W1 at group size G for n seeds in a fresh interpreter; its peak RSS is the memory bound."""
    code = (
        "import json, sys; from gpolab.bench import BenchConfig, w1, peak_rss_mb;"
        "from gpolab.engine import devices; devices.use_cpu_cores();"
        f"r = w1(BenchConfig(chunk={chunk}), G={G}, n={n}, numpy=False);"
        "r['peak_rss_mb'] = peak_rss_mb(); print(json.dumps(r))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    row["workload"] = f"W1 G={G}, {n:.0e} seeds, fresh process (peak RSS)"
    return row


SWEEP_TIMES = """
import json, sys, time, jax
from gpolab import engine
from gpolab.engine import devices
from gpolab.labs.sweep.lab import Config, run_sweep
devices.use_cpu_cores()  # as `gpolab sweep` starts
devices.enable_compilation_cache()  # GPOLAB_CACHE_DIR: a fresh, empty directory
cfg = Config(out=sys.argv[1], **({"seeds": int(sys.argv[2])} if sys.argv[2] else {}))
times = []
for clear in (False, True, False):  # cold; from the disk cache; warm
    if clear:
        jax.clear_caches()
        engine.forget_chunks()
    start = time.perf_counter()
    df = run_sweep(cfg)
    times.append(time.perf_counter() - start)
print(json.dumps({"times": times, "rows": len(df), "seeds": cfg.seeds, "G": len(cfg.G)}))
"""


def default_sweep(cfg: BenchConfig) -> dict:
    """The default ``gpolab sweep`` three times in a fresh process, with the CLI's persistent XLA
    cache in an empty directory: cold (compiling), again after dropping every in-memory cache (a
    re-run: executables from the disk cache, still traced and lowered), and warm.

    ``compile_s`` = cold − warm; ``compile_share`` = compile_s / cold; ``rerun_compile_share`` =
    (re-run − warm) / re-run.
    """
    seeds = "2000" if cfg.quick else ""  # "": the sweep's default
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "GPOLAB_CACHE_DIR": os.path.join(tmp, "xla"),
            "GPOLAB_COUNT_CACHE": os.path.join(tmp, "count-tables"),
        }  # cold: no tables either
        out = subprocess.run(
            [sys.executable, "-c", SWEEP_TIMES, os.path.join(tmp, "out"), seeds],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    (cold, rerun, warm), seeds = got["times"], got["seeds"]
    row = _row(
        f"default sweep ({got['rows']} rows, {seeds} seeds), warm",
        seeds * got["G"],
        warm,
        cold - warm,
        compile_share=(cold - warm) / cold,
        cold_s=cold,
        rerun_s=rerun,
        warm_s=warm,
        rerun_compile_share=(rerun - warm) / rerun,
    )
    row["peak_rss_mb"] = None  # the sweep ran in a child process
    return row


def run_bench(cfg: BenchConfig, on_row=None) -> list[dict]:
    jax.config.update("jax_enable_compilation_cache", False)  # compile_s is cold compilation
    if cfg.quick:
        cfg = dataclasses.replace(
            cfg,
            seeds=min(cfg.seeds, 20_000),
            numpy_seeds=min(cfg.numpy_seeds, 4_000),
            numba_seeds=min(cfg.numba_seeds, 10_000),
        )
    rows = []

    def add(row):
        rows.append(row)
        if on_row is not None:
            on_row(row)

    add(w1(cfg))
    for peer in numba_rows(rows[0]):
        add(peer)
    for row in w1_profile(cfg, rows[0]["chunk"]):
        add(row)
    add(loglinear(cfg))
    add(tree(cfg))
    add(arithmetic(cfg))
    add(offpolicy(cfg))
    add(mismatch(cfg))
    add(async_loop(cfg))
    for row in allocate(cfg):
        add(row)
    add(training(cfg))
    for n in (10_000, 100_000) if cfg.quick else (10_000, 100_000, 1_000_000):
        r = w1(cfg, n=n, numpy=False)
        r["workload"] = f"W1 scaling, {n:.0e} seeds"
        r["compile_s"] = None  # same compiled chunk as W1: nothing is compiled again
        add(r)
    add(rss_subprocess(100_000 if cfg.quick else 1_000_000))
    add(default_sweep(cfg))
    return rows


# the CPU features XLA:CPU's code generation can use (vector width, bf16/int8 matrix units)
CPU_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512_bf16",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "sve",
)


def _cpuinfo() -> tuple[str, set]:
    """(model name, feature flags) from /proc/cpuinfo; the platform's name and no flags where
    there is none (macOS)."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        text = open("/proc/cpuinfo").read()  # noqa: SIM115 (one read)
    except OSError:
        return model, flags
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            model = value.strip()
        if key.strip() in ("flags", "Features"):
            flags = set(value.split())
            break
    return model, flags


def machine_info() -> dict:
    """What two bench runs must share to be compared: the CPU model and the features XLA:CPU can
    target, the cores this process may use, the last-level cache, the jax and jaxlib versions,
    the backend and the engine's device layout (devices it shards seeds over; each CPU device
    runs XLA's intra-op thread pool over every core unless ``XLA_FLAGS`` says otherwise), and
    the environment that changes it (``XLA_FLAGS``, ``GPOLAB_CPU_DEVICES``)."""
    model, flags = _cpuinfo()
    dev = jax.devices()[0]
    return {
        "cpu": model,
        "cpu_flags": [f for f in CPU_FLAGS if f in flags],
        "cores": engine.usable_cores(),
        "llc_mib": round(engine.reported_cache_bytes() / 2**20, 1),
        "cache_budget_mib": round(engine.cache_bytes() / 2**20, 1),  # what auto_chunk sizes for
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "backend": dev.platform,
        "devices": jax.local_device_count(),
        "device_kind": dev.device_kind,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "gpolab_cpu_devices": os.environ.get("GPOLAB_CPU_DEVICES", ""),
    }


def machine(info: dict | None = None) -> str:
    """:func:`machine_info` on one line (the bench table's header)."""
    m = info or machine_info()
    flags = " ".join(m["cpu_flags"]) or "no listed vector flags"
    env = "".join(f"; {k}={m[k]}" for k in ("xla_flags", "gpolab_cpu_devices") if m[k])
    return (
        f"{m['cpu']} ({flags}), {m['cores']} cores, last-level cache {m['llc_mib']:g} MiB "
        f"(counted: {m['cache_budget_mib']:g} MiB); "
        f"jax {m['jax']}, jaxlib {m['jaxlib']}; engine: {m['devices']} x {m['device_kind']} "
        f"({m['backend']}) devices{env}"
    )
