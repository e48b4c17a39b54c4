"""The rollout–training mismatch against the exact gradient (issue 43; the off-policy lab's).

A batch of B prompts × G responses of T tokens is drawn from the sampler's policy μ
(:func:`gpolab.envs.markov.behaviour_logits`), while the trainer's π_θ is the policy whose exact
gradient g = ∇J(θ) the env gives (:mod:`gpolab.envs.markov`).  Advantages are leave-one-out
(unbiased on-policy), and a correction of :mod:`gpolab.estimators.mismatch` turns them into
per-token weights with its framework's denominator; the estimate is

    ĝ = T · Σ_batch Σ_t w_t ∇ log π_θ(y_t | x, y_{t−1}),

T times the per-token aggregation, so that with no mismatch every correction's estimate is the
plain leave-one-out gradient, unbiased for g (responses have exactly T tokens).  Over seeds:
bias² = ‖E ĝ − g‖² (the unbiased estimate, with its standard error from ``splits`` independent
seed batches), variance = tr Cov ĝ, MSE, cos(E ĝ, g), scale = E ĝ·g/‖g‖² (1: no shrinkage; a
correction that zeroes most sequences drives it to 0) and the share of tokens the correction
truncated, masked or rejected.  gpolab's measurement; the corrections are ported from their
frameworks' code (each registry entry names its source).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from gpolab import engine, estimators
from gpolab.envs import markov
from gpolab.estimators import mismatch


@dataclasses.dataclass(frozen=True)
class Cell:
    """One measurement's static shape: the correction, B prompts, G responses, and the
    correction's overridden options as (name, value) pairs."""

    correction: str
    B: int
    G: int
    options: tuple = ()


def per_seed(cell: Cell, key: jax.Array, args: tuple) -> dict:
    """One batch from μ: the error e = ĝ − g, ‖e‖² and the flagged share."""
    params, theta, mu, g = args
    k_prompts, k_responses = jax.random.split(key)
    prompts = markov.sample_prompts(k_prompts, params, cell.B)
    ys, rewards = markov.sample_table(k_responses, params, mu, prompts, cell.G)
    logp = markov.table_logp(params, markov.table(params, theta), prompts, ys)
    logp_mu = markov.table_logp(params, mu, prompts, ys)
    A = estimators.loo_advantages(rewards)
    est = mismatch.estimate_weights(
        cell.correction, A, logp, logp_mu, jnp.ones_like(logp), **dict(cell.options)
    )
    ghat = params.T * markov.token_gradient(params, theta, prompts, ys, est.w)
    e = ghat - g
    return {"err": e, "sq": e @ e, "flagged": est.flagged_share}


def measure(
    params: markov.MarkovParams,
    theta,
    kind: str,
    size: float,
    correction: str,
    *,
    B: int = 8,
    G: int = 4,
    seeds: int = 4096,
    splits: int = 8,
    key=None,
    options: dict | None = None,
) -> dict:
    """bias², variance, MSE, cos and the flagged share of ``correction`` under the mismatch
    (``kind``, ``size``) at θ, with standard errors from ``splits`` seed batches of
    ``seeds // splits`` each, and the mismatch's exact size (:func:`gpolab.envs.markov.mismatch`).
    All corrections measured with the same ``key`` see the same draws (paired)."""
    key = jax.random.key(0) if key is None else key
    mu = markov.behaviour_logits(params, theta, kind, size)
    g = markov.exact(params, theta).g
    cell = Cell(correction, B, G, tuple(sorted((options or {}).items())))
    n = seeds // splits
    parts = [
        engine.run(per_seed, cell, (params, theta, mu, g), jax.random.fold_in(key, s), n)
        for s in range(splits)
    ]
    mean_e = np.stack([m.mean("err") for m in parts])  # (splits, D)
    sq = np.array([m.mean("sq") for m in parts])
    flagged = np.array([m.mean("flagged") for m in parts])
    # per split: bias² = ‖ē‖² − tr Cov/n (unbiased), variance = n/(n − 1)(mean ‖e‖² − ‖ē‖²)
    var = n / (n - 1) * (sq - np.sum(mean_e**2, axis=1))
    bias = np.sum(mean_e**2, axis=1) - var / n
    g_np = np.asarray(g, np.float64)
    mean_g = g_np + mean_e.mean(0)
    size_of = {k: float(v) for k, v in markov.mismatch(params, theta, mu).items()}

    def mean_se(x):
        return float(x.mean()), float(x.std(ddof=1) / math.sqrt(splits))

    out = {"T": params.T, "kind": kind, "size": size, "correction": correction, "B": B, "G": G}
    for name, x in (("bias_sq", bias), ("variance", var), ("mse", sq), ("flagged", flagged)):
        out[name], out[f"{name}_se"] = mean_se(x)
    out["cos"] = float(mean_g @ g_np / (np.linalg.norm(mean_g) * np.linalg.norm(g_np)))
    out["scale"] = float(mean_g @ g_np / (g_np @ g_np))  # E ĝ along g: 1 unbiased, 0 collapsed
    out["g_sq"] = float(g_np @ g_np)
    return {**out, **{f"mismatch_{k}": v for k, v in size_of.items()}}
