"""DAPO dynamic sampling (``gpolab sweep --dynamic-sampling``): the exact draw counts and the
exact mean/MSE of the kept-groups estimate (gpolab/theory/dynamic.py) against enumeration and
Monte Carlo; the cap warns and stays finite; with the flag off the sweep is unchanged."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpolab import engine, estimators, validate
from gpolab.envs import bandit
from gpolab.kernels import dynamic as dynamic_kernel
from gpolab.labs.sweep.lab import Config, cell_keys, run_sweep
from gpolab.theory import dynamic
from gpolab.theory import exact as ex

SMALL = {"prompts": 4, "actions": 8}
HARD = {"prompts": 4, "actions": 8, "logit_scale": 4.0, "success_a": 0.3, "success_b": 0.5}


def _simulate_draws(q, B, max_draws, n=200_000, seed=0):
    """The verl loop, literally: batches of B Bernoulli(q) groups until B are kept or the cap."""
    ok = np.random.default_rng(seed).random((n, max_draws, B)) < q
    cum = np.cumsum(ok.sum(-1), axis=1)  # kept after each batch
    filled = cum >= B
    batches = np.where(filled.any(1), filled.argmax(1) + 1, max_draws)
    kept = np.minimum(cum[:, -1], B)
    return batches, kept


@pytest.mark.parametrize("q,B,max_draws", [(0.3, 4, 8), (0.1, 3, 2), (0.9, 1, 1)])
def test_draws_against_simulated_loop(q, B, max_draws):
    d = dynamic.draws(q, B, max_draws)
    batches, kept = _simulate_draws(q, B, max_draws)
    n = len(batches)
    for exact_value, x in (
        (d.batches, batches),
        (d.kept, kept),
        (d.cap_prob, kept < B),
        (d.none_kept, kept == 0),
    ):
        se = max(x.std() / np.sqrt(n), 1e-12)
        assert abs(x.mean() - exact_value) < 4 * se + 1e-12, (exact_value, x.mean(), se)
    inv = np.where(kept > 0, 1.0 / np.maximum(kept, 1), 0.0)
    assert abs(inv.mean() - d.inv_kept) < 4 * inv.std() / np.sqrt(n) + 1e-12


def test_draws_without_cap_limit():
    """With B = 1 each batch is one group: batches ~ Geometric(q), E = 1/q (less the tail)."""
    q = 0.25
    d = dynamic.draws(q, 1, 200)
    assert d.batches == pytest.approx(1 / q, rel=1e-12)
    assert d.per_kept == pytest.approx(1 / q, rel=1e-12)


@pytest.mark.parametrize("q,B,max_draws", [(0.3, 4, 24), (0.2, 6, 30), (0.9, 3, 12)])
def test_uncapped_loop_cost_against_simulated_loop(q, B, max_draws):
    """verl's loop without a cap (a cap it never reaches here) costs uncapped_batches(q, B)
    groups drawn per kept group, more than the per-group rate 1/q (the last batch's surplus is
    discarded): both against the literal loop."""
    assert dynamic.draws(q, B, max_draws).cap_prob < 1e-9  # the cap is never reached
    batches, kept = _simulate_draws(q, B, max_draws, n=100_000)
    assert (kept == B).all()
    exact_value, se = dynamic.uncapped_batches(q, B), batches.std() / np.sqrt(len(batches))
    assert abs(batches.mean() - exact_value) < 4 * se, (exact_value, batches.mean(), se)
    assert exact_value - 1 / q > 8 * se  # power: the rate 1/q is rejected


def test_uncapped_loop_cost_limits_and_series():
    """B = 1: exactly 1/q; q = 1: one batch; q → 0: 1/q + (B − 1)/(2B); and the capped series
    Σ_{n<N} P(Bin(nB, q) < B) of :func:`dynamic.draws` at a cap it never reaches."""
    assert dynamic.uncapped_batches(0.25, 1) == pytest.approx(4.0, rel=1e-14)
    assert dynamic.uncapped_batches(1.0, 7) == pytest.approx(1.0, rel=1e-14)
    assert dynamic.uncapped_batches(0.0, 7) == np.inf
    q = 1e-7
    assert dynamic.uncapped_batches(q, 8) - 1 / q == pytest.approx(7 / 16, rel=1e-4)
    for q, B in ((0.3, 4), (0.07, 8), (0.95, 16), (0.5, 5)):
        series = dynamic.draws(q, B, 4000).batches
        assert dynamic.uncapped_batches(q, B) == pytest.approx(series, rel=1e-12), (q, B)


def test_columns_name_the_rate_and_the_loop():
    """The dynamic columns: the per-group rate 1/q under its own name, verl's uncapped loop cost
    beside it; the old name (which held 1/q as if it were the loop's cost) is gone."""
    truth = bandit.exact(bandit.make(0, **HARD))
    G, B = 2, 8
    q = dynamic.nondegenerate_prob(truth, G)
    cols = dynamic.columns(truth, "loo", G, B, max_draws=8)
    assert cols[dynamic.RATE_COLUMN] == pytest.approx(1 / q, rel=1e-12)
    assert cols[dynamic.LOOP_COLUMN] == pytest.approx(dynamic.uncapped_batches(q, B), rel=1e-12)
    assert cols[dynamic.LOOP_COLUMN] > cols[dynamic.RATE_COLUMN] + 0.1
    assert "theory_draws_per_kept_group_nocap" not in cols


@pytest.mark.parametrize("spec", ["vanilla", "loo", "mean", "grpo"])
def test_nondegenerate_moments_by_enumeration(spec):
    """E[ĝ_x; nondeg] = κ^nd_x g_x and E[‖ĝ_x‖²; nondeg] against every (action, reward)^G
    outcome of a 2-prompt, 3-action bandit at G = 3 (vanilla gives degenerate groups a nonzero
    estimate, so its correction is exercised)."""
    G = 3
    params = bandit.make(1, prompts=2, actions=3)
    truth = bandit.exact(params)
    table = ex.registry_table(spec, G)
    q_x, kappa, second = dynamic.nondegenerate_moments(truth, table, G)
    probs = np.asarray(bandit.outcome_probs(params), np.float64)  # (P, 2A)
    combos = np.array(list(itertools.product(range(probs.shape[1]), repeat=G)))  # (n, G)
    actions, rewards = bandit.split_outcomes(jnp.asarray(combos))
    w = estimators.gradient_weights(spec, rewards)
    for x in range(2):
        p = np.prod(probs[x][combos], axis=1)
        prompts = jnp.full(len(combos), x, jnp.int32)
        ghat = np.asarray(bandit.weighted_scores(params, prompts, actions, w), np.float64)
        nd = ~np.asarray(estimators.degenerate(rewards))
        g_x = np.asarray(truth.g_local[x], np.float64)
        assert np.sum(p * nd) == pytest.approx(q_x[x], abs=1e-6)
        np.testing.assert_allclose((p * nd) @ ghat, kappa[x] * g_x, atol=2e-6)
        assert (p * nd) @ np.sum(ghat**2, -1) == pytest.approx(second[x], abs=2e-6)


def test_loo_without_cap_estimates_g_over_q():
    """Zero advantages on degenerate groups: the kept-groups mean is E ĝ_plain / q = g / q."""
    truth = bandit.exact(bandit.make(0, **SMALL))
    mu, _, q = dynamic.kept_moments(truth, ex.registry_table("loo", 4), 4)
    np.testing.assert_allclose(mu, np.asarray(truth.g) / q, rtol=1e-5, atol=1e-7)


def _run_cell(G, B, max_draws, names, seeds, settings=SMALL):
    params = bandit.make(0, **settings)
    truth = bandit.exact(params)
    cell = dynamic_kernel.DynamicBanditCell(names, G, B, max_draws, 2)
    eps = np.float32(1e-4)
    m = engine.run(
        dynamic_kernel.dynamic_bandit_error,
        cell,
        (params, truth, bandit.outcome_tables(params), eps),
        jax.random.key(3),
        seeds,
    )
    return m, truth


@pytest.mark.slow
@pytest.mark.parametrize("G,B,max_draws", [(2, 4, 8), (4, 2, 1)])
def test_dynamic_mean_and_draws_against_monte_carlo(G, B, max_draws):
    """E[ĝ_dyn·g] (the mean's projection), groups drawn, kept and capped per step within 4 SE
    of the exact values; with max_draws = 1 on the hard instance the cap binds often."""
    m, truth = _run_cell(G, B, max_draws, ("vanilla", "loo", "grpo"), 20_000, HARD)
    q = dynamic.nondegenerate_prob(truth, G)
    d = dynamic.draws(q, B, max_draws)
    # a rare cap can leave no capped seed among 20,000 (sample SE 0): the SE is then floored by
    # the exact one's bound (kept falls short of B only when capped, by at most B)
    n, cap = m.n, d.cap_prob
    floor = {"drawn": 0.0, "kept": B * np.sqrt(cap / n), "capped": np.sqrt(cap * (1 - cap) / n)}
    for name, exact_value in (("drawn", d.batches * B), ("kept", d.kept), ("capped", d.cap_prob)):
        se = max(m.se(name), floor[name])
        assert abs(m.mean(name) - exact_value) < 4 * se + 1e-9, name
    if max_draws == 1:
        assert d.cap_prob > 0.1
    g = np.asarray(truth.g, np.float64)
    for name in ("vanilla", "loo", "grpo"):
        mu, _, _ = dynamic.kept_moments(truth, ex.registry_table(name, G), G)
        dot = (1 - d.none_kept) * mu @ g
        assert abs(m.mean(f"{name}/dot") - dot) < 4 * m.se(f"{name}/dot"), name


@pytest.mark.slow
def test_sweep_rows_against_theory_and_cap_warning(capsys):
    """Rows: measured draws per kept group, MSE and plain-sampling MSE at the matched budget
    within 4 SE of the exact values; max_draws = 1 on the hard instance reaches the cap in
    many steps, prints one warning line and every number stays finite."""
    cfg = Config(
        **HARD,
        G=(2, 4),
        estimators=("loo", "vanilla"),
        seeds=20_000,
        B=3,
        dynamic_sampling=True,
        max_draws=1,
    )
    df = run_sweep(cfg)
    err = capsys.readouterr().err
    assert len([ln for ln in err.splitlines() if ln.startswith("warning: dynamic")]) == 1
    assert "max_draws=1" in err and "ValueError" in err
    assert (df["cap_reached_frac"] > 0.05).all() and df["dynamic_sampling"].all()
    measured = [
        "mse",
        "mse_se",
        "cos",
        "scaled_mse",
        "draws_per_kept_group",
        "kept_groups",
        "responses_per_step",
        "plain_mse",
        "plain_scaled_mse",
        "theory_mse",
    ]
    assert np.isfinite(df[measured].astype(float).to_numpy()).all()
    z = (df["mse"] - df["theory_mse"]) / df["mse_se"]
    assert (z.abs() < 4).all(), z.tolist()
    z = (df["plain_mse"] - df["theory_plain_mse"]) / df["plain_mse_se"]
    assert (z.abs() < 4).all(), z.tolist()
    se = (df["draws_per_kept_group_ci_high"] - df["draws_per_kept_group"]) / engine.Z95
    z = (df["draws_per_kept_group"] - df["theory_draws_per_kept_group"]) / se
    assert (z.abs() < 4).all(), z.tolist()
    assert (df[dynamic.LOOP_COLUMN] > df[dynamic.RATE_COLUMN]).all()  # B = 3: a surplus
    assert "theory_draws_per_kept_group_nocap" not in df


def test_dynamic_needs_a_mini_batch():
    with pytest.raises(validate.ConfigError, match="B: got 0; dynamic_sampling"):
        Config(dynamic_sampling=True).validate()


def test_dynamic_off_is_unchanged():
    """Flag off: the row keys and the numbers of the sweep before dynamic sampling existed
    (values recorded on main at 604f50f, float32 on CPU; re-pinned when the engine packed its
    per-seed outputs before reducing them: float32 sums in another order moved 3 of the 4 by
    <= 1e-7 relative; keys and numbers re-pinned when the bandit's responses came to be drawn by
    the alias method: same law, other draws, and the keys carry how rows are drawn)."""
    assert cell_keys(Config())[:2] == ["ec5134847c3639ac", "1a0b031a59c9b18a"]
    assert cell_keys(Config(B=4))[0] == "f7da9fdfdb5b1987"
    cfg = Config(**SMALL, G=(2, 4), estimators=("loo", "vanilla"), seeds=500, B=4)
    # the same draws on another jax/XLA sum float32 in another order: 1e-6 relative
    want = [0.03872249603271485, 0.013935075759887696, 0.027003097534179687, 0.014528409957885742]
    assert list(run_sweep(cfg)["mse"]) == pytest.approx(want, rel=1e-6)
    assert cell_keys(cfg.replace(dynamic_sampling=True)) != cell_keys(cfg)
