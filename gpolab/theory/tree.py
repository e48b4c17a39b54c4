"""Closed forms for tree branching (theory §6, [T] arXiv 2509.24494).

Setting: K thoughts with iid values p_k (Beta(a, b), or a finite thought set under a softmax
policy), M Bernoulli(p_k) continuations each, V̂_k = S_k/M with S_k the number of successes, and the
thought advantage Â_k = (V̂_k − V̄) / (S + eps), S the scale of the variant:
``thought-std`` S = std_k V̂_k, ``leaf-std`` S = std of the K·M leaves, ``mean-only`` S = 1 (no eps).
Definitions (all per thought, averaged over k):
``variance`` = E[Var(Â_k | p_1..p_K)], ``mse`` = E[(Â_k − A_k)²] with the population target
A_k = (p_k − E p)/sd(p), ``corr`` = Corr(Â_k, A_k).

Notation: μ = E p, σ² = Var p, τ = E[p(1 − p)], w(p) = p(1 − p)/M = Var(V̂ | p).
For Beta(a, b): μ = a/(a+b), σ² = ab/((a+b)²(a+b+1)), τ = (a+b)σ², and V̂ is beta-binomial/M with

    v = Var V̂ = σ² + τ/M = σ² (1 + (a+b)/M).

**K → ∞ (exact limits).**  V̄ → μ and the scale S → S∞ almost surely (thought-std: √v; leaf-std:
the leaf std √(μ(1 − μ)); mean-only: 1), so Â_k → (V̂_k − μ)/S∞ and, with e_k = V̂_k − p_k,

    variance floor = E w / S∞²        thought-std: (τ/M)/v = (a+b)/(a+b+M)
                                      leaf-std:    (τ/M)/(μ(1−μ)) = (a+b)/((a+b+1) M)
                                      mean-only:   τ/M
    corr∞ = Cov(V̂, p)/(sd V̂ sd p) = σ/√v = √(M/(M+a+b))        (every variant: scale-free)
    mse∞ = v/S∞² − 2σ/S∞ + 1          thought-std: 2(1 − √(M/(M+a+b)))

(mse_group has the same limit: the within-group target tends to the population one.)  The
thought-std floor decays like (a+b)/M once M ≫ a + b: slope −1 on a log-log plot, the paper's
"continuations drive the variance to zero, thoughts only leave a floor" [T].

**Finite K, exact (Beta thoughts).**  Write Q = Σ_k (V̂_k − V̄)², so Σ_k Â_k² = Q/(S+eps)² and
Σ_k Â_k V̂_k = Q/(S+eps) (Σ_k Â_k = 0).  Given S_k the thought value has the posterior
Beta(a + S_k, b + M − S_k), so E[p_k | S] = (a + S_k)/(a+b+M) is *linear* in S_k and

    E[Â_k A_k] = M E[Q/(S+eps)] / (K (a+b+M) σ),     E[Â_k²] = E[Q/(S+eps)²] / K,
    corr = E[Â_k A_k] / √E[Â_k²],                   mse = E[Â_k²] − 2 E[Â_k A_k] + 1.

Q and S are functions of (Σ S_k, Σ S_k²) only (the leaf std of binary leaves is a function of
Σ S_k), whose joint pmf is the K-fold convolution of the beta-binomial pmf: computed exactly by a
2-D FFT when the grid (KM + 1)(KM² + 1) is small (:data:`EXACT_GRID`).  Beyond it, the second-order
delta method (E√Q ≈ √EQ − Var Q/(8 EQ^{3/2}), EQ = (K−1)v, Var Q from the fourth central
moment of V̂) is used; its error is O(1/K²) there.  With thought-std and eps = 0,
E[Â_k²] = (K − ddof)/K · (1 − P(degenerate)) exactly.

**Finite K, conditional variance (expansion in 1/K).**  mean-only is exact:
E Var(Â_k | p) = (1 − 1/K) τ/M.  For the std variants, write S² = S∞²(1 + D), D = D0 + D1 with
D0 = E[D | p] and D1 = (1/K) Σ_j h(p_j, e_j)/S∞² the noise part (thought-std:
h = 2(p − μ)e + e² − w; leaf-std: h = (1 − 2μ)e), expand (1 + D)^{-1/2} to second order and keep
O(1/K):

    S∞² · variance ≈ E w (1 − 1/K)/ḡ − Cov(w, g)/(Kḡ²) + E w Var(g)/(Kḡ³)
                     − E[(p − μ) E[eh|p] + E[e²h|p]] / (K S∞²)
                     + E[E[h²|p]] (v/4 + 3 E w/4) / (K S∞⁴),

with ḡ = E S²/S∞² ((K−1)/(K−ddof) for thought-std) and g the per-thought fluctuation of
E[S² | p]/S∞² (thought-std: ((p − μ)² + w − v)/v; leaf-std: (1 − 2μ)(p − μ)/S∞²), using the
binomial moments E[e³|p] = p(1−p)(1−2p)/M², E[e⁴|p] = p(1−p)(1 + 3(M−2)p(1−p))/M³.  eps enters
as the factor (1 + eps/S∞)⁻².  The error is O(1/K²) and grows at small M (degenerate groups are not
in the expansion), so :func:`variance` returns NaN below ``k_min`` (default 16).  Every formula
is checked against Monte Carlo in tests/labs/test_tree.py.

**Degenerate groups** (all V̂_k equal): P = Σ_j P(V̂ = j/M)^K (:func:`degenerate_prob`).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy import special, stats

VARIANTS = ("thought-std", "leaf-std", "mean-only")
EXACT_GRID = 1 << 23  # largest (KM + 1)(KM² + 1) grid convolved exactly


def value_pmf(params, M: int) -> np.ndarray:
    """P(V̂ = j/M), j = 0..M, for one thought's M continuations (thought drawn from ``params``).

    Beta(a, b) thoughts: the beta-binomial pmf C(M, j) B(a + j, b + M − j) / B(a, b).
    Finite thoughts: Σ_t π_t C(M, j) v_t^j (1 − v_t)^(M − j).
    """
    j = np.arange(M + 1)
    if hasattr(params, "a"):
        return stats.betabinom.pmf(j, M, float(params.a), float(params.b))
    law = thought_law(params)
    return law.weights @ stats.binom.pmf(j[None, :], M, law.nodes[:, None])


def degenerate_prob(params, K: int, M: int) -> float:
    """P(all K thought values V̂_k are equal) = Σ_j P(V̂ = j/M)^K (thoughts are iid)."""
    return float(np.sum(value_pmf(params, M) ** K))


# ----------------------------------------------------------------------------- thought laws


@dataclasses.dataclass(frozen=True)
class ThoughtLaw:
    """The distribution of a thought value p as a quadrature rule: E f(p) = Σ_i w_i f(x_i).

    Beta(a, b): 24-point Gauss–Jacobi (exact for polynomials of degree ≤ 47, which covers every
    moment used here); finite thoughts: the thought values with their policy probabilities.
    ``beta`` holds (a, b) for the Beta law (the finite-K exact formulas need it), else None.
    """

    nodes: np.ndarray
    weights: np.ndarray
    beta: tuple[float, float] | None = None

    def expect(self, f) -> float:
        return float(self.weights @ f(self.nodes))

    @property
    def mean(self) -> float:
        return self.expect(lambda p: p)

    @property
    def var(self) -> float:
        mu = self.mean
        return self.expect(lambda p: (p - mu) ** 2)

    @property
    def tau(self) -> float:
        """E[p(1 − p)]."""
        return self.expect(lambda p: p * (1 - p))


def beta_law(a: float, b: float, n: int = 24) -> ThoughtLaw:
    x, w = special.roots_jacobi(n, b - 1.0, a - 1.0)  # weight (1 − x)^(b−1) (1 + x)^(a−1)
    return ThoughtLaw((1.0 + x) / 2.0, w / w.sum(), (float(a), float(b)))


def thought_law(params) -> ThoughtLaw:
    """The law of p for ``BetaThoughts``, ``FiniteThoughts``, or a pair (a, b)."""
    if isinstance(params, tuple):
        return beta_law(*params)
    if hasattr(params, "a"):
        return beta_law(float(params.a), float(params.b))
    logits = np.asarray(params.logits, dtype=np.float64)
    pi = np.exp(logits - logits.max())
    return ThoughtLaw(np.asarray(params.values, dtype=np.float64), pi / pi.sum())


def beta_moments(a: float, b: float) -> tuple[float, float, float]:
    """(μ, σ², τ) = (E p, Var p, E[p(1 − p)]) of Beta(a, b); τ = (a + b) σ²."""
    mu = a / (a + b)
    var = a * b / ((a + b) ** 2 * (a + b + 1))
    return mu, var, (a + b) * var


def value_variance(law: ThoughtLaw, M: int) -> float:
    """Var V̂ = Var p + E[p(1 − p)]/M (Beta: σ²(1 + (a+b)/M), the beta-binomial variance / M²)."""
    return law.var + law.tau / M


# ----------------------------------------------------------------------------- K → ∞


def limit_scale_sq(law: ThoughtLaw, M: int, variant: str) -> float:
    """S∞²: the limit of the squared scale (thought-std: Var V̂; leaf-std: μ(1 − μ); else 1)."""
    if variant == "thought-std":
        return value_variance(law, M)
    if variant == "leaf-std":
        mu = law.mean
        return mu * (1 - mu)
    if variant == "mean-only":
        return 1.0
    raise ValueError(f"variant: got {variant!r}; allowed: {', '.join(VARIANTS)}")


def floor(law: ThoughtLaw, M: int, variant: str = "thought-std", eps: float = 0.0) -> float:
    """K → ∞ limit of E[Var(Â_k | p)] = (τ/M)/S∞² · (1 + eps/S∞)⁻² (exact).

    Beta, thought-std: (a+b)/(a+b+M); leaf-std: (a+b)/((a+b+1)M); mean-only: τ/M.
    """
    s2 = limit_scale_sq(law, M, variant)
    return law.tau / M / s2 * _eps_factor(s2, variant, eps)


def limit_corr(law: ThoughtLaw, M: int) -> float:
    """K → ∞ limit of Corr(Â_k, A_k) = sd(p)/sd(V̂); Beta: √(M/(M + a + b)) (every variant)."""
    return math.sqrt(law.var / value_variance(law, M))


def limit_mse(law: ThoughtLaw, M: int, variant: str = "thought-std", eps: float = 0.0) -> float:
    """K → ∞ limit of E[(Â_k − A_k)²] = v/S² − 2σ/S + 1 with S = S∞ + eps (S = 1 for mean-only).

    thought-std, eps = 0: 2(1 − corr∞).  Also the limit of ``mse_group``.
    """
    s = math.sqrt(limit_scale_sq(law, M, variant)) + (eps if variant != "mean-only" else 0.0)
    return value_variance(law, M) / s**2 - 2 * math.sqrt(law.var) / s + 1.0


def _eps_factor(s2: float, variant: str, eps: float) -> float:
    return 1.0 if variant == "mean-only" else (1.0 + eps / math.sqrt(s2)) ** -2


# ----------------------------------------------------------------------------- finite K


def _leaf_moments(M: int) -> tuple:
    """(w, k3, m4) of V̂ given p: variance p(1 − p)/M, third and fourth central moments."""

    def w(p):
        return p * (1 - p) / M

    def k3(p):
        return p * (1 - p) * (1 - 2 * p) / M**2

    def m4(p):
        return p * (1 - p) * (1 + 3 * (M - 2) * p * (1 - p)) / M**3

    return w, k3, m4


def _scale_terms(law: ThoughtLaw, K: int, M: int, variant: str, ddof: int, v: float, s2: float):
    """(ḡ, g, E[e h | p], E[e² h | p], E[h² | p]) of the std variant's scale fluctuation, with
    w, k3, m4 of :func:`_leaf_moments` (module docstring's O(1/K) expansion)."""
    mu = law.mean
    w, k3, m4 = _leaf_moments(M)
    if variant == "thought-std":  # h = 2(p − μ)e + e² − w
        return (
            (K - 1) / (K - ddof),
            lambda p: ((p - mu) ** 2 + w(p) - v) / v,
            lambda p: 2 * (p - mu) * w(p) + k3(p),
            lambda p: 2 * (p - mu) * k3(p) + m4(p) - w(p) ** 2,
            lambda p: 4 * (p - mu) ** 2 * w(p) + 4 * (p - mu) * k3(p) + m4(p) - w(p) ** 2,
        )
    # leaf-std: S² ≈ L(1 − L) N/(N − ddof), L = mean leaf, fluctuation (1 − 2μ)(L − μ)
    n, c = K * M, 1 - 2 * mu
    return (
        (s2 - v / K) * n / (n - ddof) / s2,
        lambda p: c * (p - mu) / s2,
        lambda p: c * w(p),
        lambda p: c * k3(p),
        lambda p: c**2 * w(p),
    )


def variance(
    law: ThoughtLaw,
    K: int,
    M: int,
    variant: str = "thought-std",
    ddof: int = 1,
    eps: float = 0.0,
    k_min: int = 16,
) -> float:
    """E[Var(Â_k | p)] at finite K: exact for mean-only ((1 − 1/K) τ/M), the O(1/K) expansion
    in the module docstring for the std variants (NaN for K < ``k_min``)."""
    w_mean = law.tau / M
    if variant == "mean-only":
        return (1 - 1 / K) * w_mean
    if K < k_min:
        return math.nan
    mu = law.mean
    v = law.var + w_mean
    s2 = limit_scale_sq(law, M, variant)
    w = _leaf_moments(M)[0]
    g_bar, g, eh, e2h, hh = _scale_terms(law, K, M, variant, ddof, v, s2)
    cov_wg = law.expect(lambda p: (w(p) - w_mean) * g(p))
    var_g = law.expect(lambda p: g(p) ** 2) - law.expect(g) ** 2
    t1 = w_mean * (1 - 1 / K) / g_bar - cov_wg / (K * g_bar**2) + w_mean * var_g / (K * g_bar**3)
    t2 = -law.expect(lambda p: (p - mu) * eh(p) + e2h(p)) / (K * s2)
    t3 = law.expect(hh) * (v / 4 + 3 * w_mean / 4) / (K * s2**2)
    return (t1 + t2 + t3) / s2 * _eps_factor(s2, variant, eps)


def sum_stats_pmf(pmf1: np.ndarray, K: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact joint pmf of (T1, T2) = (Σ_k S_k, Σ_k S_k²) for K iid S_k with pmf ``pmf1`` on 0..M.

    The K-fold 2-D convolution, by FFT on the (KM + 1) × (KM² + 1) grid (no wrap-around).
    Returns (t1, t2, prob) over the support (probabilities below 1e-15 dropped: FFT noise).
    """
    M = len(pmf1) - 1
    shape = (K * M + 1, K * M * M + 1)
    base = np.zeros(shape)
    s = np.arange(M + 1)
    base[s, s * s] = pmf1
    joint = np.fft.irfft2(np.fft.rfft2(base) ** K, s=shape)
    t1, t2 = np.nonzero(joint > 1e-15)
    prob = joint[t1, t2]
    return t1.astype(np.float64), t2.astype(np.float64), prob / prob.sum()


def _moments_exact(pmf1, K, M, variant, ddof, eps):
    """(E[Q/(S+eps)], E[Q/(S+eps)²]) over the exact joint pmf of the sums (Q in V̂ units)."""
    t1, t2, prob = sum_stats_pmf(pmf1, K)
    q = np.maximum(t2 - t1**2 / K, 0.0) / M**2
    q = np.where(q < 1e-12, 0.0, q)
    if variant == "thought-std":
        scale = np.sqrt(q / (K - ddof)) + eps
    elif variant == "leaf-std":
        n = K * M
        mean = t1 / n
        scale = np.sqrt(np.maximum(mean * (1 - mean), 0.0) * n / (n - ddof)) + eps
    else:
        scale = np.ones_like(q)
    safe = np.where(q > 0, scale, 1.0)
    return float(prob @ (q / safe)), float(prob @ (q / safe**2))


def _moments_delta(law, pmf1, K, M, variant, ddof, eps):
    """Large-K (delta method) versions of :func:`_moments_exact`; error O(1/K²)."""
    j = np.arange(M + 1) / M
    v = float(pmf1 @ (j - pmf1 @ j) ** 2)
    m4 = float(pmf1 @ (j - pmf1 @ j) ** 4)
    eq = (K - 1) * v
    if variant == "mean-only":
        return eq, eq
    if variant == "thought-std":
        var_q = (K - 1) ** 2 * (m4 / K - v**2 * (K - 3) / (K * (K - 1)))
        e_s = (math.sqrt(eq) - var_q / (8 * eq**1.5)) / math.sqrt(K - ddof)
        p_deg = float(np.sum(pmf1**K))
        e_q_s2 = (K - ddof) * (1 - p_deg) * (1 + eps / math.sqrt(v)) ** -2
        return (K - ddof) * e_s * (1 + eps / math.sqrt(v)) ** -1, e_q_s2
    s = math.sqrt(limit_scale_sq(law, M, variant) - v / K) + eps  # leaf std, fluctuation ignored
    return eq / s, eq / s**2


def advantage_moments(
    law: ThoughtLaw, K: int, M: int, variant: str = "thought-std", ddof: int = 1, eps: float = 0.0
) -> dict:
    """Exact (or, past :data:`EXACT_GRID`, delta-method) E[Â_k²], E[Â_k A_k], corr and mse.

    Needs a Beta law (the posterior mean of p given S_k is linear in S_k); returns NaNs for
    finite thoughts.  ``exact`` says which route was taken.
    """
    nan = dict(second=math.nan, cross=math.nan, corr=math.nan, mse=math.nan, exact=False)
    if law.beta is None:
        return nan
    a, b = law.beta
    pmf1 = stats.betabinom.pmf(np.arange(M + 1), M, a, b)
    exact = (K * M + 1) * (K * M * M + 1) <= EXACT_GRID
    if exact:
        e_qs, e_qs2 = _moments_exact(pmf1, K, M, variant, ddof, eps)
    else:
        e_qs, e_qs2 = _moments_delta(law, pmf1, K, M, variant, ddof, eps)
    second = e_qs2 / K
    cross = M * e_qs / (K * (a + b + M) * math.sqrt(law.var))
    corr = cross / math.sqrt(second) if second > 0 else math.nan
    return dict(second=second, cross=cross, corr=corr, mse=second - 2 * cross + 1, exact=exact)


def corr(law, K, M, variant="thought-std", ddof=1, eps=0.0) -> float:
    """Corr(Â_k, A_k) at finite K (see :func:`advantage_moments`)."""
    return advantage_moments(law, K, M, variant, ddof, eps)["corr"]


def mse(law, K, M, variant="thought-std", ddof=1, eps=0.0) -> float:
    """E[(Â_k − A_k)²] at finite K (see :func:`advantage_moments`)."""
    return advantage_moments(law, K, M, variant, ddof, eps)["mse"]


# ----------------------------------------------------------------------------- ranking splits
# A fixed leaf budget's splits (K, M) ranked by tokens per effective thought: read by the tree
# lab (its tables) and the tree figures (saved tables), so it lives below both.

TIE_Z = 1.959963984540054  # two splits whose scores differ by less than TIE_Z · SE are a tie


def score(corr, M, think_len: float, answer_len: float):
    """Tokens per effective thought, (L_think + M·L_answer)/corr² (lower is better; gpolab's
    derivation, not from [T]).

    A budget of T tokens buys N = T/(L_think + M·L_answer) thoughts (T/cost(K, M) trees of K).
    A thought-level policy gradient ĝ = (1/N) Σ_i Â_i s_i (s_i the score of thought i) is used up
    to its step size, so what matters is min_c E‖c ĝ − g‖².  Write Â = βA + r with
    β = Cov(Â, A)/Var A and r uncorrelated with A; assume (i) the scores of distinct thoughts are
    independent with E‖s‖² ≫ ‖E[s | p]‖² (the gradient is small next to the score noise) and
    (ii) r is uncorrelated with the score (exact when E[Â | p] is linear in p, e.g. K → ∞).
    Then ĝ/β is unbiased for g with variance E‖s‖² E[Â²]/(β² N) = E‖s‖² Var A/(corr² N), so

        min_c E‖c ĝ − g‖² ≈ E‖s‖² Var A · (L_think + M·L_answer) / (T corr²) ∝ score.

    Invariant to rescaling Â (corr is), and an always-zero advantage (corr 0) scores +∞.  A
    corr ≤ 0 or NaN scores +∞ / NaN."""
    corr = np.asarray(corr, np.float64)
    tokens = think_len + np.asarray(M, np.float64) * answer_len
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(corr > 0, tokens / corr**2, np.where(np.isnan(corr), np.nan, np.inf))


def rank(df):
    """Ranking columns of a budget table (one ranking per ``budget``):

    ``score_corr`` / ``score_source``: the exact theory_corr where the exact route exists
    (``theory_exact``), else the Monte Carlo corr; ``rescaled_mse`` = 1 − corr² (the MSE after
    the best rescaling of Â against the standardized target, Var A = 1: theory §11); ``score``
    (:func:`score`) with ``score_se`` = 2 score · SE(corr)/corr (0 for exact theory);
    ``recommended``: the lowest score, exactly one row per budget; ``tie``: another row whose score
    is within TIE_Z · √(SE² + SE_best²) of the best; ``distinguishable``: no row ties with the
    recommended one (the same value on every row of the budget; false when the budget has a
    single split, which has no runner-up).

    Finite model: ``grad_score`` = cost · V ‖g‖²/(E ĝ·g)², the policy gradient's analogue (gpolab's
    derivation): n = T/cost independent trees averaged have E = E ĝ and tr Cov = V/n, so the
    squared correlation of the best rescaling with g, (E ĝ·g)²/(‖g‖²(‖E ĝ‖² + V/n)), grows like
    T/grad_score while V/n ≫ ‖E ĝ‖² (lower is better; reported, not ranked on; no SE)."""
    exact = df["theory_exact"].astype(bool) & df["theory_corr"].notna()
    rho = np.where(exact, df["theory_corr"], df["corr"]).astype(np.float64)
    rho_se = np.where(exact, 0.0, df["corr_se"]).astype(np.float64)
    sc = score(rho, df["M"], df["think_len"].to_numpy(), df["answer_len"].to_numpy())
    with np.errstate(invalid="ignore"):
        sc_se = np.where(np.isfinite(sc), 2 * sc * rho_se / np.abs(rho), np.nan)
    df = df.assign(
        score_corr=rho,
        score_source=np.where(exact, "exact", "monte carlo"),
        rescaled_mse=1 - rho**2,
        score=sc,
        score_se=sc_se,
    )
    if "grad_dot" in df:
        df = df.assign(
            grad_score=df["cost"] * df["grad_variance"] * df["grad_norm2"] / df["grad_dot"] ** 2
        )
    return flag(df)


def flag(df):
    """``recommended``, ``tie``, ``distinguishable`` (see :func:`rank`) from the ``score`` and
    ``score_se`` columns, one ranking per ``budget``."""
    import pandas as pd  # deferred: pandas (the closed forms above need numpy and scipy only)

    parts = [_flags(group) for _, group in df.groupby("budget", sort=False)]
    flags = pd.concat(parts).reindex(df.index)
    return df.assign(**{c: flags[c].astype(bool) for c in flags})


def _flags(group):
    """recommended / tie / distinguishable of one budget's rows (see :func:`rank`)."""
    import pandas as pd  # deferred: pandas, as in rank

    sc = group["score"].to_numpy(np.float64)
    se = np.nan_to_num(group["score_se"].to_numpy(np.float64))
    finite = np.where(np.isnan(sc), np.inf, sc)
    best = int(np.argmin(finite))
    gap = np.abs(sc - sc[best])
    noise = TIE_Z * np.sqrt(se**2 + se[best] ** 2) + 1e-9 * abs(sc[best])
    tie = (gap <= noise) & (np.arange(len(sc)) != best)
    rec = np.arange(len(sc)) == best
    alone = len(sc) == 1  # one split only: nothing to be distinguishable from
    return pd.DataFrame(
        {"recommended": rec, "tie": tie, "distinguishable": not alone and not tie.any()},
        index=group.index,
    )


def recommend(df) -> dict:
    """The recommended split of a ranked budget table (:func:`rank`; ranked here if it is not)
    with its score, the runner-up and whether the two are distinguishable."""
    if "recommended" not in df:
        df = rank(df)
    best = df.loc[df["recommended"]].iloc[0]
    others = df.loc[~df["recommended"]].sort_values("score")
    runner = others.iloc[0] if len(others) else best
    top = df.loc[df["score_corr"].idxmax()]
    return dict(
        K=int(best["K"]),
        M=int(best["M"]),
        score=float(best["score"]),
        score_se=float(best["score_se"]),
        corr=float(best["score_corr"]),
        source=str(best["score_source"]),
        rescaled_mse=float(best["rescaled_mse"]),
        degenerate_frac=float(best["degenerate_frac"]),
        theory_degenerate_frac=float(best["theory_degenerate_frac"]),
        distinguishable=bool(best["distinguishable"]),
        candidates=len(df),
        runner_up_K=int(runner["K"]),
        runner_up_M=int(runner["M"]),
        runner_up_score=float(runner["score"]),
        runner_up_se=float(runner["score_se"]),
        ties=[(int(r["K"]), int(r["M"])) for _, r in df.loc[df["tie"]].iterrows()],
        top_corr_K=int(top["K"]),
        top_corr_M=int(top["M"]),
        top_corr=float(top["score_corr"]),
    )
