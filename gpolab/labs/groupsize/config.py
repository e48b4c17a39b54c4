"""The group-size lab's settings (:mod:`gpolab.labs.groupsize.lab`): its :class:`Config` (both
checks, fixed θ and training), the envs it runs on and the bandit instance it builds."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from gpolab import configs, envs, validate
from gpolab.configs import borrow, option
from gpolab.envs import arithmetic, bandit
from gpolab.theory import groupsize as theory

NAME = "groupsize"
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
ON_ARITH_TRAIN = {"train": (True,), "env": ("arithmetic", "both")}
BANDIT_FIELDS = ("kind", "prompts", "actions", "logit_scale", "success_a", "success_b")
ARITH_FIELDS = ("questions", "hidden", "policy", "truth_samples")
CHECKPOINTS = (8, 4, 2, 1)  # the budget check reports J at compute total/d for each d


MAX_POOL = 1 << 20  # prompts in a finite pool (--pool): every seed permutes all of them
MAX_N = 1 << 16  # a budget N per step: 16 times the largest shipped (4,096)
WHY_N = (
    "every divisor G >= 2 of N is a cell drawing N responses per seed (per step with --train), "
    "and N·MSE = c1·G + C2 + C3/(G - 1) holds at every N: a larger N costs time, not a new test"
)


def sgd_options(env: str, *, N: tuple, steps: int, total: int, eta: tuple, tau: float) -> tuple:
    """The options ``{env}_N``, ``_steps``, ``_total``, ``_eta_constant``, ``_eta_decay`` and
    ``_tau`` of SGD on ``env`` (``eta``: the constant step size and η0 of the decaying schedule):
    one help for every env, each env its defaults."""
    train = {"train": (True,), "env": (env, "both")}
    scheduled, budget = {**train, "budget": (False,)}, {**train, "budget": (True,)}
    return (
        option(N, "comma list of budgets N per step", when=train),
        option(steps, "SGD steps", when=scheduled),
        option(total, "rollouts per budget run (steps = total/N; 8N must divide it)", when=budget),
        option(eta[0], "constant step size", when=train),
        option(eta[1], "eta0 of the decaying schedule", when=scheduled),
        option(tau, "tau of the decaying schedule", when=scheduled),
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
    # SGD on each env (:func:`sgd_options`)
    bandit_N: tuple[int, ...]
    bandit_steps: int
    bandit_total: int
    bandit_eta_constant: float
    bandit_eta_decay: float
    bandit_tau: float
    bandit_N, bandit_steps, bandit_total, bandit_eta_constant, bandit_eta_decay, bandit_tau = (
        sgd_options("bandit", N=(64, 256), steps=100, total=16384, eta=(32.0, 64.0), tau=20.0)
    )
    arithmetic_N: tuple[int, ...]
    arithmetic_steps: int
    arithmetic_total: int
    arithmetic_eta_constant: float
    arithmetic_eta_decay: float
    arithmetic_tau: float
    (
        arithmetic_N,
        arithmetic_steps,
        arithmetic_total,
        arithmetic_eta_constant,
        arithmetic_eta_decay,
        arithmetic_tau,
    ) = sgd_options("arithmetic", N=(32, 128), steps=50, total=8192, eta=(0.5, 2.0), tau=10.0)
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
            bandit_instance(self).validate()
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
                if total % (max(CHECKPOINTS) * N):
                    raise validate.ConfigError(
                        f"{env}_total: got {total} for {env}_N = {N}; allowed: a multiple of "
                        f"{max(CHECKPOINTS)}·N = {max(CHECKPOINTS) * N} (whole "
                        "steps at every compute checkpoint)"
                    )
        validate.real("target", self.target, low=0.0, high=1.0, open_low=True)
        validate.integer("pass_k", self.pass_k, 1)


def bandit_instance(cfg: Config) -> bandit.Instance:
    """The bandit of ``cfg`` (its settings, as in ``gpolab sweep``)."""
    return configs.borrowed(bandit.Instance, cfg)
