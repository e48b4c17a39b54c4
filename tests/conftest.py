import os

import jax
import pytest

# the tests never serialize XLA executables into a persistent cache: `gpolab.runner.cli.main`
# enables
# one unless GPOLAB_CACHE_DIR is empty, and jax decides once per process whether the cache is
# used (its first compilation), so a test that sets a cache folder cannot turn it on for the
# tests after it.  (A full-suite run segfaulted inside jax's executable.serialize() while a
# later test wrote to the folder an earlier test had set.)
os.environ.setdefault("GPOLAB_CACHE_DIR", "")
# the exact-theory count tables, by contrast, come from the per-machine cache
# (gpolab.theory.count_cache: keyed by the estimator's traced computation, verified on load), so
# each test process and each CLI subprocess skips rebuilding them (~9 s and 84 compilations)
os.environ.setdefault("GPOLAB_COUNT_CACHE", os.path.expanduser("~/.cache/gpolab/count-tables"))
jax.config.update("jax_enable_compilation_cache", False)

jax.config.update("jax_numpy_rank_promotion", "raise")
# one CPU device, whichever test runs first (the CLI asks for one per core before JAX starts;
# sharded runs are tested in subprocesses with forced devices)
jax.config.update("jax_num_cpu_devices", 1)


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
    """One set of quick runs (:class:`tools.readme.QuickRuns` under one session folder) for the
    tests that read experiments' quick tables, the generated tables' check and the claims
    ledger's: each experiment runs once per session, on first use, whichever test asks first.
    Tests that use it carry ``@pytest.mark.xdist_group("quick-results")`` so that, under
    ``--dist loadgroup``, one worker runs them all (two workers would each run every experiment:
    a session fixture is per worker)."""
    from tools.readme import QuickRuns  # the docs tool: imported only by the tests that use it

    return QuickRuns(tmp_path_factory.mktemp("quick-results"))
