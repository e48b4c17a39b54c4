"""Devices for the engine's seeds: full-precision products, CPU devices per core, seed meshes
over this process's or every process's devices, joining a multi-process run
(``jax.distributed``, by hand or from a cluster manager's environment), and the CPU cache the
automatic chunk is sized for.  :mod:`gpolab.engine`
re-exports every name here."""

from __future__ import annotations

import contextlib
import glob
import os
from functools import cache
from pathlib import Path

import jax
import numpy as np

from gpolab import validate

__all__ = [
    "full_precision",
    "float64_mode",
    "use_cpu_devices",
    "local_mesh",
    "seed_mesh",
    "init_distributed",
    "CLUSTERS",
    "detect_cluster",
    "init_auto_distributed",
    "reported_cache_bytes",
    "cache_bytes",
    "CACHE_PER_CORE",
]


def _shard(a: np.ndarray, mesh: jax.sharding.Mesh) -> jax.Array:
    """A host array as a global array split along its last axis over the mesh's devices."""
    spec = jax.sharding.PartitionSpec(*[None] * (a.ndim - 1), "seeds")
    sharding = jax.sharding.NamedSharding(mesh, spec)
    return jax.make_array_from_callback(a.shape, sharding, lambda i: a[i])


def full_precision() -> None:
    """Float32 matrix products in full float32 everywhere (``jax_default_matmul_precision`` =
    highest).  On CPU this changes nothing (bitwise); on a GPU JAX would otherwise use TF32 (10
    mantissa bits) and on a TPU bfloat16 passes for float32 products: errors of ~1e-3 relative
    in the exact truth (einsums over the score table) and in every estimate, far above the
    Monte Carlo resolution of 10⁶ seeds.  The CLI calls this first; Python users on an
    accelerator call it themselves."""
    jax.config.update("jax_default_matmul_precision", "highest")


@contextlib.contextmanager
def float64_mode(on: bool = True):
    """JAX's float64 mode inside the ``with`` block only, when ``on`` (``jax.enable_x64``, a
    scoped setting): arrays made and functions traced inside are float64, and the process's
    precision is the same after the block, so a float64 run leaves later computations float32."""
    if not on:
        yield
        return
    with jax.enable_x64(True):
        yield


def usable_cores() -> int:
    """The CPU cores this process may use (Linux's affinity), else all of them (macOS)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else os.cpu_count() or 1


def use_cpu_devices(count: int | None = None) -> None:
    """Ask for ``count`` CPU devices (default: one per core the process may use) before JAX has
    started its backends (a no-op once JAX has run; starts nothing itself, so
    :func:`init_distributed` may still follow).

    :func:`run` splits each chunk's seeds over this process's devices (:data:`LOCAL`), so on a
    CPU every core runs its own seeds: on 2 cores W1 runs ~1.6-2× faster than on one device
    whose XLA:CPU spreads each small op over both (``gpolab bench`` shows the device count).
    The CLI calls this first thing (``GPOLAB_CPU_DEVICES`` sets the count).
    """
    if count is None:
        count = usable_cores()
    validate.integer("devices", count, 1)
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:  # the backend is already up (e.g. inside tests): keep its devices
        pass


def local_mesh() -> jax.sharding.Mesh | None:
    """A seed mesh over this process's devices when it has several (single-process runs only:
    a multi-process run shards over every process with :func:`seed_mesh`), else None."""
    devices = jax.local_devices()
    if len(devices) < 2 or jax.process_count() > 1:
        return None
    return seed_mesh(devices)


def init_distributed(coordinator: str, num_processes: int, process_id: int) -> None:
    """Join a multi-process run (``jax.distributed``); on CPU, collectives go through gloo.

    Every process then sees the global device list, and :func:`seed_mesh` spans all of them.
    """
    validate.integer("num_processes", num_processes, 1)
    validate.integer("process_id", process_id, 0, num_processes - 1)
    use_cpu_devices(1)  # one CPU device per process: the cross-process gather never waits on a core
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator, num_processes=num_processes, process_id=process_id
    )


# environment variables by which a cluster manager announces a multi-process launch, and the
# variable holding the number of processes; jax.distributed.initialize() reads the rest itself
CLUSTERS = {
    "Slurm": ("SLURM_JOB_ID", "SLURM_STEP_NUM_TASKS"),
    "Open MPI": ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"),
    "Cloud TPU pod": ("TPU_WORKER_HOSTNAMES", None),
}


def detect_cluster(environ=None) -> str | None:
    """The cluster manager that launched this process as one of several (None: a single
    process).  Slurm counts when its step has more than one task; a TPU pod when it lists more
    than one worker host."""
    env = os.environ if environ is None else environ
    for name, (marker, count) in CLUSTERS.items():
        if marker not in env:
            continue
        text = env.get(count, "") if count else str(len(env[marker].split(",")))
        if text.isdigit() and int(text) > 1:
            return name
    return None


def init_auto_distributed() -> str | None:
    """Join the multi-process run a cluster manager launched (``jax.distributed.initialize()``
    with no arguments: it reads the coordinator, process count and index from the manager).
    Returns the manager's name, or None when this is a single process."""
    name = detect_cluster()
    if name is None:
        return None
    use_cpu_devices(1)
    if jax.default_backend() == "cpu":
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize()
    return name


def seed_mesh(devices=None) -> jax.sharding.Mesh:
    """A 1-D mesh named ``"seeds"`` over ``devices`` (default: every device of every process)."""
    return jax.sharding.Mesh(np.asarray(devices or jax.devices()), ("seeds",))


def enable_compilation_cache() -> None:
    """Keep XLA executables on disk across CLI runs (``GPOLAB_CACHE_DIR``; empty disables).

    Each ``gpolab`` invocation is a new process; with the cache a repeated sweep skips XLA
    compilation (e.g. a tree cell: 3.0 s cold, 0.7 s from the cache).
    """
    import os
    from pathlib import Path

    cache = os.environ.get("GPOLAB_CACHE_DIR", str(Path.home() / ".cache" / "gpolab" / "xla"))
    if cache:
        import jax

        jax.config.update("jax_compilation_cache_dir", cache)
        # every compilation, not only those over JAX's default 1 s: a sweep cell compiles in
        # ~1 s and its chunk probe in ~0.6 s, so the default would keep about half of them
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def use_cpu_cores() -> None:
    """One JAX CPU device per core before anything runs (``GPOLAB_CPU_DEVICES=N`` sets N), so the
    engine runs each core's seeds on its own device (:func:`use_cpu_devices`); and
    float32 matrix products in full float32 (:func:`full_precision`)."""
    import os

    from gpolab import validate

    full_precision()
    text = os.environ.get("GPOLAB_CPU_DEVICES", "")
    try:
        count = int(text) if text else None
    except ValueError:
        raise validate.ConfigError(
            f"GPOLAB_CPU_DEVICES: got {text!r}; allowed: a positive integer"
        ) from None
    if count is not None:
        validate.integer("GPOLAB_CPU_DEVICES", count, 1)
    use_cpu_devices(count)


@cache
def reported_cache_bytes() -> int:
    """The largest CPU cache /sys reports for this machine (the last level; 32 MiB where /sys
    does not say)."""
    sizes = []
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            text = Path(path).read_text().strip()
            sizes.append(
                int(text.rstrip("KMG"))
                * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1], 1)
            )
        except (OSError, ValueError):
            continue
    return max(sizes, default=32 << 20)


CACHE_PER_CORE = 16 << 20  # the most last-level cache one core is counted as having


@cache
def cache_bytes() -> int:
    """The last-level cache this process can count on: :func:`reported_cache_bytes`, at most
    :data:`CACHE_PER_CORE` per core it may use.  A virtual machine sees its socket's whole L3
    (480 MiB on a 2-core slice of a large Xeon), shared with every other tenant; sizing chunks
    for all of it chose 8,192 seeds per chunk for W1 where 256–1,024 run 2.1× faster (issue 32).
    Machines that report at most 16 MiB per core (32 MiB on 2 cores) are unchanged."""
    return min(reported_cache_bytes(), usable_cores() * CACHE_PER_CORE)
