"""Thoughts that share features: the whole-budget thought-policy gradient of a tree, exactly
(gpolab's derivation; theory §6 and §11).

Setting: T finite thoughts with values v_t under a log-linear thought policy π(t) ∝ exp(θ·φ_t)
whose features share one direction u:

    φ_t = √(1 − ρ) e_t + √ρ ψ_t u,   ψ_t = (1[v_t > J] − P)/√(P(1 − P)),  P = Σ_t π_t 1[v_t > J],

e_t the one-hot of thought t and J = Σ_t π_t v_t, so ⟨φ_s, φ_t⟩ = (1 − ρ)δ_st + ρ ψ_s ψ_t:
``overlap`` ρ = 0 is the softmax over one-hot features (the ``finite`` model, scores of distinct
thoughts near-orthogonal); as ρ → 1 the thoughts that beat the average become alike, and so do
those that do not (two strategies).  θ = (logits/√(1 − ρ), 0) keeps the finite model's policy π
at every ρ (at ρ = 1 the features could not carry the logits, so ρ < 1).  A component shared by
every thought alike (φ_t + c) cancels in the score φ_t − E_π φ and changes nothing: only overlap
that follows the values moves the gradient.

With Â_k the tree's thought advantages (Σ_k Â_k = 0), the tree's gradient is
ĝ = (1/K) Σ_k Â_k (φ_{t_k} − E_π φ) = Φᵀ ĝ₀ with ĝ₀ = (1/K) Σ_k Â_k e_{t_k} ∈ R^T, and the
target (what thought-std estimates) is g = Φᵀ t₀, t₀ = π ⊙ (v − J)/σ = ∇_logits J/σ (σ the sd of
the thought values).  Every inner product in θ-space is one in R^T under the Gram matrix
Γ = ΦΦᵀ = (1 − ρ)I + ρ ψψᵀ, so six per-tree moments serve every ρ (:data:`MOMENTS`):

    w = (E ĝ₀·t₀, E h, ‖E ĝ₀‖², (E h)², E‖ĝ₀‖², E h²),   h = ψ·ĝ₀,

    E ĝ·g = (1 − ρ) w₀ + ρ c w₁,  ‖E ĝ‖² = (1 − ρ) w₂ + ρ w₃,  E‖ĝ‖² = (1 − ρ) w₄ + ρ w₅,
    ‖g‖² = (1 − ρ)‖t₀‖² + ρ c²,   c = ψ·t₀.

**Whole budget.**  A token budget buys n trees (n = tokens / (K·(L_think + M·L_answer))); their
mean ĝ_n has E ĝ_n = E ĝ and tr_Γ Cov ĝ_n = V/n, V = E‖ĝ‖² − ‖E ĝ‖², so

    cos² = (E ĝ·g)² / (‖g‖² (‖E ĝ‖² + V/n))      (the squared cosine of the best rescaling)
    mse  = ‖E ĝ − g‖² + V/n                       (all norms in Γ)

(:func:`cos2`): 1 − cos² is the whole-budget gradient's MSE after the best rescaling over ‖g‖²
(theory §11's scaled MSE); cos² → 1 only if ĝ is unbiased up to scale and n → ∞.  The Monte Carlo
estimates w from two independent trees per seed (ĝ¹·ĝ² is unbiased for ‖E ĝ‖²).

**Exact per-tree moments** (:func:`gradient_moments`).  Given its count S_k of successes, thought
t_k is independent of the other thoughts and Â_k depends on t_k only through S_k, so with
W[j, t] = π_t C(M, j) v_t^j (1 − v_t)^(M−j) (the joint law of (S, t)):

    E ĝ₀ = Σ_j a(j) W[j, :],                a(j) = E[Â_1 | S_1 = j]
    E ĝ₀ĝ₀ᵀ = (1/K) diag(Σ_j a₂(j) W[j, :]) + ((K − 1)/K) Wᵀ A₁₂ W,
              a₂(j) = E[Â_1² | S_1 = j],    A₁₂[i, j] = E[Â_1 Â_2 | S_1 = i, S_2 = j];

Â depends on the counts only through (Σ S, Σ S²), so the conditional expectations sum over the
exact joint pmf of the other K − 2 thoughts' sums (:func:`gpolab.theory.tree.sum_stats_pmf`),
while its grid ((K−2)M + 1)((K−2)M² + 1) ≤ :data:`gpolab.theory.tree.EXACT_GRID` (NaN beyond).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from gpolab.theory.tree import EXACT_GRID, flag, sum_stats_pmf, thought_law
from gpolab.theory.tree import rank as advantage_rank

NO_MOMENTS = None  # gradient_moments past the exact grid
MOMENTS = ("gt", "h", "g12", "h12", "gsq", "hsq")  # the names of w (module docstring)


def strategy(law) -> np.ndarray:
    """ψ (T,) of the thought law (float64; :func:`gpolab.envs.tree.strategy_feature`)."""
    above = (law.nodes > law.mean).astype(np.float64)
    P = law.weights @ above
    return (above - P) / math.sqrt(P * (1 - P))


def target(law) -> np.ndarray:
    """t₀ = π ⊙ (v − J)/σ = ∇_logits J / σ (thought-std's target in logit coordinates)."""
    return law.weights * (law.nodes - law.mean) / math.sqrt(law.var)


def geometry(law) -> tuple[float, float]:
    """(‖t₀‖², c = ψ·t₀): what ‖g‖² needs besides ρ."""
    t0 = target(law)
    return float(t0 @ t0), float(strategy(law) @ t0)


def _advantage(j, t1, t2, K: int, M: int, variant: str, ddof: int, eps: float):
    """Â of a thought with j successes in a tree whose counts have sums t1 = Σ S, t2 = Σ S²."""
    q = np.maximum(t2 - t1**2 / K, 0.0) / M**2
    q = np.where(q < 1e-12, 0.0, q)
    centred = j / M - t1 / (K * M)
    if variant == "mean-only":
        return np.where(q > 0, centred, 0.0)
    if variant == "thought-std":
        scale = np.sqrt(q / (K - ddof)) + eps
    else:  # leaf-std
        n, mean = K * M, t1 / (K * M)
        scale = np.sqrt(np.maximum(mean * (1 - mean), 0.0) * n / (n - ddof)) + eps
    return np.where(q > 0, centred / np.where(q > 0, scale, 1.0), 0.0)


def _pair_tables(pmf1: np.ndarray, K: int, M: int, variant: str, ddof: int, eps: float):
    """(E[Â_1 | S_1, S_2], E[Â_1² | S_1, S_2], E[Â_1Â_2 | S_1, S_2]), each (M + 1, M + 1)."""
    if K > 2:
        t1, t2, prob = sum_stats_pmf(pmf1, K - 2)
    else:
        t1, t2, prob = np.zeros(1), np.zeros(1), np.ones(1)
    j = np.arange(M + 1, dtype=np.float64)
    a1, a11, a12 = (np.zeros((M + 1, M + 1)) for _ in range(3))
    for i in range(M + 1):
        s1 = i + j[:, None] + t1[None, :]
        s2 = i * i + j[:, None] ** 2 + t2[None, :]
        x = _advantage(float(i), s1, s2, K, M, variant, ddof, eps)
        y = _advantage(j[:, None], s1, s2, K, M, variant, ddof, eps)
        a1[i], a11[i], a12[i] = x @ prob, (x * x) @ prob, (x * y) @ prob
    return a1, a11, a12


def gradient_moments(
    params, K: int, M: int, variant: str = "thought-std", ddof: int = 1, eps: float = 0.0
):
    """Exact (mean (T,), second moment (T, T)) of ĝ₀ = (1/K) Σ_k Â_k e_{t_k} for finite
    thoughts (module docstring), or None past the exact grid."""
    if K > 2 and ((K - 2) * M + 1) * ((K - 2) * M * M + 1) > EXACT_GRID:
        return NO_MOMENTS
    law = thought_law(params)
    W = law.weights[None, :] * stats.binom.pmf(np.arange(M + 1)[:, None], M, law.nodes[None, :])
    pmf1 = W.sum(axis=1)
    a1, a11, a12 = _pair_tables(pmf1, K, M, variant, ddof, eps)
    mean = (a1 @ pmf1) @ W
    second = np.diag((a11 @ pmf1) @ W) / K + (K - 1) / K * (W.T @ a12 @ W)
    return mean, second


def moments(
    params, K: int, M: int, variant: str = "thought-std", ddof: int = 1, eps: float = 0.0
) -> np.ndarray:
    """The exact w (6,) of :data:`MOMENTS` (NaNs past the exact grid)."""
    found = gradient_moments(params, K, M, variant, ddof, eps)
    if found is NO_MOMENTS:
        return np.full(len(MOMENTS), np.nan)
    mean, second = found
    law = thought_law(params)
    psi, t0 = strategy(law), target(law)
    h = mean @ psi
    return np.array([mean @ t0, h, mean @ mean, h * h, np.trace(second), psi @ second @ psi])


def cos2(w, rho, tt: float, c: float, n):
    """(cos², mse) of the mean of n trees at overlap ρ from the moments w (..., 6) (module
    docstring; arrays broadcast)."""
    w = np.asarray(w, np.float64)
    rho, n = np.asarray(rho, np.float64), np.asarray(n, np.float64)
    d = (1 - rho) * w[..., 0] + rho * c * w[..., 1]
    mm = (1 - rho) * w[..., 2] + rho * w[..., 3]
    ss = (1 - rho) * w[..., 4] + rho * w[..., 5]
    gg = (1 - rho) * tt + rho * c * c
    spread = mm + (ss - mm) / n
    with np.errstate(divide="ignore", invalid="ignore"):
        return d * d / (gg * spread), spread - 2 * d + gg


def cos2_se(w, cov, n_seeds: int, rho: float, tt: float, c: float, n: float) -> float:
    """Delta-method SE of the Monte Carlo cos² from the per-seed moments' means w (6,) and
    covariance ``cov`` (6, 6) over ``n_seeds`` seeds: SE² = ∇ᵀ cov ∇ / n_seeds."""
    w = np.asarray(w, np.float64)
    if n_seeds < 2:
        return math.nan
    f = float(cos2(w, rho, tt, c, n)[0])
    d = (1 - rho) * w[0] + rho * c * w[1]
    if not (f > 0):
        return math.nan
    spread = d * d / ((1 - rho) * tt + rho * c * c) / f
    dd = np.array([1 - rho, rho * c, 0, 0, 0, 0])
    ds = np.array([0, 0, (1 - rho) * (1 - 1 / n), rho * (1 - 1 / n), (1 - rho) / n, rho / n])
    grad = 2 * f / d * dd - f / spread * ds
    return math.sqrt(max(float(grad @ np.asarray(cov, np.float64) @ grad), 0.0) / n_seeds)


# ----------------------------------------------------------------------------- ranking splits


def covariance_columns() -> list[tuple[str, int, int]]:
    """(column, i, j) of the stored upper triangle of the per-seed moments' covariance."""
    return [
        (f"ov_cov_{MOMENTS[i]}_{MOMENTS[j]}", i, j)
        for i in range(len(MOMENTS))
        for j in range(i, len(MOMENTS))
    ]


def covariance(row) -> np.ndarray:
    """The (6, 6) covariance of the per-seed moments stored in ``row`` (ddof 1)."""
    cov = np.zeros((len(MOMENTS), len(MOMENTS)))
    for name, i, j in covariance_columns():
        cov[i, j] = cov[j, i] = row[name]
    return cov


def tokens(leaves, think_len: float, answer_len: float):
    """The token budget of a leaf budget: flat sampling's cost, leaves·(L_think + L_answer)."""
    return leaves * (think_len + answer_len)


def budget_columns(df, tt: float, c: float):
    """``trees`` (n = tokens / cost), the Monte Carlo ``grad_cos2`` ± ``grad_cos2_se``, the exact
    ``theory_grad_cos2`` and ``grad_budget_mse`` (exact where it exists) at each row's
    ``overlap`` (module docstring)."""
    n = tokens(df["leaves"], df["think_len"], df["answer_len"]) / df["cost"]
    rho = df["overlap"].to_numpy(np.float64)
    w = df[[f"ov_{m}" for m in MOMENTS]].to_numpy(np.float64)
    exact = df[[f"theory_ov_{m}" for m in MOMENTS]].to_numpy(np.float64)
    mc, mc_mse = cos2(w, rho, tt, c, n.to_numpy())
    th, th_mse = cos2(exact, rho, tt, c, n.to_numpy())
    se = [
        cos2_se(w[i], covariance(r), int(r["n_seeds"]), rho[i], tt, c, n.iloc[i])
        for i, (_, r) in enumerate(df.iterrows())
    ]
    return df.assign(
        trees=n,
        grad_cos2=mc,
        grad_cos2_se=se,
        theory_grad_cos2=th,
        grad_budget_mse=np.where(np.isnan(th_mse), mc_mse, th_mse),
    )


def rank(df, tt: float, c: float):
    """A loglinear budget table ranked on the whole-budget gradient: the advantage ranking of
    :func:`gpolab.theory.tree.rank` kept as ``orthogonal_score`` (what it would recommend if the
    thought scores were near-orthogonal), then ``score`` = 1 − cos² (exact theory where it exists,
    else Monte Carlo ± SE) and the flags of :func:`gpolab.theory.tree.flag` on it."""
    df = advantage_rank(budget_columns(df, tt, c))
    df = df.assign(orthogonal_score=df["score"], orthogonal_recommended=df["recommended"])
    exact = df["theory_grad_cos2"].notna().to_numpy()
    c2 = np.where(exact, df["theory_grad_cos2"], df["grad_cos2"]).astype(np.float64)
    se = np.where(exact, 0.0, df["grad_cos2_se"]).astype(np.float64)
    df = df.assign(score=1 - c2, score_se=se, score_source=np.where(exact, "exact", "monte carlo"))
    return flag(df)


# ----------------------------------------------------------------------------- the boundary

OVERLAPS = (
    0.0,
    0.05,
    0.1,
    0.15,
    0.2,
    0.25,
    0.3,
    0.35,
    0.4,
    0.45,
    0.5,
    0.55,
    0.6,
    0.65,
    0.7,
    0.75,
    0.8,
    0.85,
    0.9,
    0.95,
    0.99,
)
THINK_RATIOS = (0.0, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0)  # L_think / L_answer


def winners(df, tt: float, c: float, overlaps=OVERLAPS, ratios=THINK_RATIOS, z: float = 1.96):
    """The best split of one leaf budget (every row of ``df``, its splits K·M) by the
    whole-budget cos² at each (L_think/L_answer, overlap): a tidy frame with ``ratio``,
    ``overlap``, the best ``K``, ``M``, its ``cos2``, ``source`` and ``pays`` = "tree" (M > 1,
    no flat split within ``z`` SE), "flat" (M = 1, no branching split within z SE) or "tie".
    Exact cos² where every row has it (no SE), else Monte Carlo ± delta-method SE."""
    import pandas as pd  # deferred: pandas (the closed forms need numpy and scipy only)

    exact = bool(df[f"theory_ov_{MOMENTS[0]}"].notna().all())
    cols = [f"{'theory_' if exact else ''}ov_{m}" for m in MOMENTS]
    w, leaves = df[cols].to_numpy(np.float64), int(df["K"].iloc[0] * df["M"].iloc[0])
    K, M = df["K"].to_numpy(), df["M"].to_numpy()
    out = []
    for r in ratios:
        n = tokens(leaves, r, 1.0) / (K * (r + M))
        for rho in overlaps:
            c2 = cos2(w, rho, tt, c, n)[0]
            se = (
                np.zeros(len(df))
                if exact
                else np.array(
                    [
                        cos2_se(w[i], covariance(row), int(row["n_seeds"]), rho, tt, c, n[i])
                        for i, (_, row) in enumerate(df.iterrows())
                    ]
                )
            )
            best = int(np.nanargmax(c2))
            near = c2[best] - c2 <= z * np.sqrt(se**2 + se[best] ** 2)
            other = near & ((M > 1) != (M[best] > 1))
            pays = "tie" if other.any() else ("tree" if M[best] > 1 else "flat")
            out.append(
                dict(
                    ratio=r,
                    overlap=rho,
                    K=int(K[best]),
                    M=int(M[best]),
                    cos2=float(c2[best]),
                    source="exact" if exact else "monte carlo",
                    pays=pays,
                )
            )
    return pd.DataFrame(out)


def boundary(wins) -> dict:
    """Per think ratio, the smallest overlap at which branching pays (NaN: never on the grid),
    and ``violations``: grid points above that boundary where it does not."""
    found, violations = {}, 0
    for r, rows in wins.groupby("ratio"):
        tree = rows["pays"].to_numpy() == "tree"
        first = int(np.argmax(tree)) if tree.any() else None
        found[float(r)] = math.nan if first is None else float(rows["overlap"].iloc[first])
        violations += 0 if first is None else int((~tree[first:]).sum())
    return {"rho_star": found, "violations": violations}
