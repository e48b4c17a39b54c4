"""The env contract and its registry (:mod:`gpolab.envs`): every registered env's functions have
the documented shapes and its sampled gradient is unbiased for the exact g; the old adapters are
gone and envs import neither labs nor the trainer."""

import ast
import functools
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpolab import engine, envs
from gpolab.validate import ConfigError

CASES = ("bandit", "bandit-loglinear", "loglinear", "arithmetic", "markov")


@functools.cache
def instance(case: str):
    """A tiny instance of each env (the arithmetic policy pre-trained to mean V ≈ 0.3, so that
    rewards are not all 0)."""
    if case.startswith("bandit"):
        from gpolab.envs import bandit

        if case == "bandit":
            return bandit.make(1, prompts=3, actions=4)
        return bandit.make(1, prompts=3, actions=5, kind="loglinear", dim=3)
    if case == "markov":
        from gpolab.envs import markov

        return markov.make(markov.Instance(prompts=3, vocab=3, length=6, instance_seed=1))
    if case == "loglinear":
        from gpolab.envs import loglinear

        return loglinear.make(1, prompts=3, responses=256, block=2, rho=0.5)
    from gpolab.envs import arithmetic

    questions = arithmetic.make_questions(0, 4)
    policy = arithmetic.pretrain(questions, seed=0, hidden=8, targets={"t": 0.3})["t"]
    return arithmetic.ArithmeticInstance(policy, questions, jax.random.key(1), 4)


def _listed() -> dict:
    """{name: module} of every module of gpolab/envs, read without the registry."""
    import importlib
    import pkgutil

    return {
        m.name: importlib.import_module(f"gpolab.envs.{m.name}")
        for m in pkgutil.iter_modules(envs.__path__)
    }


def test_registry_names_every_env_and_get_checks_the_name():
    """Every env with an ``ENV`` has a contract case here (its shapes and unbiasedness are
    tested below), and ``get`` names the envs that have one."""
    with_env = tuple(name for name, m in sorted(_listed().items()) if hasattr(m, "ENV"))
    assert envs.names("init") == with_env
    assert set(with_env) == {case.split("-")[0] for case in CASES}
    for name in envs.names("init"):
        env = envs.get(name)
        assert isinstance(env, envs.Env) and env.name == name
        hash(env)  # a jit static argument
    allowed = ", ".join(with_env)
    with pytest.raises(ConfigError, match=f"env: .*allowed: {allowed}$"):
        envs.get("atari")
    without = next(name for name in envs.names() if name not in with_env)
    with pytest.raises(ConfigError, match=f"env: got '{without}'; allowed: {allowed}$"):
        envs.get(without)  # an env without an Env contract


def test_one_registry_found_by_listing_the_package():
    """Every module of gpolab/envs with an ``Instance`` is an env, and only those (the helpers
    questions.py, sampling.py and arithmetic_model.py are not); capabilities select envs (no lab
    lists them)."""
    listed = _listed()
    assert envs.names() == tuple(n for n, m in sorted(listed.items()) if hasattr(m, "Instance"))
    assert set(listed) - set(envs.names()) == {"questions", "sampling", "arithmetic_model"}
    for needs in (("token_logp",), ("kl",), ("curvature",), ("mse_law",), ("token_logp", "kl")):
        contracts = {n: getattr(listed[n], "ENV", None) for n in envs.names()}
        has = tuple(n for n, env in contracts.items() if all(getattr(env, c, 0) for c in needs))
        assert envs.names(*needs) == has and has, needs  # each selects some env, not all
        assert set(has) < set(envs.names())
    assert envs.names("behaviour") == ("markov",)  # a rollout engine's μ: the mismatch mode


def test_first_leads_and_the_rest_stay_sorted():
    every = envs.names()
    assert every == tuple(sorted(every))
    for first in every:
        assert envs.names(first=first) == (first, *(n for n in every if n != first))
    token = envs.names("token_logp")
    assert envs.names("token_logp", first="bandit") == (
        "bandit",
        *(n for n in token if n != "bandit"),
    )
    # negative control: a first the capability excludes leaves the sorted order
    assert "tree" not in token and envs.names("token_logp", first="tree") == token


def test_each_lab_takes_its_envs_from_its_needs():
    """A lab's env list is what the registry admits under its ``NEEDS`` (the throw-away env
    test across every lab: tests/envs/test_every_lab.py)."""
    from gpolab.labs.allocate import lab as allocate
    from gpolab.labs.groupsize import lab as groupsize
    from gpolab.labs.plancheck import lab as plancheck
    from gpolab.labs.stdnorm import lab as stdnorm
    from gpolab.labs.sweep import lab as sweep
    from gpolab.labs.zoo import lab as zoo

    for lab in (zoo, plancheck, groupsize, stdnorm, sweep):
        assert lab.ENVS == envs.names(lab.NEEDS), lab.NAME
    assert set(zoo.ENVS) <= set(sweep.ENVS)  # the zoo runs the sweep
    for name in groupsize.ENVS:  # stdnorm sends B·G = N training on them to groupsize
        with pytest.raises(ConfigError, match=f"use gpolab groupsize --train --env {name}"):
            stdnorm.Config(env=name).validate()
    for lab in (sweep, allocate):
        assert tuple(lab.INSTANCES) == envs.names(lab.NEEDS), lab.NAME
        assert all(lab.INSTANCES[n] is envs.make(n)[1].__class__ for n in lab.INSTANCES)


def test_needs_admit_envs_by_capability_and_instance_field():
    """``names(Needs(...))``: capabilities and ``Instance`` fields both select; ``only`` keeps
    the lab's named envs in its order and fails on one that lacks what the lab needs."""
    N = envs.Needs
    by_field = envs.names(N(fields=("B", "dynamic_sampling")))
    assert by_field and all(envs.missing(n, N(fields=("B",))) == () for n in by_field)
    assert envs.names(N(("token_logp",), fields=("vocab",))) == tuple(
        n for n in envs.names("token_logp") if n in envs.names(N(fields=("vocab",)))
    )
    assert envs.names(N(("kl",), only=("markov", "bandit"))) == ("markov", "bandit")
    assert envs.missing("tree", N(("init",), ("K", "nope"))) == ("init", "Instance.nope")
    with pytest.raises(TypeError, match="env tree lacks init, Instance.nope"):
        envs.names(N(("init",), ("K", "nope"), only=("tree",)))
    with pytest.raises(ConfigError, match="env: got 'atari'"):
        envs.names(N(only=("atari",)))


def test_make_gives_the_env_and_its_default_instance_as_gymnax():
    from gpolab.envs import bandit, tree

    env, inst = envs.make("bandit")
    assert env is bandit.ENV and inst == bandit.Instance()
    env, inst = envs.make("bandit", B=4, prompts=8)
    assert inst == bandit.Instance(B=4, prompts=8)
    env, inst = envs.make("tree", K=3)
    assert env is None and inst == tree.Instance(K=3)  # no Env: nothing to train
    with pytest.raises(ConfigError, match=f"env: got 'bandt'; allowed: {', '.join(envs.names())}$"):
        envs.make("bandt")
    with pytest.raises(ConfigError, match="bandit setting: got 'Bx'; allowed: kind, "):
        envs.make("bandit", Bx=1)
    assert envs.instances("tree", "bandit") == {"tree": tree.Instance, "bandit": bandit.Instance}
    with pytest.raises(ConfigError, match="env: got 'atari'"):
        envs.instances("atari")


def test_a_new_env_module_is_found_without_a_list(tmp_path, monkeypatch):
    """A throw-away env module on the package's path is an env: names, make and get find it
    (negative control: a module without ``Instance`` is not one)."""
    (tmp_path / "toy.py").write_text(
        "import dataclasses\n"
        "from gpolab import envs\n"
        "@dataclasses.dataclass(frozen=True)\n"
        "class Instance:\n"
        "    arms: int = 2\n"
        "ENV = envs.Env('toy', *(print,) * 7)\n"
    )
    (tmp_path / "toyhelper.py").write_text("X = 1\n")
    monkeypatch.setattr(envs, "__path__", [*envs.__path__, str(tmp_path)])
    envs._modules.cache_clear()
    try:
        assert "toy" in envs.names() and "toy" in envs.names("init")
        assert "toyhelper" not in envs.names()
        env, inst = envs.make("toy", arms=5)
        assert env.name == "toy" and inst.arms == 5 and envs.get("toy") is env
        assert "toy" not in envs.names("token_logp")
    finally:
        monkeypatch.undo()
        envs._modules.cache_clear()
        sys.modules.pop("gpolab.envs.toy", None)
        sys.modules.pop("gpolab.envs.toyhelper", None)
    assert "toy" not in envs.names()


def _sampled_gradient(env, params, theta, key, n: int, G: int):
    """The vanilla estimate (1/(nG)) Σ_i Σ_g Z_ig W_ig with n prompts drawn from f."""
    k_prompts, k_responses = jax.random.split(key)
    prompts = env.sample_prompts(k_prompts, params, n)
    responses, rewards = env.sample(k_responses, params, theta, prompts, G)
    return env.gradient(params, theta, prompts, responses, rewards / (n * G))


@pytest.mark.parametrize("case", CASES)
def test_contract_shapes_and_unbiased_sampled_gradient(case):
    """Shapes of every function, V and σ² against each other, J against f·V, sample and gradient
    alike with or without the truth, and the sampled gradient's mean against the exact
    g = Σ_x f_x g_x within 5 Monte Carlo SE per coordinate."""
    env, params = envs.get(case.split("-")[0]), instance(case)
    theta = env.init(params)
    (D,) = theta.shape
    truth = jax.jit(env.exact)(params, theta)
    P = truth.V.shape[0]
    f = np.asarray(truth.prompt_probs, np.float64)
    V = np.asarray(truth.V, np.float64)
    assert truth.sigma2.shape == f.shape == (P,) and truth.g.shape == (D,)
    assert truth.g_local.shape[0] == P
    assert f.sum() == pytest.approx(1.0) and np.all((V >= 0) & (V <= 1))
    np.testing.assert_allclose(truth.sigma2, V * (1 - V), rtol=1e-4, atol=1e-7)
    assert float(env.value(params, theta)) == pytest.approx(f @ V, rel=1e-5)
    assert env.optimum(params) >= f @ V
    n, G, S = 6, 2, 4000
    prompts = env.sample_prompts(jax.random.key(0), params, n)
    assert prompts.shape == (n,) and prompts.dtype == jnp.int32
    assert np.all((np.asarray(prompts) >= 0) & (np.asarray(prompts) < P))
    responses, rewards = env.sample(jax.random.key(1), params, theta, prompts, G)
    assert rewards.shape == (n, G) and responses.shape[:2] == (n, G)
    grad = env.gradient(params, theta, prompts, responses, rewards)
    assert grad.shape == (D,)
    reused = env.sample(jax.random.key(1), params, theta, prompts, G, truth=truth)  # same draws
    for a, b in zip(reused, (responses, rewards), strict=True):
        np.testing.assert_array_equal(a, b)
    got = env.gradient(params, theta, prompts, responses, rewards, truth=truth)
    np.testing.assert_allclose(got, grad, rtol=1e-5, atol=1e-7)
    one = functools.partial(_sampled_gradient, env, params, theta, n=n, G=G)
    with engine.prng_mode():
        keys = engine.seed_keys(jax.random.key(2), jnp.arange(S, dtype=jnp.uint32))
        grads = np.asarray(jax.jit(jax.vmap(one))(keys), np.float64)
    se = grads.std(0, ddof=1) / np.sqrt(S)
    assert np.all(np.abs(grads.mean(0) - np.asarray(truth.g, np.float64)) <= 5 * se + 1e-6)


def test_bandit_env_draws_are_the_bandit_samplers_for_any_group_size():
    from gpolab.envs import bandit

    params = instance("bandit")
    prompts = jnp.array([2, 0, 0, 1], jnp.int32)
    key = jax.random.key(3)
    got = bandit.ENV.sample(key, params, bandit.ENV.init(params), prompts, 5)
    want = bandit.sample(key, params, prompts, 5)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_old_adapters_are_gone():
    from gpolab.engine import train
    from gpolab.labs.groupsize import lab as groupsize

    for name in ("TrainEnv", "loglinear_env"):
        assert not hasattr(train, name)
    for name in ("Task", "TASKS", "BANDIT", "ARITHMETIC", "ArithmeticData"):
        assert not hasattr(groupsize, name)


def test_envs_import_neither_labs_nor_the_trainer():
    root = Path(envs.__file__).parent
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            bad = [m for m in names if m.startswith(("gpolab.labs", "gpolab.runner"))]
            assert not bad, (path.name, bad)
