"""Trace-time shape/rank/dtype checks (chex) at the public estimator functions.

For every function: a valid input with leading batch axes traces to the documented output shape,
and the same jaxpr comes out with chex's assertions disabled (the checks add no operation); a
wrong-rank (or wrong-dtype) input fails with chex's ``AssertionError`` while tracing, or, where
the function already validated the shape with a ``ConfigError``, with that one error only.
"""

import chex
import jax
import jax.numpy as jnp
import pytest

from gpolab.estimators import aggregation, core, frameworks, offpolicy
from gpolab.estimators.registry import REGISTRY
from gpolab.validate import ConfigError

f32 = jnp.float32
SPEC = {s.name: s for s in frameworks.SPECS}


def arr(*shape, dtype=f32):
    return jnp.ones(shape, dtype)


# (id, fn, valid batched args, output shape, wrong args): leading batch (2, 3), G = 4, K×M = 4×2
CORE = [
    ("degenerate", core.degenerate, (arr(2, 3, 4),), (2, 3), (arr(),)),
    ("vanilla", core.vanilla_advantages, (arr(2, 3, 4),), (2, 3, 4), (arr(),)),
    (
        "oracle",
        core.oracle_advantages,
        (arr(2, 3, 4), arr(2, 3)),
        (2, 3, 4),
        (arr(2, 3, 4), arr(2)),
    ),  # baseline of the wrong rank
    ("loo", core.loo_advantages, (arr(2, 3, 4),), (2, 3, 4), (arr(),)),
    ("mean", core.mean_advantages, (arr(2, 3, 4),), (2, 3, 4), (arr(),)),
    ("grpo", core.grpo_advantages, (arr(2, 3, 4),), (2, 3, 4), (arr(),)),
    (
        "policy_gradient",
        core.policy_gradient,
        (arr(2, 3, 4), arr(2, 3, 4, 5)),
        (2, 3, 5),
        (arr(2, 3, 4), arr(2, 3, 4)),
    ),  # scores without their D axis
    ("ustat_weights", core.ustat_weights, (arr(2, 3, 4),), (2, 3, 4), (arr(),)),
    (
        "ustat_gradient",
        core.ustat_gradient,
        (arr(2, 3, 4), arr(2, 3, 4, 5)),
        (2, 3, 5),
        (arr(2, 3, 4), arr(2, 3, 5, 4)),
    ),  # scores [..., D, G]
    ("tree", core.tree_advantages, (arr(2, 3, 4, 2),), (2, 3, 4), (arr(4),)),
]

_T = (arr(2, 3, 4, 5), arr(2, 3, 4, 5), arr(2, 3, 4), arr(2, 3, 4, 5), 0.2, 0.28, 3.0)
OTHERS = [
    (
        "loss_weights",
        lambda x: aggregation.loss_weights("token-mean", x),
        (arr(2, 3, 4),),
        (2, 3, 4),
        (arr(),),
    ),
    (
        "relative_weights",
        lambda x: aggregation.relative_weights("seq-mean-token-mean", x),
        (arr(2, 3, 4),),
        (2, 3, 4),
        (arr(),),
    ),
    (
        "objective",
        lambda *a: offpolicy.objective("token", "ppo", *a)[0],
        _T,
        (2, 3, 4, 5),
        (_T[0], _T[1], arr(2, 3), *_T[3:]),
    ),  # c without its G axis
    (
        "kl_terms",
        lambda *a: offpolicy.kl_terms("k3", *a),
        _T[:2] + _T[3:4],
        (2, 3, 4, 5),
        (arr(5), arr(5), arr(5)),
    ),  # no G axis
]


def _framework_case(spec):
    """(valid args and options, rewards of the wrong rank) of a framework entry: rewards
    (2, 3, 4) (batch-scoped entries: leading 2, P = 3), its needs beside them."""
    extra = {"lengths": arr(2, 3, 4), "greedy": arr(2, 3), "baseline": arr(2, 3)}
    kw = {n: extra[n] for n in spec.needs}
    bad = arr(4) if spec.scope == "batch" else arr()
    return kw, bad


def _same_jaxpr_without_checks(fn, args):
    with_checks = str(jax.make_jaxpr(fn)(*args))
    chex.disable_asserts()
    try:
        without = str(jax.make_jaxpr(fn)(*args))
    finally:
        chex.enable_asserts()
    assert with_checks == without


CASES = CORE + OTHERS


@pytest.mark.parametrize("name, fn, good, shape, bad", CASES, ids=[c[0] for c in CASES])
def test_batched_input_traces_and_wrong_rank_is_a_chex_error(name, fn, good, shape, bad):
    assert jax.eval_shape(fn, *good).shape == shape
    _same_jaxpr_without_checks(fn, good)
    with pytest.raises(AssertionError, match=r"\[Chex\]"):
        jax.jit(fn)(*bad)  # raised while tracing: the shapes are static


@pytest.mark.parametrize("name", sorted(SPEC))
def test_framework_entries_check_rank_once_and_dtype_with_chex(name):
    spec = SPEC[name]
    kw, bad = _framework_case(spec)
    fn = lambda r: spec.fn(r, **kw)  # noqa: E731
    assert jax.eval_shape(fn, arr(2, 3, 4)).shape == (2, 3, 4)
    _same_jaxpr_without_checks(fn, (arr(2, 3, 4),))
    # the rank: the ConfigError these entries had (the registry's one message), not doubled
    with pytest.raises(ConfigError, match="rewards shape"):
        spec.fn(bad, **kw)
    # the dtype: integer rewards are converted by the registry, never passed here
    with pytest.raises(AssertionError, match=r"\[Chex\].*float"):
        jax.jit(fn)(arr(2, 3, 4, dtype=jnp.int32))


def test_bool_and_int_rewards_stay_legitimate():
    """gpolab's estimators and the registry convert them; only a direct framework call needs
    float rewards."""
    floats = jnp.asarray([[1.0, 0.0, 0.0, 1.0]])
    for rewards in (floats > 0, floats.astype(jnp.int32)):
        chex.assert_trees_all_equal(core.loo_advantages(rewards), core.loo_advantages(floats))
        chex.assert_trees_all_equal(REGISTRY["verl/grpo"](rewards), REGISTRY["verl/grpo"](floats))


def test_existing_config_errors_stay_the_one_error():
    """G = 1 for leave-one-out rules and bad option names keep their ConfigError (no chex)."""
    with pytest.raises(ConfigError, match="^G: got 1"):
        core.loo_advantages(arr(3, 1))
    with pytest.raises(ConfigError, match="^scale: "):
        core.grpo_advantages(arr(3, 4), scale="prompt")
    with pytest.raises(ConfigError, match="^variant: "):
        core.tree_advantages(arr(3, 4, 2), variant="leaf")
    with pytest.raises(ConfigError, match="^mode: "):
        aggregation.loss_weights("sum", arr(3, 4))


def test_scalar_knobs_and_shapes_of_the_other_inputs():
    with pytest.raises(AssertionError, match=r"\[Chex\]"):
        core.grpo_advantages(arr(3, 4), eps=arr(3, 1))  # a per-group eps is not a knob
    with pytest.raises(AssertionError, match=r"\[Chex\]"):
        aggregation.loss_weights("seq-mean-token-sum-norm", arr(3, 4), norm_length=arr(3))
    with pytest.raises(AssertionError, match=r"\[Chex\]"):
        aggregation.loss_weights("token-mean", arr(3, 4, dtype=jnp.int32))
    with pytest.raises(AssertionError, match=r"\[Chex\]"):
        offpolicy.objective("token", "ppo", *_T[:3], arr(2, 3, 4, 6), *_T[4:])  # mask's T
    with pytest.raises(AssertionError, match=r"\[Chex\]"):
        core.oracle_advantages(arr(3, 4), arr(2))  # baseline not broadcastable to (3,)
    # a broadcastable baseline of the same rank and bool/int rewards stay legitimate
    chex.assert_shape(core.oracle_advantages(arr(3, 4, dtype=bool), arr(1)), (3, 4))
