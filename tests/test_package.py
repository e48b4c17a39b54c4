"""Package metadata: `gpolab --version`, LICENSE and CITATION.cff agree with pyproject.toml."""

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

import gpolab
from gpolab.runner import cli

ROOT = Path(__file__).parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_version_flag_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"gpolab {PROJECT['version']}\n"
    assert gpolab.__version__ == PROJECT["version"]


def test_version_falls_back_to_the_module_when_not_installed(monkeypatch):
    def not_installed(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    monkeypatch.setattr(gpolab, "__version__", "9.8.7")
    assert cli.version() == "9.8.7"


def test_license_and_citation_match_pyproject():
    assert PROJECT["license"] == {"text": "MIT"}
    license_text = (ROOT / "LICENSE").read_text()
    assert license_text.startswith("MIT License") and "the gpolab authors" in license_text
    cff = (ROOT / "CITATION.cff").read_text()
    field = lambda name: re.search(rf"^{name}: (.+)$", cff, re.M).group(1).strip("\"'")  # noqa: E731
    assert field("cff-version") == "1.2.0"
    assert field("version") == PROJECT["version"]
    assert field("license") == "MIT"
    assert field("title").startswith("gpolab")


def test_classifiers_state_the_python_range():
    low = re.fullmatch(r">=3\.(\d+)", PROJECT["requires-python"]).group(1)
    minors = sorted(
        int(c.rsplit(".", 1)[1])
        for c in PROJECT["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    )
    assert minors and minors[0] == int(low)
    assert minors == list(range(minors[0], minors[-1] + 1))  # no gap in the tested range


def test_tests_mirror_the_package_layout():
    """Every test folder is a gpolab package's namesake (tests/labs/ tests gpolab/labs/) and a
    package of its own (test files may share a name across folders: labs/ and envs/ test_tree)."""
    tests = Path(__file__).parent
    for folder in (p for p in tests.iterdir() if p.is_dir() and p.name != "__pycache__"):
        assert (ROOT / "gpolab" / folder.name).is_dir(), f"tests/{folder.name}: no gpolab package"
        assert (folder / "__init__.py").exists(), f"tests/{folder.name}: missing __init__.py"
