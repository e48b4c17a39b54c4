"""Every env owns its settings: a frozen ``Instance`` (defaults, ``validate`` naming the field),
``make(instance)`` drawing the same instance as the older keyword form, and ``exact(params)``
with one argument."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from gpolab import configs, validate
from gpolab.envs import arithmetic, bandit, gaussian, loglinear, markov, tree

MODULES = (bandit, tree, arithmetic, loglinear, gaussian, markov)
BAD = {  # one bad value per env: the field the error must name
    bandit: ("actions", 1),
    tree: ("K", (1,)),
    arithmetic: ("strength", (0.5, 0.4, 0.6)),
    loglinear: ("rho", 2.0),
    gaussian: ("h_min", 0.0),
    markov: ("length", 0),
}


def same(a, b) -> bool:
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(la) == len(lb) and all(
        np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(la, lb, strict=True)
    )


@pytest.mark.parametrize("env", MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_instance_defaults_validate_and_a_bad_value_names_its_field(env):
    inst = env.Instance()
    inst.validate()
    assert dataclasses.is_dataclass(inst) and inst == env.Instance()
    with pytest.raises(dataclasses.FrozenInstanceError):
        inst.instance_seed = 1
    field, value = BAD[env]
    with pytest.raises(validate.ConfigError, match=f"^{field}: "):
        env.Instance(**{field: value}).validate()
    for f in dataclasses.fields(inst):  # every field is an option with help (flags, files)
        assert f.metadata["help"]


def test_make_of_an_instance_is_the_older_keyword_form():
    b = bandit.Instance(
        prompts=3, actions=5, kind="loglinear", dim=4, lengths="independent", instance_seed=7
    )
    kw = {f: getattr(b, f) for f in ("prompts", "actions", "kind", "dim", "lengths")}
    assert same(bandit.make(b), bandit.make(7, **kw))
    assert same(
        tree.make(tree.Instance(model="finite", thoughts=6, instance_seed=2)),
        tree.make_finite(2, 6),
    )
    assert same(tree.make(tree.Instance(beta_a=3.0)), tree.make_beta(3.0, 3.0))
    assert same(
        loglinear.make(loglinear.Instance(prompts=4, instance_seed=3)), loglinear.make(3, prompts=4)
    )
    assert same(
        gaussian.make(gaussian.Instance(prompts=5, rank=2, instance_seed=1)),
        gaussian.make(1, prompts=5, rank=2),
    )
    for env in (bandit, loglinear, gaussian):  # an Instance and settings: one error, not ignored
        with pytest.raises(TypeError, match="got an Instance and the settings prompts"):
            env.make(env.Instance(), prompts=4)


def test_exact_takes_the_params_alone():
    assert float(bandit.exact(bandit.make(bandit.Instance(prompts=2, actions=3))).c1) >= 0
    assert float(tree.exact(tree.make(tree.Instance())).mean) == pytest.approx(0.4)
    inst = arithmetic.Instance(policy=("base",), questions=12, hidden=8, filler=2, truth_samples=8)
    a = arithmetic.make(inst)["base"]
    assert same(
        arithmetic.exact(a),
        arithmetic.exact(a.truth_key, a.policy, a.questions, samples=a.truth_samples),
    )


def test_instance_replace_coerces_like_a_flag():
    inst = bandit.Instance().replace(prompts="8", dynamic_sampling="true")
    assert inst.prompts == 8 and inst.dynamic_sampling is True
    with pytest.raises(validate.ConfigError, match="prompts: got 'x'"):
        configs.replace(bandit.Instance(), prompts="x")
