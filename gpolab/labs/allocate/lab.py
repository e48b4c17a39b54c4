"""The allocation lab (``gpolab allocate``): how many responses each prompt of a step should get,
every published allocation rule against gpolab's exact-MSE-optimal one, on the same exact
gradients (theory §12).

The instance is the tabular bandit with a skewed difficulty mix (its own settings: 64 prompts,
success probabilities Beta(0.5, 2), sharp initial logits; V(x) from 0.005 to 0.46).  A step
keeps every prompt with weight f_x = 1/P and spends a budget of N rollouts; a rule
(:mod:`gpolab.labs.allocate.rules`) decides who gets how many from what a trainer knows: the
truth (gpolab-oracle only), the Beta posterior of p_x from the rewards seen so far, the prompt's
last group, or its history.  The lab's estimator (loo by default, any reward-only registry entry)
turns each prompt's group into ĝ_x; the step's ĝ = Σ_x f_x ĝ_x is compared with the exact g.

* ``results`` (static): at the instance's θ, after one earlier step of ``history`` responses per
  prompt (the information the rules read; the policy has not moved: no drift), per rule and
  budget: MSE, bias², variance, the MSE after the best single rescaling of ĝ (``scaled_mse``:
  scale-free, so a rule with a rescaled estimator such as GRPO compares fairly), cos, snr,
  rollouts generated, the share of rollouts in
  zero-signal groups, and each rule on the published rules' own objectives (Knapsack RL's value
  at the true p, the share of groups with both outcomes, the update cost: responses trained on
  per response generated); for rules fixing group sizes before sampling (or, GVM-RAFT, after
  its fresh first stage), also ``theory_mse``, the exact MSE given each seed's allocation
  averaged over seeds (checked against the Monte Carlo).
* ``match``: the rollouts each rule needs to reach uniform G's MSE at each budget (log-log
  interpolation along its own curve) and their ratio to uniform's.
* ``training``: SGD on the bandit with each rule at ``train_budget`` rollouts per step,
  ``runs`` independent runs: suboptimality gap and success rate against cumulative rollouts
  (95% intervals across runs); rules reading history see rewards as they were when drawn.
* ``trained``: per rule, cumulative rollouts until the gap first halves, with its interval.
* ``allocation``: the mean G each rule gives each prompt at each budget, with the prompt's p.

Every rule shares the draws of the others (same history, same responses in the same order):
differences between rules are paired.  The Monte Carlo is numpy: group sizes differ between
prompts and between seeds, and two rules read rewards between rounds.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import numpy as np

from gpolab import configs, envs, estimators, validate
from gpolab.configs import option
from gpolab.engine import Z95
from gpolab.envs import bandit
from gpolab.kit.store import PROVENANCE, cell_key, config_hash, resume
from gpolab.kit.tables import table_text
from gpolab.labs.allocate import rules, steps
from gpolab.labs.allocate.analysis import match_table, notes  # noqa: F401 (protocol: notes)
from gpolab.labs.allocate.static import static_rows
from gpolab.labs.allocate.steps import SCHEMA

NAME = "allocate"
TABLES = ("results", "match", "training", "trained", "allocation")
# the rules read the tabular bandit's per-prompt p (the lab builds its instance)
NEEDS = envs.Needs(fields=("kind", "prompts", "lengths", "dynamic_sampling"), only=("bandit",))
INSTANCES = envs.instances(*envs.names(NEEDS))
# the lab's instance: a skewed difficulty mix (bandit.Instance defaults otherwise)
INSTANCE = {"prompts": 64, "actions": 8, "logit_scale": 2.0, "success_a": 0.5, "success_b": 2.0}


MAY_BE_NAN = {
    "results": ("theory_mse", "theory_mse_se"),
    "trained": ("rollouts_to_half_gap", "rollouts_to_half_gap_ci"),
}


# integer columns (the store's rows of every kind read back as floats)
INTEGER = {
    "results": ("budget", "n_seeds"),
    "training": ("step", "runs"),
    "allocation": ("budget", "prompt"),
}
JSON = tuple(
    (
        "rule budget rollouts mse mse_se theory_mse theory_mse_se theory bias_sq bias_sq_se "
        "variance scaled_mse scaled_mse_se cos cos_se snr zero_signal kept knapsack_value "
        "nonzero_groups update_cost reads source estimator n_seeds"
    ).split()
)
JSON_TABLES = {"results": JSON, "trained": None, "training": None}  # --json: every answer


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


def cells(cfg: Config) -> int:
    return len(units(cfg))


def units(cfg: Config) -> list[tuple]:
    """The units of work: one per budget (every rule on common draws), one per trained rule."""
    return [("static", n) for n in cfg.budget] + [("train", r) for r in cfg.rules]


def cell_keys(cfg: Config) -> list[str]:
    common = configs.key_settings(cfg, exclude=("rules", "budget"))
    keys = []
    for kind, what in units(cfg):
        extra = {"rules": list(cfg.rules)} if kind == "static" else {}
        keys.append(cell_key(NAME, schema=SCHEMA, unit=[kind, what], settings=common, **extra))
    return keys


def run(cfg: Config, key=None, *, store=None, progress=None) -> dict:
    """The tables of the module docstring; one unit per budget and per trained rule, resumed
    from ``store``.  ``key`` is unused: numpy streams seeded by ``seed`` and the unit."""
    import pandas as pd

    cfg.validate()

    def compute(i: int) -> list[dict]:
        kind, what = units(cfg)[i]
        return static_rows(cfg, what) if kind == "static" else train_rows(cfg, what)

    def label(rows) -> str:
        r = rows[0]
        return f"budget {r['budget']}" if r["table"] in ("results", "allocation") else r["rule"]

    df = resume(
        store, cell_keys(cfg), compute, config_hash=config_hash(cfg), progress=progress, label=label
    )
    df = df.drop(columns=[c for c in PROVENANCE if c in df])
    tables = {}
    for name in ("results", "training", "trained", "allocation"):
        t = df[df["table"] == name].drop(columns="table")
        # the store holds every row kind: keep this table's columns (NaN-able ones always)
        t = t[[c for c in t.columns if t[c].notna().any() or c in MAY_BE_NAN.get(name, ())]]
        tables[name] = t.reset_index(drop=True).astype(dict.fromkeys(INTEGER.get(name, ()), int))
    tables["match"] = match_table(tables["results"], cfg)
    return {name: tables.get(name, pd.DataFrame()) for name in TABLES}


# ---------------------------------------------------------------- training curves (``training``,
# ``trained``): SGD on the bandit with each rule


def train_rows(cfg: Config, name: str) -> list[dict]:
    """``runs`` SGD runs of ``rule`` at ``train_budget`` rollouts per step: the gap J* − J(θ),
    the success rate J(θ) and cumulative rollouts after every step (``training``), and the
    rollouts until the gap first halves (``trained``)."""
    gaps, wins, spent = _curves(cfg, name)  # (steps + 1, runs)
    settings = steps.setting_columns(cfg, steps.TRAIN_COLUMNS)
    rows = [
        {
            "table": "training",
            "rule": name,
            "step": t,
            "rollouts": float(spent[t].mean()),
            "gap": float(gaps[t].mean()),
            "gap_ci": _ci(gaps[t]),
            "success": float(wins[t].mean()),
            "success_ci": _ci(wins[t]),
            "runs": cfg.runs,
            **settings,
        }
        for t in range(cfg.steps + 1)
    ]
    hit = gaps <= gaps[0] / 2
    reach = np.where(hit.any(0), spent[np.argmax(hit, 0), np.arange(cfg.runs)], math.nan)
    ok = np.isfinite(reach)
    trained = {
        "table": "trained",
        "rule": name,
        "budget": cfg.train_budget,
        "steps": cfg.steps,
        "rollouts_to_half_gap": float(reach[ok].mean()) if ok.any() else math.nan,
        "rollouts_to_half_gap_ci": _ci(reach[ok]) if ok.sum() > 1 else math.nan,
        "reached": int(ok.sum()),
        "runs": cfg.runs,
        "final_gap": float(gaps[-1].mean()),
        "final_gap_ci": _ci(gaps[-1]),
        "final_success": float(wins[-1].mean()),
        "rollouts": float(spent[-1].mean()),
        **settings,
    }
    return [*rows, trained]


def _curves(cfg: Config, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The gap, the success rate J(θ) and the cumulative rollouts of ``runs`` SGD runs of rule
    ``name`` after every step, (steps + 1, runs) each; step t draws the same responses for every
    rule (paired)."""
    rule = rules.RULES[name]
    env = steps.Bandit.of(cfg.instance)
    P, A = env.success.shape
    R, budget = cfg.runs, cfg.train_budget
    a1, a0, _ = steps._tables(cfg.estimator, cfg.cap)
    theta = np.broadcast_to(env.theta, (R, P, A)).copy()
    state = steps.fresh_state(R, P)
    M = steps.response_slots(cfg, budget)
    rollouts = np.zeros(R)
    wins, spent = [], []
    for t in range(cfg.steps + 1):
        pi = env.policy(theta)
        wins.append(np.sum(env.f * np.sum(pi * env.success, -1), -1))
        spent.append(rollouts.copy())
        if t == cfg.steps:
            break
        oracle = steps.oracle_curves(env.truth(pi), a1, a0) if rule.reads == "truth" else None
        view = steps.view_of(cfg, env, pi, state, a1, a0, oracle)
        a, z = steps.draw(steps.rng_of(cfg, "train", t), pi, env.success, (R, P, M))
        G, _, gen, ghat, n, c, seen = steps.step(
            rule, view, budget, pi, env.success, a, z, steps.rng_of(cfg, "train-rule", t, name)
        )
        theta = theta + cfg.lr * env.f[:, None] * ghat
        rollouts = rollouts + gen.sum(-1)
        state = steps.observe(state, seen, gen, cfg.decay, z)  # every reward drawn is seen
    wins, spent = np.stack(wins), np.stack(spent)
    return env.optimum() - wins, wins, spent


def _ci(x) -> float:
    x = np.asarray(x, float)
    return float(Z95 * x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else math.nan


REPORT = (
    "rule budget rollouts mse mse_se theory_mse scaled_mse cos snr zero_signal kept "
    "knapsack_value nonzero_groups update_cost"
).split()
TRAINED_REPORT = (
    "rule budget rollouts_to_half_gap rollouts_to_half_gap_ci reached final_gap final_gap_ci"
).split()


def report(cfg: Config, tables: dict) -> str:
    return "\n\n".join(
        (table_text(tables["results"], REPORT), table_text(tables["trained"], TRAINED_REPORT))
    )


def figures(tables: dict) -> dict:
    from gpolab.labs.allocate import plots

    return {
        "allocate_mse.png": plots.mse_figure,
        "allocate_training.png": plots.training_figure,
        "allocate_sizes.png": plots.sizes_figure,
    }
