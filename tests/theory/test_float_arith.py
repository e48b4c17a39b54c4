"""NeMo-RL's float32 leave-one-out std in numpy (gpolab.theory.float_arith): the reported scale of
the spike on non-dyadic rewards, no residue for binary rewards in any arrangement, the exact
reference against rational arithmetic, and the enumeration against a brute-force product over
arrangements.  No test reads a float32 result's last bit except where it pins the report's
printed digits."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from gpolab.theory import float_arith as fa
from gpolab.validate import ConfigError


def _split(v: float, G: int = 8, single: float = 0.0) -> np.ndarray:
    return np.asarray([[single] + [v] * (G - 1)], np.float32)


def test_the_seven_vs_one_split_on_0_35_gives_an_advantage_in_the_thousands():
    """NeMo-RL PR#4161: a 0 among seven 0.35 (and a 1 among them: 0.65/1.6e-4 ~ 4000)."""
    _, std = fa.nemo_baseline_std(_split(0.35))
    assert 1e-5 < std[0, 0] < 1e-3  # the residue: true std 0
    for single in (0.0, 1.0):
        a = fa.nemo_advantages(_split(0.35, single=single))[0, 0]
        assert 1_000 < abs(a) < 10_000
        assert np.sign(a) == np.sign(single - 0.35)
        exact = fa.exact_advantages(_split(0.35, single=single))[0, 0]
        assert exact == pytest.approx(single - 0.35, abs=1e-7)  # unnormalized: std is 0
        masked = fa.nemo_advantages(_split(0.35, single=single), mask_trivial=True)[0, 0]
        assert masked == pytest.approx(exact, abs=1e-6)


def test_the_reduction_order_reproduces_pr4158s_printed_intermediates():
    """PR#4158's description, [0, 0.95 × 7]: mean 0.9499999, std 0.0004567453, A = −2075.39 (the
    digits the report prints: this pins the assumed order, one accumulator, to the report)."""
    b, std = fa.nemo_baseline_std(_split(0.95))
    assert b[0, 0] == pytest.approx(0.9499999, abs=5e-8)
    assert std[0, 0] == pytest.approx(0.0004567453, rel=1e-6)
    assert fa.nemo_advantages(_split(0.95))[0, 0] == pytest.approx(-2075.39, abs=0.01)


@pytest.mark.parametrize("G", range(2, 17))
def test_binary_rewards_leave_no_residue_in_any_arrangement(G):
    """Every one of the 2^G binary groups, in every arrangement: the std of equal peers is exactly
    0, the mask changes nothing, and the float32 advantage is the exact one to float32 rounding."""
    r = np.asarray(list(itertools.product((0.0, 1.0), repeat=G)), np.float32)
    _, std = fa.nemo_baseline_std(r)
    flat = fa.trivial(r)
    assert np.all(std[flat] == 0.0)
    pre, post = fa.nemo_advantages(r), fa.nemo_advantages(r, mask_trivial=True)
    assert np.array_equal(pre, post)
    exact = fa.exact_advantages(r)
    assert np.max(np.abs(pre - exact) / np.maximum(1.0, np.abs(exact))) < 1e-5


def test_dyadic_grids_have_no_residue_and_non_dyadic_ones_do():
    assert fa.dyadic((0, 0.25, 0.5, 0.75, 1)) and not fa.dyadic((0, 0.35, 1))
    r = np.asarray(list(itertools.product((0.0, 0.25, 0.5, 0.75, 1.0), repeat=5)), np.float32)
    _, std = fa.nemo_baseline_std(r)
    assert np.all(std[fa.trivial(r)] == 0.0)
    residues = [fa.nemo_baseline_std(_split(v))[1][0, 0] for v in (0.3, 0.35, 0.6, 0.7, 0.95)]
    assert all(x > 0 for x in residues)


def _exact_fraction(group, i) -> float:
    """NeMo's rule in exact rational arithmetic on the float32 values."""
    x = [Fraction(float(v)) for v in group]
    peers = x[:i] + x[i + 1 :]
    n = len(peers)
    b = sum(peers) / n
    var = sum((p - b) ** 2 for p in peers) / (n - 1) if n > 1 else Fraction(0)
    a = x[i] - b
    return float(a / (math.sqrt(var) + fa.EPSILON)) if var > 0 else float(a)


def test_the_exact_reference_matches_rational_arithmetic():
    rng = np.random.default_rng(0)
    grid = np.asarray([0, 0.1, 0.35, 0.7, 0.95, 1.0], np.float32)
    for G in (2, 3, 4, 8, 16):
        for _ in range(20):
            g = rng.choice(grid, G)
            got = fa.exact_advantages(g[None])[0]
            want = [_exact_fraction(g, i) for i in range(G)]
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    # equal peers: std exactly 0, the advantage r - b exactly
    assert fa.exact_advantages(_split(0.35))[0, 0] == -float(np.float32(0.35))


@pytest.mark.parametrize("G, K", [(1, 3), (4, 1), (4, 3), (8, 5), (16, 2)])
def test_compositions_are_every_way_once(G, K):
    c = fa.compositions(G, K)
    assert c.shape == (math.comb(G + K - 1, K - 1), K)
    assert np.all(c.sum(1) == G) and np.all(c >= 0)
    assert len({tuple(row) for row in c}) == len(c)


@pytest.mark.parametrize("p", [None, (0.5, 0.2, 0.3), (0.0, 0.4, 0.6)])
def test_the_probabilities_sum_to_one(p):
    p = np.full(3, 1 / 3) if p is None else np.asarray(p)
    for G in (1, 4, 8, 16):
        assert fa.multinomial_probs(fa.compositions(G, 3), p).sum() == pytest.approx(1, abs=1e-12)


def _arrangements(values, G: int, p) -> tuple[np.ndarray, np.ndarray]:
    """Every arrangement of G rewards on the grid (K^G rows, float32) and its product
    probability (values equally likely where ``p`` is None)."""
    v = np.asarray(values, np.float32)
    pv = np.full(v.size, 1 / v.size) if p is None else np.asarray(p)
    idx = np.asarray(list(itertools.product(range(v.size), repeat=G)))
    return v[idx], np.prod(pv[idx], axis=1)


@pytest.mark.parametrize(
    "values, G, p",
    [
        ((0.0, 0.35, 1.0), 8, (0.2, 0.7, 0.1)),  # the spike: seven 0.35
        ((0.0, 0.3, 0.6, 0.9), 4, (0.1, 0.2, 0.3, 0.4)),  # 0.9 spikes at G = 4
        ((0.0, 0.25, 1.0), 6, None),  # dyadic: none
    ],
)
def test_the_enumeration_matches_a_brute_force_product_over_arrangements(values, G, p):
    """Every arrangement of G rewards (K^G of them, each with its product probability) gives the
    same bound, largest |A| and spike probabilities as the composition enumeration: the spike
    does not depend on where the singleton sits."""
    res = fa.enumerate_grid(values, G, p)
    r, prob = _arrangements(values, G, p)
    exact = np.abs(fa.exact_advantages(r)).max(1)
    pre = np.abs(fa.nemo_advantages(r)).max(1)
    post = np.abs(fa.nemo_advantages(r, mask_trivial=True)).max(1)
    bound = exact.max()
    assert res.bound == pytest.approx(bound, rel=1e-12)
    assert res.max_pre == pytest.approx(pre.max(), rel=1e-5)
    assert res.max_post == pytest.approx(post.max(), rel=1e-5)
    over = bound * (1 + fa.SLACK)
    assert res.p_spike_pre == pytest.approx(prob[pre > over].sum(), abs=1e-12)
    assert res.p_spike_post == pytest.approx(prob[post > over].sum(), abs=1e-12)
    assert res.p_total == pytest.approx(1.0, abs=1e-12)
    if fa.dyadic(values):
        assert res.p_spike_pre == 0 and res.p_residue == 0
    else:
        assert res.p_spike_pre > 0 and res.max_pre > 100 * res.bound and res.p_spike_post == 0


def test_splits_are_every_ordered_pair():
    s = fa.splits((0.0, 0.35, 1.0), 8)
    assert len(s["single"]) == 6
    row = np.flatnonzero((s["single"] == 0) & np.isclose(s["others"], 0.35))[0]
    assert abs(s["a_pre"][row]) > 1000 and s["a_post"][row] == pytest.approx(-0.35, abs=1e-6)


@pytest.mark.parametrize("bad", [[1.0], [[0.0, np.nan]], 0.5])
def test_bad_rewards_are_one_error(bad):
    with pytest.raises(ConfigError, match="rewards"):
        fa.nemo_advantages(bad)


# verl's grpo_vectorized before and after PR#6348, and canonical grpo


def test_verl_pr6348s_printed_advantages_digit_for_digit():
    """PR#6348's repro, scores 1.0 and 1.0000100135803223 (float32 of 1 + 1e-5): grpo_vectorized
    before the fix printed critic/advantages ±0.005001788027584553, canonical grpo
    ±0.6196008324623108 (the float32 values, printed as doubles); its minimal example adds the
    group [2.0, 2.00001] with the same advantages (2.00001 is 2 + 42·2^-22: the same gap)."""
    r = np.asarray([[1.0, 1.00001], [2.0, 2.00001]], np.float32)
    assert float(r[0, 1]) == 1.0000100135803223
    floored = fa.verl_vectorized(r, fixed=False)
    assert np.all(np.abs(floored).astype(np.float64) == 0.005001788027584553)
    for a in (fa.verl_vectorized(r), fa.verl_grpo(r)):
        assert np.all(np.abs(a).astype(np.float64) == 0.6196008324623108)
        np.testing.assert_array_equal(np.sign(a), [[-1, 1], [-1, 1]])
    np.testing.assert_allclose(fa.verl_exact(r), fa.verl_grpo(r), rtol=1e-6)


def test_torchs_summation_order():
    """``torch.sum`` of a float32 row on CPU (torch 2.13, checked there): G < 8 four scalar
    accumulators, G ≥ 8 eight lanes; index_add_ is sequential.  With e = 2^-24 (half an ulp of
    1): [e, e, e, e, 1] sums sequentially to 4e + 1 = 1 + 2^-22 exactly, but torch pairs x_0 with
    x_4 (e + 1 = 1, a tie to even) and then adds each e to 1: 1.  [e × 8, 1]: sequentially
    1 + 2^-21; torch takes the tail 1 first and adds the 8 lanes one by one: 1."""
    e = 2.0**-24
    for x, sequential in (([e] * 4 + [1.0], 1 + 2**-22), ([e] * 8 + [1.0], 1 + 2**-21)):
        x = np.asarray([x], np.float32)
        assert fa._index_sum32(x)[0, 0] == sequential
        assert fa._torch_sum32(x)[0, 0] == 1.0
    x = np.random.default_rng(0).random((50, 8)).astype(np.float32)
    assert np.array_equal(fa._torch_sum32(x), fa._index_sum32(x))  # G = 8: one vector, in order


@pytest.mark.parametrize("G", [2, 3, 5, 8, 12])
def test_verls_floor_never_binds_on_binary_rewards(G):
    """Every binary group in every arrangement: k ones among G have var₁ = k(G − k)/(G(G − 1)) ≥
    1/G ≫ 1e-6 wherever the rewards differ, so the floored, fixed and canonical advantages are
    the exact ones to float32 rounding (equal rewards: 0 in all three)."""
    r = np.asarray(list(itertools.product((0.0, 1.0), repeat=G)), np.float32)
    exact = fa.verl_exact(r)
    for a in (fa.verl_vectorized(r, fixed=False), fa.verl_vectorized(r), fa.verl_grpo(r)):
        np.testing.assert_allclose(a, exact, rtol=1e-6, atol=1e-6)


def test_verls_floor_shrinks_a_low_variance_group_by_its_std_over_a_thousandth():
    """Below the floor σ = 10⁻³, so the floored advantage is the exact one times (s + ε)/(10⁻³ + ε):
    rewards 1.0 and 1.00001 at G = 2 have s = 1.0014e-5/√2 = 7.08e-6, a ratio of 0.00807 (the
    PR's "about 0.0081x"); 0.5 and 0.5005, s = 3.54e-4: 0.354 (to 1e-3: the float32 mean's
    rounding, 3e-8, moves each deviation of 2.5e-4 by 1.2e-4 of itself)."""
    for pair, s in (((1.0, 1.00001), 1.0013580322265625e-5 / math.sqrt(2)), ((0.5, 0.5005), None)):
        r = np.asarray([pair], np.float32)
        s = float(np.std(r.astype(np.float64), ddof=1)) if s is None else s
        ratio = np.abs(fa.verl_vectorized(r, fixed=False)) / np.abs(fa.verl_exact(r))
        np.testing.assert_allclose(ratio, (s + 1e-6) / (1e-3 + 1e-6), rtol=1e-3)


def test_verls_exact_reference_matches_rational_arithmetic():
    rng = np.random.default_rng(1)
    grid = np.asarray([0.5, 0.5005, 1.0, 1.00001, 0.35], np.float32)
    for G in (2, 3, 8, 16):
        for _ in range(10):
            g = rng.choice(grid, G)
            x = [Fraction(float(v)) for v in g]
            mean = sum(x) / G
            std = math.sqrt(sum((v - mean) ** 2 for v in x) / (G - 1))
            want = [float(v - mean) / (std + fa.EPSILON) for v in x]
            np.testing.assert_allclose(fa.verl_exact(g[None])[0], want, rtol=1e-9, atol=1e-15)
    assert np.all(fa.verl_exact(np.full((1, 8), 0.35, np.float32)) == 0)


@pytest.mark.parametrize(
    "values, G, p",
    [
        ((1.0, 1.00001), 6, None),  # the PR's scores: every mixed group shrunk ~150×
        ((0.5, 0.5005, 0.6), 4, (0.5, 0.3, 0.2)),  # 0.6 lifts var₁ over 1e-6: some groups spared
        ((0.0, 1.0), 5, (0.3, 0.7)),  # binary: none
    ],
)
def test_the_verl_enumeration_matches_a_brute_force_product_over_arrangements(values, G, p):
    """Every arrangement of G rewards with its product probability: the same bound, largest |A|
    and P(shrunk by more than 2×) as the composition enumeration."""
    res = fa.enumerate_verl(values, G, p)
    r, prob = _arrangements(values, G, p)
    exact = np.abs(fa.verl_exact(r)).max(1)
    floored = np.abs(fa.verl_vectorized(r, fixed=False)).max(1)
    moves = exact > 0
    ratio = floored[moves] / exact[moves]
    assert res.bound == pytest.approx(exact.max(), rel=1e-12)
    assert res.max_floored == pytest.approx(floored.max(), rel=1e-4)
    assert res.shrink == pytest.approx(ratio.min(), rel=1e-4)
    assert res.p_shrink2 == pytest.approx(prob[moves][ratio < 0.5].sum(), abs=1e-12)
    assert res.p_total == pytest.approx(1.0, abs=1e-12)
    assert res.fix_vs_grpo < 1e-3 * res.bound


@pytest.mark.parametrize("fn", [fa.verl_vectorized, fa.verl_grpo, fa.verl_exact])
def test_verls_bad_rewards_are_one_error(fn):
    with pytest.raises(ConfigError, match="rewards"):
        fn([1.0])
