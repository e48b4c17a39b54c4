"""Progress of a run: a tqdm bar on a terminal, plain log lines otherwise (CI, pipes, files).

Inside a long cell the Monte Carlo engine reports its seeds through :class:`Clock`: a line (or
the bar's note) every :data:`REPORT_S` seconds with the seeds done and the time left, and a cell
projected to take longer than :data:`MAX_SECONDS` (``--max-hours``) is refused after its first
executable call, with the estimate.
"""

from __future__ import annotations

import sys
import time

MAX_SECONDS = 24 * 3600.0  # longest projected cell a run accepts (--max-hours; 0: no limit)
REPORT_S = 10.0  # seconds between progress lines inside one cell
_ACTIVE: list = []  # the Progress of the run in flight (innermost last)
PLAIN = False  # plain lines even on a terminal (worker processes sharing one: no bars)


class Progress:
    """``with Progress(total, name) as p: p.update(n, note)``; ``p.skip(n)`` for cached cells."""

    def __init__(self, total: int, name: str, stream=None):
        self.total, self.name, self.done = total, name, 0
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()
        self.bar = None
        if not PLAIN and getattr(self.stream, "isatty", lambda: False)():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=name, unit="cell", file=self.stream)

    def __enter__(self):
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc):
        _ACTIVE.remove(self)
        if self.bar is not None:
            self.bar.close()

    def skip(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        else:
            self._line(f"{n} cells already finished (resuming)")

    def update(self, n: int = 1, note: str = "") -> None:
        self.done += n
        if self.bar is not None:
            self.bar.set_postfix_str(note, refresh=False)
            self.bar.update(n)
            return
        elapsed = time.perf_counter() - self.start
        self._line(f"{note}  (elapsed {elapsed:.1f} s)")

    def _line(self, text: str) -> None:
        print(f"[{self.name}] {self.done}/{self.total} {text}", file=self.stream, flush=True)


class Silent:
    """The progress of a run nobody watches (a test, a library call): every call does nothing, so
    code that reports progress never asks whether someone listens."""

    def skip(self, n: int) -> None:
        pass

    def update(self, n: int = 1, note: str = "") -> None:
        pass


SILENT = Silent()


def duration(seconds: float) -> str:
    """``seconds`` in the largest sensible unit (s, min, h, days, years)."""
    for unit, size in (("years", 365.25 * 86400), ("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


class Clock:
    """The seeds of one cell (``total``): ``tick(done)`` after each executable call (blocked
    until its results exist).  After the first call it projects the cell's time from the
    measured rate and refuses (:class:`gpolab.validate.ConfigError`) a projection over
    :data:`MAX_SECONDS`; then it reports through the active :class:`Progress` every
    :data:`REPORT_S` seconds."""

    def __init__(self, total: int):
        self.total = total
        self.start = self.last = time.perf_counter()
        self.calls = 0

    def tick(self, done: int) -> None:
        self.calls += 1
        now = time.perf_counter()
        elapsed = now - self.start
        left = elapsed / max(done, 1) * (self.total - done)
        if self.calls == 1 and MAX_SECONDS and elapsed + left > MAX_SECONDS:
            from gpolab.validate import ConfigError

            raise ConfigError(
                f"seeds: got {self.total:,}; one cell would take about "
                f"{duration(elapsed + left)} ({done / max(elapsed, 1e-9):.3g} seeds/s measured on "
                f"its first {done:,}); allowed: cells under {duration(MAX_SECONDS)} (fewer seeds "
                "or smaller sizes; --max-hours raises the limit)"
            )
        if not _ACTIVE or done >= self.total or now - self.last < REPORT_S:
            return
        self.last = now
        p = _ACTIVE[-1]
        text = (
            f"cell {p.done + 1}/{p.total}: {done:,}/{self.total:,} seeds, "
            f"{duration(elapsed)} elapsed, about {duration(left)} left"
        )
        if p.bar is not None:
            p.bar.set_postfix_str(text, refresh=True)
        else:
            print(f"[{p.name}] {text}", file=p.stream, flush=True)
