"""The group-size lab's budget check (``train = true``, ``budget = true``): per-step optimum
against the training optimum (issue 42).

SGD on the env with N rollouts per step, loo advantages and a constant step, at every feasible
divisor G of N, for every pool size P of ``pools`` (0: prompts drawn afresh from f every step;
P ≥ 1: a pool of P prompts, :mod:`gpolab.labs.groupsize.pool`).  Every run of an env gets the
same total of rollouts (``{env}_total``, steps = total/N), so budgets N are compared at equal
compute.  Success is
measured on the *target* distribution: the prompt law f (P = 0) or the pool's own prompts (the
training set, P ≥ 1), exactly from the policy's V per prompt after every step:

* rollouts to target: N·t at the first step t with J_t ≥ J(θ0) + ``target``·(J* − J(θ0)) (a
  target success rate that closes that share of the target distribution's gap); a run that never
  reaches it is censored at ``total`` (the restricted mean over seeds, a lower bound of the mean,
  with the share of runs that reached it beside it);
* final pass@1 = E_x V(x) and pass@k = E_x[1 − (1 − V(x))^k];
* J part-way: ``value_c{d}`` is J at compute total/d (d in
  :data:`CHECKPOINTS`), i.e. after total/(d·N) steps.

Beside them every row carries the per-step predictions at θ0: the exact MSE-optimal divisor
(:func:`gpolab.theory.groupsize.best_divisor`), the finite-pool one
(:func:`~gpolab.theory.groupsize.pool_best_divisor`) and the rule a user applies
(:func:`~gpolab.theory.groupsize.training_rule`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from gpolab import engine
from gpolab.engine import train
from gpolab.envs import Env
from gpolab.labs.groupsize import pool as pools
from gpolab.labs.groupsize.config import CHECKPOINTS
from gpolab.labs.groupsize.runs import sgd_direction
from gpolab.theory import groupsize as theory


@dataclasses.dataclass(frozen=True)
class BudgetCell:
    env: Env
    N: int
    steps: int


def budget_run(cell: BudgetCell, key: jax.Array, args) -> dict:
    """One SGD run of ``cell.steps`` steps at a constant step η: ``args = (params, θ0, G, η,
    pool ids or None, target params, k)``.  Returns the target's J before every step and after
    the last (``curve``, (steps + 1,)) and the final pass@k."""
    params, theta0, G, eta, pool_ids, target, k = args

    def direction(k_t, theta, t):
        d, _ = sgd_direction(
            cell.env, params, cell.N, G, k_t, theta, t, pool=pool_ids, seed_key=key
        )
        return d, cell.env.value(target, theta)

    theta, _, js = train.ascend(
        direction, theta0, key, jnp.arange(cell.steps), lr=eta, record=lambda j: j
    )
    f, V = cell.env.values(target, theta)
    return {"curve": jnp.append(js, f @ V), "passk": f @ (1.0 - (1.0 - V) ** k)}


def hitting(curve: np.ndarray, target: float, N: int, total: int) -> tuple[np.ndarray, np.ndarray]:
    """Per run: rollouts N·t at the first step t with J_t ≥ target, censored at ``total``, and
    whether it was reached."""
    above = curve >= target
    reached = above.any(axis=1)
    first = np.where(reached, above.argmax(axis=1), curve.shape[1] - 1)
    return np.where(reached, first * N, total).astype(np.float64), reached


def budget_row(cfg, setup, key: jax.Array, env: str, pool: int, N: int, G: int) -> dict:
    """One (env, P, N, G) cell: rollouts to target, final pass@1 and pass@k, J at the compute
    checkpoints (means, SEs and 95% CIs over seeds) and the per-step predictions at θ0."""
    ctx = setup(env)
    ps = setup((env, pool)) if pool else None
    target = ps.params if ps else ctx.params
    total = getattr(cfg, f"{env}_total")
    steps = total // N
    f = jnp.result_type(float)
    args = (
        ctx.params,
        ctx.theta0,
        jnp.int32(G),
        jnp.asarray(getattr(cfg, f"{env}_eta_constant"), f),
        ps.pool if ps else None,
        target,
        jnp.asarray(cfg.pass_k, f),
    )
    out = engine.per_seed(
        budget_run, BudgetCell(ctx.env, N, steps), key, args, np.arange(cfg.n_seeds)
    )
    curve = np.asarray(out["curve"], np.float64)
    j0, j_star = float(curve[0, 0]), ps.j_star if ps else ctx.j_star
    level = j0 + cfg.target * (j_star - j0)
    rollouts, reached = hitting(curve, level, N, total)
    row = {"env": env, "pool": pool, "N": N, "G": G, "B": N // G, "steps": steps}
    row.update(n_seeds=int(curve.shape[0]), total=total, target=cfg.target, k=cfg.pass_k)
    stats = {
        "rollouts": rollouts,
        "reached": reached.astype(np.float64),
        "pass1": curve[:, -1],
        "passk": np.asarray(out["passk"], np.float64),
        **{f"value_c{d}": curve[:, total // (d * N)] for d in CHECKPOINTS},
    }
    for name, x in stats.items():
        row.update(pools.mean_columns(name, x))
    row.update(j0=j0, j_star=j_star, target_J=level)
    c = ps.constants if ps else ctx.constants
    row.update(
        theory_mse=theory.pool_mse(c, N, G, pool) if pool else theory.fixed_n_mse(c, N, G),
        **dataclasses.asdict(ctx.constants),
        **(pools.constants_columns(ps) if ps else {}),
    )
    return row
