"""Optimal group size at a fixed per-step budget N = B·G (DESIGN §4, [U] arXiv 2603.01162 Thm 7).

Two checks of the prediction of :mod:`gpolab.theory.groupsize`:

* fixed θ — the Monte Carlo MSE of the loo mini-batch gradient (B = N/G iid prompts, G responses
  each) over every divisor G ≥ 2 of N, against the exact [c1·G + C2 + C3/(G − 1)]/N;
* training — SGD (optax) with N responses per step, many seeds, the final suboptimality gap
  J* − J(θ_n) per G.

Both use one sampler, :func:`minibatch_gradient`, over a small :class:`Task` interface
(prompt draws, one response per slot, Σ_i w_i W_i, J) that the bandit and the arithmetic
surrogate implement.  A step always draws N slots: slot i answers prompt ``draws[i // G]``, so
the first B = N/G of N iid prompt draws get one group each.  Shapes depend on N only: G, the
step size and the schedule are traced, and one compilation per (task, N) serves every G.
Seed i uses ``fold_in(key, i)`` (through :mod:`gpolab.engine`); step t of a run uses
``fold_in(seed key, t)``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from gpolab import engine, validate
from gpolab.theory import groupsize as theory

ENVS = ("bandit", "arithmetic")
SCHEDULES = ("constant", "decay")

# ---------------------------------------------------------------- the task interface


@dataclasses.dataclass(frozen=True)
class Task:
    """Static environment interface over flat parameters θ (D,); ``data`` is a traced pytree.

    * ``sample_prompts(key, data, n) -> (n,) int32`` iid prompts;
    * ``sample(key, data, theta, prompts) -> (responses, rewards (n,))``, one response per slot;
    * ``gradient(data, theta, prompts, responses, weights) -> (D,)`` = Σ_i w_i ∇ log π(y_i|x_i);
    * ``value(data, theta) -> J(θ)``.
    """

    name: str
    sample_prompts: Callable
    sample: Callable
    gradient: Callable
    value: Callable


def _bandit_at(data, theta):
    return data.replace(theta=theta.reshape(data.theta.shape))


def _bandit_prompts(key, data, n):
    from gpolab.envs import bandit

    return bandit.sample_prompts(key, data, n)


def _bandit_sample(key, data, theta, prompts):
    """One (action, reward) per slot by inverse CDF over the joint outcomes of x_i
    (:func:`bandit.outcome_probs`; :func:`inverse_cdf_rows` gathers only row x_i's ≈ √(2A) block
    ends and one block per slot): the draws of ``bandit.sample`` with G = 1."""
    from gpolab.envs import bandit
    from gpolab.envs.sampling import inverse_cdf_rows

    params = _bandit_at(data, theta)
    dtype = params.success.dtype
    u = jax.random.uniform(key, prompts.shape, dtype=dtype)
    return bandit.split_outcomes(inverse_cdf_rows(bandit.outcome_probs(params), prompts, u), dtype)


def _bandit_gradient(data, theta, prompts, actions, weights):
    """Σ_i w_i W(x_i, a_i) in flat global coordinates, O(n) memory: tabular W = e_a − π_x, so
    scatter w_i into cell (x_i, a_i) and subtract (Σ_{i: x_i = x} w_i) π_x per prompt."""
    from gpolab.envs import bandit

    params = _bandit_at(data, theta)
    if not params.tabular:
        local = bandit.weighted_scores(params, prompts, actions[:, None], weights[:, None])
        return jnp.sum(local, axis=0)
    P, A = params.success.shape
    hits = jnp.zeros((P, A), weights.dtype).at[prompts, actions].add(weights)
    per_prompt = jax.ops.segment_sum(weights, prompts, num_segments=P)
    return (hits - per_prompt[:, None] * bandit.policy(params)).reshape(-1)


def _bandit_value(data, theta):
    from gpolab.envs import bandit

    return bandit.expected_return(_bandit_at(data, theta))


BANDIT = Task("bandit", _bandit_prompts, _bandit_sample, _bandit_gradient, _bandit_value)


@struct.dataclass
class ArithmeticData:
    params: object  # gpolab.envs.arithmetic.ArithmeticParams (its weights are replaced by θ)
    questions: object  # gpolab.envs.arithmetic.Questions


def _arith_at(data, theta):
    from jax.flatten_util import ravel_pytree

    unravel = ravel_pytree(data.params.weights)[1]
    return data.params.replace(weights=unravel(theta))


def _arith_prompts(key, data, n):
    return jax.random.randint(key, (n,), 0, data.questions.features.shape[0])


def _arith_sample(key, data, theta, prompts):
    from gpolab.envs import arithmetic

    params = _arith_at(data, theta)
    feats = data.questions.features[prompts]
    keys = jax.random.split(key, prompts.shape[0])
    tokens = jax.vmap(lambda k, f: arithmetic.sample(k, params, f, 1)[0])(keys, feats)
    rewards = jax.vmap(lambda t, a: arithmetic.rewards(t[None], a)[0])(
        tokens, data.questions.answers[prompts]
    )
    return tokens, rewards


def _arith_gradient(data, theta, prompts, tokens, weights):
    """One backward pass over all n slots: each row carries its own question's features."""
    from gpolab.envs import arithmetic

    feats = data.questions.features[prompts]
    return arithmetic.gradient_estimate(_arith_at(data, theta), feats, tokens, weights)


def _arith_value(data, theta):
    from gpolab.envs import arithmetic

    return jnp.mean(arithmetic.success_prob(_arith_at(data, theta), data.questions))


ARITHMETIC = Task("arithmetic", _arith_prompts, _arith_sample, _arith_gradient, _arith_value)
TASKS = {"bandit": BANDIT, "arithmetic": ARITHMETIC}


# ---------------------------------------------------------------- one mini-batch gradient


def loo_advantages_slots(rewards: jax.Array, G) -> jax.Array:
    """Leave-one-out advantages of N slots grouped as ``i // G`` (G may be traced):

        A_i = Z_i − (Σ_{k in group(i), k ≠ i} Z_k) / (G − 1)      [2603.01162, eq. 4]

    the same numbers as :func:`gpolab.estimators.loo_advantages` on ``rewards.reshape(-1, G)``.
    """
    n = rewards.shape[0]
    group = jnp.arange(n) // G
    sums = jax.ops.segment_sum(rewards, group, num_segments=n)[group]
    return rewards - (sums - rewards) / (G - 1)


def minibatch_gradient(task: Task, key: jax.Array, data, theta: jax.Array, N: int, G):
    """ĝ = (1/B) Σ_b (1/G) Σ_g A_bg W_bg with B = N/G iid prompts and loo advantages.

    N is static (it sets the shapes); G is a traced integer dividing N.  Returns (ĝ (D,), rewards).
    """
    k_prompts, k_responses = jax.random.split(key)
    draws = task.sample_prompts(k_prompts, data, N)
    prompts = draws[jnp.arange(N) // G]  # slot i answers the (i // G)-th draw; B = N/G used
    responses, rewards = task.sample(k_responses, data, theta, prompts)
    adv = loo_advantages_slots(rewards, G)
    return task.gradient(data, theta, prompts, responses, adv / N), rewards


# ---------------------------------------------------------------- fixed-θ Monte Carlo


@dataclasses.dataclass(frozen=True)
class FixedCell:
    task: Task
    N: int


def fixed_error(cell: FixedCell, key: jax.Array, args) -> dict:
    """Per-seed error of the mini-batch loo gradient.  ``args = (data, theta, g, G)``."""
    data, theta, g, G = args
    ghat, _ = minibatch_gradient(cell.task, key, data, theta, cell.N, G)
    err = ghat - g
    return {"err": err, "sq": jnp.sum(err**2)}


@dataclasses.dataclass(frozen=True)
class FixedConfig:
    """``gpolab groupsize``: the fixed-θ check on the bandit (defaults: ``gpolab sweep``'s)."""

    N: tuple[int, ...] = (256, 1024, 4096)
    seeds: int = 20_000
    chunk: int = 0  # 0: engine.auto_chunk
    seed: int = 0
    kind: str = "tabular"
    prompts: int = 16
    actions: int = 64
    logit_scale: float = 1.0
    success_a: float = 0.5
    success_b: float = 1.0
    instance_seed: int = 0


def validate_fixed(cfg: FixedConfig) -> None:
    """Plain-Python checks before anything is traced."""
    validate.integers("N", cfg.N, 2)
    for N in cfg.N:
        theory.check_budget(N)
    validate.integer("seeds", cfg.seeds, 2)
    validate.integer("chunk", cfg.chunk, 0)
    validate.integer("seed", cfg.seed, 0)
    _check_bandit(cfg)
    validate.integer("instance_seed", cfg.instance_seed, 0)


def _check_bandit(cfg) -> None:
    from gpolab.envs import bandit

    bandit.check_instance(
        cfg.kind, cfg.prompts, cfg.actions, 8, cfg.logit_scale, cfg.success_a, cfg.success_b
    )


def make_bandit(cfg) -> tuple:
    from gpolab.envs import bandit

    params = bandit.make(
        cfg.instance_seed,
        prompts=cfg.prompts,
        actions=cfg.actions,
        kind=cfg.kind,
        logit_scale=cfg.logit_scale,
        success_a=cfg.success_a,
        success_b=cfg.success_b,
    )
    return params, bandit.exact(params)


def run_fixed(cfg: FixedConfig, on_row: Callable[[dict], None] | None = None) -> tuple:
    """Every (N, divisor G ≥ 2) cell: Monte Carlo MSE with a 95% CI next to the exact value.

    Returns (rows, summary): the table rows and, per N, the empirical and predicted best G.
    """
    validate_fixed(cfg)
    params, truth = make_bandit(cfg)
    c = theory.constants(truth)
    theta = params.theta.reshape(-1)
    key = jax.random.key(cfg.seed)
    rows = []
    for N in cfg.N:
        cell = FixedCell(BANDIT, N)
        for G in theory.divisors(N):
            start = time.perf_counter()
            args = (params, theta, truth.g, jnp.int32(G))
            m = engine.run(fixed_error, cell, args, key, cfg.seeds, cfg.chunk)
            s = engine.error_stats(m)
            row = {
                "env": "bandit",
                "N": N,
                "G": G,
                "B": N // G,
                "n_seeds": m.n,
                "mse": s.mse,
                "mse_se": s.mse_se,
                "mse_ci_low": s.mse_ci_low,
                "mse_ci_high": s.mse_ci_high,
                "bias_sq": s.bias_sq,
                "theory_mse": theory.fixed_n_mse(c, N, G),
                "seconds": time.perf_counter() - start,
            }
            rows.append(row)
            if on_row is not None:
                on_row(row)
    return rows, fixed_summary(rows, c)


def fixed_summary(rows: list[dict], c: theory.Constants) -> list[dict]:
    """Per N: predicted (exact divisor, continuous, paper) and empirical best G, and the set of
    divisors whose 95% CI overlaps the empirical minimum's (statistically tied)."""
    out = []
    for N in dict.fromkeys(r["N"] for r in rows):
        sub = [r for r in rows if r["N"] == N]
        best = min(sub, key=lambda r: r["mse"])
        tied = [r["G"] for r in sub if r["mse_ci_low"] <= best["mse_ci_high"]]
        out.append(
            {
                "N": N,
                "empirical_best_G": best["G"],
                "tied_G": tied,
                "predicted_best_G": theory.best_divisor(c, N),
                **c.to_dict(),
            }
        )
    return out


# ---------------------------------------------------------------- training


@dataclasses.dataclass(frozen=True)
class TrainCell:
    task: Task
    N: int
    steps: int


def train_run(cell: TrainCell, key: jax.Array, args) -> dict:
    """One SGD run: θ ← θ + η_t ĝ_t (optax.sgd on −ĝ), η_t = η0 / (1 + t/τ) (τ = ∞: constant).

    ``args = (data, theta0, G, eta0, tau, j_star)``; returns the final gap J* − J(θ_n) and J(θ_n).
    """
    import optax

    data, theta0, G, eta0, tau, j_star = args
    opt = optax.sgd(lambda t: eta0 / (1.0 + t / tau))

    def step(carry, t):
        theta, state = carry
        ghat, _ = minibatch_gradient(cell.task, jax.random.fold_in(key, t), data, theta, cell.N, G)
        updates, state = opt.update(-ghat, state, theta)
        return (optax.apply_updates(theta, updates), state), None

    (theta, _), _ = jax.lax.scan(step, (theta0, opt.init(theta0)), jnp.arange(cell.steps))
    value = cell.task.value(data, theta)
    return {"gap": j_star - value, "value": value}


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """``gpolab groupsize --train``: final gap vs G at fixed N per step, per env and schedule."""

    envs: tuple[str, ...] = ENVS
    seeds: int = 256
    seed: int = 0
    schedules: tuple[str, ...] = SCHEDULES
    # bandit (the fixed-θ instance); η_t = η0 / (1 + t/τ), τ = ∞ for "constant"
    bandit_N: tuple[int, ...] = (64, 256)
    bandit_steps: int = 100
    bandit_eta_constant: float = 32.0
    bandit_eta_decay: float = 64.0
    bandit_tau: float = 20.0
    # arithmetic surrogate (bare: no filler), starting from a pre-trained policy
    arithmetic_N: tuple[int, ...] = (32, 128)
    arithmetic_steps: int = 50
    arithmetic_eta_constant: float = 0.5
    arithmetic_eta_decay: float = 2.0
    arithmetic_tau: float = 10.0
    questions: int = 500
    hidden: int = 32
    policy: str = "base"
    truth_samples: int = 256
    instance_seed: int = 0
    # bandit instance
    kind: str = "tabular"
    prompts: int = 16
    actions: int = 64
    logit_scale: float = 1.0
    success_a: float = 0.5
    success_b: float = 1.0


def validate_train(cfg: TrainConfig) -> None:
    if not cfg.envs:
        raise validate.ConfigError(f"envs: got an empty list; allowed: {', '.join(ENVS)}")
    for e in cfg.envs:
        validate.choice("envs", e, ENVS)
    if not cfg.schedules:
        raise validate.ConfigError(f"schedules: got an empty list; allowed: {', '.join(SCHEDULES)}")
    for s in cfg.schedules:
        validate.choice("schedules", s, SCHEDULES)
    validate.integer("seeds", cfg.seeds, 2)
    validate.integer("seed", cfg.seed, 0)
    for env in ("bandit", "arithmetic"):
        Ns = getattr(cfg, f"{env}_N")
        validate.integers(f"{env}_N", Ns, 4)
        for N in Ns:
            theory.check_budget(N, field=f"{env}_N")
        validate.integer(f"{env}_steps", getattr(cfg, f"{env}_steps"), 1)
        for schedule in SCHEDULES:
            name = f"{env}_eta_{schedule}"
            validate.real(name, getattr(cfg, name), low=0.0, open_low=True)
        validate.real(f"{env}_tau", getattr(cfg, f"{env}_tau"), low=0.0, open_low=True)
    validate.integer("questions", cfg.questions, 1)
    validate.integer("hidden", cfg.hidden, 1)
    validate.choice("policy", cfg.policy, ("base", "instruct", "icl"))
    validate.integer("truth_samples", cfg.truth_samples, 2)
    validate.integer("instance_seed", cfg.instance_seed, 0)
    _check_bandit(cfg)


def make_task(cfg: TrainConfig, env: str) -> tuple:
    """(task, data, θ0 flat, J*, truth at θ0) for one environment."""
    if env == "bandit":
        params, truth = make_bandit(cfg)
        j_star = float(np.asarray(params.prompt_probs) @ np.max(np.asarray(params.success), 1))
        return BANDIT, params, params.theta.reshape(-1), j_star, truth
    from jax.flatten_util import ravel_pytree

    from gpolab.envs import arithmetic

    questions = arithmetic.make_questions(cfg.instance_seed, cfg.questions)
    params = arithmetic.pretrain(
        questions,
        seed=cfg.instance_seed,
        hidden=cfg.hidden,
        targets={cfg.policy: arithmetic.POLICIES[cfg.policy]},
    )[cfg.policy]
    exact = jax.jit(arithmetic.exact, static_argnames="samples")
    truth_key = jax.random.fold_in(jax.random.key(cfg.instance_seed), 1)
    truth = exact(truth_key, params, questions, samples=cfg.truth_samples)
    theta0 = ravel_pytree(params.weights)[0]
    return ARITHMETIC, ArithmeticData(params, questions), theta0, 1.0, truth  # y* reachable


def schedule_tau(schedule: str, tau: float) -> float:
    return math.inf if schedule == "constant" else tau


def train_gaps(
    task: Task,
    data,
    theta0,
    j_star: float,
    N: int,
    G: int,
    steps: int,
    eta: float,
    tau: float,
    key: jax.Array,
    seeds: int,
) -> np.ndarray:
    """Final gaps (seeds,) of ``seeds`` SGD runs: jit(vmap over seeds)(lax.scan over steps)."""
    f = jnp.result_type(float)
    args = (
        data,
        theta0,
        jnp.int32(G),
        jnp.asarray(eta, f),
        jnp.asarray(tau, f),
        jnp.asarray(j_star, f),
    )
    out = engine.per_seed(train_run, TrainCell(task, N, steps), key, args, np.arange(seeds))
    return np.asarray(out["gap"], dtype=np.float64)


def run_train(cfg: TrainConfig, on_row: Callable[[dict], None] | None = None) -> tuple:
    """Every (env, N, schedule, divisor G ≥ 2): final gap over seeds (mean, 95% CI, quartiles).

    Returns (rows, summary); the summary has the best G per (env, N, schedule) next to the
    prediction at θ0.
    """
    validate_train(cfg)
    key = jax.random.key(cfg.seed)
    rows, consts = [], {}
    for env in cfg.envs:
        task, data, theta0, j_star, truth = make_task(cfg, env)
        c = theory.constants(truth)
        consts[env] = c
        steps, tau0 = getattr(cfg, f"{env}_steps"), getattr(cfg, f"{env}_tau")
        j0 = float(task.value(data, theta0))
        for N in getattr(cfg, f"{env}_N"):
            for schedule in cfg.schedules:
                tau = schedule_tau(schedule, tau0)
                eta = getattr(cfg, f"{env}_eta_{schedule}")
                for G in theory.divisors(N):
                    start = time.perf_counter()
                    gaps = train_gaps(
                        task, data, theta0, j_star, N, G, steps, eta, tau, key, cfg.seeds
                    )
                    mean, se = float(gaps.mean()), float(gaps.std(ddof=1) / np.sqrt(gaps.size))
                    q25, q50, q75 = np.quantile(gaps, [0.25, 0.5, 0.75])
                    row = {
                        "env": env,
                        "N": N,
                        "schedule": schedule,
                        "G": G,
                        "B": N // G,
                        "steps": steps,
                        "eta0": eta,
                        "tau": tau,
                        "n_seeds": int(gaps.size),
                        "gap": mean,
                        "gap_se": se,
                        "gap_ci_low": mean - engine.Z95 * se,
                        "gap_ci_high": mean + engine.Z95 * se,
                        "gap_q25": float(q25),
                        "gap_median": float(q50),
                        "gap_q75": float(q75),
                        "gap0": j_star - j0,
                        "theory_mse": theory.fixed_n_mse(c, N, G),
                        "seconds": time.perf_counter() - start,
                    }
                    rows.append(row)
                    if on_row is not None:
                        on_row(row)
    return rows, train_summary(rows, consts)


def train_summary(rows: list[dict], consts: dict) -> list[dict]:
    out = []
    keys = dict.fromkeys((r["env"], r["N"], r["schedule"]) for r in rows)
    for env, N, schedule in keys:
        sub = [r for r in rows if (r["env"], r["N"], r["schedule"]) == (env, N, schedule)]
        best = min(sub, key=lambda r: r["gap"])
        tied = [r["G"] for r in sub if r["gap_ci_low"] <= best["gap_ci_high"]]
        c = consts[env]
        interior = sub[0]["G"] < best["G"] < sub[-1]["G"]
        out.append(
            {
                "env": env,
                "N": N,
                "schedule": schedule,
                "empirical_best_G": best["G"],
                "tied_G": tied,
                "interior_minimum": bool(interior),
                "predicted_best_G": theory.best_divisor(c, N),
                **c.to_dict(),
            }
        )
    return out
