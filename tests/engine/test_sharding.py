"""Sharding the seed axis: 8 forced CPU devices, and 2 processes on localhost (jax.distributed).

Both need a fresh interpreter (the device count is fixed at JAX start-up), so they run the CLI or
a small script in subprocesses and compare with the single-device result.
"""

import json
import os
import socket
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

from gpolab.kit.store import PROVENANCE

ENV = {**os.environ, "JAX_PLATFORMS": "cpu"}

EIGHT_DEVICES = textwrap.dedent(
    """
    import json, jax, numpy as np
    jax.config.update("jax_num_cpu_devices", 8)
    from gpolab import engine
    from gpolab.kernels import grouped
    from gpolab.envs import bandit
    assert jax.device_count() == 8
    params = bandit.make(0, prompts=4, actions=8)
    args = (params, bandit.exact(params), bandit.outcome_tables(params), np.float32(1e-4))
    cell = grouped.BanditCell(("loo", "grpo"), G=5)
    key = jax.random.key(3)
    mesh = engine.seed_mesh()
    idx = np.arange(4000, dtype=np.uint32)
    one = engine.per_seed(grouped.bandit_error, cell, key, args, idx)
    many = engine.per_seed(grouped.bandit_error, cell, key, args, idx, mesh=mesh)
    assert len(many["loo"]["sq"].sharding.device_set) == 8
    bitwise = all(
        np.array_equal(np.asarray(one[k]["err"]), np.asarray(many[k]["err"]))
        for k in ("loo", "grpo")
    )
    a = engine.run(grouped.bandit_error, cell, args, key, 10_001, chunk=1000, mesh=None)
    b = engine.run(grouped.bandit_error, cell, args, key, 10_001, chunk=1000, mesh=mesh)
    c = engine.run(grouped.bandit_error, cell, args, key, 10_001, chunk=1000)  # LOCAL: all 8
    local = all(np.array_equal(b.sums[k], c.sums[k]) for k in b.sums)
    # float32 partial sums in another order: rounding ~ n · 6e-8 for per-seed values of order 1
    close = all(np.allclose(a.sums[k], b.sums[k], rtol=1e-5, atol=1e-3) for k in a.sums)
    # each device reduces its own seeds: no collective whose rendezvous could starve on CPU
    i, ok, on = engine.chunk_inputs(0, 10, 1000, 2)
    i, ok = engine._shard(i, mesh), engine._shard(ok, mesh)
    with engine.prng_mode():
        hlo = engine._chunk_moments.lower(grouped.bandit_error, cell, key, args, i, ok, on, 8)
        hlo = hlo.compile().as_text()
    ops = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all")
    got = {"bitwise": bitwise, "close": close, "local": local}
    print(json.dumps({**got, "collectives": sum(map(hlo.count, ops))}))
    """
)


def test_eight_devices_match_one_device():
    out = subprocess.run(
        [sys.executable, "-c", EIGHT_DEVICES], capture_output=True, text=True, env=ENV, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"bitwise": True, "close": True, "local": True, "collectives": 0}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SWEEP = [
    "-m",
    "gpolab.runner.cli",
    "sweep",
    "--estimators",
    "loo,mean,grpo",
    "--G",
    "2,6",
    "--seeds",
    "6001",
    "--chunk",
    "1000",
    "--prompts",
    "4",
    "--actions",
    "8",
    "--json",
]


def _two_processes(args, out):
    port = free_port()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                *args,
                "--out",
                str(out),
                "--coordinator",
                f"127.0.0.1:{port}",
                "--num-processes",
                "2",
                "--process-id",
                str(i),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs[0][1][-2000:] + outs[1][1][-2000:]
    return outs


@pytest.mark.slow
def test_two_processes_give_the_same_table_as_one(tmp_path):
    single = subprocess.run(
        [sys.executable, *SWEEP, "--out", str(tmp_path / "one")],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    assert single.returncode == 0, single.stderr[-2000:]
    outs = _two_processes(SWEEP, tmp_path / "two")
    rows = lambda text: [line for line in text.splitlines() if line.startswith("{")]  # noqa: E731
    assert len(rows(outs[0][0])) == 6 and rows(outs[1][0]) == []  # only process 0 reports
    drop = ["seconds", *PROVENANCE]
    one = pd.read_parquet(tmp_path / "one" / "results.parquet").drop(columns=drop, errors="ignore")
    two = pd.read_parquet(tmp_path / "two" / "results.parquet").drop(columns=drop, errors="ignore")
    pd.testing.assert_frame_equal(one, two, rtol=1e-5)


def test_cluster_detection_reads_the_managers_variables():
    """A multi-process launch by Slurm, Open MPI or a TPU pod is detected from the manager's
    own variables (then jax.distributed.initialize() reads the rest); one task is no cluster."""
    from gpolab.engine import detect_cluster

    assert detect_cluster({}) is None
    assert detect_cluster({"SLURM_JOB_ID": "7", "SLURM_STEP_NUM_TASKS": "1"}) is None
    assert detect_cluster({"SLURM_JOB_ID": "7", "SLURM_STEP_NUM_TASKS": "4"}) == "Slurm"
    assert detect_cluster({"SLURM_JOB_ID": "7"}) is None  # a batch script, not an srun step
    assert detect_cluster({"OMPI_COMM_WORLD_SIZE": "2"}) == "Open MPI"
    assert detect_cluster({"TPU_WORKER_HOSTNAMES": "a,b"}) == "Cloud TPU pod"
    assert detect_cluster({"TPU_WORKER_HOSTNAMES": "a"}) is None


@pytest.mark.slow
def test_two_processes_resume_from_the_store(tmp_path):
    """A 2-process run stopped after some cells resumes from process 0's store: the processes
    agree on the cells left (process 0 decides), stored cells are not recomputed, and the table
    equals one uninterrupted single-process run."""
    grid = SWEEP.index("--G") + 1
    part = [*SWEEP[:grid], "2", *SWEEP[grid + 1 :]]  # "interrupted" after G = 2
    _two_processes(part, tmp_path / "two")
    first = pd.read_parquet(tmp_path / "two" / "results.parquet")
    _two_processes(SWEEP, tmp_path / "two")  # G = 2, 6: resumes
    two = pd.read_parquet(tmp_path / "two" / "results.parquet")
    kept = two[two["G"] == 2].reset_index(drop=True)
    assert list(kept["finished_at"]) == list(first["finished_at"])  # read back, not recomputed
    single = subprocess.run(
        [sys.executable, *SWEEP, "--out", str(tmp_path / "one")],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    assert single.returncode == 0, single.stderr[-2000:]
    drop = ["seconds", *PROVENANCE]
    one = pd.read_parquet(tmp_path / "one" / "results.parquet").drop(columns=drop, errors="ignore")
    pd.testing.assert_frame_equal(one, two.drop(columns=drop, errors="ignore"), rtol=1e-5)
