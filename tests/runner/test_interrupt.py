"""A killed or interrupted multi-process run (issue 55): no worker outlives the command, Ctrl-C
stops it at once, and its message counts the cells kept in every experiment's folder.  Each test
runs the real CLI in a subprocess on two tiny experiments and signals it as a user would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpolab.kit import experiments

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")

# long enough that both are still computing when signalled: a unit (one G) takes about a second,
# several on a loaded machine; seven units each, so a signal after the first finds them busy
TINY = 'lab = "sweep"\n[sweep]\nestimators = ["loo", "oracle", "mean"]\n'
TINY += "G = [2, 4, 8, 16, 32, 64, 128]\n"
TINY += "seeds = 400000\nprompts = 4\nactions = 8\n"
LEDGER = "".join(
    f'[[claim]]\nid = "{n}"\npaper = "U"\nclaim = "c"\nexperiment = "{n}"\n'
    f'statistic = "oracle_match"\nrules = ["joint_p >= 0.01"]\n'
    for n in ("a", "b")
)


def _state(pid: int) -> str | None:
    """The process's state letter (None: gone; ``Z``: dead, not yet reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _children(pid: int) -> set[int]:
    """Every live process whose parent is ``pid``."""
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.add(int(stat.parent.name))
    return out


def _workers(pid: int) -> set[int]:
    """``pid``'s worker processes (multiprocessing's spawned interpreters)."""
    found = set()
    for child in _children(pid):
        try:
            cmd = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in cmd:
            found.add(child)
    return found


def _wait(condition, seconds: float, every: float = 0.1):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if value := condition():
            return value
        time.sleep(every)
    return condition()


def _start(tmp_path: Path, argv: list[str]) -> subprocess.Popen:
    exps = tmp_path / "exps"
    exps.mkdir()
    for name in ("a", "b"):
        (exps / f"{name}.toml").write_text(TINY)
    env = {**os.environ, "GPOLAB_CPU_DEVICES": "1"}
    # Ctrl-C at its default, as in a terminal: a background job of a non-interactive shell
    # (`cmd &`, e.g. a script's) runs with SIGINT ignored, and the command would inherit that
    previous = signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "gpolab.runner.cli", *argv, "--experiments", str(exps)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group, as a terminal's foreground job
        )
    finally:
        signal.signal(signal.SIGINT, previous)


def _cells(results: Path) -> int:
    return len(list(results.glob("*/cells/*.parquet")))


@pytest.mark.slow
def test_workers_die_with_a_killed_parent(tmp_path):
    """SIGKILL on `figures --jobs 2` runs no cleanup; its workers used to go on computing and
    writing for minutes.  Now each is gone within a few seconds."""
    argv = ["figures", "--jobs", "2", "--out", str(tmp_path / "r"), "--figures-dir", "f"]
    proc = _start(tmp_path, argv)
    workers: set[int] = set()
    try:
        workers = _wait(lambda: len(_workers(proc.pid)) == 2 and _workers(proc.pid), 120)
        assert len(workers) == 2, proc.stderr.read() if proc.poll() is not None else "no workers"
        time.sleep(1.0)  # let them get into their work
        proc.kill()
        proc.wait()
        # the workers used to compute on for minutes; a loaded CI machine may take some seconds
        gone = _wait(lambda: not any(_state(w) not in (None, "Z") for w in workers), 20.0)
        assert gone, {w: _state(w) for w in workers}
    finally:
        proc.kill()
        for w in workers or ():  # a survivor (the bug) is not left running
            if _state(w) not in (None, "Z"):
                os.kill(w, signal.SIGKILL)


@pytest.mark.slow
def test_ctrl_c_stops_every_worker_at_once_and_counts_every_kept_cell(tmp_path):
    """Ctrl-C (SIGINT to the foreground process group) on `claims --jobs 2` used to take 34 s
    and report the claims folder's 0 cells; now it ends within seconds, no worker left, and the
    message counts the finished cells of every experiment's folder."""
    (tmp_path / "ledger.toml").write_text(LEDGER)
    results = tmp_path / "r"
    argv = ["claims", "--jobs", "2", "--ledger", "ledger.toml", "--results", str(results)]
    argv += ["--out", str(tmp_path / "claims")]
    proc = _start(tmp_path, argv)
    workers: set[int] = set()
    try:
        workers = _wait(lambda: len(_workers(proc.pid)) == 2 and _workers(proc.pid), 120)
        assert len(workers) == 2, proc.stderr.read() if proc.poll() is not None else "no workers"
        assert _wait(lambda: _cells(results) > 0, 120), "no cell finished"
        assert proc.poll() is None, "the run ended before the signal: make TINY longer"
        start = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        seconds = time.monotonic() - start
        assert proc.returncode == 130, err
        assert seconds < 15.0, seconds  # 33 s before (the workers finished their XLA call)
        assert not any(_state(w) not in (None, "Z") for w in workers)
        last = err.strip().splitlines()[-1]
        kept = _cells(results)
        assert last.startswith(f"gpolab claims: interrupted: {kept} finished cells kept in "), last
        assert "Traceback" not in err, err
    finally:
        proc.kill()
        for w in workers or ():
            if _state(w) not in (None, "Z"):
                os.kill(w, signal.SIGKILL)


def test_a_worker_ends_when_its_parent_is_gone():
    """The portable half of the guard (no prctl): a process watching a parent it no longer has
    ends within the polling interval."""
    code = f"from gpolab.runner import experiments as e; e._watch_parent({os.getppid()}, 0.05)"
    start = time.monotonic()
    # the child's parent is this test process, not this test's parent: it must end at once
    done = subprocess.run([sys.executable, "-c", code], timeout=30)
    assert done.returncode == 1 and time.monotonic() - start < 30
    assert experiments._kept([], "r", False).startswith("interrupted: 0 finished cells kept in r")
