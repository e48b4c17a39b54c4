"""Graded rewards with a few values (finite support) for ``gpolab plan`` (theory §10): the
Dirichlet-multinomial fit of per-prompt reward-value probabilities, the degenerate (all-equal)
group fraction under it and its check against the log, and for continuous rewards the unbiased
zero-std fraction of the log's own groups.  The binary case is :mod:`gpolab.theory.difficulty`.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy import optimize, special

from gpolab import validate
from gpolab.theory.difficulty import (
    _HI,
    _LO,
    _as_tuple,
    _cluster_robust,
    _log_normal_draws,
    _positive_definite,
)
from gpolab.theory.fit_checks import _check_result


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
    H = np.full(
        (al.size, al.size),
        np.sum(special.polygamma(1, al.sum()) - special.polygamma(1, n + al.sum())),
    )
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
    res = optimize.minimize(
        lambda t: tuple(-u for u in _dm_loglik_grad(t, x)),
        start,
        jac=True,
        method="L-BFGS-B",
        bounds=bounds,
    )
    al = np.exp(res.x)
    cov = _dm_covariance(res.x, x)
    method = "observed information (groups independent)"
    if clusters is not None:
        a0, n = al.sum(), x.sum(1, keepdims=True)
        per_group = lambda: (  # noqa: E731
            al
            * (
                special.digamma(a0)
                - special.digamma(n + a0)
                + special.digamma(x + al)
                - special.digamma(al)
            )
        )
        cov, method = _cluster_robust(cov, per_group, clusters)
    diag = np.diag(cov)
    se = np.where(diag >= 0, al * np.sqrt(np.abs(diag)), np.nan)
    return DirichletFit(
        tuple(map(float, al)),
        tuple(map(float, se)),
        int(x.shape[0]),
        float(-res.fun),
        _as_tuple(cov),
        method,
    )


def degenerate_fraction_graded(alpha, G) -> np.ndarray:
    """P(G draws of one prompt all equal) = Σ_v E[p_v^G], p_v ~ Beta(α_v, α0 − α_v) (the
    Dirichlet's marginals): Σ_v B(α_v + G, α0 − α_v)/B(α_v, α0 − α_v).  ``alpha`` (..., K)."""
    al = np.asarray(alpha, np.float64)
    G = np.asarray(G, np.float64)[..., None]
    rest = al.sum(-1, keepdims=True) - al
    out = np.sum(np.exp(special.betaln(al + G, rest) - special.betaln(al, rest)), axis=-1)
    return np.where(G[..., 0] == 1, 1.0, np.clip(out, 0.0, 1.0))  # G = 1: flat, exactly


def logged_check_graded(
    counts, fit: DirichletFit, *, draws: int = 2000, seed: int = 0, clusters=None
) -> dict:
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
