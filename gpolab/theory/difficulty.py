"""Prompt difficulty from a reward log (theory §10; groundwork of ``gpolab plan``, issue 18).

Per prompt x, c_x successes of n_x responses; difficulty p_x ~ Beta(a, b) across prompts, so
c_x ~ BetaBinomial(n_x, a, b).  :func:`fit` is the maximum-likelihood (a, b) with standard errors
from the observed information; under the fit, exactly:

    P(degenerate group of size G) = E[p^G + (1 − p)^G] = [B(a + G, b) + B(a, b + G)] / B(a, b)
    DAPO draws per kept group     = 1 / (1 − P(degenerate))

(the second: groups are drawn until one is not degenerate, a geometric number of draws).

Built on that for ``gpolab plan``: the fit's parametric uncertainty (:func:`draws` from the
asymptotic normal of log a, log b) and :func:`degenerate_curve` with intervals; the fit's checks
in :mod:`gpolab.theory.fit_checks`; :func:`g_needed`; :func:`kappa_mix`, κ_G of an estimator
averaged exactly over the fit (theory §8).  Beside it: graded rewards in :mod:`gpolab.theory.graded`
(``fit_graded``, Dirichlet-multinomial; ``degenerate_unbiased`` for continuous ones) and G* from
a per-response score-norm proxy and gradient norms at two batch sizes in
:mod:`gpolab.theory.gstar` (``gstar``, gpolab's derivation; ``gstar_bounds``).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy import special, stats

from gpolab import validate
from gpolab.theory import exact

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
    def binomial_limit(self) -> bool:
        """True when the likelihood is highest at a + b → ∞ (no spread of difficulty beyond
        binomial noise: every p_x at the mean): the fit stops at the cap max(a, b) = 1e6, where
        its predictions equal the binomial ones to ~1e-6, and reports no interval there."""
        return _at_limit(self.a, self.b)

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
    """Σ_i w_i log BetaBinomial(c_i; n_i, a, b) (w = 1 when None), from :func:`_tails`."""
    c, n = np.asarray(c, np.int64), np.asarray(n, np.int64)
    w = np.ones(c.shape) if w is None else np.asarray(w, np.float64)
    const = w @ (special.gammaln(n + 1) - special.gammaln(c + 1) - special.gammaln(n - c + 1))
    return float(_Tails.of(c, n, w).loglik(*np.exp(log_ab)) + const)


@dataclasses.dataclass(frozen=True)
class _Tails:
    """The beta-binomial likelihood's sufficient statistic as tail counts over j = 0..max n − 1:
    K_j = Σ w·1{c > j}, F_j = Σ w·1{n − c > j}, T_j = Σ w·1{n > j}.  With the product form
    B(c + a, n − c + b)/B(a, b) = Π_{j<c}(a + j) Π_{j<n−c}(b + j) / Π_{j<n}(a + b + j):

        ℓ(a, b) = Σc log m + Σ(n − c) log(1 − m)
                  + Σ_j [K_j log1p(j/a) + F_j log1p(j/b) − T_j log1p(j/(a + b))],   m = a/(a + b)

    (C(n, c) left out): the binomial log-likelihood plus terms that vanish as a + b → ∞, so it
    stays exact there (log-gamma differences lose ~1e-16·a per term), at O(max n) per call
    whatever the number of groups.  Gradient and Hessian in (log a, log b) are closed forms."""

    j: np.ndarray
    K: np.ndarray
    F: np.ndarray
    T: np.ndarray

    @classmethod
    def of(cls, c: np.ndarray, n: np.ndarray, w: np.ndarray) -> _Tails:
        J = int(n.max())

        def above(x):  # Σ w·1{x > j}, j = 0..J − 1
            h = np.bincount(x, weights=w, minlength=J + 1)
            return h.sum() - np.cumsum(h)[:J]

        return cls(np.arange(J, dtype=np.float64), above(c), above(n - c), above(n))

    def loglik(self, a: float, b: float) -> float:
        j, s = self.j, a + b
        tails = self.K @ np.log1p(j / a) + self.F @ np.log1p(j / b) - self.T @ np.log1p(j / s)
        # Σ_j K_j = Σ w c and Σ_j F_j = Σ w (n − c)
        return float(self.K.sum() * np.log(a / s) + self.F.sum() * np.log(b / s) + tails)

    def grad_hess(self, a: float, b: float) -> tuple[np.ndarray, np.ndarray]:
        """Gradient and Hessian of ℓ in (log a, log b)."""
        j, s = self.j, a + b
        ta, tb, ts = a + j, b + j, s + j
        g = np.array([self.K @ (a / ta) - self.T @ (a / ts), self.F @ (b / tb) - self.T @ (b / ts)])
        hab = self.T @ (a * b / ts**2)
        H = np.array(
            [
                [self.K @ (a * j / ta**2) - self.T @ (a * tb / ts**2), hab],
                [hab, self.F @ (b * j / tb**2) - self.T @ (b * ta / ts**2)],
            ]
        )
        return g, H


def fit(successes, trials, clusters=None) -> BetaFit:
    """Beta-binomial maximum likelihood on log(a), log(b) (from a method-of-moments start;
    Newton steps on the exact likelihood, :func:`_maximize`).

    Success rates with no spread beyond binomial noise (about half of exactly binomial logs)
    put the maximum at a + b = ∞: the fit then stops at the cap max(a, b) = 1e6 (p_x all equal
    to the mean; the predictions equal the binomial ones to ~1e-6 and the log-likelihood is
    within ~|∂ℓ/∂(1/(a + b))|·1e-6 of the binomial one), flags it
    (:attr:`BetaFit.binomial_limit`) and gives no covariance (``se_method`` says why).  All
    c = 0 (or all c = n) drives a (or b) to 0: the fit stops at a = e^-10 (b = e^-10); every
    prediction stays finite (degenerate fraction ~1).  :attr:`BetaFit.at_bound` flags both.
    ``cov`` is the inverse observed information of (log a, log b) (the exact Hessian), which
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
    tails = _Tails.of(c, n, np.ones(c.shape))  # the likelihood's sufficient statistic
    x = _start(c, n)
    if not c.any():  # ℓ rises as a → 0 (a point mass at p = 0), too flat for Newton: the bound
        x[0] = np.log(_LO)
    x = _maximize(tails, x)
    a, b = np.exp(x)
    const = np.sum(special.gammaln(n + 1) - special.gammaln(c + 1) - special.gammaln(n - c + 1))
    cov, method = _information(tails, a, b), "observed information (groups independent)"
    if _at_limit(a, b):
        cov, method = np.full((2, 2), np.nan), BINOMIAL_LIMIT
    elif clusters is not None:
        cov, method = _cluster_robust(cov, lambda: scores(a, b, c, n), clusters)
    # delta method from log(a), log(b) to a, b
    diag = np.diag(cov)
    se = np.where(diag >= 0, np.sqrt(np.abs(diag)), np.nan)  # NaN: information not definite
    return BetaFit(
        float(a),
        float(b),
        float(a * se[0]),
        float(b * se[1]),
        int(c.size),
        float(tails.loglik(a, b) + const),
        _as_tuple(cov),
        method,
    )


BINOMIAL_LIMIT = (
    "none: the likelihood is highest at a + b → ∞ (every prompt at the mean success rate: "
    "no spread beyond binomial noise), so the fit stops at the cap max(a, b) = 1e6 and an "
    "asymptotic normal does not hold there"
)


def _at_limit(a: float, b: float) -> bool:
    """At the cap of the larger parameter, the smaller not at its floor (ℓ still rising toward
    a + b → ∞; all c = 0 instead stops at a = e^-10 with b anywhere)."""
    return max(a, b) >= _HI * (1 - 1e-6) and min(a, b) > _LO * (1 + 1e-6)


def _start(c: np.ndarray, n: np.ndarray) -> np.ndarray:
    """log (a, b) by the method of moments (a floor on the spread keeps it finite)."""
    rate = c / n
    m = float(np.clip(rate.mean(), 1e-3, 1 - 1e-3))
    v = float(max(rate.var(), 1e-4))
    s = max(m * (1 - m) / v - 1, 0.1)
    return np.clip(np.log([m * s, (1 - m) * s]), np.log(_LO), np.log(_HI))


def _maximize(tails: _Tails, x: np.ndarray, steps: int = 500) -> np.ndarray:
    """The maximum of ℓ over log a, log b in [log _LO, log _HI]: Newton steps with the exact
    Hessian on the coordinates not held at a bound (a gradient step where −H is not positive
    definite), each halved until ℓ rises, until it stops rising.  Newton's step does not mind
    the ridge of equal mean a/(a + b) that the old finite-difference quasi-Newton search
    stalled on (6.4 nats short on 250k binomial groups of 8, issue 55); on that ridge toward
    a + b → ∞ it moves log(a + b) by about 1 a step, to the cap."""
    box = np.log([_LO, _HI])
    best = tails.loglik(*np.exp(x))
    for _ in range(steps):
        g, H = tails.grad_hess(*np.exp(x))
        free = ~(((x <= box[0]) & (g < 0)) | ((x >= box[1]) & (g > 0)))
        if not free.any():
            break
        step, Hf = np.zeros(2), -H[np.ix_(free, free)]
        try:
            np.linalg.cholesky(Hf)
            step[free] = np.linalg.solve(Hf, g[free])
        except np.linalg.LinAlgError:
            step[free] = g[free] / np.maximum(np.abs(np.diag(Hf)), 1.0)
        t = 1.0
        while t > 1e-12:
            y = np.clip(x + t * step, *box)
            fy = tails.loglik(*np.exp(y))
            if fy > best:
                break
            t /= 2
        if t <= 1e-12 or np.max(np.abs(y - x)) < 1e-13:
            break
        x, best = y, fy
    return x


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
        return np.full_like(cov, np.nan), (
            f"none: {C} prompt(s) in {N} groups; a cluster-robust SE needs >= 2 prompts"
        )
    meat, _ = cluster_meat(per_group(), clusters)
    few = "; few prompts: the SE is itself noisy" if C < 30 else ""
    return cov @ meat @ cov, f"cluster-robust by prompt ({C} prompts, {N} groups{few})"


def _information(tails: _Tails, a: float, b: float) -> np.ndarray:
    """Inverse observed information of (log a, log b), from the exact Hessian."""
    try:
        return np.linalg.inv(-tails.grad_hess(a, b)[1])
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
    return pd.DataFrame(
        {
            "G": G.astype(np.int64),
            "predicted": predicted,
            "lo": lo,
            "hi": hi,
            "dapo_draws": _inverse(informative),
            "dapo_lo": _inverse(i_hi),
            "dapo_hi": _inverse(i_lo),
        }
    )


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
    validate.real("a", a, 0.0, open_low=True)
    validate.real("b", b, 0.0, open_low=True)
    table = exact.registry_table(spec, G, strict=False, **shared)
    keys = ("kappa_mean", "kappa_p10", "kappa_p50", "kappa_p90", "share_hard")
    if not table.ok:
        return {**dict.fromkeys(keys, _NAN), "reason": table.reason}
    d = np.asarray(table.a1, np.float64) - np.asarray(table.a0, np.float64)
    quantiles = stats.beta.ppf([0.1, 0.5, 0.9], a, b)
    k_q = exact.kappa(table, G, quantiles)
    out = {
        "kappa_mean": float(d @ _beta_binomial_pmf(G - 1, a, b)),
        "kappa_p10": float(k_q[0]),
        "kappa_p50": float(k_q[1]),
        "kappa_p90": float(k_q[2]),
        "share_hard": _share_hard(d, G, a, b, 0.2),
        "reason": None,
    }
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
