"""Bandit truth against autodiff, finite differences and brute-force enumeration; sampling."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from gpolab import estimators as est
from gpolab.envs import bandit
from gpolab.validate import ConfigError

KINDS = ["tabular", "loglinear"]


def small(kind, **kw):
    return bandit.make(3, prompts=4, actions=6, kind=kind, dim=3, **kw)


@pytest.mark.parametrize("kind", KINDS)
def test_exact_gradient_is_grad_of_exact_return(kind):
    params = small(kind)
    truth = bandit.exact(params)
    auto = jax.grad(lambda th: bandit.expected_return(params.replace(theta=th)))(params.theta)
    np.testing.assert_allclose(truth.g, np.ravel(auto), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kind", KINDS)
def test_exact_gradient_matches_finite_differences(kind, x64):
    params = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), small(kind))
    g = np.asarray(bandit.exact(params).g)
    theta = np.asarray(params.theta)
    h = 1e-6
    fd = np.zeros(theta.size)
    for i in range(theta.size):
        e = np.zeros(theta.size)
        e[i] = h
        plus = bandit.expected_return(
            params.replace(theta=jnp.asarray(theta + e.reshape(theta.shape)))
        )
        minus = bandit.expected_return(
            params.replace(theta=jnp.asarray(theta - e.reshape(theta.shape)))
        )
        fd[i] = (plus - minus) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("kind", KINDS)
def test_truth_by_brute_force_enumeration(kind):
    """Every moment by an explicit loop over actions and the two reward values."""
    params = small(kind)
    truth = bandit.exact(params)
    pi = np.asarray(bandit.policy(params), np.float64)
    W = np.asarray(bandit.score_table(params), np.float64)
    p = np.asarray(params.success, np.float64)
    for x in range(4):
        V = sum(pi[x, a] * p[x, a] for a in range(6))
        acc = dict(g=0, S2=0, wz2=0, w2zv2=0, w2zv=0)
        for a in range(6):
            for z, pz in ((1.0, p[x, a]), (0.0, 1 - p[x, a])):
                w = pi[x, a] * pz
                acc["g"] = acc["g"] + w * W[x, a] * z
                acc["S2"] += w * W[x, a] @ W[x, a]
                acc["wz2"] += w * (W[x, a] * z) @ (W[x, a] * z)
                acc["w2zv2"] += w * (W[x, a] @ W[x, a]) * (z - V) ** 2
                acc["w2zv"] += w * (W[x, a] @ W[x, a]) * (z - V)
        np.testing.assert_allclose(truth.V[x], V, rtol=1e-5)
        np.testing.assert_allclose(truth.g_local[x], acc["g"], rtol=1e-4, atol=1e-7)
        np.testing.assert_allclose(truth.S2[x], acc["S2"], rtol=1e-5)
        np.testing.assert_allclose(truth.e_wz2[x], acc["wz2"], rtol=1e-5)
        np.testing.assert_allclose(truth.e_w2_zv[x], acc["w2zv"], rtol=1e-4, atol=1e-7)
        np.testing.assert_allclose(
            truth.tr_sigma_oracle[x], acc["w2zv2"] - acc["g"] @ acc["g"], rtol=1e-4
        )


@pytest.mark.parametrize("kind", KINDS)
def test_tabular_scores_equal_autodiff_of_log_policy(kind):
    params = small(kind)
    W = bandit.score_table(params)
    for x, a in [(0, 0), (2, 5), (3, 1)]:
        auto = jax.grad(
            lambda th, x=x, a=a: jax.nn.log_softmax(bandit.logits(params.replace(theta=th)))[x, a]
        )(params.theta)
        local = auto[x] if kind == "tabular" else auto
        np.testing.assert_allclose(W[x, a], local, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_weighted_scores_equal_explicit_scores(kind):
    params = small(kind)
    prompts = jnp.array([0, 3, 3, 1], dtype=jnp.int32)
    actions, rewards = bandit.sample(jax.random.key(0), params, prompts, 9)
    c = est.gradient_weights("loo", rewards)
    explicit = est.estimate_gradient("loo", rewards, bandit.scores(params, prompts, actions))
    np.testing.assert_allclose(
        bandit.weighted_scores(params, prompts, actions, c), explicit, rtol=1e-5, atol=1e-6
    )


def test_inverse_cdf_sampling_matches_policy():
    """Chi-square goodness of fit of 200k (action, reward) pairs per prompt against the joint law
    π(a|x)·p^z(1 − p)^(1−z) (fixed seed): actions follow π and rewards are Bernoulli(p(x, a))."""
    params = small("tabular", logit_scale=2.0)
    params = params.replace(success=params.success.at[0, 0].set(0.0).at[0, 1].set(1.0))
    prompts = jnp.arange(4, dtype=jnp.int32)
    actions, rewards = bandit.sample(jax.random.key(5), params, prompts, 200_000)
    pi = np.asarray(bandit.policy(params), np.float64)
    p = np.asarray(params.success, np.float64)
    joint = np.stack([pi * (1 - p), pi * p], -1).reshape(4, -1)
    np.testing.assert_allclose(bandit.outcome_probs(params), joint, rtol=1e-6, atol=1e-7)
    for x in range(4):
        outcome = 2 * np.asarray(actions[x]) + np.asarray(rewards[x]).astype(int)
        counts = np.bincount(outcome, minlength=12)
        keep = joint[x] > 0  # a zero-probability outcome must never be drawn
        assert counts[~keep].sum() == 0
        expected = joint[x][keep] / joint[x][keep].sum() * counts.sum()
        assert stats.chisquare(counts[keep], expected).pvalue > 1e-3
    # rewards: mean matches V within 4 standard errors
    V = np.asarray(bandit.exact(params).V)
    se = np.sqrt(V * (1 - V) / 200_000)
    assert np.all(np.abs(np.asarray(rewards.mean(-1)) - V) < 4 * se)


def test_alias_sampling_follows_the_joint_law_and_the_inverse_cdf_sampler():
    """The sweep's draw (alias tables of the joint outcomes, ``bandit.outcome_tables``): its exact
    law is the joint law (float64 identity), 200k draws per prompt pass a χ² test against it and a
    two-sample test against the inverse-CDF sampler's draws (other uniforms); zero-probability
    outcomes are never drawn.  Negative control: tables of another instance fail."""
    params = small("tabular", logit_scale=2.0)
    params = params.replace(success=params.success.at[0, 0].set(0.0).at[0, 1].set(1.0))
    joint = np.asarray(bandit.outcome_probs(params), np.float64)
    tables = bandit.outcome_tables(params)
    keep, alias = np.asarray(tables.keep, np.float64), np.asarray(tables.alias)
    C = joint.shape[1]
    for x in range(joint.shape[0]):
        law = keep[x] / C
        np.add.at(law, alias[x], (1 - keep[x]) / C)
        np.testing.assert_allclose(law, joint[x] / joint[x].sum(), atol=1e-7)
    prompts, n = jnp.arange(4, dtype=jnp.int32), 200_000
    a_alias, r_alias = bandit.sample(jax.random.key(5), params, prompts, n, tables)
    a_inv, r_inv = bandit.sample(jax.random.key(6), params, prompts, n)
    other = bandit.outcome_tables(bandit.make(9, prompts=4, actions=6, logit_scale=2.0))
    a_other, r_other = bandit.sample(jax.random.key(5), params, prompts, n, other)
    for x in range(4):
        counts = [
            np.bincount(2 * np.asarray(a[x]) + np.asarray(r[x]).astype(int), minlength=C)
            for a, r in ((a_alias, r_alias), (a_inv, r_inv), (a_other, r_other))
        ]
        live = joint[x] > 0
        assert counts[0][~live].sum() == 0
        expected = joint[x][live] / joint[x][live].sum() * n
        assert stats.chisquare(counts[0][live], expected).pvalue > 1e-3
        assert stats.chi2_contingency(np.stack([counts[0], counts[1]])[:, live]).pvalue > 1e-3
        assert stats.chi2_contingency(np.stack([counts[2], counts[1]])[:, live]).pvalue < 1e-6


def test_prompt_sampling_follows_f():
    params = small("tabular")
    params = params.replace(prompt_probs=jnp.array([0.1, 0.2, 0.3, 0.4]))
    idx = bandit.sample_prompts(jax.random.key(1), params, 100_000)
    counts = np.bincount(np.asarray(idx), minlength=4)
    assert stats.chisquare(counts, np.array([0.1, 0.2, 0.3, 0.4]) * 100_000).pvalue > 1e-3


def test_validation_names_the_field():
    with pytest.raises(ConfigError, match="^kind: .*allowed: tabular, loglinear"):
        bandit.make(kind="deep")
    with pytest.raises(ConfigError, match="^actions: "):
        bandit.make(actions=1)
    params = small("tabular")
    with pytest.raises(ConfigError, match="^success: "):
        bandit.validate_params(params.replace(success=params.success.at[0, 0].set(jnp.nan)))
    with pytest.raises(ConfigError, match="^prompt_probs: "):
        bandit.validate_params(params.replace(prompt_probs=jnp.full((4,), 0.3)))


def _both_precisions(make):
    """``make()`` in float32 mode, then in float64 mode (restored afterwards)."""
    p32 = make()
    jax.config.update("jax_enable_x64", True)
    try:
        return p32, make()
    finally:
        jax.config.update("jax_enable_x64", False)


def _assert_same_instance(p32, p64):
    """Every leaf equal after casting the float64-mode one to float32 (no tolerance)."""
    for a, b in zip(jax.tree.leaves(p32), jax.tree.leaves(p64), strict=True):
        a, b = np.asarray(a), np.asarray(b)
        np.testing.assert_array_equal(a, b.astype(a.dtype))


def test_float64_mode_draws_the_same_instance():
    """One instance per seed whatever the precision (``--x64`` drew another bandit: loo theory
    0.0711 vs 0.0662 at the same ``--instance-seed``)."""
    from gpolab.theory import mse as th

    make = lambda: bandit.make(  # noqa: E731
        7, prompts=5, actions=9, kind="loglinear", dim=4, lengths="independent"
    )
    p32, p64 = _both_precisions(make)
    _assert_same_instance(p32, p64)
    assert np.asarray(p64.success).dtype == np.float64
    np.testing.assert_array_equal(np.asarray(p64.prompt_probs), 0.2)  # exact in float64
    loo32 = th.mse(bandit.exact(p32), "loo", 4)
    jax.config.update("jax_enable_x64", True)
    try:
        loo64 = th.mse(bandit.exact(p64), "loo", 4)
    finally:
        jax.config.update("jax_enable_x64", False)
    assert abs(loo64 / loo32 - 1) < 1e-5, (loo32, loo64)  # float32 rounding only


@pytest.mark.parametrize("env", ["tree-finite", "loglinear"])
def test_float64_mode_draws_the_same_instance_in_the_other_envs(env):
    """The same rule for the other envs that draw an instance from a seed (the arithmetic
    questions and the Gaussian env drew the same one already)."""
    from gpolab.envs import loglinear, tree

    make = {
        "tree-finite": lambda: tree.make_finite(5, 16),
        "loglinear": lambda: loglinear.make(5, prompts=4, responses=256),
    }[env]
    _assert_same_instance(*_both_precisions(make))
