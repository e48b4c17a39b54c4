"""DAPO dynamic sampling (verl ``filter_groups``) on binary rewards: exact draw counts and the
exact mean and MSE of the kept-groups gradient estimate (every derivation here is gpolab's).

What is modelled (read in verl-recipe 21892b92, the ``recipe`` submodule of verl b178a3cd,
``dapo/dapo_ray_trainer.py``, ``RayDAPOTrainer.fit``): each generation batch holds B prompts
(gen_batch_size = train_batch_size here) with G responses each; a group is kept when the std of
its metric is > 0 (or G = 1); kept groups are concatenated until at least B are kept, then the
batch is cut to its first B groups (``batch[:traj_bsz]``).  At ``max_num_gen_batches`` batches
with fewer than B kept, verl raises ``ValueError``; gpolab instead estimates from the groups it
kept (none: a zero gradient) and counts those steps (``cap_prob``).

Prompts are iid from f, so each drawn group is non-degenerate independently with probability

    q = 1 − Σ_x f(x) [V(x)^G + (1 − V(x))^G],

the kept count after n batches is Bin(nB, q), and with a cap of N_max batches

    E[batches] = Σ_{n=0}^{N_max−1} P(Bin(nB, q) < B),   P(cap) = P(Bin(N_max B, q) < B),
    k = min(B, Bin(N_max B, q))  groups kept.

Two costs without a cap (groups drawn per group kept):

* 1/q, the per-group rate (:data:`RATE_COLUMN`): a loop that keeps every non-degenerate group it
  draws (OpenRLHF's one-prompt-at-a-time replacement) pays exactly this;
* verl's loop pays more (:data:`LOOP_COLUMN`, :func:`uncapped_batches`): with T the draw index
  of the B-th kept group it draws N = ⌈T/B⌉ whole batches, keeps B and discards the surplus
  NB − T = (−T) mod B.  T = B + F, F ~ NegBin(B, q) failures, E T = B/q, so

      E[groups drawn per kept group] = E[N] = 1/q + E[(−F) mod B]/B,
      P(F ≡ j mod B) = (1/B) Σ_{k=0}^{B−1} ω^{−jk} φ(ω^k),   φ(z) = (q/(1 − (1 − q) z))^B,

  ω = e^{2πi/B}: the roots-of-unity filter of F's generating function φ, B terms, exact (no
  truncated series).  B = 1: 1/q; q → 0: 1/q + (B − 1)/(2B) (the surplus becomes uniform).

Given k, the kept groups are iid draws of a group conditioned on being non-degenerate (the
selection reads only the iid indicators): prompt x with probability f(x) q_x / q, q_x =
1 − V^G − (1 − V)^G.  With μ = E[ĝ | kept] and s = E[‖ĝ‖² | kept] (global coordinates), the
kept-groups estimate ĝ_dyn = (1/k) Σ_kept ĝ (0 when k = 0) has

    E ĝ_dyn = P(k ≥ 1) μ,
    E‖ĝ_dyn − g‖² = E[1/k; k ≥ 1] (s − ‖μ‖²) + P(k ≥ 1) ‖μ − g‖² + P(k = 0) ‖g‖².

For a count-table estimator (:mod:`gpolab.theory.exact`), the all-success group contributes
ĝ = (a1[G−1]/G) Σ_i W_i and the all-failure group (a0[0]/G) Σ_i W_i, so with h_1 = g_x = −h_0,

    E[ĝ_x; nondeg] = (κ_x − a1[G−1] V^{G−1} + a0[0] (1 − V)^{G−1}) g_x,
    E[‖ĝ_x‖²; nondeg] = E‖ĝ_x‖² − (1/G) [a1[G−1]² (e_wz2 V^{G−1} + (G−1) ‖g_x‖² V^{G−2})
                        + a0[0]² ((S2 − e_wz2) (1−V)^{G−1} + (G−1) ‖g_x‖² (1−V)^{G−2})].

Estimators whose degenerate groups get zero advantages (loo, mean, grpo: a1[G−1] = a0[0] = 0)
keep their plain moments, so without a cap μ = E[ĝ_plain]/q: dynamic sampling estimates the
same direction as plain sampling, scaled by 1/q (a step-size increase), for loo g/q exactly.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy.stats import binom

from gpolab import validate
from gpolab.theory import difficulty, exact


def nondegenerate_prob(truth, G: int) -> float:
    """q = 1 − Σ_x f(x) [V(x)^G + (1 − V(x))^G]: a drawn group (prompt from f) has two rewards."""
    if G == 1:  # verl keeps single-response groups (``len(metric_vals) == 1``)
        return 1.0
    return 1.0 - difficulty.degenerate_fraction_known(truth.V, truth.prompt_probs, G)


RATE_COLUMN = "theory_draws_per_nondegenerate_group"  # 1/q: per-group rate, no batches, no cap
LOOP_COLUMN = "theory_draws_per_kept_group_uncapped"  # verl's loop without a cap: E[N]


def uncapped_batches(q: float, B: int) -> float:
    """E[generation batches per step] = E[groups drawn per kept group] of verl's loop without a
    cap, for kept-probability ``q`` and B groups per batch (module docstring; inf at q = 0)."""
    validate.integer("B", B, 1)
    if q <= 0:
        return float("inf")
    k = np.arange(B)
    phi = (q / (1 - (1 - q) * np.exp(2j * np.pi * k / B))) ** B
    residue = np.real(np.exp(-2j * np.pi * np.outer(k, k) / B) @ phi) / B  # P(F ≡ j mod B)
    surplus = (-k) % B
    return 1.0 / q + float(np.clip(residue, 0.0, 1.0) @ surplus) / B


@dataclasses.dataclass(frozen=True)
class Draws:
    """Exact per-step counts of verl's loop with generation batches of B groups, cap N_max."""

    batches: float  # E[generation batches drawn]
    kept: float  # E[k], k = groups trained on
    cap_prob: float  # P(cap reached with fewer than B kept)
    inv_kept: float  # E[1/k; k ≥ 1]
    none_kept: float  # P(k = 0)
    per_kept: float  # E[groups drawn] / E[groups kept] (= E[batches] without a cap)


def draws(q: float, B: int, max_draws: int) -> Draws:
    """:class:`Draws` for kept-probability ``q``, B groups per batch and a cap of ``max_draws``
    batches (module docstring)."""
    validate.integer("B", B, 1)
    validate.integer("max_draws", max_draws, 1)
    n = np.arange(max_draws)
    batches = float(np.sum(binom.cdf(B - 1, n * B, q)))
    total = max_draws * B
    j = np.arange(total + 1)
    pmf = binom.pmf(j, total, q)
    k = np.minimum(j, B)
    inv = float(np.sum(pmf[1:] / k[1:]))
    kept = float(pmf @ k)
    per_kept = batches * B / kept if kept > 0 else float("inf")
    return Draws(batches, kept, float(binom.cdf(B - 1, total, q)), inv, float(pmf[0]), per_kept)


def nondegenerate_moments(truth, table, G: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per prompt (P,): q_x, κ_x^nd (E[ĝ_x; nondeg] = κ_x^nd g_x) and E[‖ĝ_x‖²; nondeg] of a
    count-table estimator (module docstring)."""
    V = np.asarray(truth.V, np.float64)
    gsq = np.sum(np.asarray(truth.g_local, np.float64) ** 2, axis=-1)
    S2, e_wz2 = (np.asarray(v, np.float64) for v in (truth.S2, truth.e_wz2))
    mo = exact.moments(table, G, V, gsq, S2, e_wz2)
    if G == 1:  # nothing is filtered
        return np.ones_like(V), mo.kappa, mo.second_moment
    a1, a0 = table.a1[..., G - 1], table.a0[..., 0]
    up, down = V ** (G - 1), (1 - V) ** (G - 1)
    kappa = mo.kappa - a1 * up + a0 * down
    drop = a1**2 * (e_wz2 * up + (G - 1) * gsq * V ** (G - 2))
    drop = drop + a0**2 * ((S2 - e_wz2) * down + (G - 1) * gsq * (1 - V) ** (G - 2))
    return 1 - V**G - (1 - V) ** G, kappa, mo.second_moment - drop / G


def kept_moments(truth, table, G: int) -> tuple[np.ndarray, float, float]:
    """(μ, s, q): mean (D,) and second moment of one kept group's estimate, global coordinates."""
    q_x, kappa, second = nondegenerate_moments(truth, table, G)
    f = np.asarray(truth.prompt_probs, np.float64)
    q = float(f @ q_x)
    mu = (f * kappa) @ exact.global_gradients(truth) / q
    return mu, float(f @ second) / q, q


def columns(truth, spec: str, G: int, B: int, max_draws: int, length=1, **shared) -> dict:
    """Exact columns of a dynamic-sampling row: draw counts for any estimator (with the cap;
    without it, verl's loop (:data:`LOOP_COLUMN`) and the per-group rate 1/q
    (:data:`RATE_COLUMN`)); mean, MSE and scaled MSE of the kept-groups estimate for count-table
    estimators (else NaN: :func:`gpolab.theory.exact.registry_table` decides, every check run)."""
    q = nondegenerate_prob(truth, G)
    d = draws(q, B, max_draws)
    out = {
        "theory_draws_per_kept_group": d.per_kept,
        RATE_COLUMN: 1.0 / q if q > 0 else float("inf"),
        LOOP_COLUMN: uncapped_batches(q, B),
        "theory_cap_reached_frac": d.cap_prob,
        "theory_kept_groups": d.kept,
        "theory_responses_per_step": d.batches * B * G,
    }
    table = exact.registry_table(spec, G, strict=False, length=length, **shared)
    nan = dict.fromkeys(("mse", "bias_sq", "scaled_mse", "kappa"), np.nan)
    nan = {f"theory_dyn_{k}": v for k, v in nan.items()}
    if not table.ok or q <= 0:
        return {**out, **nan}
    mu, s, _ = kept_moments(truth, table, G)
    g = np.asarray(truth.g, np.float64)
    hit = 1 - d.none_kept
    spread = d.inv_kept * (s - mu @ mu)
    mse = spread + hit * np.sum((mu - g) ** 2) + d.none_kept * (g @ g)
    dot, norm2 = hit * (mu @ g), spread + hit * (mu @ mu)
    return {
        **out,
        "theory_dyn_mse": float(mse),
        "theory_dyn_bias_sq": float(np.sum((hit * mu - g) ** 2)),
        "theory_dyn_scaled_mse": float(g @ g - dot**2 / norm2) if norm2 > 0 else float(g @ g),
        "theory_dyn_kappa": float(hit * (mu @ g) / (g @ g)) if g @ g > 0 else np.nan,
    }
