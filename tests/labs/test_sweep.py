"""The sweep's ``--scale``, ``--ddof`` and ``--eps`` and the tree's ``eps = 0``/``ddof = 0``
against Monte Carlo: grpo's exact theory (count tables of gpolab/theory/exact.py) for scale
group/none, an independent numpy implementation for scale batch (which has no theory), the exact
beta-binomial formulas of gpolab/theory/tree.py for trees.  Tolerances: 4 standard errors."""

import json

import jax
import numpy as np
import pandas as pd
import pytest

from gpolab import engine
from gpolab.envs import bandit, tree
from gpolab.kernels import grouped
from gpolab.labs.sweep.lab import Config, run_sweep
from gpolab.runner.cli import main
from gpolab.theory import exact as ex
from gpolab.theory import mse as closed
from gpolab.theory import tree as theory_tree

SMALL = ["--prompts", "4", "--actions", "8", "--seeds", "20000", "--G", "2,4,8"]


def _params():
    return bandit.make(0, prompts=4, actions=8)


@pytest.mark.slow
@pytest.mark.parametrize(
    "scale,ddof,eps", [("group", 0, 0.0), ("group", 1, 0.3), ("none", 1, 1e-4)]
)
def test_cli_sweep_scale_ddof_eps_against_exact_theory(tmp_path, capsys, scale, ddof, eps):
    """Each setting's grpo MSE within 4 SE of the count-table theory for that setting, which
    differs from the default setting's theory by more than 8 SE wherever the flags can matter
    (a flag the cell ignored would fail); scale none is Dr.GRPO's mean, whose closed form
    (gpolab/theory/mse.py) the count table must reproduce."""
    argv = [
        "sweep",
        "--estimators",
        "grpo",
        *SMALL,
        "--scale",
        scale,
        "--ddof",
        str(ddof),
        "--eps",
        str(eps),
        "--out",
        str(tmp_path / "s"),
        "--json",
    ]
    assert main(argv) == 0
    df = pd.DataFrame([json.loads(line) for line in capsys.readouterr().out.splitlines()])
    assert list(df["G"]) == [2, 4, 8] and (df["theory"] == "count table").all()
    assert (df["scale"] == scale).all() and (df["ddof"] == ddof).all() and (df["eps"] == eps).all()
    z = (df["mse"] - df["theory_mse"]) / df["mse_se"]
    assert (z.abs() < 4).all(), z.tolist()
    truth = bandit.exact(_params())
    for G, se, mse in zip(df["G"], df["mse_se"], df["theory_mse"], strict=True):
        default = ex.mse(truth, ex.registry_table("grpo", G), G)
        if scale == "none":
            np.testing.assert_allclose(mse, closed.mse(truth, "mean", G), rtol=1e-6)
        assert abs(mse - default) > 8 * se, (G, mse, default, se)


def _numpy_grpo_batch_sq(params, truth, actions, rewards, ddof, eps):
    """‖e‖² per seed of grpo with one std over the P·G rewards of a seed, in float64 numpy:
    A = (Z − Z̄_x)/(s_batch + eps) (0 for all-equal groups), ĝ_x = (1/G) Σ_g A_g (e_{a_g} − π_x),
    e = √f_x (ĝ_x − g_x) over every prompt x (the sweep's B = 0 statistic)."""
    S, P, G = rewards.shape
    z = rewards.astype(np.float64)
    centred = z - z.mean(-1, keepdims=True)
    s = z.reshape(S, -1).std(-1, ddof=ddof)[:, None, None]
    flat = (z.max(-1) == z.min(-1))[..., None]
    adv = np.where(flat, 0.0, centred / np.where(flat, 1.0, s + eps))
    pi = np.asarray(bandit.policy(params), np.float64)
    A = pi.shape[-1]
    onehot = np.eye(A)[actions]  # (S, P, G, A)
    ghat = (np.einsum("spg,spga->spa", adv, onehot) - adv.sum(-1)[..., None] * pi) / G
    f = np.asarray(truth.prompt_probs, np.float64)
    err = np.sqrt(f)[None, :, None] * (ghat - np.asarray(truth.g_local, np.float64)[None])
    return np.sum(err**2, axis=(1, 2))


@pytest.mark.slow
@pytest.mark.parametrize("ddof", [0, 1])
def test_batch_scale_cell_equals_numpy_on_the_same_draws(ddof):
    """Scale batch has no exact theory: the engine's per-seed ‖e‖² equals an independent numpy
    computation of the same estimator on the same (actions, rewards) draws."""
    params = _params()
    truth = bandit.exact(params)
    G, eps, n = 4, 1e-2, 256
    cell = grouped.BanditCell(("grpo",), G=G, scale="batch", ddof=ddof)
    key = jax.random.key(5)
    idx = np.arange(n, dtype=np.uint32)
    got = np.asarray(
        engine.per_seed(
            grouped.bandit_error,
            cell,
            key,
            (params, truth, bandit.outcome_tables(params), eps),
            idx,
        )["grpo"]["sq"],
        np.float64,
    )
    prompts = np.arange(params.num_prompts, dtype=np.int32)
    with engine.prng_mode():
        keys = engine.seed_keys(key, idx)
        actions, rewards = jax.vmap(bandit.sample, in_axes=(0, None, None, None, None))(
            keys, params, prompts, G, bandit.outcome_tables(params)
        )
    ref = _numpy_grpo_batch_sq(params, truth, np.asarray(actions), np.asarray(rewards), ddof, eps)
    np.testing.assert_allclose(got, ref, rtol=2e-4, atol=1e-7)
    # the batch std is not the group std: the group-scaled estimator differs on these draws
    group = grouped.BanditCell(("grpo",), G=G, scale="group", ddof=ddof)
    other = engine.per_seed(
        grouped.bandit_error, group, key, (params, truth, bandit.outcome_tables(params), eps), idx
    )
    assert np.max(np.abs(np.asarray(other["grpo"]["sq"]) - got)) > 1e-3


@pytest.mark.slow
def test_batch_scale_sweep_matches_an_independent_numpy_monte_carlo():
    """``scale="batch"`` through run_sweep against a numpy Monte Carlo with its own draws (numpy's
    generator: action from π, reward Bernoulli(p)): means within 4 combined SE."""
    cfg = Config(
        estimators=("grpo",),
        G=(4,),
        scale="batch",
        ddof=1,
        eps=1e-2,
        seeds=20_000,
        prompts=4,
        actions=8,
    )
    (row,) = run_sweep(cfg).to_dict(orient="records")
    assert row["theory"].startswith("none") and row["variant"] == "batch"
    params = _params()
    truth = bandit.exact(params)
    rng = np.random.default_rng(0)
    pi = np.asarray(bandit.policy(params), np.float64)
    p = np.asarray(params.success, np.float64)
    S, P, G = 40_000, pi.shape[0], 4
    cdf = np.cumsum(pi, -1)
    u = rng.random((S, P, G))
    actions = np.minimum((u[..., None] > cdf[None, :, None, :]).sum(-1), pi.shape[-1] - 1)
    rewards = (rng.random((S, P, G)) < p[np.arange(P)[None, :, None], actions]).astype(float)
    sq = _numpy_grpo_batch_sq(params, truth, actions, rewards, 1, 1e-2)
    se = np.hypot(row["mse_se"], sq.std(ddof=1) / np.sqrt(S))
    assert abs(row["mse"] - sq.mean()) < 4 * se, (row["mse"], sq.mean(), se)
    # and it is not the group-scaled value (the option reached the cell)
    group = ex.mse(truth, ex.registry_table("grpo", G, eps=1e-2), G)
    assert abs(row["mse"] - group) > 8 * se


@pytest.mark.slow
def test_tree_sweep_eps0_ddof0_against_exact_formulas():
    """env=tree with eps = 0 and ddof = 0: MSE and the degenerate share within 4 SE of the exact
    beta-binomial formulas (gpolab/theory/tree.py) at that ddof, which for thought-std differ
    from the ddof-1 formulas by more than 8 SE (a ddof the cell ignored would fail)."""
    cfg = Config(
        env="tree",
        K=(4, 8),
        M=(2, 4),
        estimators=("thought-std", "leaf-std", "mean-only"),
        ddof=0,
        eps=0.0,
        seeds=10_000,
    )
    df = run_sweep(cfg)
    law = theory_tree.thought_law(tree.make_beta(cfg.instance.beta_a, cfg.instance.beta_b))
    for r in df.to_dict(orient="records"):
        K, M, v = int(r["K"]), int(r["M"]), r["variant"]
        exact = theory_tree.advantage_moments(law, K, M, v, ddof=0, eps=0.0)
        assert exact["exact"]
        assert abs(r["mse"] - exact["mse"]) < 4 * r["mse_se"], (v, K, M, r["mse"], exact["mse"])
        p = r["theory_degenerate_frac"]
        assert abs(r["degenerate_frac"] - p) < 4 * np.sqrt(p * (1 - p) / r["n_seeds"]) + 1e-12
        if v == "thought-std":  # leaf-std's ddof acts on K·M leaves: too small to resolve here
            other = theory_tree.mse(law, K, M, v, ddof=1, eps=0.0)
            assert abs(other - exact["mse"]) > 8 * r["mse_se"], (v, K, M)


def test_cells_shares_are_disjoint_and_assemble_without_recomputing(tmp_path, capsys):
    """`--cells i/n` job-array shares: whole units, disjoint, covering every cell; a final run
    without --cells assembles the same table as one run, computing nothing."""
    from gpolab.labs.sweep import lab as sweep
    from gpolab.runner.cli import main

    small = [
        "--estimators",
        "loo,grpo",
        "--G",
        "2,4,8",
        "--seeds",
        "200",
        "--prompts",
        "3",
        "--actions",
        "4",
    ]
    cfg = sweep.Config(estimators=("loo", "grpo"), G=(2, 4, 8), seeds=200, prompts=3, actions=4)
    shares = [sweep.share_cells(cfg, i, 2) for i in range(2)]
    assert not shares[0] & shares[1] and shares[0] | shares[1] == set(range(6))
    out = tmp_path / "arr"
    for i in range(2):
        assert main(["sweep", *small, "--out", str(out), "--cells", f"{i}/2"]) == 0
    assert not (out / "results.parquet").exists()  # a share writes cells, not the table
    calls = []
    original = sweep.make_setup
    sweep.make_setup = lambda c: calls.append(c) or original(c)
    try:
        assert main(["sweep", *small, "--out", str(out)]) == 0
    finally:
        sweep.make_setup = original
    assert calls == []  # nothing recomputed
    assembled = pd.read_parquet(out / "results.parquet")
    assert main(["sweep", *small, "--out", str(tmp_path / "one")]) == 0
    once = pd.read_parquet(tmp_path / "one" / "results.parquet")
    cols = ["estimator", "G", "mse", "bias_sq", "cos"]
    pd.testing.assert_frame_equal(assembled[cols], once[cols])
    capsys.readouterr()
    for bad in ("2/2", "x", "1/0"):
        assert main(["sweep", *small, "--out", str(out), "--cells", bad]) == 2
        assert "cells: got" in capsys.readouterr().err


def test_the_default_sweep_ends_with_its_conclusion_and_the_next_command(tmp_path, capsys):
    """Issue 40, item 8: the first command ended with "joint p ... = 1; largest |z| 2.23", printed
    negative bias_sq without a word and the same seconds for every estimator of a G."""
    argv = [
        "sweep",
        "--G",
        "2,4",
        "--seeds",
        "3000",
        "--prompts",
        "3",
        "--actions",
        "4",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.lstrip().startswith("estimator"))
    assert "seconds" not in header and out.count("this run") == 1
    df = pd.read_parquet(tmp_path / "results.parquet")
    assert ("below 0 in" in out) == bool((df["bias_sq"] < 0).any())
    rows = df[df["estimator"] != "oracle"]
    top = {rows[rows["G"] == G].sort_values("mse").iloc[0]["estimator"] for G in (2, 4)}
    (line,) = [x for x in out.splitlines() if x.startswith("conclusion: lowest MSE")]
    assert all(name in line for name in top) and "oracle reads the true values" in line
    assert "scale-free (scaled_mse, exact) at G=4: " in out
    assert "next: `gpolab groupsize`" in out and "`gpolab plan LOG`" in out
    from gpolab.labs.sweep import lab as sweep

    mixed = df[df["estimator"].isin(["loo", "grpo"]) | (df["estimator"] == "oracle")].copy()
    mixed.loc[(mixed["estimator"] == "loo") & (mixed["G"] == 2), "mse"] = 1e-9  # G=2: loo best
    mixed.loc[(mixed["estimator"] == "grpo") & (mixed["G"] == 4), "mse"] = 1e-9  # G=4: grpo
    (first, *_) = sweep.conclusion(mixed)
    assert first.startswith("conclusion: lowest MSE: G=2 loo, G=4 grpo; oracle reads")


def test_a_float64_sweep_leaves_the_process_in_float32(monkeypatch):
    """``x64 = true`` is scoped to the sweep (:func:`gpolab.engine.float64_mode`): its per-seed
    function is traced on float64 truth, and a computation after it in the same process is
    float32 again (the sweep once switched the whole process to float64 for good)."""
    import jax.numpy as jnp

    from gpolab.labs.sweep import units

    seen = []

    def spy(cell, key, args):
        seen.append(args[1].g.dtype)
        return grouped.bandit_error(cell, key, args)

    monkeypatch.setattr(units.Bandit, "error", lambda self, cfg: spy)
    cfg = Config(estimators=("loo",), G=(4,), seeds=64, prompts=4, actions=8, x64=True)
    df = run_sweep(cfg)
    assert len(df) == 1 and seen and all(d == jnp.float64 for d in seen)
    assert not jax.config.jax_enable_x64
    assert jnp.zeros(2).dtype == jnp.float32 and jnp.sum(jnp.ones(3) / 3).dtype == jnp.float32
