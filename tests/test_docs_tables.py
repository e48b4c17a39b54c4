"""docs/tables.md documents every column the labs write: tiny runs of each lab (with a results
store, as the CLI runs them, so the store's provenance columns are there) and every column of
every saved table looked up in the page's ``### lab/table`` sections."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpolab.kit import output
from gpolab.kit.store import Store
from gpolab.labs.allocate import lab as allocate
from gpolab.labs.chi2 import lab as chi2
from gpolab.labs.curvature import lab as curvature
from gpolab.labs.groupsize import lab as groupsize
from gpolab.labs.mismatch import lab as mismatch
from gpolab.labs.offpolicy import lab as offpolicy
from gpolab.labs.plan import lab as plan
from gpolab.labs.shaped import lab as shaped
from gpolab.labs.stdnorm import lab as stdnorm
from gpolab.labs.sweep import lab as sweep
from gpolab.labs.tree import lab as tree
from gpolab.labs.zoo import lab as zoo

PAGE = Path(__file__).resolve().parents[1] / "docs" / "tables.md"
HEADING = re.compile(r"^### (\w+/\w+)\s*$", re.M)
INCLUDE = re.compile(r"the columns of `(\w+/\w+)`")


def sections(text: str) -> dict[str, str]:
    """``lab/table`` → the text under its heading, up to the next heading."""
    parts = re.split(r"^(#{2,3} .*)$", text, flags=re.M)
    out, name = {}, None
    for part in parts:
        head = HEADING.match(part)
        if head:
            name = head.group(1)
            out[name] = ""
        elif part.startswith("#"):
            name = None
        elif name is not None:
            out[name] += part
    return out


def documented(text: str) -> dict[str, set[str]]:
    """``lab/table`` → its column names: the backticked names in the first cell of each table
    row, plus those of the sections it says it includes ("the columns of `x/y`")."""
    secs = sections(text)
    own = {}
    for name, body in secs.items():
        rows = [line.split("|")[1] for line in body.splitlines() if line.startswith("| `")]
        own[name] = {c for cell in rows for c in re.findall(r"`([^`]+)`", cell)}

    def closure(name: str, seen: frozenset = frozenset()) -> set[str]:
        cols = set(own[name])
        for inc in INCLUDE.findall(secs[name]):
            assert inc in secs, f"{name} includes unknown section {inc}"
            if inc not in seen:
                cols |= closure(inc, seen | {name})
        return cols

    return {name: closure(name) for name in secs}


DOCS = documented(PAGE.read_text(encoding="utf-8"))


def saved(lab, cfg, out: Path) -> dict[str, list[str]]:
    """Run ``lab`` with a store in ``out`` and write its tables as the CLI does (figures left
    out), then return each saved table's columns."""
    cfg = cfg.replace(out=str(out))
    tables = lab.run(cfg, store=Store(output.prepare(out)))
    output.write_tables(out, tables)
    return {p.stem: list(pd.read_parquet(p).columns) for p in sorted(out.glob("*.parquet"))}


def assert_documented(lab_name: str, tables: dict[str, list[str]]) -> None:
    assert tables, f"{lab_name}: no table saved"
    for table, columns in tables.items():
        key = f"{lab_name}/{table}"
        assert key in DOCS, f"docs/tables.md has no section ### {key}"
        missing = [c for c in columns if c not in DOCS[key]]
        assert not missing, f"{key}: columns not in docs/tables.md: {missing}"


# (lab, settings): configs are built inside the tests, so a renamed setting fails its case only
RUNS = {
    "sweep-bandit": (sweep, dict(estimators=("loo", "grpo"), G=(2, 4), seeds=200)),
    "sweep-dynamic": (
        sweep,
        dict(estimators=("loo",), G=(4,), B=2, seeds=100, dynamic_sampling=True),
    ),
    "sweep-tree": (sweep, dict(env="tree", K=(2,), M=(2,), seeds=100)),
    "groupsize": (groupsize, dict(N=(8,), seeds=200)),
    "curvature": (curvature, dict(thetas=4, prompts=4, block=2)),
    "shaped": (
        shaped,
        dict(shaping_weight=(0.0, 0.3), seeds=64, train_seeds=4, steps=4, every=2, prompts=3),
    ),
    "offpolicy": (
        offpolicy,
        dict(
            prompts=3,
            actions=4,
            seeds=32,
            eta=(2.0, 8.0),
            m=(1, 2),
            staleness=(0, 1),
            ratio=("token", "cispo"),
            clip=("dual",),
            kl=("none", "k2"),
        ),
    ),
    "mismatch": (
        mismatch,
        dict(
            prompts=3,
            batch=2,
            G=2,
            T=(4,),
            mismatch=("noise:0.2",),
            correction=("none", "trl/sequence_mask"),
            seeds=32,
        ),
    ),
    "allocate": (
        allocate,
        dict(
            prompts=8, actions=4, budget=(16,), cap=16, seeds=32, runs=5, steps=4, train_budget=16
        ),
    ),
}
SLOW_RUNS = {
    "zoo": (
        zoo,
        dict(
            env=("bandit",),
            estimators=("loo", "grpo"),
            G=(2,),
            seeds=100,
            kappa_G=(4,),
            kappa_points=3,
        ),
    ),
    "tree-budget-finite": (tree, dict(leaves=8, seeds=200, model="finite", thoughts=8)),
    "tree-budget-loglinear": (
        tree,
        dict(leaves=8, seeds=200, model="loglinear", thoughts=8, overlap=0.5),
    ),
    "chi2": (chi2, dict(estimator=("loo",), seeds=16, n=(10,), chunk=16)),
    "chi2-paired": (
        chi2,
        dict(estimator=("loo", "oracle"), G=(4, 8), paired=True, seeds=16, n=(10,), chunk=16),
    ),
    "stdnorm-arcsin": (
        stdnorm,
        dict(regimes=("arcsin",), arcsin_G=(2, 4), arcsin_draws=20, prompts=4),
    ),
    "stdnorm": (
        stdnorm,
        dict(
            regimes=("admissible",),
            adm_steps=5,
            adm_seeds=2,
            gain_G=(2,),
            G=(2,),
            rho=(0.0,),
            control=False,
            bias_seeds=16,
            prompts=4,
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_quick_run_columns_are_documented(name, tmp_path):
    lab, settings = RUNS[name]
    assert_documented(lab.NAME, saved(lab, lab.Config(**settings), tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SLOW_RUNS))
def test_slow_run_columns_are_documented(name, tmp_path):
    lab, settings = SLOW_RUNS[name]
    assert_documented(lab.NAME, saved(lab, lab.Config(**settings), tmp_path))


@pytest.mark.parametrize("kind", ["binary", "binary-no-norms", "graded"])
def test_plan_columns_are_documented(kind, tmp_path):
    """Small logs: binary with a score-norm proxy and gradient norms at two batch sizes (every
    G* column), the same without norms (the G* bounds) and graded rewards (the
    Dirichlet-multinomial fit)."""
    rng = np.random.default_rng(0)
    steps, prompts, G = 4, 12, 4
    p = rng.beta(1.0, 1.5, prompts)
    half = 0.5 * (kind == "graded")
    rows = [
        {
            "step": s,
            "prompt": f"q{x}",
            "reward": float(rng.random() < p[x]) + half * (g == 0),
            "proxy": float(rng.gamma(2.0)),
        }
        for s in range(steps)
        for x in range(prompts)
        for g in range(G)
    ]
    log = tmp_path / "log.csv"
    pd.DataFrame(rows).to_csv(log, index=False)
    norms = tmp_path / "norms.csv"
    batch = np.repeat([2.0, 8.0], 3)
    pd.DataFrame({"batch": batch, "grad_norm": 1.0 + 1.0 / batch + 0.01 * np.arange(6)}).to_csv(
        norms, index=False
    )
    cfg = plan.Config(
        log=str(log),
        format="table",
        proxy_column="proxy",
        window=2,
        G=(2, 4),
        draws=10,
        estimators=("loo", "grpo"),
        grad_norms=str(norms) if kind == "binary" else "",
    )
    tables = saved(plan, cfg, tmp_path / "out")
    assert_documented(plan.NAME, tables)
    expect = {"binary": "gstar_c1", "binary-no-norms": "gstar_C3_hi", "graded": "model"}[kind]
    assert expect in tables["summary"]


def test_bench_columns_are_documented():
    from gpolab.runner.commands import bench

    missing = [c for c in bench.COLUMNS if c not in DOCS["bench/bench"]]
    assert not missing, f"bench/bench: columns not in docs/tables.md: {missing}"


def test_an_undocumented_column_is_caught():
    with pytest.raises(AssertionError, match="not_a_column"):
        assert_documented("sweep", {"results": ["mse", "not_a_column"]})
    with pytest.raises(AssertionError, match="no section"):
        assert_documented("sweep", {"nope": ["mse"]})


def test_page_parses():
    """Every section lists columns; the provenance section is the store's own list."""
    from gpolab.kit.store import PROVENANCE

    assert all(DOCS.values()), [k for k, v in DOCS.items() if not v]
    assert set(PROVENANCE) <= DOCS["shared/provenance"]
    assert set(DOCS["sweep/results"]) <= DOCS["zoo/results"]
