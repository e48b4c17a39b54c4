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
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from gpolab import engine
from gpolab.engine import train
from gpolab.envs import Env
from gpolab.labs.groupsize import pool as pools
from gpolab.theory import groupsize as theory

CHECKPOINTS = (8, 4, 2, 1)  # J is reported at compute total/d for each d


@dataclasses.dataclass(frozen=True)
class BudgetCell:
    env: Env
    N: int
    steps: int
    direction: Callable  # the lab's SGD direction (:func:`gpolab.labs.groupsize.lab.sgd_direction`)


def budget_run(cell: BudgetCell, key: jax.Array, args) -> dict:
    """One SGD run of ``cell.steps`` steps at a constant step η: ``args = (params, θ0, G, η,
    pool ids or None, target params, k)``.  Returns the target's J before every step and after
    the last (``curve``, (steps + 1,)) and the final pass@k."""
    params, theta0, G, eta, pool_ids, target, k = args

    def direction(k_t, theta, t):
        d, _ = cell.direction(
            cell.env, params, cell.N, G, k_t, theta, t, pool=pool_ids, seed_key=key
        )
        return d, cell.env.value(target, theta)

    theta, _, js = train.ascend(
        direction, theta0, key, jnp.arange(cell.steps), lr=eta, record=lambda j: j
    )
    f, V = cell.env.values(target, theta)
    return {"curve": jnp.append(js, f @ V), "passk": f @ (1.0 - (1.0 - V) ** k)}


def mean_se(x: np.ndarray) -> tuple[float, float]:
    return float(x.mean()), float(x.std(ddof=1) / np.sqrt(x.size))


def hitting(curve: np.ndarray, target: float, N: int, total: int) -> tuple[np.ndarray, np.ndarray]:
    """Per run: rollouts N·t at the first step t with J_t ≥ target, censored at ``total``, and
    whether it was reached."""
    above = curve >= target
    reached = above.any(axis=1)
    first = np.where(reached, above.argmax(axis=1), curve.shape[1] - 1)
    return np.where(reached, first * N, total).astype(np.float64), reached


def budget_row(
    cfg, setup, key: jax.Array, env: str, pool: int, N: int, G: int, *, direction: Callable
) -> dict:
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
        budget_run, BudgetCell(ctx.env, N, steps, direction), key, args, np.arange(cfg.n_seeds)
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
        m, se = mean_se(x)
        row.update({name: m, f"{name}_se": se})
        row.update({f"{name}_ci_low": m - engine.Z95 * se, f"{name}_ci_high": m + engine.Z95 * se})
    row.update(j0=j0, j_star=j_star, target_J=level)
    c = ps.constants if ps else ctx.constants
    row.update(
        theory_mse=theory.pool_mse(c, N, G, pool) if pool else theory.fixed_n_mse(c, N, G),
        **dataclasses.asdict(ctx.constants),
        **(pools.constants_columns(ps) if ps else {}),
    )
    return row


def pool_constants(sub) -> theory.Constants:
    """The constants the rule reads: the pool's (P ≥ 1) or the population's (P = 0)."""
    if int(sub["pool"].iloc[0]):
        return pools.pool_constants_of(sub)
    return theory.Constants(*(float(sub[k].iloc[0]) for k in ("c1", "C2", "C3")))


def best(sub, value: str, maximize: bool) -> tuple[int, list[int]]:
    """(best G, the Gs whose 95% CI overlaps the best one's) of one curve."""
    i = sub[value].idxmax() if maximize else sub[value].idxmin()
    b = sub.loc[i]
    if maximize:
        tied = sub.loc[sub[f"{value}_ci_high"] >= b[f"{value}_ci_low"], "G"]
    else:
        tied = sub.loc[sub[f"{value}_ci_low"] <= b[f"{value}_ci_high"], "G"]
    return int(b["G"]), sorted(int(g) for g in tied)


def _ties(gs: list[int]) -> str:
    return ",".join(map(str, gs))


def budget_summary(df):
    """Per (env, P, N): the best G by rollouts to target (with its ties and share reached), by
    final pass@1 and pass@k, by J at each compute checkpoint, next to the per-step predictions
    (infinite-pool divisor, the pool law's, :func:`~gpolab.theory.groupsize.training_rule`)."""
    import pandas as pd

    rows = []
    for (env, pool, N), sub in df.groupby(["env", "pool", "N"], sort=False):
        sub = sub.sort_values("G")
        N, pool = int(N), int(pool)
        g, tied = best(sub, "rollouts", maximize=False)
        at = sub.set_index("G")
        pop = theory.Constants(*(float(sub[k].iloc[0]) for k in ("c1", "C2", "C3")))
        rule = theory.training_rule(pool_constants(sub), N, pool)
        row = {
            "env": env,
            "pool": pool,
            "N": N,
            "best_G": g,
            "tied_G": _ties(tied),
            "tie_share": len(tied) / len(sub),
            "best_reached": float(at.loc[g, "reached"]),
            "best_rollouts": float(at.loc[g, "rollouts"]),
            "worst_rollouts": float(sub["rollouts"].max()),
            "rule_G": rule["G"],
            "rule_in_ties": rule["G"] in tied,
            "infinite_pool_best_G": theory.best_divisor(pop, N),
            "g_star_exact": pop.g_star_exact,
            "min_G": rule["min_G"],
        }
        for value in ("pass1", "passk", *(f"value_c{d}" for d in CHECKPOINTS)):
            bg, bt = best(sub, value, maximize=True)
            row.update({f"best_G_{value}": bg, f"tied_G_{value}": _ties(bt)})
        rows.append(row)
    return pd.DataFrame(rows)
