"""The rollout–training mismatch kernel: a framework's mismatch correction against the exact
gradient (issue 43; ``gpolab mismatch`` runs it).

A batch of B prompts × G responses of T tokens is drawn from the sampler's policy μ
(:func:`gpolab.envs.markov.behaviour_logits`), while the trainer's π_θ is the policy whose exact
gradient g = ∇J(θ) the env gives (:mod:`gpolab.envs.markov`).  Advantages are leave-one-out
(unbiased on-policy), and a correction of :mod:`gpolab.estimators.mismatch` turns them into
per-token weights with its framework's denominator; the estimate is

    ĝ = T · Σ_batch Σ_t w_t ∇ log π_θ(y_t | x, y_{t−1}),

T times the per-token aggregation, so that with no mismatch every correction's estimate is the
plain leave-one-out gradient, unbiased for g (responses have exactly T tokens).  Over seeds:
bias² = ‖E ĝ − g‖² (the unbiased estimate, with its standard error from ``splits`` independent
seed batches, :mod:`gpolab.kernels.splits`), variance = tr Cov ĝ, MSE, cos(E ĝ, g), scale =
E ĝ·g/‖g‖² (1: no shrinkage; a correction that zeroes most sequences drives it to 0) and the
share of tokens the correction truncated, masked or rejected.  gpolab's measurement; the
corrections are ported from their frameworks' code (each registry entry names its source).

The protocol of :mod:`gpolab.kernels`: the static :class:`Cell`, :func:`per_seed` (and
:func:`per_seed_pi`, draws from π for a weight μ's draws cannot resolve) run by
:func:`gpolab.engine.run`, and :func:`measure`, the summary of one cell at one :class:`Point`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gpolab import engine, estimators
from gpolab.envs import markov
from gpolab.estimators import mismatch
from gpolab.kernels.splits import estimates, mean_se

SPLITS = 8  # the seed batches behind every standard error
MEAN_ONLY = ("variance", "mse", "rel_mse")  # withheld where μ's draws cannot see the weight's tail
RESOLVE = 0.01  # resolved: the weight's variance bound at most RESOLVE × the sequences drawn


@dataclasses.dataclass(frozen=True)
class Cell:
    """One measurement's static shape: the correction, B prompts, G responses, and the
    correction's overridden options as sorted (name, value) pairs."""

    correction: str
    B: int
    G: int
    options: tuple = ()


class Truth(NamedTuple):
    """A mismatch's exact side: μ's logit table, the exact g at θ and the mismatch's size
    (:class:`gpolab.envs.markov.Mismatch`, as floats)."""

    mu: jax.Array
    g: jax.Array
    sizes: markov.Mismatch


class Point(NamedTuple):
    """Where a cell is measured: the env, θ, the mismatch (``kind``, ``size``) and its
    :class:`Truth` (:func:`point` builds one)."""

    params: markov.MarkovParams
    theta: jax.Array
    kind: str
    size: float
    truth: Truth


@dataclasses.dataclass(frozen=True)
class Draws:
    """How many draws: ``seeds`` in ``splits`` batches of ``seeds // splits``, ``chunk`` seeds
    per compiled chunk (0: automatic)."""

    seeds: int = 4096
    splits: int = SPLITS
    chunk: int = 0


def truth(params: markov.MarkovParams, theta, kind: str, size: float) -> Truth:
    """:class:`Truth` of the mismatch (``kind``, ``size``) at θ."""
    mu = markov.behaviour_logits(params, theta, kind, size)
    sizes = markov.Mismatch(*(float(v) for v in markov.mismatch(params, theta, mu)))
    return Truth(mu, markov.exact(params, theta).g, sizes)


def point(params: markov.MarkovParams, theta, kind: str, size: float) -> Point:
    return Point(params, theta, kind, size, truth(params, theta, kind, size))


def _batch(key, cell: Cell, params, theta, mu, sampler) -> tuple:
    """B prompts × G responses drawn from the logit table ``sampler`` (μ's or π_θ's), with their
    rewards and per-token log-probabilities under π_θ and under μ."""
    k_prompts, k_responses = jax.random.split(key)
    prompts = markov.sample_prompts(k_prompts, params, cell.B)
    ys, rewards = markov.sample_table(k_responses, params, sampler, prompts, cell.G)
    logp = markov.table_logp(params, markov.table(params, theta), prompts, ys)
    return prompts, ys, rewards, logp, markov.table_logp(params, mu, prompts, ys)


def per_seed(cell: Cell, key: jax.Array, args: tuple) -> dict:
    """One batch from μ (``args`` = (params, θ, μ's logits, g)): the error e = ĝ − g, ‖e‖² and
    the flagged share."""
    params, theta, mu, g = args
    prompts, ys, rewards, logp, logp_mu = _batch(key, cell, params, theta, mu, mu)
    A = estimators.loo_advantages(rewards)
    est = mismatch.estimate_weights(
        cell.correction, A, logp, logp_mu, jnp.ones_like(logp), **dict(cell.options)
    )
    ghat = params.T * markov.token_gradient(params, theta, prompts, ys, est.w)
    e = ghat - g
    return {"err": e, "sq": e @ e, "flagged": est.flagged_share}


def per_seed_pi(cell: Cell, key: jax.Array, args: tuple) -> dict:
    """One batch from π_θ for the mean of a sequence-weighted correction (coefficient A·ω(y)):
    m = T·Σ_batch u·(r − V_μ(x))·Σ_t ∇log π_θ / (B·G·T) with u = ω·μ/π ≤ 1 where ω ≤ π/μ, whose
    mean is E ĝ under μ (iid group members: E_μ[A ω s | x] = E_μ[r ω s | x] − V_μ(x) E_μ[ω s | x];
    gpolab's identity).  The error e = m − g; ``sq`` is this sampler's, not ĝ's.  ``args`` =
    (params, θ, μ's logits, g, V_μ per prompt)."""
    params, theta, mu, g, v_mu = args
    pi = markov.table(params, theta)
    prompts, ys, rewards, logp, logp_mu = _batch(key, cell, params, theta, mu, pi)
    ones = jnp.ones_like(rewards)
    mask = jnp.ones_like(logp)
    weights = mismatch.correction(cell.correction, ones, logp, logp_mu, mask, **dict(cell.options))
    omega = weights.coef[..., 0]
    log_ratio = jnp.sum(logp - logp_mu, axis=-1)
    u = jnp.where(omega > 0, jnp.exp(jnp.log(jnp.where(omega > 0, omega, 1.0)) - log_ratio), 0.0)
    c = u * (rewards - v_mu[prompts][:, None]) / rewards.size
    e = markov.token_gradient(params, theta, prompts, ys, jnp.broadcast_to(c[..., None], ys.shape))
    e = e - g
    return {"err": e, "sq": e @ e, "flagged": jnp.zeros((), e.dtype)}


def summary(parts: list, g) -> dict:
    """bias², variance, MSE (and relative to ‖g‖²) as the mean over the splits ``parts`` (one
    :class:`gpolab.engine.Moments` each, the same seeds per split) with SEs from their spread,
    and cos, scale of the mean estimate with jackknife SEs over the splits."""
    mean_e = np.stack([m.mean("err") for m in parts]).astype(np.float64)
    sq = np.array([m.mean("sq") for m in parts], np.float64)
    est = estimates(mean_e, sq, parts[0].n)
    g_np = np.asarray(g, np.float64)
    g_sq = float(g_np @ g_np)
    out = {}
    for name, x in zip(("bias_sq", "variance", "mse"), est[::-1], strict=True):
        out[name], out[f"{name}_se"] = mean_se(x)
    out["rel_mse"], out["rel_mse_se"] = mean_se(sq / g_sq)
    full, jack = _direction(mean_e, est.bias_sq, g_np, g_sq)
    out["cos"], out["scale"] = (float(v) for v in full)  # scale: 1 unbiased, 0 collapsed
    out["cos_se"], out["scale_se"] = (float(v) for v in jack)
    out["g_sq"] = g_sq
    return out


def _direction(mean_e, bias, g_np, g_sq: float) -> tuple:
    """(cos, scale) of the mean estimate E ĝ = g + ē over every split, and their jackknife SEs
    over the S splits (leaving one out)."""
    S = len(bias)
    full = np.array(_cos_scale(mean_e.mean(0), bias.mean(), g_np, g_sq))
    loo = np.array(
        [
            _cos_scale(
                (mean_e.sum(0) - mean_e[i]) / (S - 1), (bias.sum() - bias[i]) / (S - 1), g_np, g_sq
            )
            for i in range(S)
        ]
    )
    return full, np.sqrt((S - 1) / S * np.sum((loo - loo.mean(0)) ** 2, axis=0))


def _cos_scale(e, b, g_np, g_sq: float) -> tuple[float, float]:
    """(cos, scale) of the mean estimate E ĝ = g + e, given the unbiased bias² b."""
    scale = 1.0 + e @ g_np / g_sq
    norm_sq = 2.0 * scale - 1.0 + b / g_sq  # ‖E ĝ‖²/‖g‖², the Monte Carlo noise removed
    return (scale / math.sqrt(norm_sq) if norm_sq > 0 else math.nan), scale


def resolution(name: str, options: dict, chi2_seq: float, n_sequences: int) -> str:
    """Whether sampling from μ resolves a sequence-weighted correction's row (gpolab's rule): its
    weight ω ≤ W has Var_μ ω ≤ min(1 + χ²_seq, W²) (χ²_seq = χ²(π‖μ) over whole responses, exact);
    the row is resolved when that bound is at most ``RESOLVE`` × the responses drawn (the weight's
    own mean then known to ±0.1 at one SE).  Else its mean comes from :func:`per_seed_pi`, which
    sees the tail (u = ω·μ/π ≤ 1), and its variance and MSE are withheld.  "" for the rows it
    does not concern (bounded weights: token level, masks, rejections)."""
    bound = mismatch.sequence_weight_bound(name, options)
    if bound is None:
        return ""
    var = min(1.0 + chi2_seq, bound**2)
    if var <= RESOLVE * n_sequences:
        return ""
    return (
        f"mean from pi: Var_mu(w) <= {var:.3g} > {RESOLVE:g} x {n_sequences} responses drawn; "
        "variance and MSE withheld"
    )


def _runs(fn, cell: Cell, args: tuple, key, draws: Draws) -> list:
    n = draws.seeds // draws.splits
    return [
        engine.run(fn, cell, args, jax.random.fold_in(key, s), n, draws.chunk)
        for s in range(draws.splits)
    ]


def measure(at: Point, cell: Cell, draws: Draws = Draws(), key=None) -> dict:
    """bias², variance, MSE (and relative to ‖g‖²), cos, scale and the truncated share of
    ``cell``'s correction at ``at``, with standard errors from ``draws.splits`` seed batches
    (cos: the jackknife over the batches), and the mismatch's exact size (``mismatch_*``).  All
    corrections measured with the same ``key`` see the same draws (paired).  A sequence weight
    that μ's draws cannot resolve (:func:`resolution`) takes its bias², cos and scale from draws
    of π (:func:`per_seed_pi`, on the key folded with 1) and withholds its variance and MSE
    (NaN); ``resolved`` says so."""
    key = jax.random.key(0) if key is None else key
    params, theta, (mu, g, sizes) = at.params, at.theta, at.truth
    parts = _runs(per_seed, cell, (params, theta, mu, g), key, draws)
    out = {"T": params.T, "kind": at.kind, "size": at.size, "correction": cell.correction}
    out |= {"B": cell.B, "G": cell.G, **summary(parts, g)}
    out["truncated_share"], out["truncated_share_se"] = mean_se(
        np.array([m.mean("flagged") for m in parts], np.float64)
    )
    n = draws.seeds // draws.splits * draws.splits
    why = resolution(cell.correction, dict(cell.options), sizes.chi2_seq, n * cell.B * cell.G)
    if why:
        v_mu = markov.values(params, mu.reshape(-1))[1]
        args = (params, theta, mu, g, v_mu)
        mean = summary(_runs(per_seed_pi, cell, args, jax.random.fold_in(key, 1), draws), g)
        out.update({k: v for k, v in mean.items() if not k.startswith(MEAN_ONLY)})
        out.update({k: math.nan for k in out if k.startswith(MEAN_ONLY)})
    out["resolved"] = why or "yes"
    return {**out, **{f"mismatch_{k}": v for k, v in sizes._asdict().items()}}
