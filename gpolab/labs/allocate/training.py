"""The allocation lab's training curves: SGD on the bandit with each rule
(:mod:`gpolab.labs.allocate.lab`, tables ``training`` and ``trained``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from gpolab.engine import Z95
from gpolab.labs.allocate import rules
from gpolab.labs.allocate.steps import (
    TRAIN_COLUMNS,
    Bandit,
    _tables,
    draw,
    fresh_state,
    observe,
    oracle_curves,
    response_slots,
    rng_of,
    setting_columns,
    step,
    view_of,
)

if TYPE_CHECKING:
    from gpolab.labs.allocate.lab import Config


def train_rows(cfg: Config, name: str) -> list[dict]:
    """``runs`` SGD runs of ``rule`` at ``train_budget`` rollouts per step: the gap J* − J(θ),
    the success rate J(θ) and cumulative rollouts after every step (``training``), and the
    rollouts until the gap first halves (``trained``)."""
    gaps, wins, spent = _curves(cfg, name)  # (steps + 1, runs)
    settings = setting_columns(cfg, TRAIN_COLUMNS)
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
    env = Bandit.of(cfg.instance)
    P, A = env.success.shape
    R, budget = cfg.runs, cfg.train_budget
    a1, a0, _ = _tables(cfg.estimator, cfg.cap)
    theta = np.broadcast_to(env.theta, (R, P, A)).copy()
    state = fresh_state(R, P)
    M = response_slots(cfg, budget)
    rollouts = np.zeros(R)
    wins, spent = [], []
    for t in range(cfg.steps + 1):
        pi = env.policy(theta)
        wins.append(np.sum(env.f * np.sum(pi * env.success, -1), -1))
        spent.append(rollouts.copy())
        if t == cfg.steps:
            break
        oracle = oracle_curves(env.truth(pi), a1, a0) if rule.reads == "truth" else None
        view = view_of(cfg, env, pi, state, a1, a0, oracle)
        a, z = draw(rng_of(cfg, "train", t), pi, env.success, (R, P, M))
        G, _, gen, ghat, n, c, seen = step(
            rule, view, budget, pi, env.success, a, z, rng_of(cfg, "train-rule", t, name), a1, a0
        )
        theta = theta + cfg.lr * env.f[:, None] * ghat
        rollouts = rollouts + gen.sum(-1)
        state = observe(state, seen, gen, cfg.decay, z)  # every reward drawn is seen
    wins, spent = np.stack(wins), np.stack(spent)
    return env.optimum() - wins, wins, spent


def _ci(x) -> float:
    x = np.asarray(x, float)
    return float(Z95 * x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else math.nan
