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
def test_tree_with_one_continuation_is_grpo(ddof):
    z = rewards(7, (50, 8, 1))
    a_tree = est.tree_advantages(z, variant="thought-std", ddof=ddof)
    a_grpo = est.grpo_advantages(z[..., 0], ddof=ddof)
    # the same arithmetic, not the same program: equal to float32 rounding, not the last bit
    np.testing.assert_allclose(np.asarray(a_tree), np.asarray(a_grpo), rtol=1e-6, atol=1e-6)


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


# hand vectors whose group std is small enough that every preset's eps shows (relative effect
# eps/s: 1e-4/1e-5 = 10 for TRL, 0.1 for verl, 1e-4 for OpenRLHF at s ~ 1e-5)
PRESET_VECTORS = np.array(
    [
        [1.0, 0.0, 0.0, 1.0],  # s = 1/√3: the eps barely matter
        [0.5, 0.5 + 1e-5, 0.5 - 1e-5, 0.5],  # s ≈ 8.2e-6: eps dominates or not
        [2e-5, 0.0, 0.0, 0.0],  # s = 1e-5
        [0.3, 0.3, 0.3, 0.3],  # all equal: 0
    ]
)
PRESET_ENTRIES = {"trl": "trl/grpo", "verl": "verl/grpo", "openrlhf": "openrlhf/group_norm"}


@pytest.mark.parametrize("trainer", sorted(PRESET_ENTRIES))
def test_trainer_presets_reproduce_the_framework_entries(trainer, x64):
    """grpo_advantages(z, **TRAINER_PRESETS[t]) equals the registry entry written from that
    framework's own code (gpolab.estimators.frameworks), and differs from the other two
    frameworks' entries on the small-std vectors: a wrong eps, ddof or scale fails here."""
    z = jnp.asarray(PRESET_VECTORS)
    preset = np.asarray(est.grpo_advantages(z, **est.TRAINER_PRESETS[trainer]))
    np.testing.assert_allclose(preset, est.REGISTRY[PRESET_ENTRIES[trainer]](z), rtol=1e-12)
    # hand value on the first row: A = ±(1/2)/(1/√3 + eps)
    s = 1 / np.sqrt(3)
    eps = {"trl": 1e-4, "verl": 1e-6, "openrlhf": 1e-9}[trainer]
    np.testing.assert_allclose(preset[0], 0.5 / (s + eps) * np.array([1, -1, -1, 1]), rtol=1e-12)
    np.testing.assert_array_equal(preset[3], 0.0)
    for other, name in PRESET_ENTRIES.items():
        if other != trainer:
            theirs = np.asarray(est.REGISTRY[name](z))
            assert np.max(np.abs(preset[1:3] - theirs[1:3])) > 1e-3 * np.max(np.abs(preset))


def test_loo_and_ustat_with_one_response_raise_a_config_error():
    z = jnp.ones((3, 1))
    for fn in (est.loo_advantages, est.ustat_weights, jax.jit(est.loo_advantages)):
        with pytest.raises(ConfigError, match=r"^G: got 1 for .*allowed: G >= 2"):
            fn(z)
    with pytest.raises(ConfigError, match="^G: got 1"):
        est.ustat_gradient(z, jnp.ones((3, 1, 2)))
    with pytest.raises(ConfigError, match="^G: got 1"):
        est.REGISTRY["loo"](np.ones((3, 1)))
    # G = 2 is the smallest leave-one-out group: A = ±(Z_1 − Z_2)
    np.testing.assert_array_equal(est.loo_advantages(jnp.array([1.0, 0.0])), [1.0, -1.0])


def _needs(entry, rewards):
    P = rewards.shape[0]
    given = {
        "lengths": np.full(rewards.shape, 3.0, rewards.dtype),
        "greedy": np.linspace(0, 1, P).astype(rewards.dtype),
        "baseline": np.linspace(0.2, 0.8, P).astype(rewards.dtype),
    }
    return {k: v for k, v in given.items() if k in entry.needs}


# non-binary, degenerate and binary groups, G = 5 (every entry's min_group)
DTYPE_REWARDS = np.array([[1.0, 0.0, 0.0, 1.0, 0.5], [1.0] * 5, [0.0, 1.0, 0.0, 0.0, 0.25]])


@pytest.mark.parametrize("name", sorted(est.REGISTRY))
def test_every_registry_estimator_keeps_the_input_dtype_under_x64(name, x64):
    entry = est.REGISTRY[name]
    out = {}
    for dtype in (np.float64, np.float32):
        r = DTYPE_REWARDS.astype(dtype)
        out[dtype] = entry(r, **_needs(entry, r))
        assert out[dtype].dtype == dtype, (name, dtype, out[dtype].dtype)
        assert np.all(np.isfinite(out[dtype]))
    # the float64 result is the float32 one, computed more precisely
    np.testing.assert_allclose(out[np.float32], out[np.float64], rtol=1e-5, atol=1e-6)
    weights = est.gradient_weights(name, jnp.asarray(DTYPE_REWARDS), **_needs(entry, DTYPE_REWARDS))
    assert weights.dtype == jnp.float64


def test_core_functions_keep_float64_under_x64(x64):
    z = jnp.asarray(DTYPE_REWARDS)
    W = jnp.ones((3, 5, 2), jnp.float64)
    outs = [
        est.vanilla_advantages(z),
        est.oracle_advantages(z, jnp.full(3, 0.5)),
        est.loo_advantages(z),
        est.mean_advantages(z),
        est.ustat_weights(z),
        est.ustat_gradient(z, W),
        est.policy_gradient(est.loo_advantages(z), W),
        est.tree_advantages(z.reshape(3, 5, 1)),
    ]
    outs += [
        est.grpo_advantages(z, scale=s, ddof=d, eps=e)
        for s in est.SCALES
        for d in (0, 1)
        for e in (0.0, 1e-4)
    ]
    outs += [est.tree_advantages(jnp.stack([z, z], 1), variant=v) for v in est.TREE_VARIANTS]
    assert [o.dtype for o in outs] == [jnp.float64] * len(outs)
    # and float64 carries digits float32 cannot: 1 + 1e-12 is not 1
    z = jnp.array([1.0 + 1e-12, 1.0, 1.0, 1.0])
    assert float(est.mean_advantages(z)[0]) == pytest.approx(0.75e-12, rel=1e-3)


LIST = [[1.0, 0.0, 0.0, 1.0, 0.5], [1, 1, 1, 1, 1], [0, 1, 0, 0, 0.25]]


@pytest.mark.parametrize("name", sorted(est.REGISTRY))
def test_registry_accepts_python_lists(name):
    entry = est.REGISTRY[name]
    arr = np.asarray(LIST, np.float32)
    given = _needs(entry, arr)
    got = entry(LIST, **{k: v.tolist() for k, v in given.items()})
    np.testing.assert_array_equal(got, entry(jnp.asarray(arr), **given))
    assert got.dtype == jnp.float32


def test_core_functions_accept_python_lists():
    z = jnp.asarray(LIST, jnp.float32)
    W = np.arange(30.0).reshape(3, 5, 2) / 30
    pairs = [
        (est.vanilla_advantages(LIST), z),
        (est.oracle_advantages(LIST, [0.5, 0.5, 0.5]), z - 0.5),
        (est.loo_advantages(LIST), est.loo_advantages(z)),
        (est.mean_advantages(LIST), est.mean_advantages(z)),
        (est.grpo_advantages(LIST, ddof=0), est.grpo_advantages(z, ddof=0)),
        (est.ustat_weights(LIST), est.ustat_weights(z)),
        (est.ustat_gradient(LIST, W.tolist()), est.ustat_gradient(z, jnp.asarray(W))),
        (est.policy_gradient(LIST, W.tolist()), est.policy_gradient(z, jnp.asarray(W))),
        (est.tree_advantages([LIST, LIST]), est.tree_advantages(jnp.stack([z, z]))),
        (est.degenerate(LIST), jnp.array([False, True, False])),
    ]
    for got, want in pairs:
        np.testing.assert_array_equal(got, want)
    # integer lists are rewards too (the default float), not integer advantages
    np.testing.assert_allclose(
        est.loo_advantages([[1, 0, 0, 1]]), [[2 / 3, -2 / 3, -2 / 3, 2 / 3]], rtol=1e-6
    )
    assert est.vanilla_advantages([[1, 0]]).dtype == jnp.float32


def test_check_rewards_rejects_non_finite_logs():
    est.check_rewards(np.zeros((3, 4)))
    with pytest.raises(ConfigError, match="^rewards: has non-finite"):
        est.check_rewards(np.array([[1.0, np.nan]]))
    with pytest.raises(ConfigError, match="^rewards: got shape"):
        est.check_rewards(np.float32(1.0))
