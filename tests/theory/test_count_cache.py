"""The disk cache of count tables (gpolab.theory.count_cache): a loaded table is the built one
bit for bit, a tampered, corrupt or stale file is rebuilt, other code misses, and off is off."""

import types

import jax
import numpy as np
import pytest

from gpolab import estimators
from gpolab.theory import count_cache
from gpolab.theory import exact as ex

BUILTIN = [n for n, e in estimators.REGISTRY.items() if not e.user]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache folder ``cache.path``; ``cache.builds``: the tables evaluated, not loaded."""
    folder = tmp_path / "count-tables"
    monkeypatch.setenv("GPOLAB_COUNT_CACHE", str(folder))
    runner, calls = ex._runner, []

    def counting(fn, dtype):
        calls.append(fn)
        return runner(fn, dtype)

    monkeypatch.setattr(ex, "_runner", counting)
    return types.SimpleNamespace(path=folder, builds=calls)


def files(cache):
    return sorted(cache.path.glob("*.npz"))


def fields(t):
    return (t.a1.tobytes(), t.a0.tobytes(), t.G, t.name, t.ok, t.reason, t.dtype)


def same(a, b):
    """Equal tables, bit for bit."""
    return fields(a) == fields(b)


@pytest.mark.parametrize("G", [3, 16])
def test_every_builtin_table_loads_bit_for_bit_without_evaluating(cache, monkeypatch, G):
    names = [n for n in BUILTIN if estimators.minimum_G(estimators.bound(n)) <= G]
    table = lambda name: ex._registry_table(name, G, False, 7.0, ())  # noqa: E731  (no lru)
    monkeypatch.setenv("GPOLAB_COUNT_CACHE", "")
    fresh = {n: table(n) for n in names}
    assert sum(t.ok for t in fresh.values()) >= 15 and files(cache) == []
    monkeypatch.setenv("GPOLAB_COUNT_CACHE", str(cache.path))
    for name in names:  # stored (entries that share a computation share a file)
        assert same(table(name), fresh[name]), name
    assert len(files(cache)) >= 10
    cache.builds.clear()
    for name in names:  # loaded
        assert same(table(name), fresh[name]), name
    assert cache.builds == []  # the others are refused by the registry's record, unevaluated


def test_a_table_evaluated_on_two_shapes_round_trips(cache):
    G = 200  # G > 160: count_table's copies check runs a second shape, part of the key
    fresh = ex.count_table(lambda r: r - r.mean(-1, keepdims=True), G)
    loaded = ex.count_table(lambda r: r - r.mean(-1, keepdims=True), G)
    assert same(loaded, fresh) and len(cache.builds) == 1


def _resave(path, **fields):
    with np.load(path) as f:
        data = {k: f[k] for k in f.files}
    np.savez_compressed(path, **{**data, **fields})


def _tamper_a1(path):
    with np.load(path) as f:
        a1 = f["a1"].copy()
    a1[0] += 1e-3
    _resave(path, a1=a1)  # the old checksum kept


TAMPER = {
    "changed value": _tamper_a1,
    "nan value": lambda p: _resave(p, a1=np.full(6, np.nan)),
    "other key": lambda p: _resave(p, key=np.array("an older estimator")),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[:100]),
    "not an npz": lambda p: p.write_text("garbage"),
    "empty": lambda p: p.write_bytes(b""),
}


@pytest.mark.parametrize("how", TAMPER)
def test_a_tampered_or_corrupt_file_is_rebuilt(cache, how):
    fn = estimators.get("grpo")
    fresh = ex.count_table(fn, 6)
    (path,) = files(cache)
    TAMPER[how](path)
    again = ex.count_table(fn, 6)
    assert same(again, fresh) and len(cache.builds) == 2  # built again, not trusted
    assert same(ex.count_table(fn, 6), fresh) and len(cache.builds) == 2  # file replaced


def baseline(r):
    return r.mean(-1, keepdims=True)


def estimator(r):
    return r - baseline(r)  # a global it calls: changing `baseline` must miss


def test_changed_code_misses(cache, monkeypatch):
    G = 5
    first = ex.count_table(estimator, G)
    assert same(ex.count_table(estimator, G), first) and len(cache.builds) == 1
    # the function it calls changed (same name, same module): another key, the new numbers
    monkeypatch.setitem(globals(), "baseline", lambda r: 0.5 * r.mean(-1, keepdims=True))
    jax.clear_caches()  # as in a new process: jit keeps a function's old trace in this one
    changed = ex.count_table(estimator, G)
    assert len(cache.builds) == 2 and len(files(cache)) == 2
    np.testing.assert_allclose(changed.a1, 1 - 0.5 * (np.arange(G) + 1) / G, rtol=1e-15)
    # a constant one ulp apart, and captured arrays one ulp apart
    near = np.nextafter(0.25, 1.0)
    for fn in (lambda r: r - 0.25, lambda r: r - near):
        ex.count_table(fn, G)
    assert len(cache.builds) == 4 and len(files(cache)) == 4
    for c in (np.full((1, 1), 0.25), np.full((1, 1), near)):
        ex.count_table(lambda r, c=c: r - r.mean(-1, keepdims=True) * c, G)
    assert len(cache.builds) == 6 and len(files(cache)) == 6
    # a re-registered built-in's helper: the registry path misses too
    grpo = ex.count_table(ex.advantage_fn(*estimators.bind("grpo", {}), {}), G)
    std = estimators.core._std
    monkeypatch.setattr(estimators.core, "_std", lambda x, ddof, axis: 2 * std(x, ddof, axis))
    jax.clear_caches()
    halved = ex.count_table(ex.advantage_fn(*estimators.bind("grpo", {}), {}), G)
    assert len(cache.builds) == 8 and len(files(cache)) == 8
    assert np.all(halved.a1[:-1] < grpo.a1[:-1])  # a1[G - 1]: a flat group, 0


def test_untraceable_effectful_and_failed_tables_are_not_stored(cache):
    G = 4
    numpy_fn = lambda r: np.asarray(r) - np.mean(np.asarray(r), -1, keepdims=True)  # noqa: E731

    def effectful(r):
        jax.debug.callback(lambda x: None, r)
        return r - r.mean(-1, keepdims=True)

    def calls_back(r):  # the trace shows the callback's name, not its code
        host = lambda x: np.asarray(x) - np.mean(np.asarray(x), -1, keepdims=True)  # noqa: E731
        return jax.pure_callback(host, jax.ShapeDtypeStruct(r.shape, r.dtype), r)

    for fn in (numpy_fn, effectful, calls_back) * 2:
        assert ex.count_table(fn, G).ok
    assert not ex.count_table(lambda r: r - r.mean(), G, strict=False).ok  # batch-coupled
    assert not ex.count_table(lambda r: r - r.mean(), G, strict=False).ok
    assert files(cache) == [] and len(cache.builds) == 8


def test_the_cache_folder_and_off(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("GPOLAB_COUNT_CACHE", raising=False)
    monkeypatch.delenv("GPOLAB_CACHE_DIR", raising=False)
    assert count_cache.directory() == tmp_path / "home" / ".cache" / "gpolab" / "count-tables"
    monkeypatch.setenv("GPOLAB_CACHE_DIR", str(tmp_path / "jax" / "xla"))  # beside the XLA cache
    assert count_cache.directory() == tmp_path / "jax" / "count-tables"
    monkeypatch.setenv("GPOLAB_COUNT_CACHE", str(tmp_path / "mine"))  # the specific one wins
    assert count_cache.directory() == tmp_path / "mine"
    monkeypatch.setenv("GPOLAB_CACHE_DIR", "")
    assert count_cache.directory() == tmp_path / "mine"
    monkeypatch.delenv("GPOLAB_COUNT_CACHE")
    assert count_cache.directory() is None  # no disk caches at all
    monkeypatch.setenv("GPOLAB_CACHE_DIR", str(tmp_path / "jax" / "xla"))
    monkeypatch.setenv("GPOLAB_COUNT_CACHE", "")
    assert count_cache.directory() is None
    fn = estimators.get("loo")
    assert count_cache.key(fn, [ex.canonical_groups(4)], "float64", ex.__file__) is None
    first, second = ex.count_table(fn, 4), ex.count_table(fn, 4)
    assert same(first, second) and first.ok
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_an_unwritable_folder_only_costs_time(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("GPOLAB_COUNT_CACHE", str(blocker / "count-tables"))
    t = ex.count_table(estimators.get("loo"), 4)
    assert t.ok and sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]
