"""A finite prompt pool in the group-size lab (``pool = P``; the paper's §5.2, Table 2 suspects
"the finite number of prompts" for the best G moving with N).

The pool is P prompts drawn once from f (``fold_in(key(instance_seed), POOL_TAG)``, so a pool may
repeat a prompt of a small bandit).  Each step takes B = N/G of them without replacement, as the
practitioners' data loaders do (shuffle the dataset every epoch, take consecutive batches, drop
the last incomplete one): with E = ⌊P/B⌋ steps per epoch, step t uses block t mod E of the
epoch-(t // E) permutation of the pool, a run's permutations drawn from
``fold_in(fold_in(seed key, PERM_TAG), epoch)``.  A fixed-θ cell is step 0 of a run.

Two targets: the population (``gap``, ``mse``: J and g over f, as with no pool) and the pool
(``gap_pool``, ``mse_pool``: J and g over the pool's empirical distribution).  Exact theory at a
fixed θ: :func:`gpolab.theory.groupsize.pool_mse` with the pool's constants (gpolab's
derivation); the population target adds ‖ḡ_pool − g‖² (``pool_bias_sq``) for every G.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gpolab import configs
from gpolab.engine import Z95
from gpolab.envs import Env
from gpolab.kernels import splits
from gpolab.kit.store import digest
from gpolab.theory import groupsize as theory

POOL_TAG = 0x9001  # fold_in tag of the pool draw (from the instance key)
PERM_TAG = 0x7F000001  # fold_in tag of a run's epoch permutations (from the seed key)
POOL_CONSTANTS = ("pool_c1", "pool_C2", "pool_C3", "pool_C2_se", "pool_C3_se")


class PoolDraw(NamedTuple):
    """What a step needs to draw its batch from the pool: the pool's prompt ids (P,), the run's
    permutation key and the step index t (traced)."""

    pool: jax.Array
    key: jax.Array
    t: jax.Array


def draw_pool(env: Env, params, P: int, instance_seed: int) -> jax.Array:
    """The pool: P iid prompt ids from f, drawn once per instance."""
    key = jax.random.fold_in(jax.random.key(instance_seed), POOL_TAG)
    return env.sample_prompts(key, params, P)


def pool_draw(pool, seed_key: jax.Array, t) -> PoolDraw | None:
    """The :class:`PoolDraw` of step t of the run of ``seed_key`` (None without a pool)."""
    if pool is None:
        return None
    return PoolDraw(pool, jax.random.fold_in(seed_key, PERM_TAG), jnp.asarray(t, jnp.int32))


def epoch_draws(draw: PoolDraw, N: int, G) -> jax.Array:
    """(N,) prompt ids whose first B = N/G are step t's batch: B consecutive items of the
    current epoch's permutation (distinct pool items); the rest (never used) repeat the last."""
    P = draw.pool.shape[0]
    B = N // G
    per_epoch = P // B
    epoch, block = draw.t // per_epoch, draw.t % per_epoch
    perm = jax.random.permutation(jax.random.fold_in(draw.key, epoch), P)
    return draw.pool[perm[jnp.minimum(block * B + jnp.arange(N), P - 1)]]


def restrict(env: Env, params, pool: jax.Array):
    """The instance over the pool's empirical distribution (J, J*, exact truth): the bandit
    reweights its prompts, the arithmetic surrogate keeps the pool's questions (with repeats)."""
    if env.name == "bandit":
        weights = jnp.zeros_like(params.prompt_probs).at[pool].add(1.0 / pool.shape[0])
        return params.replace(prompt_probs=weights)
    return params.replace(questions=jax.tree.map(lambda a: a[pool], params.questions))


class PoolSetup(NamedTuple):
    """The pool of one env, built once: its prompt ids, the restricted instance, its J*, J(θ0),
    constants at θ0, gradient ḡ_pool and ‖ḡ_pool − g‖²."""

    pool: jax.Array
    params: object
    j_star: float
    j0: float
    constants: theory.Constants
    g: jax.Array
    bias_sq: float


def make_pool_setup(env: Env, params, theta0, g, P: int, instance_seed: int) -> PoolSetup:
    pool = draw_pool(env, params, P, instance_seed)
    sub = restrict(env, params, pool)
    truth = jax.jit(env.exact)(sub, theta0)
    bias = np.asarray(truth.g, np.float64) - np.asarray(g, np.float64)
    return PoolSetup(
        pool,
        sub,
        env.optimum(sub),
        float(env.value(sub, theta0)),
        theory.constants(truth),
        truth.g,
        float(bias @ bias),
    )


def row_ids(N: int, P: int) -> tuple[int, ...]:
    """The group sizes of budget N: every divisor G ≥ 2, or with a pool those with N/G ≤ P."""
    return theory.pool_divisors(N, P) if P else theory.divisors(N)


def config_hash(cfg) -> str:
    """:func:`gpolab.kit.store.config_hash` without ``pool`` when it is 0 and without
    ``budget`` when it is off (so configs without them keep their provenance hash)."""
    exclude = (() if cfg.pool else ("pool",)) + (() if cfg.budget else ("budget",))
    return digest(configs.key_settings(cfg, exclude=exclude))


def mean_columns(name: str, x: np.ndarray) -> dict:
    """``name`` = the mean of the samples ``x``, ``name_se`` its SE and ``name_ci_low``,
    ``name_ci_high`` its 95% normal interval."""
    m, se = splits.mean_se(x)
    return {
        name: m,
        f"{name}_se": se,
        f"{name}_ci_low": m - Z95 * se,
        f"{name}_ci_high": m + Z95 * se,
    }


def constants_columns(ps: PoolSetup) -> dict:
    c = dataclasses.asdict(ps.constants)
    return {"pool_bias_sq": ps.bias_sq, **{f"pool_{k}": v for k, v in c.items()}}


def fixed_columns(ps: PoolSetup, stats, N: int, G: int, P: int) -> dict:
    """The extra columns of a fixed-θ row with a pool: the Monte Carlo MSE against ḡ_pool
    (``stats``) next to its exact value, and the population target's exact value."""
    exact = theory.pool_mse(ps.constants, N, G, P)
    return {
        "pool": P,
        "mse_pool": stats.mse,
        "mse_pool_se": stats.mse_se,
        "mse_pool_ci_low": stats.mse_ci_low,
        "mse_pool_ci_high": stats.mse_ci_high,
        "theory_mse_pool": exact,
        "theory_mse": exact + ps.bias_sq,
        **constants_columns(ps),
    }


def train_columns(ps: PoolSetup, gaps_pool, N: int, G: int, P: int, steps: int) -> dict:
    """The extra columns of a training row with a pool: the final gap on the pool (``gaps_pool``,
    one per run)."""
    return {
        "pool": P,
        "epochs": steps * (N // G) / P,
        **mean_columns("gap_pool", np.asarray(gaps_pool, np.float64)),
        "gap0_pool": ps.j_star - ps.j0,
        "theory_mse_pool": theory.pool_mse(ps.constants, N, G, P),
        **constants_columns(ps),
    }
