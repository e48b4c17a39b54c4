"""The generic trainer on the log-linear bandit: exact directions, the equal-σ control,
determinism, vmapped = looped, finite-sample bias; the std-normalization lab (curve analysis,
the CLI, the lab protocol: typed flags beat --quick, flags the mode ignores, cache keys)."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from gpolab import configs, envs
from gpolab import estimators as est
from gpolab.engine import train
from gpolab.envs import loglinear as ll
from gpolab.kit.store import Store
from gpolab.labs.stdnorm import analysis as stdnorm_analysis
from gpolab.labs.stdnorm import lab as stdnorm
from gpolab.runner.cli import main
from gpolab.validate import ConfigError

ENV = envs.get("loglinear")


def small(**kw):
    kw.setdefault("prompts", 6)
    return ll.make(4, responses=256, block=4, **kw)


def test_exact_directions():
    params = small(rho=0.4)
    theta = 0.5 * jax.random.normal(jax.random.key(0), (params.dim,))
    truth = ll.exact(params, theta)
    g, s, p = np.asarray(truth.g_global), np.sqrt(truth.sigma2), np.asarray(truth.V)
    np.testing.assert_allclose(
        train.exact_direction("grpo", truth, 0.0), (g / s[:, None]).mean(0), rtol=1e-5
    )
    unbiased = [n for n, e in est.REGISTRY.items() if e.limit_for() == "gradient"]
    assert {"mean", "loo", "vanilla", "oracle", "ustat"} <= set(unbiased)
    for name in unbiased:
        np.testing.assert_allclose(train.exact_direction(name, truth, 0.0), g.mean(0), rtol=1e-6)
    pooled = np.sqrt(np.mean(p) - np.mean(p) ** 2)  # binary rewards: pooled variance J(1 − J)
    np.testing.assert_allclose(train.pooled_sigma(truth), pooled, rtol=1e-5)


def test_grpo_batch_is_gone_as_input_and_stays_the_stored_name():
    """grpo-batch (removed; CHANGELOG: grpo[scale=batch]) is one error naming it; runs of
    grpo[scale=batch] keep the stored name grpo-batch, so keys written before stay found."""
    with pytest.raises(ConfigError, match="^estimator: got 'grpo-batch'; allowed: "):
        train.Run("grpo-batch", 4).validate()
    run = train.Run("grpo[scale=batch]", 4)
    assert train.stored_name(run.estimator) == "grpo-batch"  # keys written before stay found
    assert train.spec_of("grpo-batch") == run.estimator
    assert train.stored_name("grpo") == "grpo" == train.spec_of("grpo")
    truth = ll.exact(small(rho=0.4), ll.init_theta(small(rho=0.4)))
    np.testing.assert_allclose(
        train.exact_direction(run.estimator, truth, 1e-4),
        truth.g / (train.pooled_sigma(truth) + 1e-4),
        rtol=1e-6,
    )


def test_equal_sigma_control_is_reinforce_after_step_rescaling():
    """Identical prompts: GRPO (exact, step η) = REINFORCE with step η/σ(θ_t), step for step;
    with heterogeneous prompts no such scalar rescaling exists (the directions differ)."""
    params = small(equal=True, p_equal=0.25)
    lr, steps = 40.0, 25
    out = train.train(
        train.Run("grpo", train.EXACT, "sgd", steps),
        ENV,
        jax.random.key(0),
        params,
        [lr],
        1,
        eps=0.0,
    )
    theta = ll.init_theta(params)
    J = []
    for _ in range(steps):
        truth = ll.exact(params, theta)
        J.append(float(jnp.mean(truth.V)))
        theta = theta + lr / jnp.sqrt(truth.sigma2[0]) * jnp.mean(truth.g_global, axis=0)
    J.append(float(jnp.mean(ll.exact(params, theta).V)))
    np.testing.assert_allclose(out["J"][0, 0], J, rtol=2e-5, atol=2e-6)
    assert J[-1] > J[0] + 0.3  # it actually learned
    truth = ll.exact(small(), ll.init_theta(small()))
    a = np.asarray(train.exact_direction("grpo", truth, 0.0))
    b = np.asarray(train.exact_direction("loo", truth, 0.0))
    assert a @ b / np.linalg.norm(a) / np.linalg.norm(b) < 0.99


@pytest.mark.parametrize("estimator", ["grpo", "grpo[scale=batch]", "mean"])
def test_training_is_deterministic_per_seed_and_vmapped_equals_looped(estimator):
    params = small(rho=0.5)
    run = train.Run(estimator, 4, "adam", 15)
    key = jax.random.key(3)
    lrs = [0.05, 0.3]
    a = train.train(run, ENV, key, params, lrs, 3)
    b = train.train(run, ENV, key, params, lrs, 3)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert not np.array_equal(a["J"][1, 0], a["J"][1, 1])  # seeds differ
    looped = jax.jit(train.train_one, static_argnums=(0, 1))
    from gpolab import engine

    with engine.prng_mode():
        for s in range(3):
            k = jax.random.fold_in(key, s)
            knobs = train.Knobs(lr=jnp.float32(lrs[1]), eps=jnp.float32(1e-4))
            one = looped(run, ENV, k, params, knobs)
            np.testing.assert_allclose(one["J"], a["J"][1, s], rtol=1e-5, atol=1e-6)


def _quadratic_direction(key, theta, t):
    """A noisy ascent direction of −½θᵀAθ and, as aux, its squared norm and the step index."""
    A = jnp.array([[2.0, 0.3], [0.3, 1.0]])
    d = -A @ theta + 0.1 * jax.random.normal(key, theta.shape)
    return d, {"sq": jnp.sum(d**2), "t": t}


def _keep(aux):
    return aux


def _shrinking_step(t, aux):
    return 0.3 / (1.0 + t) / (1.0 + aux["sq"])


@pytest.mark.parametrize("adam", [False, True])
def test_ascend_is_the_plain_python_loop(adam):
    """The one loop against a Python loop of the same update: split keys with a step size read
    from aux (and Adam), and a single key folded with t from a start index (uint32 t)."""
    import optax

    theta0 = jnp.array([1.0, -2.0])
    tx = optax.scale_by_adam() if adam else None
    key = jax.random.key(4)
    runs = ((jax.random.split(key, 7), jnp.arange(7)), (key, jnp.arange(5, 12, dtype=jnp.uint32)))
    run = jax.jit(
        partial(train.ascend, _quadratic_direction, theta0, lr=_shrinking_step, tx=tx, record=_keep)
    )
    for keys, steps in runs:
        theta, _, rec = run(keys, steps)
        ref_tx = optax.identity() if tx is None else tx
        th, state, sq = theta0, ref_tx.init(theta0), []
        for i, t in enumerate(steps):
            k = keys[i] if keys.ndim else jax.random.fold_in(key, t)
            d, aux = _quadratic_direction(k, th, t)
            upd, state = ref_tx.update(d, state, th)
            th = th + _shrinking_step(t, aux) * upd
            sq.append(float(aux["sq"]))
        np.testing.assert_allclose(theta, th, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(rec["sq"], sq, rtol=1e-6)
        np.testing.assert_array_equal(rec["t"], steps)
        assert float(jnp.linalg.norm(theta)) < float(jnp.linalg.norm(theta0))  # it ascended


def test_step_sizes_are_traced_no_recompile():
    params = small()
    run = train.Run("loo", 2, "sgd", 5)
    train.train(run, ENV, jax.random.key(0), params, [1.0, 2.0], 2)
    before = train._train._cache_size()
    train.train(run, ENV, jax.random.key(1), params, [5.0, 9.0], 2, eps=1e-8)
    assert train._train._cache_size() == before


def test_finite_sample_bias():
    """loo is unbiased for ∇J (relative bias at the Monte Carlo noise floor); mean is shrunk by
    exactly (1 − 1/G); grpo at G = 2 is biased against Σ_x g_x/σ_x; zero-variance fraction
    matches p^G + (1 − p)^G within its binomial standard error."""
    params = small()
    theta = ll.init_theta(params)
    key = jax.random.key(5)
    S = 3000
    loo = train.finite_sample_bias(key, ENV, params, theta, 4, seeds=S, estimator="loo")
    assert loo["rel_bias"] < 1.5 * loo["rel_bias_noise"]
    mean = train.finite_sample_bias(key, ENV, params, theta, 4, seeds=S, estimator="mean")
    assert mean["norm_ratio"] == pytest.approx(0.75, abs=4 * mean["rel_bias_noise"])
    grpo = train.finite_sample_bias(key, ENV, params, theta, 2, seeds=S, ddof=1)
    assert grpo["rel_bias"] > 5 * grpo["rel_bias_noise"]
    z = grpo["zero_frac_theory"]
    assert abs(grpo["zero_frac"] - z) < 4 * np.sqrt(z * (1 - z) / (S * params.num_prompts))


def test_curve_analysis_hand_derived():
    # hit times: first index at or above 0.5; never → inf
    curves = np.array([[0.1, 0.4, 0.5, 0.9], [0.1, 0.2, 0.3, 0.4]])
    np.testing.assert_array_equal(stdnorm_analysis.hit_time(curves, 0.5), [2.0, np.inf])
    # slow curve reaches level J_fast[t] at index need; gain = need / t
    fast = np.array([0.0, 0.5, 0.8, 0.9])
    slow = np.array([0.0, 0.2, 0.5, 0.6, 0.8, 0.85])
    np.testing.assert_allclose(stdnorm_analysis.level_gain(fast, slow), [np.nan, 2.0, 2.0, np.nan])
    J = np.zeros((2, 1, 4))
    J[0, 0] = [0, 0.2, 0.6, 0.7]
    J[1, 0] = [0, 0.6, 0.7, 0.8]
    assert stdnorm_analysis.best_lr_index(J, 0.5) == 1
    assert stdnorm_analysis.phase_bounds(np.array([np.nan, 1.0, 2.0, 3.0, 3.0, 2.0])) == (3, 5)


def test_pairwise_cosine():
    g = jnp.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    c = 1 / np.sqrt(2)
    assert float(train.mean_pairwise_cosine(g)) == pytest.approx((0 + c + c) / 3, rel=1e-6)


@pytest.mark.slow
def test_cli_train_and_curvature_end_to_end(tmp_path, capsys):
    out = tmp_path / "train"
    rc = main(
        [
            "train",
            "--quick",
            "--steps",
            "12",
            "--seeds",
            "2",
            "--G",
            "2",
            "--rho",
            "0,0.9",
            "--bias-seeds",
            "16",
            "--prompts",
            "4",
            "--adm-steps",
            "40",
            "--adm-seeds",
            "2",
            "--gain-G",
            "4",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    summary = pd.read_csv(out / "summary.csv")
    assert set(summary.estimator) == {"grpo", "loo"} and set(summary.setting) >= {"control"}
    gain = pd.read_csv(out / "gain.csv")
    assert {"gain", "pred_gain", "pred_gnorm_ratio", "cos_mean"} <= set(gain.columns)
    assert set(gain.comparison) == {"admissible 1/L", "oracle 1/L_t", "tuned"}
    ctrl = summary[(summary.regime == "admissible") & summary.control & np.isinf(summary.G)]
    final = ctrl.set_index("method").final_J  # equal σ: identical exact trajectories
    assert final["grpo"] == pytest.approx(final["reinforce-iterate"], rel=1e-5)
    bias = pd.read_csv(out / "finite_sample.csv")
    assert set(bias.eps) == {1e-4, 1e-8} and set(bias.ddof) == {0, 1}
    for f in ("train_curves.png", "train_gain.png", "train_phases.png"):
        assert (out / f).stat().st_size > 1000
    rc = main(
        ["curvature", "--quick", "--thetas", "8", "--prompts", "4", "--out", str(tmp_path / "curv")]
    )
    assert rc == 0
    assert "tightest C" in capsys.readouterr().out
    assert (tmp_path / "curv" / "curvature.png").exists()


@pytest.mark.parametrize(
    "argv, field",
    [
        (["train", "--env", "tabular"], "env"),
        (["train", "--estimators", "grpo,ppo"], "estimators"),
        (["train", "--G", "1"], "G"),
        (["train", "--G", "two"], "G"),
        (["train", "--optimizers", "rmsprop"], "optimizers"),
        (["train", "--lr-grid", "0:1:3"], "lr_grid"),
        (["train", "--adam-lr-grid", "0.1,-1"], "adam_lr_grid"),
        (["train", "--regimes", "tuned,lucky"], "regimes"),
        (["train", "--rho", "1.5"], "rho"),
        (["train", "--ddof", "2"], "ddof"),
        (["train", "--target", "0"], "target"),
        (["curvature", "--thetas", "0"], "thetas"),
        (["curvature", "--rho", "-1"], "rho"),
        (["curvature", "--scale-max", "0.01"], "scale_max"),
    ],
)
def test_bad_config_is_one_clear_line(argv, field, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(train, "train", lambda *a, **k: pytest.fail("computed"))
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"error: {field}" in err and "allowed" in err
    assert not (tmp_path / "o").exists()  # checked before the output folder is touched


def test_curvature_step_rule_is_the_oracle_one_over_L():
    """Run.step = "curvature": θ += η/(s(θ_t) + eps)·∇J with s = λ_max(Σ_x σ_x w_x w_xᵀ)."""
    params = small(rho=0.6)
    lr, steps, eps = 2.0, 12, 1e-4
    out = train.train(
        train.Run("loo", train.EXACT, "sgd", steps, step="curvature"),
        ENV,
        jax.random.key(0),
        params,
        [lr],
        1,
        eps=eps,
    )
    theta = ll.init_theta(params)
    J, S = [], []
    for _ in range(steps):
        truth = ll.exact(params, theta)
        s = ll.smoothness_sigma(params, truth)
        J.append(float(jnp.mean(truth.V)))
        S.append(float(s))
        theta = theta + lr / (s + eps) * jnp.mean(truth.g_global, axis=0)
    np.testing.assert_allclose(out["J"][0, 0, :-1], J, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(out["sigma_eff"][0, 0, :-1], S, rtol=2e-5)
    with pytest.raises(ConfigError, match="step"):
        train.Run("loo", 2, step="adaptive").validate()


def test_equal_sigma_control_admissible_steps_give_equal_trajectories():
    """The control of theory §7: identical prompts, orthogonal blocks.  GRPO at its admissible
    step N/(cB²) and REINFORCE at the oracle step N/(cB²σ_max(θ_t)) are the same update, so the
    exact trajectories coincide and the measured gain is exactly 1."""
    from gpolab.theory import curvature

    params = small(equal=True, p_equal=0.1)
    eta = curvature.admissible_steps(params.num_prompts, 0.0)
    key = jax.random.key(0)
    g = train.train(
        train.Run("grpo", train.EXACT, "sgd", 200), ENV, key, params, [eta["grpo"]], 1, 0.0
    )
    r = train.train(
        train.Run("loo", train.EXACT, "sgd", 200, step="curvature"),
        ENV,
        key,
        params,
        [eta["reinforce_iterate"]],
        1,
        0.0,
    )
    np.testing.assert_allclose(g["J"], r["J"], rtol=1e-5, atol=1e-6)
    assert g["J"][0, 0, -1] > g["J"][0, 0, 0] + 0.1  # it learned


# ----------------------------------------------------------------------------- the lab protocol

TINY = ["--prompts", "2", "--bias-seeds", "2", "--gain-G", "2", "--rho", "0", "--no-control"]


def test_quick_keeps_typed_flags_equal_to_the_full_defaults(tmp_path):
    """The issue's example, ``gpolab train --quick --seeds 16 --G 2,8 --steps 200``: the typed
    values equal the full defaults and used to be overwritten by the quick sizes (4 seeds,
    G = 8, 60 steps).  Now they run as typed (tuned regime, one estimator to stay fast)."""
    full = stdnorm.Config()
    assert (full.seeds, full.G, full.steps) == (16, (2, 8), 200)  # the shape of the example
    out = tmp_path / "o"
    typed = ["--seeds", "16", "--G", "2,8", "--steps", "200"]
    small = ["--regimes", "tuned", "--estimators", "loo", "--lr-grid", "100", *TINY]
    argv = ["train", "--quick", *typed, *small, "--out", str(out)]
    assert main(argv) == 0
    _, table, _ = configs.split_file(out / "config.toml", "stdnorm")
    assert table["seeds"] == 16 and table["G"] == [2, 8] and table["steps"] == 200
    assert tuple(table["optimizers"]) == stdnorm.Config.QUICK["optimizers"]  # untyped: quick
    summary = pd.read_parquet(out / "summary.parquet")
    assert sorted(summary.G) == [2, 8, np.inf] and set(summary.steps) == {200}
    assert set(summary[np.isfinite(summary.G)].n_seeds) == {16}
    curves = pd.read_parquet(out / "curves.parquet")
    assert curves.groupby("G").t.max().eq(200).all()


def test_train_on_bandit_runs_the_group_size_trainer(tmp_path):
    """``gpolab train --env bandit`` is ``gpolab groupsize --train --env bandit`` with --seeds,
    --steps, --seed and --out carried over: the same table, row for row."""
    common = ["--quick", "--seeds", "8", "--seed", "3"]
    argv = ["train", "--env", "bandit", "--steps", "5", "--out", str(tmp_path / "a"), *common]
    assert main(argv) == 0
    argv = ["groupsize", "--train", "--env", "bandit", "--bandit-steps", "5", *common]
    assert main([*argv, "--out", str(tmp_path / "b")]) == 0
    run_only = ["seconds", "config_hash", "wall_s", "finished_at"]  # differ between two runs
    a, b = (pd.read_csv(tmp_path / d / "results.csv").drop(columns=run_only) for d in "ab")
    assert set(a["env"]) == {"bandit"} and set(a["steps"]) == {5} and set(a["n_seeds"]) == {8}
    pd.testing.assert_frame_equal(a, b)


def test_train_on_another_env_rejects_the_log_linear_flags(tmp_path, capsys, monkeypatch):
    """--env bandit|arithmetic runs the group-size lab's training check; a log-linear-only flag
    given with such an env is an error naming the flag and the env (nothing computed)."""
    monkeypatch.setattr(train, "train", lambda *a, **k: pytest.fail("computed"))
    out = tmp_path / "o"
    assert main(["train", "--env", "arithmetic", "--rho", "0.3", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "gpolab train: error: --rho: not used with env = arithmetic; it applies only when env is "
        "loglinear"
    ]
    assert not out.exists()


@pytest.mark.parametrize("command", ["train", "stdnorm"])
def test_bad_out_is_one_line_before_any_computation(command, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(train, "train", lambda *a, **k: pytest.fail("computed"))
    out = tmp_path / "file"
    out.write_text("")
    assert main([command, "--quick", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"gpolab {command}: error: out: ")


class Recorder:
    """A progress stand-in recording which units were computed."""

    def __init__(self):
        self.notes, self.skipped = [], 0

    def update(self, n=1, note=""):
        self.notes.append(note)

    def skip(self, n):
        self.skipped += n


def test_cache_keys_hold_exactly_the_settings_a_unit_reads(tmp_path):
    """Analysis settings and other regimes' settings reuse every stored unit; eps recomputes the
    units that read it (grpo and the oracle step η/(s + eps)), ddof the sampled grpo runs, the
    admissible seeds only the sampled runs.  Resumed tables equal computed ones."""
    cfg = configs.resolve(
        stdnorm.Config,
        typed=dict(
            regimes="admissible",
            prompts=2,
            adm_steps=4,
            adm_seeds=2,
            gain_G="2",
            G="2",
            rho="0",
            control=False,
            bias_seeds=2,
            out=str(tmp_path),
        ),
    )
    store = Store(tmp_path)

    def computed(**changes):
        rec = Recorder()
        tables = stdnorm.run(cfg.replace(**changes), store=store, progress=rec)
        return rec.notes, tables

    first, tables = computed()
    assert len(first) == stdnorm.cells(cfg) == 6 + 4  # 3 methods x G in (inf, 2); bias: 4 at G=2
    again, resumed = computed()
    assert again == []
    for name in ("summary", "gain", "finite_sample", "curves", "phases"):
        pd.testing.assert_frame_equal(
            resumed[name].drop(columns="seconds", errors="ignore"),
            tables[name].drop(columns="seconds", errors="ignore"),
        )
    assert computed(target=0.5, seeds=3, steps=7, lr_grid="1,2", estimators="loo")[0] == []
    eps = computed(eps=1e-6)[0]
    assert sorted(eps) == sorted(
        f"admissible rho=0 sgd G={G} {m}" for G in ("inf", 2) for m in ("grpo", "reinforce-iterate")
    )
    assert computed(ddof=0)[0] == ["admissible rho=0 sgd G=2 grpo"]
    seeds = computed(adm_seeds=3)[0]
    assert len(seeds) == 3 and all("G=2" in n for n in seeds)
    summary = computed(eps=1e-6)[1]["summary"].set_index(["method", "G"])
    assert summary.loc[("grpo", 2), "eps"] == 1e-6 and summary.loc[("grpo", 2), "ddof"] == 1
    assert np.isnan(summary.loc[("reinforce", 2), "eps"])  # loo at a constant step: no eps
    assert pd.isna(summary.loc[("grpo", np.inf), "ddof"])  # exact: no sample std
