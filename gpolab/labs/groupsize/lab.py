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

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import ClassVar

import jax

from gpolab import configs, envs, validate
from gpolab.configs import borrow, option
from gpolab.envs import arithmetic, bandit
from gpolab.kit.store import cell_key, resume
from gpolab.labs.groupsize import budget as budgets
from gpolab.labs.groupsize import pool as pools
from gpolab.labs.groupsize import runs
from gpolab.labs.groupsize.summary import budget_summary, fixed_summary, theory_curve, train_summary
from gpolab.theory import groupsize as theory

NAME = "groupsize"
TABLES = ("results", "summary", "curve")
# the envs whose truth carries the loo MSE law, named (make_instance builds them), bandit first
# (the stored runs' order: flags, tables, cell keys)
NEEDS = envs.Needs(("mse_law",), ("instance_seed",), only=("bandit", "arithmetic"))
ENVS = envs.names(NEEDS)
SCHEDULES = ("constant", "decay")
POLICIES = ("base", "instruct", "icl")
SEEDS = {False: 20_000, True: 256}  # seeds = 0: Monte Carlo seeds (fixed θ) / SGD runs (train)
TRAIN_OUT = "results/groupsize-train"  # the --train output folder unless one is given
BUDGET_OUT = "results/groupsize-budget"  # the --train --budget output folder
FIXED = {"train": (False,)}
TRAIN = {"train": (True,)}
BUDGET = {"train": (True,), "budget": (True,)}
NOT_BUDGET = {"budget": (False,)}  # the final-gap check (fixed θ, or training without budget)
SCHEDULED = {"train": (True,), "budget": (False,)}  # the budget check uses the constant step
ON_BANDIT = {"env": ("bandit", "both")}  # the fixed-θ check always runs on the bandit
ON_BANDIT_TRAIN = {"train": (True,), "env": ("bandit", "both")}
ON_ARITH_TRAIN = {"train": (True,), "env": ("arithmetic", "both")}
ON_BANDIT_SCHEDULED = {**ON_BANDIT_TRAIN, "budget": (False,)}
ON_ARITH_SCHEDULED = {**ON_ARITH_TRAIN, "budget": (False,)}
ON_BANDIT_BUDGET = {**ON_BANDIT_TRAIN, "budget": (True,)}
ON_ARITH_BUDGET = {**ON_ARITH_TRAIN, "budget": (True,)}
ARITH_FIELDS = ("questions", "hidden", "policy", "truth_samples")


MAX_POOL = 1 << 20  # prompts in a finite pool (--pool): every seed permutes all of them
MAX_N = 1 << 16  # a budget N per step: 16 times the largest shipped (4,096)
WHY_N = (
    "every divisor G >= 2 of N is a cell drawing N responses per seed (per step with --train), "
    "and N·MSE = c1·G + C2 + C3/(G - 1) holds at every N: a larger N costs time, not a new test"
)


@dataclasses.dataclass(frozen=True)
class Config(configs.Config):
    """Both checks; ``train`` picks one, and a setting of the other is an error."""

    LAB: ClassVar[str] = NAME
    QUICK: ClassVar[dict] = {"seeds": 2000}  # --quick of the fixed-θ check (under a minute)
    MODES: ClassVar[dict] = {
        ("train", True): {
            "defaults": {"out": TRAIN_OUT},
            "quick": {  # --quick with --train (under a minute on 2 CPU cores)
                "seeds": 64,
                "bandit_N": (64,),
                "bandit_steps": 60,
                "arithmetic_N": (16,),
                "arithmetic_steps": 20,
                "questions": 100,
                "truth_samples": 32,
            },
        },
        ("budget", True): {  # a training check: --budget alone implies --train
            "defaults": {"out": BUDGET_OUT, "train": True},
            "quick": {
                "seeds": 32,
                "bandit_N": (16, 128),
                "arithmetic_N": (128,),
                "pools": (0, 8),
                "questions": 100,
            },
        },
    }

    train: bool = option(False, "run the SGD training check (default: the fixed-theta MSE check)")
    N: tuple[int, ...] = option(
        (256, 1024, 4096),
        "comma list of per-step budgets N = B*G (every divisor G >= 2 is measured)",
        when=FIXED,
    )
    seeds: int = option(
        0,
        "Monte Carlo seeds per cell (fixed theta; 0: 20,000) or SGD runs per "
        "cell (--train; 0: 256)",
    )
    chunk: int = option(
        0,
        "seeds per compiled chunk (0: sized to the CPU cache; results do not depend on it)",
        when=FIXED,
        key=False,
    )
    seed: int = option(0, "master PRNG seed; seed i uses fold_in(key, i)")
    pool: int = option(
        0,
        "finite prompt pool: P prompts drawn once from f, a step takes B = N/G "
        "of them without replacement, reshuffled every epoch (0: iid prompts from "
        "f every step)",
        when=NOT_BUDGET,
    )
    env: str = option("both", ", ".join(ENVS) + " or both", when=TRAIN)
    budget: bool = option(
        False,
        "the budget check: equal total rollouts for every N, rollouts to a target "
        "success rate, pass@1 and pass@k per (pool, N, G) (constant step)",
        when=TRAIN,
    )
    pools: tuple[int, ...] = option(
        (0, 16, 64), "comma list of pool sizes P (0: prompts drawn afresh every step)", when=BUDGET
    )
    target: float = option(
        0.3,
        "target success rate as the share of the gap J* - J(theta0) closed, on the prompt "
        "law (pool 0) or the pool",
        when=BUDGET,
    )
    pass_k: int = option(8, "k of the final pass@k", when=BUDGET)
    schedules: tuple[str, ...] = option(
        SCHEDULES, "comma list of constant, decay (eta_t = eta0 / (1 + t/tau))", when=SCHEDULED
    )
    bandit_N: tuple[int, ...] = option(
        (64, 256), "comma list of budgets N per step", when=ON_BANDIT_TRAIN
    )
    bandit_steps: int = option(100, "SGD steps", when=ON_BANDIT_SCHEDULED)
    bandit_total: int = option(
        16384, "rollouts per budget run (steps = total/N; 8N must divide it)", when=ON_BANDIT_BUDGET
    )
    bandit_eta_constant: float = option(32.0, "constant step size", when=ON_BANDIT_TRAIN)
    bandit_eta_decay: float = option(
        64.0, "eta0 of the decaying schedule", when=ON_BANDIT_SCHEDULED
    )
    bandit_tau: float = option(20.0, "tau of the decaying schedule", when=ON_BANDIT_SCHEDULED)
    arithmetic_N: tuple[int, ...] = option(
        (32, 128), "comma list of budgets N per step", when=ON_ARITH_TRAIN
    )
    arithmetic_steps: int = option(50, "SGD steps", when=ON_ARITH_SCHEDULED)
    arithmetic_total: int = option(
        8192, "rollouts per budget run (steps = total/N; 8N must divide it)", when=ON_ARITH_BUDGET
    )
    arithmetic_eta_constant: float = option(0.5, "constant step size", when=ON_ARITH_TRAIN)
    arithmetic_eta_decay: float = option(
        2.0, "eta0 of the decaying schedule", when=ON_ARITH_SCHEDULED
    )
    arithmetic_tau: float = option(10.0, "tau of the decaying schedule", when=ON_ARITH_SCHEDULED)
    questions: int = borrow(
        arithmetic.Instance,
        "questions",
        when=ON_ARITH_TRAIN,
        prefix="arithmetic (bare, no filler): ",
    )
    hidden: int = borrow(arithmetic.Instance, "hidden", when=ON_ARITH_TRAIN)
    policy: str = option("base", "starting policy base, instruct or icl", when=ON_ARITH_TRAIN)
    truth_samples: int = borrow(arithmetic.Instance, "truth_samples", when=ON_ARITH_TRAIN)
    instance_seed: int = borrow(bandit.Instance, "instance_seed")
    kind: str = borrow(bandit.Instance, "kind", when=ON_BANDIT, prefix="bandit: ")
    prompts: int = borrow(bandit.Instance, "prompts", when=ON_BANDIT, prefix="bandit: ")
    actions: int = borrow(bandit.Instance, "actions", when=ON_BANDIT, prefix="bandit: ")
    logit_scale: float = borrow(bandit.Instance, "logit_scale", when=ON_BANDIT, prefix="bandit: ")
    success_a: float = borrow(bandit.Instance, "success_a", when=ON_BANDIT, prefix="bandit: ")
    success_b: float = borrow(bandit.Instance, "success_b", when=ON_BANDIT, prefix="bandit: ")
    out: str = option("results/groupsize", f"output folder (--train: {TRAIN_OUT})", key=False)

    @property
    def n_seeds(self) -> int:
        """The seeds (fixed θ) or SGD runs (train) per cell: ``seeds``, or the mode's default."""
        return self.seeds or SEEDS[self.train]

    @property
    def envs(self) -> tuple[str, ...]:
        return ENVS if self.env == "both" else (self.env,)

    def validate(self) -> None:
        """Plain-Python checks before anything is traced."""
        validate.integer("seed", self.seed, 0)
        validate.integer("instance_seed", self.instance_seed, 0)
        validate.integer("pool", self.pool, 0)
        validate.at_most(
            "pool",
            self.pool,
            MAX_POOL,
            "each seed permutes the whole pool; a "
            "larger pool's factor (P - B)/(P - 1) is within 0.1% of iid prompts' "
            "(pool = 0) for B <= 1,024 prompts per step",
        )
        if self.seeds != 0:
            validate.seeds("seeds", self.seeds, 2)
        if "bandit" in self.envs or not self.train:
            runs.bandit_instance(self).validate()
        if not self.train:
            validate.integers("N", self.N, 2)
            validate.at_most("N", self.N, MAX_N, WHY_N)  # before its divisors are listed
            for N in self.N:
                theory.check_budget(N)
            validate.integer("chunk", self.chunk, 0)
            return
        validate.choice("env", self.env, (*ENVS, "both"))
        if self.budget:
            self.validate_budget()
        elif not self.schedules:
            raise validate.ConfigError(
                f"schedules: got an empty list; allowed: {', '.join(SCHEDULES)}"
            )
        for s in self.schedules:
            validate.choice("schedules", s, SCHEDULES)
        for env in self.envs:
            validate.integers(f"{env}_N", getattr(self, f"{env}_N"), 4)
            validate.at_most(f"{env}_N", getattr(self, f"{env}_N"), MAX_N, WHY_N)
            for N in getattr(self, f"{env}_N"):
                theory.check_budget(N, field=f"{env}_N")
            if not self.budget:
                validate.integer(f"{env}_steps", getattr(self, f"{env}_steps"), 1)
            for name in (f"{env}_eta_constant", f"{env}_eta_decay", f"{env}_tau"):
                validate.real(name, getattr(self, name), low=0.0, open_low=True)
        if "arithmetic" in self.envs:
            validate.integer("questions", self.questions, 1)
            validate.integer("hidden", self.hidden, 1)
            validate.choice("policy", self.policy, POLICIES)
            validate.integer("truth_samples", self.truth_samples, 2)

    def validate_budget(self) -> None:
        """The budget check's own settings: pools, total (a multiple of 8N for every N, so that
        the compute checkpoints total/8, /4, /2 fall on whole steps), target and k."""
        validate.integers("pools", self.pools, 0)
        for P in self.pools:
            validate.at_most("pools", P, MAX_POOL, "each seed permutes the whole pool")
        for env in self.envs:
            total = getattr(self, f"{env}_total")
            validate.integer(f"{env}_total", total, 8)
            validate.at_most(f"{env}_total", total, 1 << 22, "rollouts per SGD run")
            for N in getattr(self, f"{env}_N"):
                if total % (max(budgets.CHECKPOINTS) * N):
                    raise validate.ConfigError(
                        f"{env}_total: got {total} for {env}_N = {N}; allowed: a multiple of "
                        f"{max(budgets.CHECKPOINTS)}·N = {max(budgets.CHECKPOINTS) * N} (whole "
                        "steps at every compute checkpoint)"
                    )
        validate.real("target", self.target, low=0.0, high=1.0, open_low=True)
        validate.integer("pass_k", self.pass_k, 1)


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
    fields = runs.BANDIT_FIELDS if env == "bandit" else ARITH_FIELDS
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
