"""The timing breakdown (issue 44): spans the library marks, JAX's compile events charged to
"compile" and never to the span they happen in, nested spans exclusive, the phases adding up to
the wall time; `gpolab claims --timings` gives one row per experiment and a total.  A fake clock
makes the arithmetic exact (no timed test)."""

import jax
import jax.numpy as jnp
import pytest

from gpolab import spans
from gpolab.kit import output, timings
from gpolab.labs.claims import lab as claims
from gpolab.runner.cli import main

COMPILE = timings.COMPILE_EVENTS[-1]


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t

    def advance(self, s):
        self.t += s


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(spans.time, "perf_counter", c)
    monkeypatch.setattr(timings.time, "perf_counter", c)
    return c


def test_nested_spans_and_compile_are_exclusive_and_add_up_to_the_wall(clock):
    rec = timings.Recorder().start()
    try:
        with rec.part() as part:
            clock.advance(1.0)  # analysis: no span
            with spans.span("monte carlo"):
                clock.advance(2.0)
                clock.advance(0.5)
                rec._event(COMPILE, 0.5)  # a compile inside the Monte Carlo span
                with spans.span("i/o"):
                    clock.advance(0.25)
                with spans.span("count tables"):
                    clock.advance(0.125)
                    rec._event(COMPILE, 0.0625)  # compile inside a nested span
                    clock.advance(0.0625)
            rec._event("/jax/compilation_cache/compile_time_saved_sec", 9.0)  # not elapsed time
    finally:
        rec.stop()
    assert part == {
        "seconds": 3.9375,
        "compile": 0.5625,
        "count tables": 0.125,
        "monte carlo": 2.0,
        "figures": 0.0,
        "i/o": 0.25,
        "analysis": 1.0,
    }
    assert sum(part[p] for p in timings.PHASES) == pytest.approx(part["seconds"])


def test_without_a_listener_a_span_costs_nothing_and_records_nothing():
    assert spans._LISTENER is None
    with spans.span("monte carlo"):
        pass
    rec = timings.Recorder()
    assert all(v == 0.0 for v in rec.seconds.values())


def test_real_compile_events_are_charged_to_compile_not_to_the_span():
    rec = timings.Recorder().start()
    try:
        with rec.part() as part:
            with spans.span("monte carlo"):
                jax.jit(lambda x: jnp.tanh(x) * 3.25 + 0.125)(jnp.ones(7)).block_until_ready()
    finally:
        rec.stop()
    assert part["compile"] > 0 and part["monte carlo"] >= 0
    assert part["compile"] + part["monte carlo"] <= part["seconds"] + 1e-9
    assert spans._LISTENER is None  # stop() removed the listener


def test_claims_timings_give_one_row_per_experiment_and_a_total(tmp_path, capsys):
    exp = tmp_path / "experiments"
    exp.mkdir()
    (exp / "small.toml").write_text(
        'lab = "sweep"\n[sweep]\nestimators = ["loo", "oracle"]\nG = [4]\nseeds = 500\n'
        "prompts = 4\nactions = 8\n"
    )
    ledger = tmp_path / "ledger.toml"
    ledger.write_text(
        "".join(
            f'[[claim]]\nid = "{i}"\npaper = "U"\nclaim = "loo is within 90% of the oracle."\n'
            'experiment = "small"\nstatistic = "oracle_match"\n'
            'rules = ["loo_over_oracle_at_max_G <= 1.9"]\n'
            for i in ("A", "B")
        )
    )
    base = ["claims", "--ledger", str(ledger), "--experiments", str(exp)]
    base += ["--results", str(tmp_path / "results"), "--out", str(tmp_path / "out")]
    assert main([*base, "--timings", "--jobs", "1"]) == 0
    assert "Where the time went" in capsys.readouterr().out
    t = output.read_tables(tmp_path / "out", claims.TABLES)["timings"]
    assert list(t["experiment"]) == ["small", "total", "wall (1 worker process)"]
    assert t["seconds_s"].iloc[2] >= t["seconds_s"].iloc[0] > 0  # wall: the whole run
    t = t.iloc[:2]
    assert t["ran"].tolist() == [True, True]
    assert t["claims"].iloc[0] == "A,B"
    phases = [c for c in t if c.endswith("_s") and c != "seconds_s"]
    assert len(phases) == len(timings.PHASES)
    assert t[phases].sum(axis=1).to_numpy() == pytest.approx(t["seconds_s"].to_numpy())
    assert t["monte_carlo_s"].iloc[0] > 0 and t["io_s"].iloc[0] > 0
    assert main([*base, "--timings"]) == 0  # saved tables: read, not run
    t = output.read_tables(tmp_path / "out", claims.TABLES)["timings"]
    assert not t["ran"].iloc[0] and t["monte_carlo_s"].iloc[0] == 0
    assert main(base) == 0  # no flag: an empty timings table
    assert output.read_tables(tmp_path / "out", claims.TABLES)["timings"].empty
