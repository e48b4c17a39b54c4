"""The rollouts' age drawn from a queue model (gpolab's model, not a framework's): the law of a
training curve's staleness when the engine runs many generations at once and responses have a
length tail.

``queue:MEAN:SIGMA``: a rollout's age in optimizer steps is ⌊MEAN·L⌋ with L ~ lognormal, E L = 1
and log-sd SIGMA (a response's generation time is proportional to its length, whose tail SIGMA
sets; SIGMA = 0: every rollout MEAN steps old).  MEAN is the mean generation time in trainer
steps; by Little's law it is the rollouts in flight over the rollouts consumed per step when the
engine keeps its slots full and the trainer never waits: TRL's AsyncGRPOTrainer sets
``max_inflight_tasks`` to ``max_staleness`` × the samples of one step by default, so MEAN =
``max_staleness`` there (4).  Ages above the staleness grid's largest k are dropped, as TRL drops
samples older than ``max_staleness``, and the rest renormalised; ``drop`` is the dropped share."""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import norm

from gpolab.validate import ConfigError

ALLOWED = "queue:MEAN:SIGMA with 0 < MEAN <= 64 and 0 <= SIGMA <= 4"


def parse(spec: str) -> tuple[float, float]:
    """(MEAN, SIGMA) of ``queue:MEAN:SIGMA``; one ConfigError naming the spec otherwise."""
    kind, _, rest = str(spec).partition(":")
    mean, _, sigma = rest.partition(":")
    try:
        m, s = float(mean), float(sigma)
    except ValueError:
        m = s = math.nan
    if kind != "queue" or not 0 < m <= 64 or not 0 <= s <= 4:
        raise ConfigError(f"queue: got {spec!r}; allowed: {ALLOWED}")
    return m, s


def law(spec: str, kmax: int) -> tuple[np.ndarray, float]:
    """(P(age = k) for k = 0 … kmax, renormalised over the kept ages; the dropped share)."""
    mean, sigma = parse(spec)
    edges = np.arange(kmax + 2, dtype=float)  # age k when k <= MEAN·L < k + 1
    if sigma == 0:
        cdf = (mean < edges).astype(float)
    else:
        with np.errstate(divide="ignore"):
            z = (np.log(edges / mean) + sigma**2 / 2) / sigma
        cdf = norm.cdf(z)
    p = np.diff(cdf)
    kept = float(p.sum())
    if kept < 1e-6:
        raise ConfigError(
            f"queue: got {spec!r}; every rollout is older than the largest staleness {kmax} and "
            "would be dropped; allowed: a smaller MEAN or a larger staleness in the grid"
        )
    return p / kept, 1.0 - kept
