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
import functools
import math
from typing import ClassVar

import numpy as np

from gpolab import configs, envs, estimators, validate
from gpolab.configs import option
from gpolab.engine import Z95
from gpolab.envs import bandit
from gpolab.labs.allocate import rules
from gpolab.runner.labs import table_text
from gpolab.runner.store import PROVENANCE, cell_key, config_hash, resume
from gpolab.theory import allocation as theory

NAME = "allocate"
TABLES = ("results", "match", "training", "trained", "allocation")
# the rules read the tabular bandit's per-prompt p (the lab builds its instance)
NEEDS = envs.Needs(fields=("kind", "prompts", "lengths", "dynamic_sampling"), only=("bandit",))
INSTANCES = envs.instances(*envs.names(NEEDS))
# the lab's instance: a skewed difficulty mix (bandit.Instance defaults otherwise)
INSTANCE = {"prompts": 64, "actions": 8, "logit_scale": 2.0, "success_a": 0.5, "success_b": 2.0}
SCHEMA = 3  # 2: faithful Knapsack RL and GVM-RAFT, own-objective columns (issue 40); 3: GVM's
# gradient quantity, Knapsack RL's advantage clip and verl GRPO, scaled_mse (issue 55)
MAY_BE_NAN = {
    "results": ("theory_mse", "theory_mse_se"),
    "trained": ("rollouts_to_half_gap", "rollouts_to_half_gap_ci"),
}
SPLITS = 8  # independent batches of seeds: bias² and its SE
CHUNK = 256  # seeds per numpy chunk (memory: chunk x prompts x draws x actions booleans)
ROUNDS = 4  # Reinforce-Ada's rounds (its script's max_rounds)
JSON = (
    "rule",
    "budget",
    "rollouts",
    "mse",
    "mse_se",
    "theory_mse",
    "theory_mse_se",
    "theory",
    "bias_sq",
    "bias_sq_se",
    "variance",
    "scaled_mse",
    "scaled_mse_se",
    "cos",
    "cos_se",
    "snr",
    "zero_signal",
    "kept",
    "knapsack_value",
    "nonzero_groups",
    "update_cost",
    "reads",
    "source",
    "estimator",
    "n_seeds",
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


INSTANCE_COLUMNS = ("prompts", "actions", "logit_scale", "success_a", "success_b", "instance_seed")
STATIC_COLUMNS = ("estimator", "cap", "history", "rho", "decay", *INSTANCE_COLUMNS)
TRAIN_COLUMNS = ("estimator", "cap", "rho", "decay", "train_budget", "lr", *INSTANCE_COLUMNS)


def setting_columns(cfg: Config, names) -> dict:
    """The settings a row's numbers depend on, as its columns."""
    return {n: configs.value(cfg, n) for n in names}


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


# ---------------------------------------------------------------- the bandit, exactly (numpy)


@dataclasses.dataclass(frozen=True)
class Bandit:
    """The tabular bandit as numpy arrays: success (P, A), prompt weights f (P,), initial θ."""

    success: np.ndarray
    f: np.ndarray
    theta: np.ndarray

    @classmethod
    def of(cls, inst: bandit.Instance) -> Bandit:
        params = bandit.make(inst)
        return cls(
            *(
                np.asarray(x, np.float64)
                for x in (params.success, params.prompt_probs, params.theta)
            )
        )

    def policy(self, theta: np.ndarray) -> np.ndarray:
        z = np.exp(theta - theta.max(-1, keepdims=True))
        return z / z.sum(-1, keepdims=True)

    def truth(self, pi: np.ndarray) -> dict:
        """Exact per-prompt quantities at policy π (..., P, A): V, g_x (local), ‖g_x‖², S2 =
        E‖W‖², e_wz2 = E[‖W‖² Z] and w_correct = E[‖W‖ | Z = 1] (0 where V = 0) with W = e_a − π
        the response's score ∇_θx log π(a|x) (theory §3)."""
        p = self.success
        V = np.sum(pi * p, -1)
        g = pi * (p - V[..., None])
        w2 = score_sq(pi)
        e_wz = np.sum(pi * p * np.sqrt(w2), -1)
        return {
            "V": V,
            "g": g,
            "gsq": np.sum(g**2, -1),
            "S2": np.sum(pi * w2, -1),
            "e_wz2": np.sum(pi * p * w2, -1),
            "w_correct": np.where(V > 0, e_wz / np.where(V > 0, V, 1), 0.0),
        }

    def optimum(self) -> float:
        return float(self.f @ self.success.max(-1))


def score_sq(pi: np.ndarray) -> np.ndarray:
    """‖e_a − π‖² (..., P, A): the squared norm of each action's score ∇_θx log π(a|x)."""
    return 1 - 2 * pi + np.sum(pi**2, -1, keepdims=True)


def correct_score_norm(pi: np.ndarray, a: np.ndarray, z: np.ndarray) -> np.ndarray:
    """GVM-RAFT's gradient quantity from sampled responses (their ``calc_grad_logp``): the mean
    over the correct responses of each group (actions ``a``, rewards ``z``, (S, P, M)) of the
    score norm ‖∇ log π(a|x)‖ = ‖e_a − π_x‖; 0 where no response is correct."""
    norm = np.sqrt(score_sq(pi))  # (P, A)
    per = np.take_along_axis(np.broadcast_to(norm, z.shape[:2] + norm.shape[-1:]), a, -1)
    wins = z.sum(-1)
    return np.where(wins > 0, np.sum(per * z, -1) / np.maximum(wins, 1), 0.0)


def draw(rng, pi: np.ndarray, success: np.ndarray, shape: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Actions and binary rewards (S, P, M) of M responses per prompt at policy π ((P, A) or
    (S, P, A)): inverse CDF, then a Bernoulli of the action's success probability."""
    S, P, M = shape
    cdf = np.cumsum(pi, -1)
    cdf = np.broadcast_to(cdf, (S, P, cdf.shape[-1]))
    u = rng.random(shape)
    a = np.minimum((u[..., None] > cdf[:, :, None, :]).sum(-1), success.shape[-1] - 1)
    z = rng.random(shape) < np.take_along_axis(
        np.broadcast_to(success, (S,) + success.shape), a, axis=-1
    )
    return a, z


def _rank(mask: np.ndarray) -> np.ndarray:
    """0-based rank of each True along the last axis among the Trues (−1 elsewhere)."""
    return np.where(mask, np.cumsum(mask, -1) - 1, -1)


def _take(z: np.ndarray, gen: np.ndarray, k: np.ndarray, total) -> np.ndarray:
    """Of the generated responses, the first k successes and the first total − k failures."""
    wins = z & (_rank(z & gen) < k[..., None])
    losses = ~z & (_rank(~z & gen) < (total - k)[..., None])
    return gen & (wins | losses)


def used_responses(rule: rules.Rule, G: np.ndarray, z: np.ndarray, budget: int):
    """What the rule trains on: (use mask (S, P, M), generated (S, P), global-baseline
    advantages or None).  ``allocate``: the first G_x responses; ``downsample`` (PODS): of the
    G_x generated, the m = G_x/2 with the largest reward variance; ``sequential``
    (Reinforce-Ada): rounds until n/2 successes and n/2 failures, then n of them."""
    S, P, M = z.shape
    pos = np.arange(M)
    if rule.kind == "allocate":
        return pos < G[..., None], G, None
    if rule.kind == "downsample":
        gen = pos < G[..., None]
        m = np.maximum(G // 2, 2)
        c = np.sum(z & gen, -1)
        k = np.clip(m // 2, np.maximum(0, m - (G - c)), np.minimum(m, c))
        return _take(z, gen, k, m), G, None
    r = budget // P  # sequential: Reinforce-Ada, balanced
    n = max(r // 2, 2)
    rounds = np.arange(1, ROUNDS + 1) * r
    wins = np.stack([np.sum(z[..., :L], -1) for L in rounds], -1)  # (S, P, rounds)
    done = (wins >= n // 2) & (rounds - wins >= n - n // 2)
    j = np.where(done.any(-1), np.argmax(done, -1), ROUNDS - 1)
    gen_n = rounds[j]
    gen = pos < gen_n[..., None]
    c = np.sum(z & gen, -1)
    k = np.minimum(c, np.maximum(n // 2, n - (gen_n - c)))
    adv = z - (c / gen_n)[..., None]  # A = r − (success rate of all drawn for the prompt)
    return _take(z, gen, k, n), gen_n, adv


def estimate(pi, a, z, use, adv, a1, a0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-prompt estimates ĝ_x = (1/n_x) Σ_used A_i (e_{a_i} − π_x) (S, P, A), the used sizes
    n_x and successes c_x.  A from the count table at the used size (or ``adv`` when given)."""
    S, P, M = z.shape
    A = pi.shape[-1]
    n = use.sum(-1)
    c = np.sum(z & use, -1)
    if adv is None:
        others = np.clip(c[..., None] - z, 0, a1.shape[1] - 1)
        n_idx = np.broadcast_to(n[..., None], z.shape)
        adv = np.where(z, a1[n_idx, others], a0[n_idx, others])
    w = np.where(use, adv, 0.0)
    idx = (np.arange(S)[:, None, None] * P + np.arange(P)[None, :, None]) * A + a
    sums = np.bincount(idx.ravel(), weights=w.ravel(), minlength=S * P * A).reshape(S, P, A)
    total = w.sum(-1)
    ghat = (sums - total[..., None] * pi) / np.maximum(n, 1)[..., None]
    return np.where((n >= 1)[..., None], ghat, 0.0), n, c


# ---------------------------------------------------------------- one step of a rule


def response_slots(cfg: Config, budget: int) -> int:
    """Responses drawn per prompt and seed (the most any rule can use at this budget)."""
    P = cfg.instance.prompts
    return max(cfg.cap + stage_size(budget, P), ROUNDS * (budget // P))


def stage_size(budget: int, P: int) -> int:
    """GVM-RAFT's fresh first stage per prompt: half the step's rollouts (their run_em.sh
    draws as many per prompt in stage 1 as in stage 2)."""
    return max(budget // (2 * P), 1)


@functools.lru_cache(maxsize=8)
def _tables(spec: str, g_max: int, clip: float | None = None) -> tuple:
    """Count tables of ``spec`` at G ≤ ``g_max`` (:func:`gpolab.theory.allocation.tables`),
    once per process; with ``clip``, every advantage clipped to [−clip, clip] (the trainer's
    clamp after the estimator, as Knapsack RL's ``adv_clip_value``)."""
    a1, a0, reasons = theory.tables(spec, g_max)
    if clip is not None:
        a1, a0 = np.clip(a1, -clip, clip), np.clip(a0, -clip, clip)
    return a1, a0, reasons


def rule_tables(rule: rules.Rule, spec: str, g_max: int) -> tuple:
    """The count tables ``rule`` trains with: its own estimator (else the lab's ``spec``), its
    advantages clipped where its authors clip them."""
    return _tables(rule.estimator or spec, g_max, rule.adv_clip)


def oracle_curves(t: dict, a1, a0) -> dict:
    """Exact curves of the lab's estimator from the truth ``t`` (theory §12)."""
    return {**theory.all_curves(a1, a0, t["V"], t["gsq"], t["S2"], t["e_wz2"]), "gsq": t["gsq"]}


def view_of(cfg: Config, env: Bandit, pi, state: dict, a1, a0, oracle) -> rules.View:
    t = env.truth(pi)
    state = {k: v for k, v in state.items() if k != "kn_buf"}
    return rules.View(
        f=env.f,
        p=t["V"],
        gnorm=np.sqrt(t["gsq"]),
        score_correct=t["w_correct"],
        gvm_norm=t["w_correct"],
        oracle=oracle,
        **state,
        a1=a1,
        a0=a0,
        cap=cfg.cap,
        rho=cfg.rho,
        estimator=cfg.estimator,
    )


def fresh_state(S: int, P: int) -> dict:
    zeros = np.zeros((S, P))
    return {
        "alpha": np.ones((S, P)),
        "beta": np.ones((S, P)),
        "last_c": zeros,
        "last_n": zeros,
        "kn_p": zeros,
        "kn_count": zeros,
        "kn_buf": np.full((S, P, rules.KNAPSACK_BUFFER), np.nan),
        "streak_easy": zeros,
        "streak_hard": zeros,
        "p_easy": np.full(S, 0.5),
        "p_hard": np.full(S, 0.5),
    }


def knapsack_buffer(buf: np.ndarray, z: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Knapsack RL's reward buffer after a group: the latest ``KNAPSACK_BUFFER`` rewards, newest
    first (NaN: empty); the group's rewards are ``z[..., :n]`` (S, P, M)."""
    B = buf.shape[-1]
    j = np.arange(B)
    last = np.clip(n[..., None] - 1 - j, 0, z.shape[-1] - 1).astype(np.int64)
    new = np.take_along_axis(z, last, -1)  # their order: the group's rewards reversed
    old = np.take_along_axis(buf, np.clip(j - n[..., None], 0, B - 1).astype(np.int64), -1)
    return np.where(j < n[..., None], new, np.where(j - n[..., None] >= 0, old, np.nan))


def observe(state: dict, c: np.ndarray, n: np.ndarray, decay: float, z=None) -> dict:
    """The rules' information after a step whose groups had c successes of n (n = 0: the prompt
    was not sampled): decayed Beta counts (MoPPS's update, prior Beta(1, 1)), the last group,
    GRESO's streaks and its adaptive keep probabilities (targets 0.25/3 easy, 0.25·2/3 hard),
    and with the rewards ``z`` (S, P, M; the group is ``z[..., :n]``) Knapsack RL's p̂: the
    group's rate if it holds 16 rewards or more, else the rate of the latest 16 (their
    ``update_sample_state`` with epoch and robust estimation, the run script's settings)."""
    seen = n > 0
    easy, hard = seen & (c == n), seen & (c == 0)
    out = dict(state)
    out["alpha"] = np.where(seen, decay * state["alpha"] + (1 - decay) + c, state["alpha"])
    out["beta"] = np.where(seen, decay * state["beta"] + (1 - decay) + n - c, state["beta"])
    out["last_c"], out["last_n"] = (
        np.where(seen, c, state["last_c"]),
        np.where(seen, n, state["last_n"]),
    )
    out["streak_easy"] = np.where(
        seen, np.where(easy, state["streak_easy"] + 1, 0), state["streak_easy"]
    )
    out["streak_hard"] = np.where(
        seen, np.where(hard, state["streak_hard"] + 1, 0), state["streak_hard"]
    )
    if z is not None:
        buf = knapsack_buffer(state["kn_buf"], z, n)
        with np.errstate(invalid="ignore"):
            recent = np.nanmean(np.where(seen[..., None], buf, 0.0), -1)
        whole = n >= rules.KNAPSACK_BUFFER
        rate = np.where(whole, c / np.maximum(n, 1), recent)
        out["kn_buf"] = np.where(seen[..., None], buf, state["kn_buf"])
        out["kn_p"] = np.where(seen, rate, state["kn_p"])
        out["kn_count"] = state["kn_count"] + n
    groups = np.maximum(seen.sum(-1), 1)
    for name, share, target in (("p_easy", easy, 0.25 / 3), ("p_hard", hard, 0.25 * 2 / 3)):
        ratio = share.sum(-1) / groups
        out[name] = np.clip(state[name] + np.where(ratio >= target, -0.01, 0.01), 0.05, 0.95)
    return out


def step(rule: rules.Rule, view: rules.View, budget: int, pi, success, a, z, rng_rule, a1, a0):
    """One step of ``rule``: its allocation, the responses it uses, its estimate.  ``staged``
    (GVM-RAFT): the first ``stage_size`` slots of every prompt are its fresh first stage, read
    by the rule (its success rate and the mean score norm of its correct responses) and counted
    in the rollouts; the allocation of the rest is trained on."""
    if rule.estimator is not None or rule.adv_clip is not None:
        a1, a0 = rule_tables(rule, view.estimator, a1.shape[0] - 1)[:2]
    if rule.kind == "staged":
        P = z.shape[1]
        s = stage_size(budget, P)
        first = dataclasses.replace(
            view,
            last_c=z[..., :s].sum(-1).astype(float),
            last_n=np.full(view.shape, float(s)),
            gvm_norm=correct_score_norm(pi, a[..., :s], z[..., :s]),
        )
        G = rule.fn(first, budget - s * P, rng_rule)
        pos = np.arange(z.shape[-1])
        use = (pos >= s) & (pos < s + G[..., None])
        generated, adv, weight = s + G, None, np.ones(G.shape)
    else:
        G = rule.fn(view, budget, rng_rule)
        G, weight = G if isinstance(G, tuple) else (G, np.ones(G.shape))
        use, generated, adv = used_responses(rule, G, z, budget)
    ghat, n, c = estimate(pi, a, z, use, adv, a1, a0)
    seen = np.sum(z & (np.arange(z.shape[-1]) < generated[..., None]), -1)
    return G, weight, generated, weight[..., None] * ghat, n, c, seen


def exact_given(oracle: dict, f, G, weight) -> np.ndarray:
    """The step's exact MSE given each seed's allocation G and weights w (..., P):
    Σ_x f_x² (w² E‖ĝ_x(G_x)‖² − 2 w κ_x ‖g_x‖² + ‖g_x‖²)."""
    sec, kap = (
        np.take_along_axis(
            np.broadcast_to(oracle[k], G.shape + oracle[k].shape[-1:]), G[..., None], -1
        )[..., 0]
        for k in ("second_moment", "kappa")
    )
    gsq = oracle["gsq"]
    return np.sum(f**2 * (weight**2 * sec - 2 * weight * kap * gsq + gsq), -1)


# ---------------------------------------------------------------- static results


def _rng(cfg: Config, *parts) -> np.random.Generator:
    """A numpy stream per (seed, unit part...): strings enter through a stable hash."""
    import zlib

    ints = [p if isinstance(p, int) else zlib.crc32(str(p).encode()) for p in parts]
    return np.random.default_rng([cfg.seed, SCHEMA, *ints])


def static_rows(cfg: Config, budget: int) -> list[dict]:
    """Every rule at one budget on common draws (module docstring: ``results``, ``allocation``)."""
    env = Bandit.of(cfg.instance)
    P, A = env.success.shape
    pi = env.policy(env.theta)
    t = env.truth(pi)
    a1, a0, reasons = _tables(cfg.estimator, cfg.cap)
    own = {r: rule_tables(rules.RULES[r], cfg.estimator, cfg.cap) for r in cfg.rules}
    trains = {r: (rules.RULES[r].estimator or cfg.estimator, rules.RULES[r].adv_clip) for r in own}
    oracles = {k: oracle_curves(t, *_tables(k[0], cfg.cap, k[1])[:2]) for k in set(trains.values())}
    oracle = oracles.get((cfg.estimator, None)) or oracle_curves(t, a1, a0)
    M = response_slots(cfg, budget)
    acc = {r: _Acc(P, A) for r in cfg.rules}
    for start in range(0, cfg.seeds, CHUNK):
        S = min(CHUNK, cfg.seeds - start)
        rng = _rng(cfg, budget, start)
        _, zh = draw(rng, pi, env.success, (S, P, cfg.history))
        state = observe(fresh_state(S, P), zh.sum(-1), np.full((S, P), cfg.history), cfg.decay, zh)
        view = view_of(cfg, env, pi, state, a1, a0, oracle)
        a, z = draw(rng, pi, env.success, (S, P, M))
        for name in cfg.rules:
            rule = rules.RULES[name]
            G, weight, gen, ghat, n, c, _ = step(
                rule, view, budget, pi, env.success, a, z, _rng(cfg, budget, start, name), a1, a0
            )
            own_oracle = oracles[trains[name]]
            exact = (
                exact_given(own_oracle, env.f, G, weight)
                if rule.kind in ("allocate", "staged")
                else None
            )
            acc[name].add(env.f, t["g"], ghat, gen, n, c, exact, G, t["V"])
    rows = []
    for name in cfg.rules:
        rule = rules.RULES[name]
        row = acc[name].row(env.f, t["g"])
        why = _theory_reason(rule, own[name][2], cfg.cap)
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
                **setting_columns(cfg, STATIC_COLUMNS),
            }
        )
        for x in range(P):
            rows.append(
                {
                    "table": "allocation",
                    "rule": name,
                    "budget": budget,
                    "prompt": x,
                    "p": float(t["V"][x]),
                    "G": float(acc[name].G[x] / acc[name].n),
                }
            )
    return rows


def _theory_reason(rule: rules.Rule, reasons: tuple, cap: int) -> str:
    if rule.kind == "downsample":
        return "none: the kept responses are chosen by their rewards"
    if rule.kind == "sequential":
        return "none: sampling stops on the rewards; global-mean baseline"
    bad = [G for G in range(2, cap + 1) if reasons[G]]
    return f"none: {reasons[bad[0]]}" if bad else ""


def own_objectives(n, c, gen, p) -> dict:
    """Each rule on the others' objectives, per seed (S,): Knapsack RL's value Σ_x value(n_x,
    p_x) at the true p of the responses trained on, the share of the P prompts whose trained
    group holds both outcomes (a non-zero loo or GRPO gradient) and the update cost, responses
    trained on per response generated (PODS's saving)."""
    value = np.where(n >= 1, rules.knapsack_value(n, p), 0.0).sum(-1)
    mixed = np.mean((c > 0) & (c < n), -1)
    cost = n.sum(-1) / np.maximum(gen.sum(-1), 1)
    return {"knapsack_value": value, "nonzero_groups": mixed, "update_cost": cost}


class _Acc:
    """Running sums over seeds of one rule's step estimates."""

    def __init__(self, P: int, A: int):
        self.n = 0
        self.sums = dict.fromkeys(
            (
                "sq",
                "sq2",
                "cos",
                "cos2",
                "gen",
                "zero",
                "kept",
                "ex",
                "ex2",
                "norm2",
                "norm4",
                "dot",
                "dot2",
                "dot_norm2",
                "value",
                "mixed",
                "cost",
            ),
            0.0,
        )
        self.mean = np.zeros((P, A))
        self.splits = np.zeros((SPLITS, P, A))  # sums of ĝ per independent batch of seeds
        self.split_n = np.zeros(SPLITS)
        self.G = np.zeros(P)

    def add(self, f, g, ghat, gen, n, c, exact, G, p) -> None:
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
        own = own_objectives(n, c, gen, p)
        s["value"] += own["knapsack_value"].sum()
        s["mixed"] += own["nonzero_groups"].sum()
        s["cost"] += own["update_cost"].sum()
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
            "knapsack_value": s["value"] / n,
            "nonzero_groups": s["mixed"] / n,
            "update_cost": s["cost"] / n,
            "n_seeds": n,
        }


# ---------------------------------------------------------------- training


def train_rows(cfg: Config, name: str) -> list[dict]:
    """``runs`` SGD runs of ``rule`` at ``train_budget`` rollouts per step: the gap J* − J(θ),
    the success rate J(θ) and cumulative rollouts after every step."""
    rule = rules.RULES[name]
    env = Bandit.of(cfg.instance)
    P, A = env.success.shape
    R, budget = cfg.runs, cfg.train_budget
    a1, a0, _ = _tables(cfg.estimator, cfg.cap)
    theta = np.broadcast_to(env.theta, (R, P, A)).copy()
    state = fresh_state(R, P)
    best = env.optimum()
    M = response_slots(cfg, budget)
    rollouts = np.zeros(R)
    gaps, wins, spent = [], [], []
    for t in range(cfg.steps + 1):
        pi = env.policy(theta)
        J = np.sum(env.f * np.sum(pi * env.success, -1), -1)
        gaps.append(best - J)
        wins.append(J)
        spent.append(rollouts.copy())
        if t == cfg.steps:
            break
        oracle = oracle_curves(env.truth(pi), a1, a0) if rule.reads == "truth" else None
        view = view_of(cfg, env, pi, state, a1, a0, oracle)
        rng = _rng(cfg, "train", t)  # the same responses for every rule at step t (paired)
        a, z = draw(rng, pi, env.success, (R, P, M))
        G, _, gen, ghat, n, c, seen = step(
            rule, view, budget, pi, env.success, a, z, _rng(cfg, "train-rule", t, name), a1, a0
        )
        theta = theta + cfg.lr * env.f[:, None] * ghat
        rollouts = rollouts + gen.sum(-1)
        state = observe(state, seen, gen, cfg.decay, z)  # every reward drawn is seen
    gaps, wins, spent = (np.stack(x) for x in (gaps, wins, spent))  # (T + 1, R)
    rows = []
    for t in range(cfg.steps + 1):
        rows.append(
            {
                "table": "training",
                "rule": name,
                "step": t,
                "rollouts": float(spent[t].mean()),
                "gap": float(gaps[t].mean()),
                "gap_ci": _ci(gaps[t]),
                "success": float(wins[t].mean()),
                "success_ci": _ci(wins[t]),
                "runs": R,
                **setting_columns(cfg, TRAIN_COLUMNS),
            }
        )
    half = gaps[0] / 2
    reach = np.array(
        [
            spent[np.argmax(gaps[:, r] <= half[r]), r]
            if np.any(gaps[:, r] <= half[r])
            else math.nan
            for r in range(R)
        ]
    )
    ok = np.isfinite(reach)
    rows.append(
        {
            "table": "trained",
            "rule": name,
            "budget": budget,
            "steps": cfg.steps,
            "rollouts_to_half_gap": float(reach[ok].mean()) if ok.any() else math.nan,
            "rollouts_to_half_gap_ci": _ci(reach[ok]) if ok.sum() > 1 else math.nan,
            "reached": int(ok.sum()),
            "runs": R,
            "final_gap": float(gaps[-1].mean()),
            "final_gap_ci": _ci(gaps[-1]),
            "final_success": float(wins[-1].mean()),
            "rollouts": float(spent[-1].mean()),
            **setting_columns(cfg, TRAIN_COLUMNS),
        }
    )
    return rows


def _ci(x) -> float:
    x = np.asarray(x, float)
    return float(Z95 * x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else math.nan


# ---------------------------------------------------------------- analysis


EXACT_RULES = ("uniform-gstar", "gpolab-oracle", "gpolab-sample")


@functools.lru_cache(maxsize=4)
def _instance_curves(cfg: Config) -> tuple[dict, np.ndarray]:
    env = Bandit.of(cfg.instance)
    t = env.truth(env.policy(env.theta))
    return oracle_curves(t, *_tables(cfg.estimator, cfg.cap)[:2]), env.f


def exact_mse_at(cfg: Config, rule: str, budget: float) -> float:
    """The exact MSE of a deterministic design at any budget (theory §12): the keep-all greedy
    (budget ≥ 2 per prompt), the sampled design or uniform G* (any budget ≥ 2)."""
    o, f = _instance_curves(cfg)
    P = len(f)
    if rule == "gpolab-sample":
        return float(theory.sampled_design(o["second_moment"], o["kappa"], o["gsq"], f, budget).mse)
    if rule == "uniform-gstar":
        return theory.uniform_design(o["second_moment"], o["kappa"], o["gsq"], f, int(budget))[2]
    if budget < 2 * P:
        return math.inf
    G = theory.greedy(o["mse"], f**2, int(budget))
    return float(theory.step_mse(o["mse"], f**2, G))


def exact_match(cfg: Config, rule: str, target: float, top: int) -> float:
    """The smallest budget (to one rollout) at which ``rule``'s exact MSE reaches ``target``,
    by bisection over 2..``top`` (the MSE falls with the budget); NaN if it never does."""
    target = target * (1 + 1e-9)  # equal designs (uniform itself) match at the same budget
    lo, hi = 2, top
    if exact_mse_at(cfg, rule, hi) > target:
        return math.nan
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if exact_mse_at(cfg, rule, mid) > target else (lo, mid)
    return float(hi)


def match_table(results, cfg: Config | None = None):
    """Per rule and budget: the rollouts the rule needs to reach uniform's MSE at that budget
    (exact conditional MSE where the rule has it, else the Monte Carlo MSE; log-log
    interpolation along the rule's own curve) and the ratio to uniform's rollouts.  With
    ``cfg``, the designs of :data:`EXACT_RULES` also get the exact answer at any budget
    (``rollouts_to_match_exact``, ``ratio_exact``), below the smallest budget measured too, and
    against uniform G*'s exact MSE at that budget (``gstar_mse``, ``rollouts_to_match_gstar``,
    ``ratio_gstar``)."""
    import pandas as pd

    if "uniform" not in set(results["rule"]):
        return pd.DataFrame(
            columns=["rule", "budget", "uniform_mse", "rollouts_to_match", "ratio", "basis"]
        )
    score = results["theory_mse"].where(results["theory_mse"].notna(), results["mse"])
    df = results.assign(score=score)
    uni = df[df["rule"] == "uniform"].sort_values("budget")
    rows = []
    for rule, cur in df.groupby("rule", sort=False):
        cur = cur.sort_values("rollouts")
        basis = "theory_mse" if cur["theory_mse"].notna().all() else "mse"
        for _, u in uni.iterrows():
            need = theory.matching_budget(cur["rollouts"], cur["score"], u["score"])
            row = {
                "rule": rule,
                "budget": int(u["budget"]),
                "uniform_mse": u["score"],
                "rollouts_to_match": need,
                "ratio": need / u["rollouts"],
                "basis": basis,
            }
            if cfg is not None and rule in EXACT_RULES:
                exact = exact_match(cfg, rule, float(u["score"]), int(u["budget"]))
                star = exact_mse_at(cfg, "uniform-gstar", int(u["budget"]))
                vs = exact_match(cfg, rule, star, int(u["budget"]))
                row |= {
                    "rollouts_to_match_exact": exact,
                    "ratio_exact": exact / u["budget"],
                    "gstar_mse": star,
                    "rollouts_to_match_gstar": vs,
                    "ratio_gstar": vs / u["budget"],
                }
            rows.append(row)
    return pd.DataFrame(rows)


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
        store,
        cell_keys(cfg),
        compute,
        config_hash=config_hash(cfg),
        on_skip=None if progress is None else progress.skip,
        on_unit=None if progress is None else lambda rows: progress.update(1, label(rows)),
    )
    df = df.drop(columns=[c for c in PROVENANCE if c in df])
    tables = {}
    for name in ("results", "training", "trained", "allocation"):
        t = df[df["table"] == name].drop(columns="table")
        # the store holds every row kind: keep this table's columns (NaN-able ones always)
        t = t[[c for c in t.columns if t[c].notna().any() or c in MAY_BE_NAN.get(name, ())]]
        tables[name] = t.reset_index(drop=True)
    for name, cols in (
        ("results", ("budget", "n_seeds")),
        ("training", ("step", "runs")),
        ("allocation", ("budget", "prompt")),
    ):
        for c in cols:
            tables[name][c] = tables[name][c].astype(int)
    tables["match"] = match_table(tables["results"], cfg)
    return {name: tables.get(name, pd.DataFrame()) for name in TABLES}


def report(cfg: Config, tables: dict) -> str:
    res = tables["results"]
    lines = [
        table_text(
            res,
            (
                "rule",
                "budget",
                "rollouts",
                "mse",
                "mse_se",
                "theory_mse",
                "scaled_mse",
                "cos",
                "snr",
                "zero_signal",
                "kept",
                "knapsack_value",
                "nonzero_groups",
                "update_cost",
            ),
        )
    ]
    lines += [
        "",
        table_text(
            tables["trained"],
            (
                "rule",
                "budget",
                "rollouts_to_half_gap",
                "rollouts_to_half_gap_ci",
                "reached",
                "final_gap",
                "final_gap_ci",
            ),
        ),
    ]
    return "\n".join(lines)


BIAS_SHARE = 0.001  # "unbiased": bias² below this share of its own MSE (95% bound)
BIAS_CONTROL = "gpolab-drop"  # the negative control: biased by construction (drops prompts)


def bias_verdicts(res):
    """Per row, what the run can say about bias² = ‖E ĝ − g‖² (``bias_sq``: pairs of
    :data:`SPLITS` independent seed batches, jackknife SE): ``biased`` where bias² exceeds t·SE
    (t the two-sided 95% point of Student's t with SPLITS − 1 degrees of freedom, 2.36: the SE is
    estimated from SPLITS batches); ``unbiased`` where the upper bound max(bias², 0) + t·SE (the
    largest bias² this run could have missed) is below :data:`BIAS_SHARE` of the row's MSE (0.1%:
    below the MSE's own standard error, 0.3–1% of the MSE at the default 2000 seeds, so no bias
    that small can decide a ranking of MSEs);
    ``cannot tell`` otherwise (the run is too small to see a bias that would matter), and for
    every row of a budget where the negative control :data:`BIAS_CONTROL` (when run) is not
    found biased.  NaN is never a pass."""
    import pandas as pd
    from scipy import stats

    t = float(stats.t.ppf(0.975, SPLITS - 1))
    b, se, mse = (res[c].to_numpy(float) for c in ("bias_sq", "bias_sq_se", "mse"))
    with np.errstate(invalid="ignore"):
        biased = b > t * se
        bound = np.maximum(b, 0) + t * se
        clear = bound <= BIAS_SHARE * mse
    out = np.where(biased, "biased", np.where(clear, "unbiased", "cannot tell"))
    out = pd.Series(out, index=res.index)
    ctrl = res["rule"] == BIAS_CONTROL
    for budget in res.loc[ctrl, "budget"]:
        if out[ctrl & (res["budget"] == budget)].iloc[0] != "biased":
            out[(res["budget"] == budget) & (out == "unbiased")] = "cannot tell"
    return out


def unbiased(res):
    """Rows found unbiased by :func:`bias_verdicts` (bias² significantly below
    :data:`BIAS_SHARE` of their MSE, with the negative control found biased)."""
    return res[bias_verdicts(res) == "unbiased"]


def _verdict_text(cur, v=None) -> str:
    """The bias verdicts of one budget's rows (``v``: :func:`bias_verdicts` of ``cur``, computed
    here when not given), grouped: 'biased: a, b; cannot tell: c'."""
    v = bias_verdicts(cur) if v is None else v
    parts = [
        f"{k}: {', '.join(cur.loc[v == k, 'rule'])}"
        for k in ("biased", "cannot tell")
        if (v == k).any()
    ]
    ctrl = cur["rule"] == BIAS_CONTROL
    if not ctrl.any():
        parts.append(f"no negative control ({BIAS_CONTROL} not run)")
    elif v[ctrl].iloc[0] != "biased":
        parts.append(f"the negative control {BIAS_CONTROL} was not found biased")
    return "; ".join(parts)


def _winner(cur) -> str:
    cur = cur.sort_values("mse")
    if len(cur) < 2:
        return f"{cur.iloc[0]['rule']}" if len(cur) else "—"
    best, second = cur.iloc[0], cur.iloc[1]
    se = math.hypot(best["mse_se"], second["mse_se"])
    how = "by more than 2 SE" if second["mse"] - best["mse"] > 2 * se else "tied within 2 SE"
    return (
        f"{best['rule']} (MSE {best['mse']:.4g}; next {second['rule']} {second['mse']:.4g}, {how})"
    )


def notes(cfg: Config, tables: dict) -> str:
    """Who has the lowest MSE at each budget, among every rule and among the ones found unbiased
    (a biased rule buys its MSE by leaving prompts out; :func:`bias_verdicts`), with the rules
    found biased and those the run cannot tell; the exact rollouts the gpolab designs
    need to match uniform G; the fastest training."""
    res, match, trained = tables["results"], tables["match"], tables["trained"]
    lines = []
    for budget, cur in res.groupby("budget"):
        verdicts = bias_verdicts(cur)
        fair = cur[verdicts == "unbiased"]
        best = _winner(fair) if len(fair) else "none (too few seeds to tell: raise --seeds)"
        lines.append(
            f"N = {budget}: lowest MSE {_winner(cur)}; among rules found unbiased "
            f"(bias² below {BIAS_SHARE:.1%} of their MSE, 95% bound) {best}; "
            f"{_verdict_text(cur, verdicts)}"
        )
    col = "ratio_exact" if "ratio_exact" in match else "ratio"
    for rule in ("gpolab-sample", "gpolab-oracle", "gpolab"):
        m = match[match["rule"] == rule]
        if len(m):
            c = col if m[col].notna().any() else "ratio"
            ratios = ", ".join(f"{r.budget}: {getattr(r, c):.3f}" for r in m.itertuples())
            lines.append(f"{rule}: rollouts to match uniform G, as a fraction ({c}): {ratios}")
    done = trained.dropna(subset=["rollouts_to_half_gap"]).sort_values("rollouts_to_half_gap")
    if len(done):
        b, uni = done.iloc[0], done[done["rule"] == "uniform"]
        text = f"{uni['rollouts_to_half_gap'].iloc[0]:.0f}" if len(uni) else "did not get there"
        lines.append(
            f"training: fastest to half the gap {b['rule']} "
            f"({b['rollouts_to_half_gap']:.0f} rollouts); uniform {text}"
        )
    return "\n".join(lines)


def figures(tables: dict) -> dict:
    from gpolab.labs.allocate import plots

    return {
        "allocate_mse.png": plots.mse_figure,
        "allocate_training.png": plots.training_figure,
        "allocate_sizes.png": plots.sizes_figure,
    }
