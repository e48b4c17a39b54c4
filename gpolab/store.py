"""A resumable results store: one small parquet file per finished cell, written atomically.

``<root>/cells/<key>.parquet`` holds the rows of one cell plus provenance columns (config hash,
gpolab and jax versions, device kind, wall time, finish time).  The key is a hash of everything
the cell's numbers depend on, so

* re-running skips finished cells;
* an interrupted run (Ctrl-C, kill) loses at most the cell in flight and never duplicates one
  (a cell is either fully renamed into place or absent);
* a changed config invalidates exactly the cells whose inputs changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

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
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.cells = self.root / "cells"

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
        return self.path(key).exists()

    def write(self, key: str, rows: list[dict], config_hash: str, wall_s: float) -> None:
        """Write one cell's rows atomically (:func:`gpolab.output.atomic`: temp file in the same
        directory, then rename; the temp file is removed and a write error is one line)."""
        import pandas as pd

        from gpolab import output

        try:
            self.cells.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise output.write_failed(self.cells, err) from None
        meta = {
            "cell_key": key,
            "config_hash": config_hash,
            **provenance(),
            "wall_s": wall_s,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        df = pd.DataFrame([{**row, **meta} for row in rows])
        with output.atomic(self.path(key)) as tmp:
            df.to_parquet(tmp, index=False)

    def read(self, keys: list[str]):
        """Rows of the given cells, in that order (every key must be finished)."""
        import pandas as pd

        return pd.concat([pd.read_parquet(self.path(k)) for k in keys], ignore_index=True)


def resume(store, keys, compute, *, config_hash: str = "", on_skip=None, on_unit=None):
    """The rows of every unit ``i`` (store key ``keys[i]``), in order, as one DataFrame: read
    back where ``store`` has them, else ``compute(i)`` (a list of row dicts) written to the
    store as soon as it is done, so an interrupted run keeps every finished unit.
    ``store=None`` computes everything.  ``on_skip(n)``: the number of units found finished;
    ``on_unit(rows)``: after each computed unit."""
    import pandas as pd

    pending = [i for i, k in enumerate(keys) if store is None or not store.has(k)]
    if on_skip is not None and len(pending) < len(keys):
        on_skip(len(keys) - len(pending))
    computed = {}
    for i in pending:
        start = time.perf_counter()
        computed[i] = compute(i)
        if store is not None:
            store.write(keys[i], computed[i], config_hash, time.perf_counter() - start)
        if on_unit is not None:
            on_unit(computed[i])
    if store is not None:
        return store.read(keys)
    return pd.DataFrame([row for i in range(len(keys)) for row in computed[i]])
