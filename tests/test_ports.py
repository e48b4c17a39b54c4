"""Every published rule gpolab runs has a row in a port table (issue 40), so a new rule cannot land
without one: the registry's built-in estimators, the loss-aggregation modes and TRL's loss types
in docs/ports.md; the allocation rules in docs/allocate.md and the off-policy ratio and KL rules
in docs/offpolicy.md, each under its "## Ports" heading.

A row is a markdown table row whose first cell names the entry in backticks (several names may
share a row); every row has as many cells as its table's header, each holding at least one word
(no cell emptied to a character or a dash), and an allocation rule's row names the commit of the
authors' code it was read at (or says there is no code).  A rule is published unless its source
starts with "gpolab": one cited only by a venue or a name needs a row as much as one cited by an
arXiv number or a repository.  A missing "## Ports" heading is a failure, not a skip.  Each of
these checks is shown to fail on a mutated copy of the page (the tests named ``*_fails_*``)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

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
        cells = _cells(line)
        if cells[0] == "entry":
            continue
        for name in re.findall(r"`([^`]+)`", cells[0]):
            rows[name] = cells
    return rows


def _cells(line: str) -> list[str]:
    """A table row's cells: split at each "|" that is not escaped ("\\|" is a pipe in a cell)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


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
    """A source naming someone else's rule, however it is cited (a paper, a repository, a venue,
    a method's name): every source that does not start with gpolab."""
    return not source.strip().lower().startswith("gpolab")


COMMIT = re.compile(r"@ ?(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b")


def port_problems(
    text: str, rules: dict, *, cells: bool = True, commits: bool = False
) -> list[str]:
    """What is wrong with the "## Ports" section of a page's ``text`` for ``rules`` (name → an
    object with ``source``): a missing section, a published rule without a row; with ``cells`` a
    row with fewer or more cells than its header (a bare "|" inside a cell) or a cell after the
    name without a word (two letters or more); with ``commits`` a row whose authors'-code cell
    names no commit (``@ <hex>``) and does not say "no code"."""
    section = _section(text, "Ports")
    if section is None:
        return ["no '## Ports' section"]
    rows = port_rows(section)
    out = [
        f"no row for {k}"
        for k, r in rules.items()
        if _published(r.source) and k not in rows and k.removeprefix("kl ") not in rows
    ]
    width = None
    for line in section.splitlines() if cells else ():
        if not line.startswith("|") or re.match(r"^\|[\s:|-]+\|$", line):
            continue
        row = _cells(line)
        if width is None or row[0] in ("entry", "rule"):
            width = len(row)
            continue
        name = row[0]
        if len(row) != width:
            out.append(f"{name}: {len(row)} cells, its header has {width}")
        out += [
            f"{name}: cell {i} {c!r} holds no word" for i, c in enumerate(row) if i and not _word(c)
        ]
        if commits and not (COMMIT.search(row[1]) or "no code" in row[1]):
            out.append(f"{name}: the authors' code names no commit")
    return out


def _word(cell: str) -> bool:
    return re.search(r"[^\W\d_]{2,}", cell) is not None


MISMATCH = "### Rollout–training mismatch corrections"
# (page, rules, check the cells, check the commits, the "###" table checked, None: the section):
# docs/offpolicy.md's reuse table and docs/mismatch.md's corrections table both have their cells
# checked (no commits: the reuse rows cite verl's and TRL's releases)
PAGES = [
    ("allocate.md", allocation.RULES, True, True, None),
    (
        "offpolicy.md",
        {**offpolicy.RATIOS, **{f"kl {k}": v for k, v in offpolicy.KLS.items()}},
        True,
        0,
        None,
    ),
    ("mismatch.md", mismatch.REGISTRY, True, False, MISMATCH),
]


def _under(text: str, heading: str | None) -> str:
    """The "## Ports" section cut to the table under its ``heading`` (to the next heading); ""
    (no section: a failure) where the heading is missing."""
    if heading is None:
        return text
    section = _section(text, "Ports") or ""
    if heading not in section:
        return ""
    rest = section[section.index(heading) + len(heading) :]
    end = re.search(r"^#", rest, re.M)
    return "## Ports\n" + rest[: end.start() if end else len(rest)]


@pytest.mark.parametrize("page, rules, cells, commits, under", PAGES)
def test_every_published_allocation_and_offpolicy_rule_has_a_full_port_row(
    page, rules, cells, commits, under
):
    text = _under((DOCS / page).read_text(encoding="utf-8"), under)
    problems = port_problems(text, rules, cells=cells, commits=commits)
    assert not problems, f"docs/{page} § Ports: {problems}"


def test_ports_page_cells_hold_words():
    text = "## Ports\n" + (DOCS / "ports.md").read_text(encoding="utf-8")
    assert port_problems(text, {}) == []


ALLOCATE = (DOCS / "allocate.md").read_text(encoding="utf-8")


def test_a_renamed_ports_heading_fails():
    """Former blind spot 1: the check skipped when the heading was renamed."""
    assert port_problems(ALLOCATE, allocation.RULES, commits=True) == []
    renamed = ALLOCATE.replace("\n## Ports\n", "\n## Port table\n")
    assert renamed != ALLOCATE
    assert port_problems(renamed, allocation.RULES) == ["no '## Ports' section"]


def test_a_rule_cited_only_by_a_venue_fails_without_a_row():
    """Former blind spot 2: a source without arXiv, repository or "authors' code" was taken for
    gpolab's own; gpolab's rules still need none."""
    venue = {"newrule": SimpleNamespace(source="NeurIPS 2025 (Smith and Jones)")}
    assert port_problems(ALLOCATE, venue) == ["no row for newrule"]
    own = {"gpolab-new": SimpleNamespace(source="gpolab (theory §12): a new design")}
    assert port_problems(ALLOCATE, own) == []


def test_a_row_emptied_to_one_character_or_without_its_commit_fails():
    """Former blind spot 3: an allocation row emptied to one character passed (only
    docs/ports.md's cells were checked), and the allocation rows named no commit."""
    line = next(ln for ln in ALLOCATE.splitlines() if ln.startswith("| `gvm` (GVM-RAFT"))
    cells = line.strip().strip("|").split("|")
    for i in range(1, len(cells)):
        emptied = "|" + "|".join(c if j != i else " x " for j, c in enumerate(cells)) + "|"
        problems = port_problems(ALLOCATE.replace(line, emptied), allocation.RULES)
        assert problems == [f"`gvm` (GVM-RAFT, arXiv 2505.02391): cell {i} 'x' holds no word"]
    short = "| `gvm` | x |"
    assert "cells, its header has" in port_problems(ALLOCATE.replace(line, short), {})[0]
    bare = COMMIT.sub("", line)
    assert bare != line
    problems = port_problems(ALLOCATE.replace(line, bare), allocation.RULES, commits=True)
    assert problems == ["`gvm` (GVM-RAFT, arXiv 2505.02391): the authors' code names no commit"]


MISMATCH_PAGE = (DOCS / "mismatch.md").read_text(encoding="utf-8")  # the corrections' page


def test_a_bare_pipe_or_a_dash_in_the_mismatch_table_fails():
    """The mismatch table's cells are checked: its formula's escaped pipes keep the row whole,
    a bare one splits it, a cell emptied to "—" fails, and the reuse table is not read."""
    assert port_problems(_under(MISMATCH_PAGE, MISMATCH), mismatch.REGISTRY) == []
    assert r"\|log r\|" in MISMATCH_PAGE
    bare = _under(MISMATCH_PAGE.replace(r"\|log r\|", "|log r|"), MISMATCH)
    assert port_problems(bare, {}) == ["`verl/bypass_ppo_clip`: 8 cells, its header has 6"]
    line = next(ln for ln in MISMATCH_PAGE.splitlines() if ln.startswith("| `none` | none: a run"))
    dashed = line.replace("| A per token |", "| — |")
    assert dashed != line
    problems = port_problems(_under(MISMATCH_PAGE.replace(line, dashed), MISMATCH), {})
    assert problems == ["`none`: cell 3 '—' holds no word"]
    assert _under(MISMATCH_PAGE.replace(MISMATCH, "### Renamed"), MISMATCH) == ""
