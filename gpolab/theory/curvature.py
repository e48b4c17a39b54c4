"""Closed forms of the std-normalization analysis (theory §7).

Only the abstract of [N] (arXiv 2601.23135) was available to this project: the bounds and the gain
law below are gpolab's reconstruction of its abstract's claims ("the reward std tracks local
curvature"; normalization as an adaptive step), derived here, not the paper's lemma or theorem.

Binary reward, log-linear policy, ‖φ‖ ≤ B, σ_x = √(p_x (1 − p_x)), ψ = φ − E_π φ (‖ψ‖ ≤ 2B):

* ‖g_x‖ = ‖E[(r − p_x) ψ]‖ ≤ E|r − p_x| · 2B = 4B σ_x² ≤ 2B σ_x            (gpolab's derivation)
  (Cauchy–Schwarz gives the sharper ‖g_x‖ ≤ σ_x √(E‖ψ‖²) ≤ B σ_x);
* ‖H_x‖_op = ‖E[(r − p_x) ψψᵀ]‖ ≤ E|r − p_x| · 4B² = 8B² σ_x² ≤ 4B² σ_x     (gpolab's derivation);
* GRPO with η = 1/c against REINFORCE with η = 1/(c σ_max): the bound on the average gradient
  norm shrinks by √(σ̄/σ_max), σ̄ the mean of σ_x over prompts and iterations (gpolab's
  reconstruction); at equal
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
        max_ratio=float(np.max(v[keep] / s[keep])), ls_slope=float(np.sum(v * s) / np.sum(s * s))
    )


def predicted_gain(sigma) -> dict:
    """From σ_x along a trajectory (any shape: iterations × prompts): σ̄, σ_max, the predicted
    gradient-norm ratio √(σ̄/σ_max) (gpolab's reconstruction) and the implied iteration
    speed-up σ_max/σ̄."""
    s = np.asarray(sigma, np.float64)
    bar, top = float(np.mean(s)), float(np.max(s))
    return dict(
        sigma_bar=bar, sigma_max=top, sqrt_ratio=float(np.sqrt(bar / top)), speedup=top / bar
    )


def zero_variance_prob(p, G: int):
    """P(all G binary rewards equal) = p^G + (1 − p)^G: the fraction of groups with no signal."""
    p = np.asarray(p, np.float64)
    return p**G + (1.0 - p) ** G


def coherence(prompts: int, rho: float) -> float:
    """κ = 1 + (N − 1)ρ²: λ_max of Σ_x w_x w_xᵀ, w_x = √(1 − ρ²) e_x + ρ e_s — how much the shared
    block can add up the N prompts' curvatures (κ = 1 for orthogonal blocks, N for ρ = 1)."""
    return 1.0 + (prompts - 1) * rho**2


def smoothness(prompts: int, rho: float, sigma_max: float, bound: float = 1.0, c: float = 4.0):
    """L of J = mean_x p_x from the curvature law ‖H_x‖ ≤ cB²σ_x:
    zᵀ∇²J z = (1/N) Σ_x (a z_x + ρ z_s)ᵀ M_x (a z_x + ρ z_s) ≤ cB²σ_max κ/N."""
    return c * bound**2 * sigma_max * coherence(prompts, rho) / prompts


def admissible_steps(
    prompts: int, rho: float, bound: float = 1.0, c: float = 4.0, sigma_max: float = 0.5
) -> dict:
    """The step sizes of gpolab's reconstructed gain law on the trainer's scale (directions are
    means over prompts):

    * ``grpo``: η = N/(cB²κ) — each prompt block moves by g_x/(cB²σ_x) = g_x/L_x (ρ = 0);
    * ``reinforce``: η = 1/L = N/(cB²σ_max κ), σ_max = 1/2 a priori (binary rewards);
    * ``reinforce_iterate``: η = N/(cB²), applied as η/s(θ_t) (``Run.step="curvature"``,
      s = λ_max(Σ_x σ_x w_x w_xᵀ), :func:`gpolab.envs.loglinear.smoothness_sigma`): REINFORCE
      told the exact smoothness constant at the current iterate (an oracle).

    GRPO's step is 1/L of the frozen-weight objective (1/N) Σ_x p_x/σ_x(θ_t) it ascends
    (weights cancel σ_x: L = cB²κ/N); the a-priori REINFORCE step has the same κ, so their
    ratio is σ_max at every ρ."""
    k = coherence(prompts, rho)
    base = prompts / (c * bound**2 * k)
    return dict(grpo=base, reinforce=base / sigma_max, reinforce_iterate=prompts / (c * bound**2))


def predicted_gain_iterate(sigma_eff, sigma_bar, prompts: int, rho: float) -> float:
    """Iteration speed-up of GRPO (η = N/(cB²κ)) over the oracle REINFORCE step 1/L_t:
    mean_t s(θ_t) / (κ · mean_t σ̄_t) — σ_max/σ̄ for orthogonal prompts, → 1 as ρ → 1
    (s = Nσ̄ = κσ̄): the loss-of-orthogonality phase."""
    s = float(np.mean(sigma_eff))
    return s / (coherence(prompts, rho) * float(np.mean(sigma_bar)))
