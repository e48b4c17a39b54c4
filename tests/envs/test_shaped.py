"""The shaped bandit (gpolab/envs/shaped.py): its exact gradients against autodiff of the closed
forms and against a loop over actions, its draws, and bad settings (one error line, nothing
drawn)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpolab import envs, validate
from gpolab.envs import bandit, shaped

SMALL = dict(prompts=3, actions=5, instance_seed=2)


@pytest.mark.parametrize("model", shaped.SHAPING_MODELS)
def test_exact_gradients_match_autodiff_of_the_closed_forms(model):
    params = shaped.make(shaping=model, shaping_weight=0.4, **SMALL)
    theta = bandit.init_theta(params.bandit) + 0.3  # not the instance's own θ only
    truth = shaped.exact(params, theta)
    g_acc = jax.grad(lambda th: shaped.objectives(params, th)[0])(theta)
    g_score = jax.grad(lambda th: shaped.objectives(params, th)[1])(theta)
    np.testing.assert_allclose(truth.g_acc, g_acc, atol=2e-6)
    np.testing.assert_allclose(truth.g_score, g_score, atol=2e-6)
    np.testing.assert_allclose(truth.g_score, truth.g_acc + 0.4 * truth.g_shaping, atol=1e-7)
    j_acc, j_score = shaped.objectives(params, theta)
    assert float(truth.J_acc) == pytest.approx(float(j_acc), rel=1e-6)
    assert float(truth.J_score) == pytest.approx(float(j_score), rel=1e-6)


def test_exact_gradient_matches_a_loop_over_actions():
    """∇_θ[x, b] Σ_a π(a|x) r(x, a) = f_x π(b|x) (r(x, b) − Σ_a π(a|x) r(x, a)), written out."""
    params = shaped.make(shaping="wrong", shaping_weight=0.3, **SMALL)
    theta = bandit.init_theta(params.bandit)
    truth = shaped.exact(params, theta)
    pi = np.asarray(bandit.policy(params.bandit), np.float64)
    p, s = np.asarray(params.bandit.success, np.float64), np.asarray(params.shaping, np.float64)
    f = np.asarray(params.bandit.prompt_probs, np.float64)
    r = p + 0.3 * s
    want = np.zeros_like(pi)
    for x in range(pi.shape[0]):
        mean = sum(pi[x, a] * r[x, a] for a in range(pi.shape[1]))
        for b in range(pi.shape[1]):
            want[x, b] = f[x] * pi[x, b] * (r[x, b] - mean)
    np.testing.assert_allclose(truth.g_score, want.reshape(-1), atol=1e-6)


def test_shaping_models():
    params = shaped.make(shaping="wrong", **SMALL)
    s, p = np.asarray(params.shaping), np.asarray(params.bandit.success)
    assert np.all((s >= 0) & (s <= 1 - p + 1e-7))  # u (1 − p): at most 1 − p
    assert np.all(np.asarray(shaped.make(shaping="none", **SMALL).shaping) == 0)
    ind = np.asarray(shaped.make(shaping="independent", **SMALL).shaping)
    assert np.all((ind >= 0) & (ind <= 1)) and np.unique(ind).size == ind.size
    # the bandit is the bandit env's own instance of the same settings
    same = bandit.make(bandit.Instance(kind="tabular", **SMALL))
    np.testing.assert_array_equal(params.bandit.success, same.success)
    # an anti-correlated bonus: its gradient points away from accuracy's
    truth = shaped.exact(params, bandit.init_theta(params.bandit))
    assert float(truth.g_acc @ truth.g_shaping) < 0


def test_draws_carry_the_shaping_of_their_action():
    params = shaped.make(shaping="independent", shaping_weight=0.5, **SMALL)
    prompts = jnp.array([0, 2, 1, 2], jnp.int32)
    actions, correct, s = shaped.sample(
        jax.random.key(3), params, bandit.init_theta(params.bandit), prompts, 6
    )
    np.testing.assert_array_equal(s, params.shaping[prompts[:, None], actions])
    assert set(np.unique(correct)) <= {0.0, 1.0}
    np.testing.assert_allclose(shaped.score(correct, s, params.lam), correct + 0.5 * s)


def test_the_registry_finds_it():
    env, inst = envs.make("shaped", shaping_weight=0.2)
    assert env is None and inst.shaping_weight == 0.2 and "shaped" in envs.names()


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(shaping_weight=1.5), "shaping_weight: got 1.5"),
        (dict(shaping_weight=-0.1), "shaping_weight: got -0.1"),
        (dict(shaping_weight=float("nan")), "shaping_weight: got nan"),
        (dict(shaping="format"), "shaping: got 'format'; allowed: none, independent, wrong"),
        (dict(actions=1), "actions: got 1"),
    ],
)
def test_bad_settings_are_one_error_line_before_any_draw(settings, message, monkeypatch):
    monkeypatch.setattr(bandit, "make", lambda *a, **k: pytest.fail("drew before validating"))
    with pytest.raises(validate.ConfigError, match=message):
        shaped.make(**settings)


def test_with_weight_checks_a_concrete_lambda():
    params = shaped.make(**SMALL)
    assert float(shaped.with_weight(params, 0.7).lam) == pytest.approx(0.7)
    with pytest.raises(validate.ConfigError, match="shaping_weight: got 2.0"):
        shaped.with_weight(params, 2.0)
