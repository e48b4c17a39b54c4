import os

import jax
import pytest

# the tests never write XLA executables into the user's persistent cache (~/.cache/gpolab/xla):
# `gpolab.cli.main` enables it unless GPOLAB_CACHE_DIR is empty (set it to opt in)
os.environ.setdefault("GPOLAB_CACHE_DIR", "")

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
