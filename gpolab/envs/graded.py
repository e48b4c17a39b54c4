"""Graded rewards on the tabular bandit: a response earns one of K values v_1..v_K (partial
credit, a rubric score, a unit-test pass fraction) with probabilities P(v_k | x, a).

Each (prompt, action) of the tabular softmax bandit (:mod:`gpolab.envs.bandit`: θ (P, A),
W(x, a) = e_a − π_x, uniform prompts) carries a distribution P(· | x, a) on the shared ``grid``,
drawn Dirichlet(``concentration``·1_K) (small concentration: most actions put their mass on one
or two values; large: every action is near the uniform mixture).  The objective is

    J(θ) = Σ_x f_x Σ_a π_θ(a|x) μ(x, a),     μ(x, a) = Σ_k v_k P(v_k | x, a),

so the exact gradient is the bandit's with success p replaced by μ: :func:`make` keeps a
:class:`~gpolab.envs.bandit.BanditParams` whose ``success`` holds μ, and :func:`exact` is the
bandit's enumeration with the reward's second moment E[Z² | x, a] = Σ_k v_k² P(v_k | x, a)
(``sigma2``, ``e_wz2``, ``tr_sigma_oracle``: theory §3's closed forms hold for any reward law).
The exact finite-G theory of every reward-only estimator is
:func:`gpolab.theory.graded_exact.instance_theory` (theory §8, gpolab's derivation).

A response is one draw of the joint outcome (a, k) with probability π(a|x)·P(v_k|x, a), by the
alias method as the bandit's (:func:`sample`): with the grid (0, 1) it is the bandit's draw.
Drawn in float32 and cast, so float64 mode (``x64``) holds the same instance.  No
:class:`gpolab.envs.Env` (the sweep and the zoo run it through their own unit).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from gpolab import configs, validate
from gpolab.configs import option
from gpolab.envs import bandit
from gpolab.envs.sampling import alias_draw, alias_tables

NAME = "graded"
GRADED_TAG = 0x6AD  # fold_in tag of the reward-law draw (the bandit's own draws unchanged)
MAX_VALUES = 16  # grid values at most (the exact theory enumerates compositions over them)


@struct.dataclass
class GradedParams:
    bandit: bandit.BanditParams  # tabular θ (P, A), f (P,), success = μ(x, a) the mean reward
    probs: jax.Array  # (P, A, K) P(v_k | x, a)
    grid: jax.Array  # (K,) the reward values v_k


@dataclasses.dataclass(frozen=True)
class Instance(configs.Config):
    """The graded bandit's settings: a tabular bandit (:class:`gpolab.envs.bandit.Instance`'s
    fields of the same names), the reward grid and the Dirichlet concentration of each
    action's reward law, and how the sweep samples it (one group per prompt, or ``B`` iid
    prompts)."""

    prompts: int = option(16, "number of prompts P")
    actions: int = option(16, "actions (responses) per prompt A")
    logit_scale: float = option(1.0, "std of the initial logits")
    grid: tuple[float, ...] = option(
        (0.0, 0.5, 1.0), "comma list of the distinct reward values (partial credit)"
    )
    concentration: float = option(
        0.5, "each action's reward law ~ Dirichlet(concentration, ..., concentration)"
    )
    instance_seed: int = option(0, "seed of the random bandit and reward laws")
    B: int = option(
        0, "0 = one group for every prompt (mean per-prompt MSE); b > 0 = b iid prompts"
    )

    # what the sweep's grouped rows read of an instance: responses are one token
    lengths = "one"
    dynamic_sampling = False

    def validate(self) -> None:
        bandit.Instance(**self._bandit_settings()).validate()
        check_grid(self.grid)
        validate.real("concentration", self.concentration, low=0.0, open_low=True)
        validate.integer("B", self.B, 0)

    def _bandit_settings(self) -> dict:
        names = ("prompts", "actions", "logit_scale", "instance_seed")
        return {"kind": "tabular", **{n: getattr(self, n) for n in names}}

    def longest_response(self) -> int:
        return 1


def check_grid(grid) -> tuple[float, ...]:
    """The grid as floats: 2 to :data:`MAX_VALUES` distinct finite values (one error line)."""
    values = tuple(grid) if isinstance(grid, tuple | list) else (grid,)
    for v in values:
        validate.real("grid", v)
    if not 2 <= len(values) <= MAX_VALUES:
        raise validate.ConfigError(
            f"grid: got {len(values)} value(s); allowed: 2 to {MAX_VALUES} distinct values"
        )
    if len(set(values)) != len(values):
        raise validate.ConfigError(f"grid: got repeated values {list(values)}; allowed: distinct")
    return tuple(float(v) for v in values)


def make(inst: Instance | None = None, **settings) -> GradedParams:
    """The graded bandit of ``inst`` (validated first: one error line before any draw): θ and f
    are :func:`gpolab.envs.bandit.make`'s of the same settings (the same logits), the reward
    laws a Dirichlet draw of their own fold of the seed."""
    if inst is not None and settings:
        raise TypeError("make: pass an Instance or settings, not both")
    inst = Instance(**settings) if inst is None else inst
    inst.validate()
    base = bandit.make(bandit.Instance(**inst._bandit_settings()))
    key = jax.random.fold_in(jax.random.key(inst.instance_seed), GRADED_TAG)
    K, f32 = len(inst.grid), jnp.float32
    alpha = jnp.full((K,), inst.concentration, f32)
    shape = (inst.prompts, inst.actions)
    probs = jax.random.dirichlet(key, alpha, shape, f32)
    real = base.success.dtype
    probs = probs.astype(real)
    probs = probs / jnp.sum(probs, axis=-1, keepdims=True)  # rows sum to 1 in the precision
    grid = jnp.asarray(check_grid(inst.grid), real)
    return GradedParams(base.replace(success=probs @ grid), probs, grid)


def second_moment(params: GradedParams) -> jax.Array:
    """(P, A) E[Z² | x, a] = Σ_k v_k² P(v_k | x, a)."""
    return params.probs @ params.grid**2


def exact(params: GradedParams) -> bandit.BanditTruth:
    """The bandit's exact truth (theory §3) for the mean reward μ and second moment E[Z²|x, a]."""
    return bandit.exact(params.bandit, second_moment(params))


def outcome_probs(params: GradedParams) -> jax.Array:
    """(P, A·K) probabilities of the joint outcomes (a, k), column a·K + k: π(a|x)·P(v_k|x, a)."""
    pi = bandit.policy(params.bandit)
    return (pi[..., None] * params.probs).reshape(pi.shape[0], -1)


def outcome_tables(params: GradedParams) -> bandit.OutcomeTables:
    """Alias tables of the joint outcomes at the instance's θ (host, float64), as the bandit's."""
    keep, alias = alias_tables(np.asarray(outcome_probs(params), np.float64))
    return bandit.OutcomeTables(jnp.asarray(keep, params.probs.dtype), jnp.asarray(alias))


def sample(key, params: GradedParams, prompts: jax.Array, G: int, tables: bandit.OutcomeTables):
    """G responses per prompt of ``prompts`` (B,): actions (B, G) int32 and rewards (B, G) on the
    grid, one uniform per response (the alias draw of :func:`outcome_tables`)."""
    u = jax.random.uniform(key, (prompts.shape[0], G), dtype=params.probs.dtype)
    idx = alias_draw(tables.keep[prompts], tables.alias[prompts], u)
    K = params.grid.shape[0]
    return idx // K, params.grid[idx % K]


def greedy_rewards(key: jax.Array, params: GradedParams, prompts: jax.Array) -> jax.Array:
    """(B,) rewards of each prompt's greedy action, drawn from its reward law (ReMax's
    baseline)."""
    best = jnp.argmax(bandit.logits(params.bandit), axis=-1)[prompts]
    law = params.probs[prompts, best]  # (B, K)
    k = jax.random.categorical(key, jnp.log(law), axis=-1)
    return params.grid[k]


def describe(inst: Instance) -> str:
    """The grid as a row's ``kind`` column, e.g. ``grid 0,0.5,1``."""
    return "grid " + ",".join(f"{v:g}" for v in check_grid(inst.grid))
