"""``gpolab asynchronous``: the asynchronous-RL lab (issue 58).  With no mismatch, no staleness
and one update every composition is the leave-one-out gradient, so its rows are unbiased and its
training curves coincide with every other composition's on the same draws (the pairing); the exact
ascent column is exact gradient ascent; bad input is one error before anything runs; the derived
tables never pass a NaN and say "inconclusive" inside one SE."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from gpolab.envs import markov
from gpolab.labs.asynchronous import analysis
from gpolab.labs.asynchronous import lab as asynchronous
from gpolab.runner.cli import main
from gpolab.validate import ConfigError

SMALL = ["--prompts", "3", "--vocab", "3", "--T", "8", "--batch", "4", "--G", "4"]
SMALL += ["--seeds", "64", "--curve-seeds", "16", "--rounds", "3", "--eta", "0.5"]
PAIR = "trl/async_grpo,areal/decoupled,sis"


def _run(tmp_path, capsys, *extra):
    out = tmp_path / "o"
    argv = ["asynchronous", *SMALL, "--out", str(out), "--json", *extra]
    assert main(argv) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    tables = {n: pd.read_parquet(out / f"{n}.parquet") for n in asynchronous.TABLES}
    return rows, tables


@pytest.fixture(scope="module")
def no_mismatch(tmp_path_factory):
    """Three compositions, no mismatch, staleness 0 and 1, m 1 and 2 (one small run)."""
    out = tmp_path_factory.mktemp("async") / "o"
    argv = ["asynchronous", *SMALL, "--out", str(out), "--correction", PAIR]
    argv += ["--mismatch", "noise:0", "--staleness", "0,1", "--m", "1,2"]
    assert main(argv) == 0
    return {n: pd.read_parquet(out / f"{n}.parquet") for n in asynchronous.TABLES}


def test_the_first_fresh_update_is_unbiased_for_every_composition(no_mismatch):
    """k = 0, first update, μ = π_θ: every ratio and weight is 1, so ĝ is the loo gradient,
    unbiased for the exact g (bias² within 4 SE of 0), and its MSE is the fresh update's (the
    excess within 4 SE of 0)."""
    up = no_mismatch["updates"]
    first = up[(up["staleness"] == 0) & (up["update"] == 0)]
    assert set(first["correction"]) == set(PAIR.split(","))
    for _, r in first.iterrows():
        assert abs(r["bias_sq"]) <= 4 * r["bias_sq_se"], r.to_dict()
        assert abs(r["excess_mse"]) <= 4 * r["excess_mse_se"], r.to_dict()
        assert abs(r["mismatch_kl"]) < 1e-6 and r["clip_frac"] == 0
        assert r["mse"] == pytest.approx(r["bias_sq"] + r["variance"], rel=1e-6)


def test_curves_share_their_draws_and_the_ascent_column_is_exact(no_mismatch):
    """At k = 0, m = 1 and no mismatch TRL's and AReaL's updates are the same loo gradient on the
    same draws, so their curves coincide (float32 rounding) and the training table's gap is 0;
    J_ascent is exact gradient ascent θ ← θ + η g(θ) after the same number of updates."""
    c = no_mismatch["curves"]
    sel = c[(c["staleness"] == 0) & (c["m"] == 1)]
    trl = sel[sel["correction"] == "trl/async_grpo"].sort_values("round")
    areal = sel[sel["correction"] == "areal/decoupled"].sort_values("round")
    np.testing.assert_allclose(trl["J"], areal["J"], rtol=0, atol=1e-5)
    tr = no_mismatch["training"]
    at = tr[(tr["staleness"] == 0) & (tr["m"] == 1) & (tr["correction"] != "sis")]
    assert np.all(np.abs(at["gap_to_best"]) < 1e-5)
    params = markov.make(0, prompts=3, vocab=3, length=8)
    theta = markov.init_theta(params)
    for n in sorted(set(c["updates"]))[:2]:
        th = theta
        for _ in range(n):
            th = th + 0.5 * markov.value_gradient(params, th, markov.count_cap(params))[1]
        want = float(markov.expected_return(params, th))
        got = c[c["updates"] == n]["J_ascent"].unique()
        np.testing.assert_allclose(got, want, rtol=1e-5)
    assert (c["J"] > c["J_start"] - 5 * c["J_se"]).all()  # η = 0.5 trains (no collapse)


def test_rows_carry_the_issue_columns(tmp_path, capsys):
    """--json prints the results rows with the issue's columns; a mismatch has its exact KL; the
    staleness table names every (composition, η, m)."""
    rows, tables = _run(
        tmp_path,
        capsys,
        "--correction",
        "verl/decoupled_token_is,areal/a3po",
        "--mismatch",
        "noise:0.2",
        "--staleness",
        "1,2",
        "--switch",
        "4",
        "--rounds",
        "0",
    )
    need = {"bias_sq", "bias_sq_se", "variance", "mse", "mse_se", "cos", "scale", "excess_mse"}
    need |= {"excess_mse_se", "clip_frac", "log_gap", "mismatch_kl", "switch", "n_seeds"}
    assert len(rows) == 2 * 2 * 1 * 2 and all(need <= set(r) for r in rows)
    assert all(r["mismatch_kl"] > 0 and r["switch"] == 4 for r in rows)
    assert tables["curves"].empty and tables["training"].empty
    assert len(tables["safe_staleness"]) == 2 * 2


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--switch", "3", "--staleness", "0,2"], "staleness: got 0 with switch 3"),
        (["--switch", "8"], "switch: got 8"),
        (["--correction", "trl/async"], "correction: got 'trl/async'"),
        (["--staleness", "65"], "staleness"),
        (["--T", "5000"], "T"),
        (["--mismatch", "noise"], "mismatch"),
        (["--curve-seeds", "4"], "curve_seeds"),
        (["--eta", "0"], "eta"),
    ],
)
def test_bad_input_is_one_error_before_anything_runs(flags, message, tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["asynchronous", *SMALL, "--out", str(out), *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_safe_staleness_never_passes_a_nan_or_a_shrunk_update_and_says_inconclusive_inside_one_se():
    base = {"correction": "x", "mismatch": "noise:0.1", "switch": 0, "eta": 0.1, "m": 1}
    base["scale"] = 1.0
    rows = [
        base | {"staleness": 0, "excess_mse": 0.01, "excess_mse_se": 0.01},
        base | {"staleness": 2, "excess_mse": 0.08, "excess_mse_se": 0.01},
        base | {"staleness": 4, "excess_mse": math.nan, "excess_mse_se": 0.01},
        base | {"staleness": 8, "excess_mse": 0.0, "excess_mse_se": 0.01},
    ]
    safe = analysis.safe_staleness(pd.DataFrame(rows)).iloc[0]
    assert safe["safe_staleness"] == 2 and safe["status"] == "inconclusive"
    rows[1]["excess_mse_se"] = 0.05  # the margin 0.02 is inside one SE
    rows[0]["excess_mse"] = 0.5
    safe = analysis.safe_staleness(pd.DataFrame(rows)).iloc[0]
    assert pd.isna(safe["safe_staleness"]) and safe["status"] == "none safe"
    # a shrunk update (scale 0.5) is not safe whatever its MSE: the run of safe k ends there
    rows[0]["excess_mse"] = 0.01
    rows[1] |= {"excess_mse": -0.5, "excess_mse_se": 0.01, "scale": 0.5}
    safe = analysis.safe_staleness(pd.DataFrame(rows)).iloc[0]
    assert safe["safe_staleness"] == 0 and safe["status"] == "shrunk"


def test_the_queue_law_is_the_law_of_its_model():
    """queue:MEAN:SIGMA: P(⌊MEAN·L⌋ = k), L lognormal with mean 1, against 10⁶ draws of the model
    (within 4 SE per age), the ages above the grid's largest k dropped and the rest renormalised;
    SIGMA = 0 is every rollout ⌊MEAN⌋ steps old."""
    from gpolab.labs.asynchronous import queue

    p, drop = queue.law("queue:4:1", 8)
    rng = np.random.default_rng(0)
    sigma = 1.0
    ages = np.floor(4 * rng.lognormal(-(sigma**2) / 2, sigma, 1_000_000)).astype(int)
    assert drop == pytest.approx(np.mean(ages > 8), abs=4 * math.sqrt(drop / 1e6))
    freq = np.bincount(ages[ages <= 8], minlength=9) / np.sum(ages <= 8)
    np.testing.assert_allclose(p, freq, atol=4 * np.sqrt(freq / np.sum(ages <= 8)).max())
    p0, drop0 = queue.law("queue:2.5:0", 8)
    assert drop0 == 0 and p0.argmax() == 2 and p0.max() == 1
    for bad in ("queue:0:1", "queue:4", "poisson:4:1", "queue:4:9", "queue:x:1"):
        with pytest.raises(ConfigError, match="queue: got"):
            queue.parse(bad)
    with pytest.raises(ConfigError, match="would be dropped"):
        queue.law("queue:60:0", 8)


def test_queue_laws_join_the_curves(tmp_path, capsys):
    """A queue law is one more curve per (composition, η, m), its rollouts' mean age the law's
    (the first rounds clamp the age to the updates done) and its dropped share beside it."""
    from gpolab.labs.asynchronous import queue

    _, tables = _run(
        tmp_path,
        capsys,
        "--correction",
        "sis",
        "--mismatch",
        "noise:0.1",
        "--staleness",
        "0,3",
        "--m",
        "2",
        "--queue",
        "queue:1.5:0.5",
        "--rounds",
        "4",
    )
    c = tables["curves"]
    assert set(c["law"]) == {"k=0", "k=3", "queue:1.5:0.5"}
    q = c[(c["law"] == "queue:1.5:0.5") & (c["round"] > 2)]
    p, drop = queue.law("queue:1.5:0.5", 3)
    assert q["drop"].eq(drop).all() and q["staleness"].eq(3).all()
    mean_age = float(p @ np.arange(4))
    se = math.sqrt(float(p @ np.arange(4) ** 2) - mean_age**2) / math.sqrt(16)
    assert abs(q["age"].mean() - mean_age) < 4 * se
    assert set(tables["training"]["law"]) == {"k=0", "k=3", "queue:1.5:0.5"}


def test_the_staleness_law_table_reads_slopes_and_the_collapse():
    """bias² = c·(k·η)² exactly (SE 1% of it) gives slope 2 in k·η, k and η and a collapse ratio
    of 1 where the corner products agree; a composition with no bias (SIS) gives NaN, never a
    slope."""
    rows = []
    for k in (0, 1, 2, 4, 8):
        for eta in (0.05, 0.1, 0.2, 0.4):
            for name, c in (("x", 3.0), ("sis", 0.0)):
                b = c * (k * eta) ** 2
                rows.append(
                    {"correction": name, "mismatch": "noise:0", "switch": 0, "update": 0}
                    | {"staleness": k, "eta": eta, "bias_sq_paired": b}
                    | {"bias_sq_paired_se": 0.01 * b + (1e-6 if c == 0 else 0)}
                )
    law = analysis.staleness_law(pd.DataFrame(rows)).set_index("correction")
    for col in ("slope_k_eta", "slope_k", "slope_eta"):
        assert law.loc["x", col] == pytest.approx(2.0, abs=1e-9)
        assert math.isnan(law.loc["sis", col])
    assert law.loc["x", "collapse"] == pytest.approx(1.0) and law.loc["x", "points"] == 16
    assert math.isnan(law.loc["sis", "collapse"])
