"""The layout's promises (docs/layout.md): a lab is one folder, found by listing the labs package;
the library (envs, estimators, theory, engine) never imports a lab or the runner; no import
cycle between gpolab's modules."""

from __future__ import annotations

from pathlib import Path

import gpolab
from gpolab.kit import running
from gpolab.runner import cli
from tools import layout

PACKAGE = Path(gpolab.__file__).parent
ROOT = PACKAGE.parent


def test_the_library_never_imports_a_lab_or_the_runner():
    """No import (at any depth of a module's code) runs from a lower layer to a higher one, and
    no two library packages import each other (tools/layout.py's rule)."""
    assert not layout.against_layering(layout.edges(layout.modules(ROOT)))


def test_the_rule_catches_an_upward_import():
    """Negative control: an engine module importing a lab, or theory and estimators importing
    each other, is flagged."""
    pairs = {
        ("gpolab.engine.stats", "gpolab.labs.sweep.lab"),
        ("gpolab.theory.exact", "gpolab.estimators.core"),
        ("gpolab.estimators.core", "gpolab.theory.mse"),
    }
    assert len(layout.against_layering(pairs)) == 3
    assert layout.cycles({("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")}) == 1


def test_no_import_cycle_at_module_top():
    """Imports at module top (run when a module loads) form no cycle; an import deferred into a
    function is not a load-time edge."""
    assert layout.cycles(layout.edges(layout.modules(ROOT), top_only=True)) == 0


def test_the_layout_page_shows_todays_numbers():
    """docs/layout.md's before/now table is today's (``python -m tools.layout --write``)."""
    text = layout.DOC.read_text()
    assert layout.written(text, ROOT) == text, "run: python -m tools.layout --write"


def test_labs_are_found_by_listing_the_package():
    """Every folder of gpolab/labs is a lab and a command; no hand-kept list names them."""
    folders = sorted(p.name for p in (PACKAGE / "labs").iterdir() if (p / "__init__.py").exists())
    assert list(running.folders()) == folders
    assert set(folders) <= set(cli.commands())
    assert list(running.names()) == [f for f in folders if f != "train"]
    for name in running.names():
        assert running.get(name).NAME == name


# a throw-away lab folder run from the command line: docs/layout.md's recipe, followed literally
# by tests/test_extension.py


def test_every_folder_of_the_package_is_a_package():
    """A folder of .py files without ``__init__.py`` imports (a namespace package) but is left
    out by setuptools' package finder and by the API reference: every one has its own."""
    folders = {p.parent for p in PACKAGE.rglob("*.py")}
    missing = sorted(
        str(f.relative_to(PACKAGE)) for f in folders if not (f / "__init__.py").exists()
    )
    assert not missing, missing
