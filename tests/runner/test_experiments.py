"""Declarative experiments: validation, resumable results, figures from saved tables only."""

from pathlib import Path

import pandas as pd
import pytest

from gpolab import engine
from gpolab.kit import experiments, running
from gpolab.kit.store import PROVENANCE, Store
from gpolab.labs.sweep.lab import Config as Sweep
from gpolab.labs.sweep.lab import cells, run_sweep
from gpolab.runner.cli import main
from gpolab.validate import ConfigError
from tests.runner.watch import Watch

SHIPPED = sorted(experiments.DEFAULT_DIR.glob("*.toml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_experiment_loads(path):
    exp = experiments.load(path)  # validates the full and the quick config
    assert exp.name == path.stem
    assert exp.lab in running.names()
    full, quick = exp.config(quick=False), exp.config(quick=True)
    sizes = [n for n, v in running.get(exp.lab).Config.QUICK.items() if isinstance(v, int)]
    assert all(getattr(quick, n) <= getattr(full, n) for n in sizes)  # seeds, thetas, ...
    assert full.out.endswith(exp.name) and quick.out.endswith(exp.name + "-quick")


@pytest.mark.parametrize(
    "text,message",
    [
        ("[sweep]\nG = [2]\n", "lab: got None; allowed: allocate, "),
        ('lab = "movie"\n', "lab: got 'movie'; allowed: allocate, "),
        ('lab = "sweep"\ncolour = "red"\n[sweep]\n', "colour: unknown key; allowed: lab, "),
        ('lab = "sweep"\n[sweep]\nGG = [2]\n', "[sweep] GG: unknown field"),
        ('lab = "sweep"\n[sweep]\nG = [1]\nestimators = ["loo"]\n', "G (for loo): got 1"),
        ('lab = "sweep"\n[sweep]\n[quick]\nseeds = 0\n', "seeds: got 0"),
        ('lab = "sweep"\n[sweep]\n[quick]\nseeds = "many"\n', "[quick] seeds: got 'many'"),
        ('lab = "sweep"\n[sweep]\nG = "2,,4"\n', "G: got '2,,4'; allowed: a comma-separated"),
        ('lab = "sweep"\nfigures = 3\n[sweep]\n', "figures: allowed: a list of file names"),
        ("[experiment\n", "not valid TOML"),
    ],
)
def test_bad_experiment_files_name_file_and_field(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        experiments.load(path)
    assert str(err.value).startswith("bad.toml")
    assert message in str(err.value)


def small_config(out) -> Sweep:
    return Sweep(
        estimators=("loo", "mean"),
        G=(2, 3, 5),
        seeds=1500,
        chunk=512,
        prompts=3,
        actions=5,
        out=str(out),
    )


def computed_rows(monkeypatch) -> list[dict]:
    """The rows the sweep computes from now on (it labels each for its progress)."""
    from gpolab.labs.sweep import lab

    rows = []
    monkeypatch.setattr(lab, "label", lambda row: rows.append(row) or "")
    return rows


def strip(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(columns=["seconds", *PROVENANCE], errors="ignore")


def test_resume_after_interruption_gives_the_same_table(tmp_path):
    whole = run_sweep(small_config(tmp_path / "whole"), store=Store(tmp_path / "whole"))
    cfg = small_config(tmp_path / "cut")
    seen = []

    def interrupt(note):
        seen.append(note)
        if len(seen) == 2:  # Ctrl-C after the second finished cell
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(cfg, store=Store(cfg.out), progress=Watch(interrupt))
    assert len(list(Path(cfg.out, "cells").glob("*.parquet"))) == 2  # nothing lost, no temp
    assert not list(Path(cfg.out, "cells").glob(".*"))
    watch = Watch()
    resumed = run_sweep(cfg, store=Store(cfg.out), progress=watch)
    assert watch.skipped == [2]
    pd.testing.assert_frame_equal(strip(resumed), strip(whole))
    assert resumed["cell_key"].is_unique


def test_changed_config_invalidates_only_changed_cells(tmp_path, monkeypatch):
    cfg = small_config(tmp_path)
    run_sweep(cfg, store=Store(tmp_path))
    computed = computed_rows(monkeypatch)
    run_sweep(cfg.replace(G=(2, 3, 5, 7)), store=Store(tmp_path), progress=Watch())
    assert [(r["estimator"], r["G"]) for r in computed] == [("loo", 7), ("mean", 7)]
    computed.clear()  # loo and mean read no eps, scale or ddof: every cell is reused
    run_sweep(cfg.replace(eps=1e-6, scale="batch"), store=Store(tmp_path), progress=Watch())
    assert computed == []
    grpo = cfg.replace(estimators=("loo", "grpo"))
    run_sweep(grpo, store=Store(tmp_path), progress=Watch())
    assert [(r["estimator"], r["G"]) for r in computed] == [("grpo", 2), ("grpo", 3), ("grpo", 5)]
    computed.clear()  # grpo reads eps: its cells recompute, loo's are reused
    run_sweep(grpo.replace(eps=1e-6), store=Store(tmp_path), progress=Watch())
    assert {r["estimator"] for r in computed} == {"grpo"} and len(computed) == 3
    computed.clear()  # the feature dimension is not used by a tabular bandit
    run_sweep(grpo.replace(dim=3), store=Store(tmp_path), progress=Watch())
    assert computed == []
    assert len(computed) < cells(cfg)


def test_figures_quick_only_one_end_to_end_and_plot_from_saved_table(tmp_path, capsys, monkeypatch):
    out, results = tmp_path / "fig", tmp_path / "res"
    argv = [
        "figures",
        "--quick",
        "--only",
        "bandit_mse_vs_G",
        "--figures-dir",
        str(out),
        "--out",
        str(results),
    ]
    assert main(argv) == 0
    png = out / "bandit_mse_vs_G.png"
    assert png.stat().st_size > 10_000
    table = pd.read_parquet(results / "bandit_mse_vs_G-quick" / "results.parquet")
    assert len(table) == 30 and table["n_seeds"].eq(4000).all()
    # a second run and a re-plot never recompute: the engine is not called again
    monkeypatch.setattr(engine, "run", lambda *a, **k: pytest.fail("recomputed"))
    png.unlink()
    assert main(argv) == 0
    assert png.exists()
    assert "bandit_mse_vs_G" in capsys.readouterr().out


def test_figures_rejects_unknown_name(capsys):
    assert main(["figures", "--only", "nope"]) == 2
    assert capsys.readouterr().err.startswith("gpolab figures: error: only: got 'nope'; allowed:")


def test_tree_mean_only_cells_ignore_eps(tmp_path, monkeypatch):
    cfg = Sweep(
        env="tree",
        K=(2,),
        M=(1, 2),
        estimators=("mean-only", "thought-std"),
        seeds=300,
        out=str(tmp_path),
    )
    run_sweep(cfg, store=Store(tmp_path))
    computed = computed_rows(monkeypatch)
    df = run_sweep(cfg.replace(eps=0.5), store=Store(tmp_path), progress=Watch())
    assert [(r["variant"], r["M"]) for r in computed] == [("thought-std", 1), ("thought-std", 2)]
    assert df[df.variant == "mean-only"]["eps"].isna().all()


def _two_experiments(folder: Path) -> list:
    folder.mkdir()
    texts = {
        "a": 'lab = "sweep"\n[sweep]\nestimators = ["loo", "oracle"]\nG = [4]\nseeds = 400\n'
        "prompts = 4\nactions = 8\n",
        "b": 'lab = "sweep"\n[sweep]\nestimators = ["grpo"]\nG = [2, 4]\nseeds = 300\n'
        "prompts = 4\nactions = 8\n",
    }
    for name, text in texts.items():
        (folder / f"{name}.toml").write_text(text)
    return experiments.discover(folder)


def test_worker_processes_give_each_experiment_the_numbers_of_a_run_on_its_own(tmp_path):
    """--jobs 2: each experiment in its own worker (fresh interpreter, one CPU device): the same
    cells, the same draws; sums in another float32 order at most (rounding, not noise)."""
    exps = _two_experiments(tmp_path / "exps")
    seen = []
    one = experiments.run_all(exps, tmp_path / "one", jobs=1, on_done=lambda n, s: seen.append(n))
    two = experiments.run_all(exps, tmp_path / "two", jobs=2, timed=True)
    assert seen == ["a", "b"] and set(two) == {"a", "b"}
    for name in ("a", "b"):
        assert one[name][2] is None and two[name][2]["monte carlo"] > 0  # timed in the worker
        x, y = (pd.read_parquet(run[name][0] / "results.parquet") for run in (one, two))
        numeric = [c for c in x if x[c].dtype.kind == "f" and c not in ("seconds", "wall_s")]
        assert list(x.columns) == list(y.columns) and len(x) == len(y) > 0
        pd.testing.assert_frame_equal(x[numeric], y[numeric], rtol=1e-5)
    known = experiments._seconds_file(tmp_path / "two")
    assert set(known) == {"a", "b"} and min(known.values()) > 0  # longest first next time


def test_an_error_in_a_worker_is_the_one_error_of_the_run(tmp_path, monkeypatch):
    exps = _two_experiments(tmp_path / "exps")
    monkeypatch.setenv("GPOLAB_CPU_DEVICES", "many")  # the workers' set-up refuses it
    with pytest.raises(ConfigError, match="GPOLAB_CPU_DEVICES: got 'many'"):
        experiments.run_all(exps, tmp_path / "out", jobs=2)


@pytest.mark.parametrize("argv", [["figures", "--jobs", "-1"], ["claims", "--jobs", "999"]])
def test_a_bad_jobs_count_is_one_error_before_anything_runs(tmp_path, capsys, argv):
    out = tmp_path / "results"
    assert main([*argv, "--out", str(out)]) == 2
    assert "jobs: got" in capsys.readouterr().err and not out.exists()


def test_an_experiment_copies_the_cells_another_one_finished(tmp_path, capsys):
    """Two experiments under one results folder with a cell in common (the same store key): the
    second copies it (the same file, so the same numbers) and computes only its own; --fresh
    computes everything."""
    folder = tmp_path / "exps"
    folder.mkdir()
    common = "prompts = 4\nactions = 8\nseeds = 400\n"
    (folder / "a.toml").write_text(
        f'lab = "sweep"\n[sweep]\nestimators = ["loo"]\nG = [4]\n{common}'
    )
    (folder / "b.toml").write_text(
        f'lab = "sweep"\n[sweep]\nestimators = ["loo"]\nG = [4, 8]\n{common}'
    )
    a, b = experiments.discover(folder)
    results = tmp_path / "results"
    experiments.run(a, results)
    capsys.readouterr()
    experiments.run(b, results)
    assert "1 cells already finished" in capsys.readouterr().err
    shared = list((results / "a" / "cells").glob("*.parquet"))
    assert len(shared) == 1
    assert (results / "b" / "cells" / shared[0].name).read_bytes() == shared[0].read_bytes()
    x, y = (pd.read_parquet(results / n / "results.parquet") for n in ("a", "b"))
    pd.testing.assert_frame_equal(strip(x), strip(y[y["G"] == 4]).reset_index(drop=True))
    experiments.run(b, results, fresh=True)
    assert "already finished" not in capsys.readouterr().err


def test_the_shared_cells_docs_name_are_those_of_the_shipped_experiments():
    """docs/figures.md's counts of cells two shipped experiments share (copied, not rerun)."""
    import re

    def keys(name):
        exp = experiments.load(experiments.DEFAULT_DIR / f"{name}.toml")
        return set(running.get(exp.lab).cell_keys(exp.config(False)))

    text = " ".join((Path(__file__).parents[2] / "docs" / "figures.md").read_text().split())
    pairs = re.findall(r"`(\w+)` shares (\d+) of its (\d+) cells with `(\w+)`", text)
    pairs += re.findall(r"`(\w+)` (\d+) of its (\d+) with `(\w+)`", text)
    assert len(pairs) == 2
    for name, shared, total, other in pairs:
        mine = keys(name)
        assert (len(mine & keys(other)), len(mine)) == (int(shared), int(total))
