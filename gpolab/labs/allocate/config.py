"""The allocation lab's settings (:mod:`gpolab.labs.allocate.lab`): its :class:`Config`, the
bandit instance it builds and the estimators it takes."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from gpolab import configs, envs, estimators, validate
from gpolab.configs import option
from gpolab.envs import bandit
from gpolab.labs.allocate import rules

NAME = "allocate"
# the rules read the tabular bandit's per-prompt p (the lab builds its instance)
NEEDS = envs.Needs(fields=("kind", "prompts", "lengths", "dynamic_sampling"), only=("bandit",))
INSTANCES = envs.instances(*envs.names(NEEDS))
# the lab's instance: a skewed difficulty mix (bandit.Instance defaults otherwise)
INSTANCE = {"prompts": 64, "actions": 8, "logit_scale": 2.0, "success_a": 0.5, "success_b": 2.0}


@dataclasses.dataclass(frozen=True, init=False)
class Config(configs.Config):
    """The allocation grid and ``instance``, the bandit's own settings (flags name its fields
    flat: ``--prompts 32``; in a file its subtable ``[allocate.bandit]``).  Tuples are grids."""

    LAB: ClassVar[str] = NAME
    QUICK: ClassVar[dict] = {"seeds": 256, "budget": (128, 256, 512), "runs": 5, "steps": 60}
    INSTANCES: ClassVar[tuple] = ("env", INSTANCES)

    env: str = option(
        "bandit",
        "bandit (tabular: prompts move disjoint parameter blocks, so the "
        "step's MSE is the sum of the prompts')",
    )
    rules: tuple[str, ...] = option(
        tuple(rules.RULES), "comma list of allocation rules: " + ", ".join(rules.RULES)
    )
    estimator: str = option(
        "loo",
        "advantage estimator of every group (a reward-only registry entry: loo, grpo, rloo, ...)",
    )
    budget: tuple[int, ...] = option(
        (128, 256, 512, 1024, 2048), "comma list of rollouts per step N (at least 2 per prompt)"
    )
    cap: int = option(128, "most responses one prompt may get in a step")
    history: int = option(
        8, "static results: responses per prompt in the earlier step the rules read"
    )
    rho: float = option(
        0.0,
        "gpolab's reward-only rule: signal share ||g_x||^2 / (E||W||^2 "
        "p(1-p)) (0: allocation by p(1-p) alone)",
    )
    decay: float = option(1.0, "Beta posterior discount per step (MoPPS lambda; 1 = keep all)")
    seeds: int = option(2000, "static results: Monte Carlo seeds per budget")
    train_budget: int = option(256, "training: rollouts per step")
    steps: int = option(150, "training: SGD steps per run")
    runs: int = option(16, "training: independent runs per rule (>= 5)")
    lr: float = option(400.0, "training: SGD step size on the f-weighted gradient")
    seed: int = option(0, "master PRNG seed")
    out: str = option("results/allocate", "output folder (tables, config.toml, figures)", key=False)
    instance: bandit.Instance = option(None, "the bandit's settings (default: a skewed mix)")

    def __init__(self, **kw) -> None:
        if "instance" not in kw:
            kw = {**INSTANCE, **kw}
        configs.init(self, kw)

    def validate(self) -> None:
        """Plain-Python checks before anything is drawn (each names the field)."""
        validate.choice("env", self.env, tuple(INSTANCES))
        self.instance.validate()
        inst = self.instance
        if inst.kind != "tabular" or inst.lengths != "one" or inst.B or inst.dynamic_sampling:
            raise validate.ConfigError(
                "kind/lengths/B/dynamic_sampling: allowed in allocate: kind = tabular (disjoint "
                "blocks: the step's MSE is the sum of the prompts'), lengths = one, B = 0, no "
                "dynamic sampling (the rules decide who is sampled)"
            )
        if not self.rules:
            raise validate.ConfigError(
                "rules: got an empty list; allowed: " + ", ".join(rules.RULES)
            )
        for r in self.rules:
            validate.choice("rules", r, tuple(rules.RULES))
        validate.integer("cap", self.cap, 4, 512)
        check_estimator("estimator", self.estimator)
        P = inst.prompts
        validate.integers("budget", self.budget, 2 * P)
        for name, values in (("budget", self.budget), ("train_budget", (self.train_budget,))):
            for n in values:
                if n < 2 * P or n > self.cap * P // 2:
                    raise validate.ConfigError(
                        f"{name}: got {n}; allowed: {2 * P} (2 per prompt, prompts = {P}) to "
                        f"{self.cap * P // 2} (half of cap x prompts, so a rule can move "
                        "rollouts to the prompts that need them)"
                    )
        validate.integer("history", self.history, 1, 1024)
        validate.real("rho", self.rho, low=0.0, high=1.0)
        validate.real("decay", self.decay, low=0.0, high=1.0, open_low=True)
        validate.seeds("seeds", self.seeds, 16)
        validate.integer("steps", self.steps, 1, 100_000)
        validate.integer("runs", self.runs, 5, 4096)
        validate.real("lr", self.lr, low=0.0, open_low=True)
        validate.integer("seed", self.seed, 0)


def check_estimator(field: str, spec: str) -> None:
    """A reward-only, group-scoped registry entry (the allocation reads its count tables)."""
    estimators.check_reward_only(field, spec, "the allocation reads their count tables")
