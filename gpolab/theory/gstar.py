"""G*, the MSE-optimal group size, from a per-response score-norm proxy and gradient norms at two
or more batch sizes (gpolab's derivation; ``gpolab plan``, theory §10): the proxy's per-group
U-statistics, the constants c1, C2, C3 of the loo estimator's MSE law, G* = 1 + √(C3/c1) with a
bootstrap interval (clustered by prompt when asked), and the bounds rewards alone allow.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np

from gpolab import validate
from gpolab.theory.difficulty import _NAN, _band


def _groups(rewards, proxy, group) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Checked float64 rewards, proxy and integer group index (0..groups−1) per response."""
    z, q = np.asarray(rewards, np.float64).ravel(), np.asarray(proxy, np.float64).ravel()
    labels = np.asarray(group).ravel()
    if not (z.size == q.size == labels.size) or z.size < 1:
        raise validate.ConfigError(
            f"rewards/proxy/group: got lengths {z.size}, {q.size}, {labels.size}; allowed: "
            "three equal, non-empty 1-D arrays with one entry per response"
        )
    validate.finite_array("rewards", z)
    validate.finite_array("proxy", q, 0.0)
    return z, q, np.unique(labels, return_inverse=True)[1].ravel()


def proxy_moments(rewards, proxy, group) -> tuple[np.ndarray, np.ndarray]:
    """Per group with n >= 3 responses (others dropped), the unbiased U-statistics (gpolab's)

        s_x = E[q] σ²(x):      mean_i q_i · (Q_−i − S_−i²/m)/(m − 1)
        a_x = E[q (Z − V)²]:   mean_i q_i [Z_i² − 2 Z_i S_−i/m + (S_−i² − Q_−i)/(m(m − 1))]

    with m = n − 1, S_−i and Q_−i the sum of the others' rewards and of their squares.  Unbiased
    because response i is independent of the others, whose sample variance is unbiased for σ²
    and whose (S² − Q)/(m(m − 1)) is unbiased for V².  Binary Z: Q = S = c_−i, so
    s_x = mean_i q_i c_−i(m − c_−i)/(m(m − 1)) and the last term is c_−i(c_−i − 1)/(m(m − 1)).
    With q = ‖W‖², s_x = S2 σ² and a_x = E[‖W‖²(Z − V)²] = trΣ_or + ‖g_x‖² (theory §3)."""
    z, q, idx = _groups(rewards, proxy, group)
    n = np.bincount(idx).astype(np.float64)
    S, Q = np.bincount(idx, z), np.bincount(idx, z * z)
    keep = n[idx] >= 3
    z, q, idx = z[keep], q[keep], idx[keep]
    m = n[idx] - 1
    S_o, Q_o = S[idx] - z, Q[idx] - z * z
    s_i = q * (Q_o - S_o**2 / m) / (m - 1)
    a_i = q * (z * z - 2 * z * S_o / m + (S_o**2 - Q_o) / (m * (m - 1)))
    used = n >= 3
    return (np.bincount(idx, s_i, n.size) / np.maximum(n, 1))[used], (
        np.bincount(idx, a_i, n.size) / np.maximum(n, 1)
    )[used]


def pair_scores(rewards, gram) -> np.ndarray:
    """Per response of a group of n >= 3 (leading axes: several groups),

        r_i = (1/(n − 1)) Σ_{j≠i} (Z_i − b_ij)(Z_j − b_ij) W_i·W_j

    with b_ij the mean reward of the other n − 2 responses and ``gram`` (n, n) the inner
    products W_i·W_j of the responses' scores (gpolab's).  Their mean over the group is unbiased
    for ‖g_x‖²: b_ij is independent of responses i and j, which are independent of each other,
    and E[(Z − b) W] = g_x for any b independent of (Z, W) because E W = 0.  Unlike ‖ĝ‖², no
    diagonal term ‖W_i‖²(Z_i − b)² enters, so the within-group noise that c1 is otherwise
    recovered under (:func:`constants_from_proxy`) is not there to subtract."""
    z = np.asarray(rewards, np.float64)
    K = np.asarray(gram, np.float64)
    n = z.shape[-1] if z.ndim else 0
    if n < 3 or K.shape != (*z.shape, n):
        raise validate.ConfigError(
            f"pair_scores: got rewards of shape {z.shape} and a Gram matrix of shape {K.shape}; "
            "allowed: (..., n >= 3) rewards and their (..., n, n) score inner products"
        )
    b = (z.sum(-1)[..., None, None] - z[..., :, None] - z[..., None, :]) / (n - 2)
    prod = (z[..., :, None] - b) * (z[..., None, :] - b) * K * (1 - np.eye(n))
    return prod.sum(-1) / (n - 1)


def pair_moments(rewards, pairs, group) -> np.ndarray:
    """Per group with n >= 3 responses (the groups :func:`proxy_moments` keeps, in its order),
    the mean of :func:`pair_scores` (``pairs``: one per response): u_x, unbiased for ‖g_x‖²."""
    z, _, idx = _groups(rewards, np.zeros(np.size(rewards)), group)  # rewards and groups checked
    u = np.asarray(pairs, np.float64).ravel()
    if u.size != z.size or not np.all(np.isfinite(u)):
        raise validate.ConfigError(
            f"pairs: got {u.size} values for {z.size} responses (or a NaN); allowed: one finite "
            "pair score per response of the measured groups"
        )
    n = np.bincount(idx).astype(np.float64)
    return (np.bincount(idx, u, n.size) / np.maximum(n, 1))[n >= 3]


def _norm_rows(norms) -> tuple[list[np.ndarray], np.ndarray]:
    """Squared gradient norms grouped by batch size (batch sizes with >= 2 rows only)."""
    cols = set(getattr(norms, "columns", ()))
    if "batch" not in cols or not cols & {"grad_norm", "grad_norm_sq"}:
        raise validate.ConfigError(
            f"norms: got columns {sorted(map(str, cols))}; allowed: a table with 'batch' and "
            "'grad_norm' (‖ĝ‖, as frameworks log it) or 'grad_norm_sq' (‖ĝ‖²)"
        )
    batch = np.asarray(norms["batch"], np.float64)
    sq = "grad_norm_sq" in cols
    y = np.asarray(norms["grad_norm_sq" if sq else "grad_norm"], np.float64)
    validate.finite_array("norms.batch", batch, 1.0)
    validate.finite_array("norms.grad_norm", y, 0.0)
    y = y if sq else y * y
    sizes = [B for B in np.unique(batch) if np.sum(batch == B) >= 2]
    return [y[batch == B] for B in sizes], np.asarray(sizes)


def _line(means: np.ndarray, var: np.ndarray, sizes: np.ndarray) -> tuple:
    """Weighted least squares of mean ‖ĝ_B‖² = ‖g‖² + T/B (weights 1/var): (‖g‖², T), arrays
    over the rows of ``means`` ((..., sizes): one design, many right-hand sides)."""
    X = np.stack([np.ones_like(sizes), 1.0 / sizes], 1)
    w = 1.0 / var
    rhs = X.T @ (w[:, None] * np.reshape(means, (-1, sizes.size)).T)
    coef = np.linalg.solve(X.T @ (w[:, None] * X), rhs).reshape((2,) + np.shape(means)[:-1])
    return coef[0], coef[1]


def constants_from_proxy(s: float, a: float, g_sq: float, T: float, G: int) -> dict:
    """c1, C2, C3 (theory §3) from s = E_X[E q σ²], a = E_X E[q(Z − V)²], ‖g‖² and the slope
    T = Tr Cov of one prompt's loo estimate at G (gpolab's derivation): with γ = E‖g_X‖² =
    c1 + ‖g‖², C2 = a − γ, C3 = s + γ and T = c1 + C2/G + C3/(G(G − 1)), so

        c1 = [T − a/G − s/(G(G − 1)) + ‖g‖²(G − 2)/(G(G − 1))] · G(G − 1)/(G² − 2G + 2)."""
    GG = G * (G - 1)
    c1 = (T - a / G - s / GG + g_sq * (G - 2) / GG) * GG / (G * G - 2 * G + 2)
    gamma = c1 + g_sq
    return {"c1": c1, "C2": a - gamma, "C3": s + gamma}


def constants_from_pairs(s: float, a: float, g_sq: float, gamma: float) -> dict:
    """c1, C2, C3 from γ = E‖g_X‖² measured directly (:func:`pair_moments`), ‖g‖² and the
    proxy's s, a: c1 = γ − ‖g‖², C2 = a − γ, C3 = s + γ (theory §3; gpolab's)."""
    return {"c1": gamma - g_sq, "C2": a - gamma, "C3": s + gamma}


def _g_star(c1, C3):
    """1 + √(C3/c1), the exact minimiser of the fixed-budget loo MSE (inf when c1 <= 0): a float,
    or an array elementwise (the bootstrap's replicates)."""
    c1, C3 = np.asarray(c1, np.float64), np.asarray(C3, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.where(c1 > 0, 1.0 + np.sqrt(np.maximum(C3, 0.0) / c1), np.inf)
    return float(g) if g.ndim == 0 else g


_GSTAR_KEYS = (
    "gstar",
    "gstar_lo",
    "gstar_hi",
    "c1",
    "C2",
    "C3",
    "g_sq",
    "T",
    "s",
    "a",
    "c1_se",
    "C3_se",
)


def _no_gstar(reason: str, **known) -> dict:
    return {**dict.fromkeys(_GSTAR_KEYS, _NAN), "gstar": None, **known, "reason": reason}


class Replicates(NamedTuple):
    """:func:`gstar`'s bootstrap replicates, one (boot,) array each."""

    gstar: np.ndarray
    c1: np.ndarray
    C3: np.ndarray
    s: np.ndarray
    a: np.ndarray
    g_sq: np.ndarray

    def constants(self) -> np.ndarray:
        """(boot, 4) of (c1, ‖g‖², s, a): what :func:`region` and the transfer model read."""
        return np.stack([self.c1, self.g_sq, self.s, self.a], 1)


class _Log(NamedTuple):
    """A log as :func:`gstar` fits it: per kept group s_x, a_x, the pair means u_x (or None) and
    the cluster labels (or None); the squared norms per batch size, their means' variances and
    the batch sizes."""

    s_x: np.ndarray
    a_x: np.ndarray
    u_x: np.ndarray | None
    clusters: np.ndarray | None
    rows: list[np.ndarray]
    var: np.ndarray
    sizes: np.ndarray


class _Fit(NamedTuple):
    """How :func:`gstar` turns a log into constants: at group size G, ``boot`` seeded replicates."""

    G: int
    boot: int
    seed: int


def _constants(s, a, g_sq, T, u, G: int) -> dict:
    """c1, C2, C3 from the norms' line (``u`` None) or from the pairs' mean ``u``."""
    if u is None:
        return constants_from_proxy(s, a, g_sq, T, G)
    return constants_from_pairs(s, a, g_sq, u)


def _read_log(rewards, proxy, group, norms, clusters, pairs) -> _Log | dict:
    """The :class:`_Log` of a run's log, or :func:`_no_gstar`'s answer saying what it lacks."""
    if proxy is None:
        return _no_gstar("no per-response score-norm proxy (‖∇ log π‖²): C3 and c1 need it")
    s_x, a_x = proxy_moments(rewards, proxy, group)
    if s_x.size < 2:
        return _no_gstar("fewer than 2 groups with >= 3 responses (the U-statistics need 3)")
    rows, sizes = _norm_rows(norms) if norms is not None else ([], np.zeros(0))
    if sizes.size < 2:
        return _no_gstar(
            "gradient norms at >= 2 batch sizes (>= 2 steps each) are needed for "
            "c1; C3 lies in [s, 2s] (gstar_bounds)",
            s=float(s_x.mean()),
            a=float(a_x.mean()),
        )
    var = np.array([max(r.var(ddof=1), 1e-12 * r.mean() ** 2, 1e-300) / r.size for r in rows])
    u_x = None if pairs is None else pair_moments(rewards, pairs, group)
    cl = None if clusters is None else _group_clusters(rewards, proxy, group, clusters)
    return _Log(s_x, a_x, u_x, cl, rows, var, sizes)


def gstar(
    rewards,
    proxy,
    group,
    norms,
    G: int,
    *,
    level: float = 0.95,
    boot: int = 2000,
    seed: int = 0,
    clusters=None,
    keep_replicates: bool = False,
    pairs=None,
) -> dict:
    """MSE-optimal group size G* = 1 + √(C3/c1) of the loo estimator at a fixed budget N = B·G
    (theory §3; the recovery of c1 and C3 from a run's log is gpolab's derivation).

    ``rewards``, ``proxy`` (q = ‖W‖² = ‖∇ log π‖² of each response, in the coordinates of the
    measured gradient) and ``group`` (one label per group) per response: s, a = means over the
    groups of :func:`proxy_moments` (the prompts as the run drew them).  ``norms``: a DataFrame
    with one row per measured step, ``batch`` (prompts B) and ``grad_norm`` = ‖ĝ‖ (the logged
    norm; squared here; or ``grad_norm_sq``) of the unnormalized loo estimate (mean over B·G
    responses of A W) at this G.  E‖ĝ_B‖² = ‖g‖² + T/B: the per-batch means, weighted least
    squares over >= 2 batch sizes (each with >= 2 rows), give ‖g‖² and T, then
    :func:`constants_from_proxy` gives c1, C2, C3.  ``gstar_lo``/``gstar_hi`` (``level``
    percentile interval), ``c1_se``, ``C3_se`` and ``boot_df``: :func:`_spread` of ``boot``
    seeded :func:`_bootstrap` replicates (with ``clusters``, one label per response such as the
    prompt: the cluster bootstrap).  ``keep_replicates``: also return ``replicates``
    (:meth:`Replicates.constants`: :func:`gpolab.theory.gstar_model.gstar` reads them for
    another estimator's interval, :func:`region` with :func:`radius`'s ``boot_df``).
    ``pairs`` (one :func:`pair_scores` value per response): E‖g_X‖² measured directly
    (:func:`pair_moments`, :func:`constants_from_pairs`; ``c1_method`` says which).  ``reason``:
    None when G* is given, else why not (``gstar`` None, ``gstar_lo`` the bound the data allow)."""
    validate.integer("G", G, 2)
    validate.integer("boot", boot, 10)
    log = _read_log(rewards, proxy, group, norms, clusters, pairs)
    if isinstance(log, dict):
        return log
    reps = _bootstrap(log, _Fit(G, boot, seed))
    out = {**_point(log, G), **_spread(log, reps, level)}
    if keep_replicates:
        out["replicates"] = reps.constants()
    c1_lo = float(_band(reps.c1, level)[0])
    if out["c1"] <= 0 or c1_lo <= 0:
        why = (
            f"c1 = {out['c1']:.3g} (prompt variance of the gradient) is not resolved "
            f"above 0 (its {level:.0%} interval reaches {c1_lo:.3g}): G* has no upper bound"
        )
        return {**out, "gstar": None, "gstar_hi": float("inf"), "reason": why}
    return {**out, "gstar": _g_star(out["c1"], out["C3"]), "reason": None}


def _point(log: _Log, G: int) -> dict:
    """The point estimates: c1, C2, C3, how c1 was measured, ‖g‖², T, s and a."""
    s, a = float(log.s_x.mean()), float(log.a_x.mean())
    g_sq, T = (float(v) for v in _line(np.array([r.mean() for r in log.rows]), log.var, log.sizes))
    u = None if log.u_x is None else float(log.u_x.mean())
    method = "norms" if u is None else "pairs"
    return {
        **_constants(s, a, g_sq, T, u, G),
        "c1_method": method,
        "g_sq": g_sq,
        "T": T,
        "s": s,
        "a": a,
    }


def _spread(log: _Log, reps: Replicates, level: float) -> dict:
    """The bootstrap's SDs of c1 and C3, G*'s percentile interval and ``boot_df``: the fewest
    independent units behind the constants (norm rows of a batch size, or clusters) less one."""
    lo, hi = _band(reps.gstar, level)
    groups = log.s_x.size if log.clusters is None else np.unique(log.clusters).size
    units = min(min(r.size for r in log.rows), groups)
    return {
        "c1_se": float(reps.c1.std()),
        "C3_se": float(reps.C3.std()),
        "gstar_lo": float(lo),
        "gstar_hi": float(hi),
        "boot_df": float(units - 1),
    }


def measured(frame):
    """The rows of a log ``frame`` (columns group, proxy, …) whose group has the proxy on every
    response (a training hook measures only some groups), and their groups' modal size."""
    whole = frame["proxy"].notna().groupby(frame["group"]).transform("all").to_numpy(bool)
    f = frame[whole]
    sizes = f.groupby("group").size().to_numpy()
    G = int(np.bincount(sizes).argmax()) if sizes.size else 0  # the smallest of tied modes
    return f, G


def pairs_of(frame):
    """The ``pair_score`` column of measured rows (:func:`measured`) when every one has it, for
    :func:`gstar`'s ``pairs``; else None (the norms path)."""
    if "pair_score" not in frame:
        return None
    u = frame["pair_score"].to_numpy(np.float64)
    return u if u.size and np.all(np.isfinite(u)) else None


def information_factor(c1: float, se: float) -> float:
    """How many times a log's information would resolve c1 > 0 at 95% (gpolab's rule of thumb:
    the bootstrap SE falls like 1/√information, so c1 = z·SE needs (1.96/z)² times it); NaN
    unless c1 and its SE are above 0."""
    ok = c1 is not None and se is not None and np.isfinite(c1) and np.isfinite(se)
    return float((1.96 * se / c1) ** 2) if ok and c1 > 0 and se > 0 else float("nan")


# the group sizes a recommendation is searched over (a practitioner picks among such sizes)
GRID = (2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256)


def excess(noise, grid) -> dict:
    """Each G's noise excess over the best G of ``grid``, from ``noise`` (R, len(grid)): row 0
    the point estimate, the others the points of a region of constants (any positive criterion
    with the estimator's minimiser).  At a row the excess of G is noise(G)/min_G′ noise(G′) − 1;
    ``point`` is row 0's, ``lo``/``hi`` the least and the largest over the usable rows (finite,
    positive noise; ``used`` counts them): NaN arrays when none is usable."""
    grid = np.asarray(grid)
    noise = np.asarray(noise, np.float64).reshape(-1, grid.size)
    ok = np.all(np.isfinite(noise) & (noise > 0), axis=1)
    nan = np.full(grid.size, np.nan)
    if not ok.any():
        return {"G": grid, "point": nan, "lo": nan, "hi": nan, "used": 0}
    rel = noise[ok] / noise[ok].min(axis=1, keepdims=True) - 1.0
    return {
        "G": grid,
        "point": rel[0] if ok[0] else nan,
        "lo": rel.min(axis=0),
        "hi": rel.max(axis=0),
        "used": int(ok.sum()),
    }


def regret_bound(noise, grid) -> dict:
    """The G of ``grid`` whose worst noise excess over the best G is least (gpolab's rule).

    ``noise`` (R, len(grid)): one row per point of the region the log allows for its constants
    (:func:`region`), the gradient noise at each G at a fixed budget.  ``regret`` is G's largest
    :func:`excess` over the points and ``G`` the grid size where that is least (the smaller on
    ties).  So "G costs at most ``regret`` more noise than the best G whatever the constants
    are in that region": defined when G* itself is not (c1 not resolved above 0), because the
    log still bounds c1 from above.  ``G`` is None when no point is usable."""
    return least_worst(excess(noise, grid))


def least_worst(ex: dict) -> dict:
    """:func:`regret_bound` from an :func:`excess` table already computed."""
    if not ex["used"]:
        return {"G": None, "regret": _NAN, "used": 0}
    i = int(np.argmin(ex["hi"]))
    return {"G": int(ex["G"][i]), "regret": float(ex["hi"][i]), "used": ex["used"]}


# directions of the region's surface (a fixed, seeded set: the same log gives the same answer)
DIRECTIONS = 1024


def radius(level: float = 0.95, df: float = np.inf) -> float:
    """The region's radius in bootstrap SDs: √χ²₄(level), times two small-sample factors where
    the constants rest on few independent units (``df`` + 1: the fewest gradient-norm rows of a
    batch size, or prompt clusters): the bootstrap of n units underestimates a mean's variance
    by (n − 1)/n, and its SD is itself estimated from n units, so Student's t with n − 1
    degrees of freedom replaces the normal quantile (gpolab's correction; 1 as df → ∞)."""
    from scipy.stats import chi2, norm, t

    r = float(np.sqrt(chi2.ppf(level, 4)))
    if not np.isfinite(df):
        return r
    df = max(float(df), 1.0)
    q = (1 + level) / 2
    return r * float(t.ppf(q, df) / norm.ppf(q)) * float(np.sqrt((df + 1) / df))


def region(
    replicates, level: float = 0.95, directions: int = DIRECTIONS, df: float = np.inf
) -> np.ndarray:
    """Points (c1, ‖g‖², s, a) spanning a joint ``level`` region of the log's constants
    (gpolab's rule): the ellipsoid (θ − m)ᵀ S⁻¹ (θ − m) <= χ²₄(level) of :func:`gstar`'s
    bootstrap ``replicates`` (mean m, covariance S), its centre first, then its surface along
    ``directions`` fixed directions and the ± axes of S.

    Joint, not four marginal intervals (whose box holds all four constants only ~85% of the
    time): its radius 3.08 SDs is χ²₄'s, so it holds the constants with probability ``level``
    where the bootstrap is normal, and every linear function of them within ±3.08 SDs, hence
    still within ±1.85 SDs if the bootstrap were 0.6× too narrow.  At the boundary: c1 and ‖g‖²
    are a variance and a squared norm, so the centre's are taken as at least 0 (an estimate
    below 0 is noise around a value >= 0: the region then reaches 3.08 SDs above 0, never
    stopping at 0) and the points are cut at 0.  The noise ratios :func:`excess` reads are
    ratios of affine functions of the constants, whose largest value over an ellipsoid lies on
    its surface.  ``df``: :func:`radius`'s small-sample correction (:func:`gstar`'s
    ``boot_df``)."""
    reps = np.asarray(replicates, np.float64).reshape(-1, 4)
    reps = reps[np.all(np.isfinite(reps), axis=1)]
    if reps.shape[0] < 2:
        return reps
    m = reps.mean(axis=0)
    m[:2] = np.maximum(m[:2], 0.0)
    w, V = np.linalg.eigh(np.cov(reps.T))
    root = V * np.sqrt(np.maximum(w, 0.0))  # root @ root.T = S
    u = np.random.default_rng(0).standard_normal((directions, 4))
    u = np.vstack([u / np.linalg.norm(u, axis=1, keepdims=True), np.eye(4), -np.eye(4)])
    pts = np.vstack([m, m + radius(level, df) * u @ root.T])
    pts[:, :2] = np.maximum(pts[:, :2], 0.0)
    return pts


def constant_box(replicates, level: float = 0.95, steps: int = 41) -> np.ndarray:
    """(steps·8, 4) points spanning each constant's own percentile interval over the bootstrap
    ``replicates`` (c1 and ‖g‖² cut at 0), c1 on ``steps`` values, the others at both ends: the
    rule before issue 56, kept as the negative control of :func:`region`'s coverage (four
    marginal intervals hold the constants jointly only ~85% of the time, and cut at 0 a c1
    whose interval lies below 0 states a bound of 0%)."""
    reps = np.asarray(replicates, np.float64)
    lo, hi = np.quantile(reps, [(1 - level) / 2, (1 + level) / 2], axis=0)
    lo[:2], hi[:2] = np.maximum(lo[:2], 0), np.maximum(hi[:2], 0)
    c1 = np.linspace(lo[0], hi[0], steps)
    ends = [(lo[k], hi[k]) for k in (1, 2, 3)]
    return np.array([(c, *rest) for c in c1 for rest in itertools.product(*ends)])


def loo_noise(c1, g_sq, s, a, grid) -> np.ndarray:
    """loo's MSE at a fixed budget N, times N, at each G of ``grid``
    (:func:`gpolab.theory.groupsize.fixed_n_mse` at N = 1: c1·G + C2 + C3/(G − 1)), from arrays
    of the log's (c1, ‖g‖², s, a) (one row each; c1 and ‖g‖² taken as at least 0, since they are
    a variance and a squared norm; C2 = a − E‖g_X‖², C3 = s + E‖g_X‖² as in
    :func:`constants_from_proxy`)."""
    from gpolab.theory import groupsize

    c1, g_sq = np.maximum(np.asarray(c1, np.float64), 0), np.maximum(np.asarray(g_sq), 0)
    gamma = c1 + g_sq
    c = groupsize.Constants(
        c1[..., None], (np.asarray(a) - gamma)[..., None], (np.asarray(s) + gamma)[..., None]
    )
    return groupsize.fixed_n_mse(c, 1, np.asarray(grid, np.float64))


MAX_SIZE = 256  # the largest G a recommendation names


def settable(N: float) -> list[int]:
    """The group sizes a run with N responses per step can set without changing its batch: the
    divisors G of N in 2..MAX_SIZE (B = N/G prompts per step: TRL's num_generations divides its
    generation batch, verl's n times its prompt batch is N); when there is at most one (N
    prime: only G = N, one prompt per step), :data:`GRID`'s sizes up to N beside it (a size
    that does not divide N needs another batch: the report says so)."""
    n = int(round(N))
    sizes = [G for G in range(2, min(n, MAX_SIZE) + 1) if n % G == 0] if n == N else []
    if len(sizes) > 1:
        return sizes
    return sorted({*sizes, *(G for G in GRID if G <= N)}) or [2]


def safe_g(
    replicates, N: float, level: float = 0.95, box: bool = False, df: float = np.inf
) -> dict:
    """:func:`regret_bound` for loo over :func:`region` of :func:`gstar`'s ``replicates``
    (c1, ‖g‖², s, a), on the sizes a run at N responses per step can set (:func:`settable`),
    with ``excess`` (:func:`excess`: every size's point, least and largest excess) and
    ``c1_max`` (the largest c1 of the region).  ``box``: the marginal box of
    :func:`constant_box` instead (the negative control); ``df``: :func:`radius`'s.  Its
    coverage on known truth, by stratum: tests/labs/test_plancheck.py."""
    grid = settable(N)
    pts = constant_box(replicates, level) if box else region(replicates, level, df=df)
    if box:  # the box has no centre of its own: its first row stands in
        pts = np.vstack([np.median(np.asarray(replicates, np.float64), axis=0), pts])
    noise = loo_noise(*pts.T, grid) if len(pts) else np.zeros((0, len(grid)))
    ex = excess(noise, grid)
    c1_max = float(pts[:, 0].max()) if len(pts) else _NAN
    return {**least_worst(ex), "excess": ex, "c1_max": c1_max}


def _group_clusters(rewards, proxy, group, clusters) -> np.ndarray:
    """The cluster index of each group :func:`proxy_moments` keeps (a group's first label)."""
    z, _, idx = _groups(rewards, proxy, group)
    labels = np.asarray(clusters).ravel()
    if labels.size != z.size:
        raise validate.ConfigError(
            f"clusters: got {labels.size} labels for {z.size} responses; allowed: one each"
        )
    first = np.full(idx.max() + 1, -1)
    first[idx[::-1]] = np.arange(idx.size)[::-1]
    code = np.unique(labels, return_inverse=True)[1].ravel()
    return code[first][np.bincount(idx) >= 3]


def _bootstrap(log: _Log, fit: _Fit) -> Replicates:
    """``fit.boot`` replicates: groups (or whole clusters of groups: a prompt's groups at
    different steps are not independent) resampled, norm rows within batch size (the pair means
    ``log.u_x`` resampled with their groups)."""
    rng = np.random.default_rng(fit.seed)
    out = np.empty((fit.boot, 6))
    code = (
        np.arange(log.s_x.size)
        if log.clusters is None
        else np.unique(log.clusters, return_inverse=True)[1]
    )
    C = int(code.max()) + 1
    sums_s, sums_a = np.bincount(code, log.s_x, C), np.bincount(code, log.a_x, C)
    sums_u = None if log.u_x is None else np.bincount(code, log.u_x, C)
    count = np.bincount(code, minlength=C).astype(np.float64)
    picks = np.empty((fit.boot, C), np.int64)
    means = np.empty((fit.boot, len(log.rows)))
    for k in range(fit.boot):  # the draws of one replicate after another, as they always were
        picks[k] = rng.integers(0, C, C)
        means[k] = [r[rng.integers(0, r.size, r.size)].mean() for r in log.rows]
    g_sq, T = _line(means, log.var, log.sizes)
    m = count[picks].sum(1)
    s, a = sums_s[picks].sum(1) / m, sums_a[picks].sum(1) / m
    c = _constants(s, a, g_sq, T, None if sums_u is None else sums_u[picks].sum(1) / m, fit.G)
    c1, C3 = np.broadcast_arrays(c["c1"], c["C3"])
    out = np.stack([_g_star(c1, C3), c1, C3, s, a, g_sq], 1)
    return Replicates(*out.T)


def gstar_bounds(rewards, proxy, group) -> dict:
    """What the proxy alone gives (gpolab's): ‖g_x‖² <= S2 σ² (Cauchy–Schwarz on
    g_x = E[W (Z − V)]), so with s = E_X[S2 σ²] and a = E_X E[‖W‖²(Z − V)²] (:func:`proxy_moments`)

        C3 = s + E‖g_X‖² ∈ [s, 2s],     C2 = a − E‖g_X‖² ∈ [max(a − s, 0), a];

    c1 (how much the prompts' gradients differ) needs gradient norms at two batch sizes, so
    ``gstar`` is None with that reason."""
    s_x, a_x = proxy_moments(rewards, proxy, group)
    if s_x.size < 1:
        nan = dict.fromkeys(("s", "a", "C3_lo", "C3_hi", "C2_lo", "C2_hi"), _NAN)
        return {**nan, "gstar": None, "reason": "no group with >= 3 responses"}
    s, a = float(s_x.mean()), float(a_x.mean())
    return {
        "s": s,
        "a": a,
        "C3_lo": s,
        "C3_hi": 2 * s,
        "C2_lo": max(a - s, 0.0),
        "C2_hi": a,
        "gstar": None,
        "reason": "c1 (the prompts' gradient variance) needs gradient norms "
        "at >= 2 batch sizes; rewards and the proxy give only C2 and C3 bounds",
    }
