"""``gpolab groupsize``'s Monte Carlo (:mod:`gpolab.labs.groupsize.lab`): one mini-batch's loo
gradient over N slots grouped by G, the fixed-θ error of a cell, and SGD runs with their gaps
(training cells, instances and setups)."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gpolab import engine, envs
from gpolab.engine import train
from gpolab.envs import Env, arithmetic, bandit
from gpolab.labs.groupsize import pool as pools
from gpolab.labs.groupsize.config import Config, bandit_instance
from gpolab.theory import groupsize as theory

# ---------------------------------------------------------------- one mini-batch gradient


def loo_advantages_slots(rewards: jax.Array, G) -> jax.Array:
    """Leave-one-out advantages of N slots grouped as ``i // G`` (G may be traced):

        A_i = Z_i − (Σ_{k in group(i), k ≠ i} Z_k) / (G − 1)      [2603.01162, eq. 4]

    the same numbers as :func:`gpolab.estimators.loo_advantages` on ``rewards.reshape(-1, G)``.
    """
    n = rewards.shape[0]
    group = jnp.arange(n) // G
    sums = jax.ops.segment_sum(rewards, group, num_segments=n)[group]
    return rewards - (sums - rewards) / (G - 1)


def minibatch_gradient(
    env: Env,
    key: jax.Array,
    params,
    theta: jax.Array,
    N: int,
    G,
    pool: pools.PoolDraw | None = None,
):
    """ĝ = (1/B) Σ_b (1/G) Σ_g A_bg W_bg with B = N/G iid prompts (or, with ``pool``, B distinct
    prompts of the pool, :func:`~gpolab.labs.groupsize.pool.epoch_draws`) and loo advantages.

    N is static (it sets the shapes); G is a traced integer dividing N.  Returns (ĝ (D,),
    rewards (N,)).
    """
    k_prompts, k_responses = jax.random.split(key)
    if pool is None:
        draws = env.sample_prompts(k_prompts, params, N)
    else:
        draws = pools.epoch_draws(pool, N, G)
    prompts = draws[jnp.arange(N) // G]  # slot i answers the (i // G)-th draw; B = N/G used
    responses, rewards = env.sample(k_responses, params, theta, prompts, 1)
    adv = loo_advantages_slots(rewards[:, 0], G)
    return env.gradient(params, theta, prompts, responses, (adv / N)[:, None]), rewards[:, 0]


# ---------------------------------------------------------------- fixed-θ Monte Carlo


@dataclasses.dataclass(frozen=True)
class FixedCell:
    env: Env
    N: int


def fixed_error(cell: FixedCell, key: jax.Array, args) -> dict:
    """Per-seed error of the mini-batch loo gradient.  ``args = (params, theta, g, G)``, or with
    a pool ``(params, theta, g, G, (pool, ḡ_pool))``: then also the error against ḡ_pool."""
    params, theta, g, G, *pool = args
    draw = pools.pool_draw(pool[0][0], key, 0) if pool else None
    ghat, _ = minibatch_gradient(cell.env, key, params, theta, cell.N, G, draw)
    err = ghat - g
    out = {"err": err, "sq": jnp.sum(err**2)}
    if pool:
        out.update(err_pool=ghat - pool[0][1], sq_pool=jnp.sum((ghat - pool[0][1]) ** 2))
    return out


def fixed_row(cfg: Config, setup: Callable, key: jax.Array, N: int, G: int) -> dict:
    """One (N, G) cell: Monte Carlo MSE with a 95% CI next to the exact value."""
    ctx = setup("bandit")
    args = (ctx.params, ctx.theta0, ctx.truth.g, jnp.int32(G))
    if cfg.pool:
        ps = setup(("bandit", cfg.pool))
        args = (*args, (ps.pool, ps.g))
    m = engine.run(fixed_error, FixedCell(ctx.env, N), args, key, cfg.n_seeds, cfg.chunk)
    s = engine.error_stats(m)
    extra = {}
    if cfg.pool:
        pool_stats = engine.error_stats(m, "err_pool", "sq_pool")
        extra = pools.fixed_columns(ps, pool_stats, N, G, cfg.pool)
    return {
        "env": "bandit",
        "N": N,
        "G": G,
        "B": N // G,
        "n_seeds": m.n,
        "mse": s.mse,
        "mse_se": s.mse_se,
        "mse_ci_low": s.mse_ci_low,
        "mse_ci_high": s.mse_ci_high,
        "bias_sq": s.bias_sq,
        "theory_mse": theory.fixed_n_mse(ctx.constants, N, G),
        **dataclasses.asdict(ctx.constants),
        **extra,
    }


# ---------------------------------------------------------------- training


@dataclasses.dataclass(frozen=True)
class TrainCell:
    env: Env
    N: int
    steps: int


def sgd_direction(
    env: Env, params, N: int, G, key: jax.Array, theta: jax.Array, t, *, pool=None, seed_key=None
):
    """:func:`gpolab.engine.train.ascend`'s direction: the mini-batch loo gradient ĝ_t (no aux);
    with
    ``pool`` (prompt ids) step t's batch comes from the pool (permutations of ``seed_key``)."""
    draw = pools.pool_draw(pool, seed_key, t)
    return minibatch_gradient(env, key, params, theta, N, G, draw)[0], None


def decaying_step(eta0, tau, t, aux):
    """η_t = η0 / (1 + t/τ) (τ = ∞: the constant η0)."""
    return eta0 / (1.0 + t / tau)


def train_run(cell: TrainCell, key: jax.Array, args) -> dict:
    """One SGD run: θ ← θ + η_t ĝ_t, η_t = η0 / (1 + t/τ) (τ = ∞: constant), step t drawing with
    ``fold_in(key, t)``.

    ``args = (params, theta0, G, eta0, tau, j_star)``, or with a pool ``(..., (pool, pool
    params, J*_pool))``; returns the final gap J* − J(θ_n), J(θ_n) and with a pool the gap on it.
    """
    params, theta0, G, eta0, tau, j_star, *pool = args
    pool_ids = pool[0][0] if pool else None
    theta, _, _ = train.ascend(
        functools.partial(sgd_direction, cell.env, params, cell.N, G, pool=pool_ids, seed_key=key),
        theta0,
        key,
        jnp.arange(cell.steps),
        lr=functools.partial(decaying_step, eta0, tau),
    )
    value = cell.env.value(params, theta)
    out = {"gap": j_star - value, "value": value}
    if pool:
        out["gap_pool"] = pool[0][2] - cell.env.value(pool[0][1], theta)
    return out


def make_instance(cfg: Config, name: str):
    """The instance (:class:`gpolab.envs.Env` params) of env ``name``: the bandit, or the
    questions and the pre-trained policy of the arithmetic surrogate."""
    if name == "bandit":
        return bandit.make(bandit_instance(cfg))
    questions = arithmetic.make_questions(cfg.instance_seed, cfg.questions)
    policy = arithmetic.pretrain(
        questions,
        seed=cfg.instance_seed,
        hidden=cfg.hidden,
        targets={cfg.policy: arithmetic.POLICIES[cfg.policy]},
    )[cfg.policy]
    truth_key = jax.random.fold_in(jax.random.key(cfg.instance_seed), 1)
    return arithmetic.ArithmeticInstance(policy, questions, truth_key, cfg.truth_samples)


class Setup(NamedTuple):
    """One env of a run, built once: the env, its instance, θ0, J*, J(θ0), the exact truth at θ0
    and the constants c1, C2, C3 of the prediction."""

    env: Env
    params: object
    theta0: jax.Array
    j_star: float
    j0: float
    truth: object
    constants: theory.Constants


def make_setup(cfg: Config, name: str) -> Setup:
    """The :class:`Setup` of env ``name`` (the registered env and :func:`make_instance`)."""
    env = envs.get(name)
    params = make_instance(cfg, name)
    theta0 = env.init(params)
    truth = jax.jit(env.exact)(params, theta0)
    j0 = float(env.value(params, theta0))
    return Setup(env, params, theta0, env.optimum(params), j0, truth, theory.constants(truth))


def schedule_tau(schedule: str, tau: float) -> float:
    return math.inf if schedule == "constant" else tau


def train_setting(cfg: Config, env: str, schedule: str) -> dict:
    """The SGD settings of one (env, schedule): steps, η0 and τ (∞ for the constant step)."""
    return {
        "steps": getattr(cfg, f"{env}_steps"),
        "eta0": getattr(cfg, f"{env}_eta_{schedule}"),
        "tau": schedule_tau(schedule, getattr(cfg, f"{env}_tau")),
    }


def train_row(
    cfg: Config, setup: Callable, key: jax.Array, env: str, N: int, schedule: str, G: int
) -> dict:
    """One (env, N, schedule, G) cell: the final gap J* − J(θ_n) of ``cfg.n_seeds`` SGD runs,
    jit(vmap over seeds)(lax.scan over steps) (mean, 95% CI, quartiles; with a pool, also the
    gap on the pool: :func:`~gpolab.labs.groupsize.pool.train_columns`)."""
    ctx = setup(env)
    sgd = train_setting(cfg, env, schedule)
    ps = setup((env, cfg.pool)) if cfg.pool else None
    f = jnp.result_type(float)
    args = (ctx.params, ctx.theta0, jnp.int32(G))
    args += tuple(jnp.asarray(x, f) for x in (sgd["eta0"], sgd["tau"], ctx.j_star))
    if ps is not None:
        args = (*args, (ps.pool, ps.params, jnp.asarray(ps.j_star, f)))
    cell = TrainCell(ctx.env, N, sgd["steps"])
    out = engine.per_seed(train_run, cell, key, args, np.arange(cfg.n_seeds))
    gaps = np.asarray(out["gap"], dtype=np.float64)
    q25, q50, q75 = np.quantile(gaps, [0.25, 0.5, 0.75])
    pool = pools.train_columns(ps, out["gap_pool"], N, G, cfg.pool, sgd["steps"]) if ps else {}
    return {
        "env": env,
        "N": N,
        "schedule": schedule,
        "G": G,
        "B": N // G,
        **sgd,
        "n_seeds": int(gaps.size),
        **pools.mean_columns("gap", gaps),
        "gap_q25": float(q25),
        "gap_median": float(q50),
        "gap_q75": float(q75),
        "gap0": ctx.j_star - ctx.j0,
        "theory_mse": theory.fixed_n_mse(ctx.constants, N, G),
        **dataclasses.asdict(ctx.constants),
        **pool,
    }
