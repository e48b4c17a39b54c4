"""A resumable results store: one small parquet file per finished cell, written atomically.

``<root>/cells/<key>.parquet`` holds the rows of one cell plus provenance columns (config hash,
gpolab and jax versions, device kind, wall time, finish time).  The key is a hash of everything
the cell's numbers depend on, so

* re-running skips finished cells;
* an interrupted run (Ctrl-C, kill) loses at most the cell in flight and never duplicates one
  (a cell is either fully renamed into place or absent);
* a changed config invalidates exactly the cells whose inputs changed;
* a store given ``peers`` (the experiments' results folder) takes a cell that another
  experiment's store under that folder already finished (a copy of its file) instead of
  computing it again: the same key means the same numbers.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from gpolab import spans

PROVENANCE = (
    "cell_key",
    "config_hash",
    "gpolab_version",
    "jax_version",
    "device_kind",
    "wall_s",
    "finished_at",
)


def digest(obj) -> str:
    """Stable short hash of a JSON-able object (dict keys sorted)."""
    text = json.dumps(obj, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def provenance() -> dict:
    import jax

    from gpolab import __version__

    return {
        "gpolab_version": __version__,
        "jax_version": jax.__version__,
        "device_kind": jax.devices()[0].device_kind,
    }


class Store:
    def __init__(self, root: str | os.PathLike, peers: str | os.PathLike | None = None):
        """``root``: this store's folder (``<root>/cells``).  ``peers``: a folder whose other
        subfolders are stores too (``results/`` of ``gpolab figures``): :meth:`has` copies a
        cell finished there."""
        self.root = Path(root)
        self.cells = self.root / "cells"
        self.peers = Path(peers) if peers is not None else None
        self.adopted = 0  # cells copied from a peer store

    def path(self, key: str) -> Path:
        return self.cells / f"{key}.parquet"

    def count(self) -> int:
        """Finished cells in the store."""
        return len(list(self.cells.glob("*.parquet")))

    def clear(self) -> None:
        """Forget every finished cell (``--fresh``)."""
        for path in self.cells.glob("*.parquet"):
            path.unlink()

    def has(self, key: str) -> bool:
        """Whether cell ``key`` is finished here, or in a peer store (then copied here)."""
        return self.path(key).exists() or self._adopt(key)

    def _adopt(self, key: str) -> bool:
        """Copy cell ``key`` from the first peer store that finished it (atomically: a peer's
        file is complete, as every store's is); False when none has it."""
        if self.peers is None:
            return False
        import shutil

        from gpolab.kit import output

        # this store is among the peers' subfolders, but has() looked here first
        for source in sorted(self.peers.glob(f"*/cells/{key}.parquet")):
            self._make_cells()
            with spans.span("i/o"), output.atomic(self.path(key)) as tmp:
                shutil.copyfile(source, tmp)
            self.adopted += 1
            return True
        return False

    def _make_cells(self) -> None:
        """Create ``<root>/cells``; an ``OSError`` is :func:`~gpolab.kit.output.write_failed`'s
        one-line error."""
        from gpolab.kit import output

        try:
            self.cells.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise output.write_failed(self.cells, err) from None

    def write(self, key: str, rows: list[dict], config_hash: str, wall_s: float) -> None:
        """Write one cell's rows atomically (:func:`gpolab.kit.output.atomic`: temp file in the
        same
        directory, then rename; the temp file is removed and a write error is one line)."""
        import pandas as pd

        from gpolab.kit import output

        self._make_cells()
        meta = {
            "cell_key": key,
            "config_hash": config_hash,
            **provenance(),
            "wall_s": wall_s,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        df = pd.DataFrame([{**row, **meta} for row in rows])
        with spans.span("i/o"), output.atomic(self.path(key)) as tmp:
            df.to_parquet(tmp, index=False)

    def read(self, keys: list[str]):
        """Rows of the given cells, in that order (every key must be finished)."""
        import pandas as pd

        with spans.span("i/o"):
            return pd.concat([pd.read_parquet(self.path(k)) for k in keys], ignore_index=True)


def cell_key(lab: str, **parts) -> str:
    """A cell's store key: :func:`digest` of ``{"lab": lab, **parts}`` (the settings its numbers
    depend on and the row it is, e.g. ``schema=, settings=, row=``); the one key builder."""
    return digest({"lab": lab, **parts})


def config_hash(cfg) -> str:
    """A lab config's provenance hash: every setting its numbers depend on
    (:func:`gpolab.configs.key_settings`), so the output folder, the chunk size and the
    sharding do not change it."""
    from gpolab import configs

    return digest(configs.key_settings(cfg))


def resume(
    store,
    keys,
    compute,
    *,
    config_hash: str = "",
    progress=None,
    label=None,
    group=None,
    share=None,
    agree=None,
):
    """The rows of every cell ``i`` (store key ``keys[i]``), in order, as one DataFrame: read
    back where ``store`` has them, else computed and written to the store as soon as their unit
    is done, so an interrupted run keeps every finished unit.  ``store=None`` computes
    everything.

    * ``group=None``: each cell is its own unit and ``compute(i)`` returns its rows (a list of
      dicts).  ``group(indices)`` yields the units (lists of cell indices) covering ``indices``
      (cells computed together, e.g. estimators on common random numbers); then
      ``compute(unit)`` returns one row list per cell of ``unit`` (each cell's stored wall time
      is the unit's, split evenly).
    * ``share=(j, n)``: only the units u with u mod n = j of ``group(every cell)`` (a job
      array's share; the union over j is every cell once, and no unit is split); the rows
      returned are that share's.
    * ``agree(pending, n) -> pending``: make every process compute the same cells (a
      multi-process run: process 0, which holds the store, decides).
    * ``progress`` (:class:`gpolab.engine.progress.Progress`; None: the silent one)
      hears ``skip(n)`` for the cells found finished (again for a unit a peer store finished
      while this run went on) and ``update(1, label(rows))`` after each computed cell
      (``label``: the note shown for a cell's rows; none by default).
    """
    import pandas as pd

    from gpolab.engine.progress import SILENT

    progress, per_unit = progress or SILENT, group is not None
    kept = _NOTHING_KEPT if store is None else store
    group = group or (lambda idx: ([i] for i in idx))
    mine, pending = _todo(kept, keys, group, share, agree)
    if len(pending) < len(mine):
        progress.skip(len(mine) - len(pending))
    computed = {}
    for unit in group(pending):
        # a unit a peer store finished meanwhile (another experiment running beside this one)
        # is copied, not computed; not in a multi-process run, whose processes compute together
        if agree is None and all(kept.has(keys[i]) for i in unit):
            progress.skip(len(unit))
            continue
        start = time.perf_counter()
        rows = compute(unit) if per_unit else [compute(unit[0])]
        computed.update(zip(unit, rows, strict=True))
        wall = (time.perf_counter() - start) / len(unit)
        for i in unit:
            kept.write(keys[i], computed[i], config_hash, wall)
            progress.update(1, label(computed[i]) if label else "")
    if store is not None:
        return store.read([keys[i] for i in mine])
    return pd.DataFrame([row for i in mine if i in computed for row in computed[i]])


def resumed(cfg, store, keys, compute, **options):
    """A lab's table: :func:`resume` (``options``: its keywords) under ``cfg``'s
    :func:`config_hash`, without the store's :data:`PROVENANCE` columns."""
    df = resume(store, keys, compute, config_hash=config_hash(cfg), **options)
    return df.drop(columns=[c for c in PROVENANCE if c in df])


class _NothingKept:
    """What ``store=None`` is to :func:`resume`: no cell is found, none is written."""

    def has(self, key: str) -> bool:
        return False

    def write(self, *args) -> None:
        pass


_NOTHING_KEPT = _NothingKept()


def _todo(store, keys, group, share, agree) -> tuple[list[int], list[int]]:
    """(this process's cells, those of them still to compute) for :func:`resume`."""
    mine = list(range(len(keys)))
    if share is not None:
        j, n = share
        mine = sorted(i for u, unit in enumerate(group(mine)) if u % n == j for i in unit)
    pending = [i for i in mine if not store.has(keys[i])]
    if agree is not None:
        pending = sorted(agree(set(pending), len(keys)))
    return mine, pending
