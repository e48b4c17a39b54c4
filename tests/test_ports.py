"""Every published rule gpolab runs has a row in a port table (issue 40), so a new rule cannot land
without one: the registry's built-in estimators, the loss-aggregation modes and TRL's loss types
in docs/ports.md; the allocation rules in docs/allocate.md and the off-policy ratio and KL rules
in docs/offpolicy.md, each under its "## Ports" heading.

A row is a markdown table row whose first cell names the entry in backticks (several names may
share a row); every row has the six columns of docs/ports.md, none empty."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpolab.estimators import aggregation, mismatch, offpolicy, registry
from gpolab.labs.allocate import rules as allocation

DOCS = Path(__file__).resolve().parents[1] / "docs"
COLUMNS = ("entry", "authors' code", "their code", "gpolab", "differences", "depends")


def _section(text: str, heading: str | None) -> str | None:
    """The text under ``## heading`` up to the next level-2 heading (None when absent); the
    whole text for ``heading=None``."""
    if heading is None:
        return text
    m = re.search(rf"^## {re.escape(heading)}[ \t]*$", text, re.M)
    if m is None:
        return None
    end = re.search(r"^## ", text[m.end() :], re.M)
    return text[m.end() : m.end() + end.start() if end else len(text)]


def port_rows(text: str) -> dict[str, list[str]]:
    """Entry name → the cells of its port-table row (header and rule rows skipped)."""
    rows = {}
    for line in text.splitlines():
        if not line.startswith("|") or re.match(r"^\|[\s:|-]+\|$", line):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "entry":
            continue
        for name in re.findall(r"`([^`]+)`", cells[0]):
            rows[name] = cells
    return rows


def _rows_of(page: str, heading: str | None = None) -> dict[str, list[str]] | None:
    section = _section((DOCS / page).read_text(encoding="utf-8"), heading)
    return None if section is None else port_rows(section)


PORTS = _rows_of("ports.md")
BUILT_IN = [n for n, e in registry.REGISTRY.items() if not e.user]


def test_the_row_parser_finds_rows_by_name_and_misses_absent_ones():
    text = (
        "| entry | a | b | c | d | e |\n|---|---|---|---|---|---|\n"
        "| `x/one`, `x/two` | r | s | t | u | v |\n| plain | r | s | t | u | v |\n"
    )
    rows = port_rows(text)
    assert set(rows) == {"x/one", "x/two"}  # the negative control: `plain` names no entry
    assert rows["x/one"][1] == "r" and "x/three" not in rows
    assert _section("## A\nrow\n## Ports\n| `y` |\n## B\n| `z` |\n", "Ports") == "\n| `y` |\n"
    assert _section("## A\n", "Ports") is None


def test_ports_page_has_the_six_columns_and_no_empty_cell():
    text = (DOCS / "ports.md").read_text(encoding="utf-8")
    headers = [ln for ln in text.splitlines() if ln.startswith("| entry |")]
    assert headers, "docs/ports.md has no port table"
    for h in headers:
        assert tuple(c.strip() for c in h.strip().strip("|").split("|")) == COLUMNS
    for name, cells in PORTS.items():
        assert len(cells) == len(COLUMNS) and all(cells), f"{name}: {cells}"


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_built_in_estimator_has_a_port_row(name):
    assert name in PORTS, (
        f"estimator {name} (source: {registry.REGISTRY[name].source}) has no row in docs/ports.md"
    )


@pytest.mark.parametrize("name", registry.FRAMEWORKS)
def test_a_framework_row_names_the_commit_the_registry_names(name):
    """The row's authors'-code cell names the same commit as the entry's ``source``."""
    commits = re.findall(
        r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{8}\b", registry.REGISTRY[name].source
    )
    assert commits, f"{name}: its source names no commit"
    assert any(c in PORTS[name][1] for c in commits), (name, commits, PORTS[name][1])


def test_every_loss_mode_and_trl_loss_type_has_a_port_row():
    for mode in aggregation.LOSS_AGG_MODES:
        assert mode in PORTS, f"loss aggregation mode {mode} has no row in docs/ports.md"
    for loss_type, mode in aggregation.TRL_LOSS_TYPES.items():
        assert re.search(rf"\b{loss_type}\b", PORTS[mode][1]), f"TRL {loss_type} not in row {mode}"


def _published(source: str) -> bool:
    """A source naming someone else's paper or code (not one that starts with gpolab)."""
    return not source.startswith("gpolab") and bool(
        re.search(r"arXiv|authors' code|\b[\w.-]+/[\w.-]+\b", source)
    )


@pytest.mark.parametrize(
    "page, rules",
    [
        ("allocate.md", allocation.RULES),
        ("offpolicy.md", {**offpolicy.RATIOS, **{f"kl {k}": v for k, v in offpolicy.KLS.items()}}),
        ("offpolicy.md", mismatch.REGISTRY),
    ],
)
def test_every_published_allocation_and_offpolicy_rule_has_a_port_row(page, rules):
    rows = _rows_of(page, "Ports")
    if rows is None:
        pytest.skip(f"docs/{page} has no '## Ports' section yet")
    missing = [
        k
        for k, r in rules.items()
        if _published(r.source) and k not in rows and k.removeprefix("kl ") not in rows
    ]
    assert not missing, f"docs/{page} § Ports has no row for {missing}"
