"""`gpolab plan` on the bad inputs of issue 55, tried as a new user would: each is one error line
(no traceback) before any file is written, or a bounded run; never a silent change of answer."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from gpolab.labs.plan import lab as plan
from gpolab.labs.plan import plots
from gpolab.runner.cli import main


def _log(path, *, groups=64, G=8, steps=4, seed=0, **extra):
    """A table log of binary rewards, p ~ Beta(1, 2), plus per-response ``extra`` columns."""
    rng = np.random.default_rng(seed)
    z = rng.random((groups, G)) < rng.beta(1.0, 2.0, groups)[:, None]
    frame = pd.DataFrame(
        {
            "step": np.repeat(np.arange(groups) % steps, G),
            "prompt": np.repeat([f"q{i}" for i in range(groups)], G),
            "reward": z.ravel().astype(float),
            **{k: v(rng, groups * G) for k, v in extra.items()},
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False)
    return path


def _one_line(capsys, argv, out, *words) -> str:
    assert main(["plan", *map(str, argv), "--out", str(out), "--draws", "100"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert all(w in err[0] for w in words), err
    return err[0]


def test_an_infinite_pair_score_is_one_error_naming_the_column(tmp_path, capsys):
    """One inf among 1,024 pair scores silently dropped the whole column (the norms path
    instead) and flipped plan's recommendation from G = 256 to G = 2."""

    def pairs(rng, size):
        u = rng.normal(size=size)
        u[5] = np.inf
        return u

    log = _log(
        tmp_path / "log.csv", groups=128, proxy=lambda r, k: r.gamma(2.0, size=k), pair_score=pairs
    )
    _one_line(
        capsys,
        [log],
        tmp_path / "out",
        "'pair_score' is inf at line 7",
        "(1 of 1,024 rows are infinite)",
        "allowed: a finite number",
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("inside", ["", "sub", "completions"])
def test_out_in_the_log_folder_is_refused_before_writing(tmp_path, capsys, inside):
    """`plan mytrl --out mytrl` wrote its tables into the log folder, after which every
    `plan mytrl` failed with "mixed formats"; now refused, the folder left as it was."""
    folder = tmp_path / "mytrl"
    _log(folder / "log.csv")
    out = folder / inside if inside else folder
    _one_line(capsys, [folder], out, "out: got", "which is the log", "allowed: a folder outside")
    assert sorted(os.listdir(folder)) == ["log.csv"]
    assert main(["plan", str(folder), "--out", str(tmp_path / "out"), "--draws", "100"]) == 0


@pytest.mark.parametrize("kind", ["fifo", "/dev/null", "/dev/zero"])
def test_a_pipe_or_device_as_the_log_is_one_line(tmp_path, capsys, kind):
    """A FIFO, /dev/null or /dev/zero said "Not a directory" (a traceback's last line); now
    what a log must be, from a stat alone (a FIFO is never opened, so nothing blocks)."""
    log = tmp_path / "fifo" if kind == "fifo" else kind
    if kind == "fifo":
        os.mkfifo(log)
    _one_line(
        capsys,
        [log],
        tmp_path / "out",
        "is not a regular file or a folder",
        "allowed: a folder or a file of the supported formats",
    )
    assert not (tmp_path / "out").exists()


def test_a_huge_group_runs_in_bounded_memory_and_allocate_is_refused(tmp_path, capsys):
    """A log of G = 65,536 held 6-10 GB (the check's draws x G products) and drew a bar per
    count; the check is now chunked (tests/theory), the histogram has at most BARS bars, and
    --allocate, whose count tables grow as (8G)², is refused before any fit."""
    log = _log(tmp_path / "log.csv", groups=4, G=4096, steps=2)
    err = _one_line(capsys, [log, "--allocate"], tmp_path / "out", "allocate: the log's G = 4,096")
    assert "is above 256" in err and not (tmp_path / "out").exists()
    tables = plan.run(plan.Config(log=str(log), out=str(tmp_path / "out"), draws=100))
    p = tables["summary"].iloc[-1].to_dict()
    plt = plots.pyplot()
    fig, ax = plt.subplots()
    plots._difficulty(ax, tables, p)
    assert len(ax.patches) <= plots.BARS
    heights = [b.get_height() for b in ax.patches]
    assert sum(heights) == pytest.approx(1.0)  # every group in some bar
    plt.close(fig)
