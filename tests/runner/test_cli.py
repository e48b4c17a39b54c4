"""CLI end to end (small seed counts), result tables, configs and clear errors."""

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest

from gpolab.labs.sweep.lab import Config as Sweep
from gpolab.runner.cli import main

EXPERIMENTS = sorted((Path(__file__).parents[2] / "experiments").glob("*.toml"))
REQUIRED = [
    "env",
    "estimator",
    "G",
    "K",
    "M",
    "n_seeds",
    "mse",
    "mse_ci_low",
    "mse_ci_high",
    "variance",
    "bias_sq",
    "theory_mse",
    "degenerate_frac",
    "seconds",
]


def test_bandit_sweep_end_to_end(tmp_path, capsys):
    out = tmp_path / "bandit"
    rc = main(
        [
            "sweep",
            "--estimators",
            "loo,oracle,grpo",
            "--G",
            "2,8",
            "--seeds",
            "3000",
            "--prompts",
            "4",
            "--actions",
            "8",
            "--out",
            str(out),
            "--json",
        ]
    )
    assert rc == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 6 and all(set(REQUIRED) <= set(r) for r in rows)
    df = pd.read_parquet(out / "results.parquet")
    pd.testing.assert_frame_equal(df, pd.read_csv(out / "results.csv"), check_dtype=False)
    assert list(df["estimator"]) == ["loo", "loo", "oracle", "oracle", "grpo", "grpo"]
    assert (out / "mse_vs_G.png").stat().st_size > 10_000
    # every cell has exact theory now (grpo's from the count tables); the 4-SE check is the
    # statistical assertion
    assert ((df.mse - df.theory_mse).abs() < 4 * df.mse_se).all()
    assert list(df.theory) == ["closed form"] * 4 + ["count table"] * 2


def test_tree_sweep_end_to_end(tmp_path, capsys):
    out = tmp_path / "tree"
    rc = main(
        ["sweep", "--env", "tree", "--K", "2,4", "--M", "1,4", "--seeds", "2000", "--out", str(out)]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "mse_group" in printed and "wrote" in printed
    df = pd.read_parquet(out / "results.parquet")
    assert len(df) == 4 and set(REQUIRED) <= set(df.columns)
    assert (out / "mse_heatmap.png").exists()
    se = (df.theory_degenerate_frac * (1 - df.theory_degenerate_frac) / 2000) ** 0.5
    assert ((df.degenerate_frac - df.theory_degenerate_frac).abs() <= 4 * se + 1e-12).all()


@pytest.mark.parametrize(
    "argv,field",
    [
        (["--env", "gridworld"], "env"),
        (["--estimators", "loo,ppo"], "estimator"),
        (["--G", "1", "--estimators", "grpo"], "G (for grpo)"),
        (["--env", "tree", "--K", "1"], "K"),
        (["--env", "tree", "--M", "0"], "M"),
        (["--seeds", "0"], "seeds"),
        (["--eps", "inf"], "eps"),
        (["--success-a", "-1"], "success_a"),
        (["--scale", "global"], "scale"),
        (["--G", "4,two"], "G"),
        (["--out", "/proc/forbidden/dir"], "out"),
    ],
)
def test_bad_config_is_one_clear_line(argv, field, capsys, tmp_path):
    if "--out" not in argv:
        argv = [*argv, "--out", str(tmp_path)]
    assert main(["sweep", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"gpolab sweep: error: {field}: ")
    assert "allowed" in err[0] or "writable" in err[0]


@pytest.mark.parametrize("value", ["two", "0"])
def test_bad_cpu_device_count_is_one_clear_line(value, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("GPOLAB_CPU_DEVICES", value)
    assert main(["sweep", "--seeds", "10", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "allowed" in err[0]
    assert err[0].startswith("gpolab sweep: error: GPOLAB_CPU_DEVICES: ")


def test_sweep_accepts_an_experiment_file(tmp_path, capsys):
    path = next(p for p in EXPERIMENTS if p.stem == "bandit_mse_vs_G")
    rc = main(
        ["sweep", "--config", str(path), "--seeds", "500", "--G", "2", "--out", str(tmp_path)]
    )
    assert rc == 0
    df = pd.read_parquet(tmp_path / "results.parquet")
    assert len(df) == 5 and df["n_seeds"].eq(500).all()


@pytest.mark.parametrize(
    "text,message",
    [
        ("[sweep]\nGG = [2]\n", "bad.toml [sweep] GG: unknown field; allowed: env, "),
        ("[sweep\n", "bad.toml: not valid TOML"),
        ("[Sweep]\nG = [2]\n", "bad.toml: [Sweep]: unknown table; allowed: [sweep], [quick]"),
        ("seeds = 5\n", "bad.toml: seeds: unknown key; allowed: lab, title, figures"),
        ('lab = "tree"\n[sweep]\n', "bad.toml: lab = 'tree', but this is the 'sweep' lab"),
        ("[quick]\nseeds = 5\n", "bad.toml: no [sweep] table"),
        ("[sweep]\nout = 5\n", "bad.toml [sweep] out: got 5; allowed: a string"),
        ('[sweep]\nenv = "tree"\ndim = 3\n', "bad.toml [sweep] dim: not used with env = tree"),
    ],
)
def test_config_file_errors_are_one_line_naming_file_table_field(text, message, tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    assert main(["sweep", "--config", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "o").exists()  # nothing written before the config is valid


def test_replace_does_not_mutate():
    base = Sweep()
    snapshot = dataclasses.asdict(base)
    new = base.replace(G="2,4", estimators="loo")
    assert new.G == (2, 4) and new.estimators == ("loo",)
    assert dataclasses.asdict(base) == snapshot


def test_public_api_resolves_without_importing_jax_first():
    import gpolab

    for name in gpolab.__all__:
        assert getattr(gpolab, name) is not None


def test_top_level_help_imports_no_lab_and_no_jax():
    import subprocess
    import sys

    code = (
        "import sys; from gpolab.runner.cli import build_parser; p = build_parser(['--help']); "
        "print(sorted(m for m in sys.modules if m == 'jax' or m.startswith('gpolab.kit.running.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_docs_wrap_wide_code_blocks():
    """Issue 40, item 9: wide code blocks were cut off on the right of the docs site; the site
    loads a stylesheet that wraps them (``mkdocs build --strict`` builds it)."""
    import yaml

    root = Path(__file__).parents[2]
    site = yaml.safe_load((root / "mkdocs.yml").read_text().replace("!!python", "#"))
    assert "stylesheets/extra.css" in site["extra_css"]
    css = (root / "docs" / "stylesheets" / "extra.css").read_text()
    rule = css[css.index(".md-typeset pre > code") :].split("}")[0]
    assert "white-space: pre-wrap" in rule and "overflow-wrap: anywhere" in rule


def test_an_in_process_command_runs_in_full_float32_and_restores_the_callers_precision(
    tmp_path, monkeypatch
):
    """``main`` runs the command with float32 products in full float32 (the CLI's set-up) and
    gives the caller's ``jax_default_matmul_precision`` back, on success and on a refused
    command: a test or a notebook that calls it traces the same programs afterwards as before
    (under pytest-xdist, tests that ran after a CLI test used to trace with "highest" and miss
    the XLA cache depending on which worker ran them)."""
    import jax

    from gpolab.engine import devices

    seen = []
    real = devices.use_cpu_cores

    def spy():
        real()
        seen.append(jax.config.jax_default_matmul_precision)

    monkeypatch.setattr(devices, "use_cpu_cores", spy)
    before = jax.config.jax_default_matmul_precision
    assert before != "highest"
    assert main(["sweep", "--seeds", "10", "--G", "2", "--out", str(tmp_path / "a")]) == 0
    assert jax.config.jax_default_matmul_precision == before
    monkeypatch.setenv("GPOLAB_CPU_DEVICES", "two")
    assert main(["sweep", "--seeds", "10", "--out", str(tmp_path / "b")]) == 2
    assert jax.config.jax_default_matmul_precision == before and seen == ["highest"]
