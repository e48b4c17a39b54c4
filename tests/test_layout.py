"""The layout's promises (docs/layout.md): a lab is one folder, found by listing the labs package;
the library (envs, estimators, theory, engine) never imports a lab or the runner; no import
cycle between gpolab's modules."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

import gpolab
from gpolab import labs
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


THROWAWAY = {
    "__init__.py": '''
        """``gpolab scratch``: a throw-away lab (tests/test_layout.py)."""
        from gpolab.kit.command import lab_command

        EXAMPLES = ("gpolab scratch --quick", "gpolab scratch --n 3")
        register = lab_command("scratch", help="a throw-away lab", description="Counts to n.")
        ''',
    "lab.py": """
        import dataclasses

        import pandas as pd

        from gpolab import configs
        from gpolab.configs import option

        NAME = "scratch"
        TABLES = ("results",)


        @dataclasses.dataclass(frozen=True)
        class Config(configs.Config):
            n: int = option(5, "how many rows")
            seed: int = option(0, "unused", key=False)
            out: str = option("results/scratch", "output folder", key=False)
            QUICK = {"n": 2}

            def validate(self):
                from gpolab import validate

                validate.integer("n", self.n, 1, 100)


        def cells(cfg):
            return 1


        def run(cfg, key, *, store=None, progress=None):
            return {"results": pd.DataFrame({"i": range(cfg.n)})}


        def figures(tables):
            return {}


        def report(cfg, tables):
            return tables["results"].to_string(index=False)
        """,
}


@pytest.fixture
def scratch_lab(tmp_path, monkeypatch):
    """A lab folder ``scratch`` in a temporary directory on the labs package's path."""
    root = tmp_path / "labs_extra"
    folder = root / "scratch"
    folder.mkdir(parents=True)
    for name, text in THROWAWAY.items():
        (folder / name).write_text(textwrap.dedent(text).lstrip())
    monkeypatch.setattr(labs, "__path__", [*labs.__path__, str(root)])
    yield folder
    for name in [m for m in sys.modules if m.startswith("gpolab.labs.scratch")]:
        del sys.modules[name]


def test_a_lab_is_one_folder(scratch_lab, tmp_path, capsys):
    """A folder with ``__init__.py`` (its command) and ``lab.py`` is in ``gpolab --help`` with
    its examples, runs, and is a lab an experiment file may name: nothing else was edited."""
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "scratch" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["scratch", "--help"])
    help_text = capsys.readouterr().out
    assert help_text.rstrip().endswith("gpolab scratch --quick\n  gpolab scratch --n 3")
    assert "--n" in help_text
    assert "scratch" in running.names()
    out = tmp_path / "out"
    assert cli.main(["scratch", "--n", "3", "--out", str(out)]) == 0
    assert (out / "results.parquet").exists() and (out / "config.toml").exists()


def test_every_folder_of_the_package_is_a_package():
    """A folder of .py files without ``__init__.py`` imports (a namespace package) but is left
    out by setuptools' package finder and by the API reference: every one has its own."""
    folders = {p.parent for p in PACKAGE.rglob("*.py")}
    missing = sorted(
        str(f.relative_to(PACKAGE)) for f in folders if not (f / "__init__.py").exists()
    )
    assert not missing, missing
