"""Declarative experiments: one TOML file in ``experiments/`` per figure.

A file has an ``[experiment]`` table (what it is and how it is plotted), the table of its kind
(``[sweep]``: :class:`gpolab.sweep.SweepConfig` fields; ``[command]``: a gpolab subcommand and its
arguments) and an optional ``[quick]`` table of overrides that shrink it for ``--quick``::

    [experiment]
    kind = "sweep"              # sweep | command
    plot = "mse_vs_G"           # sweep: mse_vs_G | tree_heatmap
    title = "tabular bandit ..."
    [sweep]
    G = [2, 4, 8]
    [quick]
    seeds = 2000

Everything is validated on load; errors name the file, the field and the allowed values.
Running is resumable (:mod:`gpolab.store`): finished cells are kept in ``results/<name>/``.
Figures are drawn from the saved ``results.parquet`` alone.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
import tomllib
from pathlib import Path

from gpolab import validate
from gpolab.sweep import SweepConfig

KINDS = ("sweep", "command")
PLOTS = ("mse_vs_G", "tree_heatmap")
EXPERIMENT_KEYS = {"name", "kind", "plot", "title", "figures"}
DEFAULT_DIR = Path(__file__).resolve().parents[1] / "experiments"


@dataclasses.dataclass(frozen=True)
class Experiment:
    name: str
    kind: str
    title: str
    path: Path
    sweep: SweepConfig | None = None
    plot: str | None = None
    command: tuple[str, ...] = ()  # kind "command": argv after ``gpolab``
    figures: tuple[str, ...] = ()  # kind "command": figure files the command writes to --out
    quick: dict = dataclasses.field(default_factory=dict)

    def config(self, quick: bool) -> SweepConfig:
        return self.sweep.replace(**self.quick) if quick else self.sweep

    def argv(self, quick: bool) -> list[str]:
        """The command's argv; ``[quick]`` entries become flags (``true`` → a bare flag)."""
        extra = []
        for k, v in self.quick.items() if quick else ():
            if v is True:
                extra.append(f"--{k}")
            elif v is not False:
                extra += [f"--{k}", str(v)]
        return [*self.command, *extra]


def _fail(path, msg: str):
    raise validate.ConfigError(f"{Path(path).name}: {msg}")


def load(path: str | Path) -> Experiment:
    """Read and validate one experiment file."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as err:
        raise validate.ConfigError(f"config: cannot read {str(path)!r} ({err.strerror})") from None
    except tomllib.TOMLDecodeError as err:
        _fail(path, f"not valid TOML ({err})")
    head = data.get("experiment")
    if not isinstance(head, dict):
        _fail(
            path, "missing [experiment] table; allowed keys: " + ", ".join(sorted(EXPERIMENT_KEYS))
        )
    unknown = set(head) - EXPERIMENT_KEYS
    if unknown:
        _fail(
            path,
            f"experiment.{sorted(unknown)[0]}: unknown; allowed: "
            + ", ".join(sorted(EXPERIMENT_KEYS)),
        )
    kind = head.get("kind", "sweep")
    try:
        validate.choice("experiment.kind", kind, KINDS)
        name = head.get("name", path.stem)
        title = head.get("title", name)
        quick = data.get("quick", {})
        if kind == "sweep":
            validate.choice("experiment.plot", head.get("plot"), PLOTS)
            sweep = SweepConfig().replace(**data.get("sweep", {}))
            sweep.validate(check_out=False)
            sweep.replace(**quick).validate(check_out=False)  # quick overrides too
            return Experiment(name, kind, title, path, sweep=sweep, plot=head["plot"], quick=quick)
        cmd = data.get("command", {})
        argv = cmd.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise validate.ConfigError("command.argv: allowed: a non-empty list of strings")
        figures = head.get("figures")
        if not isinstance(figures, list) or not figures:
            raise validate.ConfigError("experiment.figures: allowed: a non-empty list of names")
        return Experiment(
            name, kind, title, path, command=tuple(argv), figures=tuple(figures), quick=quick
        )
    except validate.ConfigError as err:
        _fail(path, str(err))


def discover(directory: str | Path = DEFAULT_DIR) -> list[Experiment]:
    return [load(p) for p in sorted(Path(directory).glob("*.toml"))]


def results_dir(exp: Experiment, root: str | Path, quick: bool) -> Path:
    return Path(root) / (f"{exp.name}-quick" if quick else exp.name)


def run(
    exp: Experiment, root: str | Path = "results", quick: bool = False, fresh: bool = False
) -> tuple[Path, float]:
    """Compute (or resume) an experiment's results; returns (results dir, seconds)."""
    from gpolab.progress import Progress
    from gpolab.store import Store
    from gpolab.sweep import num_cells, run_sweep, write_results

    out = results_dir(exp, root, quick)
    if fresh and out.exists():
        shutil.rmtree(out)
    start = time.perf_counter()
    if exp.kind == "sweep":
        cfg = exp.config(quick).replace(out=str(out))
        with Progress(num_cells(cfg), exp.name) as progress:
            df = run_sweep(
                cfg,
                store=Store(out),
                on_skip=progress.skip,
                on_row=lambda row: progress.update(1, f"mse={row['mse']:.4g}"),
            )
        write_results(df, out)
    else:
        done = out / ".done"
        if not done.exists():
            from gpolab.cli import main

            out.mkdir(parents=True, exist_ok=True)
            with Progress(1, exp.name) as progress:
                rc = main([*exp.argv(quick), "--out", str(out)])
                if rc:
                    raise RuntimeError(f"{exp.name}: gpolab {' '.join(exp.command)} exited {rc}")
                progress.update(1, "done")
            done.write_text(time.strftime("%Y-%m-%dT%H:%M:%S"))
    return out, time.perf_counter() - start


def plot(exp: Experiment, results: Path, out: str | Path) -> list[Path]:
    """Draw the experiment's figure(s) from its saved results only."""
    import pandas as pd

    from gpolab import plots

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if exp.kind == "command":
        paths = []
        for name in exp.figures:
            shutil.copyfile(results / name, out / name)
            paths.append(out / name)
        return paths
    df = pd.read_parquet(results / "results.parquet")
    draw = {"mse_vs_G": plots.mse_vs_G, "tree_heatmap": plots.tree_heatmap}[exp.plot]
    return [draw(df, out / f"{exp.name}.png", title=exp.title)]
