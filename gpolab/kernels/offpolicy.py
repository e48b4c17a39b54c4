"""The off-policy update kernel: the practical GRPO update (minibatch reuse, importance ratios,
clipping, KL penalties and stale rollouts) against the exact gradient, one seed at a time.

Theory §13 and [U] arXiv 2603.01162 Appendix A (Algorithm 2, Thm 12).  One seed:

1. a rollout batch of ``m`` minibatches (B prompts × G responses each) is drawn at θ_old;
2. staleness k: the trainer has moved on k updates since (k SGD steps of size η at θ_old with
   fresh on-policy minibatches of the same size and rule);
3. the m minibatches are used in turn (Algorithm 2, lines 8–10): update j is the rule's gradient
   at the current θ (after k + j steps) with ratios against θ_old, then θ ← θ + η ĝ_j.

Every update j is compared with the exact gradient at the θ where it is applied: g(θ) = ∇J(θ)
(the plain objective) and g†(θ) = Σ_x f_x ∇V_x(θ)/σ_x(θ_old) ([U]'s target with the population
std; with a KL term both subtract κ ∇KL(π_θ‖π_ref), gpolab's reading, see docs/papers.md
note 17), exactly from the env.  The protocol of :mod:`gpolab.kernels`: the static
:class:`Cell`, :func:`per_seed` run by :func:`gpolab.engine.run` once per split, and
:func:`summary`, every update's statistics as (E, K, m) arrays from the splits' moments
(:mod:`gpolab.kernels.splits`): bias² (‖E e‖², unbiased), variance (tr Cov ĝ), MSE, cos, a
scale-free snr = ‖E ĝ‖²/tr Cov ĝ, the paired bias against the SIS update on the same draws and
the comparison with a fresh on-policy update at the same θ.

How a knob reaches the numbers: η, eps_low, eps_high, clip_c and κ are the traced ``args`` of
:func:`per_seed`, which maps :func:`at_step_size` over the η of ``args`` (stale steps
:func:`stale_thetas` and the epoch's updates :func:`update` both move θ by η ĝ) and hands the
clip knobs and κ to :func:`surrogate` in :class:`Knobs`.  Shapes and the rule are the static
:class:`Cell`.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from gpolab import envs, estimators
from gpolab.estimators import offpolicy as rules
from gpolab.kernels.splits import Splits, split_stats


@dataclasses.dataclass(frozen=True)
class Cell:
    """Static settings of one engine run (shapes and the rule; continuous knobs are traced)."""

    env: str
    advantage: str
    ratio: str
    clip: str
    kl: str
    G: int
    B: int  # 0: every prompt once (bandit)
    m: int  # the most minibatches of any row (rows with fewer use the first updates)
    staleness: tuple[int, ...]
    prompts: int  # P (B = 0 draws every prompt)
    dagger: bool = False  # the main target is g† (std-normalized advantages), else g


@struct.dataclass
class Knobs:
    """A rule's continuous knobs, traced scalars (sweeping them does not recompile)."""

    eps_low: jax.Array  # PPO clip epsilon (both sides for ppo and dual)
    eps_high: jax.Array  # upper clip epsilon of clip-higher and cispo
    clip_c: jax.Array  # dual-clip floor c
    kappa: jax.Array  # KL coefficient κ


@struct.dataclass
class Start:
    """What every update of one seed reads and none changes: the env (static), its params, θ_old
    (D,) where the rollouts are drawn, θ_ref (D,), the prompt weights f (P,) and reward std σ_old
    (P,) at θ_old, the lab's metric ((D,), or 1.0 with iid prompts; :func:`metric`) and the
    rule's :class:`Knobs`."""

    env: Any = struct.field(pytree_node=False)
    params: Any
    theta_old: jax.Array
    theta_ref: jax.Array
    f: jax.Array
    sigma_old: jax.Array
    metric: Any
    knobs: Knobs


def per_seed(cell: Cell, key: jax.Array, args: tuple) -> dict:
    """Errors of every update (η, k, j) of one seed; see the module docstring.  The engine's
    kernel (``fn(cell, key, args)``): ``jit(vmap)`` over seeds, ``cell`` static.

    Args:
      cell: static shapes and rule.
      key: this seed's PRNG key, split once into the rollout batch's, the stale steps' and the
        fresh comparators' keys.
      args: (params, θ_old (D,), θ_ref (D,), σ_old (P,), etas (E,), eps_low, eps_high, clip_c, κ),
        every continuous knob traced (:func:`inputs`).

    Returns:
      dict of (E, K, m, ...) arrays, K = ``len(cell.staleness)``: per update the errors
      ``e_*`` (D,) and their squared norms, ĝ, the fresh comparator's and the scale-free sums,
      the clipped fraction and mean |log ratio| (see :func:`update`).
    """
    params, theta_old, theta_ref, sigma_old, etas, eps_low, eps_high, clip_c, kappa = args
    knobs = Knobs(eps_low, eps_high, clip_c, kappa)
    env = envs.get(cell.env)
    k_roll, k_stale, k_fresh = jax.random.split(key, 3)
    f, _ = env.values(params, theta_old)
    s = Start(env, params, theta_old, theta_ref, f, sigma_old, metric(cell, f, theta_old), knobs)
    draw_old = functools.partial(draw, cell=cell, s=s, theta=theta_old)
    rollout = jax.vmap(draw_old)(jax.random.split(k_roll, cell.m))  # the m minibatches at θ_old
    per_eta = functools.partial(at_step_size, k_stale, k_fresh, cell, s, rollout)
    return jax.vmap(per_eta)(etas)  # every output (E, K, m, ...)


def at_step_size(k_stale, k_fresh, cell: Cell, s: Start, rollout: tuple, eta) -> dict:
    """Every update of step size η: the epoch from each stale θ_k; outputs (K, m, ...)."""
    epoch_from = functools.partial(epoch, k_fresh, cell, s, rollout, eta)
    return jax.vmap(epoch_from)(stale_thetas(k_stale, cell, s, eta))


def stale_thetas(key, cell: Cell, s: Start, eta) -> jax.Array:
    """(K, D) θ after k on-policy steps of size η from θ_old, for every k of the staleness grid
    (step i draws its fresh minibatch with ``fold_in(key, i)``)."""
    kmax = max(cell.staleness)
    if kmax == 0:
        return jnp.broadcast_to(s.theta_old, (len(cell.staleness),) + s.theta_old.shape)
    step = functools.partial(_stale_step, key, cell, s, eta)
    _, path = jax.lax.scan(step, s.theta_old, jnp.arange(kmax))
    path = jnp.concatenate([s.theta_old[None], path])
    return path[jnp.asarray(cell.staleness)]


def _stale_step(key, cell: Cell, s: Start, eta, theta, i):
    """One on-policy SGD step θ + η ĝ on a fresh minibatch at θ (scan body: (carry, path))."""
    ghat, _ = rule_grad(cell, s, theta, draw(jax.random.fold_in(key, i), cell, s, theta))
    return theta + eta * ghat, theta + eta * ghat


def epoch(key, cell: Cell, s: Start, rollout: tuple, eta, theta) -> dict:
    """The m minibatches of ``rollout`` used in turn from θ (Algorithm 2, lines 8–10): outputs
    (m, ...) of :func:`update` (update j's comparator draws with ``fold_in(key, j)``)."""
    step = functools.partial(update, key, cell, s, rollout, eta)
    return jax.lax.scan(step, theta, jnp.arange(cell.m))[1]


def update(key, cell: Cell, s: Start, rollout: tuple, eta, theta, j) -> tuple:
    """Update j at θ: (θ + η ĝ_j, its errors).  ĝ_j is the rule's gradient on minibatch j of
    ``rollout`` with ratios against θ_old; it is compared with the exact targets at θ (g, g†),
    with the SIS update on the same minibatch (paired bias) and with a fresh on-policy update at
    θ (drawn with ``fold_in(key, j)``); every error in the lab's metric."""
    b = jax.tree.map(operator.itemgetter(j), rollout)
    ghat, (_, frac, log_ratio) = rule_grad(cell, s, theta, b)
    g, g_dag, g_kl = targets(cell, s, theta)
    metric = s.metric
    e_g, e_d = metric * (ghat - g), metric * (ghat - g_dag)
    # the comparator: an on-policy update at the same θ from a fresh minibatch
    g_fresh, _ = rule_grad(cell, s, theta, draw(jax.random.fold_in(key, j), cell, s, theta))
    pg, out = ghat, {}
    if cell.kl != "none":
        pg, out = _kl_errors(cell, s, theta, b, ghat, g_kl)
    # paired bias: the policy-gradient part minus the SIS update on the same minibatch
    # (SIS is unbiased for g with a baseline independent of the response, e.g. loo)
    g_sis = jax.grad(sis_objective, argnums=2)(cell, s, theta, b)
    e_p = metric * (pg - g_sis)
    # the scale-free comparison (best rescaling of the update) against the main target
    t = g_dag if cell.dagger else g
    mt, mg, mf = (metric * x for x in (t, ghat, g_fresh))
    out |= {
        "e_g": e_g,
        "e_d": e_d,
        "ghat": ghat,
        "e_p": e_p,
        "sq_g": jnp.sum(e_g**2),
        "sq_d": jnp.sum(e_d**2),
        "sq_p": jnp.sum(e_p**2),
        "sq_g2": jnp.sum(e_g**2) ** 2,
        "sq_d2": jnp.sum(e_d**2) ** 2,
        "sq_p2": jnp.sum(e_p**2) ** 2,
        "sq_sis": jnp.sum((metric * g_sis) ** 2),
        "norm2": jnp.sum(ghat**2),
        "fresh": jnp.sum((mf - mt) ** 2),
        "cos": _cos(ghat, t),
        "dot": mg @ mt,
        "n2": mg @ mg,
        "t2": mt @ mt,
        "dot_f": mf @ mt,
        "n2_f": mf @ mf,
        "clip_frac": frac,
        "log_ratio": log_ratio,
    }
    return theta + eta * ghat, out


def _kl_errors(cell: Cell, s: Start, theta, b: tuple, ghat, g_kl) -> tuple:
    """The KL estimator's own gradient on minibatch b against the exact ∇KL: (the update's
    policy-gradient part ĝ + κ ∇k, the KL columns' per-seed terms)."""
    est = jax.grad(kl_term, argnums=2)(cell, s, theta, b)
    e_kl = s.metric * (est - g_kl)  # the metric of bias_sq and mse
    pg = ghat + s.knobs.kappa * est
    return pg, {
        "e_kl": e_kl,
        "sq_kl": jnp.sum(e_kl**2),
        "sq_kl2": jnp.sum(e_kl**2) ** 2,
        "kl_grad_sq": jnp.sum((s.metric * g_kl) ** 2),
    }


def draw(key, cell: Cell, s: Start, theta) -> tuple:
    """One minibatch drawn at θ, with what the rules read of it.

    Args:
      key: PRNG key, split into the prompts' and the responses' keys.
      cell: static G, B (0: every prompt once), advantage estimator and KL estimator.
      s: the seed's fixed inputs.
      theta: (D,) the sampling policy (the ratios' θ_old of this minibatch).

    Returns:
      (prompts (n,), responses (n, G, ...), weights c (n, G), θ's token log-probs (n, G, T),
      θ_ref's (θ's again without a KL term), mask (n, G, T), prompt weights w (n,)).
    """
    k_p, k_y = jax.random.split(key)
    if cell.B == 0:
        prompts = jnp.arange(cell.prompts, dtype=jnp.int32)
    else:
        prompts = s.env.sample_prompts(k_p, s.params, cell.B)
    responses, rewards = s.env.sample(k_y, s.params, theta, prompts, cell.G)
    c = estimators.gradient_weights(cell.advantage, rewards)
    old, mask = s.env.token_logp(s.params, theta, prompts, responses)
    if cell.kl != "none":
        ref = s.env.token_logp(s.params, s.theta_ref, prompts, responses)[0]
    else:
        ref = old
    return (prompts, responses, c, old, ref, mask, _prompt_weights(cell, s.f, prompts))


def _prompt_weights(cell: Cell, f, prompts):
    """(n,) the weight of each minibatch prompt in ĝ: 1/B for iid prompts, f_x for B = 0."""
    return f[prompts] if cell.B == 0 else jnp.full(prompts.shape, 1.0 / cell.B, f.dtype)


def surrogate(cell: Cell, s: Start, theta, batch: tuple) -> tuple:
    """(objective, (KL term, clipped fraction, mean log ratio)): the rule's objective of one
    minibatch at θ, whose gradient is the update (Σ_x w_x [Σ_g Σ_t rule weight · s_t] − κ ∇(KL
    estimate)).  ``batch``: a :func:`draw`."""
    prompts, responses, c, old, ref, mask, w = batch
    k = s.knobs
    logp, _ = s.env.token_logp(s.params, theta, prompts, responses)
    obj, cut = rules.objective(
        cell.ratio, cell.clip, logp, old, c, mask, k.eps_low, k.eps_high, k.clip_c
    )
    pg = jnp.sum(w[:, None, None] * obj)
    kl = jnp.sum(w[:, None, None] * rules.kl_terms(cell.kl, logp, ref, mask, old)) / cell.G
    frac = jnp.sum(cut) / jnp.maximum(jnp.sum(mask), 1.0)
    log_ratio = jnp.sum(jnp.abs(logp - old) * mask) / jnp.maximum(jnp.sum(mask), 1.0)
    return pg - k.kappa * kl, (kl, frac, log_ratio)


def rule_grad(cell: Cell, s: Start, theta, batch: tuple) -> tuple:
    """(ĝ (D,), (KL term, clipped fraction, mean log ratio)): the rule's update direction."""
    return jax.grad(surrogate, argnums=2, has_aux=True)(cell, s, theta, batch)


def kl_term(cell: Cell, s: Start, theta, batch: tuple):
    """The KL estimate of the minibatch (its gradient is the KL estimator's own)."""
    return surrogate(cell, s, theta, batch)[1][0]


def sis_objective(cell: Cell, s: Start, theta, batch: tuple):
    """The sequential-IS policy-gradient objective of a minibatch (the unbiased control)."""
    prompts, responses, c, old, _, mask, w = batch
    k = s.knobs
    logp, _ = s.env.token_logp(s.params, theta, prompts, responses)
    obj, _ = rules.objective("sis", "none", logp, old, c, mask, k.eps_low, k.eps_high, k.clip_c)
    return jnp.sum(w[:, None, None] * obj)


def targets(cell: Cell, s: Start, theta) -> tuple:
    """(g, g†, ∇KL) at θ, exact, each (D,): g = Σ_x f_x ∇V_x, g† = Σ_x f_x ∇V_x / σ_x(θ_old),
    both minus κ ∇KL(π_θ‖π_ref) with a KL term (∇KL = 0 without)."""
    _, vjp = jax.vjp(functools.partial(_values, s), theta)
    (both,) = jax.vmap(vjp)(jnp.stack([s.f, s.f / s.sigma_old]))
    g, g_dag = both
    if cell.kl == "none":
        return g, g_dag, jnp.zeros_like(g)
    g_kl = jax.grad(s.env.kl, argnums=1)(s.params, theta, s.theta_ref)
    kappa = s.knobs.kappa
    return g - kappa * g_kl, g_dag - kappa * g_kl, g_kl


def _values(s: Start, theta):
    """(P,) the prompts' values V_x(θ)."""
    return s.env.values(s.params, theta)[1]


def metric(cell: Cell, f, theta):
    """The lab's metric on gradients (every column: bias², MSE, the KL columns): with B = 0 the
    sweep's, prompt x's error weighted √f_x (block x of ĝ − g is f_x (ĝ_x − g_x), so each
    coordinate of x is divided by √f_x); with iid prompts the plain Euclidean norm."""
    if cell.B != 0:
        return 1.0
    return jnp.repeat(1 / jnp.sqrt(f), theta.shape[0] // f.shape[0])


def target(advantage: str) -> str:
    """``g_dagger`` for advantages whose G → ∞ direction is the per-prompt std-normalized one
    ([U]'s g†), else ``g``."""
    entry, options = estimators.bind(advantage)
    return "g_dagger" if entry.limit_for(options) == "std" else "g"


def _cos(a, b):
    n = jnp.linalg.norm(a) * jnp.linalg.norm(b)
    return jnp.where(n > 0, jnp.dot(a, b) / jnp.where(n > 0, n, 1.0), 0.0)


def kl_theory(cell: Cell, params, theta_old, theta_ref) -> float:
    """The KL estimator ``cell.kl``'s exact on-policy bias² ‖E ∇k − ∇KL(π_θ‖π_ref)‖² at θ_old in
    the lab's metric (:func:`metric`): theory §13's E∇k1 = 0 and E∇k2 = ∇KL(π_θ‖π_ref) (closed
    forms); E∇k3 (∇KL(π_ref‖π_θ) where verl's clamps do not bind) and E∇k3_ratio (TRL's
    ratio-corrected k3: ∇KL(π_θ‖π_ref)) by enumerating every (prompt, action) of the bandit (the
    one env with an exact KL) with weights f_x π(a|x) and π_old = π_θ_old held constant."""
    env = envs.get(cell.env)
    f, _ = env.values(params, theta_old)
    forward = jax.grad(env.kl, argnums=1)(params, theta_old, theta_ref)
    if cell.kl in ("k1", "k2"):
        mean = 0.0 * forward if cell.kl == "k1" else forward
    else:
        P, A = params.success.shape
        prompts, actions = jnp.repeat(jnp.arange(P), A), jnp.tile(jnp.arange(A), P)[:, None]
        weight = f[prompts] * jnp.exp(
            env.token_logp(params, theta_old, prompts, actions)[0][:, 0, 0]
        )  # constants: the expectation of the gradient, not the gradient of one
        ref = env.token_logp(params, theta_ref, prompts, actions)[0]
        old = env.token_logp(params, theta_old, prompts, actions)[0]  # k3_ratio's π_old
        expected = functools.partial(_expected_kl, cell.kl, env, params, prompts, actions)
        mean = jax.grad(expected)(theta_old, weight, ref, old)
    err = metric(cell, f, theta_old) * (mean - forward)
    return float(np.sum(np.asarray(err, np.float64) ** 2))


def _expected_kl(kl: str, env, params, prompts, actions, theta, weight, ref, old):
    """Σ weight · k(θ) over the enumerated (prompt, action) pairs: with the weights f_x π(a|x)
    and π_old held constant, its gradient is E ∇k."""
    logp, mask = env.token_logp(params, theta, prompts, actions)
    return jnp.sum(weight * rules.kl_terms(kl, logp, ref, mask, old)[:, 0, 0])


# ---------------------------------------------------------------- the summary

PAIRED_ROUNDING = 1e-5  # an RMS paired difference below this share of the SIS update's: rounding


class Scaled(NamedTuple):
    """The relative MSE at the best rescaling of the update, 1 − (E ĝ·t)²/(E‖ĝ‖² E‖t‖²), for the
    rule and for the fresh on-policy update at the same θ (E, K, m), per split (S, E, K, m), and
    the best scale E ĝ·t/E‖ĝ‖²."""

    rule: np.ndarray
    fresh: np.ndarray
    rule_split: np.ndarray
    fresh_split: np.ndarray
    best_scale: np.ndarray


class Summary(NamedTuple):
    """Every update's statistics over (E, K, m) = (η, staleness, update j), from :func:`summary`.

    ``g``, ``dagger``: the errors against g and g†, ``main`` the one of the advantage's target;
    ``paired``: the policy-gradient part minus the SIS update on the same minibatch (exact zeros
    where the two agree up to float rounding); ``kl``: the KL estimator's gradient against ∇KL
    and ``kl_grad_sq`` ‖∇KL‖² (None without a KL term); ``cos``, ``snr``, ``clip_frac``,
    ``log_ratio``: means; ``fresh``: the MSE of a fresh on-policy update at the same θ
    (``fresh_split`` per split); ``scaled``: :class:`Scaled`; ``n``: seeds."""

    g: Splits
    dagger: Splits
    main: Splits
    paired: Splits
    kl: Splits | None
    kl_grad_sq: np.ndarray | None
    cos: np.ndarray
    snr: np.ndarray
    clip_frac: np.ndarray
    log_ratio: np.ndarray
    fresh: np.ndarray
    fresh_split: np.ndarray
    scaled: Scaled
    n: int


def summary(cell: Cell, parts: list) -> Summary:
    """:class:`Summary` of the engine runs ``parts`` of :func:`per_seed` (one per split)."""
    n = sum(p.n for p in parts)
    mean = functools.partial(_pooled_mean, parts, n)
    g, dagger = (
        split_stats(parts, "e_g", "sq_g", "sq_g2"),
        split_stats(parts, "e_d", "sq_d", "sq_d2"),
    )
    paired = _paired(split_stats(parts, "e_p", "sq_p", "sq_p2"), mean("sq_p"), mean("sq_sis"))
    signal = np.sum(mean("ghat") ** 2, -1)
    noise = (mean("norm2") - signal) * n / (n - 1)
    snr = np.where(noise > 0, signal / np.where(noise > 0, noise, 1), np.inf)
    with_kl = cell.kl != "none"
    return Summary(
        g=g,
        dagger=dagger,
        main=dagger if cell.dagger else g,
        paired=paired,
        kl=split_stats(parts, "e_kl", "sq_kl", "sq_kl2") if with_kl else None,
        kl_grad_sq=mean("kl_grad_sq") if with_kl else None,
        cos=mean("cos"),  # against the main target
        snr=snr,
        clip_frac=mean("clip_frac"),
        log_ratio=mean("log_ratio"),
        fresh=mean("fresh"),
        fresh_split=np.stack([p.sums["fresh"] / p.n for p in parts]),
        scaled=_scaled(parts),
        n=n,
    )


def _pooled_mean(parts: list, n: int, name: str):
    return sum(p.sums[name] for p in parts) / n


def _paired(s: Splits, sq_p, sq_sis) -> Splits:
    """The paired statistics with exact zeros where the rule's update is the SIS update up to
    float rounding: where the paired difference's RMS over the seeds is at most
    ``PAIRED_ROUNDING`` times the SIS update's (float32 rounds each operation to ~1e-7; a rule
    that differs from SIS differs by far more: the token ratio after one step at the smallest η
    of the lab's experiments by ~1e-3), bias², its splits (so its SE), MSE and variance are 0."""
    zero = sq_p <= PAIRED_ROUNDING**2 * sq_sis
    pooled = type(s.pooled)(*(np.where(zero, 0.0, x) for x in s.pooled))
    split = s.split._replace(bias_sq=np.where(zero, 0.0, s.split.bias_sq))
    return Splits(pooled, split, s.mse_se)


def _scaled(parts: list) -> Scaled:
    """:class:`Scaled`: pooled over the splits and per split."""
    n = sum(p.n for p in parts)
    out = []
    for dot, n2 in (("dot", "n2"), ("dot_f", "n2_f")):
        pooled = {k: sum(p.sums[k] for p in parts) for k in (dot, n2, "t2")}
        out.append(_relative_mse(pooled, n, dot, n2))
    for dot, n2 in (("dot", "n2"), ("dot_f", "n2_f")):
        out.append(np.stack([_relative_mse(p.sums, p.n, dot, n2) for p in parts]))
    best = sum(p.sums["dot"] for p in parts) / sum(p.sums["n2"] for p in parts)
    return Scaled(*out, best)


def _relative_mse(sums: dict, n: int, dot: str, n2: str):
    """1 − (E ĝ·t)²/(E‖ĝ‖² E‖t‖²) from the sums over n seeds (``dot``, ``n2``: ĝ's columns)."""
    d, a, t = (sums[k] / n for k in (dot, n2, "t2"))
    return 1 - d**2 / (a * t)
