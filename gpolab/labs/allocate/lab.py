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
  per response generated, HORA's hit utility at the true p: the expected share of prompts with a
  correct response among those generated, and as HORA computes it under the posterior the
  rules read, ``hit_posterior``); for rules fixing group sizes before sampling (or,
  GVM-RAFT, after its fresh first stage), also ``theory_mse``, the exact MSE given each seed's
  allocation averaged over seeds (checked against the Monte Carlo).
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

import math

import numpy as np

from gpolab import configs
from gpolab.engine import Z95
from gpolab.kit.store import cell_key, resumed
from gpolab.kit.tables import table_text
from gpolab.labs.allocate import rules, steps
from gpolab.labs.allocate.analysis import match_table, notes  # noqa: F401 (protocol: notes)

# the lab protocol's NAME, NEEDS, Config (and the instance, the estimator check) live in config
from gpolab.labs.allocate.config import INSTANCE, INSTANCES, NAME, NEEDS, Config, check_estimator  # noqa: F401
from gpolab.labs.allocate.static import static_rows
from gpolab.labs.allocate.steps import SCHEMA

TABLES = ("results", "match", "training", "trained", "allocation")
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
        "nonzero_groups update_cost hit_share hit_posterior reads source estimator n_seeds"
    ).split()
)
JSON_TABLES = {"results": JSON, "trained": None, "training": None}  # --json: every answer


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

    df = resumed(cfg, store, cell_keys(cfg), compute, progress=progress, label=label)
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


REPORT = {  # the report's tables and their columns
    "results": "rule budget rollouts mse mse_se theory_mse scaled_mse cos snr zero_signal kept "
    "knapsack_value nonzero_groups update_cost hit_share hit_posterior",
    "trained": "rule budget rollouts_to_half_gap rollouts_to_half_gap_ci reached final_gap "
    "final_gap_ci",
}


def report(cfg: Config, tables: dict) -> str:
    return "\n\n".join(table_text(tables[name], cols.split()) for name, cols in REPORT.items())


def figures(tables: dict) -> dict:
    from gpolab.labs.allocate import plots

    return {
        "allocate_mse.png": plots.mse_figure,
        "allocate_training.png": plots.training_figure,
        "allocate_sizes.png": plots.sizes_figure,
    }
