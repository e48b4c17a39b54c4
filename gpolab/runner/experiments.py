"""Declarative experiments: one TOML file in ``experiments/`` per figure (or figure set).

A file names its lab and holds that lab's config table and optional quick sizes::

    # what it shows; regenerate: gpolab figures --only bandit_mse_vs_G
    lab = "sweep"
    title = "gradient MSE vs G, tabular bandit"          # what it is (figure titles come
    figures = {"mse_vs_G.png" = "bandit_mse_vs_G.png"}   #  from the data); lab figure → file
    [sweep]                                              # the lab's Config fields
    G = [2, 4, 8]
    [quick]                                              # --quick: over the lab's QUICK sizes
    seeds = 2000

Every file is validated when loaded (unknown table or key, wrong type, bad value → one error
naming the file, the table and the field) and runs through :func:`gpolab.runner.labs.execute` into
``results/<name>``, resumable per cell.  Figures are drawn from the saved tables alone
(``gpolab figures --replot`` redraws without computing).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from gpolab import configs, validate
from gpolab.runner import labs

# the shipped experiments: package data (``shipped_experiments``, in a checkout a link to the
# repository's ``experiments/``), so an installed gpolab finds them from any working directory;
# the repository's folder where the link is missing (a checkout without symbolic links)
SHIPPED = Path(__file__).resolve().parents[1] / "shipped_experiments"
DEFAULT_DIR = (
    SHIPPED if SHIPPED.is_dir() else Path(__file__).resolve().parents[2] / "experiments"
).resolve()


@dataclasses.dataclass(frozen=True)
class Experiment:
    name: str
    lab: str
    title: str
    path: Path
    table: dict
    quick: dict
    figures: dict  # lab figure file → target file (empty: every figure, same names)

    def config(self, quick: bool, root: str | Path = "results"):
        """The validated lab config, writing to ``<root>/<name>[-quick]``."""
        lab = labs.get(self.lab)
        out = Path(root) / (f"{self.name}-quick" if quick else self.name)
        return configs.resolve(
            lab.Config,
            table={**self.table, "out": str(out)},
            quick=quick,
            file_quick=self.quick,
            source=str(self.path),
        )


def load(path: str | Path) -> Experiment:
    """Read and validate one experiment file (both its full and its quick config)."""
    path = Path(path)
    data = configs.read_toml(path)
    lab = data.get("lab")
    if lab not in labs.names():
        raise validate.ConfigError(
            f"{path.name}: lab: got {lab!r}; allowed: {', '.join(labs.names())}"
        )
    head, table, quick = configs.split_file(path, lab, data)
    figures = head.get("figures", {})
    if isinstance(figures, list):
        figures = {f: f for f in figures}
    if not isinstance(figures, dict) or not all(isinstance(v, str) for v in figures.values()):
        raise validate.ConfigError(
            f"{path.name}: figures: allowed: a list of file names or a table of lab figure = file"
        )
    exp = Experiment(path.stem, lab, head.get("title", path.stem), path, table, quick, figures)
    exp.config(False)
    exp.config(True)
    return exp


def discover(directory: str | Path = DEFAULT_DIR) -> list[Experiment]:
    """Every experiment file of ``directory``; a missing folder or one without ``*.toml`` files
    is one error naming it."""
    paths = sorted(Path(directory).glob("*.toml"))
    if not paths:
        why = "no *.toml files in it" if Path(directory).is_dir() else "no such folder"
        raise validate.ConfigError(
            f"experiments: got {str(directory)!r} ({why}); allowed: a "
            "folder of experiment .toml files"
        )
    return [load(p) for p in paths]


def run(exp: Experiment, root="results", quick: bool = False, fresh: bool = False):
    """Compute (or resume) an experiment; returns (results folder, seconds of this run)."""
    start = time.perf_counter()
    cfg = exp.config(quick, root)
    labs.execute(labs.get(exp.lab), cfg, fresh=fresh)
    import jax

    # one process runs every experiment: free this one's executables (each holds its own memory
    # mappings, and a process has at most vm.max_map_count of them; the XLA disk cache keeps
    # recompiling cheap)
    jax.clear_caches()
    return Path(cfg.out), time.perf_counter() - start


def plot(exp: Experiment, results: Path, out: str | Path) -> list[Path]:
    """Draw the experiment's figures from its saved tables only."""
    return labs.draw(labs.get(exp.lab), results, into=out, names=exp.figures or None)
