"""A timing breakdown of a run: compile, count tables, Monte Carlo, figures, I/O and the rest
(analysis).

:class:`Recorder` listens to the library's spans (:mod:`gpolab.spans`) and to JAX's
compile events (tracing, lowering, and backend compilation or a persistent-cache retrieval,
``jax.monitoring``); a compile event is charged to "compile", never to the span it happened in,
and a nested span's time to the nested span only, so the phases add up to the wall time.
``with recorder.part() as part:`` measures one part of a run (an experiment) and gives its
``PHASES`` seconds, "analysis" being the wall time no phase claimed (the lab's tables, the
claims' statistics, Python).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time

from gpolab import spans

PHASES = ("compile", "count tables", "monte carlo", "figures", "i/o", "analysis")
COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",  # includes a persistent-cache retrieval
)


@dataclasses.dataclass
class _Open:
    name: str
    start: float
    compile_at_start: float
    children: float = 0.0  # exclusive seconds of spans nested in this one


class Recorder:
    """Seconds per phase since :meth:`start` (see the module docstring)."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self._stack: list[_Open] = []
        self._on = False

    def start(self) -> Recorder:
        import jax

        if not self._on:
            jax.monitoring.register_event_duration_secs_listener(self._event)
            spans.listen(self)
            self._on = True
        return self

    def stop(self) -> None:
        import jax

        if self._on:
            spans.listen(None)
            jax.monitoring.unregister_event_duration_listener(self._event)
            self._on = False

    def _event(self, name: str, secs: float, **kwargs) -> None:
        if name in COMPILE_EVENTS:
            self.seconds["compile"] += secs

    def enter(self, name: str, t: float) -> None:
        self._stack.append(_Open(name, t, self.seconds["compile"]))

    def exit(self, name: str, t: float) -> None:
        top = self._stack.pop()
        own = (t - top.start) - (self.seconds["compile"] - top.compile_at_start) - top.children
        self.seconds[name] = self.seconds.get(name, 0.0) + own
        if self._stack:  # the parent excludes this span's own time (its compile, too: above)
            self._stack[-1].children += own

    @contextlib.contextmanager
    def part(self):
        """The seconds of each phase spent inside the block (``analysis``: the rest of its wall
        time), filled in when the block ends."""
        before = dict(self.seconds)
        out = dict.fromkeys(("seconds", *PHASES), 0.0)
        t0 = time.perf_counter()
        try:
            yield out
        finally:
            wall = time.perf_counter() - t0
            for phase in PHASES[:-1]:
                out[phase] = self.seconds.get(phase, 0.0) - before.get(phase, 0.0)
            out["seconds"] = wall
            out["analysis"] = max(wall - sum(out[p] for p in PHASES[:-1]), 0.0)
