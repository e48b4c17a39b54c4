"""Per-prompt rollout allocation: the exact MSE of a step whose prompts get different group sizes,
and the allocation that minimizes it (theory §12; the derivations are gpolab's).

A step keeps prompts x with weights f_x and gives prompt x a group of G_x responses; its estimate
is ĝ = Σ_x f_x ĝ_x(G_x) against the exact g = Σ_x f_x g_x.  When prompts move disjoint parameter
blocks (the tabular bandit) the errors of different prompts are orthogonal, so

    MSE(ĝ) = Σ_x f_x² MSE_x(G_x),

with MSE_x(G) the exact finite-G MSE of any reward-only estimator (:mod:`gpolab.theory.exact`,
§8) and MSE_x(G) = ‖g_x‖² for G < 2 (a prompt left out, or a lone response with no baseline,
contributes nothing: its whole gradient is missing, a bias).  For loo, MSE_x(G) = a_x/G +
b_x/(G(G − 1)) is convex and decreasing in G ≥ 2, so giving the next rollout where f_x²[MSE_x(G_x)
− MSE_x(G_x + 1)] is largest is exact (:func:`greedy`); :func:`is_convex` says when a curve
is not, and the greedy is then only a heuristic (reported, not hidden).

What a trainer knows is rewards, not ‖g_x‖²: :func:`posterior_curves` is the reward-only version.
With a response's score norm independent of its reward (E‖W‖² = 1 after scaling, e_wz2 = p) and
a signal share ‖g_x‖² = ρ p(1 − p), every term of §8 is a polynomial in p, so its expectation
under a Beta(α, β) posterior is exact through E[p^i (1 − p)^j] = B(α + i, β + j)/B(α, β).
For loo, MSE_x(G) = σ²_x [(1 − ρ)/G + (1 + ρ)/(G(G − 1))]; at ρ = 0, σ²_x/(G − 1), whose
minimizer under a budget is G_x − 1 ∝ σ_x = √(p_x(1 − p_x)).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from scipy.special import gammaln

from gpolab.theory import exact

__all__ = [
    "tables",
    "curves",
    "all_curves",
    "sampled_design",
    "Design",
    "uniform_design",
    "posterior_curves",
    "is_convex",
    "greedy",
    "lagrangian",
    "step_mse",
    "matching_budget",
]


@functools.lru_cache(maxsize=64)
def tables(spec: str, g_max: int, **shared) -> tuple[np.ndarray, np.ndarray, tuple]:
    """Count tables of ``spec`` at every G = 0..``g_max``, padded: a1, a0 of shape (g_max + 1,
    g_max) (row G holds f(1, s), f(0, s) for s < G; rows 0 and 1 are zero: no estimate) and the
    reason per G where the estimator has no table ('' where it has).  ``shared``: the lab's
    common estimator options."""
    a1 = np.zeros((g_max + 1, max(g_max, 1)))
    a0 = np.zeros_like(a1)
    reasons = [""] * (g_max + 1)
    for G in range(2, g_max + 1):
        t = exact.registry_table(spec, G, strict=False, **shared)
        if not t.ok:
            reasons[G] = t.reason
            a1[G, :G] = a0[G, :G] = np.nan
            continue
        a1[G, :G], a0[G, :G] = t.a1, t.a0
    return a1, a0, tuple(reasons)


def curves(a1, a0, p, gsq, S2, e_wz2, what: str = "mse") -> np.ndarray:
    """(P, g_max + 1) exact MSE_x(G) of every prompt at G = 0..g_max from its exact moments
    (shape (P,) each; §8 via :func:`gpolab.theory.exact.moments`); ‖g_x‖² at G < 2.
    ``what="second_moment"``: E‖ĝ_x‖² instead (0 at G < 2); ``"kappa"``: κ_G(p_x)."""
    return all_curves(a1, a0, p, gsq, S2, e_wz2)[what]


def _next_pmf(pmf: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Bin(n + 1, p) probabilities (..., n + 2) from Bin(n, p)'s (..., n + 1): b[s] = (1 − p)
    a[s] + p a[s − 1], sums of non-negative terms (exact at p = 0 and 1)."""
    q = p[..., None]
    out = np.zeros(pmf.shape[:-1] + (pmf.shape[-1] + 1,))
    out[..., :-1] = (1 - q) * pmf
    out[..., 1:] += q * pmf
    return out


def all_curves(a1, a0, p, gsq, S2, e_wz2) -> dict:
    """``mse``, ``second_moment`` and ``kappa`` curves of :func:`curves` in one pass: the §8
    moments of :func:`gpolab.theory.exact.moments` for every G, with the binomial weights
    computed once per G."""
    p, gsq, S2, e_wz2 = (np.asarray(v, np.float64) for v in (p, gsq, S2, e_wz2))
    shape = np.broadcast_shapes(p.shape, gsq.shape, S2.shape, e_wz2.shape) + (a1.shape[0],)
    kap, second = np.zeros(shape), np.zeros(shape)
    pmf = np.ones(p.shape + (1,))  # Bin(G − 2, p), then Bin(G − 1, p): one step each G
    for G in range(2, a1.shape[0]):
        t1, t0 = a1[G, :G], a0[G, :G]
        both = t1[1:] ** 2 + t0[:-1] ** 2 - 2 * t1[:-1] * t0[1:]
        pair = pmf @ both
        pmf = _next_pmf(pmf, p)
        kap[..., G] = pmf @ (t1 - t0)
        diag = e_wz2 * (pmf @ t1**2) + (S2 - e_wz2) * (pmf @ t0**2)
        second[..., G] = diag / G + (G - 1) / G * gsq * pair
    mse = second - 2 * kap * gsq[..., None] + gsq[..., None]
    mse[..., :2] = gsq[..., None]
    return {"mse": mse, "second_moment": second, "kappa": kap}


def sampled_design(second, kappa, gsq, f, budget: float, iters: int = 80) -> Design:
    """The unbiased design of theory §12 (gpolab's): include prompt x with probability π_x, give
    it G_x responses, weight its estimate by 1/π_x (Horvitz–Thompson).  Its exact MSE is

        Σ_x f_x² [E‖ĝ_x(G_x)‖²/π_x − 2κ_x‖g_x‖² + ‖g_x‖²]   for expected rollouts Σ_x π_x G_x,

    separable, so for a multiplier λ each prompt takes the cheaper of (a) π_x < 1 at its own
    G*_x = argmin_G G·E‖ĝ_x(G)‖² (independent of λ: the per-prompt group size) with π_x =
    √(f_x² E‖ĝ_x(G*_x)‖²/(λ G*_x)), and (b) π_x = 1 with G_x = argmin f_x² MSE_x(G) + λG (each
    with its κ term: constant in G for loo, not for grpo); λ is bisected (geometrically) to the
    budget.  At that λ one prompt's choice jumps (a switch between (a) and (b), or between two G
    in (b)), so neither side of the jump spends the budget: the design takes the side above it
    (``alt``) with probability q and the side below with 1 − q, q chosen so that the expected
    rollouts equal ``budget`` exactly (the randomized Lagrangian: the optimum on each prompt's
    lower convex hull).  A design contains the keep-all optimum (π = 1, the :func:`greedy` sizes
    on the exact MSE curves, Σ G_x = ``budget``): where that is feasible and has the lower exact
    MSE, or where the design cannot spend the budget (an MSE curve rising in G), it is returned
    instead, so the design never loses to it.  ``second``, ``kappa``: (..., P, g_max + 1) from
    :func:`all_curves`; ``gsq`` = ‖g_x‖² (..., P)."""
    second, kappa, gsq = (np.asarray(x, np.float64) for x in (second, kappa, gsq))
    G = np.arange(second.shape[-1])
    valid = G >= 2
    w2 = np.asarray(f, np.float64) ** 2
    m2 = w2[:, None] * second
    full = w2[:, None] * (second - 2 * kappa * gsq[..., None] + gsq[..., None])  # f² MSE_x(G)
    g_star = np.argmin(np.where(valid, G * m2, np.inf), -1)
    m_star, rest_a = _at(m2, g_star), _at(full - m2, g_star)  # rest_a: (a)'s κ terms

    design = functools.partial(_choose, full=full, g_star=g_star, m_star=m_star, rest_a=rest_a)
    (pi, size), (alt_pi, alt_size) = _bisect(design, budget, second.shape[:-2], iters)
    below, above = np.sum(pi * size, -1), np.sum(alt_pi * alt_size, -1)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.clip(np.where(above > below, (budget - below) / (above - below), 0.0), 0.0, 1.0)

    def mse_of(pi, size):
        return np.sum(w2 * (_at(second, size) / pi - 2 * _at(kappa, size) * gsq + gsq), -1)

    mse = (1 - q) * mse_of(pi, size) + q * mse_of(alt_pi, alt_size)
    d = Design(pi, size, mse, alt_pi, alt_size, q)
    P, top = second.shape[-2], second.shape[-1] - 1
    if float(budget).is_integer() and 2 * P <= budget <= top * P:
        keep = greedy(np.where(valid, full, 0.0), np.ones(P), int(budget))
        short = (1 - q) * below + q * above < budget * (1 - 1e-12)
        d = _or_keep_all(d, keep, np.sum(_at(full, keep), -1), short)
    return d


def _choose(lam, *, full, g_star, m_star, rest_a) -> tuple[np.ndarray, np.ndarray]:
    """Each prompt's cheaper choice at multiplier λ (:func:`sampled_design`): (a) π_x < 1 at
    G*_x or (b) π_x = 1 at argmin f_x² MSE_x(G) + λG; returns (π, G), (..., P) each."""
    lam = lam[..., None]
    G = np.arange(full.shape[-1])
    with np.errstate(divide="ignore", invalid="ignore"):
        pa = np.sqrt(m_star / (lam * g_star))
    cost_a = np.where(pa <= 1, 2 * np.sqrt(lam * g_star * m_star) + rest_a, np.inf)
    gb = np.argmin(np.where(G >= 2, full + lam[..., None] * G, np.inf), -1)
    use_a = cost_a < _at(full, gb) + lam * gb
    return np.where(use_a, pa, 1.0), np.where(use_a, g_star, gb)


def _at(curve: np.ndarray, G: np.ndarray) -> np.ndarray:
    """Each prompt's curve (..., P, g_max + 1) at its size G (..., P)."""
    return np.take_along_axis(curve, G[..., None], -1)[..., 0]


def _bisect(design, budget: float, shape: tuple, iters: int) -> tuple:
    """The designs at the two ends of the multiplier λ's bracket after ``iters`` geometric
    bisections on the expected rollouts Σ π G against ``budget``: (below it, above it)."""
    lo, hi = np.full(shape, 1e-30), np.full(shape, 1e30)
    for _ in range(iters):
        mid = np.sqrt(lo * hi)
        pi, size = design(mid)
        over = np.sum(pi * size, -1) > budget
        lo, hi = np.where(over, mid, lo), np.where(over, hi, mid)
    return design(hi), design(lo)


def _or_keep_all(d: Design, keep: np.ndarray, keep_mse: np.ndarray, short: np.ndarray) -> Design:
    """The keep-all design (π = 1, sizes ``keep``) where its exact MSE is lower than ``d``'s or
    where ``d`` cannot spend the budget (``short``), else ``d``."""
    better = (keep_mse < d.mse) | short
    pi, alt_pi = (np.where(better[..., None], 1.0, x) for x in (d.pi, d.alt_pi))
    size, alt_size = (np.where(better[..., None], keep, x) for x in (d.size, d.alt_size))
    mse, q = np.where(better, keep_mse, d.mse), np.where(better, 0.0, d.q)
    return Design(pi, size, mse, alt_pi, alt_size, q)


class Design(NamedTuple):
    """A sampled design (:func:`sampled_design`): with probability 1 − q (one draw per step for
    every prompt at once) prompt x is drawn with probability π_x and gets G_x responses, with
    probability q π'_x and G'_x (``alt_pi``, ``alt_size``); a drawn prompt's estimate is weighted
    1/π.  ``mse``: the exact MSE over both draws; π, G: (..., P), ``mse`` and q: (...)."""

    pi: np.ndarray
    size: np.ndarray
    mse: np.ndarray
    alt_pi: np.ndarray
    alt_size: np.ndarray
    q: np.ndarray

    def rollouts(self) -> np.ndarray:
        """The expected rollouts, Σ_x π_x G_x mixed over the two sides."""
        return (1 - self.q) * np.sum(self.pi * self.size, -1) + self.q * np.sum(
            self.alt_pi * self.alt_size, -1
        )


def uniform_design(second, kappa, gsq, f, budget: int) -> tuple[int, int, float]:
    """Uniform G*: B prompts drawn without replacement, G = ⌊budget/B⌋ each, every estimate
    weighted by P/B (unbiased for loo), with the (B, G) of least exact MSE, Σ_x f_x² [E‖ĝ_x(G)‖²
    P/B − 2κ_x‖g_x‖² + ‖g_x‖²] (only inclusion probabilities matter: the prompts' blocks are
    disjoint).  This is the sweep's and ``gpolab groupsize``'s G* question on this batch.
    Returns (B, G, exact MSE)."""
    second, kappa = np.asarray(second, np.float64), np.asarray(kappa, np.float64)
    P = second.shape[-2]
    w2 = np.asarray(f, np.float64) ** 2
    best = (P, budget // P, np.inf)
    for B in range(1, P + 1):
        G = budget // B
        if G < 2 or G >= second.shape[-1]:
            continue
        mse = float(np.sum(w2 * (second[:, G] * P / B - 2 * kappa[:, G] * gsq + gsq)))
        if mse < best[2]:
            best = (B, G, mse)
    return best


class _BetaBinomial:
    """E[p^i (1 − p)^j C(n, s) p^s (1 − p)^(n − s)], s = 0..n, under p ~ Beta(α, β) for every
    n + i + j ≤ ``top``: C(n, s) B(α + s + i, β + n − s + j)/B(α, β) from tables of log Γ(α + k),
    log Γ(β + k) and log Γ(α + β + k) built once (scipy's betaln per term took 40 s of a quick
    allocate run; the two agree to ~1e-11 relative)."""

    def __init__(self, alpha: np.ndarray, beta: np.ndarray, top: int):
        k = np.arange(top + 1)
        self.la, self.lb = gammaln(alpha[..., None] + k), gammaln(beta[..., None] + k)
        self.lab = gammaln((alpha + beta)[..., None] + k)
        self.norm = (self.lab[..., 0] - self.la[..., 0] - self.lb[..., 0])[..., None]

    def __call__(self, n: int, i: int, j: int) -> np.ndarray:
        """(..., n + 1) the expectations above."""
        s = np.arange(n + 1)
        log_c = gammaln(n + 1) - gammaln(s + 1) - gammaln(n - s + 1)
        log_b = self.la[..., s + i] + self.lb[..., n - s + j] - self.lab[..., n + i + j, None]
        return np.exp(log_c + log_b + self.norm)


def posterior_curves(a1, a0, alpha, beta, rho: float = 0.0) -> np.ndarray:
    """(..., g_max + 1) E[MSE_x(G)] under p_x ~ Beta(α_x, β_x) with the reward-only moments of
    the module docstring (E‖W‖² = 1, e_wz2 = p, ‖g_x‖² = ρ p(1 − p)); exact (every term is a
    polynomial in p).  Only ratios across prompts matter to an allocation."""
    alpha, beta = np.asarray(alpha, np.float64), np.asarray(beta, np.float64)
    moment = _BetaBinomial(alpha, beta, a1.shape[0])
    s1 = moment(0, 1, 1)[..., 0]  # E p(1 − p)
    out = np.empty(alpha.shape + (a1.shape[0],))
    out[..., :2] = (rho * s1)[..., None]
    for G in range(2, a1.shape[0]):
        t1, t0 = a1[G, :G], a0[G, :G]
        diag = (moment(G - 1, 1, 0) @ t1**2 + moment(G - 1, 0, 1) @ t0**2) / G
        both = t1[1:] ** 2 + t0[:-1] ** 2 - 2 * t1[:-1] * t0[1:]
        cross = (G - 1) / G * rho * (moment(G - 2, 1, 1) @ both)
        kappa_gsq = rho * (moment(G - 1, 1, 1) @ (t1 - t0))
        out[..., G] = diag + cross - 2 * kappa_gsq + rho * s1
    return out


def is_convex(curve: np.ndarray, g_min: int = 2) -> bool:
    """Whether every curve's marginal gains MSE(G) − MSE(G + 1) are non-increasing from
    ``g_min`` on (then :func:`greedy` is exact), up to 1e-12 relative."""
    gains = -np.diff(curve[..., g_min:], axis=-1)
    return bool(np.all(np.diff(gains, axis=-1) <= 1e-12 * (np.abs(gains[..., :-1]) + 1e-300)))


def greedy(curve: np.ndarray, weights: np.ndarray, budget: int, g_min: int = 2) -> np.ndarray:
    """(..., P) group sizes minimizing Σ_x w_x curve[x, G_x] with Σ_x G_x = ``budget`` and
    ``g_min`` ≤ G_x ≤ g_max: every prompt starts at ``g_min`` and the remaining rollouts go to
    the largest marginal gains (exact for convex curves; ties go to the lower prompt index).
    ``curve``: (..., P, g_max + 1); ``weights``: (P,) or (..., P)."""
    curve = np.asarray(curve, np.float64)
    P, top = curve.shape[-2], curve.shape[-1] - 1
    extra = budget - g_min * P
    if extra < 0 or budget > top * P:
        raise ValueError(f"budget {budget} outside [{g_min * P}, {top * P}] for {P} prompts")
    gains = -np.diff(curve[..., g_min:], axis=-1) * np.asarray(weights)[..., None]
    flat = gains.reshape(gains.shape[:-2] + (-1,))
    if extra == 0:
        return np.full(curve.shape[:-1], g_min, np.int64)
    # stable order: largest gain first, ties by prompt then G (a prefix of each prompt's gains
    # when they are non-increasing)
    order = np.argsort(-flat, axis=-1, kind="stable")[..., :extra]
    chosen = np.zeros(flat.shape, bool)
    np.put_along_axis(chosen, order, True, axis=-1)
    return g_min + chosen.reshape(gains.shape).sum(-1)


def lagrangian(curve: np.ndarray, weights: np.ndarray, budget: int, iters: int = 60) -> np.ndarray:
    """(..., P) group sizes in {0} ∪ [2, g_max] minimizing Σ_x w_x curve[x, G_x] with Σ_x G_x ≤
    ``budget``: each prompt takes argmin_G w_x curve[x, G] + λG, λ bisected until the budget
    holds, then the leftover rollouts go one at a time to the kept prompts with the largest
    marginal gains.  Optimal among allocations on the curves' lower convex hulls (the classical
    Lagrangian bound); off it by at most one prompt's rounding.  G = 0 drops a prompt: its whole
    gradient is missing (curve[x, 0] = ‖g_x‖²), which the MSE may prefer to a noisy group."""
    curve = np.asarray(curve, np.float64)
    w = np.asarray(weights)[..., None] * curve
    G = np.arange(curve.shape[-1])
    w = np.where(G == 1, np.inf, w)  # a lone response has no baseline: never chosen
    lo = np.zeros(curve.shape[:-2] + (1, 1))
    hi = np.full_like(lo, np.nanmax(np.abs(w[np.isfinite(w)])) + 1.0)

    def pick(lam):
        return np.argmin(w + lam * G, axis=-1)

    for _ in range(iters):
        mid = (lo + hi) / 2
        over = pick(mid).sum(-1, keepdims=True)[..., None] > budget
        lo, hi = np.where(over, mid, lo), np.where(over, hi, mid)
    out = pick(hi)
    left = budget - out.sum(-1)
    for _ in range(int(left.max(initial=0))):
        nxt = np.minimum(out + 1, G[-1])
        here = np.take_along_axis(w, out[..., None], -1)[..., 0]
        gain = here - np.take_along_axis(w, nxt[..., None], -1)[..., 0]
        gain = np.where((out >= 2) & (nxt > out), gain, -np.inf)
        best = np.argmax(gain, axis=-1)
        add = (left > 0) & np.isfinite(np.max(gain, axis=-1))
        np.put_along_axis(
            out,
            best[..., None],
            np.take_along_axis(out, best[..., None], -1) + add[..., None],
            axis=-1,
        )
        left = left - add
    return out


def step_mse(curve: np.ndarray, weights: np.ndarray, G: np.ndarray) -> np.ndarray:
    """Σ_x w_x curve[x, G_x] for allocations G (..., P) (w = f²: the step's exact MSE)."""
    G = np.asarray(G)
    picked = np.take_along_axis(
        np.broadcast_to(curve, G.shape + curve.shape[-1:]), G[..., None], axis=-1
    )[..., 0]
    return np.sum(np.asarray(weights) * picked, axis=-1)


def matching_budget(rollouts, mse, target: float) -> float:
    """The rollouts at which a curve (increasing ``rollouts``, its ``mse``) reaches ``target``,
    by log-log interpolation; NaN when the curve never gets that low or starts below it (the
    match is outside what was measured)."""
    r, m = np.asarray(rollouts, float), np.asarray(mse, float)
    ok = (r > 0) & (m > 0) & np.isfinite(m)
    r, m = np.log(np.where(ok, r, 1.0)), np.log(np.where(ok, m, 1.0))
    r, m = r[ok], m[ok]
    if len(r) == 0 or target <= 0 or not np.isfinite(target):
        return float("nan")
    t = np.log(target)
    if m[0] <= t:
        return float(np.exp(r[0])) if m[0] == t else float("nan")
    for i in range(1, len(r)):
        if m[i] <= t:
            frac = (m[i - 1] - t) / (m[i - 1] - m[i])
            return float(np.exp(r[i - 1] + frac * (r[i] - r[i - 1])))
    return float("nan")
