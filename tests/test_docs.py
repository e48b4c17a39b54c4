"""The README and the documentation site: a one-screen README whose two commands never change,
a library example that runs, every page in the site's navigation present and reachable, every
command page opening with example invocations, no reference to a document users do not have."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
COMMANDS = (  # the README's two commands, byte for byte (CI runs the second one)
    "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/gpolab sweep",
    'python3 -m venv .venv && .venv/bin/pip install -e ".[test,bench]" && .venv/bin/ruff check '
    "gpolab tests && .venv/bin/python -m pytest -n auto --maxprocesses 4 --dist loadgroup "
    "--no-loadscope-reorder",
)


def nav() -> dict[str, list[str]]:
    """mkdocs.yml's nav: section → its pages (commented lines left out; no yaml needed)."""
    out: dict[str, list[str]] = {}
    section = ""
    for line in (ROOT / "mkdocs.yml").read_text().split("nav:", 1)[1].splitlines():
        if line and not line.startswith(" "):
            break
        if m := re.match(r"^  - ([^:]+):\s*$", line):
            section = m.group(1)
        elif m := re.match(r"^\s+- [^#]*?:\s*(\S+\.md)\s*$", line):
            out.setdefault(section, []).append(m.group(1))
    return out


def test_the_readme_fits_one_screen_of_reading_and_keeps_its_two_commands():
    assert len(README) <= 12_000, len(README)
    block = README.split("```bash\n", 1)[1].split("```", 1)[0]
    assert block.splitlines() == list(COMMANDS)
    assert README.index("```bash") < 2_000  # what gpolab is comes first, then the commands


def test_no_reference_to_a_design_document():
    files = [
        ROOT / "README.md",
        *DOCS.glob("*.md"),
        *(ROOT / "gpolab").rglob("*.py"),
        *(ROOT / "gpolab").rglob("*.toml"),
    ]
    assert not [str(f.relative_to(ROOT)) for f in files if "DESIGN" in f.read_text()]


def test_every_nav_page_exists_and_every_page_is_in_the_nav():
    pages = [p for ps in nav().values() for p in ps]
    assert len(pages) == len(set(pages))
    assert not [p for p in pages if not (DOCS / p).is_file()]
    assert {p.name for p in DOCS.glob("*.md")} == set(pages)


def test_links_between_pages_point_at_pages():
    links = [(ROOT, t) for t in re.findall(r"\]\((docs/[^)#]+\.md)[^)]*\)", README)]
    for page in DOCS.glob("*.md"):
        links += [(DOCS, t) for t in re.findall(r"\]\(([^):#/]+\.md)[^)]*\)", page.read_text())]
    missing = {t for base, t in links if not (base / t).is_file()}
    assert not missing


def test_every_command_page_opens_with_example_invocations():
    for page in nav()["Labs and commands"]:
        text = (DOCS / page).read_text()
        first = text.split("\n\n", 2)[1]  # the block right after the title
        assert first.startswith("```bash\n"), page
        lines = first.split("```")[1].splitlines()[1:]
        assert 2 <= len([x for x in lines if x.startswith(("gpolab ", "python "))]) <= 3, page


@pytest.mark.parametrize("page", ["README.md", "docs/library.md"])
def test_the_library_examples_run(page, capsys):
    """The README's 30-second example and the library page's run as printed, and the Monte Carlo
    MSE they print lies within 5 SE of the exact one they print beside it."""
    code = (ROOT / page).read_text().split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, page, "exec"), {})  # noqa: S102 (the page's own example)
    out = capsys.readouterr().out
    measured, exact = re.search(r"mse=([\d.e-]+), mse_se=([\d.e-]+)", out), out.split()[-1]
    assert float(measured[1]) == pytest.approx(float(exact), abs=5 * float(measured[2]))
