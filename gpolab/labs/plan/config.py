"""``gpolab plan``'s settings (:mod:`gpolab.labs.plan.lab`): its :class:`Config` and the checks
of the log, the output folder and the draws it runs before reading anything."""

from __future__ import annotations

import dataclasses
import math
import os
from typing import ClassVar

from gpolab import configs, envs, estimators, validate
from gpolab.configs import option
from gpolab.integrations import rollout_files
from gpolab.labs.plan.report import MAX_G

NAME = "plan"
NEEDS = envs.Needs(only=())  # no env: the lab reads a trainer's rollout log
FORMATS = ("auto", "trl", "verl", "table")
MAX_DRAWS = 100_000  # 25x the default: the bands' Monte Carlo error is already small
DEFAULT_ESTIMATORS = ("grpo", "loo", "mean", "nemo/grpo", "verl/grpo_passk", "paper/passk-training")


def given(help: str):
    """An option naming what the user may give (a file, a column, an estimator): "" when not."""
    return option("", help)


@dataclasses.dataclass(frozen=True)
class Config(configs.Config):
    """What ``gpolab plan`` reads and which answers it gives."""

    LAB: ClassVar[str] = NAME
    QUICK: ClassVar[dict] = {"draws": 500}

    log: str = given(
        "the rollout log: a file or a folder (TRL completions parquet, verl "
        "rollout jsonl, or a CSV/parquet table with prompt, reward)"
    )
    format: str = option("auto", "log format: auto, trl, verl or table")
    reward_column: str = given(
        "TRL: the reward function's column (default: the sum of "
        "them all, as TRL does with unit weights)"
    )
    proxy_column: str = given(
        "per-response score-norm proxy column (||grad log pi||^2 or "
        "verl's sum_t(1 - 2 pi_t + sum pi^2)): enables G*"
    )
    length_column: str = given("per-response length column (table: 'length' if present)")
    grad_norms: str = given(
        "CSV/parquet with columns batch, grad_norm: ||g_hat|| of the "
        "loo estimate at >= 2 batch sizes (prompts) at the log's G"
    )
    trainer_estimator: str = given(
        "the estimator the run trains with, for its G* beside loo's (a reward-only registry "
        "spec such as trl/grpo[scale_rewards=group]; '' reads it from the training hook's "
        "run.json, and without one only loo's G* is given)"
    )
    pool: int = option(
        -1,
        "prompts in the run's training set, for the training rule (gpolab's, theory "
        "groupsize.training_rule): -1 infers it from the log (its distinct prompts when they "
        "repeat, else prompts drawn afresh), 0 prompts drawn afresh",
    )
    success_threshold: float = option(
        math.nan,
        "binarize the rewards: reward >= T is a success (1), else a failure (0); e.g. "
        "--success-threshold 1 reads a 0/1 log with a stray 5.0 as binary (nan: off, rewards "
        "as logged; more than two values are then graded)",
    )
    window: int = option(0, "steps per window (0: the whole log pooled only)")
    G: tuple[int, ...] = option(
        (2, 4, 8, 16, 32, 64, 128, 256),
        "group sizes reported by G, at most 256 (the curve table has every G in 2..256)",
    )
    target: float = option(0.1, "degenerate-group fraction to stay under")
    N: int = option(0, "responses per step N = B*G for the split table (0: the log's)")
    estimators: tuple[str, ...] = option(DEFAULT_ESTIMATORS, "estimator specs of the kappa table")
    draws: int = option(4000, "parametric draws of the fit for the intervals (at most 100,000)")
    seed: int = option(0, "seed of the intervals' draws and bootstraps")
    allocate: bool = option(
        False,
        "also write allocation.csv/json: a group size per prompt for "
        "the next steps (gpolab's reward-only allocation, theory §12)",
    )
    allocate_estimator: str = option(
        "loo",
        "the estimator the allocation is for (reward-only registry entry)",
        when={"allocate": (True,)},
    )
    allocate_rho: float = option(
        0.0,
        "signal share of the allocation's reward-only model (0: allocation by p(1-p))",
        when={"allocate": (True,)},
    )
    out: str = option("results/plan", "output folder (report.md, tables, plan.png)", key=False)

    def validate(self) -> None:
        check_log(self.log, self.out)
        validate.choice("format", self.format, FORMATS)
        if not (math.isnan(self.success_threshold) or math.isfinite(self.success_threshold)):
            raise validate.ConfigError(
                f"success_threshold: got {self.success_threshold}; allowed: a finite number "
                "(or nan: off)"
            )
        if self.grad_norms and not os.path.isfile(self.grad_norms):
            raise validate.ConfigError(f"grad_norms: {self.grad_norms!r} is not a file")
        validate.integer("window", self.window, 0)
        validate.integers("G", self.G, 2)
        validate.at_most(
            "G",
            list(self.G),
            MAX_G,
            "the curve table covers G = 2..256, and kappa's exact cost grows as G^2",
        )
        validate.real("target", self.target, 0.0, 1.0, open_low=True)
        validate.integer("N", self.N, 0)
        validate.integer("pool", self.pool, -1)
        validate.integer("draws", self.draws, 10)
        validate.at_most(
            "draws",
            self.draws,
            MAX_DRAWS,
            "the 95% bands' Monte Carlo error is already far below their width",
        )
        validate.memory("draws", self.draws, draws_bytes(self.draws), "the intervals' draws")
        validate.integer("seed", self.seed, 0, (1 << 63) - 1)
        if not self.estimators:
            raise validate.ConfigError("estimators: got an empty list; allowed: one or more")
        for spec in self.estimators:
            estimators.check_estimator(spec, max(self.G), field="G")
        if self.trainer_estimator:
            estimators.check_reward_only(
                "trainer_estimator", self.trainer_estimator, "G* reads their count tables"
            )
        if self.allocate:
            estimators.check_reward_only(
                "allocate_estimator",
                self.allocate_estimator,
                "the allocation reads their count tables",
            )
            validate.real("allocate_rho", self.allocate_rho, low=0.0, high=1.0)


def check_log(log: str, out: str) -> None:
    """The log exists and is a file or a folder, and --out is not inside it (:func:`check_out`)."""
    if not log:
        raise validate.ConfigError("log: missing; allowed: a rollout log file or folder")
    if not os.path.exists(log):
        raise validate.ConfigError(f"log: {log!r} does not exist")
    if not (os.path.isfile(log) or os.path.isdir(log)):  # stat only: a FIFO is never opened
        raise validate.ConfigError(  # (a read would block)
            f"log: {log!r} is not a regular file or a folder (a pipe or a device); "
            f"allowed: a folder or a file of the supported formats ({rollout_files.ALLOWED})"
        )
    check_out(log, out)


def check_out(log: str, out: str) -> None:
    """``out`` is not the log's folder nor inside it: the report's tables there would make the
    folder a log of mixed formats, and every later read of it fail (issue 55)."""
    if not out:
        return
    path, where = os.path.realpath(log), os.path.realpath(out)
    if where == path or (os.path.isdir(log) and where.startswith(path + os.sep)):
        raise validate.ConfigError(
            f"out: got {out!r}, which is the log {log!r} or inside its folder; allowed: a "
            "folder outside the log (plan's tables there would be read as part of the log)"
        )


def draws_bytes(draws: int) -> float:
    """Peak bytes of the intervals' draws: about 8 float64 arrays of draws x (MAX_G + 1) in the
    degenerate curve's products (the log's size does not enter: the check sums by group size)."""
    return 8.0 * 8 * draws * (MAX_G + 1)
