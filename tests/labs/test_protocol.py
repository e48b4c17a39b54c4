"""The lab protocol: one config mechanism (precedence, mode checks, files), output safety
(checked before computing, locked, atomic), Ctrl-C, the resolved config.toml."""

import dataclasses
import os

import pandas as pd
import pytest

from gpolab import configs, engine
from gpolab.kit import output, running
from gpolab.kit.tables import records
from gpolab.runner.cli import main
from gpolab.validate import ConfigError

SMALL = [
    "--estimators",
    "loo,grpo",
    "--G",
    "2,4",
    "--seeds",
    "300",
    "--prompts",
    "3",
    "--actions",
    "4",
]


def protocol_labs():
    """Every lab module (each lab folder's ``lab.py``), found by listing the labs package."""
    return [running.get(name) for name in running.names()]


def _same(a, b) -> bool:
    """Equal values, a NaN setting (plan's success_threshold: "not set") equal to itself."""
    return a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)


def _inputs(lab, tmp_path) -> dict:
    """The settings a lab cannot default: the user's log of ``gpolab plan`` (an existing file)."""
    if "log" not in configs.names(lab.Config):
        return {}
    log = tmp_path / "completions.parquet"
    log.touch()
    return {"log": str(log)}


def _other(value, default=None):
    """A value of the same type that differs from ``value`` (``default``, the field's default,
    for a one-name list: list entries are distinct, so ("grpo", "grpo") is no value)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, tuple):
        if len(value) > 1:
            return value[:1]
        if isinstance(value[0], str):
            return default if default is not None else value
        return value + (value[0] + 1,)  # (1,) -> (1, 2)
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 0.5 if value else 0.25
    return value


@pytest.mark.parametrize("lab", protocol_labs(), ids=lambda m: m.NAME)
def test_a_typed_flag_wins_over_quick_and_the_config_file(lab, tmp_path):
    cls, inputs = lab.Config, _inputs(lab, tmp_path)
    assert cls.QUICK, "every lab has quick sizes"
    for name, quick_value in cls.QUICK.items():
        default = getattr(cls(), name)
        typed_value = _other(quick_value, default)
        other = _other(typed_value, default)
        file_value = other if other != quick_value else quick_value
        cfg = configs.resolve(
            cls, typed={name: typed_value, **inputs}, table={name: file_value}, quick=cls.QUICK
        )
        assert getattr(cfg, name) == typed_value, name
        # untyped: quick sizes beat the file, the file beats the defaults
        cfg = configs.resolve(cls, typed=inputs, table={name: file_value}, quick=cls.QUICK)
        assert getattr(cfg, name) == quick_value
        assert (
            getattr(configs.resolve(cls, typed=inputs, table={name: file_value}), name)
            == file_value
        )


@pytest.mark.parametrize("lab", protocol_labs(), ids=lambda m: m.NAME)
def test_defaults_and_quick_sizes_validate_and_round_trip_through_toml(lab, tmp_path):
    inputs = _inputs(lab, tmp_path)
    for quick in ({}, lab.Config.QUICK):
        cfg = configs.resolve(lab.Config, typed=inputs, quick=quick)
        path = tmp_path / "config.toml"
        path.write_text(configs.dumps(cfg, lab.NAME))
        _, table, _ = configs.split_file(path, lab.NAME)
        back = configs.resolve(lab.Config, table=table)
        assert configs.dumps(back, lab.NAME) == configs.dumps(cfg, lab.NAME)  # NaN == NaN there
        assert all(
            _same(getattr(back, f.name), getattr(cfg, f.name)) for f in dataclasses.fields(cfg)
        )


def test_quick_cli_keeps_every_typed_flag(tmp_path, capsys):
    out = tmp_path / "o"
    argv = ["sweep", "--quick", *SMALL, "--out", str(out)]
    assert main(argv) == 0
    df = pd.read_parquet(out / "results.parquet")
    assert df["n_seeds"].eq(300).all() and sorted(set(df["G"])) == [2, 4]
    _, table, _ = configs.split_file(out / "config.toml", "sweep")
    assert table["seeds"] == 300 and table["G"] == [2, 4] and table["prompts"] == 3
    assert "this run" in capsys.readouterr().out
    # every setting a row depends on is a column: grpo's eps, ddof and scale (loo reads none)
    grpo, loo = df[df.estimator == "grpo"], df[df.estimator == "loo"]
    assert (
        grpo["eps"].eq(1e-4).all() and grpo["ddof"].eq(1).all() and grpo["scale"].eq("group").all()
    )
    assert loo["eps"].isna().all() and loo["ddof"].isna().all() and loo["scale"].isna().all()


def test_figure_titles_come_from_the_seeds_actually_run(tmp_path, monkeypatch):
    from gpolab.labs.sweep import plots

    titles = []
    monkeypatch.setattr(plots, "mse_vs_G", lambda df, path, title=None: titles.append(title))
    assert main(["sweep", "--quick", *SMALL, "--out", str(tmp_path)]) == 0
    assert titles == ["tabular bandit, P=3, A=4, 300 seeds"]  # not the quick or full default


def test_figures_out_that_is_a_file_is_one_line_before_computing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(engine, "run", lambda *a, **k: pytest.fail("computed"))
    (tmp_path / "file").write_text("")
    argv = ["figures", "--quick", "--only", "bandit_mse_vs_G", "--out", str(tmp_path / "file")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpolab figures: error: out: "), err


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--env", "tree", "--G", "4"], "--G: not used with env = tree; it applies only when env"),
        (["--env", "tree", "--scale", "batch"], "--scale: not used with env = tree"),
        (["--dim", "3"], "--dim: not used with env = bandit, kind = tabular; it applies only"),
        (["--G", "2,,4"], "G: got '2,,4'; allowed: a comma-separated list of integers with no"),
        (["--estimators", ""], "estimators: got ''; allowed: a comma-separated list"),
        (["--x64", "--seeds", "1.5"], "seeds: got '1.5'; allowed: an integer"),
    ],
)
def test_flags_the_mode_does_not_use_or_malformed_lists_are_errors(
    argv, message, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(engine, "run", lambda *a, **k: pytest.fail("computed"))
    assert main(["sweep", *argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "o").exists()


def test_config_without_out_writes_beside_its_name_not_the_default_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.toml").write_text('lab = "sweep"\n[sweep]\nseeds = 200\n')
    assert main(["sweep", "--config", "mine.toml", *SMALL[:4], "--prompts", "2"]) == 0
    assert (tmp_path / "results" / "mine" / "results.parquet").exists()
    assert not (tmp_path / "results" / "sweep").exists()


@pytest.mark.parametrize("kind", ["file", "unwritable"])
def test_bad_out_is_one_line_before_any_computation(kind, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(engine, "run", lambda *a, **k: pytest.fail("computed"))
    out = tmp_path / "out"
    if kind == "file":
        out.write_text("")
    else:
        out.mkdir()
        out.chmod(0o500)
        if os.access(out, os.W_OK):  # root ignores permissions
            pytest.skip("running as root: every folder is writable")
    assert main(["sweep", *SMALL, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpolab sweep: error: out: ")


def test_a_second_run_on_a_held_folder_is_told_who_holds_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(engine, "run", lambda *a, **k: pytest.fail("computed"))
    with output.hold(tmp_path):
        assert main(["sweep", *SMALL, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"another gpolab run (pid {os.getpid()}) is writing to" in err
    with output.hold(tmp_path):  # released: it can be taken again
        pass


def test_atomic_writes_leave_the_old_file_or_the_new_one(tmp_path):
    path = output.write_text(tmp_path / "a.txt", "old")
    with pytest.raises(RuntimeError), output.atomic(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError
    assert path.read_text() == "old" and sorted(os.listdir(tmp_path)) == ["a.txt"]


def test_ctrl_c_is_one_line_with_the_cells_kept_and_how_to_resume(tmp_path, capsys, monkeypatch):
    from gpolab.labs.sweep import lab as sweep

    real, calls = sweep.run_sweep, []

    def interrupted(cfg, store=None, progress=None, key=None):
        class StopAfterTwo:  # the run's own progress, until Ctrl-C after the second cell
            def skip(self, n):
                progress.skip(n)

            def update(self, n=1, note=""):
                calls.append(note)
                if len(calls) == 2:
                    raise KeyboardInterrupt
                progress.update(n, note)

        return real(cfg, store, StopAfterTwo(), key=key)

    monkeypatch.setattr(sweep, "run_sweep", interrupted)
    argv = ["sweep", *SMALL, "--out", str(tmp_path)]
    assert main(argv) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"gpolab sweep: interrupted: 2 finished cells kept in {tmp_path}; run the same command "
        "again to resume (--fresh starts over)"
    )
    monkeypatch.setattr(sweep, "run_sweep", real)
    assert main(argv) == 0
    assert "2 cells already finished (resuming)" in capsys.readouterr().err


def test_replot_redraws_from_saved_tables_without_computing(tmp_path, monkeypatch, capsys):
    argv = [
        "figures",
        "--quick",
        "--only",
        "tree_mse_heatmap",
        "--figures-dir",
        str(tmp_path / "f"),
        "--out",
        str(tmp_path / "r"),
    ]
    monkeypatch.setattr(
        "gpolab.labs.sweep.lab.Config.QUICK", {"seeds": 300, "K": (2,), "M": (1, 2)}, raising=True
    )
    exp_quick = {"seeds": 300, "K": [2], "M": [1, 2]}
    from gpolab.kit import experiments

    real_load = experiments.load
    monkeypatch.setattr(
        experiments, "load", lambda p: dataclasses.replace(real_load(p), quick=exp_quick)
    )
    assert main(argv) == 0
    png = tmp_path / "f" / "tree_mse_heatmap.png"
    first = png.stat().st_mtime_ns
    monkeypatch.setattr(engine, "run", lambda *a, **k: pytest.fail("computed"))
    assert main([*argv, "--replot"]) == 0
    assert png.stat().st_mtime_ns >= first
    with pytest.raises(ConfigError, match="has no results.parquet"):
        output.read_tables(tmp_path / "nothing", ["results"])


@pytest.mark.parametrize(
    "argv,message",
    [
        (
            ["--regimes", "admissible", "--seeds", "3"],
            "--seeds: not used with env = loglinear, "
            "regimes = admissible; it applies only when env is loglinear and regimes includes "
            "tuned",
        ),
        (["--regimes", "tuned", "--adm-steps", "3"], "regimes includes admissible"),
    ],
)
def test_a_flag_of_a_regime_that_does_not_run_is_an_error(argv, message, tmp_path, capsys):
    assert main(["train", *argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_json_rows_are_strict_json():
    import json

    df = pd.DataFrame({"G": [float("inf"), 2.0], "x": [float("nan"), 1.0]})
    lab = type("Lab", (), {"TABLES": ("results",)})
    rows = records(lab, {"results": df})
    assert rows == [{"G": "inf", "x": None}, {"G": 2.0, "x": 1.0}]
    json.loads(json.dumps(rows, allow_nan=False))
