"""The group-size lab: the best G at a fixed per-step budget N = B·G (theory §4, [U] arXiv
2603.01162 Thm 7), two checks of the prediction of :mod:`gpolab.theory.groupsize`:

* fixed θ (default) — the Monte Carlo MSE of the loo mini-batch gradient (B = N/G iid prompts,
  G responses each) over every divisor G ≥ 2 of N, against the exact [c1·G + C2 + C3/(G − 1)]/N;
* ``train = true`` (``--train``) — SGD (:func:`gpolab.engine.train.ascend`) with N responses per
step,
  many seeds, the final suboptimality gap J* − J(θ_n) per G, for each env, N and step schedule.

Both use one sampler, :func:`minibatch_gradient`, over the env contract
:class:`gpolab.envs.Env` (prompt draws, one response per slot, Σ_i w_i W_i, J) of the registered
bandit and arithmetic surrogate.  A step always draws N slots: slot i answers prompt
``draws[i // G]``, so the first B = N/G of N iid prompt draws get one group each.  Shapes depend
on N only: G, the step size and the schedule are traced, and one compilation per (env, N) serves
every G.
Seed i uses ``fold_in(key, i)`` (through :mod:`gpolab.engine`); step t of a run uses
``fold_in(seed key, t)``.

Every row (one per (N, G), or per (env, N, schedule, G) in training) is one store cell whose key
holds exactly the settings its numbers depend on; the rows carry the constants c1, C2, C3, so the
summary (best G per N) and the theory curve are computed from the table alone.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import jax

from gpolab.kit.store import cell_key, resume
from gpolab.labs.groupsize import budget as budgets
from gpolab.labs.groupsize import pool as pools
from gpolab.labs.groupsize import runs

# the lab protocol's NAME, NEEDS, Config and the settings tests and other labs read
from gpolab.labs.groupsize.config import (  # noqa: F401
    ARITH_FIELDS,
    BANDIT_FIELDS,
    BUDGET_OUT,
    ENVS,
    MAX_N,
    MAX_POOL,
    NAME,
    NEEDS,
    POLICIES,
    SCHEDULES,
    SEEDS,
    TRAIN_OUT,
    Config,
)
from gpolab.labs.groupsize.summary import budget_summary, fixed_summary, theory_curve, train_summary

TABLES = ("results", "summary", "curve")


# ---------------------------------------------------------------- cells and the lab protocol


def row_ids(cfg: Config) -> list[dict]:
    """One id per table row, in table order: (N, G), or (env, N, schedule, G) in training."""
    if not cfg.train:
        return [{"N": N, "G": G} for N in cfg.N for G in pools.row_ids(N, cfg.pool)]
    if cfg.budget:
        return [
            {"env": env, "pool": P, "N": N, "G": G}
            for env in cfg.envs
            for P in cfg.pools
            for N in getattr(cfg, f"{env}_N")
            for G in pools.row_ids(N, P)
        ]
    return [
        {"env": env, "N": N, "schedule": s, "G": G}
        for env in cfg.envs
        for N in getattr(cfg, f"{env}_N")
        for s in cfg.schedules
        for G in pools.row_ids(N, cfg.pool)
    ]


def row_settings(cfg: Config, rid: dict) -> dict:
    """Every setting the numbers of row ``rid`` depend on besides its id: the seeds actually
    run, the PRNG seed, the instance of its env and, in training, its steps, η0 and τ."""
    env = rid.get("env", "bandit")
    fields = BANDIT_FIELDS if env == "bandit" else ARITH_FIELDS
    settings = {
        "train": cfg.train,
        "seeds": cfg.n_seeds,
        "seed": cfg.seed,
        "instance_seed": cfg.instance_seed,
        **{f: getattr(cfg, f) for f in fields},
    }
    if cfg.budget:
        settings.update(
            budget=True,
            total=getattr(cfg, f"{env}_total"),
            target=cfg.target,
            pass_k=cfg.pass_k,
            eta0=getattr(cfg, f"{env}_eta_constant"),
        )
    elif cfg.train:
        settings.update(runs.train_setting(cfg, env, rid["schedule"]))
    if cfg.pool:  # absent without a pool: those keys stay as they were
        settings["pool"] = cfg.pool
    return settings


def cell_keys(cfg: Config) -> list[str]:
    """Store key of every row: its id and :func:`row_settings` (not the other grid values, the
    other env's settings, the output folder or the chunk size)."""
    return [cell_key(NAME, settings=row_settings(cfg, rid), row=rid) for rid in row_ids(cfg)]


def cells(cfg: Config) -> int:
    return len(row_ids(cfg))


def _setup(cfg: Config) -> Callable:
    """``setup(env) -> Setup`` and ``setup((env, P)) -> PoolSetup``, built once each and only
    when a cell is computed."""

    @functools.cache
    def setup(name):
        if isinstance(name, str):
            return runs.make_setup(cfg, name)
        ctx = setup(name[0])
        return pools.make_pool_setup(
            ctx.env, ctx.params, ctx.theta0, ctx.truth.g, name[1], cfg.instance_seed
        )

    return setup


def run(cfg: Config, key=None, *, store=None, progress=None) -> dict:
    """``{"results": one row per cell, "summary": best G per N (per env, N, schedule in
    training) next to the prediction, "curve": the exact MSE over continuous G (fixed θ)}``;
    resumable per cell through ``store``.  The env (bandit instance, pre-trained arithmetic
    policy) is built only if a cell is missing."""
    cfg.validate()
    key = jax.random.key(cfg.seed) if key is None else key
    ids = row_ids(cfg)
    setup = _setup(cfg)
    compute_row = (
        budgets.budget_row if cfg.budget else runs.train_row if cfg.train else runs.fixed_row
    )

    def compute(i: int) -> list[dict]:
        start = time.perf_counter()
        row = compute_row(cfg, setup, key, **ids[i])
        settings = {k: v for k, v in row_settings(cfg, ids[i]).items() if k != "seeds"}
        return [{**row, **settings, "seconds": time.perf_counter() - start}]

    df = resume(
        store,
        cell_keys(cfg),
        compute,
        config_hash=pools.config_hash(cfg),  # no output folder or chunk (or pool = 0)
        progress=progress,
        label=lambda rows: label(rows[0]),
    )
    summarize = budget_summary if cfg.budget else train_summary if cfg.train else fixed_summary
    summary = summarize(df)
    return {"results": df, "summary": summary, "curve": theory_curve(df, cfg.train)}


def label(row: dict) -> str:
    if "rollouts" in row:
        return (
            f"{row['env']} P={row['pool']} N={row['N']} G={row['G']}: rollouts to target "
            f"{row['rollouts']:.4g} (reached {row['reached']:.0%}), pass@1 {row['pass1']:.3f}"
        )
    if "gap" in row:
        return f"{row['env']} N={row['N']} {row['schedule']} G={row['G']}: gap={row['gap']:.4g}"
    return f"N={row['N']} G={row['G']}: mse={row['mse']:.4g} (exact {row['theory_mse']:.4g})"


# ---------------------------------------------------------------- report and figures

COLUMNS = {  # the report's columns: fixed θ, training, the budget check
    "fixed": "N G B mse mse_ci_low mse_ci_high theory_mse seconds",
    "train": "env N schedule G gap gap_ci_low gap_ci_high gap_median theory_mse seconds",
    "budget": "pool N G rollouts rollouts_se reached pass1 passk seconds",
}


def report(cfg: Config, tables: dict) -> str:
    from gpolab.kit.tables import table_text

    mode = "budget" if cfg.budget else "train" if cfg.train else "fixed"
    return table_text(tables["results"], COLUMNS[mode].split())


def notes(cfg: Config, tables: dict) -> str:
    """Per N (and env, schedule): the empirical best G against the prediction."""
    if cfg.budget:
        return "\n".join(
            f"{s['env']} P={s['pool']} N={s['N']}: fewest rollouts to target at G = "
            f"{s['best_G']} (tied: {s['tied_G']}); rule {s['rule_G']}; best pass@1 G "
            f"{s['best_G_pass1']}, pass@k G {s['best_G_passk']}"
            for s in tables["summary"].to_dict(orient="records")
        )
    lines = []
    for s in tables["summary"].to_dict(orient="records"):
        where = f"{s['env']} N={s['N']} {s['schedule']}" if cfg.train else f"N={s['N']}"
        lines.append(
            f"{where}: empirical best G {s['empirical_best_G']} (tied within CI: {s['tied_G']}); "
            f"predicted best divisor {s['predicted_best_G']}, G* = 1 + sqrt(C3/c1) = "
            f"{s['g_star_exact']:.3f} ± {s['g_star_se']:.3f}, paper sqrt(c3/c1) = "
            f"{s['g_star_paper']:.3f}"
        )
    return "\n".join(lines)


def figures(tables: dict) -> dict:
    """MSE vs G at fixed N (fixed θ) or the final gap vs G (training)."""
    from gpolab.labs.groupsize import plots

    if "rollouts" in tables["results"]:
        return {"groupsize_budget.png": plots.budget_figure}
    if "gap" in tables["results"]:
        return {"groupsize_train.png": plots.train_figure}
    return {"groupsize_mse.png": plots.fixed_figure}
