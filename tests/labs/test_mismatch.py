"""``gpolab mismatch``: the rollout–training mismatch lab (issue 43; the off-policy lab's
``--env markov`` mode before issue 57).  Its rows carry
the issue's columns with standard errors; without a mismatch every correction is unbiased and
truncates nothing (the control); bad input is one error before anything runs; ``--from-config``
adds the run's own correction as the rows marked yours; the decision table names ties, leads
within one SE and never picks a collapsed or NaN direction."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from gpolab import configs
from gpolab.estimators import mismatch as corrections
from gpolab.labs.mismatch import decision
from gpolab.labs.mismatch import lab as mismatch
from gpolab.runner.cli import main
from gpolab.validate import ConfigError

SMALL = ["--prompts", "3", "--batch", "4", "--G", "4", "--seeds", "256"]
SEQ_IS = "verl/seq_tis[is_threshold=1e9]"  # untruncated below the ±20 clamp: unbiased


def _run(tmp_path, capsys, *extra):
    out = tmp_path / "o"
    argv = ["mismatch", *SMALL, "--out", str(out), "--json", *extra]
    assert main(argv) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    return out, rows


def test_rows_carry_the_issue_columns_with_standard_errors(tmp_path, capsys):
    out, rows = _run(
        tmp_path,
        capsys,
        "--T",
        "4,8",
        "--mismatch",
        "noise:0.3",
        "--correction",
        f"none,trl/sequence_mask,{SEQ_IS}",
    )
    need = {"T", "mismatch_kl", "correction", "truncated_share", "bias_sq", "variance", "mse"}
    need |= {"cos", "bias_sq_se", "variance_se", "mse_se", "cos_se", "truncated_share_se"}
    assert len(rows) == 2 * 3 and all(need <= set(r) for r in rows)
    assert {r["T"] for r in rows} == {4, 8}
    assert {r["correction"] for r in rows} == {
        "none",
        "trl/sequence_mask",
        "verl/seq_tis[is_threshold=1000000000.0]",
    }
    for r in rows:
        assert r["mismatch_kl"] > 0 and r["mismatch_kl_seq"] == pytest.approx(
            r["T"] * r["mismatch_kl"], rel=1e-5
        )
        assert 0 <= r["truncated_share"] <= 1 and r["cos_se"] > 0
        assert r["mse"] == pytest.approx(r["bias_sq"] + r["variance"], rel=1e-6)
    dec = pd.read_parquet(out / "decision.parquet")
    assert len(dec) == 2 and {"least_mse", "best_cos", "trl_rel_mse", "verl_cos"} <= set(dec)
    assert (out / "mismatch.png").stat().st_size > 1000
    _, table, _ = configs.split_file(out / "config.toml", "mismatch")
    assert table["T"] == [4, 8] and "ratio" not in table and "eta" not in table


def test_without_mismatch_every_correction_is_unbiased_and_truncates_nothing(tmp_path, capsys):
    """The control: μ = π_θ (noise 0), every entry's estimate is the plain loo gradient."""
    names = ",".join(["none", "trl/token_truncate", "verl/seq_tis", "verl/gspo", "verl/geo_mean"])
    _, rows = _run(tmp_path, capsys, "--T", "8", "--mismatch", "noise:0", "--correction", names)
    for r in rows:
        assert abs(r["bias_sq"]) <= 3 * r["bias_sq_se"] + 1e-7, r["correction"]
        assert r["truncated_share"] == 0.0 and abs(r["mismatch_kl"]) < 1e-6


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--mismatch", "noise"], "mismatch: got 'noise'; allowed: KIND:SIZE"),
        (["--mismatch", "temperature:0"], "mismatch temperature size"),
        (["--correction", "nope"], "correction: got 'nope'"),
        (["--correction", "verl/seq_tis[cap=2]"], "verl/seq_tis keyword: got 'cap'"),
        (["--T", "0"], "T"),
        (["--T", "100000"], "T"),
    ],
)
def test_bad_input_is_one_error_before_anything_runs(tmp_path, capsys, extra, message):
    out = tmp_path / "o"
    assert main(["mismatch", *SMALL, "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_the_old_offpolicy_invocation_is_one_line_naming_the_new_command(tmp_path, capsys):
    """Issue 57: ``gpolab offpolicy --env markov`` (or a mismatch flag, or a config file with env
    = markov) was the mismatch mode; it is one error line naming ``gpolab mismatch``, before
    anything runs.  The reuse lab's flags are not the mismatch lab's (argparse refuses them)."""
    old = tmp_path / "old.toml"
    old.write_text('[offpolicy]\nenv = "markov"\nseeds = 64\n')
    for argv in (
        ["--env", "markov"],
        ["--T", "8"],
        ["--correction", "none"],
        ["--from-config", "x.yaml"],
        ["--config", str(old)],
    ):
        assert main(["offpolicy", *argv, "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "is now `gpolab mismatch`" in err[0], (argv, err)
        assert not (tmp_path / "o").exists()
    with pytest.raises(SystemExit) as stop:
        main(["mismatch", "--ratio", "token", "--out", str(tmp_path / "o")])
    assert stop.value.code == 2


def test_a_bad_config_file_is_one_error_naming_it(tmp_path, capsys):
    bad = tmp_path / "grpo.yaml"
    bad.write_text("use_vllm: [unclosed\n")
    for path in (bad, tmp_path / "missing.yaml"):
        out = tmp_path / "o"
        assert main(["mismatch", *SMALL, "--from-config", str(path), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert str(path) in err and "Traceback" not in err
        assert not out.exists()


def test_from_config_adds_the_runs_own_correction_as_yours(tmp_path, capsys):
    """A TRL GRPOConfig with token-level truncation at 2: its rows are marked yours, with the
    user's cap; the grid's own entries stay unmarked and the notes name the file."""
    trl = tmp_path / "grpo.yaml"
    trl.write_text(
        "use_vllm: true\nvllm_importance_sampling_mode: token_truncate\n"
        "vllm_importance_sampling_clip_max: 2.0\n"
    )
    out = tmp_path / "o"
    argv = ["mismatch", *SMALL, "--T", "8", "--mismatch", "noise:0.3", "--out", str(out)]
    assert main([*argv, "--correction", "none,trl/sequence_mask", "--from-config", str(trl)]) == 0
    text = capsys.readouterr().out
    results = pd.read_parquet(out / "results.parquet")
    mine = results[results["yours"]]
    assert list(mine["correction"]) == ["trl/token_truncate[clip_max=2.0]"]
    assert not results[~results["yours"]]["correction"].str.startswith("trl/token").any()
    assert "Your config" in text and "trl/token_truncate" in text
    dec = pd.read_parquet(out / "decision.parquet")
    assert 1 <= int(dec["yours_mse_rank"].iloc[0]) <= 3


def _table(rows):
    base = {"T": 8, "mismatch": "noise:0.2", "mismatch_kl_seq": 1.0, "mismatch_chi2_seq": 2.0}
    return pd.DataFrame([{**base, "yours": False, **r} for r in rows])


def _row(name, mse, cos, scale=1.0, mse_se=0.01, cos_se=0.001, scale_se=0.01, bias_sq=0.0):
    return dict(
        correction=name,
        B=8,
        g_sq=1.0,
        bias_sq=bias_sq,
        bias_sq_se=0.0,
        variance=mse - bias_sq,
        variance_se=mse_se,
        mse=mse,
        mse_se=mse_se,
        rel_mse=mse,
        cos=cos,
        cos_se=cos_se,
        scale=scale,
        scale_se=scale_se,
    )


def test_the_decision_names_ties_and_leads_within_one_se():
    dec = decision.decision(
        _table(
            [
                _row("verl/token_tis", 1.0, 0.90),
                _row("trl/token_truncate", 1.0, 0.95),  # the same MSE: a tie
                _row("verl/seq_tis", 1.005, 0.9505),  # within one SE of both on each
                _row("none", 2.0, 0.5),
                _row("trl/sequence_mask", 3.0, 0.7),
            ]
        )
    ).iloc[0]
    assert dec["least_mse"] == "verl/token_tis = trl/token_truncate"
    assert dec["least_mse_lead"] == "within 1 SE of verl/seq_tis"
    assert dec["best_cos"] == "verl/seq_tis"
    assert dec["best_cos_lead"] == "within 1 SE of trl/token_truncate"
    assert dec["trl_rel_mse"] == 3.0 and dec["verl_cos"] == 0.5 and "yours_rel_mse" not in dec


def test_at_a_large_batch_the_bias_decides():
    """The variance falls as 1/B: a biased low-variance rule leads at the measured batch, the
    unbiased one at 512 prompts (bias² + variance·8/512)."""
    dec = decision.decision(
        _table(
            [
                _row("trl/sequence_mask", 1.0, 0.8, bias_sq=0.5),  # at 512: 0.5 + 0.5/64
                _row("verl/token_tis", 3.0, 0.99),  # at 512: 3/64
                _row("none", 4.0, 0.7, bias_sq=0.2),
            ]
        )
    ).iloc[0]
    assert dec["least_mse"] == "trl/sequence_mask" and dec["least_mse_large"] == "verl/token_tis"
    assert dec["least_mse_large_rel"] == pytest.approx(3.0 / 64)
    assert dec["verl_rel_mse_large"] == pytest.approx(0.2 + 3.8 / 64)


def test_a_verl_ratio_loss_against_mu_can_be_the_choice():
    """verl/sapo against μ is what verl's default (v1) trainer runs in bypass mode, so it is a
    candidate like every entry (before: never a choice, set aside as "gpolab's pairing" in a
    pairing_large column, which is gone)."""
    rows = [_row("verl/sapo", 0.5, 0.999), _row("verl/token_tis", 1.0, 0.99), _row("none", 2, 0.9)]
    dec = decision.decision(_table(rows)).iloc[0]
    assert dec["least_mse"] == dec["least_mse_large"] == dec["best_cos"] == "verl/sapo"
    assert dec["least_mse_large_rel"] == pytest.approx(0.5 / 64)
    assert not [c for c in dec.index if "pairing" in c] and "pairing_large" not in decision.DECISION


def test_a_collapsed_or_nan_direction_is_never_the_best():
    """A correction that zeroes every sequence (scale 0, cos NaN or a noisy cos of a vanishing
    mean) has the least MSE at a small batch but never the best direction."""
    dec = decision.decision(
        _table(
            [
                _row("verl/rs_seq_mean_k3", 1.0, math.nan, scale=0.0, scale_se=0.0),
                _row("trl/sequence_mask", 1.01, 0.999, scale=0.001, scale_se=0.01),
                _row("verl/token_tis", 3.0, 0.8),
                _row("none", 4.0, 0.7),
            ]
        )
    ).iloc[0]
    assert dec["least_mse"] == "verl/rs_seq_mean_k3" and dec["best_cos"] == "verl/token_tis"
    assert decision.decision(pd.DataFrame()).empty


def test_every_registry_entry_is_a_default_correction_and_spelled_once():
    cfg = mismatch.Config()
    assert mismatch.specs(cfg) == list(corrections.REGISTRY)
    cfg = mismatch.Config(correction=("none", "verl/seq_tis[is_threshold=3]"))
    assert mismatch.specs(cfg) == ["none", "verl/seq_tis[is_threshold=3.0]"]
    # a threshold equal to the entry's default is the entry: one row, not two
    cfg = cfg.replace(correction=("verl/seq_tis", "verl/seq_tis[is_threshold=2]"))
    assert mismatch.specs(cfg) == ["verl/seq_tis"]
    assert np.all([corrections.parse(s)[0] in corrections.REGISTRY for s in mismatch.specs(cfg)])


def test_a_bad_from_config_raises_before_the_grid(tmp_path):
    with pytest.raises(ConfigError, match="from_config|missing"):
        mismatch.Config(from_config=str(tmp_path / "missing.json")).validate()


def test_an_edited_config_file_is_read_again(tmp_path):
    """The file is read once per run, not once per process: an edit (new mtime) is seen."""
    import os

    path = tmp_path / "grpo.yaml"
    path.write_text("use_vllm: true\nvllm_importance_sampling_mode: token_truncate\n")
    cfg = mismatch.Config(from_config=str(path))
    assert mismatch.yours(cfg)[0] == "trl/token_truncate"
    path.write_text("use_vllm: true\nvllm_importance_sampling_mode: sequence_truncate\n")
    os.utime(path, ns=(1, 10**18))  # a different mtime even on a coarse clock
    assert mismatch.yours(cfg)[0] == "trl/sequence_truncate"
