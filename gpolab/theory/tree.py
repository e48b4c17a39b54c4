"""Closed forms for tree branching (DESIGN §6, [T] arXiv 2509.24494)."""

from __future__ import annotations

import numpy as np
from scipy import stats


def value_pmf(params, M: int) -> np.ndarray:
    """P(V̂ = j/M), j = 0..M, for one thought's M continuations (thought drawn from ``params``).

    Beta(a, b) thoughts: the beta-binomial pmf C(M, j) B(a + j, b + M − j) / B(a, b).
    Finite thoughts: Σ_t π_t C(M, j) v_t^j (1 − v_t)^(M − j).
    """
    j = np.arange(M + 1)
    if hasattr(params, "a"):
        return stats.betabinom.pmf(j, M, float(params.a), float(params.b))
    logits = np.asarray(params.logits, dtype=np.float64)
    pi = np.exp(logits - logits.max())
    pi /= pi.sum()
    v = np.asarray(params.values, dtype=np.float64)
    return pi @ stats.binom.pmf(j[None, :], M, v[:, None])


def degenerate_prob(params, K: int, M: int) -> float:
    """P(all K thought values V̂_k are equal) = Σ_j P(V̂ = j/M)^K (thoughts are iid)."""
    return float(np.sum(value_pmf(params, M) ** K))
