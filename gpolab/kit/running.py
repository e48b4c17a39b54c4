"""Running labs: find them (:func:`names`, :func:`get`), run one into its output folder
(:func:`execute`), draw its figures from saved tables (:func:`draw`), print its rows
(:func:`records`).  What a lab is: :mod:`gpolab.labs`.

:func:`execute` runs a lab into its output folder the same way for the CLI and for
``gpolab figures``: folder checked and locked before any computation, cells resumed from the
store, tables, resolved ``config.toml`` and figures written atomically.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import shutil
import time
from pathlib import Path

from gpolab import configs, spans
from gpolab.kit import output

# the package whose folders are the labs: looked up by name when a lab is asked for, so the kit
# imports no lab (the labs stand on the kit)
LABS = "gpolab.labs"


def folders() -> dict[str, Path]:
    """{name: folder} of every package on :mod:`gpolab.labs`'s ``__path__`` (found by listing it:
    the kit names no lab, and a folder added there is found)."""
    path = importlib.import_module(LABS).__path__
    return {
        m.name: Path(m.module_finder.path) / m.name
        for m in sorted(pkgutil.iter_modules(path), key=lambda m: m.name)
        if m.ispkg and not m.name.startswith("_")
    }


def names() -> tuple[str, ...]:
    """Every lab: a folder of :func:`folders` with a ``lab.py`` (``gpolab train`` is a command
    folder of the stdnorm and group-size labs, not a lab of its own)."""
    return tuple(name for name, folder in folders().items() if (folder / "lab.py").exists())


def get(name: str):
    """The lab module ``name`` (``gpolab.labs.<name>.lab``)."""
    from gpolab import validate

    validate.choice("lab", name, names())
    return importlib.import_module(f"{LABS}.{name}.lab")


@dataclasses.dataclass(frozen=True)
class Result:
    tables: dict
    paths: list  # tables, config.toml and figures written
    seconds: float  # wall time of this run (cells resumed from the store cost ~0)
    out: Path


def execute(
    lab,
    cfg,
    *,
    fresh: bool = False,
    use_store: bool = True,
    stream=None,
    label: str = "",
    peers=None,
) -> Result:
    """Run ``lab`` with the validated ``cfg`` into ``cfg.out`` (see the module docstring);
    ``label`` names the run in progress lines (default: the lab's name); ``peers``: a folder of
    other stores whose finished cells this run copies instead of computing (not with
    ``fresh``; :class:`gpolab.kit.store.Store`).
    Ctrl-C raises :class:`gpolab.kit.output.Interrupted` saying how many cells are kept."""
    import jax

    from gpolab.engine.progress import Progress
    from gpolab.kit.store import Store

    with output.hold(cfg.out) as out:
        store = Store(out, None if fresh else peers) if use_store else None
        if fresh and store is not None:
            store.clear()
        start = time.perf_counter()
        try:
            with Progress(lab.cells(cfg), label or lab.NAME, stream=stream) as progress:
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
        with spans.span("figures"):
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
