"""``gpolab bench --ledger``: its checks come before any run, its runs alternate with the
baseline's in turn and its ratios are the rows' own seconds (the timed command is replaced by a
recorder: a real quick ledger takes minutes, and times belong in the bench, not in tests)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpolab.bench import ledger
from gpolab.runner.cli import main
from gpolab.validate import ConfigError

REPO = Path(__file__).resolve().parents[2]


def _is_git(path: Path) -> bool:
    out = subprocess.run(["git", "-C", str(path), "rev-parse"], capture_output=True)
    return out.returncode == 0


def test_checks_refuse_a_bad_size_or_commit_before_running(capsys):
    with pytest.raises(ConfigError, match="ledger"):
        ledger.check("medium", None)
    assert ledger.check("quick", None) is None
    if _is_git(REPO):
        with pytest.raises(ConfigError, match="not a commit"):
            ledger.check("quick", "no-such-ref-anywhere", REPO)
        assert len(ledger.check("quick", "HEAD", REPO)) == 40
    for argv in (
        ["bench", "--baseline", "HEAD"],
        ["bench", "--ledger", "quick", "--quick"],
        ["bench", "--ledger", "quick", "--seeds", "10"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err


def test_commands_write_only_under_the_run_folder(tmp_path):
    for run in ledger.RUNS:
        for size in ledger.SIZES:
            argv = ledger.command(run, size, tmp_path)
            assert argv[0] == ("claims" if run.startswith("ledger") else "figures")
            paths = [a for a in argv if a.startswith("/")]
            assert paths and all(a.startswith(str(tmp_path)) for a in paths)
            assert ("--quick" in argv or "quick" in argv) == (size == "quick")


def test_timed_runs_the_cli_and_a_failure_is_one_error(tmp_path):
    assert ledger.timed(["--help"], tmp_path / "c", tmp_path / "w") > 0
    with pytest.raises(ConfigError, match="failed"):
        ledger.timed(["claims", "--sizes", "huge"], tmp_path / "c", tmp_path / "w")


def _worktrees(repo: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "worktree", "list", "--porcelain"], capture_output=True, text=True
    ).stdout


@pytest.mark.skipif(not _is_git(REPO), reason="needs the git checkout")
def test_rows_alternate_with_the_baseline_and_register_nothing(monkeypatch):
    calls = []
    before = _worktrees(REPO)

    def fake(argv, caches, work, source=None):
        calls.append((argv[0], "baseline" if source else "this", caches))
        if source is not None:  # the baseline's files, the shipped experiments' link included
            assert (source / "gpolab" / "__init__.py").exists()
            assert (source / "gpolab" / "shipped_experiments" / "zoo.toml").exists()
        # a kill (SIGKILL: no cleanup) would land here: nothing may be registered in the repo
        assert _worktrees(REPO) == before
        return 2.0 if source else 1.0

    monkeypatch.setattr(ledger, "timed", fake)
    rows = ledger.rows("quick", "HEAD", REPO)
    assert [r["workload"] for r in rows] == [f"{r} (quick)" for r in ledger.RUNS]
    assert all(r["vs_baseline"] == 2.0 and r["baseline_s"] == 2.0 for r in rows)
    assert [c[1] for c in calls] == ["this", "baseline"] * len(ledger.RUNS)
    # cold and warm of one command share caches; the ledger's and the figures' are apart
    assert calls[0][2] == calls[2][2] and calls[0][2] != calls[4][2]
    assert _worktrees(REPO) == before


KILLED = """
import sys, time
from gpolab.bench import ledger
ledger.timed = lambda *a, **k: time.sleep(60)
ledger.rows("quick", "HEAD", sys.argv[1])
"""


@pytest.mark.skipif(not _is_git(REPO), reason="needs the git checkout")
def test_a_killed_baseline_run_leaves_the_repository_as_it_was(tmp_path):
    """SIGKILL during `bench --ledger --baseline` used to leave a git worktree registered in the
    user's repository (issue 55); here on a clone, killed while the baseline's files are out."""
    import os
    import sys
    import time

    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", "--shared", str(REPO), str(repo)], check=True)
    before = _worktrees(repo)
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp)}
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(repo)], env=env)
    try:
        end = time.monotonic() + 60
        while not list(temp.glob("gpolab-ledger-*/baseline-tree/gpolab")):
            assert proc.poll() is None and time.monotonic() < end, "no baseline files"
            time.sleep(0.1)
    finally:
        proc.kill()
        proc.wait()
    assert _worktrees(repo) == before
