"""Split statistics: an estimator's bias², variance and MSE against a known target, and their
standard errors, from the engine's moments over independent batches of seeds ("splits").

For an error e = ĝ − g over n seeds with mean error vector ē and mean squared norm q̄:

    mse = q̄,   variance = tr Cov ĝ = (q̄ − ‖ē‖²)·n/(n − 1),   bias² = mse − variance,

each unbiased (bias² = ‖ē‖² − variance/n, which may dip below 0 by noise).  A measurement runs
the engine once per split (S ≥ 2 independent seed batches, :class:`gpolab.engine.Moments` each);
a standard error is the spread of the splits' own estimates, std(ddof=1)/√S, or, for the MSE of
one cell, the per-seed second moment of ‖e‖² where the kernel returns ‖e‖⁴.

API (numpy, any leading shape ``[...]``; vectors on the last axis):

* :func:`estimates` (mean_e [..., D], mean_sq [...], n) → :class:`Estimates` (mse, variance,
  bias_sq), each [...];
* :func:`split_stats` (parts: list of Moments, err, sq, sq2=None) → :class:`Splits`: ``pooled``
  (every seed), ``split`` (one per part, leading axis S) and ``mse_se`` (from ``sq2``, the
  per-seed ‖e‖⁴; NaN without it);
* :func:`split_se` (values [S, ...]) → the SE of their mean, std(ddof=1)/√S over axis 0;
* :func:`mean_se` (values [S]) → (mean, SE) as floats;
* :func:`run` (fn, cell, args, key, seeds, splits, chunk) → the engine run of each split (seeds
  shared out as evenly as rounding allows, split s drawing from ``fold_in(key, s)``).

Used by :mod:`gpolab.kernels.offpolicy` (pooled over the splits, per update and per epoch) and
:mod:`gpolab.kernels.rollout_mismatch` (the mean of the splits' estimates)."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np


class Estimates(NamedTuple):
    """mse, tr Cov and the unbiased bias² = mse − variance of an error, each [...]."""

    mse: np.ndarray
    variance: np.ndarray
    bias_sq: np.ndarray


class Splits(NamedTuple):
    """:class:`Estimates` pooled over every seed and per split (leading axis S), and the pooled
    MSE's SE from the per-seed ‖e‖⁴ (NaN where the kernel returns none)."""

    pooled: Estimates
    split: Estimates
    mse_se: np.ndarray | float


def estimates(mean_e, mean_sq, n: int) -> Estimates:
    """:class:`Estimates` from the mean error vector ``mean_e`` [..., D] and the mean squared norm
    ``mean_sq`` [...] over ``n`` seeds (see the module docstring)."""
    variance = (mean_sq - np.sum(mean_e**2, -1)) * n / (n - 1)
    return Estimates(mean_sq, variance, mean_sq - variance)


def split_stats(parts: list, err: str, sq: str, sq2: str | None = None) -> Splits:
    """:class:`Splits` of the per-seed outputs ``err`` (e, [..., D]) and ``sq`` (‖e‖², [...]) of
    the engine runs ``parts`` (one :class:`gpolab.engine.Moments` per split); ``sq2``: ‖e‖⁴."""
    n = sum(p.n for p in parts)
    mse = sum(p.sums[sq] for p in parts) / n
    pooled = estimates(sum(p.sums[err] for p in parts) / n, mse, n)
    per = [estimates(p.sums[err] / p.n, p.sums[sq] / p.n, p.n) for p in parts]
    split = Estimates(*(np.stack(x) for x in zip(*per, strict=True)))
    mse_se = math.nan
    if sq2 is not None:
        mse_se = np.sqrt(np.maximum(sum(p.sums[sq2] for p in parts) / n - mse**2, 0) / n)
    return Splits(pooled, split, mse_se)


def split_se(values) -> np.ndarray:
    """The standard error of the mean of per-split ``values`` [S, ...] (over axis 0)."""
    values = np.asarray(values)
    return values.std(0, ddof=1) / math.sqrt(values.shape[0])


def mean_se(values) -> tuple[float, float]:
    """(mean, SE) of per-split ``values`` [S]."""
    values = np.asarray(values)
    return float(values.mean()), float(split_se(values))


def run(fn, cell, args, key, seeds: int, splits: int, chunk: int = 0) -> list:
    """One :func:`gpolab.engine.run` per split: ``seeds`` shared out over ``splits`` batches as
    evenly as rounding allows, split s drawing from ``fold_in(key, s)``."""
    import jax

    from gpolab import engine

    sizes = np.diff(np.linspace(0, seeds, splits + 1).round().astype(int))
    return [
        engine.run(fn, cell, args, jax.random.fold_in(key, s), int(n), chunk)
        for s, n in enumerate(sizes)
    ]
