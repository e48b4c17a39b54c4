"""Closed forms of the std-normalization analysis (DESIGN §7, [N] arXiv 2601.23135).

Binary reward, log-linear policy, ‖φ‖ ≤ B, σ_x = √(p_x (1 − p_x)), ψ = φ − E_π φ (‖ψ‖ ≤ 2B):

* ‖g_x‖ = ‖E[(r − p_x) ψ]‖ ≤ E|r − p_x| · 2B = 4B σ_x² ≤ 2B σ_x            [N, Lemma 1]
  (Cauchy–Schwarz gives the sharper ‖g_x‖ ≤ σ_x √(E‖ψ‖²) ≤ B σ_x);
* ‖H_x‖_op = ‖E[(r − p_x) ψψᵀ]‖ ≤ E|r − p_x| · 4B² = 8B² σ_x² ≤ 4B² σ_x     [N, Lemma 1];
* GRPO with η = 1/c against REINFORCE with η = 1/(c σ_max): the bound on the average gradient
  norm shrinks by √(σ̄/σ_max), σ̄ the mean of σ_x over prompts and iterations [N, Thm 1]; at equal
  gradient-norm targets that is an iteration speed-up of σ_max/σ̄ (the bound scales as 1/√T).
"""

from __future__ import annotations

import numpy as np


def gradient_bound(sigma, bound: float = 1.0):
    """2B σ_x: the curvature-law bound on ‖g_x‖."""
    return 2.0 * bound * np.asarray(sigma)


def hessian_bound(sigma, bound: float = 1.0):
    """4B² σ_x: the curvature-law bound on ‖H_x‖_op."""
    return 4.0 * bound**2 * np.asarray(sigma)


def fit_constant(values, sigma, scale: float = 1.0) -> dict:
    """Constant C of values ≈ C · scale · σ: the tightest bound (max ratio) and the least-squares
    slope through the origin.  ``scale`` = B for gradients, B² for Hessians."""
    v = np.asarray(values, np.float64).ravel()
    s = np.asarray(sigma, np.float64).ravel() * scale
    keep = s > 1e-6
    return dict(
        max_ratio=float(np.max(v[keep] / s[keep])),
        ls_slope=float(np.sum(v * s) / np.sum(s * s)),
    )


def predicted_gain(sigma) -> dict:
    """From σ_x along a trajectory (any shape: iterations × prompts): σ̄, σ_max, the predicted
    gradient-norm ratio √(σ̄/σ_max) [N, Thm 1] and the implied iteration speed-up σ_max/σ̄."""
    s = np.asarray(sigma, np.float64)
    bar, top = float(np.mean(s)), float(np.max(s))
    return dict(
        sigma_bar=bar, sigma_max=top, sqrt_ratio=float(np.sqrt(bar / top)), speedup=top / bar
    )


def zero_variance_prob(p, G: int):
    """P(all G binary rewards equal) = p^G + (1 − p)^G: the fraction of groups with no signal."""
    p = np.asarray(p, np.float64)
    return p**G + (1.0 - p) ** G
