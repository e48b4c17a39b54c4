"""G* for the estimator a run trains with, not only loo's (gpolab's derivation; ``gpolab plan``).

:mod:`gpolab.theory.gstar` recovers from a run's log the constants of the leave-one-out
estimator's MSE law: c1 (the prompts' gradient variance), ‖g‖², s = E_X[E q σ²] and
a = E_X E[q (Z − V)²] (q = ‖W‖² = ‖∇ log π(y|x)‖²).  A trainer runs another estimator
(TRL's std-normalized ``trl/grpo``, verl's ``verl/grpo``, …) whose per-prompt moments are exact
functions of (G, p, ‖g_x‖², q0, q1) for any reward-only estimator (theory §8: its count table).
What the log does not give is how ‖g_x‖², q and the direction of g_x vary with the prompt.  The
**transfer model** (gpolab's; its assumptions are the price of an answer) fills that in:

* p = V(X) ~ Beta(α, β), the log's difficulty fit;
* g_x = √(p(1 − p)) v_x with v_x independent of p, E v = μ, E‖v − μ‖² = τ²
  (‖g_x‖² ∝ p(1 − p), the scale Cauchy–Schwarz bounds it by: ‖g_x‖² ≤ S2 p(1 − p));
* E[q | X, Z = z] = q_z, the same for every prompt.

Its four parameters are set by the log's constants: with K0 = E√(p(1 − p)) and E_pq = E p(1 − p),
‖g‖² = K0² ‖μ‖² and E‖g_X‖² = c1 + ‖g‖² = E_pq (‖μ‖² + τ²) give ‖μ‖² and τ² (τ² = 0 when c1 is
below what the model allows: said in ``notes``); s = q1 u + q0 w and a = q1 w + q0 u
(u = E p²(1 − p), w = E p(1 − p)²) give q1, q0 (when that solve is ill-posed or not positive,
q1 = q0 = s/E_pq, which still matches s).  Then loo's model constants are exactly the log's c1
and C3 = s + c1 + ‖g‖², so loo's G* through the model is the log's 1 + √(C3/c1) (tested).

For an estimator with count table (a1, a0) at G, κ_G(p) = E a1(S) − E a0(S) (S ~ Bin(G − 1, p)),
and with B = N/G prompts per step of N responses (all Beta averages in closed form, betaln):

    E ĝ      = K1 μ,          K1 = E[κ_G(p) √(p(1 − p))],    g = K0 μ
    E‖ĝ_X‖²  = M2 = (q1 E[p E a1²] + q0 E[(1 − p) E a0²])/G + (G − 1)/G · (‖μ‖² + τ²) X
    X        = E[p(1 − p) (E a1(1 + S′)² + E a0(S′)² − 2 E a1(S′) a0(1 + S′))],  S′ ~ Bin(G − 2, p)
    E‖ĝ_B‖²  = M2/B + (1 − 1/B) K1² ‖μ‖²

Two targets, both relative to ‖g‖²:

* ``rescaled`` (the one G* optimizes, through ``nsr`` = V_B/K1², which has the same minimiser
  and keeps one as ‖g‖² → 0, where a log often leaves ‖g‖²): the MSE after the best step-size
  rescaling,
  1 − (E ĝ·g)²/(‖g‖² E‖ĝ_B‖²) = V_B/(V_B + K1²‖μ‖²), V_B = (M2 − K1²‖μ‖²)/B: noise against the
  estimator's own mean, the SNR at equal rollouts.  A step size absorbs any constant scale (std
  normalization's κ ≈ 1/σ), so this is the target a tuned run sees.  For loo it is a monotone
  function of loo's MSE: the same G*.  Its minimiser does not depend on N (N only scales V_B).
* ``mse``: E‖ĝ_B − g‖²/‖g‖² = (K1/K0 − 1)² + V_B/(K0²‖μ‖²): MSE against g itself.  For a
  std-normalized estimator the scale bias (K1 ≠ K0) does not fall with B, so its minimiser
  depends on N and says more about the scale than about the gradient's quality.

Under the model std normalization changes the gradient's scale and its noise (it weights a
prompt by κ_G(p)), not its mean direction (v is independent of p): the direction effect the zoo
and stdnorm labs measure on the surrogates (κ-weighted prompts pointing elsewhere) is outside it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy.special import betaln, gammaln

from gpolab import validate
from gpolab.theory import exact
from gpolab.theory.gstar import GRID, excess, least_worst, region


@dataclasses.dataclass(frozen=True)
class Terms:
    """Beta averages of one estimator's count tables, one entry per G of ``G``."""

    G: np.ndarray
    K1: np.ndarray  # E[κ_G(p) √(p(1 − p))]
    D1: np.ndarray  # E[p E a1(S)²]
    D0: np.ndarray  # E[(1 − p) E a0(S)²]
    X: np.ndarray  # E[p(1 − p) cross_G(p)]


@dataclasses.dataclass(frozen=True)
class Model:
    """The transfer model's parameters (module docstring)."""

    alpha: float
    beta: float
    mu_sq: float  # ‖μ‖²
    nu: float  # ‖μ‖² + τ²
    q1: float
    q0: float
    notes: tuple[str, ...] = ()

    @property
    def K0(self) -> float:
        return float(np.exp(_beta_ratio(self.alpha, self.beta, 0.5, 0.5)))


def _beta_ratio(alpha, beta, e1, e0):
    """log E[p^e1 (1 − p)^e0] under Beta(α, β)."""
    return betaln(alpha + e1, beta + e0) - betaln(alpha, beta)


def _binomial_moments(alpha: float, beta: float, n: int, e1: float, e0: float) -> np.ndarray:
    """(n + 1,) E[C(n, k) p^(k + e1) (1 − p)^(n − k + e0)], k = 0..n, p ~ Beta(α, β)."""
    k = np.arange(n + 1)
    log_c = gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)
    return np.exp(log_c + _beta_ratio(alpha, beta, k + e1, n - k + e0))


def terms(table: exact.Table, alpha: float, beta: float) -> tuple[float, float, float, float]:
    """(K1, D1, D0, X) of one count table (module docstring), in closed form."""
    G, a1, a0 = table.G, np.asarray(table.a1, np.float64), np.asarray(table.a0, np.float64)
    K1 = float((a1 - a0) @ _binomial_moments(alpha, beta, G - 1, 0.5, 0.5))
    D1 = float(a1**2 @ _binomial_moments(alpha, beta, G - 1, 1.0, 0.0))
    D0 = float(a0**2 @ _binomial_moments(alpha, beta, G - 1, 0.0, 1.0))
    both = a1[1:] ** 2 + a0[:-1] ** 2 - 2 * a1[:-1] * a0[1:]
    X = float(both @ _binomial_moments(alpha, beta, G - 2, 1.0, 1.0)) if G >= 2 else 0.0
    return K1, D1, D0, X


def estimator_terms(spec, alpha: float, beta: float, grid=GRID) -> Terms:
    """:class:`Terms` of the registry estimator ``spec`` at every G of ``grid`` it is defined
    for (count tables: :func:`gpolab.theory.exact.registry_table`, raising for an estimator
    without one)."""
    from gpolab import estimators  # deferred: jax

    Gs = [G for G in grid if G >= max(2, estimators.minimum_G(spec))]
    rows = [terms(exact.registry_table(spec, G), alpha, beta) for G in Gs]
    K1, D1, D0, X = (np.array(c) for c in zip(*rows, strict=True))
    return Terms(np.array(Gs), K1, D1, D0, X)


def fit(c1: float, g_sq: float, s: float, a: float, alpha: float, beta: float) -> Model | str:
    """The transfer model set by the log's constants, or why it cannot be (a str)."""
    for name, v in (("c1", c1), ("g_sq", g_sq), ("s", s), ("a", a)):
        if not np.isfinite(v):
            return f"{name} = {v} is not finite"
    if not (alpha > 0 and beta > 0):
        return f"the difficulty fit Beta({alpha:.3g}, {beta:.3g}) is not proper"
    if s <= 0:
        return f"s = {s:.3g} is not above 0: no reward variance within the groups"
    K0 = np.exp(_beta_ratio(alpha, beta, 0.5, 0.5))
    e_pq = np.exp(_beta_ratio(alpha, beta, 1.0, 1.0))
    notes = []
    if g_sq <= 0:  # the rescaled target's minimiser has a limit as ‖g‖² → 0 (criteria)
        notes.append(f"‖g‖² = {g_sq:.3g} is not above 0: taken as 0 (the mean gradient is small)")
        g_sq = 0.0
    mu_sq = g_sq / K0**2
    nu = max(c1 + g_sq, 0.0) / e_pq
    if nu < mu_sq:
        notes.append(
            f"c1 = {c1:.3g} is below the model's floor ‖g‖²(E p(1−p)/(E√(p(1−p)))² − 1) = "
            f"{mu_sq * e_pq - g_sq:.3g}: the prompts' gradients are taken as parallel (τ² = 0)"
        )
        nu = mu_sq
    u = np.exp(_beta_ratio(alpha, beta, 2.0, 1.0))
    w = np.exp(_beta_ratio(alpha, beta, 1.0, 2.0))
    det = u * u - w * w
    q1 = q0 = -1.0
    if abs(det) > 1e-6 * (u + w) ** 2:
        q1, q0 = (s * u - a * w) / det, (a * u - s * w) / det
    if not (q1 > 0 and q0 > 0):
        q1 = q0 = s / e_pq
        notes.append("q1 = q0 = s/E p(1−p) (the score norm taken as independent of the reward)")
    return Model(
        float(alpha), float(beta), float(mu_sq), float(nu), float(q1), float(q0), tuple(notes)
    )


def criteria(t: Terms, m: Model, N: float) -> dict[str, np.ndarray]:
    """Per G of ``t`` at N responses per step: ``rescaled`` and ``mse`` (module docstring, both
    relative to ‖g‖²; NaN when ‖g‖² = 0), ``scale`` = K1/K0 (E ĝ = scale · g), ``noise`` =
    V_B/‖g‖² and ``nsr`` = V_B/K1², the noise over the estimator's squared mean scale:
    ``rescaled`` = nsr/(nsr + ‖μ‖²) is increasing in it, so both have one minimiser, and nsr's
    is defined at ‖g‖² = 0 too (loo's is then the law's with c1 = E‖g_X‖²)."""
    G = t.G.astype(np.float64)
    M2 = (m.q1 * t.D1 + m.q0 * t.D0) / G + (G - 1) / G * m.nu * t.X
    signal = t.K1**2 * m.mu_sq
    V = np.maximum(M2 - signal, 0.0) * G / N
    g_sq = m.K0**2 * m.mu_sq
    with np.errstate(divide="ignore", invalid="ignore"):
        nsr = np.where(t.K1 != 0, V / t.K1**2, np.inf)
        return {
            "rescaled": V / (V + signal) if g_sq > 0 else np.full(G.shape, np.nan),
            "mse": (t.K1 / m.K0 - 1) ** 2 + V / g_sq if g_sq > 0 else np.full(G.shape, np.nan),
            "scale": t.K1 / m.K0,
            "noise": V / g_sq if g_sq > 0 else np.full(G.shape, np.nan),
            "nsr": nsr,
        }


def best(t: Terms, m: Model, N: float, target: str = "nsr") -> int | None:
    """The G of ``t`` (G <= N) minimising ``target`` at N responses per step (``nsr``: the
    rescaled target's minimiser); None when the target is not defined (``mse`` at ‖g‖² = 0)."""
    keep = t.G <= N
    if not keep.any():
        raise validate.ConfigError(f"N: got {N}; allowed: at least {int(t.G.min())} responses")
    values = criteria(t, m, N)[target][keep]
    if np.all(np.isnan(values)):
        return None
    return int(t.G[keep][np.nanargmin(values)])


def gstar(
    spec,
    c1: float,
    g_sq: float,
    s: float,
    a: float,
    alpha: float,
    beta: float,
    N: float,
    replicates: np.ndarray | None = None,
    level: float = 0.95,
    grid=GRID,
    df: float = np.inf,
) -> dict:
    """G* of estimator ``spec`` at N responses per step under the transfer model set by the
    log's constants, on the sizes of ``grid`` (plan passes the ones the run can set,
    :func:`gpolab.theory.gstar.settable`); ``replicates`` (boot, 4) of (c1, g_sq, s, a) give a
    percentile interval
    (replicates the model cannot be set from are left out and counted).  Returns ``gstar``
    (target ``rescaled``), ``gstar_lo``/``gstar_hi``, ``gstar_mse`` (target ``mse``),
    ``scale`` and ``rescaled`` at G*, ``grid_max`` (G* at it means "at least"), with
    ``replicates`` ``safe_G``/``safe_regret`` (:func:`gpolab.theory.gstar.regret_bound` on the
    noise-to-signal ``nsr`` over :func:`gpolab.theory.gstar.region`: the G whose noise excess
    over the best is least in the worst case the log allows) and ``excess`` (every G's,
    :func:`gpolab.theory.gstar.excess`), ``notes`` and ``reason``
    (None, or why there is no G*: then ``gstar`` is None)."""
    m = fit(c1, g_sq, s, a, alpha, beta)
    if isinstance(m, str):
        return {"gstar": None, "gstar_lo": None, "gstar_hi": None, "reason": m}
    t = estimator_terms(spec, alpha, beta, grid)
    crit = criteria(t, m, N)
    G = best(t, m, N)
    i = int(np.flatnonzero(t.G == G)[0])
    out = {
        "gstar": G,
        "gstar_mse": best(t, m, N, "mse"),
        "scale": float(crit["scale"][i]),
        "rescaled": float(crit["rescaled"][i]),  # NaN when ‖g‖² is taken as 0
        "grid_max": int(t.G[t.G <= N].max()),
        "gstar_lo": None,
        "gstar_hi": None,
        "notes": "; ".join(m.notes),
        "reason": None,
    }
    if replicates is not None:
        out.update(_interval(t, replicates, alpha, beta, N, level, df))
    return out


def _interval(t: Terms, replicates, alpha, beta, N: float, level: float, df: float) -> dict:
    """:func:`gstar`'s fields from the bootstrap ``replicates``: ``replicates_used``, the
    percentile interval of G*, the ``excess`` over :func:`gpolab.theory.gstar.region` and the
    safe G on it."""
    models = [fit(*rep, alpha, beta) for rep in np.asarray(replicates, np.float64)]
    draws = [best(t, r, N) for r in models if not isinstance(r, str)]
    out = {"replicates_used": len(draws)}
    if not draws:
        return out
    lo, hi = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2], method="nearest")
    out["gstar_lo"], out["gstar_hi"] = int(lo), int(hi)
    keep = t.G <= N
    pts = region(replicates, level, df=df)  # its centre first
    noise = [
        criteria(t, r, N)["nsr"][keep] if not isinstance(r, str) else np.full(keep.sum(), np.nan)
        for r in (fit(*c, alpha, beta) for c in pts)
    ]
    out["excess"] = excess(noise, t.G[keep])
    safe = least_worst(out["excess"])
    out["safe_G"], out["safe_regret"] = safe["G"], safe["regret"]
    return out


def exact_criteria(truth, spec, N: float, grid=GRID) -> dict[str, np.ndarray]:
    """The same criteria as :func:`criteria` from an env's exact truth (per-prompt V, g_x, S2,
    E[‖W‖²Z] and prompt weights f, :class:`gpolab.envs.bandit.BanditTruth` field names), without
    the transfer model: E ĝ = Σ_x f κ_x g_x (global coordinates: its direction may differ
    from g's), M2 = Σ_x f
    E‖ĝ_x‖² (theory §8), V_B = (M2 − ‖E ĝ‖²) G/N; ``rescaled`` = 1 − (E ĝ·g)²/(‖g‖² E‖ĝ_B‖²),
    ``mse`` = (‖E ĝ − g‖² + V_B)/‖g‖², ``scale`` = E ĝ·g/‖g‖², plus ``G``."""
    from gpolab import estimators  # deferred: jax

    f = np.asarray(truth.prompt_probs, np.float64)
    g_x = exact.global_gradients(truth)
    g = f @ g_x
    g_sq = float(g @ g)
    Gs = np.array([G for G in grid if max(2, estimators.minimum_G(spec)) <= G <= N])
    out = {k: np.empty(len(Gs)) for k in ("rescaled", "mse", "scale")}
    for i, G in enumerate(Gs):
        mo = exact._truth_moments(truth, exact.registry_table(spec, int(G)), int(G))
        m = (f * mo.kappa) @ g_x
        V = max(float(f @ mo.second_moment - m @ m), 0.0) * G / N
        out["rescaled"][i] = 1.0 - (m @ g) ** 2 / (g_sq * (V + m @ m))
        out["mse"][i] = (float((m - g) @ (m - g)) + V) / g_sq
        out["scale"][i] = float(m @ g) / g_sq
    return {"G": Gs, **out}


def noise_excess(exact: dict, G: int) -> float:
    """From :func:`exact_criteria`'s ``exact``: the exact 1/SNR (``rescaled``/(1 − ``rescaled``))
    at G over its minimum on the grid, minus 1 (0: G is the best; NaN when G is not on it)."""
    if G not in exact["G"]:
        return float("nan")
    noise = exact["rescaled"] / (1 - exact["rescaled"])
    return float(noise[list(exact["G"]).index(G)] / noise.min() - 1)
