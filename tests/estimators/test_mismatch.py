"""Mismatch corrections (gpolab.estimators.mismatch): per-token coefficients against hand
computations, the aggregations, the on-policy control, overflow, jit and bad keywords.

Every case gives d_t = log π(y_t) − log μ(y_t) as log of a round ratio, so each coefficient is a
product of the numbers in its comment.  Padding tokens carry garbage log-probs (d = 87 there)."""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpolab.estimators import mismatch as mm
from gpolab.validate import ConfigError

L = math.log


def _sig(z):
    return 1.0 / (1.0 + math.exp(-z))


def _inputs(A, d, mask, dtype=jnp.float32):
    """(A, logp, logp_mu, mask) with log π = −1 on real tokens and d = log π − log μ; padding
    gets log π = 7, log μ = −80."""
    d, mask = np.asarray(d, float), np.asarray(mask, float)
    logp = np.where(mask > 0, -1.0, 7.0)
    logp_mu = np.where(mask > 0, logp - d, -80.0)
    return tuple(jnp.asarray(x, dtype) for x in (A, logp, logp_mu, mask))


def _phi(log_w, k, lam):
    """VESPO's φ(w) = exp(λ + k log w − λ w) (TRL's get_gamma_weights)."""
    return math.exp(lam + k * log_w - lam * math.exp(log_w))


# three sequences: token ratios ρ = e^d and sequence ratios Π ρ (TRL and verl IS)
A3 = [1.0, -2.0, 0.5]
D3 = [[L(6), L(0.6), 0.0], [L(1.5), L(1.6), 0.0], [L(0.25), L(0.4), L(0.625)]]
M3 = [[1, 1, 1], [1, 1, 0], [1, 1, 1]]  # ρ: [6, .6, 1], [1.5, 1.6], [.25, .4, .625]
#                                          Π ρ: 3.6, 2.4, 0.0625 (sum of log diffs)
# rejection sampling: ρ [4, .25, 1.5] (Π 1.5), [1.5, 2.2] (Π 3.3), [1.1, 1, 1] (Π 1.1)
A_RS = [1.0, -1.0, 2.0]
D_RS = [[L(4), L(0.25), L(1.5)], [L(1.5), L(2.2), 0.0], [L(1.1), 0.0, 0.0]]
S3 = [[0, 0, 0], [0, 0, 0], [0, 0, 0]]
F_SEQ0 = [[1, 1, 1], [0, 0, 0], [0, 0, 0]]
E = math.exp

# id: (name, A, d, mask, overrides, coef, kept (None: mask), flagged, inversion changes the case)
CASES = {
    "none": ("none", A3, D3, M3, {}, [[1, 1, 1], [-2, -2, 0], [0.5] * 3], None, S3, False),
    # C_max 3: 6 -> 3; A·ρ elsewhere (−2·1.5, −2·1.6; .5·.25, .5·.4, .5·.625)
    "trl/token_truncate": (
        "trl/token_truncate", A3, D3, M3, {}, [[3, 0.6, 1], [-3, -3.2, 0], [0.125, 0.2, 0.3125]],
        None, [[1, 0, 0], [0, 0, 0], [0, 0, 0]], True,
    ),
    # C_min .3, C_max 1.55: 6 -> 1.55, 1.6 -> 1.55, .25 -> .3
    "trl/token_truncate min": (
        "trl/token_truncate", A3, D3, M3, {"clip_min": 0.3, "clip_max": 1.55},
        [[1.55, 0.6, 1], [-3, -3.1, 0], [0.15, 0.2, 0.3125]], None,
        [[1, 0, 0], [0, 1, 0], [1, 0, 0]], True,
    ),
    "trl/token_mask": (
        "trl/token_mask", A3, D3, M3, {}, [[0, 0.6, 1], [-3, -3.2, 0], [0.125, 0.2, 0.3125]],
        None, [[1, 0, 0], [0, 0, 0], [0, 0, 0]], True,
    ),
    # Π ρ: 3.6 -> 3; −2·2.4; .5·.0625
    "trl/sequence_truncate": (
        "trl/sequence_truncate", A3, D3, M3, {}, [[3] * 3, [-4.8, -4.8, 0], [0.03125] * 3], None,
        F_SEQ0, True,
    ),
    # only Π ρ > 3 is zeroed (3.6); 0.0625 stays (no lower bound); a mean of log diffs would
    # give 3.6^(1/3) = 1.53 and zero nothing
    "trl/sequence_mask": (
        "trl/sequence_mask", A3, D3, M3, {}, [[0] * 3, [-4.8, -4.8, 0], [0.03125] * 3], None,
        F_SEQ0, True,
    ),
    "trl/sequence_mask min": (
        "trl/sequence_mask", A3, D3, M3, {"clip_min": 0.1}, [[0] * 3, [-4.8, -4.8, 0], [0] * 3],
        None, [[1, 1, 1], [0, 0, 0], [1, 1, 1]], True,
    ),
    # VESPO: A·φ(w), w = exp Σ_t clamp(log ρ̃_t, log 1e-8, 20); seq 1: 6 masked (1e-8) or -> 3
    "trl/vespo_token_mask": (
        "trl/vespo_token_mask", A3, D3, M3, {},
        [[_phi(L(1e-8), 2, 3)] * 3, [-2 * _phi(L(2.4), 3, 2)] * 2 + [0],
         [0.5 * _phi(L(0.0625), 2, 3)] * 3], None, [[1, 0, 0], [0, 0, 0], [0, 0, 0]], True,
    ),
    "trl/vespo_token_truncate": (
        "trl/vespo_token_truncate", A3, D3, M3, {},
        [[_phi(L(1.8), 2, 3)] * 3, [-2 * _phi(L(2.4), 3, 2)] * 2 + [0],
         [0.5 * _phi(L(0.0625), 2, 3)] * 3], None, [[1, 0, 0], [0, 0, 0], [0, 0, 0]], True,
    ),
    # ratio π_θ/π_old = 1 capped at ε_high = 5 -> 1: the sequence_mask numbers
    "trl/cispo": (
        "trl/cispo", A3, D3, M3, {}, [[0] * 3, [-4.8, -4.8, 0], [0.03125] * 3], None, F_SEQ0,
        True,
    ),
    # TRL's fallback ε_high = 0.2 caps the ratio 1 at 0.2: every real token flagged
    "trl/cispo 0.2": (
        "trl/cispo", A3, D3, M3, {"eps_high": 0.2}, [[0] * 3, [-0.96, -0.96, 0], [0.00625] * 3],
        None, M3, True,
    ),
    # U = 2: 6 -> 2
    "verl/token_tis": (
        "verl/token_tis", A3, D3, M3, {}, [[2, 0.6, 1], [-3, -3.2, 0], [0.125, 0.2, 0.3125]],
        None, [[1, 0, 0], [0, 0, 0], [0, 0, 0]], True,
    ),
    # 3.6 -> 2, 2.4 -> 2
    "verl/seq_tis": (
        "verl/seq_tis", A3, D3, M3, {}, [[2] * 3, [-4, -4, 0], [0.03125] * 3], None,
        [[1, 1, 1], [1, 1, 0], [0, 0, 0]], True,
    ),
    # [0.5, 5]: 6, .25, .4 -> 0 (zeros stay in the denominator: kept = mask)
    "verl/token_icepop": (
        "verl/token_icepop", A3, D3, M3, {}, [[0, 0.6, 1], [-3, -3.2, 0], [0, 0, 0.3125]], None,
        [[1, 0, 0], [0, 0, 0], [1, 1, 0]], True,
    ),
    # 3.6 and 2.4 inside [0.5, 5], 0.0625 -> 0
    "verl/seq_icepop": (
        "verl/seq_icepop", A3, D3, M3, {}, [[3.6] * 3, [-4.8, -4.8, 0], [0] * 3], None,
        [[0, 0, 0], [0, 0, 0], [1, 1, 1]], True,
    ),
    # geometric means 3.6^(1/3) = 1.53, 2.4^(1/2) = 1.55, 0.0625^(1/3) = 0.40: OpenRLHF's
    # [0.5, 5] keeps the first two with their untruncated ρ (6 stays 6), NeMo's [0.999, 1.002] none
    "openrlhf/seq_mask_tis": (
        "openrlhf/seq_mask_tis", A3, D3, M3, {}, [[6, 0.6, 1], [-3, -3.2, 0], [0] * 3], None,
        [[0, 0, 0], [0, 0, 0], [1, 1, 1]], True,
    ),
    "nemo/seq_mask_tis": (
        "nemo/seq_mask_tis", A3, D3, M3, {}, [[0] * 3] * 3, None, M3, False,
    ),
    # k1 = −log ρ in [log .5, log 2] <=> ρ in [.5, 2]: 4, .25, 2.2 rejected (kept 0)
    "verl/rs_token_k1": (
        "verl/rs_token_k1", A_RS, D_RS, M3, {}, [[0, 0, 1], [-1, 0, 0], [2] * 3],
        [[0, 0, 1], [1, 0, 0], [1, 1, 1]], [[1, 1, 0], [0, 1, 0], [0, 0, 0]], False,
    ),
    # "0.4_5.0": −log ρ in [log .4, log 5] <=> ρ in [.2, 2.5] (verl's mirror): only 4 rejected;
    # read as ρ in [.4, 5] it would reject .25 and keep 4
    "verl/rs_token_k1 L_U": (
        "verl/rs_token_k1", A_RS, D_RS, M3, {"rs_threshold": "0.4_5.0"},
        [[0, 1, 1], [-1, -1, 0], [2] * 3], [[0, 1, 1], [1, 1, 0], [1, 1, 1]],
        [[1, 0, 0], [0, 0, 0], [0, 0, 0]], True,
    ),
    # Π ρ in [.5, 2]: 1.5 and 1.1 kept, 3.3 rejected
    "verl/rs_seq_sum_k1": (
        "verl/rs_seq_sum_k1", A_RS, D_RS, M3, {}, [[1] * 3, [0] * 3, [2] * 3],
        [[1] * 3, [0] * 3, [1] * 3], [[0] * 3, [1, 1, 0], [0] * 3], False,
    ),
    # mean k3 = mean(ρ − 1 − log ρ): seq 2: (0.1 − log 1.1)/3 = 0.00156 <= 0.01 kept; the others
    # (0.78, 0.25) rejected
    "verl/rs_seq_mean_k3": (
        "verl/rs_seq_mean_k3", A_RS, D_RS, M3, {}, [[0] * 3, [0] * 3, [2] * 3],
        [[0] * 3, [0] * 3, [1] * 3], [[1] * 3, [1, 1, 0], [0] * 3], False,
    ),
    # geometric mean 1.0005 kept, 1.0015 (= e^{0.003/2}) rejected by [0.999, 1.001]
    "verl/rs_seq_mean_k1": (
        "verl/rs_seq_mean_k1", [1.0, 1.0], [[5e-4, 5e-4], [3e-3, 0.0]], [[1, 1], [1, 1]], {},
        [[1, 1], [0, 0]], [[1, 1], [0, 0]], [[0, 0], [1, 1]], False,
    ),
    # sequence TIS 2 times RS Π ρ in [.5, 2]: 1.5·1, rejected, 1.1·2
    "verl/seq_is_rs": (
        "verl/seq_is_rs", A_RS, D_RS, M3, {}, [[1.5] * 3, [0] * 3, [2.2] * 3],
        [[1] * 3, [0] * 3, [1] * 3], [[0] * 3, [1, 1, 0], [0] * 3], True,
    ),
    # s = exp(mean d); [1 − 3e-4, 1 + 4e-4]: A>0 s=1.0002 in; A>0 s=1.001 cut; A<0 s=1.001 kept
    # (PPO max rule); A<0 s=0.999 cut; log s = 11 > 10: verl's clamp cuts the gradient
    "verl/gspo": (
        "verl/gspo", [1.0, 1.0, -1.0, -1.0, 1.0],
        [[2e-4, 2e-4], [1e-3, 1e-3], [1e-3, 1e-3], [-1e-3, -1e-3], [11.0, 11.0]], [[1, 1]] * 5, {},
        [[E(2e-4)] * 2, [0, 0], [-E(1e-3)] * 2, [0, 0], [0, 0]], None,
        [[0, 0], [1, 1], [0, 0], [1, 1], [1, 1]], True,
    ),
    # log-space clip ±0.4 by sign: A>0 x̂ = [.1, .4, −.8] (token 1 cut), ratio e^{−0.1};
    # A<0 x̂ = [.1, .6, −.4] (token 2 cut), ratio e^{0.1}; coef = Ā·ratio/T
    "verl/geo_mean": (
        "verl/geo_mean", [1.0, -2.0], [[0.1, 0.6, -0.8]] * 2, [[1, 1, 1]] * 2, {},
        [[E(-0.1) / 3, 0, E(-0.1) / 3], [-2 * E(0.1) / 3, -2 * E(0.1) / 3, 0]], None,
        [[0, 1, 0], [0, 0, 1]], True,
    ),
    # clip(r, 1 − 10, 1.2): 2 -> 1.2, .1 and 1.1 kept; d = 25 -> e^20 -> 1.2
    "verl/cispo": (
        "verl/cispo", [1.0, -1.0], [[L(2), L(0.1), L(1.1)], [25.0, 0.0, 0.0]], [[1, 1, 1]] * 2,
        {}, [[1.2, 0.1, 1.1], [-1.2, -1, -1]], None, [[1, 0, 0], [1, 0, 0]], True,
    ),
    # 4σ(z)σ(−z)·r, z = τ(r − 1): r = 2, τ = 1 (A>0) or 1.05 (A<0); r = 1 gives 1; |d| > 20: 0
    "verl/sapo": (
        "verl/sapo", [1.0, -1.0, 1.0], [[L(2), 0.0], [L(2), 0.0], [25.0, 0.0]], [[1, 1]] * 3, {},
        [[8 * _sig(1) * _sig(-1), 1], [-8 * _sig(1.05) * _sig(-1.05), -1], [0, 1]], None,
        [[0, 0], [0, 0], [1, 0]], True,
    ),
    # PPO on r = π/μ, ε 0.2, dual clip 3: A>0 [1.1 in, 1.5 cut, .5 kept]; A<0 [1.5 kept,
    # 4 > 3 dual-clipped, .5 cut]; A>0 d = −25: the ±20 clamp cuts the gradient
    "verl/bypass_ppo_clip": (
        "verl/bypass_ppo_clip", [1.0, -1.0, 1.0],
        [[L(1.1), L(1.5), L(0.5)], [L(1.5), L(4), L(0.5)], [-25.0, 0.0, 0.0]], [[1, 1, 1]] * 3,
        {}, [[1.1, 0, 0.5], [-1.5, 0, 0], [0, 1, 1]], None, [[0, 1, 0], [0, 1, 1], [1, 0, 0]],
        True,
    ),
}  # fmt: skip


def test_every_registry_entry_has_a_hand_case():
    assert {case[0] for case in CASES.values()} == set(mm.REGISTRY)


@pytest.mark.parametrize("case", CASES)
def test_coefficients_match_the_hand_computation(case):
    name, A, d, mask, over, coef, kept, flagged, inverts = CASES[case]
    args = _inputs(A, d, mask)
    got = mm.correction(name, *args, **over)
    np.testing.assert_allclose(got.coef, np.asarray(coef, float), rtol=2e-6, atol=1e-7)
    np.testing.assert_array_equal(got.kept, np.asarray(mask if kept is None else kept, float))
    np.testing.assert_array_equal(got.flagged, np.asarray(flagged, bool))
    if inverts:  # the case has power against a μ/π inversion: swapping the two gives other numbers
        _, logp, logp_mu, m = args
        swapped = mm.correction(name, args[0], logp_mu, logp, m, **over).coef
        assert not np.allclose(swapped, got.coef, rtol=1e-3)


def test_aggregations_put_each_framework_denominator():
    """TRL dapo: / all 8 real tokens, a masked sequence included; verl token-mean after RS: / 6
    kept tokens (seq 1 rejected); GSPO: / (N·T_i); GMPO: / N (its 1/T is in the coefficient)."""
    args = _inputs(A3, D3, M3)
    w, share = mm.estimate_weights("trl/sequence_mask", *args)
    np.testing.assert_allclose(w, np.asarray(CASES["trl/sequence_mask"][5]) / 8, rtol=2e-6)
    assert float(share) == pytest.approx(3 / 8)  # sequence 0: 3 of 8 real tokens
    w, share = mm.estimate_weights("verl/rs_seq_sum_k1", *_inputs(A_RS, D_RS, M3))
    np.testing.assert_allclose(w, np.asarray(CASES["verl/rs_seq_sum_k1"][5]) / 6, rtol=2e-6)
    assert float(share) == pytest.approx(2 / 8)
    for name, n_t in (("verl/gspo", 5 * 2), ("verl/geo_mean", 2)):
        _, A, d, mask, _, coef, *_ = CASES[name]
        w, _ = mm.estimate_weights(name, *_inputs(A, d, mask))
        np.testing.assert_allclose(w, np.asarray(coef) / n_t, rtol=2e-6, atol=1e-8)


@pytest.mark.parametrize("name", mm.REGISTRY)
def test_on_policy_every_correction_is_the_advantage_times_its_aggregation(name):
    """μ = π: every ratio is 1, nothing is flagged, and w = A/Σ tokens (token aggregations) or
    A/(N·T_i) (per-sequence ones); the inversion cases above give this control its power."""
    key_a, key_p = jax.random.split(jax.random.key(0))
    A = jax.random.normal(key_a, (2, 2)) + jnp.asarray([[0.5, -0.5], [1.0, -1.0]])
    logp = -jax.random.uniform(key_p, (2, 2, 5), minval=0.1, maxval=3.0)
    lengths = np.asarray([[3, 5], [1, 4]])
    mask = jnp.asarray(np.arange(5) < lengths[..., None], jnp.float32)
    w, share = mm.estimate_weights(name, A, logp, logp, mask)
    per_seq = mm.REGISTRY[name].aggregation in ("seq-mean-token-mean", "seq-mean")
    factor = 1.0 / (4 * lengths[..., None]) if per_seq else 1.0 / lengths.sum()
    np.testing.assert_allclose(w, np.asarray(A)[..., None] * np.asarray(mask) * factor, rtol=2e-6)
    assert float(share) == 0.0


def test_verl_clamps_the_sequence_sum_and_each_token_at_20(x64):
    """d = [25, −10]: token weights exp(20), exp(−10); sequence exp(clamp(25 − 10)) = exp(15)
    (the tokens are not clamped first: that would give exp(10)).  d = [15, 15]: the sequence
    sum 30 is clamped, exp(20), where the tokens give exp(15) each."""
    args = _inputs([1.0, 1.0], [[25.0, -10.0], [15.0, 15.0]], [[1, 1], [1, 1]], jnp.float64)
    tok = mm.correction("verl/token_tis", *args, is_threshold=1e12).coef
    seq = mm.correction("verl/seq_tis", *args, is_threshold=1e12).coef
    np.testing.assert_allclose(tok, [[E(20), E(-10)], [E(15), E(15)]], rtol=1e-12)
    np.testing.assert_allclose(seq, [[E(15), E(15)], [E(20), E(20)]], rtol=1e-12)


@pytest.mark.parametrize("name", mm.REGISTRY)
def test_overflow_and_padding_garbage_never_give_nan(name):
    """float32, Σ d = ±200 or ±2000 (exp overflows without a clamp), A = 0 included."""
    A = [1.0, -1.0, 0.0, 1.0, -1.0]
    d = [[100.0, 100.0, 0], [-1000.0, -1000.0, 0], [100.0, 100.0, 0], [1000, 1000, 0],
         [1000, 1000, 0]]  # fmt: skip
    w, share = mm.estimate_weights(name, *_inputs(A, d, [[1, 1, 0]] * 5))
    assert not np.isnan(np.asarray(w)).any() and np.isfinite(float(share))
    if name != "verl/geo_mean":  # verl's GMPO has no clamp: A<0, mean d = 1000 gives −inf
        assert np.isfinite(np.asarray(w)).all()


def test_trl_sequence_overflow_is_what_trl_computes():
    """Σ d = 200: exp = inf in float32; mask: inf > 3 -> 0; truncate: clamp(inf, max=3) = 3."""
    args = _inputs([2.0, 0.0], [[100.0, 100.0], [100.0, 100.0]], [[1, 1], [1, 1]])
    np.testing.assert_array_equal(mm.correction("trl/sequence_mask", *args).coef, 0.0)
    np.testing.assert_array_equal(mm.correction("trl/sequence_truncate", *args).coef,
                                  [[6.0, 6.0], [0.0, 0.0]])  # fmt: skip


def test_float64_and_traced_thresholds_without_retracing(x64):
    args = _inputs(A3, D3, M3, jnp.float64)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def f(A, logp, logp_mu, mask, low, high):
        return mm.estimate_weights("verl/token_icepop", A, logp, logp_mu, mask,
                                   is_threshold=(low, high)).w  # fmt: skip

    w = f(*args, jnp.float64(0.5), jnp.float64(5.0))
    assert {mm.estimate_weights(name, *args).w.dtype for name in mm.REGISTRY} == {w.dtype}
    assert w.dtype == jnp.float64
    np.testing.assert_allclose(w, np.asarray(CASES["verl/token_icepop"][5]) / 8, rtol=1e-12)
    w = f(*args, jnp.float64(0.2), jnp.float64(7.0))  # 6 and .25 now kept; .4 too
    np.testing.assert_allclose(w[0, 0], 6.0 / 8, rtol=1e-12)


@pytest.mark.parametrize(
    "name, over, message",
    [
        ("trl/nope", {}, "correction: got 'trl/nope'; allowed: none, trl/token_truncate"),
        ("verl/gspo", {"eps": 0.1}, "verl/gspo keyword: got 'eps'; allowed: eps_low, eps_high"),
        ("none", {"clip_max": 2.0}, "none keyword: got 'clip_max'; allowed: (no keywords)"),
        ("trl/token_mask", {"clip_max": -1.0}, "trl/token_mask clip_max: got -1.0"),
        ("trl/token_mask", {"clip_min": 4.0}, "allowed: lower < upper"),
        ("verl/token_icepop", {"is_threshold": 2.0}, "allowed: a pair (L, U) or 'L_U'"),
        ("verl/rs_token_k1", {"rs_threshold": "a_b"}, "allowed: 'L_U'"),
        ("verl/seq_tis", {"is_threshold": math.nan}, "allowed: a finite number"),
    ],
)
def test_bad_names_and_keywords_give_one_config_error(name, over, message):
    args = _inputs(A3, D3, M3)
    with pytest.raises(ConfigError) as err:
        mm.estimate_weights(name, *args, **over)
    assert message in str(err.value)


V1_BYPASS = "ppo/v1/trainer_base.py::PPOTrainer._compute_old_log_prob"


@pytest.mark.parametrize("name", ["verl/gspo", "verl/geo_mean", "verl/cispo", "verl/sapo"])
def test_verl_ratio_losses_cite_the_v1_bypass_that_runs_them_and_the_legacy_replacement(name):
    """verl 1dda039b9c63 runs these losses against μ: bypass mode under its default v1 trainer
    (trainer.use_v1 true) sets π_old := μ and keeps loss_mode's loss; only the legacy trainer
    replaces it (apply_bypass_mode).  Before: labelled gpolab's pairing (mm.gpolab_pairing)."""
    source = mm.REGISTRY[name].source
    assert V1_BYPASS in source and "trainer.use_v1 true" in source
    assert "use_v1 false" in source and "apply_bypass_mode" in source
    assert "does not run this loss" in source.split("legacy")[1]
    assert not hasattr(mm, "gpolab_pairing")
    bypass_ppo = mm.REGISTRY["verl/bypass_ppo_clip"].source
    assert V1_BYPASS in bypass_ppo and "compute_policy_loss_bypass_mode" in bypass_ppo
