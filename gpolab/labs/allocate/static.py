"""The allocation lab's static results: every rule at one budget on common draws, at the
instance's θ after one earlier step (:mod:`gpolab.labs.allocate.lab`, tables ``results`` and
``allocation``)."""

from __future__ import annotations

import math

import numpy as np

from gpolab.labs.allocate import rules, steps
from gpolab.labs.allocate.config import Config

SPLITS = 8  # independent batches of seeds: bias² and its SE
CHUNK = 256  # seeds per numpy chunk (memory: chunk x prompts x draws x actions booleans)


def static_rows(cfg: Config, budget: int) -> list[dict]:
    """Every rule at one budget on common draws (module docstring: ``results``, ``allocation``)."""
    env = steps.Bandit.of(cfg.instance)
    pi = env.policy(env.theta)
    t = env.truth(pi)
    acc = _accumulate(cfg, budget, env, pi, t)
    rows = []
    for name in cfg.rules:
        rule = rules.RULES[name]
        row = acc[name].row(env.f, t["g"])
        why = _theory_reason(rule, steps.rule_tables(rule, cfg.estimator, cfg.cap)[2], cfg.cap)
        if why:
            row["theory_mse"] = row["theory_mse_se"] = math.nan
        rows.append(
            {
                "table": "results",
                "rule": name,
                "budget": budget,
                **row,
                "theory": why or "count table, given the allocation",
                "reads": rule.reads,
                "source": rule.source,
                "assumed": rule.assumed,
                **steps.setting_columns(cfg, steps.STATIC_COLUMNS),
            }
        )
        G = acc[name].G / acc[name].n
        rows += [
            {"table": "allocation", "rule": name, "budget": budget, "prompt": x, "p": p, "G": g}
            for x, (p, g) in enumerate(zip(t["V"].tolist(), G.tolist(), strict=True))
        ]
    return rows


def _accumulate(cfg: Config, budget: int, env: steps.Bandit, pi, t: dict) -> dict:
    """Per rule, the running sums (:class:`_Acc`) of its step over ``cfg.seeds`` seeds in chunks:
    one earlier step of ``history`` responses per prompt, then every rule on the same draws."""
    P, A = env.success.shape
    a1, a0, _ = steps._tables(cfg.estimator, cfg.cap)
    trains = {
        r: (rules.RULES[r].estimator or cfg.estimator, rules.RULES[r].adv_clip) for r in cfg.rules
    }
    oracles = {
        k: steps.oracle_curves(t, *steps._tables(k[0], cfg.cap, k[1])[:2])
        for k in set(trains.values())
    }
    oracle = oracles.get((cfg.estimator, None)) or steps.oracle_curves(t, a1, a0)
    M = steps.response_slots(cfg, budget)
    acc = {r: _Acc(P, A) for r in cfg.rules}
    for start in range(0, cfg.seeds, CHUNK):
        S = min(CHUNK, cfg.seeds - start)
        rng = steps.rng_of(cfg, budget, start)
        _, zh = steps.draw(rng, pi, env.success, (S, P, cfg.history))
        state = steps.observe(
            steps.fresh_state(S, P), zh.sum(-1), np.full((S, P), cfg.history), cfg.decay, zh
        )
        view = steps.view_of(cfg, env, pi, state, a1, a0, oracle)
        a, z = steps.draw(rng, pi, env.success, (S, P, M))
        for name in cfg.rules:
            rule = rules.RULES[name]
            G, weight, gen, ghat, n, c, _ = steps.step(
                rule, view, budget, pi, env.success, a, z, steps.rng_of(cfg, budget, start, name)
            )
            fixed = rule.kind in ("allocate", "staged")  # sizes fixed before the rewards
            exact = steps.exact_given(oracles[trains[name]], env.f, G, weight) if fixed else None
            post = (view.alpha, view.beta)
            acc[name].add(env.f, t["g"], ghat, gen, n, c, exact, G, t["V"], post)
    return acc


def _theory_reason(rule: rules.Rule, reasons: tuple, cap: int) -> str:
    if rule.kind == "downsample":
        return "none: the kept responses are chosen by their rewards"
    if rule.kind == "pilot":
        return "none: admission reads the pilots' rewards, which the trained group pools"
    if rule.kind == "sequential":
        return "none: sampling stops on the rewards; global-mean baseline"
    bad = [G for G in range(2, cap + 1) if reasons[G]]
    return f"none: {reasons[bad[0]]}" if bad else ""


OWN = ("knapsack_value", "nonzero_groups", "update_cost", "hit_share", "hit_posterior")


def own_objectives(n, c, gen, p, alpha=None, beta=None) -> dict:
    """Each rule on the others' objectives, per seed (S,): Knapsack RL's value Σ_x value(n_x,
    p_x) at the true p of the responses trained on, the share of the P prompts whose trained
    group holds both outcomes (a non-zero loo or GRPO gradient), the update cost, responses
    trained on per response generated (PODS's saving), and HORA's hit utility at the true p:
    the expected share of prompts with a correct response among the step's generated ones,
    mean_x 1 − (1 − p_x)^gen_x (exact given the allocation), and with the Beta(``alpha``,
    ``beta``) posteriors the rules read, the same share as HORA computes it, mean_x U_x(gen_x)
    (:func:`rules.hit_utility`, NaN without them)."""
    value = np.where(n >= 1, rules.knapsack_value(n, p), 0.0).sum(-1)
    mixed = np.mean((c > 0) & (c < n), -1)
    cost = n.sum(-1) / np.maximum(gen.sum(-1), 1)
    hit = np.mean(1 - (1 - p) ** gen, -1)
    post = np.full(hit.shape, np.nan)
    if alpha is not None:
        U = rules.hit_utility(alpha, beta, int(gen.max()))
        post = np.mean(np.take_along_axis(U, gen[..., None].astype(np.int64), -1)[..., 0], -1)
    return {
        "knapsack_value": value,
        "nonzero_groups": mixed,
        "update_cost": cost,
        "hit_share": hit,
        "hit_posterior": post,
    }


class _Acc:
    """Running sums over seeds of one rule's step estimates."""

    def __init__(self, P: int, A: int):
        self.n = 0
        names = "sq sq2 cos cos2 gen zero kept ex ex2 norm2 norm4 dot dot2 dot_norm2".split()
        self.sums = dict.fromkeys([*names, *OWN], 0.0)
        self.mean = np.zeros((P, A))
        self.splits = np.zeros((SPLITS, P, A))  # sums of ĝ per independent batch of seeds
        self.split_n = np.zeros(SPLITS)
        self.G = np.zeros(P)

    def add(self, f, g, ghat, gen, n, c, exact, G, p, posterior=(None, None)) -> None:
        fe = f[:, None] * (ghat - g)
        sq = np.sum(fe**2, (-1, -2))
        est = f[:, None] * ghat
        tgt = f[:, None] * g
        norm = np.sqrt(np.sum(est**2, (-1, -2)))
        cos = np.sum(est * tgt, (-1, -2)) / np.where(norm > 0, norm * np.sqrt(np.sum(tgt**2)), 1)
        zero = np.sum(np.where((n < 2) | (c == 0) | (c == n), gen, 0), -1) / np.maximum(
            gen.sum(-1), 1
        )  # share of the step's rollouts in groups without signal
        s = self.sums
        s["sq"] += sq.sum()
        s["sq2"] += np.sum(sq**2)
        s["cos"] += cos.sum()
        s["cos2"] += np.sum(cos**2)
        s["gen"] += gen.sum()
        s["zero"] += zero.sum()
        s["kept"] += np.sum(n >= 2)
        s["norm2"] += np.sum(norm**2)
        s["norm4"] += np.sum(norm**4)
        dot = np.sum(est * tgt, (-1, -2))
        s["dot"] += dot.sum()
        s["dot2"] += np.sum(dot**2)
        s["dot_norm2"] += np.sum(dot * norm**2)
        for k, v in own_objectives(n, c, gen, p, *posterior).items():
            s[k] += v.sum()
        if exact is not None:
            s["ex"] += exact.sum()
            s["ex2"] += np.sum(exact**2)
        else:
            s["ex"] = math.nan
        self.mean += ghat.sum(0)
        which = (self.n + np.arange(len(sq))) % SPLITS
        np.add.at(self.splits, which, ghat)
        np.add.at(self.split_n, which, 1)
        self.G += G.sum(0)
        self.n += len(sq)

    def bias_sq(self, f, g) -> tuple[float, float]:
        """‖E ĝ − g‖² (f-weighted) without its noise: the mean over pairs of independent batches
        of (m_i − g)·(m_j − g), unbiased, with a jackknife SE over the batches."""
        d = f[:, None] * (self.splits / self.split_n[:, None, None] - g)
        d = d.reshape(SPLITS, -1)
        gram = d @ d.T

        def pairs(keep):
            sub = gram[np.ix_(keep, keep)]
            k = len(keep)
            return (sub.sum() - np.trace(sub)) / (k * (k - 1))

        every = np.arange(SPLITS)
        full = pairs(every)
        loo = np.array([pairs(np.delete(every, i)) for i in every])
        return float(full), float(np.sqrt((SPLITS - 1) / SPLITS * np.sum((loo - loo.mean()) ** 2)))

    def scaled_mse(self, f, g) -> tuple[float, float]:
        """The MSE after the best single rescaling of ĝ, ‖g‖² − E[ĝ·g]²/E‖ĝ‖² (f-weighted;
        invariant to rescaling the advantages, as the zoo's ``scaled_mse``), with its delta-method
        SE over the seeds."""
        s, n = self.sums, self.n
        a, b = s["dot"] / n, s["norm2"] / n
        if b <= 0:
            return float(np.sum((f[:, None] * g) ** 2)), 0.0
        va, vb = s["dot2"] / n - a * a, s["norm4"] / n - b * b
        cov = s["dot_norm2"] / n - a * b
        da, db = -2 * a / b, a * a / (b * b)
        var = max(da * da * va + 2 * da * db * cov + db * db * vb, 0.0) / (n - 1)
        return float(np.sum((f[:, None] * g) ** 2) - a * a / b), math.sqrt(var)

    def row(self, f, g) -> dict:
        s, n = self.sums, self.n

        def mean_se(a, b):
            m = s[a] / n
            return m, math.sqrt(max(s[b] / n - m * m, 0.0) / (n - 1)) if np.isfinite(
                m
            ) else math.nan

        mse, mse_se = mean_se("sq", "sq2")
        ex, ex_se = mean_se("ex", "ex2")
        cos, cos_se = mean_se("cos", "cos2")
        m = f[:, None] * self.mean / n
        variance = max(s["norm2"] / n - float(np.sum(m**2)), 0.0) * n / (n - 1)
        bias_sq, bias_sq_se = self.bias_sq(f, g)
        scaled, scaled_se = self.scaled_mse(f, g)
        signal = float(np.sum(m**2))
        snr = signal / variance if variance > 0 else math.inf if signal > 0 else math.nan
        return {
            "rollouts": s["gen"] / n,
            "mse": mse,
            "mse_se": mse_se,
            "theory_mse": ex,
            "theory_mse_se": ex_se,
            "bias_sq": bias_sq,
            "bias_sq_se": bias_sq_se,
            "variance": variance,
            "scaled_mse": scaled,
            "scaled_mse_se": scaled_se,
            "cos": cos,
            "cos_se": cos_se,
            "snr": snr,
            "zero_signal": s["zero"] / n,
            "kept": s["kept"] / n,
            **{k: s[k] / n for k in OWN},
            "n_seeds": n,
        }
