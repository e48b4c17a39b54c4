"""Estimator identities, hand-derived vectors, degenerate groups and a slow numpy reference."""

import itertools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpolab import estimators as est
from gpolab.validate import ConfigError


def rewards(key, shape, binary=True):
    if binary:
        return jax.random.bernoulli(jax.random.key(key), 0.4, shape).astype(jnp.float32)
    return jax.random.normal(jax.random.key(key), shape)


def test_hand_derived_vectors():
    z = jnp.array([1.0, 0.0, 0.0, 1.0])
    # loo: Z_g − (sum − Z_g)/3 with sum = 2  →  [1 − 1/3, −2/3, −2/3, 1 − 1/3]
    np.testing.assert_allclose(est.loo_advantages(z), [2 / 3, -2 / 3, -2 / 3, 2 / 3], rtol=1e-6)
    # mean: Z − 0.5
    np.testing.assert_allclose(est.mean_advantages(z), [0.5, -0.5, -0.5, 0.5])
    # grpo, ddof 1, eps 0: s = sqrt(4 · 0.25 / 3) = 1/√3, so A = ±0.5 √3
    a = est.grpo_advantages(z, eps=0.0)
    np.testing.assert_allclose(a, 0.5 * np.sqrt(3) * np.array([1, -1, -1, 1]), rtol=1e-6)
    # grpo, ddof 0: s = 0.5, A = ±1
    np.testing.assert_allclose(est.grpo_advantages(z, ddof=0, eps=0.0), [1, -1, -1, 1], rtol=1e-6)
    # TRL eps = 1e-4 is added to s
    np.testing.assert_allclose(
        est.grpo_advantages(z, ddof=0), np.array([1, -1, -1, 1]) * 0.5 / (0.5 + 1e-4), rtol=1e-6
    )
    np.testing.assert_allclose(est.oracle_advantages(z, jnp.array(0.25)), z - 0.25)


@pytest.mark.parametrize("G", [2, 3, 8, 17])
def test_ustat_equals_loo(G):
    z = rewards(G, (5, G), binary=False)
    W = jax.random.normal(jax.random.key(100 + G), (5, G, 7))
    u = est.ustat_gradient(z, W)
    loo = est.policy_gradient(est.loo_advantages(z), W)
    np.testing.assert_allclose(u, loo, rtol=1e-5, atol=1e-6)


def test_ustat_matches_literal_pair_loop():
    z = np.asarray(rewards(1, (6,), binary=False), dtype=np.float64)
    W = np.asarray(jax.random.normal(jax.random.key(2), (6, 3)), dtype=np.float64)
    pairs = list(itertools.combinations(range(6), 2))
    ref = sum(0.5 * (W[i] - W[j]) * (z[i] - z[j]) for i, j in pairs) / len(pairs)
    np.testing.assert_allclose(est.ustat_gradient(jnp.asarray(z), jnp.asarray(W)), ref, rtol=1e-5)


@pytest.mark.parametrize("G", [2, 5, 16])
def test_mean_is_shrunk_loo(G):
    z = rewards(G, (4, G))
    np.testing.assert_allclose(
        est.mean_advantages(z), (G - 1) / G * est.loo_advantages(z), rtol=1e-6, atol=1e-7
    )


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("ddof", [0, 1])
def test_grpo_affine_invariance(scale, ddof):
    z = rewards(3, (6, 8), binary=False)
    a = est.grpo_advantages(z, scale=scale, ddof=ddof, eps=0.0)
    b = est.grpo_advantages(3.0 * z - 7.0, scale=scale, ddof=ddof, eps=0.0)
    factor = 3.0 if scale == "none" else 1.0  # unnormalised advantages scale with the rewards
    np.testing.assert_allclose(b, factor * a, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", est.ESTIMATORS)
@pytest.mark.parametrize("scale", est.SCALES)
@pytest.mark.parametrize("eps", [0.0, 1e-4])
def test_all_equal_groups_give_zero(name, scale, eps):
    z = jnp.stack([jnp.zeros(6), jnp.ones(6), jnp.full(6, 0.1), jnp.full(6, 0.1)])
    W = jnp.ones((4, 6, 3))
    c = est.gradient_weights(name, z, baseline=jnp.mean(z, -1), scale=scale, eps=eps)
    assert np.all(np.isfinite(c))
    if name != "vanilla":
        np.testing.assert_allclose(c, 0.0, atol=1e-7)
        np.testing.assert_allclose(
            est.estimate_gradient(name, z, W, baseline=jnp.mean(z, -1), scale=scale, eps=eps),
            0.0,
            atol=1e-6,
        )


@pytest.mark.parametrize("variant", est.TREE_VARIANTS)
@pytest.mark.parametrize("eps", [0.0, 1e-4])
def test_tree_degenerate_is_zero(variant, eps):
    z = jnp.ones((3, 4, 5)).at[1].set(0.0)  # every thought has the same value
    a = est.tree_advantages(z, variant=variant, eps=eps)
    assert a.shape == (3, 4)
    np.testing.assert_array_equal(a, 0.0)


@pytest.mark.parametrize("ddof", [0, 1])
def test_tree_with_one_continuation_is_grpo_bitwise(ddof):
    z = rewards(7, (50, 8, 1))
    a_tree = est.tree_advantages(z, variant="thought-std", ddof=ddof)
    a_grpo = est.grpo_advantages(z[..., 0], ddof=ddof)
    np.testing.assert_array_equal(np.asarray(a_tree), np.asarray(a_grpo))


@pytest.mark.parametrize("variant", est.TREE_VARIANTS)
def test_tree_advantages_sum_to_zero_and_are_affine_invariant(variant):
    z = rewards(8, (20, 6, 4), binary=False)
    a = est.tree_advantages(z, variant=variant, eps=0.0)
    np.testing.assert_allclose(jnp.sum(a, -1), 0.0, atol=1e-5)
    b = est.tree_advantages(2.0 * z + 1.0, variant=variant, eps=0.0)
    np.testing.assert_allclose(
        b, (2.0 if variant == "mean-only" else 1.0) * a, rtol=1e-4, atol=1e-5
    )


def numpy_reference(name, z, baseline, scale, ddof, eps):
    """Loop-by-loop reference for one reward log (P, G), float64."""
    z = np.asarray(z, dtype=np.float64)
    P, G = z.shape
    out = np.zeros_like(z)
    batch_std = np.std(z, ddof=ddof)
    for p in range(P):
        for g in range(G):
            others = [z[p, k] for k in range(G) if k != g]
            mean = z[p].mean()
            if name == "vanilla":
                out[p, g] = z[p, g]
            elif name == "oracle":
                out[p, g] = z[p, g] - baseline[p]
            elif name in ("loo", "ustat"):
                out[p, g] = z[p, g] - sum(others) / len(others)
            elif name == "mean":
                out[p, g] = z[p, g] - mean
            elif name == "grpo":
                s = {"group": np.std(z[p], ddof=ddof), "batch": batch_std, "none": None}[scale]
                if s is None:
                    out[p, g] = z[p, g] - mean
                elif np.all(z[p] == z[p, 0]):
                    out[p, g] = 0.0
                else:
                    out[p, g] = (z[p, g] - mean) / (s + eps)
    return out


@pytest.mark.parametrize("name", est.ESTIMATORS)
@pytest.mark.parametrize("scale,ddof", [("group", 1), ("group", 0), ("batch", 1), ("none", 1)])
def test_against_numpy_loop_reference(name, scale, ddof):
    z = rewards(11, (7, 5))
    baseline = jnp.linspace(0.1, 0.9, 7)
    adv = est.advantages(name, z, baseline=baseline, scale=scale, ddof=ddof, eps=1e-4)
    ref = numpy_reference(name, z, np.asarray(baseline), scale, ddof, 1e-4)
    np.testing.assert_allclose(adv, ref, rtol=1e-5, atol=1e-6)


def test_float64_mode(x64):
    z = jnp.asarray(np.random.default_rng(0).normal(size=(3, 9)))
    assert est.grpo_advantages(z).dtype == jnp.float64
    ref = numpy_reference("grpo", z, None, "group", 1, 1e-4)
    np.testing.assert_allclose(est.grpo_advantages(z), ref, rtol=1e-12)


@pytest.mark.parametrize(
    "kwargs,field",
    [
        (dict(name="loo", G=1), "G (for loo)"),
        (dict(name="ustat", G=1), "G (for ustat)"),
        (dict(name="grpo", G=1), "G (for grpo)"),
        (dict(name="nope", G=4), "estimator"),
        (dict(name="grpo", G=4, scale="global"), "scale"),
        (dict(name="grpo", G=4, ddof=2), "ddof"),
        (dict(name="grpo", G=4, eps=float("nan")), "eps"),
        (dict(name="grpo", G=4, eps=-1.0), "eps"),
    ],
)
def test_check_estimator_names_the_field(kwargs, field):
    with pytest.raises(ConfigError, match="^" + re.escape(field) + ": .*allowed: "):
        est.check_estimator(**kwargs)


def test_trainer_presets_match_docs():
    assert est.TRAINER_PRESETS["trl"] == dict(scale="group", ddof=1, eps=1e-4)
    assert est.TRAINER_PRESETS["verl"]["eps"] == 1e-6
    assert est.TRAINER_PRESETS["openrlhf"]["eps"] == 1e-9


def test_check_rewards_rejects_non_finite_logs():
    est.check_rewards(np.zeros((3, 4)))
    with pytest.raises(ConfigError, match="^rewards: has non-finite"):
        est.check_rewards(np.array([[1.0, np.nan]]))
    with pytest.raises(ConfigError, match="^rewards: got shape"):
        est.check_rewards(np.float32(1.0))
