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
naming the file, the table and the field) and runs through :func:`gpolab.kit.running.execute` into
``results/<name>``, resumable per cell; a cell another experiment under ``results/`` already
finished (the same store key) is copied from its store, not computed again.  Figures are drawn
from the saved tables alone (``gpolab figures --replot`` redraws without computing).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from gpolab import configs, validate
from gpolab.kit import running

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
        lab = running.get(self.lab)
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
    if lab not in running.names():
        raise validate.ConfigError(
            f"{path.name}: lab: got {lab!r}; allowed: {', '.join(running.names())}"
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


def selection(field: str, value, allowed) -> tuple[str, ...]:
    """``--only``'s names (a comma list or a list), each one of ``allowed``.  An empty selection
    (``--only ''``) is an error, not "all": only an ``--only`` not given means all (``gpolab
    figures`` and ``gpolab claims`` share this check)."""
    wanted = configs.coerce_list(field, value)
    for name in wanted:
        validate.choice(field, name, allowed)
    return wanted


def run(exp: Experiment, root="results", quick: bool = False, fresh: bool = False):
    """Compute (or resume) an experiment; returns (results folder, seconds of this run)."""
    start = time.perf_counter()
    cfg = exp.config(quick, root)
    # a cell another experiment under ``root`` finished (the same key) is copied, not rerun
    running.execute(running.get(exp.lab), cfg, fresh=fresh, label=exp.name, peers=root)
    import jax

    # one process runs every experiment: free this one's executables (each holds its own memory
    # mappings, and a process has at most vm.max_map_count of them; the XLA disk cache keeps
    # recompiling cheap)
    jax.clear_caches()
    return Path(cfg.out), time.perf_counter() - start


def workers(jobs: int, n: int) -> int:
    """Worker processes for ``n`` experiments: ``jobs`` (0: one per core), at most ``n``."""
    from gpolab.engine import usable_cores

    validate.integer("jobs", jobs, 0)
    return max(1, min(jobs or usable_cores(), n))


def run_all(
    exps: list[Experiment],
    root="results",
    quick: bool = False,
    fresh: bool = False,
    jobs: int = 1,
    timed: bool = False,
    on_done=None,
) -> dict:
    """Compute (or resume) several experiments: ``{name: (results folder, seconds, phases)}``
    (``phases``: :class:`gpolab.kit.timings.Recorder`'s seconds per phase when ``timed``,
    else None); ``on_done(name, seconds)`` after each.

    ``jobs`` > 1 runs them in that many worker processes (fresh interpreters, each with the
    CLI's XLA cache and ``usable_cores() // jobs`` CPU devices), longest first where an earlier
    run's seconds are known (``<root>/seconds.json``), else in the given order.  Each experiment's
    numbers are those of a run on its own: cells draw from their own keys; only the CPU
    device count, and with it the order of float32 partial sums, may differ.  An error in one
    (a refused cell, say) stops the rest and is raised here, as in one process.

    Ctrl-C stops the workers at once (they ignore SIGINT; this process kills them) and raises
    :class:`~gpolab.kit.output.Interrupted` counting the finished cells kept in every
    experiment's folder.  A worker dies with this process, even when it is killed (SIGKILL):
    :func:`_guard_worker`."""
    jobs = workers(jobs, len(exps))
    known = _seconds_file(root)
    order = sorted(exps, key=lambda e: -known.get(_label(e, quick), 0.0)) if jobs > 1 else exps
    done: dict = {}

    def finished(exp, result):
        done[exp.name] = result
        known[_label(exp, quick)] = result[1]
        _save_seconds(root, known)
        if on_done is not None:
            on_done(exp.name, result[1])

    from gpolab.kit import output

    try:
        if jobs == 1:
            for exp in order:
                finished(exp, _run_one(exp, root, quick, fresh, timed))
        else:
            _run_pool(order, jobs, finished, root, quick, fresh, timed)
    except (KeyboardInterrupt, output.Interrupted):
        raise output.Interrupted(_kept(exps, root, quick)) from None
    return done


def _run_pool(order: list[Experiment], jobs: int, finished, *args) -> None:
    """:func:`run_all` in ``jobs`` worker processes; ``finished(exp, result)`` as each ends.  Any
    exception here (Ctrl-C, an experiment's error) kills the workers before it is raised."""
    import concurrent.futures
    import multiprocessing
    import os

    from gpolab.engine import progress, usable_cores

    devices = max(1, usable_cores() // jobs)
    pool = concurrent.futures.ProcessPoolExecutor(
        jobs,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_guard_worker,
        initargs=(os.getpid(),),
    )
    worker = (devices, progress.MAX_SECONDS)
    with pool:
        futures = {pool.submit(_run_one, e, *args, worker): e for e in order}
        try:
            for future in concurrent.futures.as_completed(futures):
                finished(futures[future], future.result())
        except BaseException:
            # kill, not shutdown(wait=True): that waits for every running experiment's current
            # XLA call (34 s after a Ctrl-C); a killed worker loses only its cell in flight
            for process in list((pool._processes or {}).values()):  # 3.14: pool.kill_workers()
                process.kill()
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def _kept(exps: list[Experiment], root, quick: bool) -> str:
    """The interrupt's message: the finished cells kept in every experiment's folder."""
    from gpolab.kit.store import Store

    counts = {_label(e, quick): Store(Path(root) / _label(e, quick)).count() for e in exps}
    where = ", ".join(f"{n}: {k}" for n, k in counts.items() if k)
    return (
        f"interrupted: {sum(counts.values())} finished cells kept in {root}"
        + (f" ({where})" if where else "")
        + "; run the same command again to resume (--fresh starts over)"
    )


def _guard_worker(parent: int) -> None:
    """A worker process's first act (the pool's initializer; it cannot fail): leave Ctrl-C to
    ``parent`` (which kills the workers at once), and die when ``parent`` does, even by SIGKILL
    (which runs no cleanup): on Linux the kernel kills it (``prctl(PR_SET_PDEATHSIG, SIGKILL)``;
    the workers are started by the thread that calls :func:`run_all`); everywhere a daemon
    thread checks twice a second that ``parent`` is still its parent (``os.getppid()`` changes
    when a parent dies)."""
    import os
    import signal
    import sys
    import threading

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass  # no libc prctl: the thread below still watches
    if os.getppid() != parent:  # the parent died before the guard was set
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


def _watch_parent(parent: int, every: float = 0.5) -> None:
    """End this process (no cleanup: the parent's store keeps what is finished) as soon as
    ``parent`` is no longer its parent."""
    import os

    while os.getppid() == parent:
        time.sleep(every)
    os._exit(1)


def _label(exp: Experiment, quick: bool) -> str:
    return f"{exp.name}-quick" if quick else exp.name


def _seconds_file(root) -> dict:
    """Seconds each experiment last took to compute here (``<root>/seconds.json``; {} if none)."""
    import json

    try:
        data = json.loads((Path(root) / "seconds.json").read_text())
        return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}
    except (OSError, ValueError, TypeError):
        return {}


def _save_seconds(root, known: dict) -> None:
    import json

    from gpolab.kit import output

    output.write_text(Path(root) / "seconds.json", json.dumps(known, indent=1, sort_keys=True))


_STARTED: list = []  # a worker process's set-up, done once (its first experiment)


def _start_worker(devices: int, max_seconds: float) -> None:
    """A worker process's set-up: what the CLI does first (XLA cache, CPU devices), its share of
    the cores, the parent's ``--max-hours``, and progress as plain lines (no bars).  Inside the
    first task, not the pool's initializer: an error here (a bad ``GPOLAB_CPU_DEVICES``) is
    then the run's one error, not a broken pool."""
    import os

    from gpolab.engine import progress
    from gpolab.engine.devices import enable_compilation_cache, use_cpu_cores

    if _STARTED:
        return
    os.environ.setdefault("GPOLAB_CPU_DEVICES", str(devices))
    enable_compilation_cache()
    use_cpu_cores()
    progress.MAX_SECONDS = max_seconds
    progress.PLAIN = True
    _STARTED.append(True)


def _run_one(exp: Experiment, root, quick: bool, fresh: bool, timed: bool, worker=None) -> tuple:
    """(results folder, seconds, phases or None) of :func:`run` on one experiment (in a worker
    process: ``worker`` = :func:`_start_worker`'s arguments)."""
    if worker is not None:
        _start_worker(*worker)
    if not timed:
        return (*run(exp, root, quick, fresh), None)
    from gpolab.kit import timings

    recorder = timings.Recorder().start()
    try:
        with recorder.part() as part:
            out, seconds = run(exp, root, quick, fresh)
    finally:
        recorder.stop()
    return out, seconds, part


def plot(exp: Experiment, results: Path, out: str | Path) -> list[Path]:
    """Draw the experiment's figures from its saved tables only."""
    return running.draw(running.get(exp.lab), results, into=out, names=exp.figures or None)
