"""Optimal group size at a fixed budget N = B·G (theory §3–4): theory, fixed-θ Monte Carlo,
the SGD loop and configuration checks."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from gpolab import configs, engine, estimators, validate
from gpolab.envs import bandit
from gpolab.kit import output, running
from gpolab.kit.store import Store
from gpolab.labs.groupsize import lab as groupsize
from gpolab.labs.groupsize import pool as pools
from gpolab.labs.groupsize import runs
from gpolab.runner.cli import main
from gpolab.theory import groupsize as theory
from gpolab.theory import mse as theory_mse

TRAIN_QUICK = groupsize.Config.MODES[("train", True)]["quick"]


@pytest.fixture(scope="module")
def small():
    """A 4-prompt, 8-action tabular bandit and its exact truth."""
    params = bandit.make(3, prompts=4, actions=8)
    return params, bandit.exact(params)


# ---------------------------------------------------------------- theory


def test_fixed_n_mse_is_the_minibatch_mse_at_b_equals_n_over_g(small):
    _, truth = small
    c = theory.constants(truth)
    for N in (16, 48, 256):
        for G in theory.divisors(N):
            expected = theory_mse.mse(truth, "loo", G, N // G)
            assert theory.fixed_n_mse(c, N, G) == pytest.approx(expected, rel=1e-9)


def test_constants_match_their_definitions(small):
    """c1 is the prompt variance of g_X in global coordinates; C2, C3 by hand (theory §3)."""
    params, truth = small
    c = theory.constants(truth)
    P, A = params.success.shape
    g_local = np.asarray(truth.g_local, np.float64)
    g_each = np.zeros((P, P * A))
    for x in range(P):  # tabular: prompt x's gradient lives in row x
        g_each[x, x * A : (x + 1) * A] = g_local[x]
    f = np.asarray(truth.prompt_probs, np.float64)
    g = f @ g_each
    assert c.c1 == pytest.approx(float(f @ np.sum((g_each - g) ** 2, -1)), rel=1e-5)
    gsq = np.sum(g_local**2, -1)
    S2, s2 = np.asarray(truth.S2, np.float64), np.asarray(truth.sigma2, np.float64)
    assert c.C3 == pytest.approx(float(f @ (S2 * s2 + gsq)), rel=1e-9)
    assert c.C2 == pytest.approx(float(f @ np.asarray(truth.tr_sigma_oracle, np.float64)))
    assert c.C2_se == c.C3_se == c.g_star_se == 0.0  # exact truth: no Monte Carlo error


def test_continuous_minimiser_is_one_plus_the_papers_prediction():
    c = theory.Constants(c1=0.3, C2=2.0, C3=7.5)
    g = c.g_star_exact
    assert g == pytest.approx(1 + math.sqrt(7.5 / 0.3))
    assert c.g_star_paper == pytest.approx(g - 1)
    h = lambda G: theory.fixed_n_mse(c, 64, G)  # noqa: E731
    d = 1e-4
    assert (h(g + d) - h(g - d)) / (2 * d) == pytest.approx(0, abs=1e-9)  # stationary
    assert h(g) < min(h(g - 0.1), h(g + 0.1))


def test_best_divisor_equals_brute_force_and_does_not_depend_on_n():
    rng = np.random.default_rng(0)
    Ns = (12, 36, 60, 64, 96, 100, 256, 360, 1000, 1024, 4096)
    for _ in range(200):
        c = theory.Constants(*np.exp(rng.uniform(-4, 4, 3)))
        for N in Ns:
            brute = min(
                (G for G in range(2, N + 1) if N % G == 0),
                key=lambda G: (c.c1 * G + c.C2 + c.C3 / (G - 1)) / N,
            )
            assert theory.best_divisor(c, N) == brute == theory.brute_force_best(c, N)
        # powers of two share their divisors up to 256: the minimiser cannot move with N
        if c.g_star_exact < 128:
            assert len({theory.best_divisor(c, N) for N in (256, 1024, 4096)}) == 1


def test_monte_carlo_s2_error_is_carried_into_c2_c3_and_g_star(small):
    _, truth = small
    se = jnp.full_like(truth.S2, 0.01)

    class WithSE:  # a truth with a Monte Carlo S2 (like the arithmetic surrogate's)
        def __getattr__(self, name):
            return se if name == "S2_se" else getattr(truth, name)

    c = theory.constants(WithSE())
    f = np.asarray(truth.prompt_probs, np.float64)
    s2 = np.asarray(truth.sigma2, np.float64)
    assert c.C3_se == pytest.approx(float(np.sqrt(np.sum((f * s2 * 0.01) ** 2))), rel=1e-6)
    assert c.g_star_se == pytest.approx(c.C3_se / (2 * math.sqrt(c.C3 * c.c1)))
    assert theory.fixed_n_mse_se(WithSE(), 64, 8) > 0


# ---------------------------------------------------------------- the sampler


def test_loo_over_slots_equals_the_estimator_library():
    r = jax.random.bernoulli(jax.random.key(1), 0.4, (32,)).astype(jnp.float32)
    for G in (2, 4, 8, 32):
        got = jax.jit(runs.loo_advantages_slots)(r, jnp.int32(G))  # G traced
        want = estimators.loo_advantages(r.reshape(-1, G)).reshape(-1)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_bandit_env_samples_and_gradients_match_the_env_module(small):
    params, _ = small
    key = jax.random.key(7)
    prompts = bandit.sample_prompts(jax.random.key(8), params, 64)
    theta = params.theta.reshape(-1)
    actions, rewards = bandit.ENV.sample(key, params, theta, prompts, 1)
    a_ref, r_ref = bandit.sample(key, params, prompts, 1)  # same uniforms, same inverse CDF
    np.testing.assert_array_equal(actions[:, 0], a_ref[:, 0])
    np.testing.assert_array_equal(rewards[:, 0], r_ref[:, 0])
    w = jax.random.normal(jax.random.key(9), (64,))
    got = bandit.ENV.gradient(params, theta, prompts, actions, w[:, None])
    local = bandit.weighted_scores(params, prompts, actions, w[:, None])
    want = bandit.to_global(params, prompts, local) * 64
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_one_compilation_per_n_serves_every_g(small):
    params, truth = small
    cell = runs.FixedCell(bandit.ENV, 48)
    theta = params.theta.reshape(-1)
    for G in theory.divisors(48):
        args = (params, theta, truth.g, jnp.int32(G))
        engine.run(runs.fixed_error, cell, args, jax.random.key(0), 64, chunk=32)
    assert engine.TRACES[("fixed_error", cell)] == 1


@pytest.mark.slow
def test_monte_carlo_fixed_n_mse_matches_exact(small):
    """MC MSE of the B = N/G mini-batch vs [c1 G + C2 + C3/(G − 1)]/N, tolerance from its SE."""
    params, truth = small
    c = theory.constants(truth)
    theta = params.theta.reshape(-1)
    N = 32
    cell = runs.FixedCell(bandit.ENV, N)
    for G in theory.divisors(N):
        args = (params, theta, truth.g, jnp.int32(G))
        m = engine.run(runs.fixed_error, cell, args, jax.random.key(G), 20_000, 4096)
        s = engine.error_stats(m)
        assert abs(s.mse - theory.fixed_n_mse(c, N, G)) < 4 * s.mse_se
        assert abs(s.bias_sq) < 4 * s.mse_se  # unbiased


@pytest.mark.slow
def test_predicted_argmin_matches_monte_carlo_argmin():
    """On the default bandit (c1, C2, C3 exact), the Monte Carlo argmin over the divisors of N is
    the predicted one, at two values of N."""
    params = bandit.make(0)
    truth = bandit.exact(params)
    c = theory.constants(truth)
    theta = params.theta.reshape(-1)
    for N in (64, 256):
        best = theory.best_divisor(c, N)
        ds = theory.divisors(N)
        assert ds[0] < best < ds[-1]  # an interior minimum: a real test of the law
        cell = runs.FixedCell(bandit.ENV, N)
        stats = {}
        for G in ds:
            args = (params, theta, truth.g, jnp.int32(G))
            m = engine.run(runs.fixed_error, cell, args, jax.random.key(N + G), 8000, 4000)
            stats[G] = engine.error_stats(m)
        # precondition: every other divisor is worse in theory by > 4 SE of the difference (the
        # closest, G = 16, by 2%), so the Monte Carlo argmin is a decisive check
        rel = {G: s.mse_se / s.mse for G, s in stats.items()}
        for G in ds:
            if G != best:
                gap = theory.fixed_n_mse(c, N, G) / theory.fixed_n_mse(c, N, best) - 1
                assert gap > 4 * math.hypot(rel[G], rel[best])
        assert min(stats, key=lambda G: stats[G].mse) == best


# ---------------------------------------------------------------- training


def _train_args(params, G, eta=4.0, tau=math.inf):
    return (
        params,
        params.theta.reshape(-1),
        jnp.int32(G),
        jnp.float32(eta),
        jnp.float32(tau),
        jnp.float32(1.0),
    )


def test_training_is_deterministic_per_seed_and_vmap_equals_loop(small):
    params, _ = small
    cell = runs.TrainCell(bandit.ENV, 16, 12)
    key = jax.random.key(5)
    for G, tau in ((4, math.inf), (8, 3.0)):
        args = _train_args(params, G, tau=tau)
        a = engine.per_seed(runs.train_run, cell, key, args, np.arange(4))
        b = engine.per_seed(runs.train_run, cell, key, args, np.arange(4))
        np.testing.assert_array_equal(a["gap"], b["gap"])
        one = jax.jit(runs.train_run, static_argnums=0)
        with engine.prng_mode():
            looped = [one(cell, jax.random.fold_in(key, i), args)["gap"] for i in range(4)]
        np.testing.assert_allclose(a["gap"], np.stack(looped), rtol=1e-5, atol=1e-6)
        assert len(set(np.asarray(a["gap"]).tolist())) == 4  # seeds differ


def test_training_improves_and_reports_gap_to_the_optimum(small):
    params, _ = small
    cfg = groupsize.Config(train=True, prompts=4, actions=8, instance_seed=3)
    env, data, theta0, j_star, *_ = runs.make_setup(cfg, "bandit")
    assert j_star == pytest.approx(float(np.mean(np.max(np.asarray(params.success), 1))))
    gap0 = j_star - float(env.value(data, theta0))
    args = (data, theta0, jnp.int32(4), jnp.float32(4.0), jnp.float32(10.0), jnp.float32(j_star))
    cell = runs.TrainCell(env, 16, 30)
    gaps = engine.per_seed(runs.train_run, cell, jax.random.key(0), args, np.arange(32))["gap"]
    assert np.all(gaps >= 0) and gaps.mean() < gap0


def test_arithmetic_env_gradient_is_the_sum_of_per_question_gradients():
    from gpolab.envs import arithmetic

    questions = arithmetic.make_questions(0, 6)
    params = arithmetic.init(0, hidden=8)
    data = arithmetic.ArithmeticInstance(params, questions, jax.random.key(1), 4)
    theta = jax.flatten_util.ravel_pytree(params.weights)[0]
    prompts = jnp.array([0, 0, 3, 3, 5, 5], jnp.int32)
    sample = jax.jit(arithmetic.ENV.sample, static_argnums=4)
    tokens, rewards = sample(jax.random.key(0), data, theta, prompts, 1)
    assert tokens.shape[0] == 6 and rewards.shape == (6, 1)
    w = jnp.arange(1.0, 7.0)
    got = jax.jit(arithmetic.ENV.gradient)(data, theta, prompts, tokens, w[:, None])
    one = jax.jit(arithmetic.gradient_estimate)
    want = sum(
        one(params, questions.features[q], tokens[2 * i : 2 * i + 2, 0], w[2 * i : 2 * i + 2])
        for i, q in enumerate((0, 3, 5))
    )
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "call, field, allowed",
    [
        (lambda: theory.check_budget(1), "N", ">= 2"),
        (lambda: theory.check_budget(16, 3), "G", "2, 4, 8, 16"),
        (lambda: theory.check_budget(12, 1), "G", "2, 3, 4, 6, 12"),
        (lambda: groupsize.Config(N=(256, 0)).validate(), "N", ">= 2"),
        (lambda: groupsize.Config(N=()).validate(), "N", "integers"),
        (lambda: groupsize.Config(seeds=1).validate(), "seeds", ">= 2"),
        (lambda: groupsize.Config(train=True, env="atari").validate(), "env", "bandit, arithmetic"),
        (
            lambda: groupsize.Config(train=True, schedules=("cosine",)).validate(),
            "schedules",
            "constant, decay",
        ),
        (
            lambda: groupsize.Config(train=True, bandit_eta_decay=-1.0).validate(),
            "bandit_eta_decay",
            "finite number",
        ),
        (
            lambda: groupsize.Config(train=True, arithmetic_N=(2,)).validate(),
            "arithmetic_N",
            ">= 4",
        ),
    ],
)
def test_bad_configs_raise_naming_the_field(call, field, allowed):
    with pytest.raises(validate.ConfigError) as err:
        call()
    assert str(err.value).startswith(f"{field}:") or f"{field}:" in str(err.value)
    assert allowed in str(err.value)


def resolve(typed, quick=False):
    return configs.resolve(groupsize.Config, typed=typed, quick=quick)


def test_cli_config_quick_then_flags_and_mode_checks():
    cfg = resolve({"N": "64,128"}, quick=True)
    assert cfg.N == (64, 128) and cfg.seeds == groupsize.Config.QUICK["seeds"]
    cfg = resolve({"train": True, "seeds": "300"}, quick=True)
    assert cfg.seeds == 300 and cfg.arithmetic_N == TRAIN_QUICK["arithmetic_N"]
    assert cfg.out == groupsize.TRAIN_OUT and not resolve({}).train
    with pytest.raises(validate.ConfigError, match="--chunk: not used with train = True"):
        resolve({"train": True, "chunk": "8"})
    with pytest.raises(validate.ConfigError, match="N: got 'a,b'"):
        resolve({"N": "a,b"})


def test_cli_reports_config_errors_before_tracing(capsys):
    from gpolab.runner.cli import main

    assert main(["groupsize", "--N", "256,100", "--seeds", "1"]) == 2
    assert "seeds:" in capsys.readouterr().err


# ---------------------------------------------------------------- the lab protocol
TINY = ["--prompts", "4", "--actions", "8"]
TRAIN_TINY = ["--train", "--env", "bandit", "--bandit-N", "16", "--bandit-steps", "5", *TINY]


def _no_compute(monkeypatch):
    monkeypatch.setattr(engine, "run", lambda *a, **k: pytest.fail("computed"))
    monkeypatch.setattr(engine, "per_seed", lambda *a, **k: pytest.fail("computed"))


@pytest.mark.parametrize("mode", [[], TRAIN_TINY])
def test_bad_out_is_one_line_before_any_computation(mode, tmp_path, capsys, monkeypatch):
    _no_compute(monkeypatch)
    out = tmp_path / "file"
    out.write_text("")
    assert (
        main(["groupsize", *mode, "--N" if not mode else "--seeds", "16", "--out", str(out)]) == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpolab groupsize: error: out: ")


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--train", "--N", "64"],
            "--N: not used with train = True; it applies only when train is False",
        ),
        (["--bandit-steps", "5"], "--bandit-steps: not used with train = False, env = both"),
        (["--env", "bandit"], "--env: not used with train = False; it applies only when train"),
        (
            ["--train", "--env", "arithmetic", "--prompts", "4"],
            "--prompts: not used with env = arithmetic; it applies only when env is bandit or both",
        ),
        (
            ["--train", "--env", "bandit", "--questions", "9"],
            "--questions: not used with train = True, env = bandit",
        ),
        (["--train", "--chunk", "8"], "--chunk: not used with train = True"),
    ],
)
def test_a_flag_the_mode_does_not_use_is_an_error(argv, message, tmp_path, capsys, monkeypatch):
    _no_compute(monkeypatch)
    assert main(["groupsize", *argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "o").exists()


def test_quick_keeps_typed_flags_end_to_end(tmp_path):
    out = tmp_path / "fixed"
    assert main(["groupsize", "--quick", "--N", "16", *TINY, "--out", str(out)]) == 0
    df = pd.read_parquet(out / "results.parquet")
    assert df["n_seeds"].eq(groupsize.Config.QUICK["seeds"]).all()  # untyped: quick
    assert df["N"].eq(16).all() and df["G"].tolist() == [2, 4, 8, 16]  # typed
    assert (out / "groupsize_mse.png").exists()
    out = tmp_path / "train"
    assert main(["groupsize", "--quick", *TRAIN_TINY, "--out", str(out)]) == 0
    df = pd.read_parquet(out / "results.parquet")
    quick = TRAIN_QUICK
    assert df["n_seeds"].eq(quick["seeds"]).all() and df["steps"].eq(5).all()
    assert set(df["N"]) == {16} and set(df["env"]) == {"bandit"}
    table = configs.split_file(out / "config.toml", "groupsize")[1]
    assert table["train"] is True and table["bandit_N"] == [16] and table["seeds"] == 64
    assert "questions" not in table  # the arithmetic settings are not used with env = bandit
    assert (out / "groupsize_train.png").exists()


def test_only_cells_whose_settings_changed_are_recomputed(tmp_path, monkeypatch):
    store, done = Store(tmp_path), []
    progress = type(
        "P", (), {"skip": lambda self, n: None, "update": lambda self, n, note: done.append(note)}
    )()
    fixed = groupsize.Config(N=(8,), seeds=200, prompts=4, actions=8)
    first = groupsize.run(fixed, store=store, progress=progress)
    assert len(done) == 3
    done.clear()
    again = groupsize.run(fixed.replace(chunk=16), store=store, progress=progress)
    assert done == []  # the chunk size changes no number
    pd.testing.assert_frame_equal(again["results"], first["results"])
    groupsize.run(fixed.replace(N=(8, 4)), store=store, progress=progress)
    assert [d.split(":")[0] for d in done] == ["N=4 G=2", "N=4 G=4"]
    done.clear()
    # seeds = 0 is the mode's default: the same cells as the number it stands for
    assert groupsize.cell_keys(fixed.replace(seeds=0)) == groupsize.cell_keys(
        fixed.replace(seeds=groupsize.SEEDS[False])
    )
    groupsize.run(fixed.replace(prompts=5), store=store, progress=progress)
    assert len(done) == 3  # another bandit: every cell
    done.clear()
    train = groupsize.Config(
        train=True, env="bandit", seeds=8, bandit_N=(8,), bandit_steps=3, prompts=4, actions=8
    )
    groupsize.run(train, store=store, progress=progress)
    assert len(done) == 6
    done.clear()  # the arithmetic settings do not touch bandit cells; the decay η only decay's
    groupsize.run(train.replace(questions=7, bandit_eta_decay=8.0), store=store, progress=progress)
    assert len(done) == 3 and all(" decay " in d for d in done)
    # the figures redraw from the saved tables alone
    tables = groupsize.run(train, store=store)
    _no_compute(monkeypatch)
    output.write_tables(tmp_path, tables)
    (png,) = running.draw(groupsize, tmp_path)
    assert png.name == "groupsize_train.png" and png.stat().st_size > 10_000


# ---------------------------------------------------------------- a finite prompt pool


def test_epoch_draws_take_distinct_pool_items_and_reshuffle_every_epoch():
    """B = N/G consecutive items of the epoch's permutation: a step's prompts are distinct pool
    items, one epoch's ⌊P/B⌋ blocks are disjoint, the next epoch reshuffles."""
    P, N, G = 10, 12, 4  # B = 3, three steps per epoch (one item left out each epoch)
    pool = jnp.arange(100, 100 + P, dtype=jnp.int32)
    key = jax.random.key(4)
    draw = jax.jit(pools.epoch_draws, static_argnums=1)
    steps = [
        np.asarray(draw(pools.PoolDraw(pool, key, jnp.int32(t)), N, jnp.int32(G)))[:3]
        for t in range(6)
    ]
    epoch0, epoch1 = np.concatenate(steps[:3]), np.concatenate(steps[3:])
    assert len(set(epoch0)) == len(set(epoch1)) == 9 and set(epoch0) <= set(range(100, 110))
    assert not np.array_equal(epoch0, epoch1)
    again = draw(pools.PoolDraw(pool, key, jnp.int32(4)), N, jnp.int32(G))
    np.testing.assert_array_equal(np.asarray(again)[:3], steps[4])  # deterministic


def test_pool_rows_skip_infeasible_g_and_predict_with_the_pool_law():
    cfg = groupsize.Config(N=(16, 32), seeds=200, prompts=4, actions=8, pool=8)
    out = groupsize.run(cfg)
    df, s = out["results"], out["summary"]
    assert df.groupby("N")["G"].apply(list).to_dict() == {16: [2, 4, 8, 16], 32: [4, 8, 16, 32]}
    assert (df["B"] <= 8).all() and df["pool"].eq(8).all()
    pc = theory.Constants(*(float(df[k].iloc[0]) for k in pools.POOL_CONSTANTS))
    for r in df.itertuples():  # the population target adds the pool's bias to every G
        assert r.theory_mse_pool == pytest.approx(theory.pool_mse(pc, r.N, r.G, 8))
        assert r.theory_mse == pytest.approx(r.theory_mse_pool + r.pool_bias_sq)
    for r in s.itertuples():
        assert r.predicted_best_G == theory.pool_best_divisor(pc, r.N, 8)
        assert r.min_G == max(2, r.N // 8)
    keys = groupsize.cell_keys(cfg)
    assert keys != groupsize.cell_keys(cfg.replace(pool=9))  # the pool is in the key


def test_training_with_a_pool_reports_both_gaps():
    cfg = groupsize.Config(
        train=True,
        env="bandit",
        seeds=8,
        bandit_N=(8,),
        bandit_steps=6,
        prompts=4,
        actions=8,
        instance_seed=3,
        pool=4,
        schedules=("constant",),
    )
    out = groupsize.run(cfg)
    df, s = out["results"], out["summary"]
    assert df["G"].tolist() == [2, 4, 8] and (df["gap_pool"] >= 0).all()
    assert df["epochs"].tolist() == [6 * (8 // G) / 4 for G in (2, 4, 8)]
    assert {"empirical_best_G_pool", "infinite_pool_best_G", "g_star_pool"} <= set(s)
