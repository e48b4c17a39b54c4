"""Shared helpers of the figure tests: each figure is drawn from saved tables into a temporary
folder (matplotlib's Agg backend, through :func:`gpolab.kit.plots.pyplot`) and must be a
non-empty PNG."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from gpolab.kit import output

PNG = b"\x89PNG\r\n\x1a\n"


def saved(tables: dict, folder: Path) -> dict:
    """``tables`` written as the labs save them and read back (figures draw from saved tables)."""
    folder.mkdir(parents=True, exist_ok=True)
    output.write_tables(folder, tables)
    return {name: pd.read_parquet(folder / f"{name}.parquet") for name in tables}


def drawn(draw, tables: dict, path: Path) -> Path:
    """``draw(tables, path)``'s file, checked to be a non-empty PNG."""
    out = Path(draw(tables, path))
    assert out == path and out.stat().st_size > 1000, out
    assert out.read_bytes()[:8] == PNG
    return out


@pytest.fixture
def draw_all(tmp_path):
    """Draw every figure of a lab's ``figures(tables)`` (and ``extra`` ones) from the saved
    tables; returns the file names drawn."""

    def run(figures: dict, tables: dict) -> list[str]:
        tables = saved(tables, tmp_path / "tables")
        return [drawn(fn, tables, tmp_path / name).name for name, fn in figures.items()]

    return run
