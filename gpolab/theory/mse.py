"""Exact finite-G MSE of the unbiased and mean-baseline estimators (theory §3, [U] §3–4).

Inputs are the per-prompt quantities of an environment's truth (``V, sigma2, S2, tr_sigma_oracle,
e_wz2, e_w2_zv``, ‖g_x‖²); every function returns per-prompt MSE, shape (P,).  With
S2 = E‖W‖², trΣ_or = E[‖W‖²(Z − V)²] − ‖g_x‖²:

    oracle      trΣ_or / G
    vanilla     (E‖WZ‖² − ‖g_x‖²) / G
    constant b  trΣ_or/G + [(V − b)² S2 + 2 (V − b) E(‖W‖²(Z − V))] / G
    loo, ustat  trΣ_or/G + (S2 σ² + ‖g_x‖²) / (G (G − 1))
    mean        ((G − 1)/G)² MSE_loo + ‖g_x‖² / G²

A mini-batch of B iid prompts adds the prompt variance.  For an estimator with conditional mean
κ g_x (κ = 1 unbiased, κ = 1 − 1/G for mean):

    MSE_B = (E_X[MSE(X) − (1 − κ)² ‖g_X‖²] + κ² c1) / B + (1 − κ)² ‖g‖²,

which is c1/B + E_X[MSE(X)]/B for the unbiased ones.
"""

from __future__ import annotations

import numpy as np


def _gsq(truth) -> np.ndarray:
    return np.sum(np.asarray(truth.g_local, dtype=np.float64) ** 2, axis=-1)


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def mse_oracle(truth, G: int) -> np.ndarray:
    return _f64(truth.tr_sigma_oracle) / G


def mse_vanilla(truth, G: int) -> np.ndarray:
    return (_f64(truth.e_wz2) - _gsq(truth)) / G


def mse_constant(truth, G: int, b: float) -> np.ndarray:
    d = _f64(truth.V) - b
    return mse_oracle(truth, G) + (d**2 * _f64(truth.S2) + 2 * d * _f64(truth.e_w2_zv)) / G


def mse_loo(truth, G: int) -> np.ndarray:
    extra = _f64(truth.S2) * _f64(truth.sigma2) + _gsq(truth)
    return mse_oracle(truth, G) + extra / (G * (G - 1))


def mse_mean(truth, G: int) -> np.ndarray:
    return ((G - 1) / G) ** 2 * mse_loo(truth, G) + _gsq(truth) / G**2


def bias_sq_mean(truth, G: int) -> np.ndarray:
    """‖E ĝ_mean − g_x‖² = ‖g_x‖² / G²; every other estimator here is unbiased."""
    return _gsq(truth) / G**2


PER_PROMPT = {
    "vanilla": mse_vanilla,
    "oracle": mse_oracle,
    "loo": mse_loo,
    "ustat": mse_loo,
    "mean": mse_mean,
}


def closed_form(spec: str) -> bool:
    """Whether the estimator spec has a closed-form MSE here (one of :data:`PER_PROMPT`'s
    formulas, which take no options)."""
    return spec.strip() in PER_PROMPT  # a name with [options] is not a key


def shrink(estimator: str, G: int) -> float:
    """κ with E[ĝ | x] = κ g_x."""
    return (G - 1) / G if estimator == "mean" else 1.0


def mse(truth, estimator: str, G: int, B: int | None = None) -> float:
    """Exact MSE of ``estimator`` at group size G; NaN where no closed form exists (grpo).

    ``B=None``: the prompt-weighted average Σ_x f(x) MSE(x) (every prompt gets a group);
    ``B=b``: a mini-batch of b iid prompts (module docstring).
    """
    if estimator not in PER_PROMPT:
        return float("nan")
    f = _f64(truth.prompt_probs)
    per_prompt = PER_PROMPT[estimator](truth, G)
    if B is None:
        return float(f @ per_prompt)
    k = shrink(estimator, G)
    cond_var = f @ (per_prompt - (1 - k) ** 2 * _gsq(truth))
    bias2 = (1 - k) ** 2 * float(np.sum(_f64(truth.g) ** 2))
    return float((cond_var + k**2 * float(truth.c1)) / B + bias2)


def bias_sq(truth, estimator: str, G: int, B: int | None = None) -> float:
    """Exact squared bias, matching :func:`mse`'s averaging; NaN where unknown (grpo)."""
    if estimator not in PER_PROMPT:
        return float("nan")
    if estimator != "mean":
        return 0.0
    if B is None:
        return float(_f64(truth.prompt_probs) @ bias_sq_mean(truth, G))
    return float(np.sum(_f64(truth.g) ** 2)) / G**2  # E ĝ = (1 − 1/G) g


def target_sq(truth, B: int | None = None) -> float:
    """‖target‖² matching :func:`mse`'s averaging: Σ_x f(x) ‖g_x‖² (B=None), ‖g‖² (B=b)."""
    if B is None:
        return float(_f64(truth.prompt_probs) @ _gsq(truth))
    return float(np.sum(_f64(truth.g) ** 2))


def dmse_dS2(truth, estimator: str, G: int) -> np.ndarray:
    """∂MSE(x)/∂S2(x) per prompt (every closed form above is linear in S2 = E‖W‖², through
    trΣ_or = E[‖W‖²Z²] − 2V E[‖W‖²Z] + V² S2 − ‖g_x‖²)."""
    V = _f64(truth.V)
    oracle = V**2 / G
    loo = oracle + _f64(truth.sigma2) / (G * (G - 1)) if G > 1 else np.full_like(V, np.nan)
    return {
        "oracle": oracle,
        "vanilla": np.zeros_like(V),
        "loo": loo,
        "ustat": loo,
        "mean": ((G - 1) / G) ** 2 * loo,
    }[estimator]


def mse_se(truth, estimator: str, G: int, B: int | None = None) -> float:
    """Standard error :func:`mse` inherits from a Monte Carlo S2 (field ``S2_se``, independent
    across prompts); 0 where S2 is exact, NaN where there is no closed form."""
    if estimator not in PER_PROMPT:
        return float("nan")
    se = getattr(truth, "S2_se", None)
    if se is None:
        return 0.0
    per_prompt = _f64(truth.prompt_probs) * dmse_dS2(truth, estimator, G) * _f64(se)
    return float(np.sqrt(np.sum(per_prompt**2))) / (B or 1)
