"""Prompt difficulty from a reward log (DESIGN §10; groundwork of ``gpolab plan``, issue 18).

Per prompt x, c_x successes of n_x responses; difficulty p_x ~ Beta(a, b) across prompts, so
c_x ~ BetaBinomial(n_x, a, b).  :func:`fit` is the maximum-likelihood (a, b) with standard errors
from the observed information; under the fit, exactly:

    P(degenerate group of size G) = E[p^G + (1 − p)^G] = [B(a + G, b) + B(a, b + G)] / B(a, b)
    DAPO draws per kept group     = 1 / (1 − P(degenerate))

(the second: groups are drawn until one is not degenerate, a geometric number of draws).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy import optimize, special, stats

from gpolab import validate


@dataclasses.dataclass(frozen=True)
class BetaFit:
    """Maximum-likelihood Beta(a, b) of per-prompt success rates, with standard errors."""

    a: float
    b: float
    a_se: float
    b_se: float
    prompts: int
    loglik: float

    @property
    def mean(self) -> float:
        return self.a / (self.a + self.b)


def check_counts(successes, trials) -> tuple[np.ndarray, np.ndarray]:
    """Plain-Python checks: integer counts, 0 <= c <= n, n >= 1, at least two prompts."""
    c, n = np.asarray(successes), np.asarray(trials)
    if c.shape != n.shape or c.ndim != 1 or c.size < 2:
        raise validate.ConfigError(
            f"successes/trials: got shapes {c.shape} and {n.shape}; allowed: two equal 1-D "
            "arrays with one entry per prompt, at least 2 prompts"
        )
    for name, x in (("successes", c), ("trials", n)):
        validate.finite_array(name, x)
        if not np.all(np.equal(np.mod(x, 1), 0)):
            raise validate.ConfigError(f"{name}: got non-integer counts; allowed: integers")
    if np.any(n < 1) or np.any(c < 0) or np.any(c > n):
        raise validate.ConfigError("successes: allowed: 0 <= successes <= trials, trials >= 1")
    return c.astype(np.int64), n.astype(np.int64)


def loglik(log_ab, c: np.ndarray, n: np.ndarray) -> float:
    a, b = np.exp(log_ab)
    return float(np.sum(stats.betabinom.logpmf(c, n, a, b)))


def fit(successes, trials) -> BetaFit:
    """Beta-binomial maximum likelihood on log(a), log(b) (from a method-of-moments start).

    All-equal success rates (no spread beyond binomial noise) drive a + b to infinity: the fit
    then stops at a + b = 1e6 (p_x all equal to the mean), which the standard errors show."""
    c, n = check_counts(successes, trials)
    rate = c / n
    m = float(np.clip(rate.mean(), 1e-3, 1 - 1e-3))
    v = float(max(rate.var(), 1e-4))
    s = max(m * (1 - m) / v - 1, 0.1)
    start = np.log([m * s, (1 - m) * s])
    res = optimize.minimize(lambda x: -loglik(x, c, n), start, method="L-BFGS-B",
                            bounds=[(-10, np.log(1e6))] * 2)  # fmt: skip
    a, b = np.exp(res.x)
    cov = _covariance(res.x, c, n)
    # delta method from log(a), log(b) to a, b
    return BetaFit(float(a), float(b), float(a * np.sqrt(cov[0, 0])), float(b * np.sqrt(cov[1, 1])),
                   int(c.size), float(-res.fun))  # fmt: skip


def _covariance(x, c, n, h: float = 1e-4) -> np.ndarray:
    """Inverse observed information of (log a, log b) by central differences."""
    H = np.zeros((2, 2))
    f = lambda d: loglik(x + d, c, n)  # noqa: E731
    for i in range(2):
        for j in range(2):
            e_i, e_j = np.eye(2)[i] * h, np.eye(2)[j] * h
            H[i, j] = (f(e_i + e_j) - f(e_i - e_j) - f(e_j - e_i) + f(-e_i - e_j)) / (4 * h * h)
    try:
        return np.linalg.inv(-H)
    except np.linalg.LinAlgError:
        return np.full((2, 2), np.nan)


def degenerate_fraction(a: float, b: float, G) -> np.ndarray:
    """E[p^G + (1 − p)^G] for p ~ Beta(a, b): the probability that a group of G binary rewards
    is all-equal (no signal), at each G."""
    G = np.asarray(G, dtype=np.float64)
    base = special.betaln(a, b)
    return np.exp(special.betaln(a + G, b) - base) + np.exp(special.betaln(a, b + G) - base)


def dapo_draws_per_kept_group(a: float, b: float, G) -> np.ndarray:
    """Expected groups drawn per non-degenerate group kept (DAPO dynamic sampling, no cap)."""
    return 1.0 / (1.0 - degenerate_fraction(a, b, G))
