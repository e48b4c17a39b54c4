"""Asymptotic weighted-χ² law of the SGD suboptimality gap ([U] arXiv 2603.01162, Thm 8; theory §5).

SGD ascent θ_{i+1} = θ_i + η_i ĝ_i with η_i = β/i, B and G fixed.  Linearise at the fixed point θ*:

    e_{i+1} = (I + η_i M) e_i + η_i ξ_i,     e = θ − θ*,  Cov ξ = Γ,

where M is the Jacobian of the estimator's *expected* update θ ↦ E ĝ(θ) at θ* (M = H = ∇²J(θ*)
for unbiased estimators) and Γ the covariance of the mini-batch estimate at θ*.  With Q an
orthonormal basis of the identifiable directions (range of H, rank r), Λ = −QᵀHQ ≻ 0,
Λ_M = −QᵀMQ and Ω = QᵀΓQ, if β λ_min(Λ_M) > 1/2:

    √n Qᵀ(θ_n − θ*) → N(0, Σ),   (βΛ_M − I/2)Σ + Σ(βΛ_M − I/2)ᵀ = β² Ω      (Lyapunov)
    n Δ(θ_n) → ½ uᵀΛu, u ~ N(0, Σ)  =  Σ_k w_k χ²₁,   w = eig(½ Σ^{1/2} Λ Σ^{1/2}).

In the eigenbasis of a symmetric Λ_M = Λ, Σ_kl = β² Ω_kl / (β(λ_k + λ_l) − 1).  The paper prints
Σ without the β² factor; it belongs there (η_i = β/i puts β² on the noise).  The gap uses the true
Hessian Λ; the dynamics use Λ_M.

Estimators on :mod:`gpolab.envs.gaussian` (realizable: δ_x = 0 for every prompt at θ*).  Every
per-prompt estimate is ζ·φ(x) with a scalar ζ = (1/G) Σ_g A_g w_g, w_g = (Y_g − m_x)/s_x².  Write
ψ_x(δ) = E ζ at offset δ = m_x − μ_x and τ²_x = E ζ² at δ = 0.  Then

    E ĝ(θ) = Σ_x f_x ψ_x(δ_x) φ(x)  ⇒  M = Σ_x f_x ψ'_x(0) φ(x)φ(x)ᵀ,
    Γ = (1/B) Σ_x f_x τ²_x φ(x)φ(x)ᵀ   (+ the prompt term Cov_x(ψ_x(0)φ(x))/B, which is 0).

ψ_x(0) = 0 for every estimator: flipping the sign of every Y − m in a group leaves Z unchanged and
flips w, so θ* stays the fixed point even for ``mean`` and std-normalized ``grpo``, and the prompt
term vanishes.  Closed forms (ε ~ N(0, s²), Z = exp(−ε²/(2h²)), v = h² + s², S2 = E w² = 1/s²,
σ² = Var Z, trΣ_or = E[w²(Z − V)²]; theory §3 with g_x = 0):

    vanilla  τ² = E[w² Z²]/G                              ψ'(0) = −κ,  κ = h / v^{3/2}
    oracle   τ² = trΣ_or/G                                ψ'(0) = −κ
    loo      τ² = trΣ_or/G + S2 σ²/(G(G − 1))             ψ'(0) = −κ
    mean     τ² = ((G − 1)/G)² τ²_loo                     ψ'(0) = −(1 − 1/G) κ
    grpo     Monte Carlo (below)                          ψ'(0) = Monte Carlo

with the Gaussian moments E[Z^k ε^{2j}] = ρ_k σ_k^{2j} (2j − 1)!!, σ_k² = s²h²/(h² + k s²),
ρ_k = h/√(h² + k s²).  For ``grpo`` (A = (Z − Z̄)/(std + eps)) no closed form is known: τ² is a
large Monte Carlo average of ζ², and ψ'(0) is the derivative, by ``jax.grad``, of the Monte Carlo
average of ζ(δ) with common random numbers (pathwise: Y − μ = sξ + δ, w = ξ/s), i.e. the exact
derivative of the sample-average expected update, unbiased for ψ'(0).  The same routine run on
the closed-form estimators reproduces the table (a test), which checks both.

The weighted-χ² CDF is computed by Imhof's (1961) inversion formula with ``scipy.integrate.quad``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from scipy import integrate, interpolate, linalg, stats

from gpolab import estimators, validate
from gpolab.envs import gaussian

__all__ = [
    "CLOSED_FORM",
    "closed_form",
    "why_not",
    "LimitLaw",
    "prompt_moments",
    "scalar_variance",
    "scalar_slope",
    "constant_baseline_variance",
    "best_constant_baseline",
    "score_reward_correlation",
    "constant_baseline_law",
    "mc_scalar_moments",
    "identifiable_basis",
    "lyapunov",
    "limit_weights",
    "limit_law",
    "check_beta",
    "estimator_scalars",
    "estimator_law",
    "imhof_cdf",
    "imhof_sf",
    "WeightedChi2",
    "sample_weighted_chi2",
]

CLOSED_FORM = ("vanilla", "oracle", "loo", "mean")  # the estimators of the closed-form table


def closed_form(spec: str) -> bool:
    """Whether ``spec``'s scalars ψ'(0), τ² have a closed form here (no options)."""
    name, options = estimators.parse_spec(spec)
    return name in CLOSED_FORM and not options


def why_not(spec: str) -> str:
    """Why the limit law does not apply to estimator ``spec``, or "" when it does (closed form,
    else Monte Carlo scalars).  Decided by the registry entry: the law is per prompt, so the
    estimator must be group-scoped, and the testbed gives V(x) but no lengths or greedy
    responses.  (ψ_x(0) = 0 holds for every such estimator: the sign flip of the docstring.)"""
    entry, options = estimators.bind(spec)
    missing = [n for n in entry.needs if n != "baseline"]
    if missing:
        return f"it needs {', '.join(missing)}, which the Gaussian testbed does not provide"
    if entry.scope_of(options) != "group":
        return "it couples the prompts of a batch (the law is built per prompt)"
    return ""


# ---------------------------------------------------------------------------- per-prompt scalars
def prompt_moments(h, s) -> dict:
    """Exact per-prompt moments at δ = 0 (float64 arrays broadcast over h, s).

    V = ρ_1, E Z² = ρ_2, σ² = ρ_2 − ρ_1², S2 = 1/s², E[w²Z] = ρ_1 σ_1²/s⁴, E[w²Z²] = ρ_2 σ_2²/s⁴,
    trΣ_or = E[w²Z²] − 2V E[w²Z] + V² S2, κ = −V''(0) = h / (h² + s²)^{3/2}.
    """
    h = np.asarray(h, np.float64)
    s = np.asarray(s, np.float64)
    rho = lambda k: h / np.sqrt(h**2 + k * s**2)  # noqa: E731
    sig2 = lambda k: s**2 * h**2 / (h**2 + k * s**2)  # noqa: E731
    V, ez2 = rho(1), rho(2)
    S2 = 1 / s**2
    e_w2z = rho(1) * sig2(1) / s**4
    e_w2z2 = rho(2) * sig2(2) / s**4
    return dict(
        V=V,
        ez2=ez2,
        sigma2=ez2 - V**2,
        S2=S2,
        e_w2z=e_w2z,
        e_w2z2=e_w2z2,
        tr_sigma_oracle=e_w2z2 - 2 * V * e_w2z + V**2 * S2,
        kappa=h / (h**2 + s**2) ** 1.5,
    )


def scalar_variance(name: str, h, s, G: int) -> np.ndarray:
    """τ² = E ζ² at θ* for the closed-form estimators (theory §3 with g_x = 0)."""
    m = prompt_moments(h, s)
    if name == "vanilla":
        return m["e_w2z2"] / G
    if name == "oracle":
        return m["tr_sigma_oracle"] / G
    loo = m["tr_sigma_oracle"] / G + m["S2"] * m["sigma2"] / (G * (G - 1))
    if name == "loo":
        return loo
    if name == "mean":
        return ((G - 1) / G) ** 2 * loo
    raise validate.ConfigError(f"estimator: got {name!r}; allowed: {', '.join(CLOSED_FORM)}")


def scalar_slope(name: str, h, s, G: int) -> np.ndarray:
    """ψ'(0), the derivative of the expected scalar update at δ = 0: −κ, or −(1 − 1/G)κ (mean)."""
    kappa = prompt_moments(h, s)["kappa"]
    if name in ("vanilla", "oracle", "loo"):
        return -kappa
    if name == "mean":
        return -(1 - 1 / G) * kappa
    raise validate.ConfigError(f"estimator: got {name!r}; allowed: {', '.join(CLOSED_FORM)}")


def constant_baseline_variance(b, h, s, G: int) -> np.ndarray:
    """τ² = E[w²(Z − b)²]/G at θ* of the prompt-only baseline b_x (a constant per prompt; b = 0
    is vanilla).  Its ψ'(0) is −κ, as vanilla's: E w = 0 at every offset δ."""
    m = prompt_moments(h, s)
    b = np.asarray(b, np.float64)
    return (m["e_w2z2"] - 2 * b * m["e_w2z"] + b**2 * m["S2"]) / G


def best_constant_baseline(h, s) -> np.ndarray:
    """The prompt-only b_x minimising E[w²(Z − b)²]: E[w²Z]/E[w²] = h²/(h² + s²) · V, below V
    (gpolab's derivation): with w² and Z correlated it beats the oracle's b = V."""
    m = prompt_moments(h, s)
    return m["e_w2z"] / m["S2"]


def score_reward_correlation(h, s) -> np.ndarray:
    """corr(w², Z | x) at θ* per prompt, w = (Y − m)/s²: Corollary 10's uncorrelation assumption
    (Qᵀ∇log π ∇log πᵀQ = w² Qᵀφφᵀ Q uncorrelated with Z given x) holds iff it is 0.  Cov =
    E[w²Z] − E[w²]V = −V/(h² + s²), Var w² = 2/s⁴ (gpolab's derivation)."""
    m = prompt_moments(h, s)
    cov = m["e_w2z"] - m["S2"] * m["V"]
    return cov / np.sqrt(2 * m["S2"] ** 2 * m["sigma2"])


def _zeta(name: str, G: int, ddof: int, xi, delta, h, s, eps):
    """Per-group scalar ζ = (1/G) Σ_g A_g w_g for standard normals ξ (N, G) at offset δ, with the
    shared estimators (the oracle baseline is the exact V(δ))."""
    err = s * xi + delta  # Y − μ
    z = jnp.exp(-(err**2) / (2 * h**2))
    baseline = jnp.broadcast_to(
        h / jnp.sqrt(h**2 + s**2) * jnp.exp(-(delta**2) / 2 / (h**2 + s**2)), xi.shape[:-1]
    )
    if estimators.resolve(name).weights is not None:  # its own gradient weights (ustat)
        return jnp.sum(estimators.gradient_weights(name, z) * (xi / s), axis=-1)
    adv = estimators.advantages(name, z, baseline=baseline, scale="group", ddof=ddof, eps=eps)
    return estimators.policy_gradient(adv, (xi / s)[..., None])[..., 0]


@partial(jax.jit, static_argnames=("name", "G", "ddof", "n_groups", "n_batches"))
def _mc_moments(key, h, s, eps, *, name: str, G: int, ddof: int, n_groups: int, n_batches: int):
    def batch(k):
        xi = jax.random.normal(k, (n_groups, G))
        mean_at = lambda d: jnp.mean(_zeta(name, G, ddof, xi, d, h, s, eps))  # noqa: E731
        zeta = _zeta(name, G, ddof, xi, 0.0, h, s, eps)
        return jnp.stack([jnp.mean(zeta), jax.grad(mean_at)(0.0), jnp.mean(zeta**2)])

    return jax.lax.map(batch, jax.random.split(key, n_batches))


def mc_scalar_moments(
    key: jax.Array,
    name: str,
    h: float,
    s: float,
    G: int,
    *,
    ddof: int = 1,
    eps: float = 1e-4,
    n_groups: int = 2**20,
    n_batches: int = 16,
) -> dict:
    """Monte Carlo ψ(0), ψ'(0) and τ² of one prompt, each with a standard error.

    ``n_groups`` groups per batch, ``n_batches`` batches (the SE is their spread).  ψ'(0) is
    ``jax.grad`` of the batch average of ζ(δ) at δ = 0 (pathwise, common random numbers).
    """
    out = np.asarray(
        _mc_moments(
            key,
            jnp.float32(h),
            jnp.float32(s),
            jnp.float32(eps),
            name=name,
            G=G,
            ddof=ddof,
            n_groups=n_groups // n_batches,
            n_batches=n_batches,
        ),
        np.float64,
    )
    mean, se = out.mean(0), out.std(0, ddof=1) / math.sqrt(n_batches)
    return dict(
        psi=mean[0], psi_se=se[0], slope=mean[1], slope_se=se[1], tau2=mean[2], tau2_se=se[2]
    )


# --------------------------------------------------------------------------------- the limit law
def identifiable_basis(hessian, rtol: float = 1e-8):
    """Q (d, r) orthonormal eigenvectors of −H with eigenvalue > rtol·max, and Λ = diag (r,).

    ConfigError if H has a positive eigenvalue beyond ``rtol`` (θ* is not a maximum).
    """
    neg = -np.asarray(hessian, np.float64)
    neg = (neg + neg.T) / 2
    lam, vec = np.linalg.eigh(neg)
    scale = max(float(np.max(np.abs(lam))), 1e-300)
    if lam[0] < -rtol * scale:
        raise validate.ConfigError(
            f"hessian: has a positive eigenvalue {-lam[0]:.3g}; allowed: H ⪯ 0 (a maximum)"
        )
    keep = lam > rtol * scale
    return vec[:, keep], lam[keep]


def lyapunov(lam_update, omega, beta: float) -> np.ndarray:
    """Σ solving (βΛ_M − I/2)Σ + Σ(βΛ_M − I/2)ᵀ = β²Ω  (``scipy.linalg.solve_continuous_lyapunov``).

    ``lam_update`` is the (r, r) matrix Λ_M (or its diagonal).  theory §5 (with the β² factor).
    """
    lam_update = np.asarray(lam_update, np.float64)
    if lam_update.ndim == 1:
        lam_update = np.diag(lam_update)
    a = beta * lam_update - 0.5 * np.eye(lam_update.shape[0])
    sigma = linalg.solve_continuous_lyapunov(a, beta**2 * np.asarray(omega, np.float64))
    return (sigma + sigma.T) / 2


def _psd_sqrt(a) -> np.ndarray:
    lam, vec = np.linalg.eigh((a + a.T) / 2)
    return (vec * np.sqrt(np.clip(lam, 0, None))) @ vec.T


def limit_weights(lam, sigma) -> np.ndarray:
    """w = eig(½ Σ^{1/2} Λ Σ^{1/2}), sorted descending: n Δ → Σ_k w_k χ²₁.

    ``lam`` is Λ (r, r) or its diagonal; ½uᵀΛu with u = Σ^{1/2} z, z ~ N(0, I).
    """
    lam = np.asarray(lam, np.float64)
    lam = np.diag(lam) if lam.ndim == 1 else lam
    root = _psd_sqrt(np.asarray(sigma, np.float64))
    w = np.linalg.eigvalsh(0.5 * root @ lam @ root)
    return np.sort(np.clip(w, 0, None))[::-1]


@dataclasses.dataclass(frozen=True)
class LimitLaw:
    """Everything Theorem 8 predicts for one estimator (float64 numpy)."""

    estimator: str
    beta: float
    hessian: np.ndarray  # (d, d) H = ∇²J(θ*)
    jacobian: np.ndarray  # (d, d) M, Jacobian of the expected update at θ*
    gamma: np.ndarray  # (d, d) Γ, covariance of the mini-batch estimate at θ*
    basis: np.ndarray  # (d, r) Q
    lam: np.ndarray  # (r, r) Λ = −QᵀHQ
    lam_update: np.ndarray  # (r, r) Λ_M = −QᵀMQ
    omega: np.ndarray  # (r, r) Ω = QᵀΓQ
    sigma: np.ndarray  # (r, r) Σ, limit covariance of √n Qᵀ(θ_n − θ*)
    weights: np.ndarray  # (r,) w, descending

    @property
    def rank(self) -> int:
        return self.basis.shape[1]

    @property
    def lambda_min(self) -> float:
        """Smallest real part of an eigenvalue of Λ_M (the theorem needs β·this > 1/2)."""
        return float(np.min(np.linalg.eigvals(self.lam_update).real))

    @property
    def mean(self) -> float:
        """E Σ_k w_k χ²₁ = Σ_k w_k = ½ tr(ΛΣ)."""
        return float(np.sum(self.weights))


def check_beta(beta: float, lambda_min: float, estimator: str = "") -> None:
    """ConfigError unless β λ_min > 1/2 (the theorem's step-size condition)."""
    validate.real("beta", beta, low=0.0, open_low=True)
    if not beta * lambda_min > 0.5:
        who = f" for {estimator}" if estimator else ""
        raise validate.ConfigError(
            f"beta: got {beta!r}; allowed: beta > 1/(2 lambda_min) = {0.5 / lambda_min:.4g}"
            f"{who} (lambda_min = {lambda_min:.4g}; the theorem needs beta*lambda_min > 1/2)"
        )


def limit_law(hessian, jacobian, gamma, beta: float, estimator: str = "") -> LimitLaw:
    """Q, Λ, Λ_M, Ω, Σ and the weights from H, M and Γ (all (d, d)); checks β λ_min > 1/2."""
    hessian = np.asarray(hessian, np.float64)
    jacobian = np.asarray(jacobian, np.float64)
    gamma = np.asarray(gamma, np.float64)
    q, lam = identifiable_basis(hessian)
    lam_m = -q.T @ jacobian @ q
    check_beta(beta, float(np.min(np.linalg.eigvals(lam_m).real)), estimator)
    omega = q.T @ gamma @ q
    sigma = lyapunov(lam_m, omega, beta)
    w = limit_weights(np.diag(lam), sigma)
    return LimitLaw(
        estimator, float(beta), hessian, jacobian, gamma, q, np.diag(lam), lam_m, omega, sigma, w
    )


def _prompt_form(params, coef) -> np.ndarray:
    """Σ_x f_x c_x φ(x)φ(x)ᵀ (float64)."""
    phi = np.asarray(params.phi, np.float64)
    f = np.asarray(params.prompt_probs, np.float64)
    return np.einsum("p,pi,pj->ij", f * np.asarray(coef, np.float64), phi, phi)


def estimator_scalars(
    key: jax.Array | None,
    params,
    estimator: str,
    G: int,
    *,
    ddof: int = 1,
    eps: float = 1e-4,
    n_groups: int = 2**20,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-prompt (ψ'_x(0), τ²_x): closed form, or Monte Carlo (``grpo``, any other estimator
    :func:`why_not` accepts; needs ``key``)."""
    h = np.asarray(params.h, np.float64)
    s = np.asarray(params.s, np.float64)
    if closed_form(estimator):
        return scalar_slope(estimator, h, s, G), scalar_variance(estimator, h, s, G)
    reason = why_not(estimator)
    if reason:
        raise validate.ConfigError(f"estimator: {estimator} has no limit law here: {reason}")
    if key is None:
        raise validate.ConfigError(f"key: {estimator}'s limit law needs a PRNG key; got None")
    # prompts sharing (h, s) share the scalars: compute each distinct pair once
    pairs = sorted(set(zip(h.tolist(), s.tolist(), strict=True)))
    res = {
        pr: mc_scalar_moments(
            jax.random.fold_in(key, i),
            estimator,
            pr[0],
            pr[1],
            G,
            ddof=ddof,
            eps=eps,
            n_groups=n_groups,
        )
        for i, pr in enumerate(pairs)
    }
    slope = np.array([res[pr]["slope"] for pr in zip(h.tolist(), s.tolist(), strict=True)])
    tau2 = np.array([res[pr]["tau2"] for pr in zip(h.tolist(), s.tolist(), strict=True)])
    return slope, tau2


def estimator_law(
    key: jax.Array | None,
    params,
    estimator: str,
    B: int,
    G: int,
    beta: float,
    *,
    ddof: int = 1,
    eps: float = 1e-4,
    n_groups: int = 2**20,
) -> LimitLaw:
    """Theorem 8's prediction for one estimator on a realizable Gaussian instance.

    H = −Σ f κ φφᵀ (exact), M = Σ f ψ'(0) φφᵀ, Γ = (1/B) Σ f τ² φφᵀ (module docstring).
    """
    gaussian.optimum(params)  # raises ConfigError if the instance is not realizable
    kappa = prompt_moments(params.h, params.s)["kappa"]
    hess = -_prompt_form(params, kappa)  # = gaussian.hessian at θ*, in float64
    slope, tau2 = estimator_scalars(
        key, params, estimator, G, ddof=ddof, eps=eps, n_groups=n_groups
    )
    jac = _prompt_form(params, slope)
    gamma = _prompt_form(params, tau2) / B
    return limit_law(hess, jac, gamma, beta, estimator)


def constant_baseline_law(params, b, B: int, G: int, beta: float) -> LimitLaw:
    """Theorem 8's law for the prompt-only baseline b (P,) (A = Z − b_x): as
    :func:`estimator_law` with τ² from :func:`constant_baseline_variance` and M = H."""
    gaussian.optimum(params)
    h = np.asarray(params.h, np.float64)
    s = np.asarray(params.s, np.float64)
    kappa = prompt_moments(h, s)["kappa"]
    hess = -_prompt_form(params, kappa)
    gamma = _prompt_form(params, constant_baseline_variance(b, h, s, G)) / B
    return limit_law(hess, hess, gamma, beta, "constant baseline")


# ----------------------------------------------------------------------------- weighted χ² law
def imhof_sf(x: float, weights, *, split: float = 20.0, epsabs: float = 1e-11) -> float:
    """P(Σ_k w_k χ²₁ > x) by Imhof's inversion (Imhof 1961, central case, positive weights):

        P(Q > x) = ½ + (1/π) ∫_0^∞ sin θ(u) / (u ρ(u)) du,
        θ(u) = ½ Σ_k arctan(w_k u) − ½ x u,   ρ(u) = Π_k (1 + w_k² u²)^{1/4}.

    Weights are rescaled by their sum first (Q/c has weights w/c).  ``scipy.integrate.quad`` on
    [0, U], U = max(``split``, 80π/x), in decades beyond ``split``; the slowly decaying
    oscillatory tail (∝ u^{−1−r/2}) on [U, ∞) is written, with a(u) = ½ Σ arctan(w_k u), as
    ∫ sin a/(uρ) · cos(xu/2) du − ∫ cos a/(uρ) · sin(xu/2) du and integrated by quad's
    Fourier-integral mode (QUADPACK QAWF, ``weight="cos"/"sin"``, ``wvar=x/2``).
    """
    w = np.asarray(weights, np.float64)
    w = w[w > 0]
    if w.size == 0:
        return 0.0
    if x <= 0:
        return 1.0
    c = float(np.sum(w))
    w, x = (w / c).tolist(), x / c

    def phase(u: float) -> float:  # a(u) = ½ Σ arctan(w_k u)
        return 0.5 * math.fsum(math.atan(wk * u) for wk in w)

    def denom(u: float) -> float:  # u ρ(u)
        return u * math.prod(math.sqrt(math.sqrt(1 + (wk * u) ** 2)) for wk in w)

    def integrand(u: float) -> float:
        return math.sin(phase(u) - 0.5 * x * u) / denom(u)

    # the tail starts after ≥ 20 periods 4π/x of the oscillation, so QAWF's cycles stay short
    cut = max(split, 80 * math.pi / x)
    quad = partial(integrate.quad, limit=2000, epsabs=epsabs, epsrel=1e-10)
    edges = [0.0, *np.geomspace(split, cut, 2 + int(math.log10(cut / split))).tolist()]
    head = math.fsum(quad(integrand, a, b)[0] for a, b in itertools.pairwise(edges) if b > a)
    tail_c, _ = integrate.quad(
        lambda u: math.sin(phase(u)) / denom(u), cut, np.inf, weight="cos", wvar=x / 2
    )
    tail_s, _ = integrate.quad(
        lambda u: math.cos(phase(u)) / denom(u), cut, np.inf, weight="sin", wvar=x / 2
    )
    val = head + tail_c - tail_s
    return float(min(max(0.5 + val / np.pi, 0.0), 1.0))


def imhof_cdf(x: float, weights, **kw) -> float:
    """P(Σ_k w_k χ²₁ ≤ x) = 1 − :func:`imhof_sf`."""
    return 1.0 - imhof_sf(x, weights, **kw)


class WeightedChi2:
    """The law of Σ_k w_k χ²₁ with a fast vectorised CDF.

    :meth:`cdf` interpolates Imhof's CDF (PCHIP in t = √x, where it is smooth at 0 for every r)
    on ``n_grid`` points up to x_max = w_max · χ²_r quantile(1 − 1e-10) (beyond it Q's tail is
    below 1e-10, since Q ≤ w_max χ²_r).  :meth:`exact_cdf` calls :func:`imhof_cdf` directly.
    """

    def __init__(self, weights, n_grid: int = 256):
        w = np.asarray(weights, np.float64)
        self.weights = np.sort(w[w > 0])[::-1]
        if self.weights.size == 0:
            raise validate.ConfigError("weights: got no positive weight; allowed: some w_k > 0")
        r = self.weights.size
        self.x_max = float(self.weights[0] * stats.chi2.ppf(1 - 1e-10, r))
        t = np.linspace(0, math.sqrt(self.x_max), n_grid)
        f = np.array([imhof_cdf(float(ti**2), self.weights) for ti in t])
        f = np.maximum.accumulate(np.clip(f, 0, 1))
        f[0] = 0.0
        self._t, self._f = t, f
        self._interp = interpolate.PchipInterpolator(t, f, extrapolate=False)

    @property
    def mean(self) -> float:
        return float(np.sum(self.weights))

    @property
    def std(self) -> float:
        return float(math.sqrt(2 * np.sum(self.weights**2)))

    def exact_cdf(self, x) -> np.ndarray:
        return np.vectorize(lambda v: imhof_cdf(float(v), self.weights))(x)

    def cdf(self, x) -> np.ndarray:
        x = np.asarray(x, np.float64)
        t = np.sqrt(np.clip(x, 0, self.x_max))
        out = self._interp(t)
        return np.where(x <= 0, 0.0, np.where(x >= self.x_max, 1.0, out))

    def ppf(self, p) -> np.ndarray:
        """Quantiles by inverting the interpolated CDF on a fine grid (plots only)."""
        t = np.linspace(0, math.sqrt(self.x_max), 20_000)
        f = np.maximum.accumulate(self._interp(t))
        return np.interp(np.asarray(p, np.float64), f, t) ** 2


def sample_weighted_chi2(key: jax.Array, weights, n: int) -> np.ndarray:
    """n draws of Σ_k w_k χ²₁ (Σ_k w_k z_k², z ~ N(0, I)), float64 numpy."""
    w = np.asarray(weights, np.float64)
    z = np.asarray(jax.random.normal(key, (n, w.size)), np.float64)
    return (z**2) @ w
