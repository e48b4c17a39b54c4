"""Thoughts that share features (gpolab/theory/tree_overlap.py): the exact per-tree moments of
the thought-policy gradient against enumeration, the log-linear geometry against autodiff, and
the whole-budget cos² against its definition."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from gpolab import estimators
from gpolab.envs import tree
from gpolab.theory import tree as theory
from gpolab.theory import tree_overlap as ov


def enumerate_moments(params, K, M, variant, ddof, eps):
    """E ĝ₀ and E ĝ₀ĝ₀ᵀ by summing over every (thought, count) of the K thoughts."""
    law = theory.thought_law(params)
    T = len(law.nodes)
    outcomes = [(t, s) for t in range(T) for s in range(M + 1)]
    weight = {(t, s): law.weights[t] * stats.binom.pmf(s, M, law.nodes[t]) for t, s in outcomes}
    combos = list(itertools.product(outcomes, repeat=K))
    counts = np.array([[s for _, s in c] for c in combos], np.float64)
    leaves = (np.arange(M)[None, None, :] < counts[..., None]).astype(np.float64)
    adv = np.asarray(
        estimators.tree_advantages(jnp.asarray(leaves), variant=variant, ddof=ddof, eps=eps)
    )
    mean, second = np.zeros(T), np.zeros((T, T))
    for c, a in zip(combos, adv, strict=True):
        g = np.zeros(T)
        np.add.at(g, [t for t, _ in c], a / K)
        p = math.prod(weight[o] for o in c)
        mean += p * g
        second += p * np.outer(g, g)
    return mean, second


@pytest.mark.parametrize("variant", ["thought-std", "leaf-std", "mean-only"])
@pytest.mark.parametrize(("K", "M"), [(2, 1), (2, 3), (3, 2)])
def test_exact_moments_match_enumeration(variant, K, M, x64):
    params = tree.make_finite(1, thoughts=3)
    mean, second = ov.gradient_moments(params, K, M, variant, 1, 1e-4)
    want_mean, want_second = enumerate_moments(params, K, M, variant, 1, 1e-4)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(second, want_second, rtol=1e-9, atol=1e-12)


def features(law, rho, shared=None):
    """Φ (T, T + 1): √(1 − ρ) e_t ⊕ √ρ ψ_t, plus a component ``shared`` common to every thought."""
    psi = ov.strategy(law)
    phi = np.hstack([math.sqrt(1 - rho) * np.eye(len(psi)), math.sqrt(rho) * psi[:, None]])
    return phi if shared is None else phi + shared[None, :]


def test_loglinear_policy_gradient_is_the_features_times_the_softmax_one(x64):
    """θ = (logits/√(1 − ρ), 0) gives the finite model's policy, and ∇_θ J = Φᵀ π ⊙ (v − J)."""
    params = tree.make_finite(0, thoughts=6)
    law = theory.thought_law(params)
    rho = 0.6
    phi = features(law, rho)
    theta = np.append(np.asarray(params.logits, np.float64) / math.sqrt(1 - rho), 0.0)
    v = jnp.asarray(law.nodes)

    def J(th):
        return jax.nn.softmax(jnp.asarray(phi) @ th) @ v

    grad = np.asarray(jax.grad(J)(jnp.asarray(theta)))
    pi = np.asarray(jax.nn.softmax(jnp.asarray(phi) @ jnp.asarray(theta)))
    np.testing.assert_allclose(pi, law.weights, rtol=1e-9)
    want = phi.T @ (law.weights * (law.nodes - law.mean))
    np.testing.assert_allclose(grad, want, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(want / math.sqrt(law.var), phi.T @ ov.target(law), rtol=1e-12)


@pytest.mark.parametrize("rho", [0.0, 0.3, 0.9])
def test_cos2_from_six_moments_is_the_gram_metric_one(rho):
    """cos² and mse from w equal their definitions in θ-space, and a component shared by every
    thought alike changes nothing (it cancels in the score)."""
    params = tree.make_finite(2, thoughts=8)
    law = theory.thought_law(params)
    K, M, n = 4, 2, 3.5
    mean, second = ov.gradient_moments(params, K, M, "thought-std", 1, 1e-4)
    w = ov.moments(params, K, M, "thought-std", 1, 1e-4)
    tt, c = ov.geometry(law)
    got = ov.cos2(w, rho, tt, c, n)
    shared = np.random.default_rng(0).normal(size=len(law.nodes) + 1)
    for phi in (features(law, rho), features(law, rho, shared)):
        gram, goal = phi @ phi.T, ov.target(law)
        d, gg, mm = mean @ gram @ goal, goal @ gram @ goal, mean @ gram @ mean
        var = np.sum(gram * second) - mm
        assert got[0] == pytest.approx(d * d / (gg * (mm + var / n)), rel=1e-9)
        assert got[1] == pytest.approx((mean - goal) @ gram @ (mean - goal) + var / n, rel=1e-9)


def test_strategy_feature_is_standardized_and_the_envs_agree():
    params = tree.make_finite(0, thoughts=32)
    law = theory.thought_law(params)
    psi = ov.strategy(law)
    assert law.weights @ psi == pytest.approx(0.0, abs=1e-12)
    assert law.weights @ psi**2 == pytest.approx(1.0, rel=1e-12)
    np.testing.assert_allclose(tree.strategy_feature(params), psi, rtol=1e-5, atol=1e-5)


def test_moments_past_the_exact_grid_are_nan():
    params = tree.make_finite(0, thoughts=4)
    assert ov.gradient_moments(params, 512, 64) is None
    assert np.isnan(ov.moments(params, 512, 64)).all()


def test_boundary_reads_the_smallest_overlap_and_counts_violations():
    import pandas as pd

    wins = pd.DataFrame(
        {
            "ratio": [0.1] * 4 + [0.0] * 2,
            "overlap": [0, 0.3, 0.6, 0.9, 0, 0.5],
            "pays": ["flat", "tree", "tie", "tree", "flat", "flat"],
        }
    )
    found = ov.boundary(wins)
    assert found["rho_star"][0.1] == 0.3 and math.isnan(found["rho_star"][0.0])
    assert found["violations"] == 1
