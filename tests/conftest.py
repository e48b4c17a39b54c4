import os
from pathlib import Path

import jax
import pytest

# XLA executables come from a per-machine cache, as the count tables below do: JAX keys each
# entry by the program, its compile options, the backend and the jax/jaxlib versions, so a hit is
# the executable a compilation would build (14 estimator/env/engine test files: 233 s without it,
# 236 s filling it, 79 s from it, on 2 cores).  ``GPOLAB_CACHE_DIR`` (default
# ``~/.cache/gpolab/xla-tests``; empty: no cache) is set here, before the first compilation, for
# this process, pytest's workers and the CLI subprocesses, and nothing changes it later: jax
# opens the folder once per process (a past full-suite run segfaulted inside
# executable.serialize() after a test had pointed a not yet opened cache at its own folder).
# Unbounded, as the CLI's (JAX's size bound scans the folder at every write: 3x slower filling
# it); :func:`_trim_xla_cache` keeps it under XLA_CACHE_MAX_BYTES.  A process that reads an
# entry another is still writing gets JAX's warning and compiles (the entries are compressed).
os.environ.setdefault("GPOLAB_CACHE_DIR", os.path.expanduser("~/.cache/gpolab/xla-tests"))
# the exact-theory count tables come from their per-machine cache too
# (gpolab.theory.count_cache: keyed by the estimator's traced computation, verified on load), so
# each test process and each CLI subprocess skips rebuilding them (~9 s and 84 compilations)
os.environ.setdefault("GPOLAB_COUNT_CACHE", os.path.expanduser("~/.cache/gpolab/count-tables"))

jax.config.update("jax_numpy_rank_promotion", "raise")
# one CPU device, whichever test runs first (the CLI asks for one per core before JAX starts;
# sharded runs are tested in subprocesses with forced devices)
jax.config.update("jax_num_cpu_devices", 1)

XLA_CACHE_MAX_BYTES = 4 << 30


def _trim_xla_cache(folder: str, limit: int = XLA_CACHE_MAX_BYTES) -> None:
    """Delete the least recently written entries of ``folder`` until it holds at most half of
    ``limit`` bytes, once it holds more than ``limit`` (run by pytest's main process only)."""
    files = sorted(
        (p.stat().st_mtime, p.stat().st_size, p) for p in Path(folder).glob("*") if p.is_file()
    )
    total = sum(size for _, size, _ in files)
    if total <= limit:
        return
    for _, size, path in files:
        if total <= limit // 2:
            break
        path.unlink(missing_ok=True)
        total -= size


if os.environ["GPOLAB_CACHE_DIR"]:
    from gpolab.engine import devices

    if "PYTEST_XDIST_WORKER" not in os.environ and Path(os.environ["GPOLAB_CACHE_DIR"]).is_dir():
        _trim_xla_cache(os.environ["GPOLAB_CACHE_DIR"])
    devices.enable_compilation_cache()
    jax.jit(lambda x: x + 1)(1)  # the first compilation: the cache opens on this folder now
else:
    jax.config.update("jax_enable_compilation_cache", False)


@pytest.fixture
def x64():
    """Run a test in float64 (the theory-check mode), restoring float32 afterwards."""
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", False)


@pytest.fixture(autouse=True, scope="module")
def _release_executables():
    """Free the compiled executables after each test module.  Every XLA:CPU executable holds its
    own memory mappings: one whole-suite process gained ~1,500 per module and aborted inside an
    XLA compilation near the end, close to the kernel's limit of 65,530 (vm.max_map_count);
    clearing keeps the count flat (~1,600) and the resident memory lower."""
    yield
    jax.clear_caches()


@pytest.fixture(scope="session")
def quick_results(tmp_path_factory):
    """One set of quick runs (:class:`tools.readme.QuickRuns`) for the tests that read
    experiments' quick tables, the generated tables' check and the claims ledger's: each
    experiment runs once per session, on first use, whichever test asks first.  Under pytest-xdist
    the workers share one folder (beside their own temporary folders) and QuickRuns locks each
    experiment, so the two slow checks run on two workers at once and neither recomputes what
    the other ran."""
    from tools.readme import QuickRuns  # the docs tool: imported only by the tests that use it

    base = tmp_path_factory.getbasetemp()
    shared = "PYTEST_XDIST_WORKER" in os.environ
    # each experiment's last run time, kept per machine as the caches above: the longest first
    seconds = os.environ.get("GPOLAB_QUICK_SECONDS", "~/.cache/gpolab/quick-seconds.json")
    root = (base.parent if shared else base) / "quick-results"
    return QuickRuns(root, os.path.expanduser(seconds) if seconds else None)


@pytest.fixture(scope="session")
def every_quick_run(quick_results):
    """:func:`quick_results` once every experiment either slow check reads has run, the runs
    split with the other workers (:meth:`tools.readme.QuickRuns.share`)."""
    from tools.readme import quick_experiments

    quick_results.share(quick_experiments())
    return quick_results


def pytest_collection_modifyitems(config, items):
    """The two slow checks that read every quick run (the longest tests, :func:`every_quick_run`)
    go first: pytest-xdist hands its first work units to the workers in turn, so each starts on
    its own worker at once and the two split the runs.  The tests that read some experiments'
    quick tables (:func:`quick_results`: a negative control each, ...) go last, when the runs are
    done: earlier, one would wait idle for the run another worker is computing."""
    names = lambda item: getattr(item, "fixturenames", ())  # noqa: E731
    first = [item for item in items if "every_quick_run" in names(item)]
    last = [item for item in items if "quick_results" in names(item) and item not in first]
    items[:] = first + [item for item in items if item not in first + last] + last
