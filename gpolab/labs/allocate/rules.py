"""Per-prompt rollout allocation rules: who gets how many responses in a step (``gpolab allocate``).

Every rule is one small function of what a trainer knows before (or while) sampling, with the
paper it follows, what it reads and what gpolab assumed: each rule follows its authors' code
(read through the search tool, cited by repository, file and function; docs/allocate.md#ports
lists every difference).  Arrays carry a leading seeds axis: (S, P).

``View`` is what a rule may read.  ``kind``: ``allocate`` (group sizes fixed before sampling),
``downsample`` (generate, then train on a subset chosen by reward: PODS), ``sequential``
(sample in rounds until a condition holds: Reinforce-Ada), ``staged`` (a first stage of
fresh responses for every prompt, whose rewards the rule reads, then the allocation of the rest,
trained on: GVM-RAFT's scripts) or ``pilot`` (the same first stage, then new responses for the
prompts the rule admits, trained on pooled with their first stage: Pilot-Commit); the lab draws
the responses.  Rules without authors' code are gpolab's constructions and named so
(``gpolab-…``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from gpolab import validate
from gpolab.theory import allocation as theory

READS = ("nothing", "truth", "posterior", "last step", "history", "fresh stage")


@dataclasses.dataclass(frozen=True)
class View:
    """What the rules may read at one step (numpy; (S, P) unless noted)."""

    f: np.ndarray  # (P,) prompt weights
    p: np.ndarray  # (P,) true success probabilities (oracle rules only)
    gnorm: np.ndarray  # (P,) true ‖g_x‖ (oracle rules, gpolab's GVM variants)
    score_correct: np.ndarray  # (P,) exact E[‖∇ log π(y|x)‖ | y correct] (0 where p_x = 0)
    gvm_norm: np.ndarray  # GVM-RAFT's gradient quantity: the mean score norm ‖∇ log π(y|x)‖
    # over the correct responses of the group it reads, 0 where none is correct ((S, P); ``staged``
    # rules: their fresh first stage; else ``score_correct``)
    oracle: dict | None  # exact curves of the lab's estimator at the current θ: "mse",
    # "second_moment", "kappa" ((..., P, g_max + 1)) and "gsq" = ‖g_x‖² (oracle rules only)
    alpha: np.ndarray  # Beta posterior of p_x from the rewards seen so far (prior Beta(1, 1))
    beta: np.ndarray
    last_c: np.ndarray  # successes of the prompt's last observed group
    last_n: np.ndarray  # its size (0: never observed; ``staged``, ``pilot``: the fresh first stage)
    profile_c: np.ndarray  # successes of the prompt's first observed group (sGPO's profile)
    profile_n: np.ndarray  # its size (0: never observed)
    kn_p: np.ndarray  # Knapsack RL's p̂: the last group's rate if it has >= 16 responses, else
    # the rate of the prompt's latest 16 rewards (their reward buffer)
    kn_count: np.ndarray  # rewards seen for the prompt (their validity: >= 8)
    streak_easy: np.ndarray  # consecutive latest observed groups all correct (GRESO)
    streak_hard: np.ndarray  # consecutive latest observed groups all wrong
    p_easy: np.ndarray  # (S,) GRESO's keep probability base for easy prompts
    p_hard: np.ndarray  # (S,)
    a1: np.ndarray  # count tables of the lab's estimator (theory.tables)
    a0: np.ndarray
    cap: int  # most responses one prompt may get
    rho: float  # signal share of gpolab's reward-only rule
    estimator: str

    @property
    def shape(self) -> tuple[int, int]:
        return self.alpha.shape


@dataclasses.dataclass(frozen=True)
class Rule:
    name: str
    fn: Callable  # (view, budget, rng) -> G (S, P) int   (allocate, downsample: generated)
    kind: str  # allocate | downsample | sequential
    reads: str
    source: str
    assumed: str = ""
    estimator: str | None = None  # the rule's own estimator (None: the lab's)
    adv_clip: float | None = None  # advantages clipped to ±adv_clip after the estimator (None: not)


def _even(view: View, budget: int, eligible: np.ndarray) -> np.ndarray:
    """``budget`` rollouts per seed spread as evenly as possible over the eligible prompts (the
    lower-indexed ones get the remainder), at most ``cap`` each."""
    k = np.maximum(eligible.sum(-1, keepdims=True), 1)
    base = np.minimum(budget // k, view.cap)
    rank = np.cumsum(eligible, -1) - 1
    extra = (rank < budget - base * k) & (base < view.cap)
    return np.where(eligible, base + extra, 0).astype(np.int64)


def _rounded(share: np.ndarray, budget: int, cap: int) -> np.ndarray:
    """Integer sizes ∝ ``share`` (S, P) summing to ``budget`` (largest remainders), each ≤ cap."""
    share = np.where(np.isfinite(share) & (share > 0), share, 0.0)
    total = share.sum(-1, keepdims=True)
    want = np.where(
        total > 0, budget * share / np.where(total > 0, total, 1), budget / share.shape[-1]
    )
    n = np.minimum(np.floor(want), cap)
    left = budget - n.sum(-1, keepdims=True)
    order = np.argsort(-(want - n) - 1e9 * (n >= cap), axis=-1, kind="stable")
    rank = np.argsort(order, axis=-1, kind="stable")
    return (n + ((rank < left) & (n < cap))).astype(np.int64)


def _posterior_mean(view: View) -> np.ndarray:
    return view.alpha / (view.alpha + view.beta)


def _last_rate(view: View, default: float = np.nan) -> np.ndarray:
    return np.where(view.last_n > 0, view.last_c / np.maximum(view.last_n, 1), default)


def uniform(view: View, budget: int, rng) -> np.ndarray:
    """Every prompt the same G = budget / P (what GRPO trainers do)."""
    return _even(view, budget, np.ones(view.shape, bool))


def uniform_gstar(view: View, budget: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """The best uniform rule: B of the P prompts drawn at random, G = budget/B each, weighted
    P/B, with (B, G) the exact-MSE-optimal pair (uniform G*; true moments, as ``gpolab
    groupsize`` finds it).  B = P is plain uniform G."""
    o = view.oracle
    lead = o["mse"].shape[:-2]
    S, P = view.shape
    G = np.zeros(view.shape, np.int64)
    weight = np.zeros(view.shape)
    for s in range(S):
        i = (s,) if lead else ()
        B, size, _ = theory.uniform_design(
            o["second_moment"][i], o["kappa"][i], o["gsq"][i], view.f, budget
        )
        pick = rng.permutation(P)[:B]
        G[s, pick] = size
        weight[s, pick] = P / B
    return G, weight


def gpolab_oracle(view: View, budget: int, rng) -> np.ndarray:
    """gpolab: the allocation minimizing the step's exact MSE Σ_x f_x² MSE_x(G_x) (theory §12),
    every prompt kept (G_x ≥ 2), from the true moments: the bound no trainer can reach."""
    curve = view.oracle["mse"][..., : view.cap + 1]
    G = theory.greedy(curve, view.f**2, budget)
    return np.broadcast_to(G, view.shape).astype(np.int64)


def gpolab_drop(view: View, budget: int, rng) -> np.ndarray:
    """gpolab: the step-MSE optimum when prompts may be left out (G_x = 0): drops the prompts
    whose group's noise exceeds their whole gradient (true moments; theory §12).  Lowest MSE per
    step, biased: what a shrunken step costs shows in training."""
    curve = view.oracle["mse"][..., : view.cap + 1]
    G = theory.lagrangian(np.broadcast_to(curve, view.shape + curve.shape[-1:]), view.f**2, budget)
    return G.astype(np.int64)


def gpolab_sample(view: View, budget: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """gpolab: the unbiased sampled design (theory §12): prompt x is included with probability
    π_x (independently), gets its own G_x and weight 1/π_x; (π, G) minimize the exact MSE at
    ``budget`` expected rollouts (:func:`gpolab.theory.allocation.sampled_design`, true
    moments; its expected rollouts are ``budget`` exactly: at the multiplier's jump the step
    takes one side or the other at random, :class:`gpolab.theory.allocation.Design`).  Returns
    (G, weight), G = 0 where a prompt is not drawn."""
    o = view.oracle
    S = view.shape[0]
    d = theory.sampled_design(o["second_moment"], o["kappa"], o["gsq"], view.f, budget)
    alt = (rng.random(S) < np.broadcast_to(d.q, (S,)))[:, None]
    pi = np.where(alt, d.alt_pi, d.pi)
    size = np.where(alt, d.alt_size, d.size)
    drawn = rng.random((S, view.shape[-1])) < pi
    return np.where(drawn, size, 0).astype(np.int64), np.where(drawn, 1 / pi, 0.0)


def gpolab_posterior(view: View, budget: int, rng) -> np.ndarray:
    """gpolab: the same minimization with each prompt's Beta posterior of p from the rewards seen
    so far and reward-only moments (signal share ρ; exact under the posterior:
    :func:`gpolab.theory.allocation.posterior_curves`)."""
    ab = np.stack([view.alpha, view.beta], -1).reshape(-1, 2)
    uniq, inv = np.unique(ab, axis=0, return_inverse=True)
    a1, a0 = view.a1[: view.cap + 1, : view.cap], view.a0[: view.cap + 1, : view.cap]
    curves = theory.posterior_curves(a1, a0, uniq[:, 0], uniq[:, 1], view.rho)
    curve = curves[inv.reshape(-1)].reshape(view.shape + (view.cap + 1,))
    return theory.greedy(curve, view.f**2, budget).astype(np.int64)


KNAPSACK_MIN_N, KNAPSACK_MIN_BUFFER = 2, 8  # their run script: MIN_N (= NEGATIVE_N = POSITIVE_N)
KNAPSACK_BUFFER = 16  # and REWARD_BUFFER_LENGTH, MIN_BUFFER_LENGTH
KNAPSACK_ADV_CLIP = 5.0  # their ADV_CLIP_VALUE: ray_trainer.py clamps the advantages to ±5


def knapsack_value(N, p):
    """Knapsack RL's value of N responses at success rate p: (1 − p^N − (1 − p)^N) p (1 − p)²
    (their ``dp_core_numba``)."""
    N, p = np.asarray(N, float), np.asarray(p, float)
    return (1 - p**N - (1 - p) ** N) * p * (1 - p) ** 2


def knapsack_cost(p):
    """Their per-prompt cost (``cost_estimation = "probability"``, α = 0.9): log(0.1) /
    log(max(p, 1 − p)) for 0 < p < 1; ∞ at p = 0, 0 at p = 1."""
    p = np.asarray(p, float)
    with np.errstate(divide="ignore"):
        inner = np.log(0.1) / np.log(np.where((p > 0) & (p < 1), np.maximum(p, 1 - p), 0.5))
    return np.where(p <= 0, np.inf, np.where(p >= 1, 0.0, inner))


def knapsack_one(p: np.ndarray, valid: np.ndarray, budget: int, max_n: int) -> np.ndarray:
    """One step of ``sampling_budget_by_knapsack`` (liziniu/KnapsackRL,
    verl/trainer/ppo/exploration_utils.py) for one seed: p̂ (P,), validity (P,) bool.

    As their code: min_n = 2 to every valid prompt (0 < p̂ < 1 and p̂ ∈ {0, 1} alike), n = N/P to
    the invalid ones; if no prompt has 0 < p̂ < 1, the rest goes evenly to the p̂ = 0 prompts
    (the invalid ones count as p̂ = 0 there: their ``success_rates`` stay 0);
    else the DP gets only Σ int(min(max_n, cost)) when that is below the rest (the fallback),
    and the excess goes evenly to the p̂ = 0 prompts (to the other all-equal ones if none); the
    DP maximizes Σ value over extras k ≤ max_n − min_n, a prompt given no extra counting 0 (their
    ``solve_by_dp``; the sequence 0, v(3), v(4), … is concave, so the greedy is the DP's optimum);
    what the DP cannot place goes evenly to the DP's prompts.  gpolab: sizes are held to
    ``max_n`` (the lab's cap), what would pass it is spread where there is room."""
    P = len(p)
    n = budget // P
    eff = valid & (p > 0) & (p < 1)
    zero = ~valid | (p == 0)  # their success_rates stay 0 for the invalid prompts
    out = np.where(valid, KNAPSACK_MIN_N, n).astype(np.int64)
    left = budget - int(out.sum())
    if left > 0 and not eff.any():
        out += _split(left, zero if zero.any() else np.ones(P, bool))
    elif left > 0:
        est = int(np.sum(np.floor(np.minimum(max_n, knapsack_cost(p[eff])))))
        if est < left:
            rest = zero if zero.any() else ~eff
            out += _split(left - est, rest if rest.any() else eff)  # all-effective: gpolab's
            left = est
        k = np.arange(1, max_n - KNAPSACK_MIN_N + 1)
        value = knapsack_value(k + KNAPSACK_MIN_N, p[eff][:, None])
        curve = np.concatenate([np.zeros((eff.sum(), 1)), value], -1)
        gains = np.diff(curve, axis=-1).ravel()
        order = np.argsort(-gains, kind="stable")[:left]
        extra = np.zeros(gains.shape, np.int64)
        extra[order] = 1
        extra = extra.reshape(eff.sum(), -1).sum(-1)
        out[eff] += extra + _split(left - int(extra.sum()), np.ones(eff.sum(), bool))
    over = np.maximum(out - max_n, 0)
    out = np.minimum(out, max_n)
    return out + _even_one(int(over.sum()), np.ones(P, bool), max_n - out)


def _split(n: int, where: np.ndarray) -> np.ndarray:
    """``n`` evenly over ``where`` (their loops: the first ``n mod k`` get one more)."""
    k = max(int(where.sum()), 1)
    return np.where(where, n // k + (np.cumsum(where) - 1 < n % k), 0).astype(np.int64)


def knapsack(view: View, budget: int, rng) -> np.ndarray:
    """Knapsack RL as its authors run it (:func:`knapsack_one` per seed): p̂ from their 16-reward
    buffer, a prompt valid once 8 rewards were seen, bounds 2…cap (their MAX_N = 128)."""
    return _knapsack_seeds(view, view.kn_p, view.kn_count >= KNAPSACK_MIN_BUFFER, budget)


def knapsack_truth(view: View, budget: int, rng) -> np.ndarray:
    """gpolab's bound for Knapsack RL: their rule (:func:`knapsack_one`) fed the true p of every
    prompt, all valid: what their allocation does for their own value when p̂ is exact."""
    return _knapsack_seeds(
        view, np.broadcast_to(view.p, view.shape), np.ones(view.shape, bool), budget
    )


def _knapsack_seeds(view: View, p: np.ndarray, valid: np.ndarray, budget: int) -> np.ndarray:
    """:func:`knapsack_one` for each seed's p̂ and validity (S, P), bounds 2…``view.cap``."""
    return np.stack([knapsack_one(p[s], valid[s], budget, view.cap) for s in range(len(p))])


def gpolab_knapsack_simple(view: View, budget: int, rng) -> np.ndarray:
    """gpolab's simplified Knapsack RL (the lab's port before issue 40): their value function and
    2…cap bounds, p̂ from the prompt's last group, no cost model or fallback: all-equal prompts
    get the minimum and the rollouts no solvable prompt can use are spread over them."""
    p = _last_rate(view)
    solvable = (p > 0) & (p < 1)
    G = np.arange(view.cap + 1)
    q = np.where(solvable, p, 0.5)[..., None]
    curve = np.where(solvable[..., None], -knapsack_value(G, q), 0.0)
    gains = -np.diff(curve[..., 2:], axis=-1)  # concave value: greedy = their DP
    extra = budget - 2 * view.shape[-1]
    flat = gains.reshape(view.shape[0], -1)
    order = np.argsort(-flat, axis=-1, kind="stable")
    positive = np.take_along_axis(flat, order, -1) > 0
    take = np.arange(flat.shape[-1]) < np.minimum(extra, positive.sum(-1, keepdims=True))
    chosen = np.zeros(flat.shape, bool)
    np.put_along_axis(chosen, order, take, axis=-1)
    out = 2 + chosen.reshape(gains.shape).sum(-1)
    idle = ~solvable
    idle = np.where(idle.any(-1, keepdims=True), idle, True)
    for eligible in (idle, np.ones_like(idle)):  # then anywhere there is room
        left = budget - out.sum(-1)
        out = out + np.stack(
            [_even_one(int(left[s]), eligible[s], view.cap - out[s]) for s in range(len(left))]
        )
    return out.astype(np.int64)


def _even_one(n: int, eligible: np.ndarray, room: np.ndarray) -> np.ndarray:
    """``n`` rollouts over one seed's eligible prompts, round-robin, within ``room``."""
    add = np.zeros(eligible.shape, np.int64)
    idx = np.flatnonzero(eligible & (room > 0))
    while n > 0 and len(idx):
        step = np.minimum(room[idx] - add[idx], -(-n // len(idx)))
        step = np.minimum(step, n // len(idx) + (np.arange(len(idx)) < n % len(idx)))
        add[idx] += step
        n -= int(step.sum())
        idx = idx[add[idx] < room[idx]]
        if step.sum() == 0:
            break
    return add


def greso(view: View, budget: int, rng) -> np.ndarray:
    """GRESO: skip a prompt whose latest k groups were all correct (all wrong) with probability
    1 − max(p_easy^k, 0.01) (p_hard^k); the kept prompts share the budget evenly (GRESO refills
    the batch, so the rollouts are spent, not saved)."""
    keep_easy = np.maximum(view.p_easy[:, None] ** view.streak_easy, 0.01)
    keep_hard = np.maximum(view.p_hard[:, None] ** view.streak_hard, 0.01)
    keep_p = np.where(view.streak_easy > 0, keep_easy, np.where(view.streak_hard > 0, keep_hard, 1))
    keep = rng.random(view.shape) < keep_p
    keep = np.where(keep.any(-1, keepdims=True), keep, True)
    return _even(view, budget, keep)


def vip(view: View, budget: int, rng) -> np.ndarray:
    """VIP: minimize Σ a_x/(n_x − 1) + b_x n_x (RLOO; Σ a_x (n_x − 1)/n_x² for GRPO), a = p(1 −
    p), b = γ log p (γ = 7e-4 RLOO, 4e-4 GRPO), 4 ≤ n_x ≤ 32, Σ n_x = budget."""
    p = np.clip(_posterior_mean(view), 1e-6, 1 - 1e-6)
    grpo = view.estimator.split("[")[0].endswith("grpo")
    gamma = 4e-4 if grpo else 7e-4
    top = min(32, view.cap)
    lo = min(4, budget // view.shape[-1])
    if budget > top * view.shape[-1]:
        top = view.cap
    n = np.arange(top + 1, dtype=float)
    a, b = (p * (1 - p))[..., None], (gamma * np.log(p))[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        spread = (n - 1) / np.maximum(n, 1) ** 2 if grpo else 1 / np.maximum(n - 1, 1e-9)
    curve = a * spread + b * n
    return theory.greedy(curve, np.ones(view.shape[-1]), budget, g_min=lo).astype(np.int64)


def _gvm(view: View, budget: int, norm: np.ndarray) -> np.ndarray:
    """GVM-RAFT's ``calc_sample_ratio`` (em/stage_2_calc_sample_size.py): n_x ∝ G_x / √(p_x +
    α/p_x^(β−1)), α = 1e-3, β = 2, n_x = 0 where G_x = 0 or p_x = 0, rounded to sum to the
    budget (their ``float_to_int_preserve_sum``: largest remainders), each ≤ cap; p_x the success
    rate of the group in ``last_c``/``last_n``."""
    p = _last_rate(view, 0.5)
    ok = (p > 0) & (norm > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(ok, norm / np.sqrt(p + 1e-3 / np.where(ok, p, 1)), 0.0)
    return _rounded(share, budget, view.cap)


def gvm(view: View, budget: int, rng) -> np.ndarray:
    """GVM-RAFT as its scripts run it: :func:`_gvm` with their gradient quantity G_x, the mean
    ‖∇ log π(y|x)‖ over the first stage's correct responses (``calc_grad_logp`` in
    em/stage_2_calc_acceptRates_grads.py: each correct output's sequence log-probability
    differentiated, its norm taken, the norms averaged; 0 where none is correct), from the same
    stage as p_x (``view.gvm_norm``)."""
    return _gvm(view, budget, view.gvm_norm)


def gvm_exact(view: View, budget: int, rng) -> np.ndarray:
    """gpolab's variant of GVM-RAFT: :func:`_gvm` with their gradient quantity computed exactly,
    E[‖∇ log π(y|x)‖ | y correct], instead of estimated from the first stage's correct responses
    (p_x still from the first stage)."""
    return _gvm(view, budget, np.broadcast_to(view.score_correct, view.shape))


def gvm_gnorm(view: View, budget: int, rng) -> np.ndarray:
    """gpolab's variant of GVM-RAFT: :func:`_gvm` with the prompt's exact expected-gradient norm
    ‖g_x‖ instead of their mean per-response score norm over correct answers (the lab's ``gvm``
    before issue 55)."""
    return _gvm(view, budget, view.gnorm)


def mopps(view: View, budget: int, rng, select: float = 0.5) -> np.ndarray:
    """MoPPS: Thompson-sample r̂_x ~ Beta(α_x, β_x), keep the ``select``·P prompts with the
    smallest (r̂ − 0.5)², give the kept prompts the budget evenly."""
    r = rng.beta(view.alpha, view.beta)
    k = max(1, round(select * view.shape[-1]))
    order = np.argsort((r - 0.5) ** 2, axis=-1, kind="stable")
    keep = np.zeros(view.shape, bool)
    np.put_along_axis(keep, order[:, :k], True, axis=-1)
    return _even(view, budget, keep)


def pods(view: View, budget: int, rng) -> np.ndarray:
    """PODS: generate budget/P responses per prompt and train on the half with the largest
    reward variance (as balanced as the group allows); the lab does the down-sampling."""
    return uniform(view, budget, rng)


def reinforce_ada(view: View, budget: int, rng) -> np.ndarray:
    """Reinforce-Ada (balanced): rounds of budget/P new responses per prompt until it holds n/2
    successes and n/2 failures (n = budget/(2P)), at most 4 rounds; train on n of them with
    A = r − (success rate of everything drawn for the prompt).  The lab runs the rounds."""
    return uniform(view, budget, rng)


# Pilot-Commit's shipped settings (databricks/pilot-commit @ 8ca7605, train_scripts/
# pc_qwen2.5-1.5b_p32c96.sh and pc_qwen3-4b_p16c48.sh: both set diversity_threshold_lower =
# 0.125, diversity_threshold_upper = 0.25, gen_batch_size = 3 × train_batch_size and rollout.n
# = 3 × exploration.n, 96/32 and 48/16)
PC_LOWER = 0.125  # admitted when PC_LOWER <= p̂ <= 1 − PC_UPPER (filter_batch, both ends in)
PC_UPPER = 0.25
PC_RATIO = 3  # prompts piloted per prompt committed, and commit rollouts per pilot rollout


def pilot_commit(view: View, budget: int, rng) -> np.ndarray:
    """Pilot-Commit (``RayPCTrainer.fit``): every prompt gets n_e pilots (``view.last_c`` of
    ``view.last_n``, the lab's first stage); a prompt whose pilot mean p̂ lies in [0.125, 0.75]
    (``filter_batch``) enters the buffer; at most P/3 of those (their train batch is a third of
    the prompts piloted) are drawn uniformly at random (``buffer_sampling_method: random``) and
    each gets n_c = 3 n_e new rollouts (``rollout.n``).  Returns the commit sizes (S, P): the lab
    pools them with the prompt's pilots (their ``DataProto.concat``); ``budget`` is what is left
    after the pilots."""
    S, P = view.shape
    n_e = np.maximum(view.last_n, 1)
    p = view.last_c / n_e
    admitted = (p >= PC_LOWER) & (p <= 1 - PC_UPPER) & (view.last_n > 0)
    k = max(P // PC_RATIO, 1)
    n_c = np.minimum(PC_RATIO * view.last_n, view.cap - view.last_n).astype(np.int64)
    order = np.argsort(np.where(admitted, rng.random((S, P)), np.inf), axis=-1, kind="stable")
    rank = np.argsort(order, axis=-1, kind="stable")
    chosen = admitted & (rank < k)
    C = np.where(chosen, n_c, 0)
    over = C.sum(-1) > budget  # never binds at the lab's sizes (k·3n_e ≤ N/2)
    if over.any():
        raise ValueError(f"pilot-commit: commits exceed the budget left ({budget})")
    return C


# sGPO's thresholds as the third-party port reads the paper (RohanAwhad/fast-rl-bench @ 514d4d3a,
# scripts/sgpo_profile.py ``classify``, prime_rl_patch/.../efficient_rl/sgpo.py)
SGPO_TRIVIAL = 0.75  # p̂ > 0.75: never dispatched
SGPO_UNSOLVED_MIX = 0.1  # p̂ = 0: dispatched with probability α
SGPO_BUCKETS = (2, 4, 8)  # p̂ > 1/4, 1/8 < p̂ <= 1/4, p̂ <= 1/8


def sgpo_bucket(p: np.ndarray) -> np.ndarray:
    """The port's ``classify``: 0 for trivial (p̂ > 0.75) and unsolved (p̂ = 0), else the
    power-of-two bucket of 1/p̂: 2 (p̂ > 1/4), 4 (p̂ > 1/8), 8."""
    b = np.where(p > 1 / 4, 2, np.where(p > 1 / 8, 4, 8))
    return np.where((p > SGPO_TRIVIAL) | (p <= 0), 0, b)


def gpolab_sgpo(view: View, budget: int, rng) -> np.ndarray:
    """gpolab's sGPO (the abstract, with the third-party port's thresholds): p̂ from the
    prompt's profile (its first observed group); trivial prompts (p̂ > 0.75) dropped; a learnable
    prompt's weight is its bucket G ∈ {2, 4, 8} (∝ 1/p̂, :func:`sgpo_bucket`); an unsolved one
    (p̂ = 0) is mixed in with probability 0.1 (the port's online Bernoulli(α)) at the phase's
    bucket, 2 (one phase: no curriculum); an unprofiled prompt at the base size N/P.  The
    buckets are scaled to spend the step's budget (largest remainders, each ≤ cap)."""
    seen = view.profile_n > 0
    p = view.profile_c / np.maximum(view.profile_n, 1)
    bucket = sgpo_bucket(p).astype(float)
    mixed = (p <= 0) & (rng.random(view.shape) < SGPO_UNSOLVED_MIX)
    bucket = np.where(mixed, SGPO_BUCKETS[0], bucket)
    base = budget / view.shape[-1]
    share = np.where(seen, bucket, base)
    share = np.where(share.sum(-1, keepdims=True) > 0, share, 1.0)  # all dropped: uniform
    return _rounded(share, budget, view.cap)


def hit_utility(alpha, beta, m_max: int) -> np.ndarray:
    """HORA's hit utility under the Beta(α, β) posterior of p: U(m) = P(at least one of m new
    rollouts is correct) = 1 − E[(1 − p)^m] = 1 − B(α, β + m)/B(α, β), m = 0…m_max
    (..., m_max + 1); E[(1 − p)^m] = Π_{j<m} (β + j)/(α + β + j)."""
    a, b = np.asarray(alpha, float)[..., None], np.asarray(beta, float)[..., None]
    j = np.arange(m_max)
    miss = np.cumprod((b + j) / (a + b + j), axis=-1)
    return 1 - np.concatenate([np.ones(miss.shape[:-1] + (1,)), miss], -1)


HORA_MIN = 2  # gpolab's floor: a group of one has no baseline (the paper's caps were not read)


def gpolab_hora(view: View, budget: int, rng) -> np.ndarray:
    """gpolab's HORA (from the abstract; the paper's rule was not read): maximize the total
    posterior hit utility Σ_x U_x(m_x) (:func:`hit_utility`; uniform prior Beta(1, 1) updated by
    the prompt's observed hits, the lab's posterior) with Σ_x m_x = N, 2 ≤ m_x ≤ cap.  U is
    concave in m (its gains E[p(1 − p)^m] fall with m), so greedy marginal gains are optimal."""
    U = hit_utility(view.alpha, view.beta, view.cap)
    return theory.greedy(-U, np.ones(view.shape[-1]), budget, g_min=HORA_MIN).astype(np.int64)


def _src(arxiv: str, where: str) -> str:
    return f"arXiv {arxiv}; rule from the authors' code: {where}"


RULES: dict[str, Rule] = {
    r.name: r
    for r in (
        Rule("uniform", uniform, "allocate", "nothing", "GRPO's fixed group size"),
        Rule(
            "uniform-gstar",
            uniform_gstar,
            "allocate",
            "truth",
            "the best uniform G (G*, arXiv 2603.01162 Thm 7): B prompts at random, G = N/B each",
        ),
        Rule(
            "gpolab-oracle",
            gpolab_oracle,
            "allocate",
            "truth",
            "gpolab (theory §12): exact-MSE-optimal greedy over the count-table MSE of §8",
        ),
        Rule(
            "gpolab-drop",
            gpolab_drop,
            "allocate",
            "truth",
            "gpolab (theory §12): the exact step-MSE optimum with G_x = 0 allowed (Lagrangian)",
        ),
        Rule(
            "gpolab-sample",
            gpolab_sample,
            "allocate",
            "truth",
            "gpolab (theory §12): unbiased inclusion probabilities and per-prompt G*, reweighted",
        ),
        Rule(
            "gpolab",
            gpolab_posterior,
            "allocate",
            "posterior",
            "gpolab (theory §12): the same greedy on the posterior-expected reward-only MSE",
            "reward-only moments: score norm independent of the reward, signal share rho",
        ),
        Rule(
            "knapsack",
            knapsack,
            "allocate",
            "history",
            _src(
                "2509.25849",
                "liziniu/KnapsackRL verl/trainer/ppo/exploration_utils.py "
                "sampling_budget_by_knapsack; p̂: verl/utils/dataset/rl_dataset.py "
                "update_sample_state",
            ),
            "the lab's estimator (loo) instead of their GRPO (see knapsack-grpo); sizes held to "
            "the cap; their advantage clip at ±5 (never binds for loo's |A| ≤ 1)",
            adv_clip=KNAPSACK_ADV_CLIP,
        ),
        Rule(
            "knapsack-grpo",
            knapsack,
            "allocate",
            "history",
            _src(
                "2509.25849",
                "as knapsack, with their estimator (ADV_ESTIMATOR = grpo: verl's "
                "compute_grpo_outcome_advantage) and ADV_CLIP_VALUE = 5 (ray_trainer.py fit)",
            ),
            "GRPO's ĝ estimates g/σ, not g: its MSE against g carries that scale (compare it "
            "scale-free: scaled_mse)",
            "verl/grpo",
            KNAPSACK_ADV_CLIP,
        ),
        Rule(
            "gpolab-knapsack-truth",
            knapsack_truth,
            "allocate",
            "truth",
            "gpolab's bound: Knapsack RL's rule (as knapsack) fed the true p",
            "no trainer knows p: shows their allocation on their own value with p̂ exact",
        ),
        Rule(
            "gpolab-knapsack-simple",
            gpolab_knapsack_simple,
            "allocate",
            "last step",
            "gpolab's simplified Knapsack RL (their value and bounds only)",
            "p from the prompt's last group; no cost model, no fallback, no reward buffer",
        ),
        Rule(
            "greso",
            greso,
            "allocate",
            "history",
            _src("2506.02177", "Infini-AI-Lab/GRESO verl/trainer/ttis/presampling_selector.py"),
            "all correct / all wrong stand for mean >= 0.98 / <= 0.11",
        ),
        Rule(
            "vip",
            vip,
            "allocate",
            "posterior",
            _src("2602.01601", "HieuNT91/VIP src/vip/allocation/bernoulli_allocation.py"),
            "p from the Beta posterior mean instead of VIP's Gaussian process over prompt "
            "embeddings; the integer optimum instead of SLSQP plus rounding",
        ),
        Rule(
            "gvm",
            gvm,
            "staged",
            "fresh stage",
            _src(
                "2505.02391",
                "RLHFlow/GVM em/stage_2_calc_sample_size.py calc_sample_ratio, em/run_em.sh",
            ),
            "half the step's rollouts measure p and their gradient quantity (the mean score "
            "norm over correct answers, from those responses as theirs) in a fresh first stage "
            "(their 8 + 8 per prompt), the other half are allocated and trained on; the lab's "
            "estimator instead of RAFT",
        ),
        Rule(
            "gpolab-gvm-exact",
            gvm_exact,
            "staged",
            "fresh stage",
            "gpolab's variant of GVM-RAFT: its staged rule with their gradient quantity computed "
            "exactly, E[‖∇ log π‖ | correct], instead of estimated from the first stage",
            "the exact conditional mean score norm: a truth no trainer has",
        ),
        Rule(
            "gpolab-gvm-gnorm",
            gvm_gnorm,
            "staged",
            "fresh stage",
            "gpolab's variant of GVM-RAFT: its staged rule with the exact ‖g_x‖ in place of "
            "their mean score norm over correct answers (the lab's gvm before issue 55)",
            "‖g_x‖ = ‖E[(r − V) ∇ log π]‖ given exactly: a truth no trainer has",
        ),
        Rule(
            "gpolab-gvm-last",
            gvm_gnorm,
            "allocate",
            "last step",
            "gpolab's variant of GVM-RAFT: its rule on the prompt's last step (no first stage), "
            "with the exact ‖g_x‖",
            "p from the last group: a prompt last seen at p = 0 gets nothing again",
        ),
        Rule(
            "mopps",
            mopps,
            "allocate",
            "posterior",
            _src("2507.04632", "thu-rllab/MoPPS recipe/ours/mopps.py (topk)"),
            "the pool is the step's prompts; half of them are selected",
        ),
        Rule(
            "pods",
            pods,
            "downsample",
            "nothing",
            "arXiv 2504.13818 (its abstract, v1-v4, read; no code found): max-variance "
            "down-sampling, built to cut update cost",
            "keep half; for binary rewards max variance = as balanced as possible",
        ),
        Rule(
            "reinforce-ada",
            reinforce_ada,
            "sequential",
            "nothing",
            _src("2510.04996", "RLHFlow/Reinforce-Ada _generate_multi_round_adaptive_downsampling"),
            "round size budget/P and kept n = budget/(2P) scale the script's 8 and 4; binary "
            "rewards (their success is reward > 0.7)",
        ),
        Rule(
            "pilot-commit",
            pilot_commit,
            "pilot",
            "fresh stage",
            "Pilot-Commit (README: 'Spend Your Rollouts Where It Counts'; no paper in the repo); "
            "rule from the authors' code: databricks/pilot-commit @ 8ca7605 "
            "recipe/pc/pc_ray_trainer.py RayPCTrainer.fit, filter_batch; "
            "recipe/pc/replay_buffer.py ReplayBuffer.sample; recipe/pc/config/pc_trainer.yaml, "
            "train_scripts/pc_qwen2.5-1.5b_p32c96.sh, pc_qwen3-4b_p16c48.sh",
            "pilots N/(2P) per prompt, commits 3x that to at most P/3 admitted prompts (their "
            "gen_batch = 3 train_batch, n = 3 n_explore); pilots fresh in the step (theirs: 1 to "
            "5 steps old, from the buffer); the lab's estimator (see pilot-commit-grpo); no "
            "end-of-epoch eviction",
        ),
        Rule(
            "pilot-commit-grpo",
            pilot_commit,
            "pilot",
            "fresh stage",
            "Pilot-Commit as pilot-commit, with their estimator (adv_estimator = grpo: verl's "
            "compute_grpo_outcome_advantage over the pooled pilot + commit group)",
            "GRPO's ĝ estimates g/σ, not g: compare it scale-free (scaled_mse)",
            "verl/grpo",
        ),
        Rule(
            "gpolab-sgpo",
            gpolab_sgpo,
            "allocate",
            "history",
            "gpolab's construction of sGPO (arXiv 2606.08854, abstract only; no authors' code) "
            "with a third-party port's thresholds: RohanAwhad/fast-rl-bench @ 514d4d3a "
            "scripts/sgpo_profile.py classify, prime_rl_patch/src/prime_rl/efficient_rl/sgpo.py",
            "profile = the prompt's first observed group (the port: 8 under the initial policy); "
            "buckets scaled to the step's budget; no curriculum (the port's default single phase)",
        ),
        Rule(
            "gpolab-hora",
            gpolab_hora,
            "allocate",
            "posterior",
            "gpolab's construction of HORA (arXiv 2605.07114, abstract only; no code found): "
            "greedy maximum of the total posterior hit utility, uniform prior",
            "U(m) = 1 − B(s + 1, n − s + 1 + m)/B(s + 1, n − s + 1) from the lab's posterior; "
            "2 ≤ m ≤ cap (the paper's caps and stages unknown)",
        ),
    )
}
for _r in RULES.values():
    validate.choice("reads", _r.reads, READS)

# what each published rule's code optimizes (its own objective; docs/allocate.md ranks every rule
# by MSE and by training as well): the lab's columns that measure it are named after the colon
AIMS = {
    "knapsack": "more prompts whose group holds both outcomes: their value Σ_x value(N_x, p_x) "
    "under a cost budget (columns knapsack_value, nonzero_groups)",
    "knapsack-grpo": "as knapsack, with their GRPO estimator",
    "greso": "fewer rollouts on prompts likely to give a zero-variance group again (their saving "
    "is generation time; here the budget is refilled, column zero_signal)",
    "vip": "the gradient variance of RLOO/GRPO plus a per-rollout cost (column mse)",
    "gvm": "the gradient variance of the RAFT step, n ∝ G/√(p + α/p) with G their mean score "
    "norm over correct answers, after a first sampling stage (columns mse, rollouts)",
    "mopps": "the prompts whose predicted success rate is nearest 1/2, without extra rollouts "
    "(column nonzero_groups)",
    "pods": "a cheaper update: generate N, train on the most informative half (column "
    "update_cost; the lab counts update cost as free)",
    "reinforce-ada": "no zero-signal groups: sample until both outcomes are present (columns "
    "nonzero_groups, rollouts)",
    "pilot-commit": "fewer cumulative rollouts to a target accuracy by skipping prompts whose "
    "pilots have one outcome only (training: rollouts to halve the gap; columns nonzero_groups, "
    "rollouts)",
    "pilot-commit-grpo": "as pilot-commit, with their GRPO estimator",
    "gpolab-sgpo": "the most advantage per generated rollout (G ≈ 1/p̂), training compute with "
    "the profile counted (columns zero_signal, rollouts; training: rollouts to halve the gap)",
    "gpolab-hora": "the total posterior hit utility Σ_x P(a correct rollout among m_x) (column "
    "hit_share: at the true p, the expected share of prompts with a correct response)",
}
