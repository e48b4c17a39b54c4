"""Optimal group size at a fixed per-step budget N = B·G (theory §3–4, [U] arXiv 2603.01162 Thm 7).

A mini-batch of B iid prompts with G responses each and the leave-one-out (RLOO / "GRPO-type")
estimator has exact MSE (theory §3)

    MSE(B, G) = c1/B + E_X[MSE_loo(X; G)]/B,   E_X MSE_loo(X; G) = C2/G + C3/(G (G − 1)),

    c1 = E_X ‖g_X − g‖²                (prompt variance of the per-prompt gradient)
    C2 = E_X trΣ_or(X)                 (oracle-baseline variance of one sample)
    C3 = E_X [S2(X) σ²(X) + ‖g_X‖²]    (the price of estimating the baseline from the group)

so at a fixed budget N = B·G (G a divisor of N, G ≥ 2 for loo)

    MSE_N(G) = [c1·G + C2 + C3/(G − 1)] / N.

N only scales the curve, so its minimiser does not depend on N.  h(G) = c1·G + C3/(G − 1) is
convex on G > 1 with the continuous minimiser

    G*_exact = 1 + √(C3/c1),

and the best divisor of N is one of the two divisors around it.  The paper expands the same MSE
as c1/B + c2/(BG) + c3/(BG²), i.e. c2 = C2, c3 = C3 to order 1/G², and predicts
G*_paper = √(c3/c1) = √(C3/c1): exactly one less than the exact continuous minimiser.

Inputs are an environment truth with the field names of :class:`gpolab.envs.bandit.BanditTruth`
(``prompt_probs, V, sigma2, g_local, S2, tr_sigma_oracle, c1``).  When S2 is a Monte Carlo
estimate (field ``S2_se``, the arithmetic surrogate), its standard error is carried into C2, C3
and G* by the delta method (C2 and C3 are linear in S2: ∂C2/∂S2(x) = f(x) V(x)², ∂C3/∂S2(x) =
f(x) σ²(x)); c1 is exact in both environments.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from gpolab import validate
from gpolab.theory import mse


@dataclasses.dataclass(frozen=True)
class Constants:
    """c1, C2, C3 at one θ and their standard errors (0 where exact)."""

    c1: float
    C2: float
    C3: float
    C2_se: float = 0.0
    C3_se: float = 0.0

    @property
    def g_star_exact(self) -> float:
        """Continuous minimiser 1 + √(C3/c1) of the exact fixed-N MSE."""
        return 1.0 + math.sqrt(self.C3 / self.c1)

    @property
    def g_star_paper(self) -> float:
        """The paper's prediction √(c3/c1) with c3 = C3 ([U] Thm 7)."""
        return math.sqrt(self.C3 / self.c1)

    @property
    def g_star_se(self) -> float:
        """Standard error of G* from the Monte Carlo error of C3 (same for both forms)."""
        return self.C3_se / (2.0 * math.sqrt(self.C3 * self.c1))

    def to_dict(self) -> dict:
        return {
            **dataclasses.asdict(self),
            "g_star_exact": self.g_star_exact,
            "g_star_paper": self.g_star_paper,
            "g_star_se": self.g_star_se,
        }


def constants(truth) -> Constants:
    """c1, C2, C3 of a truth (theory §3), in float64, with the error a Monte Carlo S2 carries."""
    f = np.asarray(truth.prompt_probs, dtype=np.float64)
    V = np.asarray(truth.V, dtype=np.float64)
    sigma2 = np.asarray(truth.sigma2, dtype=np.float64)
    S2 = np.asarray(truth.S2, dtype=np.float64)
    gsq = np.sum(np.asarray(truth.g_local, dtype=np.float64) ** 2, axis=-1)
    C2 = float(f @ np.asarray(truth.tr_sigma_oracle, dtype=np.float64))
    C3 = float(f @ (S2 * sigma2 + gsq))
    se = getattr(truth, "S2_se", None)
    if se is None:
        C2_se = C3_se = 0.0
    else:
        se = np.asarray(se, dtype=np.float64)
        C2_se = float(np.sqrt(np.sum((f * V**2 * se) ** 2)))
        C3_se = float(np.sqrt(np.sum((f * sigma2 * se) ** 2)))
    return Constants(float(truth.c1), C2, C3, C2_se, C3_se)


def check_budget(N: int, G: int | None = None, field: str = "N") -> None:
    """N an integer ≥ 2 and, if given, G a divisor of N with G ≥ 2 (loo needs two responses)."""
    validate.integer(field, N, 2)
    if G is not None:
        allowed = divisors(N)
        if G not in allowed:
            raise validate.ConfigError(
                f"G: got {G!r} for {field}={N}; allowed: a divisor of {field} that is >= 2 "
                f"({', '.join(map(str, allowed))})"
            )


def divisors(N: int, minimum: int = 2) -> tuple[int, ...]:
    """Every divisor G ≥ ``minimum`` of N, ascending."""
    return tuple(G for G in range(minimum, N + 1) if N % G == 0)


def fixed_n_mse(c: Constants, N: int, G: int | float) -> float:
    """[c1·G + C2 + C3/(G − 1)] / N: exact MSE of the loo mini-batch with B = N/G iid prompts."""
    return (c.c1 * G + c.C2 + c.C3 / (G - 1)) / N


def fixed_n_mse_se(truth, N: int, G: int) -> float:
    """Standard error of the exact fixed-N MSE from a Monte Carlo S2 (0 where S2 is exact): the
    per-prompt derivative f(x)(V² + σ²/(G − 1))/N, errors independent across prompts."""
    return mse.mse_se(truth, "loo", G, N // G)


def best_divisor(c: Constants, N: int) -> int:
    """The exact minimiser of :func:`fixed_n_mse` over the divisors G ≥ 2 of N: one of the two
    divisors around :attr:`Constants.g_star_exact` (h is convex), checked by comparing them."""
    check_budget(N)
    ds = divisors(N)
    g = c.g_star_exact
    below = [d for d in ds if d <= g]
    above = [d for d in ds if d >= g]
    candidates = ([below[-1]] if below else []) + ([above[0]] if above else [])
    return min(candidates, key=lambda G: (fixed_n_mse(c, N, G), G))


def brute_force_best(c: Constants, N: int) -> int:
    """Argmin of :func:`fixed_n_mse` over every divisor (reference for :func:`best_divisor`)."""
    return min(divisors(N), key=lambda G: (fixed_n_mse(c, N, G), G))


# ---------------------------------------------------------------- a finite prompt pool
#
# (gpolab's derivation.)  A pool of P prompts p_1..p_P (a fixed multiset, e.g. P iid draws from
# f); a step takes B = N/G of them WITHOUT replacement.  At a fixed θ, with the pool's own
# constants (f replaced by the pool's empirical weights: c1_P = (1/P) Σ_j ‖g_pj − ḡ_P‖², C2_P,
# C3_P), the sample mean of B of P items has variance (c1_P/B)·(P − B)/(P − 1) (the
# finite-population correction), the groups add E_pool MSE_loo/B as before, and
#
#     E‖ĝ − ḡ_P‖² = c1_P·(P·G/N − 1)/(P − 1) + [C2_P + C3_P/(G − 1)]/N
#                 = [c1_P·P/(P − 1)·G + C2_P + C3_P/(G − 1)]/N − c1_P/(P − 1).
#
# The last term does not depend on G, so the continuous minimiser is
# 1 + √(C3_P·(P − 1)/(c1_P·P)), independent of N; only B ≤ P (G ≥ N/P) can move the best
# divisor with N.  Against the population gradient g the MSE adds ‖ḡ_P − g‖², the same for
# every G and N.  Averaged over iid pools (E c1_P = c1·(P − 1)/P, E‖ḡ_P − g‖² = c1/P) the
# population-target MSE is exactly the infinite-pool c1/B + E MSE_loo/B: B distinct items of an
# iid pool are B iid draws.


def pool_divisors(N: int, P: int) -> tuple[int, ...]:
    """The divisors G ≥ 2 of N whose step fits in a pool of P prompts (B = N/G ≤ P)."""
    return tuple(G for G in divisors(N) if N // G <= P)


def check_pool(N: int, P: int, G: int | None = None) -> None:
    """P ≥ 1 and, if given, G a divisor of N with B = N/G ≤ P (a step holds at most P distinct
    prompts)."""
    validate.integer("pool", P, 1)
    check_budget(N, G)
    if G is not None and N // G > P:
        allowed = ", ".join(map(str, pool_divisors(N, P)))
        raise validate.ConfigError(
            f"G: got {G!r} for N={N} and pool={P}: B = N/G = {N // G} prompts per step exceed "
            f"the pool; allowed: a divisor G >= 2 of N with N/G <= pool ({allowed})"
        )


def pool_mse(c: Constants, N: int, G: int | float, P: int) -> float:
    """c1·(P − N/G)/((N/G)·(P − 1)) + [C2 + C3/(G − 1)]/N: exact MSE against the pool's own
    gradient of the loo mini-batch with B = N/G of the pool's P prompts drawn without
    replacement; ``c`` holds the pool's constants (P = 1: no prompt term, B = 1)."""
    B = N / G
    fpc = (P - B) / (P - 1) if P > 1 else 0.0
    return c.c1 * fpc / B + (c.C2 + c.C3 / (G - 1)) / N


def g_star_pool(c: Constants, P: int) -> float:
    """Continuous minimiser 1 + √(C3·(P − 1)/(c1·P)) of :func:`pool_mse` (∞ for P = 1)."""
    return 1.0 + math.sqrt(c.C3 * (P - 1) / (c.c1 * P)) if P > 1 else math.inf


def pool_best_divisor(c: Constants, N: int, P: int) -> int:
    """The exact minimiser of :func:`pool_mse` over :func:`pool_divisors` (brute force: at most
    a few dozen divisors)."""
    return min(pool_divisors(N, P), key=lambda G: (pool_mse(c, N, G, P), G))


def training_rule(c: Constants, N: int, P: int = 0) -> dict:
    """The group size a user can apply at a per-step budget N and a pool of P prompts (P = 0:
    prompts drawn afresh, an infinite pool), with the reason in one sentence (gpolab's rule):
    the per-step MSE optimum over the feasible divisors, :func:`best_divisor` (P = 0) or
    :func:`pool_best_divisor` (P ≥ 1; ``c`` then holds the pool's constants, which is what a
    run's own log measures).  A finite pool moves the answer only through B = N/G ≤ P.

    Returns ``{"G", "reason", "g_star", "min_G", "feasible"}``: the divisor, the sentence, the
    continuous optimum (1 + √(C3/c1), or the pool law's), the smallest feasible G and every
    feasible divisor.  The experiment ``groupsize_budget`` checks it against the G that reaches a
    target success rate with the fewest rollouts in SGD training (claim gpolab-budget-rule)."""
    check_budget(N)
    validate.integer("pool", P, 0)
    if P == 0:
        G, g_star, feasible = best_divisor(c, N), c.g_star_exact, divisors(N)
    else:
        G, g_star, feasible = pool_best_divisor(c, N, P), g_star_pool(c, P), pool_divisors(N, P)
    min_G = feasible[0]
    pool = "prompts drawn afresh every step" if P == 0 else f"a pool of P = {P} prompts"
    law = "1 + sqrt(C3/c1)" if P == 0 else "1 + sqrt(C3 (P - 1)/(c1 P))"
    if P and min_G > 2 and G == min_G and g_star < min_G:
        why = (
            f"the per-step optimum {law} = {g_star:.3g} would need more than P prompts per step "
            f"(B = N/G); the smallest group that fits, G = {min_G} (B = {N // min_G}), is the "
            "best feasible one"
        )
    else:
        why = (
            f"of the divisors of N it has the least per-step gradient MSE, next to the optimum "
            f"{law} = {g_star:.3g} (c1 = {c.c1:.3g}, C3 = {c.C3:.3g}), which does not depend on N"
        )
    reason = f"at N = {N} rollouts per step and {pool}, use G = {G}: {why}"
    return {"G": G, "reason": reason, "g_star": g_star, "min_G": min_G, "feasible": feasible}
