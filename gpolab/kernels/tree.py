"""Tree kernels: K thoughts × M continuations per tree (the sweep's ``env = tree`` and ``gpolab
tree`` run the same cells): thought advantages against the standardized true values, the
thought-policy gradient (finite thoughts) and the overlap moments (log-linear thoughts).  The
protocol is :mod:`gpolab.kernels`'; :func:`corr_stats` summarises the correlation's moments."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from gpolab import estimators
from gpolab.envs import tree


@dataclasses.dataclass(frozen=True)
class TreeCell:
    """Static settings of one tree cell (the sweep's env=tree and ``gpolab tree`` both use it).
    ``beta_ints`` = (a, b) for the fast exact integer-Beta thought sampler (see
    :func:`tree_cell`), else None; ``grad``: also the thought-policy gradient (finite model)."""

    K: int
    M: int
    variant: str = "thought-std"
    ddof: int = 1
    beta_ints: tuple[int, int] | None = None
    grad: bool = False


def tree_cell(
    K: int,
    M: int,
    variant: str = "thought-std",
    ddof: int = 1,
    *,
    model: str = "beta",
    a: float = 2.0,
    b: float = 3.0,
    grad: bool = False,
) -> TreeCell:
    """The cell of a (K, M) tree with the fastest exact samplers for this thought model."""
    return TreeCell(K, M, variant, ddof, tree.integer_beta(model, a, b), grad)


def tree_error(cell: TreeCell, key: jax.Array, args) -> dict:
    """One tree: thought advantages Â (K,) against the standardized true values.

    ``args = (params, truth, eps)``, plus ``grad_target`` (T,) with ``cell.grad``: the thought
    gradient the variant estimates (``grad_err``, ``grad_sq``).  Two independent sets of M
    continuations per thought give an unbiased estimate of the conditional variance
    E[Var(Â_k | thoughts)] = E[½ (Â¹_k − Â²_k)²] (``cond_var``).  ``corr_v``/``corr_vv``: the
    per-tree moments (a, t, aa, tt, at) of the correlation and their outer product.
    """
    params, truth, eps, *grad_target = args
    k_thoughts, k_c1, k_c2 = jax.random.split(key, 3)
    if cell.beta_ints is not None:
        p, ids = tree.sample_beta_int(k_thoughts, *cell.beta_ints, (cell.K,)), None
    else:
        p, ids = tree.sample_thoughts(k_thoughts, params, cell.K)

    def adv(k):
        counts = tree.sample_counts(k, p, cell.M)
        # only leaf-std looks past V̂_k = S_k/M; for the others one "leaf" V̂_k gives the same Â
        leaf_std = cell.variant == "leaf-std"
        z = tree.leaves(counts, cell.M) if leaf_std else (counts / cell.M)[:, None]
        a = estimators.tree_advantages(z, variant=cell.variant, ddof=cell.ddof, eps=eps)
        return a, counts

    (a1, c1), (a2, _) = adv(k_c1), adv(k_c2)
    target = tree.population_target(truth, p)
    out = {
        "sq": jnp.mean((a1 - target) ** 2),
        "sq_group": jnp.mean((a1 - tree.group_target(p, cell.ddof)) ** 2),
        "cond_var": 0.5 * jnp.mean((a1 - a2) ** 2),
        "degenerate": estimators.degenerate(c1).astype(p.dtype),
        "a": jnp.mean(a1),
        "t": jnp.mean(target),
        "aa": jnp.mean(a1 * a1),
        "tt": jnp.mean(target * target),
        "at": jnp.mean(a1 * target),
    }
    # (a, t, aa, tt, at) and its outer product: the covariance of these per-seed means gives the
    # delta-method standard error of the pooled correlation (:func:`corr_stats`)
    v = jnp.stack([out["a"], out["t"], out["aa"], out["tt"], out["at"]])
    out["corr_v"], out["corr_vv"] = v, jnp.outer(v, v)
    if cell.grad:
        err = tree.thought_gradient(a1, ids, jax.nn.softmax(params.logits)) - grad_target[0]
        out["grad_err"], out["grad_sq"] = err, jnp.sum(err**2)
    return out


def tree_overlap_error(cell: TreeCell, key: jax.Array, args) -> dict:
    """:func:`tree_error` (finite thoughts, ``cell.grad``) plus the six per-seed moments ``ov_w``
    of :data:`gpolab.theory.tree_overlap.MOMENTS` and their outer product ``ov_ww``, from this
    tree's ĝ₀ and a second, independent tree's (key ``fold_in(key, 1)``): ĝ¹·ĝ² and h¹h² are
    unbiased for ‖E ĝ₀‖² and (E h)², h = ψ·ĝ₀.
    ``args = (params, truth, eps, grad_target, psi)``."""
    params, truth, eps, t0, psi = args
    base = (params, truth, eps, t0)
    out = tree_error(cell, key, base)
    other = tree_error(cell, jax.random.fold_in(key, 1), base)
    g1, g2 = out["grad_err"] + t0, other["grad_err"] + t0
    h1, h2 = g1 @ psi, g2 @ psi
    w = jnp.stack(
        [
            0.5 * (g1 + g2) @ t0,
            0.5 * (h1 + h2),
            g1 @ g2,
            h1 * h2,
            0.5 * (g1 @ g1 + g2 @ g2),
            0.5 * (h1 * h1 + h2 * h2),
        ]
    )
    out["ov_w"], out["ov_ww"] = w, jnp.outer(w, w)
    return out


def corr_stats(m) -> tuple[float, float]:
    """Pooled Corr(Â_k, A_k) and its delta-method standard error from the per-tree means
    v = (a, t, aa, tt, at) of :func:`tree_error` (``corr_v``, ``corr_vv``).

    r = (at − a·t)/√((aa − a²)(tt − t²)) on the seed means; SE² = ∇rᵀ Σ ∇r / n with Σ the
    covariance (ddof 1) of v over the n independent trees and
    ∇r = (−t/s + r a/va, −a/s + r t/vt, −r/(2 va), −r/(2 vt), 1/s), va = aa − a², vt = tt − t²,
    s = √(va vt).  (NaN, NaN) when either variance is 0."""
    n = m.n
    mean = np.asarray(m.mean("corr_v"), np.float64)
    a, t, aa, tt, at = mean
    va, vt = aa - a * a, tt - t * t
    if not (va > 0 and vt > 0):
        return math.nan, math.nan
    s = math.sqrt(va * vt)
    r = (at - a * t) / s
    if n < 2:
        return float(r), math.nan
    cov = (np.asarray(m.mean("corr_vv"), np.float64) - np.outer(mean, mean)) * n / (n - 1)
    grad = np.array([-t / s + r * a / va, -a / s + r * t / vt, -r / (2 * va), -r / (2 * vt), 1 / s])
    return float(r), math.sqrt(max(float(grad @ cov @ grad), 0.0) / n)
