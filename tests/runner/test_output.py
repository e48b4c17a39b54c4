"""gpolab.kit.output: folders checked before any computation, one run per folder, atomic
writes."""

from __future__ import annotations

import os

import pandas as pd
import pytest

from gpolab.kit import output
from gpolab.validate import ConfigError


def test_prepare_creates_the_folder_and_rejects_what_cannot_hold_files(tmp_path):
    assert output.prepare(tmp_path / "a" / "b").is_dir()
    with pytest.raises(ConfigError, match="not empty"):
        output.prepare("  ")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="a file is in the way"):
        output.prepare(tmp_path / "file", "figures-dir")
    with pytest.raises(ConfigError, match="^figures-dir: "):
        output.prepare(tmp_path / "file", "figures-dir")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_prepare_names_an_unwritable_folder(tmp_path):
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(ConfigError, match="not writable"):
            output.prepare(locked)
    finally:
        locked.chmod(0o700)


def test_a_second_holder_is_told_who_holds_the_folder(tmp_path):
    pytest.importorskip("fcntl")
    with output.hold(tmp_path) as out:
        assert out == tmp_path
        # flock is per open file description: a second open in this process conflicts too
        with pytest.raises(ConfigError, match=f"pid {os.getpid()}"):
            with output.hold(tmp_path):
                pass
    with output.hold(tmp_path):  # released
        pass


def test_atomic_leaves_the_old_file_or_the_new_one(tmp_path):
    path = tmp_path / "t.txt"
    output.write_text(path, "old")
    with pytest.raises(RuntimeError):
        with output.atomic(path) as tmp:
            tmp.write_text("half")
            raise RuntimeError
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["t.txt"]
    with pytest.raises(ConfigError, match="cannot write"):
        with output.atomic(tmp_path / "missing" / "t.txt") as tmp:
            tmp.write_text("x")  # the folder is missing: an OSError becomes one line


def test_tables_round_trip_and_a_missing_one_is_named(tmp_path):
    df = pd.DataFrame({"G": [2, 4], "mse": [0.5, 0.25]})
    paths = output.write_tables(tmp_path, {"results": df})
    assert sorted(p.name for p in paths) == ["results.csv", "results.parquet"]
    pd.testing.assert_frame_equal(output.read_tables(tmp_path, ["results"])["results"], df)
    with pytest.raises(ConfigError, match="no curves.parquet"):
        output.read_tables(tmp_path, ["results", "curves"])
