"""The asynchronous-RL update kernel (issue 58): staleness, rollout–training mismatch and
minibatch reuse in one loop, each update against the exact gradient at the θ where it is applied.

One seed on the Markov env (:mod:`gpolab.envs.markov`, T tokens per response, exact g by dynamic
programming):

1. the inference engine draws the rollout batch (m minibatches of B prompts × G responses) at
   policy version θ_old from its own μ = :func:`~gpolab.envs.markov.behaviour_logits` (θ_old;
   ``kind``, ``size``) and records its log-probs log μ(y_t); with ``cell.switch`` its weights
   move on mid-response (an in-flight update): from that token on it samples from the trainer's
   next version θ_1 (so k ≥ 1), and each token's recorded log-prob is the version's that drew it;
2. staleness k: the trainer has moved on k steps of size η since (on-policy leave-one-out steps
   on fresh minibatches of the same size, as :mod:`gpolab.kernels.offpolicy`'s stale steps);
3. the trainer recomputes the batch's log-probs at θ_k, the version its training step starts
   from (AReaL's proximal π_prox, verl's and TRL's ``old_log_prob``);
4. the m minibatches are used in turn from θ_k: update j is the gradient of the composition's
   objective at the current θ, θ ← θ + η ĝ_j; its exact g(θ) comes from
   :func:`~gpolab.envs.markov.value_gradient` (one backward and one forward pass over the tokens
   in ``cell.cap`` count states).

A :class:`~gpolab.estimators.asynchronous.Correction` is how a trainer composes the three log-probs
of a token (:mod:`gpolab.estimators.asynchronous`, the frameworks' compositions): a ratio rule of
π_θ over the ``anchor`` (the trainer's π_prox, or the engine's μ) with its clip, times a detached
train–inference weight on (π_prox, μ). The objective sums over a response's tokens and averages over
the batch's responses (ĝ = Σ_x (1/B) Σ_g (A_g/G) Σ_t weight·∇(ratio term), T times the token mean of
a fixed-length batch), so that with no mismatch, no staleness and m = 1 every correction is the
unbiased leave-one-out gradient. Every update is also compared with the sequence-IS update on the
same minibatch, Π_t π_θ(y_t)/μ(y_t) from the engine's log-probs, which is unbiased for g at every θ
(the paired bias; gpolab's control, as the off-policy kernel's).

The protocol of :mod:`gpolab.kernels`: the static :class:`Cell`, :func:`per_seed` run by
:func:`gpolab.engine.run` once per split, and :func:`summary`, every update's statistics as
(E, K, m) arrays (η, staleness, update j) from the splits' moments.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gpolab import estimators, validate
from gpolab.envs import markov
from gpolab.estimators import asynchronous as compositions
from gpolab.estimators import mismatch
from gpolab.estimators import offpolicy as rules
from gpolab.estimators.asynchronous import Correction
from gpolab.kernels import offpolicy
from gpolab.kernels.splits import Splits, split_stats


@dataclasses.dataclass(frozen=True)
class Cell:
    """Static settings of one engine run: the correction, the mismatch kind, G responses per
    prompt, B prompts per minibatch, m minibatches per rollout batch and the staleness grid (the
    mismatch size, the step sizes and the clip knobs are traced)."""

    correction: Correction
    kind: str
    G: int
    B: int
    m: int
    staleness: tuple[int, ...]
    cap: int = 0  # count states of the exact gradient (markov.count_cap); 0: T + 1
    switch: int = 0  # the engine's weights move one version on after this many tokens (0: never)


class Batch(NamedTuple):
    """One minibatch as the engine hands it over: prompts (B,), tokens (B, G, T), the gradient
    weights c = A/G (B, G) of the leave-one-out advantages, the engine's log μ(y_t) (B, G, T) and
    the raw rewards (B, G) (VCPO's baseline reads them at the update)."""

    prompts: jax.Array
    tokens: jax.Array
    c: jax.Array
    engine: jax.Array
    rewards: jax.Array


def per_seed(cell: Cell, key: jax.Array, args: tuple) -> dict:
    """Errors of every update (η, k, j) of one seed; see the module docstring.

    Args:
      cell: static shapes, the correction and the mismatch kind.
      key: this seed's PRNG key, split into the rollout batch's, the stale steps' and the fresh
        comparators' keys.
      args: (params, θ_old (D,), etas (E,), size, eps_low, eps_high, clip_c), traced.

    Returns:
      dict of (E, K, m, ...) arrays: per update the error e = ĝ − g (D,) against the exact
      gradient at the current θ and its squared norm (and fourth power), the paired error
      against the sequence-IS update on the same minibatch, cos(ĝ, g), ĝ·g, ‖g‖², the fresh
      on-policy update's squared error and its ĝ·g, the clipped share, the mean
      |log π_θ − log μ| and the ESS ratio of the sequence weights Π_t π_θ/μ.
    """
    params, theta_old, etas, size, *knobs = args
    k_roll, k_stale, k_fresh = jax.random.split(key, 3)
    engine = functools.partial(_rollout, cell, params, k_roll, theta_old, size)
    rollout = None if cell.switch else engine(None)  # (m, ...) at θ_old
    per_eta = functools.partial(_at_step_size, k_stale, k_fresh, cell, params, theta_old, engine)
    return jax.vmap(per_eta, in_axes=(0, None, None))(etas, tuple(knobs), rollout)


def _rollout(cell: Cell, params, key, theta_old, size, theta_new) -> Batch:
    """The m minibatches the engine draws at θ_old (its μ), from token ``cell.switch`` on at
    the next version ``theta_new`` where its weights change mid-response."""
    mu = markov.behaviour_logits(params, theta_old, cell.kind, size)
    later = (
        None if theta_new is None else markov.behaviour_logits(params, theta_new, cell.kind, size)
    )
    draw = functools.partial(_draw, cell, params, mu, later=later)
    return jax.vmap(draw)(jax.random.split(key, cell.m))


def _draw(cell: Cell, params, logits, key, later=None) -> Batch:
    """B prompts × G responses drawn from the logit table ``logits`` (the engine's or π_θ's;
    ``later`` from token ``cell.switch`` on), each token's log-prob from the table it came from."""
    k_p, k_y = jax.random.split(key)
    prompts = markov.sample_prompts(k_p, params, cell.B)
    tokens, rewards = markov.sample_table(k_y, params, logits, prompts, cell.G, later, cell.switch)
    c = estimators.gradient_weights("loo", rewards)
    logp = markov.table_logp(params, logits, prompts, tokens)
    if later is not None:
        late = markov.table_logp(params, later, prompts, tokens)
        logp = jnp.where(jnp.arange(params.T) < cell.switch, logp, late)
    return Batch(prompts, tokens, c, logp, rewards)


def _at_step_size(k_stale, k_fresh, cell: Cell, params, theta_old, engine, eta, knobs, rollout):
    """Every update of step size η: the epoch from each stale θ_k; outputs (K, m, ...).  With
    an in-flight weight update the engine's later tokens come from θ_1, the trainer's next
    version on this η's path, so the rollout is drawn here."""
    path = _stale_path(k_stale, cell, params, theta_old, eta)
    if cell.switch:
        rollout = engine(path[1])
    epoch = functools.partial(_epoch, k_fresh, cell, params, rollout, eta, knobs)
    versions = jnp.asarray(cell.staleness, theta_old.dtype)  # the rollouts' age in versions
    return jax.vmap(epoch)(path[jnp.asarray(cell.staleness)], versions)


def _stale_path(key, cell: Cell, params, theta_old, eta) -> jax.Array:
    """(kmax + 1, D) θ after 0 … kmax on-policy loo steps of size η from θ_old (step i draws
    its minibatch from π_θ with ``fold_in(key, i)``)."""
    kmax = max(cell.staleness)
    if kmax == 0:
        return theta_old[None]

    def step(theta, i):
        theta = theta + eta * _on_policy(cell, params, theta, jax.random.fold_in(key, i))
        return theta, theta

    _, path = jax.lax.scan(step, theta_old, jnp.arange(kmax))
    return jnp.concatenate([theta_old[None], path])


def _on_policy(cell: Cell, params, theta, key) -> jax.Array:
    """The leave-one-out gradient on a fresh minibatch drawn from π_θ itself."""
    b = _draw(cell, params, markov.table(params, theta), key)
    return markov.gradient(params, theta, b.prompts, b.tokens, b.c / cell.B)


def _epoch(key, cell: Cell, params, rollout: Batch, eta, knobs, theta, age) -> dict:
    """The m minibatches used in turn from θ_k = ``theta``, the rollouts ``age`` = k versions
    old, the trainer's log-probs recomputed there once (π_prox); outputs (m, ...)."""
    prox, alpha = _proximal(cell, params, rollout, theta, age)
    step = functools.partial(_update, key, cell, params, rollout, prox, eta, (alpha, *knobs))
    return jax.lax.scan(step, theta, jnp.arange(cell.m))[1]


def _proximal(cell: Cell, params, rollout: Batch, theta, age) -> tuple:
    """(π_prox's log-probs of the rollout's tokens, recomputed once at the step's start θ
    (m, B, G, T); A-3PO's α per token for rollouts ``age`` versions old (T,))."""
    table = markov.table(params, theta)
    prox = jax.vmap(functools.partial(markov.table_logp, params, table))(
        rollout.prompts, rollout.tokens
    )
    return prox, _token_alpha(cell, params.T, age)


def _update(key, cell: Cell, params, rollout: Batch, prox, eta, knobs, theta, j) -> tuple:
    """Update j at θ: (θ + η ĝ_j, its errors against the exact g(θ))."""
    b = jax.tree.map(operator.itemgetter(j), rollout)
    ghat, (frac, gap, ess) = jax.grad(_objective, argnums=3, has_aux=True)(
        cell, params, b, theta, prox[j], *knobs
    )
    g = markov.value_gradient(params, theta, cell.cap or params.T + 1)[1]
    g_sis = jax.grad(_sis_objective, argnums=3)(cell, params, b, theta)
    g_fresh = _on_policy(cell, params, theta, jax.random.fold_in(key, j))
    e, e_p = ghat - g, ghat - g_sis
    out = {
        "e_g": e,
        "sq_g": e @ e,
        "sq_g2": (e @ e) ** 2,
        "e_p": e_p,
        "sq_p": e_p @ e_p,
        "sq_p2": (e_p @ e_p) ** 2,
        "dot": ghat @ g,
        "t2": g @ g,
        "cos": offpolicy._cos(ghat, g),
        "fresh": jnp.sum((g_fresh - g) ** 2),
        "dot_fresh": g_fresh @ g,
        "clip_frac": frac,
        "log_gap": gap,
        "ess": ess,
    }
    return theta + eta * ghat, out


def _objective(cell: Cell, params, b: Batch, theta, prox, alpha, *knobs) -> tuple:
    """(the correction's objective of minibatch b at θ, (clipped share, mean |log π_θ − log μ|,
    ESS ratio of the sequence weights Π_t π_θ/μ)).  ``prox``: π_prox recomputed at the step's
    start; with the ``interpolated`` anchor (AReaL's ``prox_logp_method`` loglinear) π_prox is
    log μ + α (log π_θ − log μ), with ``current`` the detached π_θ itself."""
    corr = cell.correction
    logp = markov.table_logp(params, markov.table(params, theta), b.prompts, b.tokens)
    if corr.anchor == "interpolated":
        prox = b.engine + jnp.broadcast_to(alpha, logp.shape) * (
            jax.lax.stop_gradient(logp) - b.engine
        )
    elif corr.anchor == "current":
        prox = jax.lax.stop_gradient(logp)
    anchor = b.engine if corr.anchor == "engine" else prox
    mask = jnp.ones_like(logp)
    c = _opob(corr, params, b, theta, prox) if corr.baseline == "opob" else b.c
    obj, cut = compositions.objective(corr, logp, anchor, c, mask, *knobs)
    weight = compositions.step_scale(corr, prox, b.engine, mask)
    if corr.weight != "none":
        ones = jnp.ones_like(b.c)
        coef = mismatch.correction(corr.weight, ones, prox, b.engine, mask, **dict(corr.options))
        weight = weight * jax.lax.stop_gradient(coef.coef)
    share = jnp.mean(cut.astype(logp.dtype))
    gap = jnp.mean(jnp.abs(logp - b.engine))
    ess = compositions.ess_ratio(jax.lax.stop_gradient(jnp.sum(logp - b.engine, -1)))
    return jnp.sum(weight * obj) / cell.B, (share, gap, ess)


def _opob(corr: Correction, params, b: Batch, theta, prox) -> jax.Array:
    """(B, G) c = A/G with VCPO's off-policy optimal baseline
    (:func:`gpolab.estimators.asynchronous.opob_advantages`), detached: each sequence's
    ‖∇log π_θ(y)‖² (one gradient per sequence), ρ = Π_t π_prox/μ and the group's raw rewards."""

    def seq_logp(th, x, y):
        return jnp.sum(markov.table_logp(params, markov.table(params, th), x[None], y[None, None]))

    per_seq = jax.vmap(jax.grad(seq_logp), in_axes=(None, None, 0))  # over a prompt's G
    grads = jax.vmap(per_seq, in_axes=(None, 0, 0))(theta, b.prompts, b.tokens)  # (B, G, D)
    log_rho = jnp.sum(prox - b.engine, -1)
    threshold = dict(corr.options)["is_threshold"]
    A = compositions.opob_advantages(b.rewards, log_rho, jnp.sum(grads**2, -1), threshold)
    return jax.lax.stop_gradient(A / b.rewards.shape[-1])


def _sis_objective(cell: Cell, params, b: Batch, theta):
    """The sequence-IS objective against the engine's log-probs (unbiased for g at every θ)."""
    logp = markov.table_logp(params, markov.table(params, theta), b.prompts, b.tokens)
    zero = jnp.zeros((), logp.dtype)
    mask = jnp.ones_like(logp)
    obj, _ = rules.objective("sis", "none", logp, b.engine, b.c, mask, zero, zero, zero)
    return jnp.sum(obj) / cell.B


def _token_alpha(cell: Cell, T: int, age):
    """(T,) AReaL's α per token for rollouts ``age`` versions old (tokens from ``cell.switch``
    on one version younger), as its loss reads them: each token takes the previous token's
    version (``versions`` is not shifted with the log-probs in ``PPOActor._compute_advantages``)
    and the first generated token α = 0."""
    t = jnp.arange(T)
    ages = age - (t >= cell.switch).astype(age.dtype) if cell.switch else jnp.full(T, age)
    return jnp.concatenate([jnp.zeros(1, ages.dtype), _interpolation(ages[:-1])])


def _interpolation(age):
    """AReaL's α for rollouts ``age`` versions old (``compute_prox_logp_approximations``: α =
    clamp(((v − 1) − v_b)/(v − v_b), 0, 1), v − v_b = age; 0 at age 0): (age − 1)/age."""
    return jnp.clip((age - 1) / jnp.maximum(age, 1), 0, 1)


def inputs(cell: Cell, params, theta_old, etas, size, eps_low=0.2, eps_high=0.28, clip_c=3.0):
    """``args`` of :func:`per_seed` in θ's dtype (the knobs traced: a new value recompiles
    nothing)."""
    cell.correction.validate()
    validate.choice("mismatch kind", cell.kind, markov.MISMATCH_KINDS)
    validate.integer("switch", cell.switch, 0, params.T - 1)
    if cell.switch and min(cell.staleness) < 1:
        raise validate.ConfigError(
            f"staleness: got {min(cell.staleness)} with switch {cell.switch}; allowed: at least 1 "
            "(the engine's later weights are the trainer's next version)"
        )
    if cell.cap and cell.cap < markov.count_cap(params):
        raise validate.ConfigError(
            f"cap: got {cell.cap}; allowed: 0 or at least {markov.count_cap(params)} (the largest "
            "threshold + 1)"
        )
    dtype = theta_old.dtype
    knobs = (jnp.asarray(x, dtype) for x in (size, eps_low, eps_high, clip_c))
    return (params, theta_old, jnp.asarray(etas, dtype), *knobs)


# ---------------------------------------------------------------- the summary


class Summary(NamedTuple):
    """Every update's statistics over (E, K, m): ``main`` the error against g, ``paired`` against
    the sequence-IS update on the same minibatch (:class:`~gpolab.kernels.splits.Splits`); the
    means of cos, of the clipped share and of |log π_θ − log μ|; ``scale`` = E ĝ·g/E‖g‖² (1: no
    shrinkage); ``best_split`` and ``best_fresh_split`` per split the MSE at the best scalar
    rescaling, min_c E‖c ĝ − g‖² = ‖g‖² − (E ĝ·g)²/E‖ĝ‖², of the update and of the fresh one
    (a scale-free error: a shrunk update is not a precise one); ``ess`` the mean ESS ratio
    (Σ w)²/(N Σ w²) of the minibatch's sequence weights Π_t π_θ/μ at the update; ``fresh`` the
    fresh on-policy update's MSE at the same θ; ``n`` seeds."""

    main: Splits
    paired: Splits
    cos: np.ndarray
    clip_frac: np.ndarray
    log_gap: np.ndarray
    ess: np.ndarray
    scale: np.ndarray
    fresh: np.ndarray
    fresh_split: np.ndarray
    best_split: np.ndarray
    best_fresh_split: np.ndarray
    n: int


def summary(parts: list) -> Summary:
    """:class:`Summary` of the engine runs ``parts`` of :func:`per_seed` (one per split)."""
    n = sum(p.n for p in parts)

    def mean(name):
        return sum(p.sums[name] for p in parts) / n

    def split(name):
        return np.stack([p.sums[name] / p.n for p in parts])

    def best(sq, dot):  # ‖g‖² − (E ĝ·g)² / E‖ĝ‖², E‖ĝ‖² = E‖ĝ − g‖² + 2 E ĝ·g − ‖g‖²
        t2 = split("t2")
        hat2 = sq + 2 * dot - t2
        zero = hat2 <= 0  # ĝ = 0 on every seed (every sequence masked): the best is ‖g‖²
        return t2 - np.where(zero, 0.0, dot**2 / np.where(zero, 1.0, hat2))

    return Summary(
        main=split_stats(parts, "e_g", "sq_g", "sq_g2"),
        paired=split_stats(parts, "e_p", "sq_p", "sq_p2"),
        cos=mean("cos"),
        clip_frac=mean("clip_frac"),
        log_gap=mean("log_gap"),
        ess=mean("ess"),
        scale=mean("dot") / mean("t2"),
        fresh=mean("fresh"),
        fresh_split=split("fresh"),
        best_split=best(split("sq_g"), split("dot")),
        best_fresh_split=best(split("fresh"), split("dot_fresh")),
        n=n,
    )


# ---------------------------------------------------------------- training curves


@dataclasses.dataclass(frozen=True)
class Training:
    """Static settings of a training run: the update's :class:`Cell` (its largest
    ``staleness`` the oldest version a round's rollout may come from) and ``rounds``, rollout
    batches of ``cell.m`` minibatch updates each."""

    cell: Cell
    rounds: int


def train_seed(run: Training, key: jax.Array, args: tuple) -> dict:
    """One seed's training curves on the exact expected reward J, for every step size and
    staleness law.

    Each round the engine draws a rollout batch (m minibatches, as :func:`per_seed`) from the
    policy version ``age`` updates older than the trainer's (``age`` drawn from the law's
    probabilities over 0 … kmax, at most the updates done so far; with ``cell.switch`` the
    tokens from ``switch`` on come from the version one update younger), the trainer recomputes
    π_prox at its current θ and applies the m updates of the correction; every update is one
    policy version.  Rounds of all corrections share their draws (common random numbers).

    Args:
      run: the cell and the number of rounds (static).
      key: this seed's PRNG key.
      args: (params, θ_0 (D,), etas (E,), laws (L, kmax + 1) probabilities of a rollout's age,
        size, eps_low, eps_high, clip_c), traced.

    Returns:
      dict of (E, L, rounds) arrays: J after each round, the round's clipped share, its mean
      |log π_θ − log μ|, its mean ESS ratio of the sequence weights and the rollout's age.
    """
    params, theta0, etas, laws, size, *knobs = args
    curve = functools.partial(_train, run, params, theta0, key, size, tuple(knobs))
    per_law = jax.vmap(curve, in_axes=(None, 0))
    return jax.vmap(per_law, in_axes=(0, None))(etas, laws)


def _train(run: Training, params, theta0, key, size, knobs, eta, law) -> dict:
    """The curve of one (η, staleness law): outputs (rounds,)."""
    cell = run.cell
    kmax = max(cell.staleness)
    versions = jnp.broadcast_to(theta0, (kmax + 1, *theta0.shape))  # newest first

    def one_round(versions, r):
        k_age, k_roll = jax.random.split(jax.random.fold_in(key, r))
        age = jnp.minimum(jax.random.choice(k_age, kmax + 1, p=law), r * cell.m)
        later = versions[jnp.maximum(age - 1, 0)] if cell.switch else None
        rollout = _rollout(cell, params, k_roll, versions[age], size, later)
        prox, alpha = _proximal(cell, params, rollout, versions[0], age.astype(theta0.dtype))

        def update(versions, j):
            b = jax.tree.map(operator.itemgetter(j), rollout)
            ghat, aux = jax.grad(_objective, argnums=3, has_aux=True)(
                cell, params, b, versions[0], prox[j], alpha, *knobs
            )
            theta = versions[0] + eta * ghat
            return jnp.concatenate([theta[None], versions[:-1]]), aux

        versions, (frac, gap, ess) = jax.lax.scan(update, versions, jnp.arange(cell.m))
        out = {
            "J": markov.expected_return(params, versions[0]),
            "clip_frac": jnp.mean(frac),
            "log_gap": jnp.mean(gap),
            "ess": jnp.mean(ess),
            "age": age.astype(theta0.dtype),
        }
        return versions, out

    return jax.lax.scan(one_round, versions, jnp.arange(run.rounds))[1]
