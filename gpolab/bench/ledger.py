"""``gpolab bench --ledger SIZE``: how long reproducing gpolab's results takes on this machine.

Four runs of the CLI, each in a fresh interpreter with its own empty output folders:

* ``ledger cold``: ``gpolab claims --sizes SIZE`` with an empty persistent XLA cache and an empty
  count-table cache (a fresh clone's first run);
* ``ledger warm``: the same again with the caches the cold run filled, no saved tables (every
  experiment computed again);
* ``figures cold`` / ``figures warm``: ``gpolab figures`` (``--quick`` at the quick size) the same
  two ways, with caches of their own.

With ``--baseline REF`` every run is made for the commit REF too (its files exported by ``git
archive`` into a temporary folder, run by the same Python with that folder first on
``sys.path``; nothing is registered in the repository, so a killed bench leaves it as it was), in
turn with
this checkout's, and each row carries ``baseline_s`` and ``vs_baseline`` = baseline seconds over
these: the ratio measured in one run on one machine, which is what a speed claim may rest on.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpolab import validate

SIZES = ("quick", "full")
RUNS = ("ledger cold", "ledger warm", "figures cold", "figures warm")


def check(size: str, baseline: str | None, repo: str | os.PathLike = ".") -> str | None:
    """Plain checks before anything runs: the size, and REF a commit of the git repository at
    ``repo`` (returned as its full hash; None without a baseline)."""
    validate.choice("ledger", size, SIZES)
    if baseline is None:
        return None
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{baseline}^{{commit}}"],
            capture_output=True,
            text=True,
        )
    except OSError as err:
        raise validate.ConfigError(f"baseline: git is not available ({err})") from None
    if out.returncode != 0:
        raise validate.ConfigError(
            f"baseline: got {baseline!r}; not a commit of the git repository at {repo}"
        )
    return out.stdout.strip()


def command(run: str, size: str, tmp: Path) -> list[str]:
    """The CLI arguments of one of :data:`RUNS`, its outputs under ``tmp``."""
    if run.startswith("ledger"):
        return ["claims", "--sizes", size, "--results", str(tmp / "results"), "--out", str(tmp)]
    quick = ["--quick"] if size == "quick" else []
    return ["figures", *quick, "--out", str(tmp / "results"), "--figures-dir", str(tmp / "figs")]


def timed(argv: list[str], caches: Path, work: Path, source: Path | None = None) -> float:
    """Wall seconds of ``python -m gpolab.runner.cli argv`` in a fresh interpreter, with the
    persistent caches under ``caches``, its outputs under ``work`` (made empty first) and
    ``source`` (a checkout) first on ``sys.path`` when given.  A failed run is one error."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = {
        **os.environ,
        "GPOLAB_CACHE_DIR": str(caches / "xla"),
        "GPOLAB_COUNT_CACHE": str(caches / "count-tables"),
    }
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(source), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        )
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "gpolab.runner.cli", *argv],
        cwd=source or work,
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    if out.returncode != 0:
        tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise validate.ConfigError(f"bench --ledger: `gpolab {' '.join(argv)}` failed: {tail[0]}")
    return seconds


def export(repo, ref: str, into: Path) -> Path:
    """Commit ``ref``'s files in the new folder ``into`` (``git archive``, unpacked here): a plain
    copy the repository does not know of (a ``git worktree`` stayed registered in it when the
    bench was killed)."""
    import io
    import tarfile

    out = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", ref], capture_output=True, check=True
    )
    with tarfile.open(fileobj=io.BytesIO(out.stdout)) as tar:
        # the "data" filter (Python >= 3.11.4): nothing outside ``into``, no device files
        tar.extractall(into, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return into


def rows(size: str, baseline: str | None = None, repo: str | os.PathLike = ".", on_row=None):
    """One row per run of :data:`RUNS`: ``seconds`` (this checkout) and, with a baseline commit,
    ``baseline_s`` and ``vs_baseline``; the two checkouts' runs alternate."""
    ref = check(size, baseline, repo)
    out = []
    with tempfile.TemporaryDirectory(prefix="gpolab-ledger-") as name:
        tmp = Path(name)
        sources = {"this": None}
        if ref is not None:
            sources["baseline"] = export(repo, ref, tmp / "baseline-tree")
        for run in RUNS:
            seconds = {}
            for tag, source in sources.items():
                caches = tmp / tag / run.split()[0] / "caches"  # cold empties, warm reuses
                if run.endswith("cold"):
                    shutil.rmtree(caches, ignore_errors=True)
                work = tmp / tag / "work"
                seconds[tag] = timed(command(run, size, work), caches, work, source)
            row = {"workload": f"{run} ({size})", "seconds": seconds["this"]}
            if ref is not None:
                row.update(
                    baseline=ref[:12],
                    baseline_s=seconds["baseline"],
                    vs_baseline=seconds["baseline"] / seconds["this"],
                )
            out.append(row)
            if on_row is not None:
                on_row(row)
    return out
