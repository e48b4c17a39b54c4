import jax
import pytest

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
