"""Vectorized numpy reference of workload W1, the yardstick of ``gpolab bench``.

W1: tabular softmax bandit, every prompt gets a group of G responses, leave-one-out advantages,
per-seed squared error Σ_x f(x) ‖ĝ_x − g_x‖² against the exact gradient.  Same statistic as
``gpolab.kernels.grouped.bandit_error`` with ``BanditCell(("loo",), G)``, computed with numpy
only and an independent random stream, vectorized over a batch of seeds.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from gpolab.envs.sampling import alias_tables


class W1(NamedTuple):
    """W1's instance, float64 numpy: the policy ``pi`` and success probabilities ``success``
    (P, A), the exact per-prompt gradients ``g_local`` (P, A) (tabular rows), the prompt
    distribution ``prompt_probs`` (P,), and the group size ``G``."""

    pi: np.ndarray
    success: np.ndarray
    g_local: np.ndarray
    prompt_probs: np.ndarray
    G: int


def joint_probs(pi: np.ndarray, success: np.ndarray) -> np.ndarray:
    """(P, 2A) probabilities of the joint outcomes (a, z), column 2a + z (as
    ``bandit.outcome_probs``)."""
    P, A = pi.shape
    return np.stack([pi * (1 - success), pi * success], -1).reshape(P, 2 * A)


def joint_tables(pi: np.ndarray, success: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Alias tables (keep, alias), each (P, 2A), of :func:`joint_probs` (as
    ``bandit.outcome_tables``; :func:`gpolab.envs.sampling.alias_tables`, float64)."""
    return alias_tables(joint_probs(pi, success))


def alias_outcomes(keep: np.ndarray, alias: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Outcomes (n, P, G) drawn from the (P, C) alias tables, one uniform ``u`` (n, P, G) each:
    column i = ⌊u·C⌋ kept when u·C − i < keep[x, i], else alias[x, i]."""
    C = keep.shape[1]
    x = u * C
    i = np.minimum(x.astype(np.int64), C - 1)
    rows = np.arange(keep.shape[0])[None, :, None]
    return np.where(x - i < keep[rows, i], i, alias[rows, i])


def w1_errors(
    rng: np.random.Generator,
    w1: W1,
    n_seeds: int,
    tables: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """Per-seed squared errors (n_seeds,) of the loo estimator on ``w1``; ``tables``:
    :func:`joint_tables` of its ``pi`` and ``success`` (built here when not given)."""
    pi, success, g_local, prompt_probs, G = w1
    P, A = pi.shape
    tables = joint_tables(pi, success) if tables is None else tables
    # one uniform per response: an alias draw over the 2A joint outcomes (a, z), column 2a + z
    outcome = alias_outcomes(*tables, rng.random((n_seeds, P, G)))
    actions, z = outcome >> 1, (outcome & 1).astype(np.float64)
    adv = z - (z.sum(-1, keepdims=True) - z) / (G - 1)  # leave-one-out
    c = adv / G
    # ĝ_x = Σ_g c_g (e_{a_g} − π_x): scatter-add into A bins per (seed, prompt)
    flat = (np.arange(n_seeds * P)[:, None] * A + actions.reshape(n_seeds * P, G)).ravel()
    hits = np.bincount(flat, weights=c.ravel(), minlength=n_seeds * P * A)
    ghat = hits.reshape(n_seeds, P, A) - c.sum(-1)[..., None] * pi[None]
    err2 = ((ghat - g_local[None]) ** 2).sum(-1)
    return err2 @ prompt_probs


def w1_mse(seed: int, w1: W1, n_seeds: int, batch: int = 2048) -> tuple[float, float]:
    """(mse, standard error) over ``n_seeds`` seeds, in batches of ``batch`` (the alias tables
    built once, as the engine's are)."""
    rng = np.random.default_rng(seed)
    tables = joint_tables(w1.pi, w1.success)
    errs = np.concatenate(
        [w1_errors(rng, w1, min(batch, n_seeds - i), tables) for i in range(0, n_seeds, batch)]
    )
    return float(errs.mean()), float(errs.std(ddof=1) / np.sqrt(n_seeds))
