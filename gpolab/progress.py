"""Progress of a run: a tqdm bar on a terminal, plain log lines otherwise (CI, pipes, files)."""

from __future__ import annotations

import sys
import time


class Progress:
    """``with Progress(total, name) as p: p.update(n, note)``; ``p.skip(n)`` for cached cells."""

    def __init__(self, total: int, name: str, stream=None):
        self.total, self.name, self.done = total, name, 0
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()
        self.bar = None
        if getattr(self.stream, "isatty", lambda: False)():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=name, unit="cell", file=self.stream)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
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
