"""Prompt difficulty from a reward log (theory §10; groundwork of ``gpolab plan``, issue 18).

Per prompt x, c_x successes of n_x responses; difficulty p_x ~ Beta(a, b) across prompts, so
c_x ~ BetaBinomial(n_x, a, b).  :func:`fit` is the maximum-likelihood (a, b) with standard errors
from the observed information; under the fit, exactly:

    P(degenerate group of size G) = E[p^G + (1 − p)^G] = [B(a + G, b) + B(a, b + G)] / B(a, b)
    DAPO draws per kept group     = 1 / (1 − P(degenerate))

(the second: groups are drawn until one is not degenerate, a geometric number of draws).

Built on that for ``gpolab plan``: the fit's parametric uncertainty (:func:`draws` from the
asymptotic normal of log a, log b) and :func:`degenerate_curve` with intervals; the fit's checks
(:func:`logged_check`, the flat fraction at each group's own size; :func:`count_check`, the whole
count histogram); :func:`g_needed`; :func:`kappa_mix`, κ_G of an estimator averaged exactly over
the fit (theory §8); graded rewards (:func:`fit_graded`, Dirichlet-multinomial;
:func:`degenerate_unbiased` for continuous ones); and G* from a per-response score-norm proxy and
gradient norms at two batch sizes (:func:`gstar`, gpolab's derivation; :func:`gstar_bounds`).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy import optimize, special, stats

from gpolab import validate

_NAN = float("nan")
_LO, _HI = np.exp(-10.0), 1e6  # bounds of a and b in every fit (log-parameters in [-10, log 1e6])


@dataclasses.dataclass(frozen=True)
class BetaFit:
    """Maximum-likelihood Beta(a, b) of per-prompt success rates, with standard errors."""

    a: float
    b: float
    a_se: float
    b_se: float
    prompts: int
    loglik: float
    cov: tuple = ((_NAN, _NAN), (_NAN, _NAN))  # 2x2 covariance of (log a, log b)
    se_method: str = "observed information (groups independent)"  # or cluster-robust, :func:`fit`

    @property
    def mean(self) -> float:
        return self.a / (self.a + self.b)

    @property
    def has_interval(self) -> bool:
        """True when :attr:`cov` is finite and positive definite (an interval can be drawn)."""
        return _positive_definite(np.asarray(self.cov, np.float64))

    @property
    def at_bound(self) -> bool:
        """True when the fit stopped at a bound of log a or log b (module docstring)."""
        return any(v <= _LO * (1 + 1e-6) or v >= _HI * (1 - 1e-6) for v in (self.a, self.b))

    def quantile(self, q) -> np.ndarray:
        """The q-quantile(s) of p ~ Beta(a, b)."""
        return stats.beta.ppf(np.asarray(q, np.float64), self.a, self.b)


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


def loglik(log_ab, c: np.ndarray, n: np.ndarray, w=None) -> float:
    """Σ_i w_i log BetaBinomial(c_i; n_i, a, b) (w = 1 when None)."""
    a, b = np.exp(log_ab)
    lp = stats.betabinom.logpmf(c, n, a, b)
    return float(np.sum(lp) if w is None else lp @ w)


def fit(successes, trials, clusters=None) -> BetaFit:
    """Beta-binomial maximum likelihood on log(a), log(b) (from a method-of-moments start).

    All-equal success rates (no spread beyond binomial noise) drive a + b to infinity: the fit
    then stops at a, b <= 1e6 (p_x all equal to the mean), which the standard errors show.  All
    c = 0 (or all c = n) drives a (or b) to 0: the fit stops at a = e^-10 (b = e^-10); every
    prediction stays finite (degenerate fraction ~1).  :attr:`BetaFit.at_bound` flags both.
    ``cov`` is the inverse observed information of (log a, log b) (central differences), which
    assumes independent groups.  ``clusters`` (one label per group, e.g. the prompt): where a
    label holds more than one group (a prompt drawn again at later steps shares its p, so its
    groups are correlated) ``cov`` is the cluster-robust sandwich V M V instead, V the inverse
    observed information, M = C/(C − 1) · (N − 1)/(N − 2) · Σ_clusters s_c s_cᵀ with s_c the sum
    of the cluster's per-group scores in (log a, log b), C clusters and N groups (the standard
    cluster-robust covariance with its small-sample factor, as statsmodels'
    ``sandwich_covariance.cov_cluster``); ``se_method`` says which (few clusters make it noisy).
    Logs with more successes than failures are fitted mirrored (c → n − c, then a ↔ b): the same
    maximum, reached the same way from either side (all c = n then stops at the bound like all
    c = 0 does, instead of wherever the flat likelihood lets the optimizer rest)."""
    c, n = check_counts(successes, trials)
    if clusters is not None and np.shape(clusters) != c.shape:
        raise validate.ConfigError(
            f"clusters: got shape {np.shape(clusters)}; allowed: one label per group {c.shape}"
        )
    if c.sum() * 2 > n.sum():
        f = _fit(n - c, n, clusters)
        cov = np.asarray(f.cov)[::-1, ::-1]
        return BetaFit(f.b, f.a, f.b_se, f.a_se, f.prompts, f.loglik, _as_tuple(cov), f.se_method)
    return _fit(c, n, clusters)


def _fit(c: np.ndarray, n: np.ndarray, clusters=None) -> BetaFit:
    rate = c / n
    m = float(np.clip(rate.mean(), 1e-3, 1 - 1e-3))
    v = float(max(rate.var(), 1e-4))
    s = max(m * (1 - m) / v - 1, 0.1)
    start = np.log([m * s, (1 - m) * s])
    pairs, w = np.unique(np.stack([c, n]), axis=1, return_counts=True)  # the likelihood's
    uc, un = pairs  # sufficient statistic: how many groups have each (c, n)
    res = optimize.minimize(lambda x: -loglik(x, uc, un, w), start, method="L-BFGS-B",
                            bounds=[(-10, np.log(1e6))] * 2)  # fmt: skip
    a, b = np.exp(res.x)
    cov = _covariance(res.x, uc, un, w)
    method = "observed information (groups independent)"
    if clusters is not None:
        cov, method = _cluster_robust(cov, lambda: scores(a, b, c, n), clusters)
    # delta method from log(a), log(b) to a, b
    diag = np.diag(cov)
    se = np.where(diag >= 0, np.sqrt(np.abs(diag)), np.nan)  # NaN: information not definite
    return BetaFit(float(a), float(b), float(a * se[0]), float(b * se[1]), int(c.size),
                   float(-res.fun), _as_tuple(cov), method)  # fmt: skip


def scores(a: float, b: float, c, n) -> np.ndarray:
    """(N, 2) per-group score of log BetaBinomial(c; n, a, b) in (log a, log b), with
    t = ψ(a + b) − ψ(n + a + b): a[ψ(c + a) − ψ(a) + t] and b[ψ(n − c + b) − ψ(b) + t]."""
    c, n = np.asarray(c, np.float64), np.asarray(n, np.float64)
    t = special.digamma(a + b) - special.digamma(n + a + b)
    psi = special.digamma
    return np.stack([a * (psi(c + a) - psi(a) + t), b * (psi(n - c + b) - psi(b) + t)], 1)


def cluster_meat(per_group: np.ndarray, clusters) -> tuple[np.ndarray, int]:
    """C/(C − 1) · (N − 1)/(N − k) · Σ_c s_c s_cᵀ of (N, k) per-group scores summed by cluster
    (the small-sample factor of the standard cluster-robust covariance), and C."""
    idx = np.unique(np.asarray(clusters), return_inverse=True)[1].ravel()
    N, k = per_group.shape
    C = int(idx.max()) + 1
    s_c = np.stack([np.bincount(idx, per_group[:, j], C) for j in range(k)], 1)
    factor = C / max(C - 1, 1) * (N - 1) / max(N - k, 1)
    return factor * s_c.T @ s_c, C


def _cluster_robust(cov, per_group, clusters) -> tuple[np.ndarray, str]:
    """The sandwich V M V (:func:`fit`) where some cluster holds more than one group;
    ``per_group()`` gives the (N, k) per-group scores."""
    C, N = np.unique(np.asarray(clusters)).size, np.size(clusters)
    if C == N:
        return cov, "observed information (every prompt in one group: independent)"
    if C < 2 or not _positive_definite(cov):
        return np.full_like(cov, np.nan), (f"none: {C} prompt(s) in {N} groups; a "
                                           "cluster-robust SE needs >= 2 prompts")  # fmt: skip
    meat, _ = cluster_meat(per_group(), clusters)
    few = "; few prompts: the SE is itself noisy" if C < 30 else ""
    return cov @ meat @ cov, f"cluster-robust by prompt ({C} prompts, {N} groups{few})"


def _covariance(x, c, n, w=None, h: float = 1e-4) -> np.ndarray:
    """Inverse observed information of (log a, log b) by central differences."""
    H = np.zeros((2, 2))
    f = lambda d: loglik(x + d, c, n, w)  # noqa: E731
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
    is all-equal (no signal), at each integer G >= 1 (exactly 1 at G = 1; :func:`_fractions`)."""
    return _fractions(a, b, G)[0]


def informative_fraction(a: float, b: float, G) -> np.ndarray:
    """1 − :func:`degenerate_fraction`, as a sum of positive terms (no cancellation): exactly 0
    at G = 1 and accurate to rounding when tiny."""
    return _fractions(a, b, G)[1]


def _fractions(a, b, G) -> tuple[np.ndarray, np.ndarray]:
    """(degenerate D_G, informative I_G = 1 − D_G) at integer G >= 1, broadcast over a, b, G.

    With m_k = E p^k = Π_{j<k} (a + j)/(a + b + j) and n_k = E(1 − p)^k likewise (products of
    ratios, no log-gamma differences): D_G = m_G + n_G, and I_G = Σ_{k=1}^{G−1} E[p^k(1 − p) +
    p(1 − p)^k] = Σ_{k=1}^{G−1} (b m_k + a n_k)/(a + b + k), a sum of positive terms
    (I_{k+1} − I_k = E[p^k − p^{k+1}] + E[(1 − p)^k − (1 − p)^{k+1}], I_1 = 0).  Where I_G <= 1/2
    D_G = 1 − I_G, else I_G = 1 − D_G: each is computed directly where it is small, and G = 1
    gives D = 1, I = 0 exactly (no rounding path)."""
    a, b = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64))
    Gi = np.asarray(np.rint(np.asarray(G, np.float64)), np.int64)
    if np.any(Gi != np.asarray(G)) or np.any(Gi < 1):
        raise validate.ConfigError(f"G: got {np.ravel(G)[:4].tolist()}; allowed: integers >= 1")
    K = int(Gi.max(initial=1))
    a, b = a[..., None], b[..., None]
    j = np.arange(K, dtype=np.float64)
    one = np.ones(a.shape)
    m = np.concatenate([one, np.cumprod((a + j) / (a + b + j), axis=-1)], axis=-1)  # m_0..m_K
    n = np.concatenate([one, np.cumprod((b + j) / (a + b + j), axis=-1)], axis=-1)
    k = j[1:]
    terms = (b * m[..., 1:K] + a * n[..., 1:K]) / (a + b + k)  # k = 1..K−1
    inform = np.concatenate([0 * one, 0 * one, np.cumsum(terms, axis=-1)], axis=-1)  # I_0..I_K
    shape = np.broadcast_shapes(a.shape[:-1], Gi.shape)
    at = np.broadcast_to(Gi, shape)[..., None]

    def pick(x):
        return np.take_along_axis(np.broadcast_to(x, shape + x.shape[-1:]), at, -1)[..., 0]

    D, I = np.minimum(pick(m + n), 1.0), pick(inform)  # noqa: E741
    small = I <= 0.5
    return np.where(small, 1.0 - I, D), np.where(small, I, 1.0 - D)


def degenerate_fraction_known(V, prompt_probs, G: int) -> float:
    """Σ_x f(x) [V(x)^G + (1 − V(x))^G]: the all-equal probability of a group of G binary rewards
    when the prompts' success rates V and their distribution f are known (a surrogate's truth)."""
    V = np.asarray(V, np.float64)
    f = np.asarray(prompt_probs, np.float64)
    if G == 1:
        return 1.0  # one response is always flat (exactly: not Σ f, which rounds)
    return float(f @ (V**G + (1 - V) ** G))


def dapo_draws_per_kept_group(a: float, b: float, G) -> np.ndarray:
    """Expected groups drawn per non-degenerate group kept (DAPO dynamic sampling, no cap):
    1/(informative fraction), inf exactly at G = 1."""
    return _inverse(informative_fraction(a, b, G))


def _positive_definite(cov: np.ndarray) -> bool:
    if cov.ndim != 2 or cov.shape[0] != cov.shape[1] or not np.all(np.isfinite(cov)):
        return False
    return bool(np.all(np.linalg.eigvalsh((cov + cov.T) / 2) > 0))


def _as_tuple(cov: np.ndarray) -> tuple:
    return tuple(tuple(float(v) for v in row) for row in np.asarray(cov))


def _log_normal_draws(point, cov, n: int, seed: int) -> np.ndarray:
    """(n, K) exp of draws from N(log point, cov) (``point`` itself repeated, not exp(log), when
    cov is not PD), kept in the fits' box [e^-10, 1e6] (a wide cov at a bound would otherwise
    overflow)."""
    validate.integer("draws", n, 1)
    point, cov = np.asarray(point, np.float64), np.asarray(cov, np.float64)
    if not _positive_definite(cov):
        return np.tile(point, (n, 1))
    rng = np.random.default_rng(seed)
    x = rng.multivariate_normal(np.log(point), (cov + cov.T) / 2, size=n, method="cholesky")
    return np.exp(np.clip(x, np.log(_LO), np.log(_HI)))


def draws(fit: BetaFit, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(a, b), each (n,), from the asymptotic normal of (log a, log b) ~ N(log â, log b̂; cov):
    the fit's parametric uncertainty.  When ``cov`` is NaN or not positive definite (see
    :attr:`BetaFit.has_interval`) the point (â, b̂) is repeated: callers report no interval."""
    return _ab_draws(fit, n, seed)


def _ab_draws(fit: BetaFit, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    ab = _log_normal_draws([fit.a, fit.b], fit.cov, n, seed)
    return ab[:, 0], ab[:, 1]


def _band(values: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Equal-tailed ``level`` interval over axis 0 (no interpolation, so inf values are safe)."""
    tail = (1 - level) / 2
    lo = np.quantile(values, tail, axis=0, method="inverted_cdf")
    return lo, np.quantile(values, 1 - tail, axis=0, method="inverted_cdf")


def dapo_draws(frac) -> np.ndarray:
    """Groups drawn per kept group, 1/(1 − degenerate fraction): inf at 1, NaN stays NaN (from
    a fit, :func:`dapo_draws_per_kept_group` avoids the subtraction)."""
    return _inverse(1.0 - np.asarray(frac, np.float64))


def _inverse(informative) -> np.ndarray:
    """1/informative: inf where it is <= 0, NaN stays NaN."""
    x = np.asarray(informative, np.float64)
    with np.errstate(divide="ignore"):
        return np.where(x <= 0.0, np.inf, 1.0 / np.maximum(x, 0.0))


def degenerate_curve(fit: BetaFit, G, *, level: float = 0.95, draws: int = 4000, seed: int = 0):
    """DataFrame over ``G``: ``predicted`` = E[p^G + (1 − p)^G] under Beta(â, b̂), ``lo``/``hi``
    its ``level`` interval over :func:`draws` of (a, b) (equal to ``predicted`` when the fit has
    no interval), ``dapo_draws`` = 1/(1 − predicted) (from :func:`informative_fraction`: inf
    exactly at G = 1) and its interval ``dapo_lo``/``dapo_hi`` (the map is increasing)."""
    import pandas as pd

    validate.real("level", level, 0.0, 1.0, open_low=True)
    G = np.atleast_1d(np.asarray(G, np.float64))
    a, b = _ab_draws(fit, draws, seed)
    predicted, informative = _fractions(fit.a, fit.b, G)
    flat_d, inform_d = _fractions(a[:, None], b[:, None], G[None])
    lo, hi = _band(flat_d, level)
    i_lo, i_hi = _band(inform_d, level)
    return pd.DataFrame({"G": G.astype(np.int64), "predicted": predicted, "lo": lo, "hi": hi,
                         "dapo_draws": _inverse(informative), "dapo_lo": _inverse(i_hi),
                         "dapo_hi": _inverse(i_lo)})  # fmt: skip


def _z(measured: float, se_m: float, predicted: float, se_p: float) -> float:
    """(measured − predicted)/√(se_m² + se_p²); 0 when both agree exactly with no spread and
    ±inf when they differ with none (never NaN)."""
    diff, se = measured - predicted, float(np.hypot(se_m, se_p))
    if se > 0:
        return float(diff / se)
    return 0.0 if diff == 0 else float(np.copysign(np.inf, diff))


def _check_result(flat: np.ndarray, per_group: np.ndarray, per_draw: np.ndarray,
                  clusters=None) -> dict:  # fmt: skip
    """The check's numbers from the flat indicators, the fit's per-group probabilities at the
    point and (draws, groups) at the draws; ``clusters``: :func:`mean_se`."""
    N = flat.size
    measured, predicted = float(flat.mean()), float(per_group.mean())
    se_m = mean_se(flat, clusters)
    se_null = float(np.sqrt(np.sum(per_group * (1 - per_group))) / N)
    se_p = float(np.std(per_draw.mean(axis=1))) if per_draw.shape[0] > 1 else 0.0
    return {"groups": int(N), "measured": measured, "measured_se": se_m,
            "predicted": predicted, "predicted_se": se_p,
            "z": _z(measured, max(se_m, se_null), predicted, se_p)}  # fmt: skip


def mean_se(x, clusters=None) -> float:
    """Standard error of mean(x): √(m(1 − m)/N) for 0/1 x with independent entries (``clusters``
    None or all distinct), else the cluster-robust √(C/(C − 1) Σ_c (Σ_{i∈c} (x_i − m))²)/N
    (:func:`cluster_meat` with one parameter), which counts a prompt's repeats as correlated."""
    x = np.asarray(x, np.float64)
    m, N = float(x.mean()), x.size
    if clusters is None or np.unique(np.asarray(clusters)).size in (N, 1):
        return float(np.sqrt(max(m * (1 - m), 0.0) / N))
    return float(np.sqrt(cluster_meat((x - m)[:, None], clusters)[0][0, 0]) / N)


def logged_check(successes, trials, fit: BetaFit, *, draws: int = 2000, seed: int = 0,
                 clusters=None) -> dict:  # fmt: skip
    """The fit's check: the logged fraction of flat groups (c ∈ {0, n}) against its prediction.

    ``measured`` = mean 1{c_i ∈ {0, n_i}} with binomial SE √(m(1 − m)/N) (cluster-robust by
    ``clusters`` where a label repeats, :func:`mean_se`); ``predicted`` = the
    mean over the logged groups of E[p^{n_i} + (1 − p)^{n_i}] at each group's own size n_i
    (unequal sizes), ``predicted_se`` its spread over :func:`draws` of (a, b) (0 when the fit has
    no interval); z = (measured − predicted)/√(se_m² + se_p²), where se_m is the larger of the
    binomial SE and the SE the fit itself implies, √(Σ d_i(1 − d_i))/N (so an all-flat log still
    has a finite z).  |z| of several says the beta-binomial does not describe the log (e.g. a point
    mass of impossible prompts)."""
    c, n = check_counts(successes, trials)
    flat = ((c == 0) | (c == n)).astype(np.float64)
    a, b = _ab_draws(fit, draws, seed)
    per_draw = degenerate_fraction(a[:, None], b[:, None], n[None])
    if not fit.has_interval:
        per_draw = per_draw[:1]
    return _check_result(flat, degenerate_fraction(fit.a, fit.b, n), per_draw, clusters)


def count_check(successes, trials, fit: BetaFit, *, min_expected: float = 5.0) -> dict:
    """Pearson goodness of fit of the whole count histogram (the flat fraction alone is nearly
    reproduced by the maximum-likelihood fit even when the model is wrong, e.g. a point mass of
    impossible prompts beside a peak of easy ones).  Per group size n with N_n groups, expected
    E_nc = N_n · BetaBinomial(c; n, a, b); adjacent cells of one n are merged until each holds
    >= ``min_expected``; X² = Σ (O − E)²/E on df = cells − (#sizes) − 2 (totals and a, b
    fitted), p = P(χ²_df > X²).  df <= 0 (too few cells): ``p_value`` None, nothing to test."""
    c, n = check_counts(successes, trials)
    chi2, cells, sizes = 0.0, 0, np.unique(n)
    for m in sizes:
        observed = np.bincount(c[n == m], minlength=m + 1).astype(np.float64)
        expected = observed.sum() * _beta_binomial_pmf(int(m), fit.a, fit.b)
        for o, e in _merge_cells(observed, expected, min_expected):
            chi2, cells = chi2 + (o - e) ** 2 / max(e, 1e-300), cells + 1
    df = cells - sizes.size - 2
    p = float(stats.chi2.sf(chi2, df)) if df > 0 else None
    return {"chi2": float(chi2), "df": int(df), "p_value": p, "cells": int(cells)}


def _merge_cells(observed, expected, least: float) -> list[tuple[float, float]]:
    """Adjacent (observed, expected) cells merged left to right until each expected >= least
    (a short last cell joins the one before)."""
    out, o_acc, e_acc = [], 0.0, 0.0
    for o, e in zip(observed, expected, strict=True):
        o_acc, e_acc = o_acc + o, e_acc + e
        if e_acc >= least:
            out.append((o_acc, e_acc))
            o_acc = e_acc = 0.0
    if e_acc > 0 or o_acc > 0:
        if out:
            o_last, e_last = out.pop()
            out.append((o_last + o_acc, e_last + e_acc))
        else:
            out.append((o_acc, e_acc))
    return out


def g_needed(fit: BetaFit, target: float, G=range(2, 257)) -> int | None:
    """The smallest G in ``G`` whose predicted degenerate fraction is <= ``target`` (None when
    none is); the fraction E[p^G + (1 − p)^G] falls with G, so this is the G to ask for."""
    validate.real("target", target, 0.0, 1.0)
    G = np.sort(np.asarray(list(G), np.int64))
    ok = G[degenerate_fraction(fit.a, fit.b, G) <= target]
    return int(ok[0]) if ok.size else None


def _beta_binomial_pmf(m: int, a: float, b: float) -> np.ndarray:
    """(m + 1,) BetaBinomial(s; m, a, b), s = 0..m."""
    return stats.betabinom.pmf(np.arange(m + 1), m, a, b)


def kappa_mix(spec: str, G: int, a: float, b: float, **shared) -> dict:
    """κ_G of a reward-only registry estimator averaged over the difficulties p ~ Beta(a, b).

    κ_G(p) = E f(1, S) − E f(0, S), S ~ Bin(G − 1, p) (theory §8, :mod:`gpolab.theory.exact`),
    so, exactly (S is then BetaBinomial(G − 1, a, b)):

        E_p κ_G = Σ_s (a1[s] − a0[s]) · BetaBinomial(s; G − 1, a, b).

    ``kappa_p10/p50/p90``: κ_G at the 10/50/90% quantiles of p.  ``share_hard``: the part of
    E[κ_G(p) σ(p)], σ = √(p(1 − p)) (the size of ‖g_x‖ a prompt can carry), that comes from
    p < 0.2, in closed form: with d_s = a1[s] − a0[s],

        E[κ σ 1{p < t}] = Σ_s d_s C(G−1, s) B(x_s, y_s) I_t(x_s, y_s) / B(a, b),
        x_s = a + s + ½,  y_s = b + G − s − ½

    (I_t the regularized incomplete beta).  An estimator with no count table (``table.ok`` False:
    batch-scoped, needs V(x) or lengths, ...) gives NaN values and its ``reason``."""
    from gpolab.theory import exact

    validate.real("a", a, 0.0, open_low=True)
    validate.real("b", b, 0.0, open_low=True)
    table = exact.registry_table(spec, G, strict=False, **shared)
    keys = ("kappa_mean", "kappa_p10", "kappa_p50", "kappa_p90", "share_hard")
    if not table.ok:
        return {**dict.fromkeys(keys, _NAN), "reason": table.reason}
    d = np.asarray(table.a1, np.float64) - np.asarray(table.a0, np.float64)
    quantiles = stats.beta.ppf([0.1, 0.5, 0.9], a, b)
    k_q = exact.kappa(table, G, quantiles)
    out = {"kappa_mean": float(d @ _beta_binomial_pmf(G - 1, a, b)),
           "kappa_p10": float(k_q[0]), "kappa_p50": float(k_q[1]), "kappa_p90": float(k_q[2]),
           "share_hard": _share_hard(d, G, a, b, 0.2), "reason": None}  # fmt: skip
    return out


def _share_hard(d: np.ndarray, G: int, a: float, b: float, t: float) -> float:
    """E[κ σ 1{p < t}] / E[κ σ] (docstring of :func:`kappa_mix`); NaN when E[κ σ] is 0 up to
    rounding (1e-12 of the sum of |terms|)."""
    s = np.arange(G)
    x, y = a + s + 0.5, b + G - s - 0.5
    log_w = special.gammaln(G) - special.gammaln(s + 1) - special.gammaln(G - s)
    parts = d * np.exp(log_w + special.betaln(x, y) - special.betaln(a, b))
    total = float(np.sum(parts))
    if abs(total) <= 1e-12 * float(np.sum(np.abs(parts))) or total == 0:  # 0 up to rounding
        return _NAN
    return float(np.sum(parts * special.betainc(x, y, t)) / total)


# ------------------------------------------------------------------ graded rewards (finite support)


@dataclasses.dataclass(frozen=True)
class DirichletFit:
    """Maximum-likelihood Dirichlet(α) of per-prompt reward-value probabilities (K support
    values), with standard errors of α and the K x K covariance of log α."""

    alpha: tuple
    alpha_se: tuple
    prompts: int
    loglik: float
    cov: tuple
    se_method: str = "observed information (groups independent)"  # or cluster-robust

    @property
    def has_interval(self) -> bool:
        return _positive_definite(np.asarray(self.cov, np.float64))

    @property
    def at_bound(self) -> bool:
        al = np.asarray(self.alpha)
        return bool(np.any(al <= _LO * (1 + 1e-6)) or np.any(al >= _HI * (1 - 1e-6)))


def check_graded(counts) -> np.ndarray:
    """(groups, K) integer counts, K >= 2 support values, >= 2 groups, each group >= 1 response."""
    x = np.asarray(counts)
    if x.ndim != 2 or x.shape[0] < 2 or x.shape[1] < 2:
        raise validate.ConfigError(
            f"counts: got shape {x.shape}; allowed: a 2-D array (groups x reward values) with at "
            "least 2 groups and 2 reward values"
        )
    validate.finite_array("counts", x, 0.0)
    if not np.all(np.equal(np.mod(x, 1), 0)) or np.any(x.sum(1) < 1):
        raise validate.ConfigError("counts: allowed: non-negative integers, >= 1 per group")
    return x.astype(np.int64)


def _dm_loglik_grad(log_alpha, x: np.ndarray) -> tuple[float, np.ndarray]:
    """Dirichlet-multinomial log-likelihood of (groups, K) counts and its gradient in log α:

    ℓ = Σ_i [ln n_i! − Σ_v ln x_iv! + ln Γ(α0) − ln Γ(n_i + α0)
             + Σ_v (ln Γ(x_iv + α_v) − ln Γ(α_v))]."""
    al = np.exp(log_alpha)
    a0, n = al.sum(), x.sum(1)
    const = np.sum(special.gammaln(n + 1)) - np.sum(special.gammaln(x + 1))
    ll = const + np.sum(special.gammaln(a0) - special.gammaln(n + a0))
    ll += np.sum(special.gammaln(x + al) - special.gammaln(al))
    d_a = np.sum(special.digamma(a0) - special.digamma(n + a0))
    d_a = d_a + np.sum(special.digamma(x + al) - special.digamma(al), axis=0)
    return float(ll), d_a * al


def _dm_covariance(log_alpha, x: np.ndarray) -> np.ndarray:
    """Inverse observed information of log α (analytic, trigamma):
    ∂²ℓ/∂α_v∂α_w = Σ_i [ψ1(α0) − ψ1(n_i + α0)] + δ_vw Σ_i [ψ1(x_iv + α_v) − ψ1(α_v)], and in
    log α: H_log = diag(α) H diag(α) + diag(α ∘ ∂ℓ/∂α)."""
    al = np.exp(log_alpha)
    n = x.sum(1)
    H = np.full((al.size, al.size), np.sum(special.polygamma(1, al.sum()) -
                                           special.polygamma(1, n + al.sum())))  # fmt: skip
    H += np.diag(np.sum(special.polygamma(1, x + al) - special.polygamma(1, al), axis=0))
    grad = _dm_loglik_grad(log_alpha, x)[1]  # already in log α
    H_log = al[:, None] * H * al[None, :] + np.diag(grad)
    try:
        return np.linalg.inv(-H_log)
    except np.linalg.LinAlgError:
        return np.full_like(H_log, np.nan)


def fit_graded(counts, clusters=None) -> DirichletFit:
    """Dirichlet-multinomial maximum likelihood on log α (L-BFGS-B, analytic gradient, from a
    method-of-moments start; unequal group sizes allowed).  Row i of ``counts`` holds how many of
    group i's responses got each support value.  With K = 2 this is the beta-binomial of
    :func:`fit` (α = (a, b) with the first column the successes).  Bounds as in :func:`fit`:
    α_v ∈ [e^-10, 1e6] (a value never seen drives its α_v to the lower bound).  ``clusters``:
    the cluster-robust covariance of :func:`fit`, per-group scores in log α
    α_v [ψ(α0) − ψ(n_i + α0) + ψ(x_iv + α_v) − ψ(α_v)]."""
    x = check_graded(counts)
    rate = x / x.sum(1, keepdims=True)
    m = np.clip(rate.mean(0), 1e-3, None)
    v = max(float(np.mean(rate.var(0) / np.maximum(m * (1 - m), 1e-9))), 1e-4)
    start = np.log(m / m.sum() * max(1 / v - 1, 0.1))
    bounds = [(-10, np.log(1e6))] * x.shape[1]
    res = optimize.minimize(lambda t: tuple(-u for u in _dm_loglik_grad(t, x)), start, jac=True,
                            method="L-BFGS-B", bounds=bounds)  # fmt: skip
    al = np.exp(res.x)
    cov = _dm_covariance(res.x, x)
    method = "observed information (groups independent)"
    if clusters is not None:
        a0, n = al.sum(), x.sum(1, keepdims=True)
        per_group = lambda: al * (special.digamma(a0) - special.digamma(n + a0)  # noqa: E731
                                  + special.digamma(x + al) - special.digamma(al))  # fmt: skip
        cov, method = _cluster_robust(cov, per_group, clusters)
    diag = np.diag(cov)
    se = np.where(diag >= 0, al * np.sqrt(np.abs(diag)), np.nan)
    return DirichletFit(tuple(map(float, al)), tuple(map(float, se)), int(x.shape[0]),
                        float(-res.fun), _as_tuple(cov), method)  # fmt: skip


def degenerate_fraction_graded(alpha, G) -> np.ndarray:
    """P(G draws of one prompt all equal) = Σ_v E[p_v^G], p_v ~ Beta(α_v, α0 − α_v) (the
    Dirichlet's marginals): Σ_v B(α_v + G, α0 − α_v)/B(α_v, α0 − α_v).  ``alpha`` (..., K)."""
    al = np.asarray(alpha, np.float64)
    G = np.asarray(G, np.float64)[..., None]
    rest = al.sum(-1, keepdims=True) - al
    out = np.sum(np.exp(special.betaln(al + G, rest) - special.betaln(al, rest)), axis=-1)
    return np.where(G[..., 0] == 1, 1.0, np.clip(out, 0.0, 1.0))  # G = 1: flat, exactly


def logged_check_graded(counts, fit: DirichletFit, *, draws: int = 2000, seed: int = 0,
                        clusters=None) -> dict:  # fmt: skip
    """:func:`logged_check` for graded rewards: measured = fraction of groups whose responses
    all got one value, predicted = mean over the groups of Σ_v E[p_v^{n_i}] at each group's size
    (:func:`degenerate_fraction_graded`), its SE over draws of log α ~ N(log α̂, cov)."""
    x = check_graded(counts)
    n = x.sum(1)
    flat = (x.max(1) == n).astype(np.float64)
    al = _log_normal_draws(fit.alpha, fit.cov, draws if fit.has_interval else 1, seed)
    per_draw = degenerate_fraction_graded(al[:, None, :], n[None, :])
    return _check_result(flat, degenerate_fraction_graded(fit.alpha, n), per_draw, clusters)


def degenerate_unbiased(groups_of_rewards, G) -> np.ndarray:
    """For continuous (or any) rewards: the U-statistic estimate of P(G draws of a prompt are
    all equal), per group Σ_v C(n_v, G)/C(n, G) (n_v responses with value v among n), averaged
    over the groups; exact (unbiased) for every G <= min n, NaN beyond.  Values are compared
    exactly (round them first if the log stores noise)."""
    groups = [np.asarray(g, np.float64).ravel() for g in groups_of_rewards]
    if not groups or any(g.size < 1 for g in groups):
        raise validate.ConfigError("groups_of_rewards: allowed: one or more non-empty groups")
    for g in groups:
        validate.finite_array("rewards", g)
    Gs = np.atleast_1d(np.asarray(G, np.float64))
    out = np.mean([_flat_ustat(g, Gs) for g in groups], axis=0)
    out[Gs == 1] = 1.0  # one response is always flat (exactly, not a sum of rounded ratios)
    out[Gs > min(g.size for g in groups)] = np.nan
    return out if np.ndim(G) else out[0]


def _flat_ustat(group: np.ndarray, G: np.ndarray) -> np.ndarray:
    n = group.size
    counts = np.unique(group, return_counts=True)[1].astype(np.float64)[:, None]
    Gc = np.minimum(G, n)[None]  # beyond n: masked by the caller

    def log_comb(m):
        return special.gammaln(m + 1) - special.gammaln(Gc + 1) - special.gammaln(m - Gc + 1)

    with np.errstate(invalid="ignore"):
        terms = np.where(counts >= Gc, np.exp(log_comb(counts) - log_comb(float(n))), 0.0)
    return terms.sum(0)


# ------------------------------------------------------ G* from a score-norm proxy (gpolab's)


def _groups(rewards, proxy, group) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Checked float64 rewards, proxy and integer group index (0..groups−1) per response."""
    z, q = np.asarray(rewards, np.float64).ravel(), np.asarray(proxy, np.float64).ravel()
    labels = np.asarray(group).ravel()
    if not (z.size == q.size == labels.size) or z.size < 1:
        raise validate.ConfigError(
            f"rewards/proxy/group: got lengths {z.size}, {q.size}, {labels.size}; allowed: "
            "three equal, non-empty 1-D arrays with one entry per response"
        )
    validate.finite_array("rewards", z)
    validate.finite_array("proxy", q, 0.0)
    return z, q, np.unique(labels, return_inverse=True)[1].ravel()


def proxy_moments(rewards, proxy, group) -> tuple[np.ndarray, np.ndarray]:
    """Per group with n >= 3 responses (others dropped), the unbiased U-statistics (gpolab's)

        s_x = E[q] σ²(x):      mean_i q_i · (Q_−i − S_−i²/m)/(m − 1)
        a_x = E[q (Z − V)²]:   mean_i q_i [Z_i² − 2 Z_i S_−i/m + (S_−i² − Q_−i)/(m(m − 1))]

    with m = n − 1, S_−i and Q_−i the sum of the others' rewards and of their squares.  Unbiased
    because response i is independent of the others, whose sample variance is unbiased for σ²
    and whose (S² − Q)/(m(m − 1)) is unbiased for V².  Binary Z: Q = S = c_−i, so
    s_x = mean_i q_i c_−i(m − c_−i)/(m(m − 1)) and the last term is c_−i(c_−i − 1)/(m(m − 1)).
    With q = ‖W‖², s_x = S2 σ² and a_x = E[‖W‖²(Z − V)²] = trΣ_or + ‖g_x‖² (theory §3)."""
    z, q, idx = _groups(rewards, proxy, group)
    n = np.bincount(idx).astype(np.float64)
    S, Q = np.bincount(idx, z), np.bincount(idx, z * z)
    keep = n[idx] >= 3
    z, q, idx = z[keep], q[keep], idx[keep]
    m = n[idx] - 1
    S_o, Q_o = S[idx] - z, Q[idx] - z * z
    s_i = q * (Q_o - S_o**2 / m) / (m - 1)
    a_i = q * (z * z - 2 * z * S_o / m + (S_o**2 - Q_o) / (m * (m - 1)))
    used = n >= 3
    return (np.bincount(idx, s_i, n.size) / np.maximum(n, 1))[used], (
        np.bincount(idx, a_i, n.size) / np.maximum(n, 1)
    )[used]


def _norm_rows(norms) -> tuple[list[np.ndarray], np.ndarray]:
    """Squared gradient norms grouped by batch size (batch sizes with >= 2 rows only)."""
    cols = set(getattr(norms, "columns", ()))
    if "batch" not in cols or not cols & {"grad_norm", "grad_norm_sq"}:
        raise validate.ConfigError(
            f"norms: got columns {sorted(map(str, cols))}; allowed: a table with 'batch' and "
            "'grad_norm' (‖ĝ‖, as frameworks log it) or 'grad_norm_sq' (‖ĝ‖²)"
        )
    batch = np.asarray(norms["batch"], np.float64)
    sq = "grad_norm_sq" in cols
    y = np.asarray(norms["grad_norm_sq" if sq else "grad_norm"], np.float64)
    validate.finite_array("norms.batch", batch, 1.0)
    validate.finite_array("norms.grad_norm", y, 0.0)
    y = y if sq else y * y
    sizes = [B for B in np.unique(batch) if np.sum(batch == B) >= 2]
    return [y[batch == B] for B in sizes], np.asarray(sizes)


def _line(means: np.ndarray, var: np.ndarray, sizes: np.ndarray) -> tuple[float, float]:
    """Weighted least squares of mean ‖ĝ_B‖² = ‖g‖² + T/B (weights 1/var): (‖g‖², T)."""
    X = np.stack([np.ones_like(sizes), 1.0 / sizes], 1)
    w = 1.0 / var
    coef = np.linalg.solve(X.T @ (w[:, None] * X), X.T @ (w * means))
    return float(coef[0]), float(coef[1])


def constants_from_proxy(s: float, a: float, g_sq: float, T: float, G: int) -> dict:
    """c1, C2, C3 (theory §3) from s = E_X[E q σ²], a = E_X E[q(Z − V)²], ‖g‖² and the slope
    T = Tr Cov of one prompt's loo estimate at G (gpolab's derivation): with γ = E‖g_X‖² =
    c1 + ‖g‖², C2 = a − γ, C3 = s + γ and T = c1 + C2/G + C3/(G(G − 1)), so

        c1 = [T − a/G − s/(G(G − 1)) + ‖g‖²(G − 2)/(G(G − 1))] · G(G − 1)/(G² − 2G + 2)."""
    GG = G * (G - 1)
    c1 = (T - a / G - s / GG + g_sq * (G - 2) / GG) * GG / (G * G - 2 * G + 2)
    gamma = c1 + g_sq
    return {"c1": c1, "C2": a - gamma, "C3": s + gamma}


def _g_star(c1: float, C3: float) -> float:
    """1 + √(C3/c1), the exact minimiser of the fixed-budget loo MSE (inf when c1 <= 0)."""
    return 1.0 + float(np.sqrt(max(C3, 0.0) / c1)) if c1 > 0 else float("inf")


_GSTAR_KEYS = ("gstar", "gstar_lo", "gstar_hi", "c1", "C2", "C3", "g_sq", "T", "s", "a",
               "c1_se", "C3_se")  # fmt: skip


def _no_gstar(reason: str, **known) -> dict:
    return {**dict.fromkeys(_GSTAR_KEYS, _NAN), "gstar": None, **known, "reason": reason}


def gstar(rewards, proxy, group, norms, G: int, *, level: float = 0.95, boot: int = 2000,
          seed: int = 0, clusters=None) -> dict:  # fmt: skip
    """MSE-optimal group size G* = 1 + √(C3/c1) of the loo estimator at a fixed budget N = B·G
    (theory §3; the recovery of c1 and C3 from a run's log is gpolab's derivation).

    ``rewards``, ``proxy`` (q = ‖W‖² = ‖∇ log π‖² of each response, in the coordinates of the
    measured gradient) and ``group`` (one label per group) per response: s, a = means over the
    groups of :func:`proxy_moments` (the prompts as the run drew them).  ``norms``: a DataFrame
    with one row per measured step, ``batch`` (prompts B) and ``grad_norm`` = ‖ĝ‖ (the logged
    norm; squared here; or ``grad_norm_sq``) of the unnormalized loo estimate (mean over B·G
    responses of A W) at this G.  E‖ĝ_B‖² = ‖g‖² + T/B: the per-batch means, weighted least
    squares over >= 2 batch sizes (each with >= 2 rows), give ‖g‖² and T, then
    :func:`constants_from_proxy` gives c1, C2, C3.  ``gstar_lo``/``gstar_hi``: ``level``
    percentile interval over ``boot`` bootstrap replicates (groups resampled, norm rows resampled
    within each batch size; seeded; with ``clusters``, one label per response such as the
    prompt, whole clusters of groups are resampled: the cluster bootstrap, since a prompt's
    groups at different steps are not independent); ``c1_se``, ``C3_se`` the bootstrap SDs.
    ``reason`` is None when G* is given, else says why not (no proxy, < 2 batch sizes, no group
    of >= 3, c1 not resolved above 0: then ``gstar`` is None and ``gstar_lo`` the lower bound
    the data allow)."""
    validate.integer("G", G, 2)
    validate.integer("boot", boot, 10)
    if proxy is None:
        return _no_gstar("no per-response score-norm proxy (‖∇ log π‖²): C3 and c1 need it")
    s_x, a_x = proxy_moments(rewards, proxy, group)
    if s_x.size < 2:
        return _no_gstar("fewer than 2 groups with >= 3 responses (the U-statistics need 3)")
    s, a = float(s_x.mean()), float(a_x.mean())
    rows, sizes = _norm_rows(norms) if norms is not None else ([], np.zeros(0))
    if sizes.size < 2:
        return _no_gstar("gradient norms at >= 2 batch sizes (>= 2 steps each) are needed for "
                         "c1; C3 lies in [s, 2s] (gstar_bounds)", s=s, a=a)  # fmt: skip
    var = np.array([max(r.var(ddof=1), 1e-12 * r.mean() ** 2, 1e-300) / r.size for r in rows])
    g_sq, T = _line(np.array([r.mean() for r in rows]), var, sizes)
    point = constants_from_proxy(s, a, g_sq, T, G)
    cl = None if clusters is None else _group_clusters(rewards, proxy, group, clusters)
    reps = _bootstrap(s_x, a_x, rows, var, sizes, G, boot, seed, cl)
    lo, hi = _band(reps[:, 0], level)
    out = {**point, "g_sq": g_sq, "T": T, "s": s, "a": a, "c1_se": float(reps[:, 1].std()),
           "C3_se": float(reps[:, 2].std()), "gstar_lo": float(lo),
           "gstar_hi": float(hi)}  # fmt: skip
    c1_lo = float(_band(reps[:, 1], level)[0])
    if point["c1"] <= 0 or c1_lo <= 0:
        why = (f"c1 = {point['c1']:.3g} (prompt variance of the gradient) is not resolved "
               f"above 0 (its {level:.0%} interval reaches {c1_lo:.3g}): G* has no upper "
               "bound")  # fmt: skip
        return {**out, "gstar": None, "gstar_hi": float("inf"), "reason": why}
    return {**out, "gstar": _g_star(point["c1"], point["C3"]), "reason": None}


def _group_clusters(rewards, proxy, group, clusters) -> np.ndarray:
    """The cluster index of each group :func:`proxy_moments` keeps (a group's first label)."""
    z, _, idx = _groups(rewards, proxy, group)
    labels = np.asarray(clusters).ravel()
    if labels.size != z.size:
        raise validate.ConfigError(
            f"clusters: got {labels.size} labels for {z.size} responses; allowed: one each"
        )
    first = np.full(idx.max() + 1, -1)
    first[idx[::-1]] = np.arange(idx.size)[::-1]
    code = np.unique(labels, return_inverse=True)[1].ravel()
    return code[first][np.bincount(idx) >= 3]


def _bootstrap(s_x, a_x, rows, var, sizes, G, boot, seed, clusters=None) -> np.ndarray:
    """(boot, 3) replicates of (G*, c1, C3): groups (or whole clusters of groups) resampled,
    norm rows within batch size."""
    rng = np.random.default_rng(seed)
    out = np.empty((boot, 3))
    code = np.arange(s_x.size) if clusters is None else np.unique(clusters, return_inverse=True)[1]
    C = int(code.max()) + 1
    sums_s, sums_a = np.bincount(code, s_x, C), np.bincount(code, a_x, C)
    count = np.bincount(code, minlength=C).astype(np.float64)
    for k in range(boot):
        i = rng.integers(0, C, C)
        means = np.array([r[rng.integers(0, r.size, r.size)].mean() for r in rows])
        g_sq, T = _line(means, var, sizes)
        m = count[i].sum()
        c = constants_from_proxy(sums_s[i].sum() / m, sums_a[i].sum() / m, g_sq, T, G)
        out[k] = _g_star(c["c1"], c["C3"]), c["c1"], c["C3"]
    return out


def gstar_bounds(rewards, proxy, group) -> dict:
    """What the proxy alone gives (gpolab's): ‖g_x‖² <= S2 σ² (Cauchy–Schwarz on
    g_x = E[W (Z − V)]), so with s = E_X[S2 σ²] and a = E_X E[‖W‖²(Z − V)²] (:func:`proxy_moments`)

        C3 = s + E‖g_X‖² ∈ [s, 2s],     C2 = a − E‖g_X‖² ∈ [max(a − s, 0), a];

    c1 (how much the prompts' gradients differ) needs gradient norms at two batch sizes, so
    ``gstar`` is None with that reason."""
    s_x, a_x = proxy_moments(rewards, proxy, group)
    if s_x.size < 1:
        nan = dict.fromkeys(("s", "a", "C3_lo", "C3_hi", "C2_lo", "C2_hi"), _NAN)
        return {**nan, "gstar": None, "reason": "no group with >= 3 responses"}
    s, a = float(s_x.mean()), float(a_x.mean())
    return {"s": s, "a": a, "C3_lo": s, "C3_hi": 2 * s, "C2_lo": max(a - s, 0.0), "C2_hi": a,
            "gstar": None, "reason": "c1 (the prompts' gradient variance) needs gradient norms "
            "at >= 2 batch sizes; rewards and the proxy give only C2 and C3 bounds"}  # fmt: skip
