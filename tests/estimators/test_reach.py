"""One name list: an estimator registered once reaches `gpolab estimators`, train and chi2, which
either take it or say why not (each answer a query of its registry entry)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpolab import envs
from gpolab import estimators as est
from gpolab.engine import train
from gpolab.envs import loglinear as ll
from gpolab.labs.chi2 import lab as chi2
from gpolab.labs.stdnorm import lab as stdnorm
from gpolab.runner.cli import main
from gpolab.runner.commands import estimators as command
from gpolab.theory import chi2 as chi2_theory
from gpolab.validate import ConfigError

NEW, NEEDY = "test/half-loo", "test/needs-lengths"


def half_loo(rewards):
    """Half the leave-one-out advantage: a reward-only, group-scoped estimator."""
    G = rewards.shape[-1]
    return 0.5 * (rewards - (rewards.sum(-1, keepdims=True) - rewards) / (G - 1))


def per_token(rewards, *, lengths):
    return (rewards - rewards.mean(-1, keepdims=True)) / lengths


@pytest.fixture
def registered():
    """Two estimators registered for one test, removed after it."""
    est.register(NEW, half_loo, min_group=2)
    est.register(NEEDY, per_token)
    yield
    for name in (NEW, NEEDY):
        est.REGISTRY.pop(name, None)


def test_a_new_estimator_is_listed_with_what_takes_it(registered, capsys):
    by_name = {r["name"]: r for r in command.rows()}
    assert by_name[NEW]["train"] == "finite G only (its G = inf limit is not known)"
    assert by_name[NEW]["chi2"] == "Monte Carlo law"
    assert by_name[NEEDY]["train"].startswith("no: it needs lengths")
    assert by_name[NEEDY]["chi2"].startswith("no: it needs lengths")
    assert by_name["grpo"]["train"] == "finite G and G = inf"
    assert by_name["loo"]["chi2"] == "closed-form law"
    assert main(["estimators", NEW]) == 0
    assert NEW in capsys.readouterr().out


def test_train_takes_a_new_estimator_at_finite_G_and_says_why_not_otherwise(registered):
    params = ll.make(4, prompts=4, responses=256, block=4)
    run = train.Run(NEW, 4, steps=3)
    out = train.train(run, envs.get("loglinear"), jax.random.key(0), params, [1.0], 2)
    assert np.isfinite(out["J"]).all() and out["J"].shape == (1, 2, 4)
    with pytest.raises(ConfigError, match=r"^estimator: .*G = inf limit is not known"):
        train.Run(NEW, train.EXACT).validate()
    with pytest.raises(ConfigError, match=r"^estimator: .*needs lengths"):
        train.Run(NEEDY, 4).validate()
    with pytest.raises(ConfigError, match=r"^estimators: .*needs lengths"):
        stdnorm.Config(estimators=(NEEDY,)).validate()
    cfg = stdnorm.Config(estimators=("grpo", NEW), regimes=("tuned",), G=(4,), optimizers=("sgd",))
    cfg.validate()
    runs = {(u.method, u.run.G) for u in stdnorm.train_units(cfg)}
    assert (NEW, 4) in runs and (NEW, train.EXACT) not in runs and ("grpo", train.EXACT) in runs


def test_oracle_trains_with_the_exact_baseline():
    """oracle needs V(x): the trainer hands it the exact V at θ_t, so its mean direction is ∇J."""
    params = ll.make(4, prompts=4, responses=256, block=4)
    theta = ll.init_theta(params)
    truth = ll.exact(params, theta)
    run = train.Run("oracle", 4)
    run.validate()
    knobs = train.Knobs(lr=jnp.float32(1.0), eps=jnp.float32(1e-4))
    keys = jax.random.split(jax.random.key(0), 4096)
    d, _ = train._directions(run, envs.get("loglinear"), keys, params, theta, truth, knobs)
    d = np.asarray(d, np.float64)
    se = d.std(axis=0, ddof=1) / np.sqrt(d.shape[0])
    assert np.all(np.abs(d.mean(0) - np.asarray(truth.g)) < 5 * se + 1e-7)


def test_chi2_takes_a_new_estimator_or_says_why_not(registered):
    chi2.Config(estimator=(NEW,), G=4).validate()
    assert chi2.stream(NEW) >= 8 and [chi2.stream(n) for n in chi2.DEFAULT] == [0, 1, 2, 3, 4]
    with pytest.raises(ConfigError, match=r"^estimator: .*needs lengths"):
        chi2.Config(estimator=(NEEDY,)).validate()
    assert NEW not in chi2.Config(estimator=("all",)).estimator  # all: the built-in entries
    # its Monte Carlo scalars: half of loo's closed-form slope and a quarter of its variance
    params = chi2.make_env(chi2.Config())
    slope, tau2 = chi2_theory.estimator_scalars(jax.random.key(1), params, NEW, 4, n_groups=2**16)
    loo_slope, loo_tau2 = chi2_theory.estimator_scalars(None, params, "loo", 4)
    np.testing.assert_allclose(slope, 0.5 * loo_slope, rtol=0.05)
    np.testing.assert_allclose(tau2, 0.25 * loo_tau2, rtol=0.05)
