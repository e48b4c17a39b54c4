"""Tree env: exact moments, degenerate-group probability, targets and the sweep cell."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from gpolab import configs, engine, estimators
from gpolab.envs import tree
from gpolab.kernels import tree as tree_kernel
from gpolab.labs.sweep import lab as sweep
from gpolab.theory import tree as theory_tree
from gpolab.validate import ConfigError

MODELS = {"beta": lambda: tree.make_beta(2.0, 3.0), "finite": lambda: tree.make_finite(1, 12)}


@pytest.mark.parametrize("a,b", [(2.0, 3.0), (0.5, 0.5), (1.5, 4.0), (7.0, 1.2)])
def test_beta_moments_against_scipy_and_quadrature(a, b):
    """tree.exact and theory_tree.beta_moments against scipy.stats.beta and ∫ f(p) Beta(p) dp."""
    from scipy import integrate

    law = stats.beta(a, b)
    quad = lambda f: integrate.quad(lambda p: f(p) * law.pdf(p), 0, 1)[0]  # noqa: E731
    mu = quad(lambda p: p)
    var = quad(lambda p: (p - mu) ** 2)
    tau = quad(lambda p: p * (1 - p))
    t = tree.exact(tree.make_beta(a, b))
    np.testing.assert_allclose([float(t.mean), float(t.sd)], [law.mean(), law.std()], rtol=1e-6)
    np.testing.assert_allclose([float(t.mean), float(t.sd) ** 2], [mu, var], rtol=1e-5)
    np.testing.assert_allclose(theory_tree.beta_moments(a, b), [mu, var, tau], rtol=1e-7)
    # the quadrature rule the finite-K formulas use integrates the same moments
    q = theory_tree.thought_law((a, b))
    np.testing.assert_allclose([q.mean, q.var, q.tau], [mu, var, tau], rtol=1e-9)


def test_finite_thought_moments_by_enumeration():
    params = tree.make_finite(2, 7)
    logits = np.asarray(params.logits, np.float64)
    pi = np.exp(logits - logits.max())
    pi /= pi.sum()
    values = np.asarray(params.values, np.float64)
    mean = sum(p * v for p, v in zip(pi, values, strict=True))
    var = sum(p * (v - mean) ** 2 for p, v in zip(pi, values, strict=True))
    t = tree.exact(params)
    np.testing.assert_allclose([float(t.mean), float(t.sd)], [mean, np.sqrt(var)], rtol=1e-5)


def test_finite_thought_gradient_is_grad_of_return():
    params = tree.make_finite(3, 10)
    auto = jax.grad(lambda l: tree.thought_return(params.replace(logits=l)))(params.logits)
    np.testing.assert_allclose(tree.exact(params).grad, auto, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("model", MODELS)
def test_thought_sampling_matches_model(model):
    params = MODELS[model]()
    p, ids = tree.sample_thoughts(jax.random.key(0), params, 100_000)
    t = tree.exact(params)
    se = float(t.sd) / np.sqrt(100_000)
    assert abs(float(jnp.mean(p)) - float(t.mean)) < 4 * se
    if model == "beta":
        assert stats.kstest(np.asarray(p), stats.beta(2, 3).cdf).pvalue > 1e-3
    else:
        pi = np.asarray(jax.nn.softmax(params.logits), np.float64)
        counts = np.bincount(np.asarray(ids), minlength=12)
        assert stats.chisquare(counts, pi / pi.sum() * counts.sum()).pvalue > 1e-3


def test_value_pmf_beta_binomial_by_integration():
    """P(V̂ = j/M) = ∫ C(M,j) p^j (1−p)^(M−j) Beta(p; a, b) dp, checked by quadrature."""
    from scipy import integrate

    params = tree.make_beta(1.5, 2.5)
    pmf = theory_tree.value_pmf(params, 4)
    for j in range(5):
        val, _ = integrate.quad(
            lambda p, j=j: stats.binom.pmf(j, 4, p) * stats.beta.pdf(p, 1.5, 2.5), 0, 1
        )
        assert np.isclose(pmf[j], val, rtol=1e-6)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("K,M", [(2, 1), (4, 2), (3, 8)])
def test_degenerate_fraction_matches_exact_probability(model, K, M):
    params = MODELS[model]()
    args = (params, tree.exact(params), np.float32(1e-4))
    m = engine.run(
        tree_kernel.tree_error, tree_kernel.TreeCell(K, M), args, jax.random.key(K * M), 20_000
    )
    exact = theory_tree.degenerate_prob(params, K, M)
    se = np.sqrt(exact * (1 - exact) / 20_000)
    assert abs(float(m.mean("degenerate")) - exact) < 4 * se + 1e-12


def test_group_target_is_standardized():
    p = jnp.array([0.2, 0.5, 0.9, 0.4])
    a = tree.group_target(p, ddof=1)
    np.testing.assert_allclose(jnp.mean(a), 0.0, atol=1e-6)
    np.testing.assert_allclose(jnp.std(a, ddof=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(tree.group_target(jnp.full(3, 0.3)), 0.0)


def test_large_M_advantages_approach_group_target():
    """As M grows the thought advantage tends to the within-group standardized value."""
    params = tree.make_beta(2.0, 3.0)
    args = (params, tree.exact(params), np.float32(0.0))
    small = engine.run(
        tree_kernel.tree_error, tree_kernel.TreeCell(4, 4), args, jax.random.key(0), 4000
    )
    large = engine.run(
        tree_kernel.tree_error, tree_kernel.TreeCell(4, 256), args, jax.random.key(0), 4000
    )
    assert large.mean("sq_group") < 0.1 * small.mean("sq_group")
    assert large.mean("cond_var") < 0.1 * small.mean("cond_var")


def test_bad_parameters_raise():
    with pytest.raises(ConfigError, match="^a: "):
        tree.make_beta(0.0, 1.0)
    with pytest.raises(ConfigError, match="^thoughts: "):
        tree.make_finite(0, 1)
    with pytest.raises(ConfigError, match="^variant: "):
        estimators.tree_advantages(jnp.ones((2, 3)), variant="leaf")


def test_beta_parameters_are_beta_a_beta_b_and_the_keys_keep_the_stored_names():
    """The Beta parameters are beta_a, beta_b (no --b beside the bandit's --B); their old names
    a, b are one error naming them (CHANGELOG); the sweep's tree keys keep the stored names."""
    with pytest.raises(TypeError, match="'a'"):
        tree.Instance(a=3.0)
    with pytest.raises(configs.ConfigError, match="^b: unknown field; allowed: "):
        configs.resolve(sweep.Config, typed={"env": "tree", "b": 3.0})
    cfg = configs.resolve(sweep.Config, typed={"env": "tree", "beta_a": 3.0})
    assert cfg.instance.beta_a == 3.0
    assert "a" in sweep.row_settings(cfg, sweep._row_ids(cfg)[0])
