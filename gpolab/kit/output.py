"""Output folders: checked before any computation, held by one run at a time, written atomically.

* :func:`prepare` creates ``--out`` and checks a file can be written there (one-line error);
* :func:`hold` takes an advisory lock on the folder: a second run on the same ``--out`` is told
  which process holds it instead of interleaving its files with the first one's;
* :func:`atomic` writes through a per-process temporary name and renames it into place, so a
  reader sees a whole file or the previous one; :func:`write_tables` writes every table as
  parquet and CSV under the lock, so the two always come from the same run.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from pathlib import Path

from gpolab import spans
from gpolab.validate import ConfigError

LOCK = ".gpolab.lock"
# gpolab's own temporary names (:func:`atomic`, :func:`prepare`'s probe): .<name>.<pid>.<thread>.tmp
TEMP = re.compile(r"^\.(?:.+\.(\d+)\.\d+\.tmp|probe\.(\d+))$")
STALE_S = 60.0  # a temporary file this old whose process is gone is a killed run's leftover


class Interrupted(Exception):
    """A run was stopped (Ctrl-C); the message says what was kept and how to resume."""


def prepare(out, field: str = "out") -> Path:
    """Create ``out`` if needed and check a file can be written there; errors name ``field``.
    An empty path is an error (it would silently mean the current directory)."""
    if not str(out).strip():
        raise ConfigError(f"{field}: got {str(out)!r}; allowed: a directory path (not empty)")
    out = Path(out)
    probe = out / f".probe.{os.getpid()}"
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        why = "a file is in the way" if out.exists() and not out.is_dir() else err.strerror
        raise ConfigError(
            f"{field}: got {str(out)!r}; allowed: a writable directory (not writable: {why})"
        ) from None
    return out


@contextlib.contextmanager
def hold(out):
    """Advisory lock on the folder ``out`` (checked by :func:`prepare`, which gives the path
    yielded) for the duration of a run (POSIX ``flock``; a no-op where ``fcntl`` is missing).
    Another holder → :class:`ConfigError` naming its pid."""
    out = prepare(out)
    try:
        import fcntl
    except ImportError:  # Windows: no advisory lock
        yield out
        return
    path = out / LOCK
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            pid = fh.read().strip() or "?"
            raise ConfigError(
                f"out: another gpolab run (pid {pid}) is writing to {str(out)!r}; wait for it "
                "to finish or choose another --out"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        remove_stale(out, 0.0)  # the lock holder is the only writer here
        remove_stale(out / "cells")  # a job array's shares write cells without the lock
        try:
            yield out
        finally:
            fh.truncate(0)
            fcntl.flock(fh, fcntl.LOCK_UN)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True


def remove_stale(folder, min_age: float = STALE_S) -> list[Path]:
    """Remove the temporary files a killed run left in ``folder`` (SIGKILL skips the cleanup of
    :func:`atomic`): only names of gpolab's own pattern (:data:`TEMP`) whose process no longer
    runs and (``min_age``, default :data:`STALE_S`) that were last written that many seconds ago
    (a job array's share on another host may be writing one).  Called by :func:`hold`, under
    the folder's lock; returns what was removed."""
    removed = []
    for path in Path(folder).glob(".*") if Path(folder).is_dir() else ():
        match = TEMP.match(path.name)
        try:
            old = time.time() - path.stat().st_mtime >= min_age
            if match and old and not _running(int(match[1] or match[2])) and path.is_file():
                path.unlink()
                removed.append(path)
        except OSError:  # gone meanwhile, or not ours to remove: left alone
            continue
    return removed


def write_failed(path, err: OSError, field: str = "out") -> ConfigError:
    """The one-line error for a write that failed (disk full, permissions, a file in the way)."""
    return ConfigError(
        f"{field}: cannot write {str(path)!r} ({err.strerror or err}); allowed: a folder this "
        "user can write with free space (finished cells are kept: run the same command to resume)"
    )


@contextlib.contextmanager
def atomic(path):
    """Yield a temporary path beside ``path`` (unique to this process and thread); on success it
    is renamed onto ``path``, on failure removed.  An ``OSError`` (disk full, …) becomes
    :func:`write_failed`'s one-line error."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as err:
        raise write_failed(path, err) from None
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path, text: str) -> Path:
    with atomic(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_tables(out, tables: dict) -> list[Path]:
    """``<name>.parquet`` and ``<name>.csv`` of every table, each written atomically."""
    paths = []
    for name, df in tables.items():
        for suffix, writer in ((".parquet", df.to_parquet), (".csv", df.to_csv)):
            path = Path(out) / f"{name}{suffix}"
            with spans.span("i/o"), atomic(path) as tmp:
                writer(tmp, index=False)
            paths.append(path)
    return paths


def read_tables(out, names) -> dict:
    """The saved tables ``names`` of a finished run in ``out``; one error naming what is missing."""
    import pandas as pd

    missing = [n for n in names if not (Path(out) / f"{n}.parquet").exists()]
    if missing:
        raise ConfigError(
            f"out: {str(out)!r} has no {missing[0]}.parquet; run the lab first (figures are drawn "
            "from saved tables only)"
        )
    with spans.span("i/o"):
        return {n: pd.read_parquet(Path(out) / f"{n}.parquet") for n in names}
