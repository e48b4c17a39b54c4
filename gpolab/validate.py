"""Plain-Python configuration checks, run before anything is traced.

Every check raises :class:`ConfigError` with one line that names the field and what is allowed,
so the CLI can print it and exit non-zero before any compilation.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field and the allowed values."""


def choice(field: str, value, allowed: Iterable) -> None:
    allowed = list(allowed)
    if value not in allowed:
        raise ConfigError(f"{field}: got {value!r}; allowed: {', '.join(map(str, allowed))}")


def integer(field: str, value, minimum: int = 1, maximum: int | None = None) -> None:
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    if not ok or value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ConfigError(f"{field}: got {value!r}; allowed: an integer {bound}")


def integers(field: str, values: Sequence, minimum: int = 1) -> None:
    if len(values) == 0:
        raise ConfigError(f"{field}: got an empty list; allowed: one or more integers >= {minimum}")
    for v in values:
        integer(field, v, minimum)


def real(
    field: str, value, low: float = -math.inf, high: float = math.inf, open_low: bool = False
) -> None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        x = math.nan
    bad_low = x <= low if open_low else x < low
    if not math.isfinite(x) or bad_low or x > high:
        lo = "(" if open_low else "["
        raise ConfigError(f"{field}: got {value!r}; allowed: a finite number in {lo}{low}, {high}]")


def finite_array(field: str, value, low: float = -math.inf, high: float = math.inf) -> None:
    a = np.asarray(value, dtype=float)
    if not np.all(np.isfinite(a)) or np.any(a < low) or np.any(a > high):
        raise ConfigError(
            f"{field}: has non-finite or out-of-range entries; allowed: finite values in "
            f"[{low}, {high}]"
        )


MAX_SEEDS = 1 << 32  # seed indices are uint32 (engine.chunk_inputs): more would repeat seeds
MAX_G = 8192  # the estimator checks evaluate all G + 1 outcome counts of a group: O(G^2) memory


def at_most(field: str, values, maximum: int, why: str) -> None:
    """Every value of ``values`` (one value or a list) is <= ``maximum``; the error says ``why``."""
    for v in values if isinstance(values, (list, tuple)) else (values,):
        if isinstance(v, (int, np.integer)) and v > maximum:
            raise ConfigError(f"{field}: got {v!r}; allowed: at most {maximum:,} ({why})")


def seeds(field: str, value, minimum: int = 1) -> None:
    """A seed count: an integer in [minimum, MAX_SEEDS] (seed indices are 32-bit)."""
    integer(field, value, minimum)
    at_most(field, value, MAX_SEEDS, "seed indices are 32-bit; more would repeat seeds")


def run_sizes(cfg, min_seeds: int = 1, min_chunk: int = 0) -> None:
    """A Monte Carlo config's ``seeds`` (at least ``min_seeds``, :func:`seeds`), ``chunk`` (at
    least ``min_chunk``) and master ``seed`` (>= 0), in that order."""
    seeds("seeds", cfg.seeds, min_seeds)
    integer("chunk", cfg.chunk, min_chunk)
    integer("seed", cfg.seed, 0)


def group_sizes(field: str, values) -> None:
    """Group sizes up to :data:`MAX_G` (checked before the estimators' O(G²) checks)."""
    at_most(field, values, MAX_G, "the estimator checks evaluate every outcome count of a group")


MAX_TREE_LEAVES = 1 << 21  # K·M of one tree (the tree lab's chunk holds about this many leaves)


def tree_leaves(Ks: Sequence, Ms: Sequence) -> None:
    """Every tree K·M of the grid ``Ks`` × ``Ms`` has at most :data:`MAX_TREE_LEAVES` leaves.
    The engine never splits a tree across its calls, and a run's time is projected from its
    first call; a larger tree makes that one call minutes long and gigabytes large, with no
    progress line and no Ctrl-C until it ends (issue 40), so it is refused before any compiling."""
    for K in Ks:
        for M in Ms:
            if isinstance(K, int) and isinstance(M, int) and K * M > MAX_TREE_LEAVES:
                raise ConfigError(
                    f"K: got {K!r} with M = {M!r} ({K * M:,} leaves per tree); allowed: K*M <= "
                    f"{MAX_TREE_LEAVES:,} leaves per tree (one tree is one call of the engine, "
                    "which must stay short for the run's time to be projected from it)"
                )


def available_bytes() -> int | None:
    """Memory this process can still use: ``MemAvailable`` of /proc/meminfo (Linux), else the
    physical pages the OS reports available, else None (unknown: no memory check)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    import os

    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def gib(n: float) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def memory(field: str, value, need: float, detail: str) -> None:
    """Refuse a setting whose estimated memory ``need`` (bytes) exceeds what is available."""
    have = available_bytes()
    if have is not None and need > have:
        raise ConfigError(
            f"{field}: got {value!r}; needs about {gib(need)} of memory ({detail}); allowed: "
            f"settings that fit in the {gib(have)} available"
        )


def bracketed(field: str, spec, allowed: str) -> tuple[str, list[tuple[str, str, str]]]:
    """``"NAME"`` or ``"NAME[key=value,...]"`` → (NAME, [(key, "=", raw value), ...]): the one
    parser of this syntax (estimators' options, mismatch corrections' thresholds).  An item
    without ``=`` comes back with an empty separator for the caller to name; a text that is not
    of this shape raises ``{field}: got {spec!r}; allowed: {allowed}``."""
    text = spec.strip() if isinstance(spec, str) else ""
    name, sep, rest = text.partition("[")
    if not name.strip() or "]" in name or (sep and (not rest.endswith("]") or "[" in rest)):
        raise ConfigError(f"{field}: got {spec!r}; allowed: {allowed}")
    if sep and "]" in rest[:-1]:
        raise ConfigError(f"{field}: got {spec!r}; allowed: {allowed}")
    items = [s.strip() for s in rest[:-1].split(",")] if sep else []
    return name.strip(), [tuple(p.strip() for p in i.partition("=")) for i in items if i]


def nonempty(field: str, values) -> None:
    """A list setting with at least one value."""
    if len(values) == 0:
        raise ConfigError(f"{field}: got an empty list; allowed: one or more values")
