"""Bad input as a new user types it: one clear line before any computation, never a traceback,
never a silent run, never a wrong statistic (issue 26, items 7, 11 and 12)."""

from __future__ import annotations

import errno
import io
import math

import jax
import numpy as np
import pandas as pd
import pytest

from gpolab import configs, engine, validate
from gpolab.engine import progress
from gpolab.kit import store
from gpolab.runner.cli import commands, main

COMMANDS = tuple(commands())


def _one_line(capsys, start: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(start), err[0]
    return err[0]


@pytest.fixture
def no_compute(monkeypatch):
    """Any Monte Carlo run fails the test: the error must come before it."""
    monkeypatch.setattr(engine, "run", lambda *a, **k: pytest.fail("computed"))


# ----------------------------------------------------------------------------- --help


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_renders_its_help(command, capsys):
    """Every command of the table (new ones included) prints its --help (a bare % in a help
    string used to crash `gpolab chi2 --help`)."""
    with pytest.raises(SystemExit) as stop:
        main([command, "--help"])
    assert stop.value.code == 0
    assert f"usage: gpolab {command}" in capsys.readouterr().out


# ----------------------------------------------------------------------------- duplicates


@pytest.mark.parametrize(
    "value,elem,twice",
    [
        ("loo,loo", str, "'loo'"),
        ("4,4", int, "4"),
        ([2, 4, 2], int, "2"),
        ("0.5, 0.50", float, "0.5"),
    ],
)
def test_a_list_entry_given_twice_is_an_error_naming_it(value, elem, twice):
    with pytest.raises(
        validate.ConfigError, match=f"lists {twice} twice; allowed: a list of distinct"
    ):
        configs.coerce_list("G", value, elem)
    assert configs.coerce_list("G", "2,4", int) == (2, 4)


@pytest.mark.parametrize(
    "argv,field", [(["--estimators", "loo,loo"], "estimators"), (["--G", "4,4"], "G")]
)
def test_duplicate_flags_are_one_line_before_any_computation(
    argv, field, capsys, tmp_path, no_compute
):
    assert main(["sweep", *argv, "--out", str(tmp_path)]) == 2
    _one_line(capsys, f"gpolab sweep: error: {field}: got ")


# ----------------------------------------------------------------------------- NaN p-values


def _cells(mse, mse_se, n_seeds):
    return pd.DataFrame(
        {
            "estimator": ["loo", "loo", "grpo"],
            "G": [2, 4, 2],
            "mse": mse,
            "mse_se": mse_se,
            "theory_mse": [1.0, 0.5, 1.0],
            "theory_mse_se": [np.nan] * 3,
            "n_seeds": n_seeds,
            "env": "bandit",
        }
    )


@pytest.mark.parametrize(
    "mse,mse_se,n_seeds,why",
    [
        ([1.0, 0.5, 1.0], [np.nan] * 3, [1] * 3, "fewer than 2 seeds"),  # --seeds 1
        ([1.0, 0.5, np.inf], [0.1, 0.1, np.nan], [100] * 3, "non-finite Monte Carlo MSE"),
    ],
)
def test_a_nan_joint_p_is_reported_with_its_reason_never_as_a_pass(mse, mse_se, n_seeds, why):
    from gpolab.labs.sweep import lab as sweep

    t = sweep.joint_test(_cells(mse, mse_se, n_seeds), ("estimator",))
    assert math.isnan(t["joint_p"]) and why in t["reason"]  # was min(1, nan) = 1: a pass
    assert not t["joint_p"] >= 0.01  # a rule `joint_p >= 0.01` does not pass
    (line,) = sweep.agreement(_cells(mse, mse_se, n_seeds))
    assert "joint p = nan" in line and why in line
    ok = sweep.joint_test(_cells([1.0, 0.5, 1.0], [0.1] * 3, [100] * 3), ("estimator",))
    assert ok["joint_p"] == 1.0 and ok["reason"] is None


def test_a_diverged_chi2_run_gives_nan_ks_with_a_note():
    from gpolab.labs.chi2 import lab as chi2
    from gpolab.theory.chi2 import WeightedChi2

    law = WeightedChi2(np.array([1.0, 0.5]))
    samples = np.random.default_rng(0).chisquare(1, size=200)
    assert chi2.compare(samples, law)["ks_note"] == ""
    samples[3] = np.nan
    got = chi2.compare(samples, law)
    assert math.isnan(got["ks_pvalue"]) and "1 of 200 runs diverged" in got["ks_note"]


# ----------------------------------------------------------------------------- tree budget


def test_a_budget_with_one_split_says_so_instead_of_distinguishable(tmp_path, capsys):
    """K·M = 7 with K >= 2 has one split (7 x 1): no runner-up to be distinguishable from."""
    assert main(["tree", "--leaves", "7", "--seeds", "200", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "only one candidate at this budget" in out
    assert "distinguishable from the runner-up" not in out and "runner-up K=" not in out
    df = pd.read_parquet(tmp_path / "results.parquet")
    assert len(df) == 1 and not df["distinguishable"].any() and not df["tie"].any()


# ----------------------------------------------------------------------------- folders, writes


def test_figures_dir_is_checked_before_any_computation(tmp_path, capsys, no_compute):
    blocker = tmp_path / "figs"
    blocker.write_text("")
    argv = ["tree", "--quick", "--out", str(tmp_path / "out"), "--figures-dir", str(blocker)]
    assert main(argv) == 2
    _one_line(capsys, "gpolab tree: error: figures-dir: got ")


@pytest.mark.parametrize("out", ["", "  "])
def test_an_empty_out_is_an_error_not_the_current_directory(
    out, tmp_path, capsys, monkeypatch, no_compute
):
    monkeypatch.chdir(tmp_path)
    assert main(["tree", "--quick", "--out", out]) == 2
    _one_line(capsys, "gpolab tree: error: out: got ")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["figures", "--only", ""],
        ["claims", "--quick", "--only", ""],  # was the whole ledger (issue 55)
        ["claims", "--only", ","],
        ["claims", "--only", "U1,U1"],
        ["claims", "--only", "no-such-claim"],
    ],
)
def test_an_empty_or_bad_only_is_an_error_not_every_experiment(argv, tmp_path, capsys, monkeypatch):
    """`figures` and `claims` share one --only check: an empty selection is one line, never the
    whole set; a repeated or unknown name too."""
    from gpolab.kit import experiments

    monkeypatch.setattr(experiments, "run", lambda *a, **k: pytest.fail("computed"))
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    _one_line(capsys, f"gpolab {argv[0]}: error: only: got ")
    assert not (tmp_path / "o").exists() and not (tmp_path / "results").exists()


def test_a_failed_cell_write_is_one_line_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    def disk_full(self, path, *a, **k):
        with open(path, "wb") as fh:  # a partial file, as a full disk leaves
            fh.write(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", disk_full)
    s = store.Store(tmp_path)
    with pytest.raises(validate.ConfigError, match="out: cannot write .*No space left on device"):
        s.write("abc", [{"x": 1.0}], "hash", 0.1)
    assert list((tmp_path / "cells").iterdir()) == []  # no .tmp left behind
    assert not s.has("abc")


def test_a_full_disk_during_a_run_is_one_line(tmp_path, capsys, monkeypatch):
    def disk_full(self, path, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", disk_full)
    assert main(["tree", "--K", "4", "--M", "1", "--seeds", "50", "--out", str(tmp_path)]) == 2
    line = _one_line(capsys, "gpolab tree: error: out: cannot write ")
    assert "No space left on device" in line
    assert [p.name for p in (tmp_path / "cells").iterdir()] == []


# ----------------------------------------------------------------------------- absurd sizes


@pytest.mark.parametrize(
    "argv,start",
    [
        (["sweep", "--G", "1000000"], "G: got 1000000; allowed: at most 8,192"),
        (["sweep", "--seeds", "99999999999999"], "seeds: got 99999999999999; allowed: at most"),
        (["tree", "--seeds", str(2**33)], "seeds: got "),
        (["chi2", "--G", "100000"], "G: got 100000"),
    ],
)
def test_absurd_sizes_are_one_line_before_any_computation(
    argv, start, tmp_path, capsys, no_compute
):
    assert main([*argv, "--out", str(tmp_path)]) == 2
    _one_line(capsys, f"gpolab {argv[0]}: error: {start}")


def _uniform(cell, key, args):
    return {"x": jax.random.uniform(key)}


def test_a_cell_that_cannot_fit_in_memory_is_refused_with_the_estimate(monkeypatch):
    monkeypatch.setattr(engine, "memory_limit", lambda: 1000)
    ran = []
    monkeypatch.setattr(engine, "_chunk_moments", _spy(engine._chunk_moments, ran))
    with pytest.raises(
        validate.ConfigError,
        match=r"memory: .* needs about .* GiB .* allowed: "
        r"at most the 0.0 GiB available",
    ):
        engine.run(_uniform, None, (), jax.random.key(0), 100, chunk=8, mesh=None)
    assert ran == []  # refused before any seed ran


def test_tree_with_a_large_K_is_refused_by_memory_not_killed(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(validate, "available_bytes", lambda: 1 << 20)  # 1 MiB free
    assert main(["tree", "--K", "1048576", "--M", "1", "--out", str(tmp_path)]) == 2
    line = _one_line(capsys, "gpolab tree: error: memory: TreeCell K=1048576")
    assert "GiB" in line


@pytest.mark.parametrize(
    "argv",
    [
        ["tree", "--K", "100000000", "--M", "1", "--seeds", "10"],
        ["tree", "--K", "100000000"],
        ["tree", "--leaves", "4194304"],
        ["sweep", "--env", "tree", "--K", "4,100000000", "--M", "1"],
    ],
)
def test_a_tree_larger_than_one_engine_call_is_refused_before_compiling(
    argv, tmp_path, capsys, no_compute
):
    """Issue 40, item 8: K = 10^8 ran for a minute at 10-12 GB with no output and no Ctrl-C (its
    single tree is one engine call), or was refused by time only after 59 s of that call."""
    assert main([*argv, "--out", str(tmp_path)]) == 2
    line = _one_line(capsys, f"gpolab {argv[0]}: error: ")
    assert "allowed: " in line and "2,097,152" in line


class _spy:
    def __init__(self, fn, calls):
        self.fn, self.calls = fn, calls

    def __call__(self, *a, **k):
        self.calls.append(1)
        return self.fn(*a, **k)

    def __getattr__(self, name):  # .lower for the memory check
        return getattr(self.fn, name)


def test_an_endless_cell_is_refused_after_its_first_sub_chunk(monkeypatch):
    monkeypatch.setattr(progress, "MAX_SECONDS", 1e-9)
    ran = []
    monkeypatch.setattr(engine, "_chunk_moments", _spy(engine._chunk_moments, ran))
    with pytest.raises(
        validate.ConfigError,
        match=r"seeds: got 100,000; one cell would take "
        r"about .*measured on its first 8\); allowed: cells under",
    ):
        engine.run(_uniform, None, (), jax.random.key(0), 100_000, chunk=8, mesh=None)
    assert len(ran) == 1


def test_max_hours_flag_refuses_a_long_cell_in_one_line(tmp_path, capsys):
    argv = [
        "tree",
        "--K",
        "4",
        "--M",
        "1",
        "--seeds",
        "100000",
        "--max-hours",
        "1e-12",
        "--out",
        str(tmp_path),
    ]
    try:
        assert main(argv) == 2
    finally:
        progress.MAX_SECONDS = 24 * 3600.0
    line = _one_line(capsys, "gpolab tree: error: seeds: got 100,000; one cell would take about")
    assert "--max-hours raises the limit" in line


def test_long_cells_report_progress_and_results_do_not_change(monkeypatch):
    monkeypatch.setattr(progress, "REPORT_S", 0.0)
    stream = io.StringIO()
    key = jax.random.key(3)
    with progress.Progress(1, "demo", stream=stream):
        m = engine.run(_uniform, None, (), key, 3000, chunk=8, mesh=None)
    lines = [x for x in stream.getvalue().splitlines() if " seeds, " in x]
    assert lines and all(x.startswith("[demo] cell 1/1: ") and "left" in x for x in lines)
    with engine.prng_mode():
        direct = jax.vmap(lambda k: jax.random.uniform(k))(
            engine.seed_keys(key, np.arange(3000, dtype=np.uint32))
        )
    assert m.n == 3000
    np.testing.assert_allclose(m.mean("x"), np.mean(np.asarray(direct, np.float64)), rtol=1e-6)


# ----------------------------------------------------------------------------- issue 40, item 8


@pytest.mark.parametrize(
    "argv,start",
    [
        (
            ["sweep", "--seed", "1180591620717411303424"],
            "seed: got 1180591620717411303424; allowed: an integer below 2^32",
        ),
        (
            ["zoo", "--instance-seed", str(2**32 + 7)],
            "instance_seed: got 4294967303; allowed: an "
            "integer below 2^32 = 4,294,967,296 (JAX keeps a seed's low 32 bits: instance_seed "
            "4294967303 would repeat the draws of 7)",
        ),
        (
            ["sweep", "--prompts", str(2**64)],
            "prompts: got 18446744073709551616; allowed: an integer of at most 64 bits",
        ),
        (
            ["groupsize", "--pool", "1000000000000"],
            "pool: got 1000000000000; allowed: at most 1,048,576",
        ),
        (["zoo", "--G", "1,4"], "G: got 1; allowed: integers >= 2"),
        # issue 55: listing 2^30's divisors took minutes before the first line
        (["groupsize", "--N", "256,1073741824"], "N: got 1073741824; allowed: at most 65,536"),
        (["groupsize", "--train", "--bandit-N", "131072"], "bandit_N: got 131072; allowed: at"),
        (["sweep", "--num-processes", "0"], "num-processes: not used without --coordinator"),
        (["sweep", "--process-id", "3"], "process-id: not used without --coordinator"),
        (["figures", "--experiments", "missing", "--replot"], "experiments: got "),
    ],
)
def test_overflows_unused_flags_and_missing_folders_are_one_line(
    argv, start, tmp_path, monkeypatch, capsys, no_compute
):
    """Issue 40, item 8: these were an OverflowError, a JAX allocation error, a silent zoo with
    G = 1 cells in its joint test, flags that did nothing and max() of an empty sequence."""
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    _one_line(capsys, f"gpolab {argv[0]}: error: {start}")


def test_a_config_that_is_not_utf8_is_one_line(tmp_path, capsys, no_compute):
    path = tmp_path / "bad.toml"
    path.write_bytes(b"[sweep]\nG = [\xff\xfe]\n")
    assert main(["sweep", "--config", str(path)]) == 2
    _one_line(capsys, "gpolab sweep: error: bad.toml: not UTF-8 text (byte 13)")


def _dead_pid() -> int:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_next_run_removes_the_temporary_files_a_killed_run_left(tmp_path):
    """SIGKILL skips atomic()'s cleanup; the next run holding the folder removes gpolab's own
    temporary names whose process is gone, and nothing else (issue 40, item 8)."""
    import os

    from gpolab.kit import output

    dead, cells = _dead_pid(), tmp_path / "cells"
    cells.mkdir()
    stale = [
        tmp_path / f".results.csv.{dead}.7.tmp",
        cells / f".abc.parquet.{dead}.7.tmp",
        tmp_path / f".probe.{dead}",
    ]
    kept = [
        tmp_path / f".results.csv.{os.getpid()}.7.tmp",  # a running process's
        tmp_path / ".notes.tmp",
        tmp_path / f"x.{dead}.7.tmp",
        cells / "abc.parquet",
    ]
    for path in stale + kept:
        path.write_text("x")
        os.utime(path, (1, 1))  # written long ago
    fresh = cells / f".new.parquet.{dead}.7.tmp"  # maybe a share on another host: too recent
    fresh.write_text("x")
    with output.hold(tmp_path):
        pass
    assert not any(p.exists() for p in stale)
    assert all(p.exists() for p in [*kept, fresh])


def test_a_saved_config_resumes_its_folder_from_any_directory(tmp_path, monkeypatch, capsys):
    """config.toml holds the output folder as an absolute path: `--config ../x/config.toml` from
    elsewhere resumes it instead of computing into a new folder (issue 40, item 8)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    argv = ["--estimators", "loo", "--G", "2", "--seeds", "200", "--prompts", "3", "--actions", "4"]
    assert main(["sweep", *argv]) == 0
    monkeypatch.chdir(tmp_path / "b")
    capsys.readouterr()
    assert main(["sweep", "--config", "../a/results/sweep/config.toml"]) == 0
    assert "1 cells already finished" in capsys.readouterr().err
    assert not (tmp_path / "b" / "results").exists()
