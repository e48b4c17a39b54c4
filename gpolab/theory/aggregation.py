"""Exact expected gradient of a loss-aggregation mode on the bandit with response lengths
(the derivation is gpolab's).

A mode multiplies response i's weight in ĝ_x = (1/G) Σ_i A_i W_i by r_i = N c_i
(:func:`gpolab.estimators.relative_weights`).  When r_i = h(x, a_i) depends only on the
response's own (prompt, action) — seq-mean-token-sum (h = 1), token-sum (h = N, the batch's
responses), seq-mean-token-mean (h = 1/L), seq-mean-token-sum-norm with a constant L_norm
(h = 1/L_norm) — and lengths are fixed per
action, a reward-only group-scoped estimator with binary rewards, A_i = f(Z_i, S_−i) (its count
table, :mod:`gpolab.theory.exact`), has S_−i independent of (a_i, Z_i), so

    E ĝ_x = E f(1, S) · u_1 + E f(0, S) · u_0,       S ~ Bin(G − 1, V(x)),
    u_z   = E[1{Z = z} h(x, a) W(x, a)] = Σ_a π(a|x) P(Z = z | x, a) h(x, a) W(x, a).

(h ≡ 1 gives u_1 = g_x, u_0 = −g_x and E ĝ_x = κ g_x.)  E.g. loo, f(z, s) = z − s/(G−1):
E[A_i W_i / L_i] = E[Z W/L] − V(x) E[W/L].  The oracle A = Z − V(x) is f(1) = 1 − V, f(0) = −V.
token-mean (r_i = N/Σ_batch L_j) couples every response of the batch: no closed form here;
:func:`enumerate_expected` sums over every outcome of a tiny batch instead.
"""

from __future__ import annotations

import itertools

import jax.numpy as jnp
import numpy as np

from gpolab import estimators
from gpolab.envs import bandit
from gpolab.theory import exact

CLOSED = ("seq-mean-token-sum", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def action_factors(
    mode: str, lengths: np.ndarray, norm_length: float | None, n: int | None = None
) -> np.ndarray | None:
    """(P, A) factor h(x, a) of ``mode`` when it depends on the response alone, else None
    (token-mean; seq-mean-token-sum-norm normalized by the batch's longest response; token-sum
    without the batch's ``n`` responses, its constant factor)."""
    lengths = np.asarray(lengths, np.float64)
    if mode == "seq-mean-token-sum":
        return np.ones_like(lengths)
    if mode == "token-sum" and n:
        return np.full_like(lengths, float(n))
    if mode == "seq-mean-token-mean":
        return 1.0 / lengths
    if mode == "seq-mean-token-sum-norm" and norm_length:
        return np.full_like(lengths, 1.0 / norm_length)
    return None


def expected_table_terms(table: exact.Table, G: int, V: np.ndarray) -> tuple:
    """(E f(1, S), E f(0, S)) per prompt, S ~ Bin(G − 1, V(x)) (a table with a prompt axis is
    read row by row)."""
    pmf = exact._pmf(G - 1, V)
    return np.sum(table.a1 * pmf, -1), np.sum(table.a0 * pmf, -1)


def oracle_terms(V: np.ndarray) -> tuple:
    """(f(1), f(0)) of the oracle A = Z − V(x): (1 − V, −V)."""
    V = np.asarray(V, np.float64)
    return 1.0 - V, -V


def expected_gradient(params, h: np.ndarray, e1: np.ndarray, e0: np.ndarray) -> np.ndarray:
    """(P, d) E ĝ_x = e1 · u_1 + e0 · u_0 (module docstring) in local coordinates."""
    pi = np.asarray(bandit.policy(params), np.float64)
    p = np.asarray(params.success, np.float64)
    W = np.asarray(bandit.score_table(params), np.float64)
    u1 = np.einsum("pa,pad->pd", pi * p * h, W)
    u0 = np.einsum("pa,pad->pd", pi * (1 - p) * h, W)
    return e1[:, None] * u1 + e0[:, None] * u0


def terms(spec: str, G: int, truth, **shared) -> tuple | str:
    """(E f(1, S), E f(0, S)) of estimator ``spec``, or the reason there are none."""
    if str(spec) == "oracle":  # a name or a bound spec
        return oracle_terms(truth.V)
    table = exact.registry_table(spec, G, strict=False, **shared)
    if not table.ok:
        return f"{spec} {table.reason}"
    return expected_table_terms(table, G, np.asarray(truth.V, np.float64))


def bias_sq(
    params,
    truth,
    spec: str,
    G: int,
    mode: str,
    B: int | None = None,
    norm_length: float | None = None,
    **shared,
) -> tuple[float, str]:
    """(bias², how) of ``spec`` under ``mode`` against the sequence-level gradient g:
    Σ_x f(x) ‖E ĝ_x − g_x‖² (``B`` None/0, as the sweep's per-prompt MSE) or ‖Σ_x f_x E ĝ_x − g‖²
    (B iid prompts).  NaN and the reason where there is no closed form."""
    n = (B or params.num_prompts) * G  # the kernel's batch: B (or every prompt) × G responses
    h = action_factors(mode, bandit.lengths_of(params), norm_length, n)
    if h is None:
        return float("nan"), f"none: {mode} couples the batch (Monte Carlo only)"
    ef = terms(spec, G, truth, **shared)
    if isinstance(ef, str):
        return float("nan"), f"none: {ef}"
    mean = expected_gradient(params, h, *ef)
    f, g_local = np.asarray(truth.prompt_probs, np.float64), np.asarray(truth.g_local, np.float64)
    if not B:
        return float(f @ np.sum((mean - g_local) ** 2, -1)), "aggregation closed form"
    total = np.asarray(bandit.prompt_average(params, jnp.asarray(mean)), np.float64)
    return float(np.sum((total - np.asarray(truth.g, np.float64)) ** 2)), "aggregation closed form"


def enumerate_expected(params, spec: str, G: int, mode: str, norm_length=None, **shared):
    """(P, d) E ĝ_x by summing over every joint outcome (action, reward) of the whole batch (one
    group per prompt, N = P·G responses; (2A)^N terms: tiny instances only).  Works for every
    mode, token-mean included; the advantages come from the registry on each outcome."""
    probs = np.asarray(bandit.outcome_probs(params), np.float64)  # (P, 2A)
    P, two_a = probs.shape
    W = np.asarray(bandit.score_table(params), np.float64)
    L = np.asarray(bandit.lengths_of(params), np.float64)
    V = jnp.asarray(bandit.exact(params).V)
    total = np.zeros((P, W.shape[-1]))
    for outcome in itertools.product(range(two_a), repeat=P * G):
        idx = np.asarray(outcome).reshape(P, G)
        prob = np.prod(np.take_along_axis(probs, idx, axis=1))
        actions, rewards = idx >> 1, (idx & 1).astype(np.float64)
        lengths = np.take_along_axis(L, actions, axis=1)
        adv = estimators.advantages(
            spec, jnp.asarray(rewards), baseline=V, lengths=jnp.asarray(lengths), **shared
        )
        r = estimators.relative_weights(mode, jnp.asarray(lengths), norm_length=norm_length)
        c = np.asarray(adv, np.float64) * np.asarray(r, np.float64) / G
        total += prob * np.einsum("pg,pgd->pd", c, W[np.arange(P)[:, None], actions])
    return total
