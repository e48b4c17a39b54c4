"""gpolab.kit.store: keys, the config hash, and resume (single cells, units of several cells,
job-array
shares, multi-process agreement, interruption)."""

from __future__ import annotations

import pytest

from gpolab.kit import store as st
from gpolab.labs.tree import lab as tree
from tests.runner.watch import Watch


def test_cell_key_is_the_digest_labs_have_always_stored():
    # the sweep's key layout; the literal pins the hash (a changed digest would orphan every
    # stored cell of every user)
    parts = {"schema": 3, "settings": {"seeds": 10}, "row": {"estimator": "loo", "G": 4}}
    assert st.cell_key("sweep", **parts) == st.digest({"lab": "sweep", **parts})
    assert st.digest({"a": 1, "b": [1, 2]}) == st.digest({"b": [1, 2], "a": 1})
    assert st.digest({"a": 1}) == "f9d86028c6e0d64e"


def test_config_hash_ignores_output_folder_chunk_and_sharding_only():
    cfg = tree.Config()
    assert st.config_hash(cfg) == st.config_hash(cfg.replace(out="elsewhere", chunk=7))
    assert st.config_hash(cfg) != st.config_hash(cfg.replace(seeds=cfg.seeds + 1))


def _rows(i):
    return [{"cell": i, "value": float(i * i)}]


def test_resume_computes_missing_cells_once(tmp_path):
    store, keys = st.Store(tmp_path), [f"k{i}" for i in range(4)]
    calls, watch = [], Watch()
    df = st.resume(store, keys, lambda i: calls.append(i) or _rows(i), progress=watch)
    assert calls == [0, 1, 2, 3] and watch.skipped == [] and len(watch.notes) == 4
    assert df["value"].tolist() == [0.0, 1.0, 4.0, 9.0]
    assert set(df["cell_key"]) == set(keys)
    store.path("k2").unlink()  # one cell lost: only it is recomputed
    calls.clear()
    df = st.resume(store, keys, lambda i: calls.append(i) or _rows(i), progress=watch)
    assert calls == [2] and watch.skipped == [3] and df["cell"].tolist() == [0, 1, 2, 3]


def test_resume_without_store_computes_everything():
    df = st.resume(None, ["a", "b"], _rows)
    assert df["cell"].tolist() == [0, 1]


def test_an_interrupted_run_keeps_every_finished_cell(tmp_path):
    store, keys = st.Store(tmp_path), ["a", "b", "c"]

    def compute(i):
        if i == 2:
            raise KeyboardInterrupt
        return _rows(i)

    with pytest.raises(KeyboardInterrupt):
        st.resume(store, keys, compute)
    assert store.has("a") and store.has("b") and not store.has("c")
    assert store.count() == 2 and not list(store.cells.glob("*.tmp*"))


def _pairs(idx):
    """Units of two cells (0,1), (2,3), (4,5) restricted to ``idx``, as a lab's grouping is."""
    idx = sorted(idx)
    for u in range(3):
        unit = [i for i in idx if i // 2 == u]
        if unit:
            yield unit


def test_units_of_several_cells_are_computed_together(tmp_path):
    store, keys = st.Store(tmp_path), [f"k{i}" for i in range(6)]
    units = []
    df = st.resume(
        store, keys, lambda unit: units.append(unit) or [_rows(i) for i in unit], group=_pairs
    )
    assert units == [[0, 1], [2, 3], [4, 5]] and df["cell"].tolist() == list(range(6))
    store.path("k3").unlink()
    units.clear()
    st.resume(
        store, keys, lambda unit: units.append(unit) or [_rows(i) for i in unit], group=_pairs
    )
    assert units == [[3]]  # only the missing cell of its unit


def test_shares_cover_every_cell_once_and_never_split_a_unit(tmp_path):
    store, keys = st.Store(tmp_path), [f"k{i}" for i in range(6)]
    seen = []
    compute = lambda unit: seen.append(unit) or [_rows(i) for i in unit]  # noqa: E731
    share0 = st.resume(store, keys, compute, group=_pairs, share=(0, 2))
    share1 = st.resume(store, keys, compute, group=_pairs, share=(1, 2))
    assert share0["cell"].tolist() == [0, 1, 4, 5] and share1["cell"].tolist() == [2, 3]
    assert seen == [[0, 1], [4, 5], [2, 3]]  # whole units, each once
    full = st.resume(store, keys, lambda unit: pytest.fail("recomputed"), group=_pairs)
    assert full["cell"].tolist() == list(range(6))  # the final run only assembles


def test_agreement_decides_the_pending_cells(tmp_path):
    store, keys = st.Store(tmp_path), ["a", "b", "c"]
    calls = []
    st.resume(
        store,
        keys,
        lambda i: calls.append(i) or _rows(i),
        agree=lambda pending, n: pending | {0} if n == 3 else pending,
    )
    assert calls == [0, 1, 2]
    calls.clear()  # every cell stored; process 0 says cell 1 is still pending: it is recomputed
    st.resume(store, keys, lambda i: calls.append(i) or _rows(i), agree=lambda p, n: {1})
    assert calls == [1]


def test_a_cell_another_store_finished_is_copied_not_computed(tmp_path):
    results = tmp_path / "results"
    first = st.Store(results / "a", peers=results)
    st.resume(first, ["k0", "k1"], _rows)
    second, calls, watch = st.Store(results / "b", peers=results), [], Watch()
    df = st.resume(second, ["k1", "k2"], lambda i: calls.append(i) or _rows(i), progress=watch)
    assert calls == [1] and watch.skipped == [1] and second.adopted == 1  # k1 copied, k2 computed
    assert df["cell_key"].tolist() == ["k1", "k2"]  # k1: the first store's row (cell 1)
    assert second.path("k1").read_bytes() == first.path("k1").read_bytes()
    assert not list((results / "b" / "cells").glob(".*"))  # no temporary file left
    # without peers (a lab run on its own, or --fresh) nothing is copied
    alone, calls = st.Store(results / "c"), []
    st.resume(alone, ["k1"], lambda i: calls.append(i) or _rows(i))
    assert calls == [0] and alone.adopted == 0


def test_a_unit_a_peer_finishes_meanwhile_is_not_computed(tmp_path):
    results = tmp_path / "results"
    peer, mine = st.Store(results / "a"), st.Store(results / "b", peers=results)
    calls, watch = [], Watch()

    def compute(i):  # while this run computes cell 0, the peer finishes cell 1
        calls.append(i)
        if i == 0:
            st.resume(peer, ["k1"], lambda j: [{"cell": 1, "value": 1.0}])
        return _rows(i)

    df = st.resume(mine, ["k0", "k1"], compute, progress=watch)
    assert calls == [0] and watch.skipped == [1] and df["cell"].tolist() == [0, 1]
    # a multi-process run (agree) computes what its processes agreed on, copied or not
    calls.clear()
    other = st.Store(results / "c", peers=results)
    st.resume(other, ["k0", "k9"], lambda i: calls.append(i) or _rows(i), agree=lambda p, n: p)
    assert calls == [1]  # k0 copied before the agreement, k9 computed
