"""Where a process's time goes: named spans the library marks and a listener the runner installs.

The library marks the phases a timing breakdown separates — ``with spans.span("monte carlo"):``
around the engine's seed-vmapped programs (:func:`gpolab.engine.run`, ``engine.per_seed``,
``engine.train.train``), ``"count tables"`` around a count table's construction — at
no cost when nobody listens (one ``None`` check).  The runner's
:class:`gpolab.kit.timings.Recorder` listens (:func:`listen`) and charges JAX's own compile
events to "compile", apart from the span they happen in.  The library never imports the
runner.
"""

from __future__ import annotations

import contextlib
import time

__all__ = ["listen", "span"]

_LISTENER = None  # an object with enter(name, t) and exit(name, t), or None


def listen(listener) -> None:
    """Install ``listener`` (None: stop listening); one at a time."""
    global _LISTENER
    _LISTENER = listener


@contextlib.contextmanager
def span(name: str):
    """Mark the enclosed code as phase ``name`` (nested spans: the innermost owns the time)."""
    listener = _LISTENER
    if listener is None:
        yield
        return
    listener.enter(name, time.perf_counter())
    try:
        yield
    finally:
        listener.exit(name, time.perf_counter())
