"""Exact finite-G mean, bias and MSE of a reward-only estimator when rewards lie on a finite grid
(issue 59, "rewards beyond 0/1"; gpolab's derivation, generalising theory §8's count tables).

One prompt of a tabular softmax bandit: policy π over A actions, action a's reward is v_k with
probability P[a, k] on the grid v_1..v_K (distinct values), score W(a) = e_a − π (∇ log π(a)
w.r.t. the logits).  A group draws (a_g, r_g) iid, g = 1..G; a group-scoped, reward-only
estimator gives weights c_g(r_1..r_G) (A_g/G, :func:`gpolab.estimators.gradient_weights`) and
ĝ = Σ_g c_g W(a_g).  The target is g = ∇_θ Σ_a π_a μ_a = Σ_a π_a μ_a W(a), μ_a = Σ_k v_k P[a, k].

With h_v = E[W 1{r = v}] = Σ_a π_a P(v|a) W(a) (= q_v m_v, m_v = E[W | r = v]) and
t_v = E[‖W‖² 1{r = v}] (= q_v s_v), exchangeability and the independence of the actions given
the rewards give

    E ĝ    = G Σ_v E[c_1 | r_1 = v] h_v
    E‖ĝ‖²  = G Σ_v E[c_1² | r_1 = v] t_v + G(G − 1) Σ_{v,w} E[c_1 c_2 | r_1 = v, r_2 = w] h_v·h_w
    MSE    = E‖ĝ‖² − 2 E ĝ·g + ‖g‖²,     bias² = ‖E ĝ − g‖²,

the conditional expectations over the other members' rewards, iid from q_v = Σ_a π_a P(v|a).
Permutation equivariance makes c_1 (c_2) a function of r_1 (r_1, r_2) and the multiset of the
others, so they are exact sums over the compositions of the other G − 2 rewards (multinomial
probabilities), one evaluation of the estimator per (v, w, composition) on a canonical group:
members 1 and 2 first, the others sorted.  Written with h_v, t_v instead of m_v, s_v it stays
finite when some q_v = 0.  With the grid {0, 1} it is :mod:`gpolab.theory.exact`'s count table.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from math import comb

import numpy as np
from scipy.special import gammaln, xlogy

from gpolab import validate
from gpolab.theory import exact as ex

__all__ = ["WeightMoments", "GradedMoments", "weight_moments", "graded_moments", "instance_theory"]

MAX_GROUPS = 200_000  # canonical groups evaluated at most (K² compositions of G − 2 rewards)


@dataclasses.dataclass(frozen=True)
class WeightMoments:
    """Conditional moments of an estimator's weights over the other members' rewards (iid q):
    ``e1[v]`` = E[c_1 | r_1 = v], ``e2[v]`` = E[c_1² | r_1 = v] (shape (K,)) and
    ``e12[v, w]`` = E[c_1 c_2 | r_1 = v, r_2 = w] (shape (K, K); zeros at G = 1)."""

    e1: np.ndarray
    e2: np.ndarray
    e12: np.ndarray
    groups: int  # canonical groups evaluated


@dataclasses.dataclass(frozen=True)
class GradedMoments:
    """Exact per-prompt quantities: ``mean`` = E ĝ and ``target`` = g (shape (A,)),
    ``second_moment`` = E‖ĝ‖², ``mse`` = E‖ĝ − g‖², ``bias_sq`` = ‖E ĝ − g‖²."""

    mean: np.ndarray
    target: np.ndarray
    second_moment: float
    mse: float
    bias_sq: float


def _check_grid(grid) -> np.ndarray:
    v = np.asarray(grid, np.float64)
    if v.ndim != 1 or v.size < 1:
        raise validate.ConfigError(f"grid: got shape {v.shape}; allowed: a 1-D array of values")
    validate.finite_array("grid", v)
    if np.unique(v).size != v.size:
        raise validate.ConfigError(f"grid: got repeated values {v.tolist()}; allowed: distinct")
    return v


def _check_probs(field: str, p, shape: tuple) -> np.ndarray:
    """Non-negative probabilities of ``shape`` whose last axis sums to 1 (within 1e-9)."""
    a = np.asarray(p, np.float64)
    if a.shape != shape:
        raise validate.ConfigError(f"{field}: got shape {a.shape}; allowed: {shape}")
    validate.finite_array(field, a, 0.0, 1.0)
    if np.any(np.abs(a.sum(-1) - 1) > 1e-9):
        raise validate.ConfigError(f"{field}: rows sum to {a.sum(-1)}; allowed: rows summing to 1")
    return a


def _canonical(G: int, K: int, limit: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Reward indices (K^f, C, G) of every canonical group, f = min(G, 2) fixed members first
    then the others sorted, one row per composition; and the compositions' counts (C, K)."""
    f = min(G, 2)
    n_groups = K**f * comb(G - f + K - 1, K - 1)
    if n_groups > limit:
        raise validate.ConfigError(
            f"G, grid: {n_groups} canonical groups to enumerate (G = {G}, K = {K} values); "
            f"allowed: at most {limit} (max_groups)"
        )
    multisets = list(itertools.combinations_with_replacement(range(K), G - f))
    others = np.array(multisets, np.int64).reshape(len(multisets), G - f)
    counts = np.stack([np.sum(others == k, axis=1) for k in range(K)], axis=1)
    heads = np.array(list(itertools.product(range(K), repeat=f)), np.int64)
    idx = np.concatenate(
        [
            np.broadcast_to(heads[:, None, :], (heads.shape[0], others.shape[0], f)),
            np.broadcast_to(others[None], (heads.shape[0], *others.shape)),
        ],
        axis=-1,
    )
    return idx, counts, n_groups


def _multinomial(counts: np.ndarray, q: np.ndarray) -> np.ndarray:
    """P(composition) (..., C) of counts (C, K) under iid draws from q (..., K); exact zeros
    where q_k = 0."""
    n = counts.sum(1)
    log = gammaln(n + 1) - gammaln(counts + 1).sum(1) + xlogy(counts, q[..., None, :]).sum(-1)
    return np.exp(log)


def _weights_checked(spec: str, rewards: np.ndarray, shared: dict) -> np.ndarray:
    """Weights c (N, G) of ``spec`` on ``rewards`` (N, G) in float64, after the checks: finite,
    permutation-equivariant (columns permuted) and group-scoped (copies of a group)."""
    from gpolab import estimators  # deferred: jax

    try:
        with ex._precision() as dtype:
            run = ex._runner(lambda r: estimators.gradient_weights(spec, r, **shared), dtype)
            out, why = run(rewards), ""
            n, G = rewards.shape
            if out.shape != rewards.shape or not np.all(np.isfinite(out)):
                why = "gives non-finite weights or a wrong shape on a graded group"
            for perm in (np.arange(G)[::-1], np.roll(np.arange(G), 1)):
                if not why and not ex._same(run(rewards[:, perm]), out[:, perm], dtype):
                    why = "is not permutation-equivariant within a graded group"
            for i in sorted({0, n // 2, n - 1}):
                alone = run(np.repeat(rewards[i : i + 1], n, axis=0))
                if not why and not ex._same(alone, np.broadcast_to(out[i], alone.shape), dtype):
                    why = "is batch-scoped on graded groups"
    except validate.ConfigError:
        raise
    except Exception as e:  # the estimator's own failure on graded rewards, under its name
        why = f"raised {type(e).__name__}: {e}"
    if why:
        raise validate.ConfigError(f"estimator {spec!r}: {why}; no exact graded theory")
    return out


@functools.lru_cache(maxsize=256)
def _group_weights(spec, G: int, grid: tuple, max_groups: int, shared: tuple):
    """(c (K^f, C, G) weights of every canonical group, counts (C, K), groups): the estimator's
    part of :func:`weight_moments`, evaluated once per (spec, G, grid) whatever the law q."""
    v = np.asarray(grid, np.float64)
    idx, counts, n_groups = _canonical(G, v.size, max_groups)
    ex.registry_table(spec, G, **dict(shared))  # refuses what is not group-scoped and reward-only
    c = _weights_checked(spec, v[idx.reshape(-1, G)], dict(shared)).reshape(*idx.shape)
    return c, counts, n_groups


def weight_moments(
    spec: str, G: int, grid, q, *, max_groups: int = MAX_GROUPS, **shared
) -> WeightMoments:
    """E[c_1 | r_1 = v], E[c_1² | r_1 = v] and E[c_1 c_2 | r_1 = v, r_2 = w] by enumeration.

    Args:
      spec: a registry estimator spec (``"grpo"``, ``"verl/grpo[epsilon=1e-4]"``, ...); it must
        be group-scoped and of the rewards alone (:func:`gpolab.theory.exact.registry_table`'s
        checks, then finiteness, permutation equivariance and group scope on graded groups).
      G: group size, at least the entry's minimum (2 for loo).
      grid: (K,) distinct reward values.
      q: (K,) probabilities of the grid values (the marginal of one reward), or (P, K): one law
        per prompt (the moments then carry a leading prompt axis; the estimator runs once).
      max_groups: the most canonical groups (K² compositions of G − 2 rewards) evaluated.
      shared: a lab's common options (``scale``, ``ddof``, ``eps``) for the entries reading them.

    Returns:
      :class:`WeightMoments`.  Raises :class:`~gpolab.validate.ConfigError` on bad input, a
      spec without exact theory or an enumeration beyond ``max_groups``.
    """
    from gpolab import estimators  # deferred: jax

    v = _check_grid(grid)
    q = np.asarray(q, np.float64)
    q = _check_probs("q", q, q.shape[:-1] + v.shape if q.ndim == 2 else v.shape)
    validate.integer(f"G (for {estimators.canonical(spec)})", G, estimators.minimum_G(spec))
    validate.integer("max_groups", max_groups, 1)
    K = v.size
    key = tuple(sorted(shared.items()))
    c, counts, n_groups = _group_weights(spec, G, tuple(v.tolist()), max_groups, key)
    pn = _multinomial(counts, q)  # (..., C)
    if G == 1:
        c0 = c[:, :, 0]
        return WeightMoments(pn @ c0.T, pn @ (c0**2).T, np.zeros(q.shape + (K,)), n_groups)
    c1, c2 = c[..., 0].reshape(K, K, -1), c[..., 1].reshape(K, K, -1)
    # r_2 is one more peer of member 1, iid q
    e1 = np.einsum("...w,...vw->...v", q, np.einsum("...c,vwc->...vw", pn, c1))
    e2 = np.einsum("...w,...vw->...v", q, np.einsum("...c,vwc->...vw", pn, c1**2))
    return WeightMoments(e1, e2, np.einsum("...c,vwc->...vw", pn, c1 * c2), n_groups)


def _prompt_moments(spec, G, v, P, pi, max_groups, shared):
    """Per prompt (leading axes of ``P`` (..., A, K) and ``pi`` (..., A)): E ĝ_x (..., A), the
    target g_x (..., A) and E‖ĝ_x‖² (...)."""
    A = pi.shape[-1]
    W = np.eye(A) - pi[..., None, :]  # (..., A, A) row a: W(a)
    joint = pi[..., :, None] * P  # (..., A, K) P(a, v)
    h = np.einsum("...ak,...ab->...kb", joint, W)  # (..., K, A) E[W 1{r=v}]
    t = np.einsum("...ak,...a->...k", joint, np.sum(W**2, -1))  # E[‖W‖² 1{r=v}]
    target = np.einsum("...a,...ab->...b", pi * (P @ v), W)
    q = np.einsum("...a,...ak->...k", pi, P)
    m = weight_moments(spec, G, v, q, max_groups=max_groups, **shared)
    mean = G * np.einsum("...k,...kb->...b", m.e1, h)
    hh = np.einsum("...kb,...wb->...kw", h, h)
    second = G * np.sum(m.e2 * t, -1) + G * (G - 1) * np.sum(m.e12 * hh, (-2, -1))
    return mean, target, second


def graded_moments(
    spec: str, G: int, grid, probs, pi, *, max_groups: int = MAX_GROUPS, **shared
) -> GradedMoments:
    """Exact E ĝ, E‖ĝ‖², MSE and bias² for one prompt of a tabular softmax bandit with rewards
    on ``grid`` (module docstring; gpolab's derivation).

    Args:
      spec: registry estimator spec, as :func:`weight_moments`.
      G: group size.
      grid: (K,) distinct reward values.
      probs: (A, K) P(v_k | a), rows summing to 1.
      pi: (A,) policy probabilities, summing to 1.
      max_groups, shared: as :func:`weight_moments`.

    Returns:
      :class:`GradedMoments` (float64).
    """
    v = _check_grid(grid)
    pi = _check_probs("pi", pi, (np.size(pi),))
    P = _check_probs("probs", probs, (pi.size, v.size))
    mean, target, second = _prompt_moments(spec, G, v, P, pi, max_groups, shared)
    mse = second - 2 * mean @ target + target @ target
    return GradedMoments(
        mean, target, float(second), float(mse), float(np.sum((mean - target) ** 2))
    )


def instance_theory(
    spec: str,
    G: int,
    grid,
    probs,
    pi,
    f,
    B: int | None = None,
    *,
    max_groups: int = MAX_GROUPS,
    **shared,
) -> dict:
    """Exact MSE, bias², best scale and scaled MSE of a whole tabular instance (prompt x moves
    only its own row of θ), with the sweep's conventions (:func:`gpolab.theory.exact.mse`).

    ``B=None`` (or 0): one group per prompt, Σ_x f_x of the per-prompt quantities; ``B=b``: a
    mini-batch of b iid prompts from f, ĝ = (1/b) Σ_i ĝ_{x_i} in global coordinates, whose mean
    m has row x f_x E ĝ_x and whose spread is Σ_x f_x E‖ĝ_x‖² − ‖m‖² (divided by b), against
    g with row x f_x g_x.

    Args:
      spec, G, grid, max_groups, shared: as :func:`weight_moments`.
      probs: (P, A, K) P(v_k | x, a).
      pi: (P, A) the policy.
      f: (P,) the prompt distribution.
      B: the mini-batch (None or 0: one group per prompt).

    Returns:
      ``{mse, bias_sq, best_scale, scaled_mse, target_sq}`` (floats; best_scale NaN where
      E‖ĝ‖² = 0).
    """
    v = _check_grid(grid)
    f = _check_probs("f", f, (np.size(f),))
    pi = _check_probs("pi", pi, (f.size, np.shape(pi)[-1]))
    P = _check_probs("probs", probs, pi.shape + v.shape)
    mean, target, second = _prompt_moments(spec, G, v, P, pi, max_groups, shared)
    w = f if not B else f**2  # the weight of prompt x's row in the (squared) global norms
    if B:
        validate.integer("B", B, 1)
    bias = w @ np.sum((mean - target) ** 2, -1)
    dot = w @ np.sum(mean * target, -1)
    target_sq = float(w @ np.sum(target**2, -1))
    norm2 = (
        f @ second
        if not B
        else (f @ second - w @ np.sum(mean**2, -1)) / B + w @ np.sum(mean**2, -1)
    )
    mse = norm2 - 2 * dot + target_sq
    ok = norm2 > 0
    return {
        "mse": float(mse),
        "bias_sq": float(bias),
        "best_scale": float(dot / norm2) if ok else float("nan"),
        "scaled_mse": float(target_sq - dot**2 / norm2) if ok else target_sq,
        "target_sq": target_sq,
    }
