"""Measure the package's layout: modules, import edges, imports against the layering, import
cycles, modules loose at the package root, lines.  ``python -m tools.layout [ROOT]`` prints them;
``python -m tools.layout --write`` rewrites the block of docs/layout.md between its markers, which
tests/test_layout.py checks is current.

Layers, bottom up: the ground (gpolab/__init__.py, validate, configs), the library (envs,
estimators, theory; then engine; then kernels), integrations, the kit the labs use, the labs
(and bench), the runner (the command line, above the labs), then the docs tools.  An import
from a lower layer into a higher one runs against the layering, and so does an import between
two library packages that import each other.  A tree from before the redesign is measured with
its modules placed where they went (:data:`BEFORE`).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

# a module's layer by its first package under gpolab/ (a module at the root: its own name)
LAYERS = {
    "__init__": 0,
    "validate": 0,
    "configs": 0,
    "spans": 0,  # the library marks its phases; the runner listens (gpolab/spans.py)
    "envs": 1,
    "estimators": 1,
    "theory": 1,
    "engine": 2,
    "kernels": 3,  # the Monte Carlo measurements: per-seed functions the engine runs
    "integrations": 3,
    "kit": 4,  # what every lab uses: its command, store, output folder, tables, plots
    "labs": 5,
    "bench": 5,  # `gpolab bench`: the engine's throughput on the library's kernels
    "runner": 6,  # the command line, built from the labs
    "readme": 7,  # gpolab/readme.py: before
}
# the root modules of the layout before the redesign (commit 6e0a7f7): the layer they went to
BEFORE = {
    "devices": "engine",
    "stats": "engine",
    "progress": "engine",
    "train": "engine",
    "cells": "labs",
    "units": "labs",
    "rollouts": "labs",
    "rollout_groups": "labs",
    "rollout_writers": "labs",
    "plots": "labs",
    "cli": "runner",
    "output": "runner",
    "store": "runner",
    "experiments": "runner",
    "commands": "runner",
}
LIBRARY = ("envs", "estimators", "theory", "engine", "kernels")


def modules(root: Path) -> dict[str, Path]:
    """{dotted name: file} of every module under ``root``/gpolab."""
    out = {}
    for path in sorted((root / "gpolab").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def edges(known: dict[str, Path], top_only: bool = False) -> set[tuple[str, str]]:
    """(importer, imported) pairs between gpolab's modules; ``top_only``: module-top imports."""
    found = set()
    for name, path in known.items():
        tree = ast.parse(path.read_text())
        nodes = tree.body if top_only else list(ast.walk(tree))
        for node in nodes:
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            else:
                continue
            for target in targets:
                if not target.startswith("gpolab"):
                    continue
                while target not in known and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in known and target != name and not name.startswith(target + "."):
                    found.add((name, target))
    return found


def _part(name: str) -> str:
    parts = name.split(".")
    if name == "gpolab.estimators.allocation":  # before: allocate's rules, in the library
        return "labs"
    return BEFORE.get(parts[1], parts[1]) if len(parts) > 1 else "__init__"


def _layer(name: str) -> int:
    return LAYERS.get(_part(name), 4)


def against_layering(pairs) -> list[tuple[str, str]]:
    """Imports from a lower layer into a higher one, and imports between the library packages
    that close a loop at package level (estimators <-> theory)."""
    up = [(a, b) for a, b in pairs if _layer(b) > _layer(a)]
    across = [
        (a, b)
        for a, b in pairs
        if _part(a) in LIBRARY and _part(b) in LIBRARY and _part(a) != _part(b)
    ]
    packages = {(_part(a), _part(b)) for a, b in across}
    loops = [(a, b) for a, b in across if (_part(b), _part(a)) in packages]
    return sorted(set(up) | set(loops))


def cycles(pairs) -> int:
    """Strongly connected components with more than one module (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for a, b in pairs:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, stack, on, count = {}, {}, [], set(), 0
    sys.setrecursionlimit(10000)

    def visit(v):
        nonlocal count
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            size = 0
            while True:
                w = stack.pop()
                on.discard(w)
                size += 1
                if w == v:
                    break
            count += size > 1

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return count


def _long_functions(path: Path, limit: int = 50) -> int:
    """Functions (and methods) of ``path`` longer than ``limit`` lines."""
    return sum(
        node.end_lineno - node.lineno + 1 > limit
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    )


def measure(root: Path) -> dict:
    known = modules(root)
    pairs = edges(known)
    loose = [p.name for p in (root / "gpolab").glob("*.py") if p.name != "__init__.py"]
    lines = {name: len(path.read_text().splitlines()) for name, path in known.items()}
    return {
        "modules": len(known),
        "import edges": len(pairs),
        "imports against the layering": len(against_layering(pairs)),
        "import cycles (module top)": cycles(edges(known, top_only=True)),
        "modules loose at the package root (besides __init__.py)": len(loose),
        "lines of gpolab/ (ruff format)": sum(lines.values()),
        "lines of gpolab/labs/": sum(n for name, n in lines.items() if _part(name) == "labs"),
        "functions over 50 lines": sum(_long_functions(p) for p in known.values()),
        "files over 600 lines": sum(n > 600 for n in lines.values()),
        "`# fmt: skip` markers": sum(p.read_text().count("# fmt: skip") for p in known.values()),
    }


# measured with this module on `git archive 6e0a7f7` (the last commit before the redesign); its
# lines after removing the '# fmt: skip' markers and `ruff format` with today's settings, so that
# both columns count code laid out by the same formatter (unformatted, 6e0a7f7 had 25,234)
BEFORE_NUMBERS = {
    "modules": 106,
    "import edges": 361,
    "imports against the layering": 1,
    "import cycles (module top)": 0,
    "modules loose at the package root (besides __init__.py)": 17,
    "lines of gpolab/ (ruff format)": 27937,
}
# the same measures on cf841b8, the last commit before issue 57 (kernels in the library, thin
# labs), with today's layers (the runner above the labs: each lab module's import of
# gpolab.runner was one against the layering): python -m tools.layout on a checkout of it
ISSUE57_NUMBERS = {
    "modules": 119,
    "import edges": 456,
    "imports against the layering": 61,
    "import cycles (module top)": 0,
    "modules loose at the package root (besides __init__.py)": 3,
    "lines of gpolab/ (ruff format)": 33347,
    "lines of gpolab/labs/": 17098,
    "functions over 50 lines": 34,
    "files over 600 lines": 15,
    "`# fmt: skip` markers": 30,
}
DOC = Path(__file__).resolve().parents[1] / "docs" / "layout.md"
BEGIN, END = "<!-- layout:begin (python -m tools.layout --write) -->", "<!-- layout:end -->"


def block(root: Path) -> str:
    """The markdown table docs/layout.md shows: each number before the redesign and now."""
    now = measure(root)
    cell = lambda numbers, k: f"{numbers[k]:,}" if k in numbers else "—"  # noqa: E731
    rows = [
        f"| {k} | {cell(BEFORE_NUMBERS, k)} | {cell(ISSUE57_NUMBERS, k)} | {v:,} |"
        for k, v in now.items()
    ]
    head = "| measure | before lab folders (6e0a7f7) | before kit, kernels (cf841b8) | now |"
    return "\n".join([head, "|---|---:|---:|---:|", *rows])


def written(text: str, root: Path) -> str:
    """``text`` (docs/layout.md) with its block replaced by today's."""
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{block(root)}\n{END}{tail}"


if __name__ == "__main__":
    root = Path(next((a for a in sys.argv[1:] if not a.startswith("-")), "."))
    if "--write" in sys.argv:
        DOC.write_text(written(DOC.read_text(), root))
        sys.exit(0)
    for key, value in measure(root).items():
        print(f"{key}: {value}")
    if "--list" in sys.argv:
        for a, b in against_layering(edges(modules(root))):
            print("  against:", a, "->", b)
