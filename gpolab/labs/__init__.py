"""Labs: one module per lab, one shape for all of them.

A lab module has

* ``NAME`` and ``Config``: a frozen dataclass of :func:`gpolab.configs.option` fields, the single
  source of defaults, with ``QUICK`` (the sizes ``--quick`` uses) and a plain-Python
  ``validate()`` that names the field and what is allowed;
* ``TABLES``: the names of the tables ``run`` returns (the first is the main one);
* ``cells(cfg) -> int`` (progress) and ``run(cfg, key, *, store=None, progress=None)`` returning
  ``{name: DataFrame}`` tidy tables, one row per cell and every setting that produced it a column
  (resumable per cell through ``store``); the lab's analysis lives in the lab;
* ``figures(tables) -> {file name: draw}`` with ``draw(tables, path)`` from :mod:`gpolab.plots`,
  which reads saved tables only;
* ``report(cfg, tables) -> str`` (the table the CLI prints), optionally ``notes(cfg, tables)``
  (recommendations, summaries; on stderr with ``--json``) and ``JSON`` (the main table's
  columns ``--json`` prints).

:func:`execute` runs a lab into its output folder the same way for the CLI and for
``gpolab figures``: folder checked and locked before any computation, cells resumed from the
store, tables, resolved ``config.toml`` and figures written atomically.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import shutil
import time
from pathlib import Path

from gpolab import configs, output

LABS = (
    "sweep",
    "tree",
    "groupsize",
    "chi2",
    "stdnorm",
    "curvature",
    "zoo",
    "claims",
    "plancheck",
    "offpolicy",
    "allocate",
)
# `gpolab plan` (labs/plan.py) has the same shape but reads a user's log, so it is no experiment


def get(name: str):
    """The lab module ``name``."""
    from gpolab import validate

    validate.choice("lab", name, LABS)
    return importlib.import_module(f"gpolab.labs.{name}")


@dataclasses.dataclass(frozen=True)
class Result:
    tables: dict
    paths: list  # tables, config.toml and figures written
    seconds: float  # wall time of this run (cells resumed from the store cost ~0)
    out: Path


def execute(lab, cfg, *, fresh: bool = False, use_store: bool = True, stream=None) -> Result:
    """Run ``lab`` with the validated ``cfg`` into ``cfg.out`` (see the module docstring).
    Ctrl-C raises :class:`gpolab.output.Interrupted` saying how many cells are kept."""
    import jax

    from gpolab.progress import Progress
    from gpolab.store import Store

    with output.hold(cfg.out) as out:
        store = Store(out) if use_store else None
        if fresh and store is not None:
            store.clear()
        start = time.perf_counter()
        try:
            with Progress(lab.cells(cfg), lab.NAME, stream=stream) as progress:
                tables = lab.run(
                    cfg, jax.random.key(getattr(cfg, "seed", 0)), store=store, progress=progress
                )
        except KeyboardInterrupt:
            kept = store.count() if store is not None else 0
            raise output.Interrupted(
                f"interrupted: {kept} finished cells kept in {out}; run the same command again "
                "to resume (--fresh starts over)"
            ) from None
        seconds = time.perf_counter() - start
        paths = output.write_tables(out, tables)
        saved = configs.dumps(configs.absolute_paths(cfg), lab.NAME)  # readable from anywhere
        paths.append(output.write_text(out / "config.toml", saved))
        paths += draw(lab, out)
    return Result(tables, paths, seconds, out)


def draw(lab, out, into=None, names=None) -> list[Path]:
    """Draw ``lab``'s figures from the tables saved in ``out`` (into ``into``, default ``out``);
    ``names`` = {figure file: target file name} picks and renames."""
    tables = output.read_tables(out, lab.TABLES)
    found = lab.figures(tables)
    names = names or {n: n for n in found}
    into = Path(into or out)
    paths = []
    for name, target in names.items():
        if name not in found:
            from gpolab.validate import ConfigError

            raise ConfigError(
                f"figures: {name!r} is not drawn from these results; allowed: {', '.join(found)}"
            )
        paths.append(found[name](tables, into / target))
    return paths


def copy_figures(paths, into) -> None:
    into = Path(into)
    into.mkdir(parents=True, exist_ok=True)
    for path in paths:
        if Path(path).suffix == ".png":
            with output.atomic(into / Path(path).name) as tmp:
                shutil.copyfile(path, tmp)


def json_value(v):
    """One table value as strict JSON: NaN/None/NA → None, ±inf → "inf"/"-inf" (strict JSON has
    no Infinity), numpy scalars → Python."""
    import pandas as pd

    v = v.item() if hasattr(v, "item") else v
    if not isinstance(v, (list, tuple, dict, str)) and pd.isna(v):
        return None
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def records(lab, tables) -> list[dict]:
    """The main table's rows as strict-JSON dicts (:func:`json_value`).  A lab whose answer
    spans tables names them in ``JSON_TABLES`` ({table: columns or None for all}); each row
    then says its ``table``."""
    spec = getattr(lab, "JSON_TABLES", {lab.TABLES[0]: getattr(lab, "JSON", None)})
    out = []
    for name, columns in spec.items():
        df = tables[name]
        cols = [c for c in (columns or df.columns) if c in df.columns]
        tag = {"table": name} if len(spec) > 1 else {}
        out += [{**tag, **{k: json_value(v) for k, v in rec.items()}}
                for rec in df[cols].to_dict(orient="records")]  # fmt: skip
    return out


def table_text(df, columns) -> str:
    import pandas as pd

    cols = [c for c in columns if c in df.columns]
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        return df[cols].to_string(index=False, float_format="%.4g")
