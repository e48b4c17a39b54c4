"""Std-normalized GRPO and the arcsin objective on the log-linear bandit (Proposition 13 and
Lemma 11 of [U] arXiv 2603.01162, Appendix A; the exact finite-G forms are gpolab's derivation).

Algorithm 2's advantage is (Z_g − Z̄_−g)/se with se the ddof-1 group std, i.e. G/(G − 1) times
gpolab's ``grpo`` (ddof 1, eps 0); an all-equal group gets advantage 0.  With binary rewards its
count table (:func:`paper_table`, theory §8) gives the exact mean E ĝ_x = κ_G(V_x) g_x, so the
mean field of the estimator at a fixed G is the gradient of

    𝒥_G(θ) = E_X Φ_G(V(X)),   Φ_G(v) = ∫_0^v κ_G(t) dt          (ours)

(κ_G(p) is a polynomial in p, so Φ_G is a sum of regularized incomplete beta functions).  As
G → ∞, κ_G(p) → 1/√(p(1 − p)) and Φ_G(v) → 2 arcsin √v: Proposition 13's 𝒥 without its KL
term; unnormalized leave-one-out ascends E V instead.

Lemma 11's U-statistic is loo's estimate divided by the population std σ_x = √(V(1 − V)); the
difference ĝ_paper − U = ĝ_loo (1/se − 1/σ_x) is again a count-table estimator (a per-prompt
table), so E‖ĝ − U‖² is exact (:func:`lemma11_exact`).

Everything is float64 numpy over the instance's arrays (u (N, A, k), reward (N, A), ρ); θ is the
global vector (N·k + k,) of :mod:`gpolab.envs.loglinear`, v_x = √(1 − ρ²) θ_x + ρ θ_s.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
from scipy import special

from gpolab import validate
from gpolab.theory import exact


@dataclasses.dataclass(frozen=True)
class Problem:
    """One log-linear instance in float64 (reference policy: θ = 0, uniform over responses)."""

    u: np.ndarray  # (N, A, k)
    reward: np.ndarray  # (N, A)
    rho: float

    @classmethod
    def of(cls, params) -> Problem:
        """From :class:`gpolab.envs.loglinear.LogLinearParams`."""
        return cls(
            np.asarray(params.u, np.float64),
            np.asarray(params.reward, np.float64),
            float(params.rho),
        )

    @property
    def dim(self) -> int:
        """D = N·k + k, the size of θ."""
        return (self.u.shape[0] + 1) * self.u.shape[2]

    @property
    def mix(self) -> tuple[float, float]:
        return float(np.sqrt(max(1.0 - self.rho**2, 0.0))), self.rho

    def effective(self, theta) -> np.ndarray:
        """(N, k) v_x = a θ_x + ρ θ_s."""
        N, _, k = self.u.shape
        theta = np.asarray(theta, np.float64)
        a, rho = self.mix
        return a * theta[: N * k].reshape(N, k) + rho * theta[N * k :][None, :]

    def to_global(self, local) -> np.ndarray:
        """(N, k) per-prompt local vectors → (N, D) global ones."""
        N, k = local.shape
        a, rho = self.mix
        own = (np.eye(N)[:, :, None] * local[None]).reshape(N, N * k)
        return np.concatenate([a * own, rho * local], axis=-1)


def state(pb: Problem, theta) -> dict:
    """Per-prompt exact quantities at θ: π, V, σ², local gradient c_x = Cov_π(r, u), S2 =
    E‖W‖², e_wz2 = E[‖W‖² Z] (‖W‖ = ‖u − E_π u‖ since a² + ρ² = 1)."""
    logits = np.einsum("nak,nk->na", pb.u, pb.effective(theta))
    logp = logits - special.logsumexp(logits, axis=-1, keepdims=True)
    pi = np.exp(logp)
    V, q = np.sum(pi * pb.reward, -1), np.sum(pi * (1 - pb.reward), -1)  # q: no cancellation
    psi = pb.u - np.einsum("na,nak->nk", pi, pb.u)[:, None, :]
    w2 = np.sum(psi**2, -1)
    return dict(
        pi=pi,
        V=V,
        sigma2=np.clip(V * q, 0.0, None),
        c=np.einsum("na,nak->nk", pi * (pb.reward - V[:, None]), pb.u),
        S2=np.sum(pi * w2, -1),
        e_wz2=np.sum(pi * pb.reward * w2, -1),
    )


# ----------------------------------------------------------------------------- count tables


@functools.lru_cache(maxsize=64)
def paper_table(G: int) -> exact.Table:
    """Count table of Algorithm 2's advantage (Z_g − Z̄_−g)/se (se: ddof-1 std around the full
    mean; 0 for an all-equal group), binary rewards, s = successes among the G − 1 peers."""
    validate.integer("G", G, 2)
    s = np.arange(G, dtype=np.float64)
    loo1, loo0 = (G - 1 - s) / (G - 1), -s / (G - 1)  # Z − Z̄_−g for a success, a failure

    def se(c):  # c successes in the group
        return np.sqrt(c * (G - c) / (G * (G - 1.0)))

    with np.errstate(divide="ignore", invalid="ignore"):
        a1 = np.where(se(s + 1) > 0, loo1 / se(s + 1), 0.0)
        a0 = np.where(se(s) > 0, loo0 / se(s), 0.0)
    return exact.Table(a1, a0, G, name="algorithm-2")


def kappa(G, p) -> np.ndarray:
    """κ_G(p) of Algorithm 2's advantage (E ĝ_x = κ_G(V_x) g_x); G = inf: 1/√(p(1 − p))."""
    p = np.asarray(p, np.float64)
    if G == np.inf:
        with np.errstate(divide="ignore"):
            return 1.0 / np.sqrt(p * (1 - p))
    return exact.kappa(paper_table(int(G)), int(G), p)


def phi(G, v) -> np.ndarray:
    """Φ_G(v) = ∫_0^v κ_G(t) dt: Σ_s d_s I_v(s + 1, G − s)/G with d_s = a1[s] − a0[s] (the
    Bernstein basis integrates to incomplete betas); G = inf (or "arcsin"): 2 arcsin √v."""
    v = np.asarray(v, np.float64)
    if G in ("arcsin", np.inf):
        return 2 * np.arcsin(np.sqrt(np.clip(v, 0.0, 1.0)))
    t = paper_table(int(G))
    s = np.arange(int(G), dtype=np.float64)
    return np.sum((t.a1 - t.a0) * special.betainc(s + 1, G - s, v[..., None]), -1) / G


def weight(objective, st: dict) -> np.ndarray:
    """Φ'(V) from a :func:`state`: 1/σ (arcsin), κ_G(V) (an int G)."""
    if objective == "arcsin":
        with np.errstate(divide="ignore"):
            return 1.0 / np.sqrt(st["sigma2"])
    return kappa(int(objective), st["V"])


# ----------------------------------------------------------------------------- direction, Lemma 11


def cosine(a, b) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def direction_row(pb: Problem, theta, G: int) -> dict:
    """The exact mean direction m_G = (1/N) Σ_x κ_G(V_x) g_x against ∇𝒥 = (1/N) Σ_x g_x/σ_x
    (κ = 0) and ∇E V = (1/N) Σ_x g_x: cosines and ‖m_G − ∇𝒥‖/‖∇𝒥‖."""
    st = state(pb, theta)
    g = pb.to_global(st["c"])
    m = (weight(G, st)[:, None] * g).mean(0)
    target = (weight("arcsin", st)[:, None] * g).mean(0)
    return dict(
        G=G,
        cos_arcsin=cosine(m, target),
        rel_err=float(np.linalg.norm(m - target) / np.linalg.norm(target)),
        cos_plain=cosine(m, g.mean(0)),
        cos_target_plain=cosine(target, g.mean(0)),
        norm_ratio=float(np.linalg.norm(m) / np.linalg.norm(target)),
    )


def difference_table(G: int, V) -> exact.Table:
    """Per-prompt count table of ĝ_paper − U_std: (Z − Z̄_−g)(1/se − 1/σ_x), degenerate groups 0."""
    t = paper_table(G)
    s = np.arange(G, dtype=np.float64)
    loo1, loo0 = (G - 1 - s) / (G - 1), -s / (G - 1)
    inv = 1.0 / np.sqrt(np.asarray(V, np.float64) * (1 - np.asarray(V)))[:, None]
    a1 = np.where(t.a1 != 0, t.a1 - loo1 * inv, 0.0)
    a0 = np.where(t.a0 != 0, t.a0 - loo0 * inv, 0.0)
    return exact.Table(a1, a0, G, name="paper-minus-ustat")


def _batch_second(pb: Problem, st: dict, table: exact.Table, G: int) -> float:
    """E‖(1/N) Σ_x ĝ_x‖² of a count-table estimator over the N independent prompts."""
    gsq = np.sum(st["c"] ** 2, -1)
    mo = exact.moments(table, G, st["V"], gsq, st["S2"], st["e_wz2"])
    mean = (mo.kappa[:, None] * pb.to_global(st["c"])).sum(0)
    N = len(gsq)
    return float((np.sum(mo.second_moment - mo.kappa**2 * gsq) + mean @ mean) / N**2)


def lemma11_exact(pb: Problem, theta, G: int) -> float:
    """E‖ĝ_paper − U_std‖² / E‖U_std‖² for the batch mean over prompts; NaN if some V ∈ {0, 1}."""
    st = state(pb, theta)
    if np.any(st["sigma2"] <= 0):
        return np.nan
    s = np.arange(G, dtype=np.float64)
    inv = 1.0 / np.sqrt(st["sigma2"])[:, None]
    ustat = exact.Table((G - 1 - s) / (G - 1) * inv, -s / (G - 1) * inv, G, name="ustat-std")
    return _batch_second(pb, st, difference_table(G, st["V"]), G) / _batch_second(pb, st, ustat, G)
