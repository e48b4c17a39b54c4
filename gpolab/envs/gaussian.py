"""Gaussian policy with a bounded bump reward: the testbed with an interior optimum (theory §5).

P prompts x with features φ(x) ∈ R^d, drawn with probabilities f.  The policy emits one real
response per draw and the reward is a Gaussian bump around a per-prompt target μ_x,

    Y | x ~ N(m_x, s_x²),   m_x = θᵀφ(x),      Z = exp(−(Y − μ_x)² / (2 h_x²)) ∈ (0, 1].

With v_x = h_x² + s_x² and δ_x = m_x − μ_x everything about J is closed form:

    V_x(θ) = E[Z | x] = (h_x / √v_x) · exp(−δ_x² / (2 v_x))
    ∇V_x   = −(δ_x / v_x) V_x · φ(x)
    ∇²V_x  = (δ_x² / v_x² − 1 / v_x) V_x · φ(x)φ(x)ᵀ
    J(θ) = Σ_x f_x V_x(θ).

Score W = ∇_θ log π_θ(Y|x) = (Y − m_x)/s_x² · φ(x): every per-sample score is a scalar times φ(x).

Instances built by :func:`make` are *realizable*: μ = Φθ° for some θ°, so θ* = θ° maximises every
prompt's V_x at once (δ_x = 0 for all x), J* = Σ_x f_x h_x/√v_x and every per-prompt gradient
vanishes at θ*.  That keeps θ* the fixed point of biased estimators too (Dr.GRPO's ``mean``,
std-normalized ``grpo``), see :mod:`gpolab.theory.chi2`.  With ``rank=r < d`` the features are
φ(x) = (a_x1, …, a_x1, a_x2, …, a_xr) with the first d − r + 1 coordinates equal, so J depends on
θ only through θ_1 + … + θ_{d−r+1} and r − 1 further coordinates (for d = 3, r = 2: only θ1 + θ2
and θ3 matter); the Hessian has rank r.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from gpolab import configs, validate
from gpolab.configs import option
from gpolab.envs import axis, resolve
from gpolab.envs.sampling import inverse_cdf


@struct.dataclass
class GaussianParams:
    phi: jax.Array  # (P, d) prompt features φ(x)
    mu: jax.Array  # (P,) reward centres μ_x
    s: jax.Array  # (P,) policy standard deviations s_x (fixed, not learned)
    h: jax.Array  # (P,) reward widths h_x
    prompt_probs: jax.Array  # (P,) prompt distribution f

    num_prompts = axis("phi", 0)
    dim = axis("phi", 1)


@dataclasses.dataclass(frozen=True)
class Instance(configs.Config):
    """The Gaussian env's settings (:func:`make` draws the instance from ``instance_seed``)."""

    prompts: int = option(4, "number of prompts P (>= rank)")
    dim: int = option(3, "parameter dimension d")
    rank: int = option(0, "rank r of the features (0: d)")
    s: float = option(1.0, "reward scale")
    h_min: float = option(0.8, "narrowest reward width")
    h_max: float = option(1.25, "widest reward width")
    eig_min: float = option(1.0, "smallest eigenvalue of the features' second moment")
    eig_max: float = option(1.5, "largest eigenvalue of the features' second moment")
    theta_scale: float = option(0.5, "scale of the optimum theta")
    instance_seed: int = option(0, "seed of the instance")

    def validate(self) -> None:
        rank = self.rank or self.dim  # 0: d
        validate.integer("dim", self.dim, 1)
        validate.integer("rank", rank, 1, self.dim)
        validate.integer("prompts", self.prompts, rank)
        validate.real("s", self.s, low=0.0, open_low=True)
        validate.real("h_min", self.h_min, low=0.0, open_low=True)
        validate.real("h_max", self.h_max, low=self.h_min)
        validate.real("eig_min", self.eig_min, low=0.0, open_low=True)
        validate.real("eig_max", self.eig_max, low=self.eig_min)
        validate.real("theta_scale", self.theta_scale, low=0.0)
        validate.integer("instance_seed", self.instance_seed, 0)


def make(inst: Instance | int = 0, **settings) -> GaussianParams:
    """The instance of ``inst`` (an :class:`Instance`), or of a seed and keywords (the older
    form, same instance; ``rank`` None or 0: d)."""
    return draw(*resolve(Instance, inst, settings))


def draw(seed: int, inst: Instance) -> GaussianParams:
    """A realizable instance of the (validated) settings ``inst`` (numpy, drawn with ``seed``).

    Features: Φ = A L with A (P, r) whose uniform-f second moment AᵀA/P has eigenvalues spread
    evenly over [``eig_min``, ``eig_max``] (random orientation from ``seed``), and L (r, d) the
    0/1 map that copies a_x1 into the first d − r + 1 coordinates (L = I when r = d).
    Reward widths h_x are log-spaced over [``h_min``, ``h_max``] so the per-prompt curvatures
    differ (H is then not proportional to the noise covariance).  θ° ~ ``theta_scale``·N(0, I)
    and μ = Φθ°.  Prompts are uniform.
    """
    prompts, dim, rank = inst.prompts, inst.dim, inst.rank or inst.dim  # rank None or 0: d
    rng = np.random.default_rng(seed)
    u = _equal_norm_frame(rng.normal(size=(prompts, rank)))
    o, _ = np.linalg.qr(rng.normal(size=(rank, rank)))
    ev = np.linspace(inst.eig_min, inst.eig_max, rank)
    a = u @ np.diag(np.sqrt(prompts * ev)) @ o.T  # AᵀA / P = O diag(ev) Oᵀ
    lift = np.zeros((rank, dim))
    lift[0, : dim - rank + 1] = 1.0
    lift[1:, dim - rank + 1 :] = np.eye(rank - 1)
    phi = a @ lift
    theta_target = inst.theta_scale * rng.normal(size=dim)
    return GaussianParams(
        phi=jnp.asarray(phi, jnp.float32),
        mu=jnp.asarray(phi @ theta_target, jnp.float32),
        s=jnp.full((prompts,), inst.s, jnp.float32),
        h=jnp.asarray(np.geomspace(inst.h_min, inst.h_max, prompts), jnp.float32),
        prompt_probs=jnp.full((prompts,), 1.0 / prompts, jnp.float32),
    )


def _equal_norm_frame(a: np.ndarray, iters: int = 200) -> np.ndarray:
    """(P, r) orthonormal columns whose rows have (nearly) equal norms √(r/P).

    Alternating projections: orthonormalise the columns (polar factor), rescale the rows; equal
    row norms keep every prompt's coupling to θ alike, so no prompt dominates the noise.
    """
    P, r = a.shape
    for _ in range(iters):
        u, _, vt = np.linalg.svd(a, full_matrices=False)
        a = u @ vt
        a = a / np.linalg.norm(a, axis=1, keepdims=True) * np.sqrt(r / P)
    u, _, vt = np.linalg.svd(a, full_matrices=False)
    return u @ vt


def validate_params(params: GaussianParams) -> None:
    """Plain-Python checks of a user-built instance."""
    validate.finite_array("phi", params.phi)
    validate.finite_array("mu", params.mu)
    validate.finite_array("s", params.s, low=1e-12)
    validate.finite_array("h", params.h, low=1e-12)
    validate.finite_array("prompt_probs", params.prompt_probs, 0.0, 1.0)
    if abs(float(np.sum(params.prompt_probs)) - 1.0) > 1e-5:
        raise validate.ConfigError("prompt_probs: must sum to 1")


def offsets(params: GaussianParams, theta: jax.Array) -> jax.Array:
    """(P,) δ_x = θᵀφ(x) − μ_x."""
    return params.phi @ theta - params.mu


def peak_value(params: GaussianParams) -> jax.Array:
    """(P,) max_m V_x = h_x / √(h_x² + s_x²), attained at δ_x = 0."""
    return params.h / jnp.sqrt(params.h**2 + params.s**2)


def value(params: GaussianParams, theta: jax.Array) -> jax.Array:
    """(P,) V_x(θ) = E[Z | x] = h/√v · exp(−δ²/(2v)), v = h² + s² (the oracle baseline)."""
    v = params.h**2 + params.s**2
    return peak_value(params) * jnp.exp(-(offsets(params, theta) ** 2) / (2 * v))


def expected_return(params: GaussianParams, theta: jax.Array) -> jax.Array:
    """J(θ) = Σ_x f_x V_x(θ)."""
    return params.prompt_probs @ value(params, theta)


def gradient(params: GaussianParams, theta: jax.Array) -> jax.Array:
    """(d,) ∇J = Σ_x f_x (−δ_x/v_x) V_x φ(x)."""
    v = params.h**2 + params.s**2
    c = params.prompt_probs * (-offsets(params, theta) / v) * value(params, theta)
    return c @ params.phi


def hessian(params: GaussianParams, theta: jax.Array) -> jax.Array:
    """(d, d) ∇²J = Σ_x f_x (δ_x²/v_x² − 1/v_x) V_x φ(x)φ(x)ᵀ."""
    v = params.h**2 + params.s**2
    d = offsets(params, theta)
    c = params.prompt_probs * (d**2 / v**2 - 1 / v) * value(params, theta)
    return jnp.einsum("p,pi,pj->ij", c, params.phi, params.phi)


def gap(params: GaussianParams, theta: jax.Array) -> jax.Array:
    """Δ(θ) = Σ_x f_x (max V_x − V_x(θ)) = Σ_x f_x (h/√v) · (−expm1(−δ_x²/(2v))).

    Equals J* − J(θ) on realizable instances; the expm1 form keeps full relative precision when
    Δ ~ 1/n is far below J's float32 resolution.
    """
    v = params.h**2 + params.s**2
    return params.prompt_probs @ (
        peak_value(params) * -jnp.expm1(-(offsets(params, theta) ** 2) / (2 * v))
    )


def optimum(params: GaussianParams, tol: float = 1e-5) -> np.ndarray:
    """θ* (float64, the minimum-norm solution of Φθ = μ); ConfigError if not realizable."""
    phi = np.asarray(params.phi, np.float64)
    mu = np.asarray(params.mu, np.float64)
    theta, *_ = np.linalg.lstsq(phi, mu, rcond=None)
    resid = float(np.max(np.abs(phi @ theta - mu)))
    if resid > tol * max(1.0, float(np.max(np.abs(mu)))):
        raise validate.ConfigError(
            f"mu: the instance is not realizable (max |Φθ* − μ| = {resid:.3g}); allowed: μ = Φθ°"
        )
    return theta


def sample_prompts(key: jax.Array, params: GaussianParams, B: int) -> jax.Array:
    """(B,) iid prompt indices from f."""
    u = jax.random.uniform(key, (B,), dtype=params.prompt_probs.dtype)
    return inverse_cdf(params.prompt_probs, u)


def sample(key: jax.Array, params: GaussianParams, theta: jax.Array, prompts: jax.Array, G: int):
    """G responses for each prompt in ``prompts`` (B,).

    Returns responses Y (B, G), rewards Z (B, G) and scores W = (Y − m)/s² · φ(x) (B, G, d).
    """
    s = params.s[prompts][:, None]
    noise = s * jax.random.normal(key, (prompts.shape[0], G), dtype=params.phi.dtype)
    y = (params.phi[prompts] @ theta)[:, None] + noise
    z = jnp.exp(-((y - params.mu[prompts][:, None]) ** 2) / (2 * params.h[prompts][:, None] ** 2))
    w = noise / s**2
    return y, z, w[:, :, None] * params.phi[prompts][:, None, :]
