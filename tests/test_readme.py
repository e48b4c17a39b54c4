"""The generated result tables of README.md and docs/*.md stay true: each block is in exactly one
file, its text is what its stored values render to, its config is today's, and its values agree
with today's quick run (tools/readme.py, a repository tool: `python -m tools.readme`)."""

import ast
import math
from pathlib import Path

import pytest

from gpolab.validate import ConfigError
from tools import readme

ROOT = Path(__file__).resolve().parents[1]
FILES = [p for p in readme.files(ROOT) if p.is_file()]  # README.md and every docs page


def test_the_docs_tool_is_no_part_of_the_package():
    """The generated blocks are written by a repository tool: gpolab has no readme module, no
    module of it imports the tool, and the package installs gpolab alone."""
    import tomllib

    package = ROOT / "gpolab"
    assert not (package / "readme.py").exists()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not any(n == "tools" or n.startswith("tools.") for n in names), path
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["tool"]["setuptools"]["packages"]["find"]["include"] == ["gpolab*"]


def test_compare_passes_within_the_standard_error_and_exact_to_rounding():
    stored = {"a mse": (1.00, 0.01), "a theory": (0.5, 0.0), "a cos": (0.3, None)}
    fresh = {"a mse": (1.03, 0.01), "a theory": (0.5 * (1 + 1e-7), 0.0), "a cos": (0.9, None)}
    assert readme.compare(stored, fresh) == []  # 3 / √2 SEs; exact to 1e-7; cos unchecked


@pytest.mark.parametrize(
    "fresh, why",
    [
        ({"a mse": (1.08, 0.01)}, "|z| > 5"),  # 5.7 combined SEs: a number that moved
        ({"a theory": (0.51, 0.0)}, "exact"),  # exact theory changed
        ({"a theory": (math.nan, 0.0)}, "vanished"),  # a theory disappeared
        ({"b other": (1.0, 0.1)}, "no value in common"),  # nothing to compare is no pass
    ],
)
def test_compare_fails_on_a_stale_value(fresh, why):
    stored = {"a mse": (1.00, 0.01), "a theory": (0.5, 0.0)}
    bad = readme.compare(stored, fresh)
    assert bad and why in " ".join(bad)


def test_nan_appearing_where_the_readme_had_a_number_is_no_pass():
    assert "appeared" in readme.compare({"t": (math.nan, 0.0)}, {"t": (0.2, 0.0)})[0]


def test_a_statistic_the_quick_run_cannot_estimate_is_not_compared():
    """plan's G* on the quick run's short log is NaN with its reason: no comparison, no failure
    (the block's exact values are still compared)."""
    stored = {"G* recovered": (6.28, 0.9), "G* truth": (6.07, 0.0)}
    quick = {"G* recovered": (math.nan, math.nan), "G* truth": (6.07, 0.0)}
    assert readme.compare(stored, quick) == []
    assert readme.compare(stored, {**quick, "G* truth": (6.5, 0.0)})  # the truth moved


def test_every_block_is_in_one_file_and_renders_its_stored_values():
    found = readme.blocks_of(FILES)
    assert set(found) == set(readme.BLOCKS)
    for name, block in readme.BLOCKS.items():
        assert block.render(found[name]["values"]) == found[name]["body"], name
        assert found[name]["head"] == readme._head(block), f"{name}: config changed; regenerate"


def test_a_hand_edited_number_or_a_changed_config_is_caught():
    found = readme.blocks_of(FILES)["sweep"]
    block, values = readme.BLOCKS["sweep"], found["values"]
    assert readme.stale(block, found, values) == []
    row = found["body"].split("\n")[2]  # the first data row
    edited = {**found, "body": found["body"].replace(row, row.replace("|", "| 1", 2)[:-1] + "|")}
    assert "edited by hand" in readme.stale(block, edited, values)[0]
    moved = {**found, "head": found["head"].replace("config ", "config 0")}
    assert "another config" in readme.stale(block, moved, values)[0]


def test_a_block_in_two_files_or_an_unknown_block_is_one_error(tmp_path):
    text = next(p.read_text() for p in FILES if "<!-- table:sweep begin" in p.read_text())
    block = readme.BLOCK.search(text)[0]
    a, b = tmp_path / "a.md", tmp_path / "b.md"
    a.write_text(block)
    b.write_text(f"intro\n{block}\n")
    assert set(readme.blocks_of([a])) == {"sweep"}
    with pytest.raises(ConfigError, match="table:sweep: in .*a.md and .*b.md"):
        readme.blocks_of([a, b])
    with pytest.raises(ConfigError, match="given twice"):
        readme.blocks_of([b.write_text(block + "\n" + block) and b])
    b.write_text(block.replace("table:sweep", "table:nope"))
    with pytest.raises(ConfigError, match="table:nope: allowed: sweep"):
        readme.blocks_of([b])
    assert readme.main([str(b)]) == 2  # the command says so in one line, before computing
    assert readme.main([str(tmp_path / "missing.md")]) == 2  # was a traceback


def test_update_regenerates_a_files_claims_blocks(tmp_path, monkeypatch):
    """`python -m tools.readme` also rewrites claims blocks, from the claims lab's table."""
    import pandas as pd

    row = {"id": "A", "claim": "a | b", "verdict": "partly", "sizes": "full"}
    monkeypatch.setattr(readme, "_claims_tables", lambda root: {"claims": pd.DataFrame([row])})
    page = tmp_path / "page.md"
    kind = "claims-summary"
    page.write_text(f"x\n{readme.claims_begin(kind)}\nOLD\n{readme.claims_end(kind)}\ny\n")
    assert readme.update(page, tmp_path) == [kind]
    text = page.read_text()
    assert "OLD" not in text and "| A | a \\| b | **partly** |" in text
    assert readme.claims_verdicts(page) == {"A": "partly"}
    with pytest.raises(ConfigError, match="has no claims markers"):
        readme.claims_verdicts(tmp_path / "missing.md")


def test_one_set_of_quick_runs_runs_each_experiment_once(tmp_path, monkeypatch):
    """The slow checks share :class:`readme.QuickRuns`: an experiment several blocks read (the
    five allocate blocks) runs once; tables a run saved under today's config (the claims check's
    `gpolab claims --quick` on the same root) are read, not recomputed; another config's reruns;
    the default sweep, whose quick config is bandit_mse_vs_G's, is that experiment's run."""
    import pandas as pd

    from gpolab import configs
    from gpolab.kit import output, running

    calls = []

    def execute(lab, cfg, **kw):
        calls.append(Path(cfg.out).name)
        return running.Result(
            {t: pd.DataFrame({"x": [len(calls)]}) for t in lab.TABLES}, [], 0.0, Path(cfg.out)
        )

    monkeypatch.setattr(running, "execute", execute)
    runs = readme.QuickRuns(tmp_path)
    for name in ("allocate", "allocate", "allocate"):
        assert runs.tables(name)["results"]["x"].tolist() == [1]
    assert calls == ["allocate-quick"]

    cfg, lab = runs.experiment("zoo")
    assert cfg.out == str(tmp_path / "zoo-quick")
    Path(cfg.out).mkdir()
    output.write_tables(cfg.out, {t: pd.DataFrame({"x": [7]}) for t in lab.TABLES})
    (Path(cfg.out) / "config.toml").write_text(configs.dumps(configs.absolute_paths(cfg), "zoo"))
    assert runs.tables("zoo")["results"]["x"].tolist() == [7] and len(calls) == 1  # read
    plan, lab = runs.experiment("plan_check")
    Path(plan.out).mkdir()
    output.write_tables(plan.out, {t: pd.DataFrame({"x": [7]}) for t in lab.TABLES})
    (Path(plan.out) / "config.toml").write_text(configs.dumps(configs.absolute_paths(cfg), "zoo"))
    assert runs.tables("plan_check")["results"]["x"].tolist() == [2]  # another config: rerun
    assert calls == ["allocate-quick", "plan_check-quick"]

    sweep, bandit = runs.experiment("sweep")[0], runs.experiment("bandit_mse_vs_G")[0]
    assert sweep == bandit and sweep.out == str(tmp_path / "bandit_mse_vs_G-quick")
    assert readme._experiment("sweep", True, tmp_path)[0] == sweep.replace(
        out=str(tmp_path / "sweep-quick")
    )  # the same config under another folder: one run serves both names


def test_shared_runs_go_longest_first_and_skip_what_another_process_runs(tmp_path, monkeypatch):
    """:meth:`readme.QuickRuns.share`: the runs by their last recorded time, longest (and never
    timed) first; one whose lock another process holds is left for last, then read (here the
    lock is released before, so it runs)."""
    import fcntl
    import json

    import pandas as pd

    from gpolab.kit import running

    calls = []

    def execute(lab, cfg, **kw):
        calls.append(Path(cfg.out).name)
        return running.Result({t: pd.DataFrame({"x": [1]}) for t in lab.TABLES}, [], 0.0, cfg.out)

    monkeypatch.setattr(running, "execute", execute)
    seconds = tmp_path / "cache" / "seconds.json"
    seconds.parent.mkdir()
    seconds.write_text(json.dumps({"zoo-quick": 3.0, "chi2-quick": 9.0}))
    runs = readme.QuickRuns(tmp_path / "runs", seconds)
    runs.root.mkdir()
    held = open(runs.root / "tree_lab-quick.lock", "w")  # another process runs tree_lab
    fcntl.flock(held, fcntl.LOCK_EX)
    assert runs.tables("tree_lab", wait=False) is None and calls == []
    monkeypatch.setattr(runs, "tables", _release_first(runs.tables, held))
    runs.share(["zoo", "tree_lab", "chi2", "allocate"])
    assert calls == ["allocate-quick", "chi2-quick", "zoo-quick", "tree_lab-quick"]
    recorded = json.loads(seconds.read_text())
    assert set(recorded) == {"zoo-quick", "chi2-quick", "allocate-quick", "tree_lab-quick"}


def _release_first(tables, held):
    """``tables`` that releases the lock ``held`` when it is first asked to wait."""

    def wrapped(name, wait=True):
        if wait and not held.closed:
            held.close()
        return tables(name, wait)

    return wrapped


@pytest.mark.slow
def test_readme_tables_agree_with_todays_quick_run(every_quick_run):
    problems = {k: v for k, v in readme.check(FILES, every_quick_run).items() if v}
    assert not problems, (
        f"generated tables are stale on today's code (regenerate: python -m tools.readme):\n"
        f"{problems}"
    )
