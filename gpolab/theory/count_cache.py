"""A per-machine disk cache of count tables (:func:`gpolab.theory.exact.count_table`).

Building a table compiles its estimator: one small XLA program per estimator, options and G
(~65 ms each; the zoo's 84 tables take ~6 s), in every process that needs it.  A table loaded
from here costs a trace of the estimator and a file read (~5 ms).

The key is everything that decides the table: the estimator's computation as JAX traces it
(its jaxpr at every shape :func:`~gpolab.theory.exact.count_table` evaluates, with the values of
its constants, so a change in its code, in any code it calls, in its options or in G gives
another key), the values of the groups it is evaluated on, the tabulating code (the source of
``exact.py`` and of this module), the precision, the gpolab, jax, jaxlib and numpy versions,
the backend, the matmul precision and ``XLA_FLAGS``.  Verified on load: the file holds the full
key, compared with the one this process traced, and a SHA-256 of key and arrays; the arrays
must have shape (G,) and be finite float64.  A missing, unreadable, corrupt, tampered or stale
file is a miss: the table is built again and the file replaced, never trusted.  A function JAX
cannot trace (numpy inside), or one that calls back into Python (callbacks: the trace does not
show their code), is never cached; nor is a table that fails a check (``ok=False``).

Where: ``GPOLAB_COUNT_CACHE`` (empty: off); else ``count-tables`` beside the CLI's XLA cache
``GPOLAB_CACHE_DIR`` (off when that is empty), by default ``~/.cache/gpolab/count-tables``.
Each entry is written to a temporary file in the folder, then renamed over its name: atomic,
so several processes (pytest-xdist workers, CLI runs) may write the same entry at once.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import tempfile
from pathlib import Path

import numpy as np

__all__ = ["directory", "key", "load", "store"]

FORMAT = "gpolab count table, format 1"


def directory() -> Path | None:
    """The cache folder (module docstring), None when the cache is off."""
    env = os.environ
    if "GPOLAB_COUNT_CACHE" in env:
        folder = env["GPOLAB_COUNT_CACHE"]
        return Path(folder).expanduser() if folder else None
    xla = env.get("GPOLAB_CACHE_DIR", "~/.cache/gpolab/xla")  # the CLI's default
    try:
        return Path(xla).expanduser().parent / "count-tables" if xla else None
    except RuntimeError:  # no home folder to expand
        return None


@functools.cache
def _source(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _digest(x) -> str:
    x = np.ascontiguousarray(x)
    return f"{x.dtype.str}{x.shape} {hashlib.sha256(x.tobytes()).hexdigest()}"


def _setting() -> str:
    import jax
    import jaxlib

    import gpolab

    device = jax.devices()[0]
    return (
        f"gpolab {gpolab.__version__}, jax {jax.__version__}, jaxlib {jaxlib.__version__}, "
        f"numpy {np.__version__}, {device.platform} {device.device_kind}, matmul precision "
        f"{jax.config.jax_default_matmul_precision}, XLA_FLAGS {os.environ.get('XLA_FLAGS', '')!r}"
    )


def key(fn, inputs, dtype: str, code: str) -> str | None:
    """The key of tabulating ``fn`` on ``inputs`` (the arrays, one per shape, it is evaluated
    on) in precision ``dtype`` by the code in file ``code``; None when the cache is off or
    ``fn`` cannot be cached (no trace, effects, callbacks).  Call it in the tabulation's
    precision."""
    if directory() is None:
        return None
    import jax
    import jax.numpy as jnp

    try:
        parts = [FORMAT, _setting(), f"precision {dtype}", _source(code), _source(__file__)]
        for x in inputs:
            traced = jax.make_jaxpr(fn)(jnp.asarray(x, dtype))
            text = str(traced)
            if traced.effects or _OPAQUE.search(text):
                return None
            parts += [_digest(x), text, *(_digest(c) for c in traced.consts)]
    except Exception:  # untraceable, the estimator's own error (count_table reports it), ...
        return None
    return "\n".join(parts)


# Python the jaxpr does not show: a callback's function (printed by name, its address masked),
# or any other object printed with an address
_OPAQUE = re.compile(r"callback|0x[0-9a-fA-FX]{4}")


def _path(key: str) -> Path | None:
    folder = directory()
    return folder and folder / f"{hashlib.sha256(key.encode()).hexdigest()[:40]}.npz"


def _checksum(key: str, a1: np.ndarray, a0: np.ndarray) -> str:
    return hashlib.sha256(f"{key}\n{_digest(a1)}\n{_digest(a0)}".encode()).hexdigest()


def load(key: str | None, G: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The arrays (a1, a0) stored under ``key``, None on a miss (no key, no file, or a file
    that fails verification: module docstring)."""
    path = key and _path(key)
    if not path:
        return None
    try:
        with np.load(path, allow_pickle=False) as f:
            stored, a1, a0, checksum = str(f["key"]), f["a1"], f["a0"], str(f["checksum"])
    except Exception:  # missing, truncated, not an npz, a field missing: rebuilt
        return None
    if stored != key or checksum != _checksum(key, a1, a0):
        return None
    if any(a.shape != (G,) or a.dtype != np.float64 or not np.isfinite(a).all() for a in (a1, a0)):
        return None
    return a1, a0


def store(key: str | None, a1: np.ndarray, a0: np.ndarray) -> None:
    """Write (a1, a0) under ``key`` atomically; nothing when ``key`` is None or the folder is
    not writable (the cache only saves time)."""
    path = key and _path(key)
    if not path:
        return
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".npz")
        with os.fdopen(fd, "wb") as f:
            checksum = np.array(_checksum(key, a1, a0))
            np.savez_compressed(f, key=np.array(key), a1=a1, a0=a0, checksum=checksum)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
