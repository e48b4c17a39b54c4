"""Tree branching lab (issue 6, gpolab/labs/tree/lab.py): estimator identities, samplers, closed
forms
vs Monte Carlo, CLI, the lab protocol (modes, cache keys, figures from saved tables).

Tolerances come from Monte Carlo standard errors (4 SE) of per-seed scalars; fixed seeds.
"""

import itertools
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from scipy import stats

from gpolab import configs, engine, estimators
from gpolab.envs import tree
from gpolab.kernels import tree as tree_kernel
from gpolab.kit import running
from gpolab.labs.tree import lab
from gpolab.runner.cli import main
from gpolab.theory import tree as theory


def run_cell(K, M, seeds, *, a=2.0, b=3.0, variant="thought-std", ddof=1, model="beta", key=0):
    """Raw engine moments of one cell (eps = 0, so the exact formulas apply as written)."""
    cfg = lab.Config(beta_a=a, beta_b=b, variant=variant, ddof=ddof, eps=0.0, model=model)
    params, truth, law, grad_target = lab.setup(cfg)
    cell = tree_kernel.tree_cell(K, M, variant, ddof, model=model, a=a, b=b, grad=model == "finite")
    args = (params, truth, np.float32(0.0), grad_target)
    chunk = lab.chunk_for(cfg, K, M)
    return engine.run(tree_kernel.tree_error, cell, args, jax.random.key(key), seeds, chunk), law


def close(m, name, exact, n_se=4.0):
    mean, se = float(m.mean(name)), m.se(name)
    assert abs(mean - exact) < n_se * se, f"{name}: MC {mean:.5g} ± {se:.2g} vs exact {exact:.5g}"


# ----------------------------------------------------------------------------- identities


@pytest.mark.parametrize("ddof", [0, 1])
def test_M1_is_flat_grpo(ddof):
    z = (jax.random.uniform(jax.random.key(1), (50, 8)) < 0.4).astype(jnp.float32)
    flat = estimators.grpo_advantages(z, ddof=ddof, eps=1e-4)
    treeadv = estimators.tree_advantages(z[..., None], variant="thought-std", ddof=ddof, eps=1e-4)
    np.testing.assert_allclose(treeadv, flat, rtol=1e-6, atol=1e-6)  # float32 rounding


@pytest.mark.parametrize("variant", estimators.TREE_VARIANTS)
def test_advantages_sum_to_zero_and_affine_invariance(variant):
    z = jax.random.uniform(jax.random.key(2), (40, 6, 5))  # real-valued leaves
    adv = estimators.tree_advantages(z, variant=variant, eps=0.0)
    np.testing.assert_allclose(jnp.sum(adv, -1), 0.0, atol=2e-5)
    moved = estimators.tree_advantages(3.0 * z + 7.0, variant=variant, eps=0.0)
    scale = 3.0 if variant == "mean-only" else 1.0  # std variants are affine invariant
    np.testing.assert_allclose(moved, scale * adv, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("variant", estimators.TREE_VARIANTS)
def test_lab_leaves_give_the_drawn_trees_advantages(variant):
    """The lab hands Z_kj = 1[j < S_k] (or V̂ alone) to tree_advantages: same Â as the draws."""
    z = (jax.random.uniform(jax.random.key(3), (30, 5, 7)) < 0.5).astype(jnp.float32)
    counts = jnp.sum(z, -1)
    ref = estimators.tree_advantages(z, variant=variant)
    arranged = jax.vmap(lambda c: tree.leaves(c, 7))(counts)
    np.testing.assert_allclose(estimators.tree_advantages(arranged, variant=variant), ref, 1e-6)
    if variant != "leaf-std":
        one = estimators.tree_advantages((counts / 7)[..., None], variant=variant)
        np.testing.assert_allclose(one, ref, rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------- samplers


def test_integer_beta_sampler():
    with engine.prng_mode():
        p = tree.sample_beta_int(jax.random.key(4), 2, 3, (50_000,))
    assert stats.kstest(np.asarray(p, np.float64), stats.beta(2, 3).cdf).pvalue > 1e-3


@pytest.mark.parametrize("M", [5, 64, 150])  # uniforms, CDF inversion, jax.random.binomial
def test_count_sampler_is_binomial(M):
    p = jnp.full((40_000,), 0.3)
    with engine.prng_mode():
        s = np.asarray(tree.sample_counts(jax.random.key(M), p, M), np.int64)
    pmf = stats.binom.pmf(np.arange(M + 1), M, 0.3)
    bins = np.flatnonzero(pmf * len(s) > 5)  # pool the far tails into the edge bins
    edges = np.concatenate([[-0.5], bins[1:] - 0.5, [M + 0.5]])
    observed = np.histogram(s, edges)[0]
    expected = np.add.reduceat(pmf, np.concatenate([[0], bins[1:]])) * len(s)
    assert stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue > 1e-3


# ----------------------------------------------------------------------------- closed forms


@pytest.mark.parametrize("a,b,M", [(2.0, 3.0, 1), (0.5, 1.5, 4), (1.0, 1.0, 16)])
def test_beta_limits_in_closed_form(a, b, M):
    law = theory.thought_law((a, b))
    mu, var, tau = theory.beta_moments(a, b)
    assert math.isclose(law.mean, mu) and math.isclose(law.var, var) and math.isclose(law.tau, tau)
    assert math.isclose(theory.floor(law, M), (a + b) / (a + b + M), rel_tol=1e-9)
    assert math.isclose(theory.floor(law, M, "leaf-std"), (a + b) / ((a + b + 1) * M), rel_tol=1e-9)
    rho = math.sqrt(M / (M + a + b))
    assert math.isclose(theory.limit_corr(law, M), rho, rel_tol=1e-9)
    assert math.isclose(theory.limit_mse(law, M), 2 * (1 - rho), rel_tol=1e-9)
    pmf = stats.betabinom.pmf(np.arange(M + 1), M, a, b)  # Var V̂ from the beta-binomial pmf
    j = np.arange(M + 1) / M
    assert math.isclose(theory.value_variance(law, M), pmf @ j**2 - (pmf @ j) ** 2, rel_tol=1e-9)


def test_sum_stats_pmf_matches_enumeration():
    pmf1 = stats.betabinom.pmf(np.arange(4), 3, 2.0, 3.0)
    t1, t2, prob = theory.sum_stats_pmf(pmf1, 3)
    ref = {}
    for s in itertools.product(range(4), repeat=3):
        key = (sum(s), sum(x * x for x in s))
        ref[key] = ref.get(key, 0.0) + np.prod(pmf1[list(s)])
    got = {(int(x), int(y)): p for x, y, p in zip(t1, t2, prob, strict=True)}
    assert got.keys() == ref.keys()
    for k, v in ref.items():
        assert math.isclose(got[k], v, rel_tol=1e-9, abs_tol=1e-14)


def test_thought_std_second_moment_identity():
    """Σ_k Â_k² = K − ddof on non-degenerate groups ⇒ E Â² = (K−ddof)/K · (1 − P_deg)."""
    law = theory.thought_law((2.0, 3.0))
    for K, M, ddof in [(4, 2, 1), (6, 3, 0)]:
        exact = theory.advantage_moments(law, K, M, "thought-std", ddof)["second"]
        p_deg = theory.degenerate_prob(tree.make_beta(2.0, 3.0), K, M)
        assert math.isclose(exact, (K - ddof) / K * (1 - p_deg), rel_tol=1e-9)


@pytest.mark.parametrize(
    "a,b,M,variant",
    [(2.0, 3.0, 4, "thought-std"), (0.5, 1.5, 2, "thought-std"), (1.0, 4.0, 16, "leaf-std")],
)
def test_finite_K_correlation_and_mse_match_exact(a, b, M, variant):
    """E[Â_k A_k], E[Â_k²] and the MSE at K = 8 against the exact beta-binomial formulas."""
    m, law = run_cell(8, M, 20_000, a=a, b=b, variant=variant, key=11)
    exact = theory.advantage_moments(law, 8, M, variant, 1)
    assert exact["exact"]
    close(m, "at", exact["cross"])
    close(m, "aa", exact["second"])
    close(m, "sq", exact["mse"])
    corr_mc = float(m.mean("at")) / math.sqrt(float(m.mean("aa")) * float(m.mean("tt")))
    assert abs(corr_mc - exact["corr"]) < 0.02


@pytest.mark.slow
@pytest.mark.parametrize(
    "a,b,M,variant",
    [
        (2.0, 3.0, 1, "thought-std"),
        (2.0, 3.0, 16, "thought-std"),
        (0.5, 0.5, 4, "thought-std"),
        (1.0, 2.0, 8, "leaf-std"),
        (2.0, 3.0, 4, "mean-only"),
    ],
)
def test_variance_floor_matches_closed_form(a, b, M, variant):
    """At K = 256 the conditional variance matches the O(1/K) theory within 4 SE, and that theory
    sits within 1% of the exact K → ∞ floor."""
    m, law = run_cell(256, M, 3000, a=a, b=b, variant=variant, key=12)
    expected = theory.variance(law, 256, M, variant, 1)
    close(m, "cond_var", expected)
    assert abs(expected / theory.floor(law, M, variant) - 1) < 0.01


@pytest.mark.slow
def test_variance_decays_like_one_over_M():
    """Log-log slope of the conditional variance in M over M = 32, 64, 96 ≫ a + b = 2."""
    Ms = [32, 64, 96]
    var = [float(run_cell(256, M, 1500, a=1.0, b=1.0, key=13)[0].mean("cond_var")) for M in Ms]
    slope = np.polyfit(np.log(Ms), np.log(var), 1)[0]
    assert abs(slope + 1) < 0.05, slope


@pytest.mark.parametrize("K,M", [(3, 1), (4, 4), (2, 16)])
def test_degenerate_fraction_matches_exact(K, M):
    m, _ = run_cell(K, M, 20_000, key=14)
    exact = theory.degenerate_prob(tree.make_beta(2.0, 3.0), K, M)
    se = math.sqrt(exact * (1 - exact) / 20_000)
    assert abs(float(m.mean("degenerate")) - exact) < 4 * se + 1e-12


def test_thought_gradient_exact_and_mean_only_bias():
    """∇J = π ⊙ (values − J) equals jax.grad, and mean-only ĝ has mean (1 − 1/K) ∇J exactly."""
    params = tree.make_finite(0, 32)
    auto = jax.grad(lambda l: tree.thought_return(params.replace(logits=l)))(params.logits)
    np.testing.assert_allclose(tree.exact(params).grad, auto, rtol=1e-5, atol=1e-7)
    K, n = 4, 20_000
    m, _ = run_cell(K, 2, n, variant="mean-only", model="finite", key=15)
    g = np.asarray(tree.exact(params).grad, np.float64)
    stats_ = engine.error_stats(m, err="grad_err", sq="grad_sq")
    mean_err = m.mean("grad_err")
    # ‖ē − b‖² ≈ tr Cov/n · χ²_T/T; 3× its mean is far in the tail for T = 32
    assert np.sum((mean_err + g / K) ** 2) < 3 * stats_.variance / n


def test_one_compilation_per_shape():
    cfg = lab.Config(K=(3,), M=(2,), seeds=10)
    params, truth, _, gt = lab.setup(cfg)
    cell = tree_kernel.TreeCell(3, 2, beta_ints=(2, 3))
    args = (params, truth, np.float32(1e-4), gt)
    before = engine.TRACES[("tree_error", cell)]
    for n in (5, 50, 77):
        engine.run(tree_kernel.tree_error, cell, args, jax.random.key(0), n, chunk=32)
    assert engine.TRACES[("tree_error", cell)] - before <= 1


# ----------------------------------------------------------------------------- CLI


@pytest.mark.slow
def test_cli_grid_and_budget_json(tmp_path, capsys):
    out = str(tmp_path / "grid")
    assert main(["tree", "--K", "2,4", "--M", "1,3", "--seeds", "64", "--out", out, "--json"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(rows) == 4 and all(list(r) == list(lab.JSON_KEYS) for r in rows)
    assert {(r["K"], r["M"]) for r in rows} == {(2, 1), (2, 3), (4, 1), (4, 3)}
    for name in ("results.parquet", "results.csv", "tree_floor.png", "tree_lab_heatmap.png"):
        assert (tmp_path / "grid" / name).exists()
    out = str(tmp_path / "budget")
    args = ["tree", "--leaves", "6", "--seeds", "64", "--model", "finite", "--out", out, "--json"]
    assert main(args) == 0
    captured = capsys.readouterr()
    rows = [json.loads(x) for x in captured.out.splitlines()]
    keys = [*lab.JSON_KEYS, *lab.GRAD_KEYS, *lab.COST_KEYS]
    assert [(r["K"], r["M"]) for r in rows] == [(2, 3), (3, 2), (6, 1)]
    assert all(list(r) == keys for r in rows)
    assert sum(r["recommended"] for r in rows) == 1  # finite thoughts: ranked on Monte Carlo corr
    assert all(r["score_source"] == "monte carlo" and r["score_se"] > 0 for r in rows)
    assert "recommended split: K=" in captured.err and "bias²" in captured.err
    assert (tmp_path / "budget" / "tree_budget.png").exists()


@pytest.mark.parametrize(
    "flags,field",
    [
        (["--K", "1,4"], "K"),
        (["--M", "0"], "M"),
        (["--variant", "leaf"], "variant"),
        (["--leaves", "1"], "leaves"),
        (["--leaves", "16", "--K", "3,5"], "leaves"),
        (["--beta-a", "0"], "beta_a"),
        (["--ddof", "2"], "ddof"),
        (["--K", "2,,4"], "K"),
    ],
)
def test_cli_bad_config(tmp_path, capsys, flags, field):
    assert main(["tree", *flags, "--seeds", "8", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"gpolab tree: error: {field}: "), err


# ----------------------------------------------------------------------------- lab protocol


def fail(*args, **kwargs):
    pytest.fail("computed")


def test_bad_out_is_one_line_before_any_computation(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(engine, "run", fail)
    out = tmp_path / "out"
    out.write_text("")
    assert main(["tree", "--K", "2", "--M", "1", "--seeds", "8", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpolab tree: error: out: "), err


@pytest.mark.parametrize(
    "argv,message",
    [
        (
            ["--thoughts", "8"],
            "--thoughts: not used with model = beta; it applies only when model is finite",
        ),
        (["--logit-scale", "2", "--leaves", "4"], "--logit-scale: not used with model = beta"),
        (["--instance-seed", "3"], "--instance-seed: not used with model = beta"),
        (
            ["--leaves", "16", "--M", "4"],
            "--M: not used with mode = budget; it applies only when mode is grid",
        ),
        (
            ["--think-len", "100"],
            "--think-len: not used with mode = grid; it applies only when mode is budget",
        ),
        (["--K", "2,,4"], "K: got '2,,4'; allowed: a comma-separated list of integers with no"),
    ],
)
def test_a_flag_the_mode_does_not_use_is_an_error(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(engine, "run", fail)
    assert main(["tree", *argv, "--seeds", "8", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "o").exists()


def test_a_config_file_entry_the_mode_does_not_use_names_the_file(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(engine, "run", fail)
    (tmp_path / "bad.toml").write_text('lab = "tree"\n[tree]\nthoughts = 8\n')
    assert main(["tree", "--config", str(tmp_path / "bad.toml"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "bad.toml [tree] thoughts: not used with model = beta" in err


def test_irrelevant_settings_reuse_cells_and_relevant_ones_recompute(tmp_path, monkeypatch):
    from gpolab.kit.store import Store

    computed, real = [], engine.run
    monkeypatch.setattr(
        engine, "run", lambda fn, cell, *a, **k: computed.append(cell) or real(fn, cell, *a, **k)
    )
    store = Store(tmp_path)
    base = lab.Config(leaves=4, seeds=64, variant="mean-only", out=str(tmp_path))
    first = lab.run(base, store=store)["results"]
    assert [(c.K, c.M) for c in computed] == [(2, 2), (4, 1)]
    # the cost model, the chunk size and eps (mean-only has none) change no cell
    again = lab.run(base.replace(think_len=10.0, answer_len=1.0, chunk=16, eps=0.5), store=store)[
        "results"
    ]
    assert len(computed) == 2
    assert again["cost"].tolist() == [2 * (10 + 2 * 1), 4 * (10 + 1 * 1)]
    tokens = np.array([10 + 2 * 1, 10 + 1 * 1], float)  # L_think + M·L_answer
    np.testing.assert_allclose(again["score"], tokens / again["theory_corr"] ** 2, rtol=1e-12)
    pd.testing.assert_series_equal(again["mse"], first["mse"])
    assert again["eps"].isna().all() and first["think_len"].eq(256.0).all()
    # the same (K, M) cell in grid mode is the budget run's cell
    grid = base.replace(leaves=0, K=(2,), M=(2,))
    assert lab.run(grid, store=store)["results"]["mse"][0] == first["mse"][0]
    assert len(computed) == 2
    for change in ({"ddof": 0}, {"beta_a": 3.0}, {"seeds": 65}, {"variant": "thought-std"}):
        lab.run(grid.replace(**change), store=store)
    assert len(computed) == 6
    lab.run(grid.replace(variant="thought-std", eps=0.5), store=store)  # eps read here
    assert len(computed) == 7


def test_quick_keeps_every_typed_flag_end_to_end(tmp_path, capsys):
    out = tmp_path / "q"
    assert (
        main(["tree", "--quick", "--K", "2", "--M", "1,2", "--seeds", "50", "--out", str(out)]) == 0
    )
    df = pd.read_parquet(out / "results.parquet")
    assert df["n_seeds"].eq(50).all() and df["K"].eq(2).all() and df["M"].tolist() == [1, 2]
    _, table, _ = configs.split_file(out / "config.toml", "tree")
    assert table["seeds"] == 50 and table["K"] == [2] and table["M"] == [1, 2]
    assert (out / "tree_variance_vs_M.png").exists() and "this run" in capsys.readouterr().out
    out = tmp_path / "untyped"  # what is not typed takes the quick sizes
    assert main(["tree", "--quick", "--K", "2", "--leaves", "2", "--out", str(out)]) == 0
    df = pd.read_parquet(out / "results.parquet")
    assert df["n_seeds"].eq(lab.Config.QUICK["seeds"]).all() and df["M"].tolist() == [1]


def test_sweep_tree_cells_are_the_lab_cells():
    """One tree Monte Carlo: a sweep env=tree cell gives the tree lab's numbers."""
    from gpolab.labs.sweep import lab as sweep

    cfg = sweep.Config(env="tree", K=(3,), M=(2,), seeds=300, chunk=256, eps=1e-4)
    swept = sweep.run_sweep(cfg).iloc[0]
    row = lab.run(lab.Config(K=(3,), M=(2,), seeds=300))["results"].iloc[0]
    for name in ("mse", "mse_group", "variance", "degenerate_frac", "corr"):
        assert math.isclose(swept[name], row[name], rel_tol=1e-6), name


def test_figures_are_drawn_from_saved_tables_only(tmp_path, monkeypatch):
    cfg = configs.resolve(
        lab.Config, typed={"K": "2,4", "M": "1,16", "seeds": 64, "eps": 0.0, "out": str(tmp_path)}
    )
    running.execute(lab, cfg)
    monkeypatch.setattr(engine, "run", fail)
    monkeypatch.setattr(lab, "setup", fail)
    monkeypatch.setattr(theory, "floor", fail)
    paths = running.draw(lab, tmp_path, into=tmp_path / "again")
    names = ["tree_floor.png", "tree_variance_vs_M.png", "tree_lab_heatmap.png"]
    assert [p.name for p in paths] == names and all(p.stat().st_size > 10_000 for p in paths)
    floor = pd.read_parquet(tmp_path / "floor.parquet")  # the exact curve: (a+b)/(a+b+M)
    assert len(floor) == 100 and floor["M"].min() == 1 and math.isclose(floor["M"].max(), 16)
    np.testing.assert_allclose(floor["theory_floor"], 5 / (5 + floor["M"]), rtol=1e-9)
    df = pd.read_parquet(tmp_path / "results.parquet")
    for name, value in {
        "a": 2.0,
        "b": 3.0,
        "variant": "thought-std",
        "ddof": 1,
        "eps": 0.0,
        "model": "beta",
        "n_seeds": 64,
        "budget": 0,
    }.items():
        assert df[name].eq(value).all(), name
    from gpolab.labs.tree import plots

    assert plots.tag(df) == "Beta(2, 3), thought-std, ddof 1, 64 seeds"  # titles from the data


def test_ctrl_c_keeps_finished_cells_and_the_same_command_resumes(tmp_path, capsys, monkeypatch):
    real, calls = lab.measure, []

    def measure_then_stop(*args):
        calls.append(args[1:3])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(lab, "measure", measure_then_stop)
    argv = ["tree", "--K", "2", "--M", "1,2", "--seeds", "64", "--out", str(tmp_path)]
    assert main(argv) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"gpolab tree: interrupted: 1 finished cells kept in {tmp_path}; run the same command "
        "again to resume (--fresh starts over)"
    )
    monkeypatch.setattr(lab, "measure", real)
    assert main(argv) == 0
    assert "1 cells already finished (resuming)" in capsys.readouterr().err
    assert len(pd.read_parquet(tmp_path / "results.parquet")) == 2


# ----------------------------------------------------------------------------- budget ranking


class FakeMoments:
    """Per-tree moment means of the correlation (corr_v, corr_vv) over ``n`` seeds."""

    def __init__(self, n, mean, second):
        self.n, self._m = n, {"corr_v": np.asarray(mean), "corr_vv": np.asarray(second)}

    def mean(self, name):
        return self._m[name]


def rescaled(m, c):
    """The moments of the estimator c·Â from those of Â: v = (a, t, aa, tt, at) → D v."""
    d = np.array([c, 1.0, c * c, 1.0, c])
    return FakeMoments(m.n, d * m.mean("corr_v"), np.outer(d, d) * m.mean("corr_vv"))


def test_score_is_invariant_to_rescaling_while_the_mse_is_not():
    """corr (and its SE), hence the score, of c·Â equal those of Â; E(cÂ − A)² does not."""
    m, _ = run_cell(4, 2, 2000, key=21)
    r, se = tree_kernel.corr_stats(m)
    assert 0.3 < r < 0.6 and 0 < se < 0.05
    a, t, aa, tt, at = m.mean("corr_v")
    for c in (0.25, 3.0):
        r_c, se_c = tree_kernel.corr_stats(rescaled(m, c))
        assert math.isclose(r_c, r, rel_tol=1e-9) and math.isclose(se_c, se, rel_tol=1e-6)
        mse, mse_c = aa - 2 * at + tt, c * c * aa - 2 * c * at + tt
        assert abs(mse_c - mse) > 0.1  # the plain MSE moves with the step size
        np.testing.assert_allclose(lab.score(r_c, 2, 256, 256), lab.score(r, 2, 256, 256))
    # c → 0 (an always-zero advantage): the MSE tends to E A² ≈ 1, the corr is undefined
    r0, _ = tree_kernel.corr_stats(rescaled(m, 0.0))
    assert math.isnan(r0) and abs(tt - 1) < 0.05


def budget_table(budget, think_len=256.0, answer_len=256.0, extra=()):
    """A budget table from the exact theory only (Beta(2, 3), thought-std, ddof 1, eps 1e-4)."""
    law, params = theory.beta_law(2.0, 3.0), tree.make_beta(2.0, 3.0)
    rows = []
    for K in range(2, budget + 1):
        if budget % K == 0:
            mom = theory.advantage_moments(law, K, budget // K, "thought-std", 1, 1e-4)
            deg = theory.degenerate_prob(params, K, budget // K)
            rows.append(
                dict(
                    K=K,
                    M=budget // K,
                    corr=mom["corr"],
                    corr_se=0.01,
                    mse=mom["mse"],
                    theory_corr=mom["corr"],
                    theory_exact=True,
                    theory_degenerate_frac=deg,
                )
            )
    rows += list(extra)
    df = pd.DataFrame(rows).assign(budget=budget, think_len=think_len, answer_len=answer_len)
    return df.assign(cost=lab.cost(df["K"], df["M"], think_len, answer_len))


def test_always_zero_advantage_wins_on_mse_but_not_on_the_score():
    """An always-zero advantage has MSE 1 < flat GRPO's 1.155 at budget 8: the plain MSE would
    pick it; its corr is undefined (no variance) and it is never recommended."""
    zero = dict(
        K=8,
        M=1,
        corr=math.nan,
        corr_se=math.nan,
        mse=1.0,
        theory_corr=math.nan,
        theory_exact=False,
        theory_degenerate_frac=0.0,
    )
    df = budget_table(8, extra=[zero])
    flat, nothing = df.loc[2], df.loc[3]  # both the 8 × 1 split
    assert (flat["K"], flat["M"]) == (8, 1) and flat["mse"] > 1.15  # the old ranking's artifact:
    assert nothing["mse"] * nothing["cost"] < flat["mse"] * flat["cost"]  # doing nothing "wins"
    ranked = lab.rank(df)
    assert ranked["recommended"].sum() == 1 and not ranked.loc[3, "recommended"]
    assert math.isnan(ranked.loc[3, "score"]) and np.isfinite(ranked.loc[2, "score"])
    df.loc[3, ["corr", "corr_se"]] = 0.0, 0.0  # corr 0: infinitely many tokens per thought
    assert lab.score(0.0, 1, 256, 256) == math.inf and not lab.rank(df).loc[3, "recommended"]


def test_exactly_one_recommended_row_per_budget_and_ties_are_flagged():
    df = pd.concat([budget_table(8), budget_table(16)], ignore_index=True)
    ranked = lab.rank(df)
    assert ranked.groupby("budget")["recommended"].sum().tolist() == [1, 1]
    assert ranked["distinguishable"].all() and not ranked["tie"].any()  # exact theory: no noise
    # two Monte Carlo rows with the same corr: a tie, still exactly one recommended row
    mc = budget_table(6).assign(theory_exact=False)
    mc.loc[:, "corr"], mc.loc[:, "M"], mc.loc[:, "corr_se"] = 0.5, 1, 0.01
    ranked = lab.rank(mc)
    assert ranked["recommended"].sum() == 1 and ranked["tie"].sum() == len(mc) - 1
    assert not ranked["distinguishable"].any()
    se = ranked["score_se"].to_numpy()  # 2 score SE(corr)/corr
    np.testing.assert_allclose(se, 2 * ranked["score"] * 0.01 / 0.5)


@pytest.mark.parametrize("budget,best,runner", [(8, (8, 1), (4, 2)), (16, (8, 2), (16, 1))])
def test_cli_budget_recommendation_against_exact_theory(budget, best, runner, tmp_path, capsys):
    """``gpolab tree --leaves N --json`` rows carry score (= (256 + 256 M)/corr², corr of the
    exact theory) and exactly one recommended row; budget 8 recommends 8 × 1, budget 16 8 × 2
    (the K = 2 splits the plain MSE × cost picked come last)."""
    out = str(tmp_path / "b")
    argv = ["tree", "--leaves", str(budget), "--seeds", "200", "--out", out, "--json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    rows = {(r["K"], r["M"]): r for r in map(json.loads, captured.out.splitlines())}
    law, params = theory.beta_law(2.0, 3.0), tree.make_beta(2.0, 3.0)
    for (K, M), r in rows.items():
        exact = theory.corr(law, K, M, "thought-std", 1, 1e-4)
        assert math.isclose(r["score"], (256 + 256 * M) / exact**2, rel_tol=1e-9)
        assert r["score_source"] == "exact" and r["score_se"] == 0
        assert math.isclose(r["rescaled_mse"], 1 - exact**2, rel_tol=1e-9)
        assert r["theory_degenerate_frac"] == pytest.approx(theory.degenerate_prob(params, K, M))
    assert [k for k, r in rows.items() if r["recommended"]] == [best]
    assert all(r["distinguishable"] for r in rows.values())
    ranked = sorted(rows, key=lambda k: rows[k]["score"])
    assert ranked[1] == runner and ranked[-1] == (2, budget // 2)
    assert f"recommended split: K={best[0]}, M={best[1]}" in captured.err


@pytest.mark.slow
def test_corr_standard_error_matches_the_spread_of_replicates():
    """30 independent runs of one cell: the sample SD of the pooled corr agrees with the mean
    delta-method SE (ratio in [0.7, 1.35]: the 99% range of an SD ratio on 29 degrees of
    freedom), and the mean corr matches the exact corr within 4 SE of that mean."""
    pairs = [tree_kernel.corr_stats(run_cell(4, 2, 2000, key=100 + i)[0]) for i in range(30)]
    r, se = np.array(pairs).T
    assert 0.7 < np.std(r, ddof=1) / np.mean(se) < 1.35
    exact = theory.corr(theory.beta_law(2.0, 3.0), 4, 2, "thought-std", 1, 0.0)
    assert abs(np.mean(r) - exact) < 4 * np.mean(se) / math.sqrt(30)


def test_thought_gradient_stats_mean_only_direction():
    """mean-only ĝ has E ĝ = (1 − 1/K) ∇J, so grad_dot = E ĝ·g = (1 − 1/K)‖g‖² and the bias² is
    ‖b‖² = ‖g‖²/K².  Tolerances, 4 SD with V = tr Cov: SD(ē·g) ≤ √(V ‖g‖²/n) (Cauchy–Schwarz);
    SD(bias²) ≤ 2√(‖b‖² V/n) + √2 V/n (bias² = ‖ē‖² − V/n up to O(1/n²))."""
    K, n = 4, 20_000
    m, _ = run_cell(K, 2, n, variant="mean-only", model="finite", key=16)
    g = np.asarray(tree.exact(tree.make_finite(0, 32)).grad, np.float64)
    stats_ = lab.grad_stats(m, g)
    gg = float(g @ g)
    assert stats_["grad_norm2"] == pytest.approx(gg)
    v, b2 = stats_["grad_variance"], gg / K**2
    assert abs(stats_["grad_dot"] - (1 - 1 / K) * gg) < 4 * math.sqrt(v * gg / n)
    assert abs(stats_["grad_bias_sq"] - b2) < 4 * (2 * math.sqrt(b2 * v / n) + 1.5 * v / n)
    assert stats_["grad_bias2_share"] == pytest.approx(stats_["grad_bias_sq"] / stats_["grad_mse"])


def test_cells_draw_from_their_own_key_stream_shared_by_variants():
    """Cell (K, M) draws from cell_key(key, "tree", K, M): the lab's row is that engine run, the
    same whatever grid it sits in, and the variants of one (K, M) see the same trees."""
    cfg = lab.Config(K=(3,), M=(2,), seeds=300)
    row = lab.run(cfg)["results"].iloc[0]
    params, truth, _, gt = lab.setup(cfg)
    cell = tree_kernel.tree_cell(3, 2)
    key = engine.cell_key(jax.random.key(0), "tree", 3, 2)
    args = (params, truth, np.float32(cfg.eps), gt)
    m = engine.run(tree_kernel.tree_error, cell, args, key, 300, lab.chunk_for(cfg, 3, 2))
    assert row["mse"] == pytest.approx(float(m.mean("sq")), rel=1e-6)
    other = lab.run(cfg.replace(K=(2, 3), M=(1, 2)))["results"]
    assert other.query("K == 3 and M == 2")["mse"].iloc[0] == pytest.approx(row["mse"], rel=1e-6)
    mean_only = lab.run(cfg.replace(variant="mean-only"))["results"].iloc[0]
    assert mean_only["degenerate_frac"] == row["degenerate_frac"]
    assert other.query("K == 2 and M == 1")["mse"].iloc[0] != row["mse"]


def test_old_flag_spellings_are_one_error_naming_them(tmp_path):
    """--a, --b and --budget (removed; CHANGELOG: --beta-a, --beta-b, --leaves): one error naming
    the old name, from flags and from a config file."""
    for old in ("a", "b", "budget"):
        with pytest.raises(configs.ConfigError, match=f"^{old}: unknown field; allowed: "):
            configs.resolve(lab.Config, typed={old: 8})
    (tmp_path / "old.toml").write_text('lab = "tree"\n[tree]\na = 1.5\n')
    _, table, _ = configs.split_file(tmp_path / "old.toml", "tree")
    with pytest.raises(configs.ConfigError, match=r"old.toml \[tree\] a: unknown field"):
        configs.resolve(lab.Config, table=table, source=str(tmp_path / "old.toml"))


def test_overlap_figure_tells_its_splits_and_its_M_apart(tmp_path, monkeypatch):
    """Issue 40, item 8: K = 16, M = 2 and K = 32, M = 1 drew one curve over the other in the
    same style, the best split's M had a continuous colorbar (log2 M in {0, 1, 2}), and the
    title's "32 thoughts" (the thought set) read like the panel's 32 leaves."""
    from gpolab.labs.tree import plots as tree_plots

    cfg = lab.Config(model="loglinear", leaves=8, seeds=200, out=str(tmp_path))
    tables = lab.run(cfg)
    drawn = []
    monkeypatch.setattr(tree_plots, "save", lambda fig, path: drawn.append(fig))
    tree_plots.overlap(tables, tmp_path / "x.png")
    (fig,) = drawn
    assert len(fig.axes) == 2  # no colorbar
    left, right = fig.axes
    curves = [ln for ln in left.get_lines() if ln.get_label().startswith("K=")]
    assert len(curves) == 3  # 2x4, 4x2, 8x1
    assert len({(ln.get_linestyle(), ln.get_marker()) for ln in curves}) == len(curves)
    labels = [t.get_text() for t in right.get_legend().get_texts()]
    assert {lb for lb in labels if lb.startswith("M = ")} <= {
        "M = 1 (K = 8)",
        "M = 2 (K = 4)",
        "M = 4 (K = 2)",
    }
    assert any(lb.startswith("M = ") for lb in labels)
    assert "possible thoughts" in fig._suptitle.get_text()
    assert "leaves per prompt" in right.get_title()
