"""Framework float32 arithmetic of GRPO's std normalization, as NeMo-RL (leave-one-out) and verl
(grpo_vectorized before and after PR#6348, canonical grpo) run it, beside its exact value, and an
exact enumeration of the groups of G rewards on a finite grid.

NeMo-RL (``NVIDIA-NeMo/RL`` at 7ea279ab, 2026-08-22), ``use_leave_one_out_baseline`` and
``normalize_rewards`` both on:

* ``nemo_rl/algorithms/utils.py::calculate_baseline_and_std_per_prompt`` (L104–197): per prompt,
  M = 1 − I (G × G, float32), n = G − 1 (a float32 tensor), b = (M @ r)/n, q = (M @ r²)/n and
  std = sqrt((q − b²)·(n/(n − 1))).nan_to_num(0): the leave-one-out std in one pass,
  sqrt(E[x²] − E[x]²), in float32;
* ``nemo_rl/algorithms/advantage_estimator.py::GRPOAdvantageEstimator.compute_advantage``
  (L69–97): A = r − b, and where std > 0, A / (std + 1e-6).

On a leave-one-out set of equal non-dyadic rewards (the singleton of a (G−1)-vs-1 split) the true
std is 0 but q − b² is a float32 residue: when it is positive the singleton's advantage is divided
by ~1e-4 (NeMo-RL PR#4161; PR#4158's [0, 0.95 × 7] gives −2075.39).  NeMo-RL PR#4158 (merged
2026-09-19, after 7ea279ab) normalizes only where ``(std > 0) & ~is_trivial_distribution``, the flag
True where the rewards feeding a sample's std (its leave-one-out peers) are all one value.

Arithmetic: numpy float32, whose elementwise +, −, ×, ÷ and sqrt are IEEE (correctly rounded), as
torch's +, −, ×, ÷ are (torch 2.13's CPU float32 sqrt was found 1 ulp off on some inputs); not
JAX, where XLA rewrites a division by a broadcast into a multiplication by its reciprocal (not
IEEE).  The matmul's reduction order is an assumption: one accumulator, column
index ascending (acc ← acc + M_ij·r_j; M_ij ∈ {0, 1}, so a fused multiply–add rounds the same).
It reproduces PR#4158's printed intermediates for [0, 0.95 × 7] digit for digit (b = 0.9499999,
q = 0.90250003, b² = 0.90249985, std = 0.0004567453, A = −2075.39).  A BLAS or GPU kernel may sum
in another order (several accumulators, a tree): the residue then differs in its last bits and
can change sign (a negative residue gives NaN → 0: no normalization), so a claim built on these
functions depends on the scale of the residue, never on its last bit.  A masked peer contributes
an exact +0, so a leave-one-out set of equal rewards sums the same wherever the singleton sits.

The exact reference (:func:`exact_advantages`) is NeMo's formula in exact arithmetic on the same
float32 rewards (b and the sample variance of the n peers, std = 0 exactly where the peers are all
equal, then the same rule with the same 1e-6), evaluated in float64 (exact up to float64
rounding; where std = 0 the pre- and post-#4158 rules coincide).

verl (``verl-project/verl``, :data:`VERL_SOURCE`), GRPO with ``norm_adv_by_std_in_grpo``:
``grpo_vectorized`` takes each group's statistics from ``verl/utils/groupwise.py::group_mean_std``
(float32 ``index_add_`` sums: count, s1 = Σr, mean = s1/count) and returns (r − mean)/(std + 1e-6).
Before verl PR#6348 (merged 2026-05-14 as 1cc810c1a; b178a3cd, v0.7.0-125) it called
``group_mean_std(eps=epsilon)``, whose std was sqrt(max((Σr² − s1²/count)/(count − 1), 1e-6)): a
one-pass variance floored at 1e-6, so σ ≥ 10⁻³ and a group whose rewards differ by 1e-5 gets
advantages ~100× too small (the PR's rewards 1.0 and 1.00001: ±0.005001788 where canonical
``grpo`` gives ±0.6196008).  After it (1dda039b9c63, verl 0.9.1): ``eps=0.0`` and the centred
two-pass variance Σ(r − mean)²/(count − 1).  Canonical ``grpo``
(``compute_grpo_outcome_advantage``) divides by ``torch.std`` + 1e-6.  The three are ported in
torch's CPU order (``index_add_`` sequential; ``torch.sum``'s lanes, :func:`_torch_sum32`) and
reproduce verl's torch code bit for bit on every group of G = 2 … 16 on this lab's grids, up to
torch's sqrt (an ulp or two in A); the PR's printed advantages to the digit.  A GPU sums in
another order: the claims rest on the shrink's scale, never on a last bit.  The exact reference
(:func:`verl_exact`): the same rule on the same float32 rewards in float64, std 0 on equal ones.
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import numpy as np

from gpolab import validate

EPSILON = 1e-6  # GRPOAdvantageEstimator.compute_advantage's epsilon (L92)
SOURCE = (
    "NVIDIA-NeMo/RL 7ea279ab nemo_rl/algorithms/utils.py::calculate_baseline_and_std_per_prompt "
    "(L104-197), advantage_estimator.py::GRPOAdvantageEstimator.compute_advantage (L69-97); "
    "PR#4158's mask (std > 0) & ~is_trivial_distribution"
)
SLACK = 1e-3  # relative: float32 rounding of a genuine std moves |A| far less (4e-5 at most here)


def _rewards32(rewards) -> np.ndarray:
    r = np.asarray(rewards, np.float32)
    if r.ndim < 1 or r.shape[-1] < 2:
        raise validate.ConfigError(
            f"rewards: got shape {r.shape}; allowed: (..., G) with G >= 2 (a group)"
        )
    validate.finite_array("rewards", r)
    return r


def loo_sums(x: np.ndarray) -> np.ndarray:
    """(..., G) float32 S_i = Σ_j M_ij x_j, M = 1 − I, as one accumulator over j ascending
    (the assumed order of NeMo's ``torch.matmul(baseline_mask_matrix, ...)``)."""
    x = np.asarray(x, np.float32)
    G = x.shape[-1]
    keep = 1 - np.eye(G, dtype=np.float32)  # M_ij: row i, column j
    acc = np.zeros(x.shape, np.float32)
    for j in range(G):
        acc = acc + keep[:, j] * x[..., j : j + 1]  # float32: each add rounds once
    return acc


def nemo_baseline_std(rewards) -> tuple[np.ndarray, np.ndarray]:
    """NeMo 7ea279ab's leave-one-out (baseline, std), each (..., G) float32, every sample valid:
    b = (M @ r)/n, q = (M @ r²)/n, std = sqrt((q − b²)·(n/(n − 1))) with NaN → 0, n = G − 1."""
    r = _rewards32(rewards)
    n = np.float32(r.shape[-1] - 1)
    b = loo_sums(r) / n
    q = loo_sums(r * r) / n  # torch.pow(r, 2): the correctly rounded square
    with np.errstate(invalid="ignore", divide="ignore"):
        var = (q - b * b) * (n / (n - np.float32(1)))  # G = 2: 0·inf = NaN → 0 below
        std = np.sqrt(var)
    finite = np.finfo(np.float32).max
    return b, np.nan_to_num(std, nan=0.0, posinf=finite, neginf=-finite).astype(np.float32)


def trivial(rewards) -> np.ndarray:
    """PR#4158's ``is_trivial_distribution``: (..., G) bool, True where sample i's leave-one-out
    peers r_j (j ≠ i) are all one value (compared exactly)."""
    r = _rewards32(rewards)
    G = r.shape[-1]
    lo = np.min(np.where(np.eye(G, dtype=bool), np.inf, r[..., None, :]), axis=-1)
    hi = np.max(np.where(np.eye(G, dtype=bool), -np.inf, r[..., None, :]), axis=-1)
    return lo == hi


def nemo_advantages(rewards, *, mask_trivial: bool = False) -> np.ndarray:
    """NeMo's GRPO advantages (..., G) float32: A = r − b, divided by (std + 1e-6) where std > 0
    (7ea279ab; ``mask_trivial``: where ``(std > 0) & ~is_trivial_distribution``, PR#4158)."""
    r = _rewards32(rewards)
    b, std = nemo_baseline_std(r)
    a = r - b
    normalize = std > 0
    if mask_trivial:
        normalize &= ~trivial(r)
    return np.where(normalize, a / (std + np.float32(EPSILON)), a).astype(np.float32)


def exact_advantages(rewards) -> np.ndarray:
    """NeMo's rule in exact arithmetic on the float32 rewards (..., G), in float64: b the mean of
    the G − 1 peers, std their sample std (0 exactly where they are all equal), A = r − b,
    divided by (std + 1e-6) where std > 0.  Sums of a few float32 rewards of one scale are exact
    in float64; the squares' sums round at 1e-16 relative."""
    r32 = _rewards32(rewards)
    r = r32.astype(np.float64)
    n = r.shape[-1] - 1
    s1 = r.sum(-1, keepdims=True) - r
    s2 = (r * r).sum(-1, keepdims=True) - r * r
    b = s1 / n
    if n == 1:
        var = np.zeros_like(r)
    else:
        var = np.maximum(s2 - s1 * s1 / n, 0.0) / (n - 1)
    std = np.where(trivial(r32), 0.0, np.sqrt(var))
    return np.where(std > 0, (r - b) / (std + EPSILON), r - b)


def compositions(G: int, K: int) -> np.ndarray:
    """(C(G + K − 1, K − 1), K) int64: every way to put G responses on K reward values (counts,
    each row summing to G), in lexicographic order."""
    validate.integer("G", G, 1)
    validate.integer("K", K, 1)
    rows = [
        np.diff((-1, *bars, G + K - 1)) - 1
        for bars in itertools.combinations(range(G + K - 1), K - 1)
    ]
    return np.asarray(rows, np.int64).reshape(-1, K)


def multinomial_probs(counts, p) -> np.ndarray:
    """(N,) float64 P(counts) = G!/Π c_v! Π p_v^{c_v} (exact at p_v = 0: 0^0 = 1)."""
    c = np.asarray(counts, np.int64)
    p = np.asarray(p, np.float64)
    G = int(c[0].sum())
    log_coef = math.lgamma(G + 1) - np.sum([[math.lgamma(k + 1) for k in row] for row in c], 1)
    with np.errstate(divide="ignore"):
        logp = np.where(c > 0, c * np.log(np.where(p > 0, p, 1.0)), 0.0)
        zero = np.any((c > 0) & (p[None, :] == 0), axis=1)
    return np.where(zero, 0.0, np.exp(log_coef + logp.sum(1)))


def groups(values, counts) -> np.ndarray:
    """(N, G) float32 groups, row n holding counts[n, v] copies of values[v] in the grid's order
    (the canonical arrangement; a leave-one-out set of equal values sums the same in any)."""
    v = np.asarray(values, np.float32)
    c = np.asarray(counts, np.int64)
    ends = np.cumsum(c, axis=1)
    G = int(ends[0, -1])
    idx = (np.arange(G)[None, :, None] >= ends[:, None, :]).sum(-1)
    return v[idx]


class GridResult(NamedTuple):
    """One (grid, G): over every group (composition) of G rewards on the grid, with P from the
    per-value probabilities ``p``: the exact maximum |A| (``bound``), the largest float32 |A|
    before and after PR#4158's mask, P(some member's float32 |A| exceeds the bound by more than
    :data:`SLACK`) before and after, P(some member's equal peers leave a positive float32 std),
    the group where the float32 |A| is largest, and the compositions' total probability."""

    compositions: int
    bound: float
    max_pre: float
    max_post: float
    p_spike_pre: float
    p_spike_post: float
    p_residue: float
    worst: str
    p_total: float


def _grid(values, G: int, p) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The grid's float32 values, every composition of G on it and each one's probability under
    the per-value probabilities ``p`` (default uniform)."""
    v = np.asarray(values, np.float32)
    p = np.full(v.size, 1.0 / v.size) if p is None else np.asarray(p, np.float64)
    if p.shape != v.shape or np.any(p < 0) or abs(p.sum() - 1) > 1e-12:
        raise validate.ConfigError(f"p: got {p}; allowed: one probability per value, sum 1")
    counts = compositions(G, v.size)
    return v, counts, multinomial_probs(counts, p)


def _label(values, counts) -> str:
    """A group as value×count, e.g. ``0×1, 0.35×7``."""
    return ", ".join(f"{float(x):g}×{int(c)}" for x, c in zip(values, counts, strict=True) if c)


def enumerate_grid(values, G: int, p=None, chunk: int = 65_536) -> GridResult:
    """Every group of G rewards on the grid ``values`` (:func:`compositions`), exactly, with
    per-value probabilities ``p`` (default uniform): :class:`GridResult`."""
    v, counts, prob = _grid(values, G, p)
    per = {k: [] for k in ("exact", "pre", "post", "residue")}
    for s in range(0, len(counts), chunk):
        r = groups(v, counts[s : s + chunk])
        _, std = nemo_baseline_std(r)
        per["exact"].append(np.abs(exact_advantages(r)).max(1))
        per["pre"].append(np.abs(nemo_advantages(r)).max(1))
        per["post"].append(np.abs(nemo_advantages(r, mask_trivial=True)).max(1))
        per["residue"].append(np.any(trivial(r) & (std > 0), axis=1))
    exact, pre, post, residue = (np.concatenate(per[k]) for k in per)
    bound = float(exact.max())
    over = bound * (1 + SLACK)
    worst = _label(v, counts[int(np.argmax(pre))])
    return GridResult(
        compositions=len(counts),
        bound=bound,
        max_pre=float(pre.max()),
        max_post=float(post.max()),
        p_spike_pre=float(prob[pre > over].sum()),
        p_spike_post=float(prob[post > over].sum()),
        p_residue=float(prob[residue].sum()),
        worst=worst,
        p_total=float(prob.sum()),
    )


def splits(values, G: int) -> dict[str, np.ndarray]:
    """Every (G−1)-vs-1 split on the grid: the singleton u among G − 1 copies of v (u ≠ v), its
    float32 advantage before and after PR#4158's mask, its exact one, and the float32 std of its
    equal peers (the residue).  Columns of equal length (one per ordered pair)."""
    v = np.asarray(values, np.float32)
    pairs = [(u, w) for u in v for w in v if u != w]
    if not pairs:
        raise validate.ConfigError("values: allowed: a grid with at least two values")
    u, w = (np.asarray(x, np.float32) for x in zip(*pairs, strict=True))
    r = np.concatenate([u[:, None], np.repeat(w[:, None], G - 1, axis=1)], axis=1)
    return dict(
        single=u.astype(np.float64),
        others=w.astype(np.float64),
        residue=nemo_baseline_std(r)[1][:, 0].astype(np.float64),
        a_pre=nemo_advantages(r)[:, 0].astype(np.float64),
        a_post=nemo_advantages(r, mask_trivial=True)[:, 0].astype(np.float64),
        a_exact=exact_advantages(r)[:, 0],
    )


def dyadic(values, bits: int = 8) -> bool:
    """Whether every float32 value of the grid is a multiple of 2^-bits (sums of a few such values
    and their squares are exact in float32: no residue)."""
    x = np.asarray(values, np.float32).astype(np.float64) * 2.0**bits
    return bool(np.all(x == np.round(x)))


# verl's grpo_vectorized before and after PR#6348, and canonical grpo (see the module docstring).

VERL_SOURCE = (
    "verl-project/verl verl/trainer/ppo/core_algos.py::compute_grpo_vectorized_outcome_advantage "
    "and verl/utils/groupwise.py::group_mean_std at b178a3cd (before PR#6348) and 1dda039b9c63 "
    "(after: 1cc810c1a, PR#6348); core_algos.py::compute_grpo_outcome_advantage (canonical grpo)"
)


def _index_sum32(x: np.ndarray) -> np.ndarray:
    """(..., G) float32 → (..., 1): 0 + x_0 + x_1 + … in float32, one accumulator, j ascending:
    ``torch.zeros(G).index_add_(0, gidx, x)`` on CPU (sequential over the index)."""
    acc = np.zeros((*x.shape[:-1], 1), np.float32)
    for j in range(x.shape[-1]):
        acc = acc + x[..., j : j + 1]
    return acc


def _torch_sum32(x: np.ndarray) -> np.ndarray:
    """(..., G) float32 → (..., 1): ``torch.sum`` of a contiguous float32 row on CPU, in its order
    (ATen's cascade_sum, checked bit for bit against torch 2.13 for G ≤ 512; above, torch adds a
    cascade level).  G < 8: four scalar accumulators p_k = x_k + x_{k+4} + …, the tail into p_0,
    then ((p_0 + p_1) + p_2) + p_3.  G ≥ 8: four accumulators of 8-lane vectors (vector i into
    accumulator i mod 4, the vectors past the last group of four into the first), summed
    ((v_0 + v_1) + v_2) + v_3 lane-wise; then 0 + the scalar tail in order + the 8 lanes in
    order."""
    G = x.shape[-1]
    z = np.zeros((*x.shape[:-1], 1), np.float32)
    if G < 8:
        p = [z] * 4
        for i in range(G):
            k = i % 4 if i < G // 4 * 4 else 0
            p[k] = p[k] + x[..., i : i + 1]
        return ((p[0] + p[1]) + p[2]) + p[3]
    nv = G // 8
    p = [np.zeros((*x.shape[:-1], 8), np.float32)] * 4
    for i in range(nv):
        k = i % 4 if i < nv // 4 * 4 else 0
        p[k] = p[k] + x[..., 8 * i : 8 * i + 8]
    lanes = ((p[0] + p[1]) + p[2]) + p[3]
    return _index_sum32(np.concatenate([x[..., 8 * nv :], lanes], axis=-1))


def verl_vectorized(rewards, *, fixed: bool = True) -> np.ndarray:
    """verl ``grpo_vectorized`` advantages (..., G) float32, one group per leading index (G ≥ 2):
    A = (r − mean)/(std + 1e-6), from ``group_mean_std`` (count, s1 = Σr and mean = s1/count in
    float32).  ``fixed`` (1dda039b9c63, after PR#6348): var = Σ(r − mean)²/(count − 1), std =
    sqrt(max(var, 0)).  Before (b178a3cd): var = (Σr² − s1·s1/count)/(count − 1) in one pass and
    std = sqrt(max(var, 1e-6)), the floor that shrinks a low-variance group's advantages."""
    r = _rewards32(rewards)
    count = np.float32(r.shape[-1])
    s1 = _index_sum32(r)
    mean = s1 / count
    if fixed:
        var_num = _index_sum32((r - mean) * (r - mean))
    else:
        var_num = _index_sum32(r * r) - (s1 * s1) / count
    var = var_num / (count - np.float32(1))
    std = np.sqrt(np.maximum(var, np.float32(0.0 if fixed else EPSILON)))
    return ((r - mean) / (std + np.float32(EPSILON))).astype(np.float32)


def verl_grpo(rewards) -> np.ndarray:
    """verl canonical ``grpo`` advantages (..., G) float32, one group per leading index (G ≥ 2):
    A = (r − mean)/(std + 1e-6), mean = ``torch.mean`` (:func:`_torch_sum32` over G, float32),
    std = ``torch.std`` (ddof 1), which torch's CPU kernel (``std_var_all_cpu``) computes as
    sqrt(Σ(r − mean)²/(G − 1)) in float64 around that float32 mean, rounded to float32 once."""
    r = _rewards32(rewards)
    mean = _torch_sum32(r) / np.float32(r.shape[-1])
    dev = r.astype(np.float64) - mean.astype(np.float64)
    std = np.sqrt((dev * dev).sum(-1, keepdims=True) / (r.shape[-1] - 1)).astype(np.float32)
    return ((r - mean) / (std + np.float32(EPSILON))).astype(np.float32)


def verl_exact(rewards) -> np.ndarray:
    """verl's GRPO rule in exact arithmetic on the float32 rewards (..., G), in float64: A =
    (r − r̄)/(s + 1e-6), s the sample std (ddof 1; exactly 0 on equal rewards)."""
    r = _rewards32(rewards).astype(np.float64)
    dev = r - r.mean(-1, keepdims=True)
    return dev / (np.std(r, axis=-1, ddof=1, keepdims=True) + EPSILON)


class VerlResult(NamedTuple):
    """One (grid, G), over every group of G rewards on the grid with P from ``p``: the exact
    largest |A| (``bound``); the largest float32 |A| of ``grpo_vectorized`` before PR#6348
    (``max_floored``), after it (``max_fixed``) and of canonical ``grpo`` (``max_grpo``); over the
    groups with a non-zero exact advantage, the smallest ratio of the group's largest floored |A|
    to its largest exact |A| (``shrink``; 1: no shrink) and P(that ratio < 1/2) (``p_shrink2``);
    the largest |A_fixed − A_grpo| over every member of every group (``fix_vs_grpo``); the group
    with the smallest ratio and the probabilities' sum."""

    compositions: int
    bound: float
    max_floored: float
    max_fixed: float
    max_grpo: float
    shrink: float
    p_shrink2: float
    fix_vs_grpo: float
    worst: str
    p_total: float


def enumerate_verl(values, G: int, p=None, chunk: int = 65_536) -> VerlResult:
    """Every group of G rewards on the grid ``values`` (:func:`compositions`, the canonical
    arrangement), exactly, with per-value probabilities ``p`` (default uniform):
    :class:`VerlResult`."""
    v, counts, prob = _grid(values, G, p)
    per = {k: [] for k in ("exact", "floored", "fixed", "grpo", "diff")}
    for s in range(0, len(counts), chunk):
        r = groups(v, counts[s : s + chunk])
        fixed, grpo = verl_vectorized(r), verl_grpo(r)
        per["exact"].append(np.abs(verl_exact(r)).max(1))
        per["floored"].append(np.abs(verl_vectorized(r, fixed=False)).max(1))
        per["fixed"].append(np.abs(fixed).max(1))
        per["grpo"].append(np.abs(grpo).max(1))
        per["diff"].append(np.abs(fixed.astype(np.float64) - grpo).max(1))
    exact, floored, fixed, grpo, diff = (np.concatenate(per[k]) for k in per)
    moves = exact > 0
    ratio = np.where(moves, floored / np.where(moves, exact, 1.0), np.inf)
    i = int(np.argmin(ratio))
    return VerlResult(
        compositions=len(counts),
        bound=float(exact.max()),
        max_floored=float(floored.max()),
        max_fixed=float(fixed.max()),
        max_grpo=float(grpo.max()),
        shrink=float(ratio[i]) if moves.any() else math.nan,
        p_shrink2=float(prob[ratio < 0.5].sum()),
        fix_vs_grpo=float(diff.max()),
        worst=_label(v, counts[i]) if moves.any() else "",
        p_total=float(prob.sum()),
    )
