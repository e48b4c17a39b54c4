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
