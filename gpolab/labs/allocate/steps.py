"""The allocation lab's numpy machinery: the tabular bandit exactly, draws of responses, one
step of a rule (its allocation, the responses it uses, its estimate) and the rules' information
between steps (:mod:`gpolab.labs.allocate.lab`)."""

from __future__ import annotations

import dataclasses
import functools
import zlib

import numpy as np

from gpolab import configs
from gpolab.envs import bandit
from gpolab.labs.allocate import rules
from gpolab.labs.allocate.config import Config
from gpolab.theory import allocation as theory

SCHEMA = 3  # 2: faithful Knapsack RL and GVM-RAFT, own-objective columns (issue 40); 3: GVM's
# gradient quantity, Knapsack RL's advantage clip and verl GRPO, scaled_mse (issue 55)


ROUNDS = 4  # Reinforce-Ada's rounds (its script's max_rounds)


INSTANCE_COLUMNS = ("prompts", "actions", "logit_scale", "success_a", "success_b", "instance_seed")
STATIC_COLUMNS = ("estimator", "cap", "history", "rho", "decay", *INSTANCE_COLUMNS)
RULE_SETTINGS = ("cap", "rho", "estimator")  # the settings a rule reads (:class:`rules.View`)
TRAIN_COLUMNS = ("estimator", "cap", "rho", "decay", "train_budget", "lr", *INSTANCE_COLUMNS)


def setting_columns(cfg: Config, names) -> dict:
    """The settings a row's numbers depend on, as its columns."""
    return {n: configs.value(cfg, n) for n in names}


def rng_of(cfg: Config, *parts) -> np.random.Generator:
    """A numpy stream per (seed, unit part...): strings enter through a stable hash."""
    ints = [p if isinstance(p, int) else zlib.crc32(str(p).encode()) for p in parts]
    return np.random.default_rng([cfg.seed, SCHEMA, *ints])


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
    draws as many per prompt in stage 1 as in stage 2); Pilot-Commit's pilots too (its scripts
    pilot 3 × the prompts they commit, with a third of the commit's rollouts: a round's pilots
    cost as much as a step's commits)."""
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
        a1=a1,
        a0=a0,
        **state,
        **setting_columns(cfg, RULE_SETTINGS),
    )


def fresh_state(S: int, P: int) -> dict:
    """The rules' information before any step (:func:`observe` updates it): prior Beta(1, 1),
    no group seen, an empty reward buffer, GRESO's keep probabilities at 1/2."""
    zeros = np.zeros((S, P))
    seen = ("last_c", "last_n", "profile_c", "profile_n", "kn_p", "kn_count")
    seen += ("streak_easy", "streak_hard")
    return {
        "alpha": np.ones((S, P)),
        "beta": np.ones((S, P)),
        **dict.fromkeys(seen, zeros),
        "kn_buf": np.full((S, P, rules.KNAPSACK_BUFFER), np.nan),
        **dict.fromkeys(("p_easy", "p_hard"), np.full(S, 0.5)),
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
    the first group (sGPO's profile),
    GRESO's streaks and its adaptive keep probabilities (targets 0.25/3 easy, 0.25·2/3 hard),
    and with the rewards ``z`` (S, P, M; the group is ``z[..., :n]``) Knapsack RL's p̂: the
    group's rate if it holds 16 rewards or more, else the rate of the latest 16 (their
    ``update_sample_state`` with epoch and robust estimation, the run script's settings)."""
    seen = n > 0
    easy, hard = seen & (c == n), seen & (c == 0)
    out = dict(state)
    out["alpha"] = np.where(seen, decay * state["alpha"] + (1 - decay) + c, state["alpha"])
    out["beta"] = np.where(seen, decay * state["beta"] + (1 - decay) + n - c, state["beta"])
    for name, x in (("last_c", c), ("last_n", n)):  # the last group seen
        out[name] = np.where(seen, x, state[name])
    first = seen & (state["profile_n"] == 0)  # the first group seen: sGPO's profile
    for name, x in (("profile_c", c), ("profile_n", n)):
        out[name] = np.where(first, x, state[name])
    for name, hit in (("streak_easy", easy), ("streak_hard", hard)):
        out[name] = np.where(seen, np.where(hit, state[name] + 1, 0), state[name])
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


def step(rule: rules.Rule, view: rules.View, budget: int, pi, success, a, z, rng_rule):
    """One step of ``rule``: its allocation, the responses it uses, its estimate (with the count
    tables of ``view``, or the rule's own: :func:`rule_tables`).  ``staged``
    (GVM-RAFT): the first ``stage_size`` slots of every prompt are its fresh first stage, read
    by the rule (its success rate and the mean score norm of its correct responses) and counted
    in the rollouts; the allocation of the rest is trained on.  ``pilot`` (Pilot-Commit): the
    same first stage (the pilots); the rule's commits follow them, and a committed prompt trains
    on pilots and commits pooled (G: that pooled size, 0 for a prompt not committed)."""
    a1, a0 = view.a1, view.a0
    if rule.estimator is not None or rule.adv_clip is not None:
        a1, a0 = rule_tables(rule, view.estimator, a1.shape[0] - 1)[:2]
    if rule.kind in ("staged", "pilot"):
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
        if rule.kind == "staged":
            use = (pos >= s) & (pos < s + G[..., None])
            generated = s + G
        else:  # pilot: the committed prompts train on their pilots and commits pooled
            G = np.where(G > 0, s + G, 0)
            use = pos < G[..., None]
            generated = np.maximum(G, s)
        adv, weight = None, np.ones(G.shape)
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
