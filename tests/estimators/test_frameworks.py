"""Framework advantage estimators: hand-derived vectors, loop references that mirror each
framework's code structure (numpy, float64), options, and finiteness under jit."""

import zlib
from collections import defaultdict

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import comb

from gpolab.estimators import frameworks as F

SPEC = {s.name: s for s in F.SPECS}

# Common hand batch: group 0 = [2, 0, 1, 1] (mean 1, deviations [1, -1, 0, 0], ddof-1 variance
# (1 + 1)/3 = 2/3), group 1 = [5, 5, 5, 5] (degenerate).  Lengths in tokens beside it.
R = np.array([[2.0, 0.0, 1.0, 1.0], [5.0, 5.0, 5.0, 5.0]])
L = np.array([[1.0, 3.0, 2.0, 2.0], [4.0, 4.0, 4.0, 4.0]])
DEV = np.array([[1.0, -1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
S1 = np.sqrt(2 / 3)


def run(name, rewards, **kw):
    return np.asarray(SPEC[name].fn(jnp.asarray(rewards), **kw))


def close(got, want, rtol=1e-10, atol=1e-12):
    np.testing.assert_allclose(got, np.asarray(want, dtype=float), rtol=rtol, atol=atol)


# ----------------------------------------------------------------------------- 1. hand vectors


def test_verl_grpo_hand(x64):
    close(run("verl/grpo", R), DEV / (S1 + 1e-6))  # (r - mean)/(std + eps); degenerate 0
    close(run("verl/grpo", R, norm_adv_by_std_in_grpo=False), DEV)  # r - mean
    # singleton groups: verl sets mean 0, std 1 -> r/(1 + eps)
    close(run("verl/grpo", [[2.0], [-3.0]]), [[2 / (1 + 1e-6)], [-3 / (1 + 1e-6)]])


def test_verl_grpo_vectorized_hand(x64):
    close(run("verl/grpo_vectorized", R), DEV / (S1 + 1e-6))
    # [0, 1e-3]: mean 5e-4, ddof-1 var 2*(5e-4)^2 = 5e-7: no floor since verl PR#6348
    s = np.sqrt(5e-7) + 1e-6
    for name in ("verl/grpo_vectorized", "verl/grpo"):
        close(run(name, [[0.0, 1e-3]]), [[-5e-4 / s, 5e-4 / s]])
    close(run("verl/grpo_vectorized", [[2.0]]), [[2 / (1 + 1e-6)]])  # singleton: mean 0, std 1


def test_verl_pr6348_low_variance_group_as_reported():
    """verl PR#6348's run, float32: scores 1.0 and 1.0000100135803223 in a group.  As verl ships
    it, ±0.6196008 (its canonical grpo's value); b178a3cd's variance floor gave ±0.0050018, the
    ~100x shrink the PR reports (critic/advantages ±0.005001788 before, ±0.6196008 after)."""
    from gpolab.estimators.frameworks.verl import _verl_grpo

    r = jnp.asarray([[1.0, 1.0000100135803223]], jnp.float32)
    np.testing.assert_allclose(run("verl/grpo_vectorized", r)[0, 1], 0.6196008, rtol=1e-6)
    before = _verl_grpo(r, "verl/grpo_vectorized", 1e-6, True, 1e-6)
    np.testing.assert_allclose(before[0, 1], 0.005001788, rtol=1e-6)


def test_verl_rloo_hand(x64):
    close(run("verl/rloo", R), DEV * 4 / 3)  # G/(G-1) (r - mean)
    close(run("verl/rloo_vectorized", R), DEV * 4 / 3)
    close(run("verl/rloo", [[2.0], [-1.0]]), [[2.0], [-1.0]])  # loop: singleton untouched
    close(run("verl/rloo_vectorized", [[2.0], [-1.0]]), [[0.0], [0.0]])  # vectorized: 0


def test_verl_reinforce_plus_plus_baseline_hand(x64):
    # a = DEV; tokens N = 1+3+2+2+16 = 24; token mean m = (1*1 + 3*(-1))/24 = -1/12;
    # sum l (a - m)^2 = sum l a^2 - N m^2 = 4 - 1/6 = 23/6; unbiased var = 23/6/23 = 1/6
    # -> A = (a + 1/12) * sqrt(6) (the 1e-8 terms move it by ~1e-8 relative)
    want = (DEV + 1 / 12) * np.sqrt(6)
    close(run("verl/reinforce_plus_plus_baseline", R, lengths=L), want, rtol=1e-7)
    assert want[1, 0] != 0  # the degenerate group is not 0 after whitening
    # singleton groups: mean 0 so a = r; [[1], [3]], lengths 1, 1: m = 2, unbiased var 2
    # -> (r - 2)/sqrt(2)
    got = run("verl/reinforce_plus_plus_baseline", [[1.0], [3.0]], lengths=[[1.0], [1.0]])
    close(got, [[-1 / np.sqrt(2)], [1 / np.sqrt(2)]], rtol=1e-7)


def test_verl_opo_hand(x64):
    # row 0: b = (1*2 + 3*0 + 2*1 + 2*1)/8 = 0.75 -> [1.25, -0.75, 0.25, 0.25]; row 1: 0
    close(run("verl/opo", R, lengths=L), [[1.25, -0.75, 0.25, 0.25], [0, 0, 0, 0]])
    close(run("verl/opo", [[2.0]], lengths=[[3.0]]), [[2.0]])  # singleton: baseline 0


def test_verl_gpg_hand(x64):
    # batch of 8 responses, nonzero rewards 3 + 4 = 7 -> alpha = 8/7; A = alpha (r - mean)
    close(run("verl/gpg", R), DEV * 8 / 7)
    close(run("verl/gpg", R, f_norm=2.0), DEV * 4 / 7)
    # a second batch: [[1, 0], [0, 0]]: 1 nonzero of 4 -> alpha 4; group 0 dev +-0.5
    close(run("verl/gpg", [[1.0, 0.0], [0.0, 0.0]]), [[2.0, -2.0], [0.0, 0.0]])
    close(run("verl/gpg", np.zeros((2, 3))), np.zeros((2, 3)))  # no nonzero: alpha 6/1, A 0


def test_verl_grpo_passk_hand(x64):
    # row 0: top two 2, 1 -> (2 - 1)/(std + eps) on index 0 only; row 1: tie -> 0
    want = np.zeros((2, 4))
    want[0, 0] = 1 / (S1 + 1e-6)
    close(run("verl/grpo_passk", R), want)
    want[0, 0] = 1.0
    close(run("verl/grpo_passk", R, norm_adv_by_std_in_grpo=False), want)
    close(run("verl/grpo_passk", [[1.0, 1.0, 0.0]]), [[0.0, 0.0, 0.0]])  # tie at the top
    with pytest.raises(ValueError, match="at least 2"):
        run("verl/grpo_passk", [[1.0], [0.0]])


def test_verl_remax_hand(x64):
    close(run("verl/remax", R, greedy=[1.0, 5.0]), [[1, -1, 0, 0], [0, 0, 0, 0]])  # r - r_greedy


def test_trl_grpo_hand(x64):
    close(run("trl/grpo", R), DEV / (S1 + 1e-4))
    # batch: all 8 rewards have mean 3, squared deviations 1+9+4+4+4*4 = 34, ddof-1 var 34/7
    close(run("trl/grpo", R, scale_rewards="batch"), DEV / (np.sqrt(34 / 7) + 1e-4))
    close(run("trl/grpo", R, scale_rewards="none"), DEV)
    close(run("trl/grpo", R, scale_rewards=False), DEV)  # TRL maps False -> "none"
    close(run("trl/grpo", [[2.0], [7.0]]), [[0.0], [0.0]])  # G = 1: std 0, r - r = 0


def test_trl_rloo_hand(x64):
    close(run("trl/rloo", R), DEV * 4 / 3)  # r - mean of the other 3
    # normalize: advantages [4/3, -4/3, 0 x 6], mean 0, ddof-1 var (2*16/9)/7 = 32/63
    close(run("trl/rloo", R, normalize_advantages=True), DEV * 4 / 3 / (np.sqrt(32 / 63) + 1e-4))
    close(run("trl/rloo", [[2.0], [7.0]]), [[0.0], [0.0]])  # G = 1: 0


def test_openrlhf_hand(x64):
    close(run("openrlhf/group_norm", R), DEV / (S1 + 1e-9))
    close(run("openrlhf/rloo", R), DEV * 4 / 3)
    close(run("openrlhf/dr_grpo", R), DEV)
    # reinforce_baseline: token mean -1/12 (as for verl), biased var (23/6)/24 = 23/144
    # -> A = (a + 1/12) * 12/sqrt(23)
    got = run("openrlhf/reinforce_baseline", R, lengths=L)
    close(got, (DEV + 1 / 12) * 12 / np.sqrt(23))
    close(run("openrlhf/reinforce_baseline", R, lengths=L, no_std_norm=True), DEV + 1 / 12)


def test_nemo_grpo_hand(x64):
    # i=0: others [0,1,1], mean 2/3, ddof-1 std 1/sqrt(3) -> (2 - 2/3)/(1/sqrt3 + 1e-6)
    # i=1: others [2,1,1], mean 4/3, std 1/sqrt(3)     -> (0 - 4/3)/(...)
    # i=2,3: others [2,0,1] mean 1 -> r - b = 0
    d = 1 / np.sqrt(3) + 1e-6
    close(run("nemo/grpo", R), [[4 / 3 / d, -4 / 3 / d, 0, 0], [0, 0, 0, 0]])
    # a lone success: its others are all 0 (std 0) -> unnormalised 1 - 0 = 1; each failure:
    # others [1,0,0], mean 1/3, std 1/sqrt(3) -> (-1/3)/(1/sqrt3 + 1e-6)
    close(run("nemo/grpo", [[1.0, 0.0, 0.0, 0.0]]), [[1.0, -1 / 3 / d, -1 / 3 / d, -1 / 3 / d]])
    close(run("nemo/grpo", [[3.0, 1.0]]), [[2.0, -2.0]])  # G = 2: one other, std 0
    close(run("nemo/grpo", R, normalize_rewards=False), DEV * 4 / 3)
    # no leave-one-out: b = mean, std = group ddof-1 std
    close(run("nemo/grpo", R, use_leave_one_out_baseline=False), DEV / (S1 + 1e-6))
    close(run("nemo/grpo", [[3.0], [1.0]]), [[0.0], [0.0]])  # G = 1: baseline = reward


def test_passk_training_hand(x64):
    # [1,0,0,0], k=2: rho = 1 - C(3,2)/C(4,2) = 1/2, sigma = 1/2;
    #   A+ = (1/2)/(1/2 + 1e-6), A- = (1/2 - C(2,1)/C(3,1))/(1/2 + 1e-6) = (-1/6)/(...)
    # [1,1,0,0], k=2: rho = 1 - C(2,2)/C(4,2) = 5/6, sigma = sqrt(5)/6;
    #   A+ = (1/6)/(sigma + 1e-6), A- = (1/6 - C(1,1)/C(3,1))/(...) = (-1/6)/(...)
    # all-fail and all-pass groups: 0
    r = [[1.0, 0, 0, 0], [1.0, 1, 0, 0], [0.0, 0, 0, 0], [1.0, 1, 1, 1]]
    h, s = 0.5 + 1e-6, np.sqrt(5) / 6 + 1e-6
    want = [
        [0.5 / h, -1 / 6 / h, -1 / 6 / h, -1 / 6 / h],
        [1 / 6 / s, 1 / 6 / s, -1 / 6 / s, -1 / 6 / s],
        [0, 0, 0, 0],
        [0, 0, 0, 0],
    ]
    close(run("paper/passk-training", r, k=2), want)
    # k = 1 is GRPO with the population std: [1,0,0,0]: rho 1/4, sigma sqrt(3)/4
    q = np.sqrt(3) / 4 + 1e-6
    close(run("paper/passk-training", r[:1], k=1), [[0.75 / q, -0.25 / q, -0.25 / q, -0.25 / q]])
    # non-binary rewards pass through (the code's np.where leaves them as they are)
    close(run("paper/passk-training", [[0.5, 1.0, 0.0, 0.0]], k=2)[0, 0], 0.5)
    with pytest.raises(ValueError, match="k"):
        run("paper/passk-training", r, k=5)


def test_cross_prompt_hand(x64):
    # LitePPO: group-centred rewards DEV, batch std of them sqrt(2/7) (8 responses, ddof 1)
    close(run("areal/liteppo", R), DEV / (np.sqrt(2 / 7) + 1e-5))
    # JSPO++ on [[1,0,0,1],[1,1,1,1],[0,1,0,0]]: b = 7/12, v² = (1/12 + 0 + 1/16)/3,
    # s² = ((−1/12)² + (5/12)² + (−1/3)²)/3, λ = v²/(v² + s² + 1e-6) ≈ 1/3
    r = np.array([[1.0, 0, 0, 1], [1, 1, 1, 1], [0, 1, 0, 0]])
    b, v2 = 7 / 12, (1 / 12 + 1 / 16) / 3
    s2 = ((1 / 12) ** 2 + (5 / 12) ** 2 + (1 / 3) ** 2) / 3
    lam = v2 / (v2 + s2 + 1e-6)
    loo = (r.sum(1, keepdims=True) - r) / 3
    close(run("jspo/jspo_plus_plus", r), r - ((1 - lam) * loo + lam * b))
    # an all-equal group is moved toward the batch mean, not left at 0
    assert run("jspo/jspo_plus_plus", r)[1, 0] == pytest.approx(lam * (1 - b))
    # JSPO with one prompt has no other prompt: leave-one-out
    close(run("jspo/jspo", r[:1]), r[:1] - loo[:1])
    # SPO: a = r − v̂, z-scored over the batch (ddof 1, + 1e-8)
    v = np.array([0.5, 0.9, 0.2])
    a = (r - v[:, None]).ravel()
    close(
        run("spo/spo", r, baseline=jnp.asarray(v)).ravel(), (a - a.mean()) / (a.std(ddof=1) + 1e-8)
    )
    with pytest.raises(ValueError, match="G >= 2"):
        run("jspo/jspo", r[:, :1])


# DGPO hand batch (MathForge), G = 8: one correct of 8 (c = 1: A = G/(2c) = 4 on it,
# −G/(2(G − c)) = −4/7 on the others), all 0.1 (0.1 is inexact: the authors' torch.mean leaves
# noise there), a singleton outlier in graded rewards (the same ±4, −4/7: MAD is scale-free) and
# seven correct of 8 (c = 7: 4/7 on a correct, −4 on the wrong one).  Σ|d| = 2c(G − c)/G for
# binary groups, 70/8 for the outlier group; every value is exact up to the + 1e-4.
R_DGPO = np.array([[1.0] + [0.0] * 7, [0.1] * 8, [0.0] * 7 + [5.0], [1.0] * 7 + [0.0]])
DGAE = np.array([[4.0] + [-4 / 7] * 7, [0.0] * 8, [-4 / 7] * 7 + [4.0], [4 / 7] * 7 + [-4.0]])
EXTENT = np.array([[7 / 4], [1.0], [70 / 8], [7 / 4]])  # Σ|d|: (1e-4 shifts A by ~1e-4/Σ|d|)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mathforge_hand(dtype, x64):
    """DGAE and DGPO on R_DGPO in float32 and float64 against the hand values and the authors'
    code transcribed (``ref_mathforge``); the all-equal group is exactly 0, never NaN."""
    r = jnp.asarray(R_DGPO.astype(dtype))
    tol = dict(rtol=2e-6, atol=2e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    extent = np.abs(DGAE * EXTENT / 8).sum(1, keepdims=True)  # the true Σ|d| (1.75, 0, 8.75)
    want = DGAE * extent / (extent + 1e-4)  # G d/(Σ|d| + 1e-4)
    dgae = np.asarray(F.mathforge_dgae(r))
    assert dgae.dtype == dtype and np.isfinite(dgae).all()
    np.testing.assert_allclose(dgae, want, **tol)
    np.testing.assert_allclose(
        dgae, ref_mathforge("mathforge/dgae", R_DGPO, None, {}).reshape(4, 8), **tol
    )
    assert (dgae[1] == 0).all()
    # DGPO: 3 non-degenerate groups of 4 (equal lengths): ζ = 4/3; DQW over means
    # (1/8, 5/8, 7/8), T = 2: w = 3 softmax(−mean/2); the all-equal group keeps w = 1
    mean = np.array([1 / 8, 5 / 8, 7 / 8])
    w = 3 * np.exp(-mean / 2) / np.exp(-mean / 2).sum()
    scale = 4 / 3 * np.array([w[0], 1.0, w[1], w[2]])[:, None]
    dgpo = np.asarray(F.mathforge_dgpo(r))
    assert dgpo.dtype == dtype and np.isfinite(dgpo).all()
    np.testing.assert_allclose(dgpo, want * scale, **tol)
    np.testing.assert_allclose(
        dgpo, ref_mathforge("mathforge/dgpo", R_DGPO, None, {}).reshape(4, 8), **tol
    )
    np.testing.assert_allclose(F.mathforge_dgpo(r, enable_dgpo_dqw=False), want * 4 / 3, **tol)
    # tokens: ζ = Σ all / Σ non-degenerate; here the degenerate group holds 16 of 40 tokens
    lengths = np.array([[1.0] * 8, [2.0] * 8, [1.0] * 8, [1.0] * 8])
    np.testing.assert_allclose(
        F.mathforge_dgpo(r, lengths=jnp.asarray(lengths.astype(dtype)), enable_dgpo_dqw=False),
        want * 40 / 24,
        **tol,
    )
    with pytest.raises(ValueError, match="dgpo_dqw_temp"):
        F.mathforge_dgpo(r, dgpo_dqw_temp=0.0)
    # an all-wrong group: mean 0 → read as 1 (harmless: it is degenerate); every group
    # degenerate: ζ = 1, w = 1, A = 0
    flat = jnp.asarray(np.array([[0.0] * 8, [1.0] * 8, [0.1] * 8]).astype(dtype))
    for fn in (F.mathforge_dgae, F.mathforge_dgpo):
        out = np.asarray(jax.jit(fn)(flat))
        assert np.isfinite(out).all() and (out == 0).all()


def test_mathforge_mad_balances_every_group(x64):
    """Σ_g |A_g| = G Σ|d|/(Σ|d| + 1e-4) for every group that is not all-equal (the DGAE claim),
    whatever its success count; GRPO's grows with the group's spread."""
    G = 8
    groups = np.array([[1.0] * c + [0.0] * (G - c) for c in range(1, G)])
    dgae = np.asarray(F.mathforge_dgae(jnp.asarray(groups)))
    total = np.abs(dgae).sum(1)
    extent = 2 * np.arange(1, G) * (G - np.arange(1, G)) / G
    np.testing.assert_allclose(total, G * extent / (extent + 1e-4), rtol=1e-12)
    grpo = np.abs(run("trl/grpo", groups)).sum(1)
    assert grpo.max() / grpo.min() > 1.5  # the imbalance DGAE removes


# ----------------------------------------------------------------------------- 2. loop references
# Each mirrors the framework's own code structure on a flat batch (index = prompt id).


def ref_verl(name, scores, index, lengths, greedy, opts):
    scores = scores.copy()
    bsz = len(scores)
    id2 = defaultdict(list)
    for i in range(bsz):
        id2[index[i]].append(i)
    eps = opts.get("epsilon", 1e-6)
    norm = opts.get("norm_adv_by_std_in_grpo", True)
    out = np.zeros(bsz)
    if name == "verl/remax":
        return scores - greedy[index]
    if name == "verl/gpg":
        alpha = bsz / max(np.count_nonzero(scores), 1)
    for _, idx in id2.items():
        s = scores[idx]
        n = len(s)
        mean = 0.0 if n == 1 else s.mean()
        std = 1.0 if n == 1 else s.std(ddof=1)
        if name == "verl/grpo":
            out[idx] = (s - mean) / (std + eps) if norm else s - mean
        elif name == "verl/grpo_vectorized":  # group_mean_std(eps=0.0): centred, no floor
            var = np.sum((s - mean) ** 2) / max(n - 1, 1)
            std = 1.0 if n == 1 else np.sqrt(max(var, 0.0))
            out[idx] = (s - mean) / (std + eps) if norm else s - mean
        elif name == "verl/rloo":
            out[idx] = s * n / (n - 1) - mean * n / (n - 1) if n > 1 else s
        elif name == "verl/rloo_vectorized":
            out[idx] = (n * s - s.sum()) / max(n - 1, 1) * (n > 1)
        elif name == "verl/opo":
            ln = lengths[idx]
            out[idx] = s - (0.0 if n == 1 else (ln * s).sum() / ln.sum())
        elif name == "verl/gpg":
            out[idx] = alpha * (s - mean) / opts.get("f_norm", 1.0)
        elif name == "verl/grpo_passk":
            order = np.argsort(-s, kind="stable")
            adv = s[order[0]] - s[order[1]]
            out[idx[order[0]]] = adv / (s.std(ddof=1) + eps) if norm else adv
        elif name == "verl/reinforce_plus_plus_baseline":
            out[idx] = s - mean
    if name == "verl/reinforce_plus_plus_baseline":  # tile over tokens, masked_whiten
        tok = np.repeat(out, lengths.astype(int))
        m = tok.sum() / (tok.size + 1e-8)
        var = ((tok - m) ** 2).sum() / (tok.size + 1e-8) * tok.size / (tok.size - 1)
        out = (out - m) / np.sqrt(var + 1e-8)
    return out


def ref_trl(name, rewards, opts):
    G = rewards.shape[-1]
    flat = rewards.reshape(-1)
    grouped = flat.reshape(-1, G)  # rewards.view(-1, num_generations)
    if name == "trl/grpo":
        mean = np.repeat(grouped.mean(1), G)
        scale = {True: "group", False: "none"}.get(opts.get("scale_rewards"), None)
        scale = scale or opts.get("scale_rewards", "group")
        if scale in ("group", "none"):
            std = np.repeat(grouped.std(1, ddof=1), G) if G > 1 else np.zeros_like(flat)
        else:
            std = np.full_like(flat, flat.std(ddof=1)) if flat.size > 1 else np.zeros_like(flat)
        adv = flat - mean
        return adv if scale == "none" else adv / (std + 1e-4)
    if G > 1:
        adv = flat - ((grouped.sum(1, keepdims=True) - grouped) / (G - 1)).reshape(-1)
    else:
        adv = np.zeros_like(flat)
    if opts.get("normalize_advantages", False):
        sd = adv.std(ddof=1) if adv.size > 1 else np.nan  # nanstd: NaN for one element
        adv = np.nan_to_num((adv - adv.mean()) / (sd + 1e-4), nan=0.0)
    return adv


def ref_openrlhf(name, rewards, lengths, opts):
    est = name.split("/")[1]
    r = rewards.copy()  # rewards.reshape(-1, n_samples_per_prompt)
    n = r.shape[-1]
    if est == "rloo":
        r = r - (r.sum(-1, keepdims=True) - r) / (n - 1)
    elif est in ("reinforce_baseline", "dr_grpo"):
        r = r - r.mean(-1, keepdims=True)
    elif est == "group_norm":
        r = (r - r.mean(-1, keepdims=True)) / (r.std(-1, ddof=1, keepdims=True) + 1e-9)
    adv = r.reshape(-1)
    if est == "reinforce_baseline":  # whiten over all action tokens
        tok = np.repeat(adv, lengths.reshape(-1).astype(int))
        mean = tok.sum() / tok.size
        rstd = 1.0
        if not opts.get("no_std_norm", False):
            rstd = 1 / np.sqrt(max(((tok - mean) ** 2).sum() / tok.size, 1e-8))
        adv = (adv - mean) * rstd
    return adv


def ref_nemo(rewards, opts):
    loo = opts.get("use_leave_one_out_baseline", True)
    prompts = np.repeat(np.arange(rewards.shape[0]), rewards.shape[1])
    r = rewards.reshape(-1)
    baseline, std = np.zeros_like(r), np.zeros_like(r)
    for p in np.unique(prompts):
        idx = np.arange(len(r))[prompts == p]
        mat = 1 - np.eye(len(idx)) if loo else np.ones((len(idx), len(idx)))
        if len(idx) <= 1:
            baseline[idx] = r[idx]
            continue
        nv = np.float64(len(idx) - int(loo))  # a torch tensor in NeMo: x/0 -> inf
        b = mat @ r[idx] / nv
        sq = mat @ r[idx] ** 2 / nv
        baseline[idx] = b
        with np.errstate(invalid="ignore", divide="ignore"):
            std[idx] = np.nan_to_num(np.sqrt((sq - b**2) * (nv / (nv - 1))), nan=0.0)
    adv = r - baseline
    if opts.get("normalize_rewards", True):
        nz = std > 0
        adv[nz] = adv[nz] / (std[nz] + 1e-6)
    return adv


def ref_passk(rewards, k):  # the authors' calc_adv, per group
    out = []
    for val in rewards:
        c = len(np.where(val == 1)[0])
        n = len(val)
        rho = 1 - comb(n - c, k) / comb(n, k)
        sigma = np.sqrt(rho * (1 - rho))
        adv_p = (1 - rho) / (sigma + 1e-6)
        adv_n = (1 - rho - comb(n - c - 1, k - 1) / comb(n - 1, k - 1)) / (sigma + 1e-6)
        new = np.where(val == 1, adv_p, val)
        out.append(np.where(new == 0, adv_n, new))
    return np.concatenate(out)


def ref_mathforge(name, rewards, lengths, opts):
    """The authors' ``_generate_and_score_completions`` (MathForge @ 83edda02, L1678–1744), one
    process, one reward function of weight 1, ``scale_rewards=True``; numpy for torch."""
    G = rewards.shape[-1]
    rewards = rewards.reshape(-1)
    main_rewards = rewards
    mean_grouped_main_rewards = main_rewards.reshape(-1, G).mean(1)
    is_incorrect = np.isclose(mean_grouped_main_rewards, 0.0)
    mean_grouped_rewards = rewards.reshape(-1, G).mean(1)
    std_grouped_rewards = rewards.reshape(-1, G).std(1, ddof=1)
    sample_num = len(mean_grouped_rewards)
    is_std_zero = np.isclose(std_grouped_rewards, 0.0)
    zero_sample_num = is_std_zero.sum()
    length = np.full((sample_num, G), 1.0) if lengths is None else lengths
    global_completion_length = length.reshape(-1)
    dgpo = name == "mathforge/dgpo"
    dqw = dgpo and opts.get("enable_dgpo_dqw", True)
    if dgpo:
        if zero_sample_num < sample_num:
            kept = global_completion_length.reshape(-1, G)[~is_std_zero]
            zero_mask_ratio = global_completion_length.sum() / kept.sum()
        else:
            zero_mask_ratio = 1.0
        if dqw:
            weights = np.ones_like(mean_grouped_main_rewards)
            if zero_sample_num < sample_num:
                m = mean_grouped_main_rewards.copy()
                m[is_incorrect] = 1.0
                e = np.exp(-m[~is_std_zero] / opts.get("dgpo_dqw_temp", 2.0))
                weights[~is_std_zero] = (sample_num - zero_sample_num) * e / e.sum()
            weights = np.repeat(weights, G)
    advantages = rewards - np.repeat(mean_grouped_rewards, G)
    extent = np.repeat(np.abs(advantages.reshape(-1, G)).sum(1), G)
    advantages = G * advantages / (extent + 1e-4)
    if dgpo:
        advantages = advantages * zero_mask_ratio
        if dqw:
            advantages = advantages * weights
    return advantages


def ref_cross(name, rewards, baseline, opts):
    """LitePPO (AReaL's Normalization), JSPO (the authors' per-sample loop), SPO."""
    P, G = rewards.shape
    if name == "areal/liteppo":
        x = rewards.reshape(-1)
        xc = x - np.repeat(rewards.mean(1), G)
        n = len(x)
        return xc if n == 1 else xc / (np.sqrt((xc**2).sum() / (n - 1)) + 1e-5)
    if name == "spo/spo":
        a = (rewards - baseline[:, None]).reshape(-1)
        return np.zeros_like(a) if len(a) == 1 else (a - a.mean()) / (a.std(ddof=1) + 1e-8)
    eps = opts.get("epsilon", 1e-6)
    out = np.zeros((P, G))
    for i in range(P):
        others = [j for j in range(P) if j != i] if name == "jspo/jspo" else list(range(P))
        lam, b = 0.0, 0.0
        if others:
            means = rewards[others].mean(1)
            b = means.mean()
            v2 = np.mean([rewards[j].var(ddof=1) / G for j in others])
            s2 = np.mean((means - b) ** 2)
            lam = v2 / (v2 + s2 + eps)
        for g in range(G):
            loo = (rewards[i].sum() - rewards[i, g]) / (G - 1)
            out[i, g] = rewards[i, g] - ((1 - lam) * loo + lam * b)
    return out.reshape(-1)


def reference(name, rewards, lengths, greedy, opts, baseline=None):
    P, G = rewards.shape
    if name.split("/")[0] in ("areal", "jspo", "spo"):
        return ref_cross(name, rewards, baseline, opts)
    if name.startswith("verl/"):
        index = np.repeat(np.arange(P), G)
        return ref_verl(name, rewards.reshape(-1), index, lengths.reshape(-1), greedy, opts)
    if name.startswith("trl/"):
        return ref_trl(name, rewards, opts)
    if name.startswith("openrlhf/"):
        return ref_openrlhf(name, rewards, lengths, opts)
    if name.startswith("mathforge/"):
        return ref_mathforge(name, rewards, None, opts)
    if name == "nemo/grpo":
        return ref_nemo(rewards, opts)
    return ref_passk(rewards, opts["k"])


OPTION_CASES = {
    "verl/grpo": [{}, {"norm_adv_by_std_in_grpo": False}, {"epsilon": 1e-2}],
    "verl/grpo_vectorized": [{}, {"norm_adv_by_std_in_grpo": False}, {"epsilon": 0.05}],
    "verl/gpg": [{}, {"f_norm": 3.0}],
    "verl/grpo_passk": [{}, {"norm_adv_by_std_in_grpo": False}],
    "trl/grpo": [{}, {"scale_rewards": "batch"}, {"scale_rewards": "none"}],
    "trl/rloo": [{}, {"normalize_advantages": True}],
    "openrlhf/reinforce_baseline": [{}, {"no_std_norm": True}],
    "nemo/grpo": [{}, {"use_leave_one_out_baseline": False}, {"normalize_rewards": False}],
    "paper/passk-training": [{"k": 1}, {"k": 2}, {"k": 3}],
    "mathforge/dgpo": [{}, {"enable_dgpo_dqw": False}, {"dgpo_dqw_temp": 0.5}],
}


@pytest.mark.parametrize("name", list(SPEC))
def test_matches_loop_reference(name, x64):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    spec = SPEC[name]
    for P, G in ((1, 1), (3, 1), (1, 2), (3, 3), (2, 8)):
        for kind in ("binary", "continuous"):
            if P * G == 1 and spec.scope == "batch":
                continue  # verl raises (one token), OpenRLHF asserts G > 1
            binary = rng.integers(0, 2, (P, G)) * 1.0
            r = binary if kind == "binary" else rng.normal(size=(P, G))
            lengths = rng.integers(1, 9, (P, G)) * 1.0
            greedy = rng.integers(0, 2, P) * 1.0
            for opts in OPTION_CASES.get(name, [{}]):
                if G < max(spec.min_group, opts.get("k", 1)):
                    continue
                baseline = rng.random(P)
                kw = {"lengths": lengths} if "lengths" in spec.needs else {}
                kw |= {"greedy": greedy} if "greedy" in spec.needs else {}
                kw |= {"baseline": baseline} if "baseline" in spec.needs else {}
                got = run(name, r, **kw, **opts)
                want = reference(name, r, lengths, greedy, opts, baseline).reshape(P, G)
                np.testing.assert_allclose(
                    got, want, rtol=1e-6, atol=1e-6, err_msg=f"{name} {opts} G={G} P={P} {kind}"
                )


# ----------------------------------------------------------------------------- 3. jit, degenerate


WHITENED = ("reinforce_plus_plus_baseline", "reinforce_baseline")
CROSS_ZERO = (
    "areal/liteppo",
    "jspo/jspo",
    "jspo/jspo_plus_plus",
    "mathforge/dgpo",
)  # SPO's v̂ differs per prompt


@pytest.mark.parametrize("name", list(SPEC))
def test_finite_on_degenerate_groups_under_jit(name):
    spec = SPEC[name]
    G = max(spec.min_group, 4)
    batches = [np.zeros((3, G)), np.ones((3, G))]
    if name != "paper/passk-training":  # binary rewards only: other values pass through it
        batches.append(np.full((3, G), 0.1))  # 0.1 is not exact in binary floating point
    kw = {"lengths": jnp.full((3, G), 5.0)} if "lengths" in spec.needs else {}
    kw |= {"greedy": jnp.array([0.0, 1.0, 0.1])} if "greedy" in spec.needs else {}
    kw |= {"baseline": jnp.array([0.0, 1.0, 0.1])} if "baseline" in spec.needs else {}
    f = jax.jit(lambda r: spec.fn(r, **kw, **spec.options))
    for r in batches:
        a = np.asarray(f(jnp.asarray(r, dtype=jnp.float32)))
        assert a.shape == r.shape and np.isfinite(a).all(), name
        if spec.reward_only or name.endswith(WHITENED) or name in CROSS_ZERO:
            np.testing.assert_array_equal(a, 0.0)  # all-equal batch: exactly 0


def test_specs_are_consistent():
    for s in F.SPECS:
        assert s.reward_only == (s.scope == "group" and not s.needs and s.name != "verl/gpg")
        assert s.source and s.min_group >= 1
        assert set(s.options) <= set(s.fn.__kwdefaults__), s.name
        for opt, default in s.options.items():
            assert s.fn.__kwdefaults__[opt] == default, (s.name, opt)
    assert len({s.name for s in F.SPECS}) == len(F.SPECS) == 23


def test_leading_axes_and_missing_inputs():
    r = jnp.asarray(np.random.default_rng(0).normal(size=(2, 3, 4)))
    for name in ("nemo/grpo", "verl/gpg"):  # a (G, G) broadcast; a batch (last two axes)
        batched = run(name, r)
        np.testing.assert_allclose(batched[1], run(name, r[1]), rtol=1e-6)
    with pytest.raises(ValueError, match="lengths"):
        run("verl/opo", R)
    with pytest.raises(ValueError, match="greedy"):
        run("verl/remax", R, greedy=[1.0])
    with pytest.raises(ValueError, match="scale_rewards"):
        run("trl/grpo", R, scale_rewards="prompt")


def test_every_public_function_is_exported():
    """``frameworks.__all__`` lists every public function of the package's family modules (the
    API reference and ``from gpolab.estimators.frameworks import *`` read it)."""
    import importlib
    import inspect
    import pkgutil

    from gpolab.estimators import frameworks

    public = {
        n
        for m in pkgutil.iter_modules(frameworks.__path__)
        for n, f in inspect.getmembers(
            importlib.import_module(f"{frameworks.__name__}.{m.name}"), inspect.isfunction
        )
        if f.__module__.startswith(frameworks.__name__) and not n.startswith("_")
    }
    assert len(public) >= 20
    assert public <= set(frameworks.__all__), sorted(public - set(frameworks.__all__))
