"""Asynchronous RL (issue 58): the frameworks' compositions of π_θ, π_prox and the engine's μ, and
the kernel that measures them against the exact gradient on the Markov env."""

import dataclasses
import functools
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpolab import engine, validate
from gpolab.envs import markov
from gpolab.estimators import asynchronous
from gpolab.kernels import async_rl

PARAMS = markov.make(0, prompts=4, vocab=3, length=8)
THETA = markov.init_theta(PARAMS)


def _cell(name: str, m=1, staleness=(0,)) -> async_rl.Cell:
    correction = asynchronous.get(name).correction
    return async_rl.Cell(correction, "noise", 4, 4, m, staleness, markov.count_cap(PARAMS))


LOO = [n for n, e in asynchronous.REGISTRY.items() if e.correction.baseline == "loo"]


@pytest.mark.parametrize("name", LOO)
def test_every_composition_is_the_on_policy_update_where_all_three_policies_agree(name):
    """π_θ = π_prox = μ: every ratio is 1, every weight 1 and no clip binds, so each framework's
    update is the leave-one-out gradient, the sequence-IS update on the same batch (to float32
    rounding), and the composition is valid (VCPO's own baseline: the next test)."""
    entry = asynchronous.get(name)
    entry.correction.validate()
    cell = _cell(name)
    table = markov.table(PARAMS, THETA)
    b = async_rl._draw(cell, PARAMS, table, jax.random.key(3))
    knobs = tuple(jnp.float32(x) for x in (0.2, 0.28, 3.0))
    grad = functools.partial(jax.grad(async_rl._objective, argnums=3, has_aux=True), cell, PARAMS)
    ghat, (clipped, gap, ess) = grad(b, THETA, b.engine, jnp.float32(0.5), *knobs)
    g_sis = jax.grad(async_rl._sis_objective, argnums=3)(cell, PARAMS, b, THETA)
    assert float(clipped) == 0.0 and float(gap) < 1e-6 and float(ess) == pytest.approx(1.0)
    np.testing.assert_allclose(ghat, g_sis, rtol=0, atol=1e-6 * float(jnp.abs(g_sis).max()))
    assert "/" not in name or entry.source.split()[0] in ("huggingface/trl", *_REPOS)


_REPOS = (
    *("inclusionAI/AReaL", "verl-project/verl", "horizon-llm/CTPO", "Infini-AI-Lab/M2PO"),
    *("NVIDIA-NeMo/RL", "OpenRLHF/OpenRLHF", "gpolab's"),
)


def test_a3pos_anchor_interpolates_by_the_rollouts_age():
    """AReaL's loglinear π_prox: α = (k − 1)/k for rollouts k versions old (0 at k = 0 and 1), and
    the ratio against it is (π_θ/μ)^(1 − α) (unclipped here: ε huge)."""
    np.testing.assert_allclose(async_rl._interpolation(jnp.arange(5.0)), [0, 0, 0.5, 2 / 3, 0.75])
    # per token as AReaL's loss reads them: the previous token's version, the first token α = 0;
    # with an in-flight update after 3 tokens the later ones are one version younger
    alpha = async_rl._token_alpha(_cell("areal/a3po"), 8, jnp.float32(2.0))
    np.testing.assert_allclose(alpha, [0] + [0.5] * 7)
    mixed = dataclasses.replace(_cell("areal/a3po"), switch=3)
    alpha = async_rl._token_alpha(mixed, 8, jnp.float32(3.0))
    np.testing.assert_allclose(alpha, [0, 2 / 3, 2 / 3, 2 / 3] + [0.5] * 4, rtol=1e-6)
    cell = _cell("areal/a3po")
    b = async_rl._draw(cell, PARAMS, markov.table(PARAMS, THETA), jax.random.key(5))
    theta = THETA + 0.3 * jax.random.normal(jax.random.key(6), THETA.shape)
    logp = markov.table_logp(PARAMS, markov.table(PARAMS, theta), b.prompts, b.tokens)
    big = jnp.float32(1e6)
    value, _ = async_rl._objective(
        cell, PARAMS, b, theta, b.engine, jnp.float32(0.5), big, big, big
    )
    want = jnp.sum(b.c[..., None] * jnp.exp(0.5 * (logp - b.engine))) / cell.B
    np.testing.assert_allclose(value, want, rtol=1e-5)


def test_a_weight_that_rejects_or_an_unknown_name_is_one_error():
    with pytest.raises(validate.ConfigError, match="whose mean does not depend on the batch"):
        asynchronous.Correction(weight="verl/rs_token_k1").validate()
    with pytest.raises(validate.ConfigError, match="anchor"):
        asynchronous.Correction(anchor="server").validate()
    with pytest.raises(validate.ConfigError, match="trl/async_grpo"):
        asynchronous.get("trl/async")
    low = async_rl.Cell(asynchronous.Correction(), "noise", 4, 4, 1, (0,), cap=2)
    with pytest.raises(validate.ConfigError, match="cap: got 2"):
        async_rl.inputs(low, PARAMS, THETA, [1.0], 0.1)


def _measure(name: str, seeds=1024, splits=4):
    cell = _cell(name, m=4, staleness=(0, 2))
    args = async_rl.inputs(cell, PARAMS, THETA, [0.5, 2.0], 0.5)
    key = jax.random.key(11)
    parts = [
        engine.run(async_rl.per_seed, cell, args, jax.random.fold_in(key, s), seeds)
        for s in range(splits)
    ]
    return async_rl.summary(parts)


@pytest.mark.slow
def test_sequence_is_is_unbiased_at_every_update_and_trls_engine_ratio_is_not():
    """Noise mismatch 0.5, staleness 0 and 2, four minibatch updates at two step sizes: the
    sequence-IS control's bias² is within 4 standard errors of 0 at every (η, k, j); TRL's
    AsyncGRPOTrainer ratio (π_θ over the engine's log-probs, clipped, T = 8 tokens) is biased
    beyond 4 SEs at every update (its negative control), and its paired bias against the control
    is as large."""
    sis = _measure("sis")
    se = sis.main.split.bias_sq.std(0, ddof=1) / 2
    assert np.all(np.abs(sis.main.pooled.bias_sq) < 4 * se), (sis.main.pooled.bias_sq, se)
    trl = _measure("trl/async_grpo")
    se = trl.main.split.bias_sq.std(0, ddof=1) / 2
    assert np.all(trl.main.pooled.bias_sq > 4 * se), (trl.main.pooled.bias_sq, se)
    assert np.all(trl.paired.pooled.bias_sq > 0.5 * trl.main.pooled.bias_sq)
    assert np.all((trl.clip_frac > 0) & (trl.clip_frac < 1)) and np.all(sis.clip_frac == 0)


def test_an_in_flight_update_keeps_the_early_tokens_and_records_each_versions_log_probs():
    """With the engine's weights changed after 3 of 8 tokens, the first 3 tokens are the draws of
    the old table alone (the same key), and each token's recorded log-prob is the table's that
    drew it."""
    cell = dataclasses.replace(_cell("sis", staleness=(1,)), switch=3)
    old = markov.table(PARAMS, THETA)
    new = old + 2.0 * jax.random.normal(jax.random.key(8), old.shape)
    key = jax.random.key(9)
    alone = async_rl._draw(cell, PARAMS, old, key)
    mixed = async_rl._draw(cell, PARAMS, old, key, later=new)
    np.testing.assert_array_equal(mixed.tokens[..., :3], alone.tokens[..., :3])
    assert np.any(np.asarray(mixed.tokens[..., 3:] != alone.tokens[..., 3:]))
    lp_old = markov.table_logp(PARAMS, old, mixed.prompts, mixed.tokens)
    lp_new = markov.table_logp(PARAMS, new, mixed.prompts, mixed.tokens)
    np.testing.assert_array_equal(mixed.engine[..., :3], lp_old[..., :3])
    np.testing.assert_array_equal(mixed.engine[..., 3:], lp_new[..., 3:])
    with pytest.raises(validate.ConfigError, match="staleness: got 0 with switch 3"):
        async_rl.inputs(dataclasses.replace(cell, staleness=(0, 1)), PARAMS, THETA, [1.0], 0.1)


@pytest.mark.slow
def test_sequence_is_stays_unbiased_over_mixed_age_responses():
    """Rollouts whose last 5 of 8 tokens come from the trainer's next version (in-flight update),
    1 and 3 versions stale: the sequence-IS control over the recorded per-token log-probs is
    unbiased at every update (within 4 SEs)."""
    cell = dataclasses.replace(_cell("sis", m=2, staleness=(1, 3)), switch=3)
    args = async_rl.inputs(cell, PARAMS, THETA, [1.0], 0.5)
    key = jax.random.key(12)
    parts = [
        engine.run(async_rl.per_seed, cell, args, jax.random.fold_in(key, s), 1024)
        for s in range(4)
    ]
    s = async_rl.summary(parts)
    se = s.main.split.bias_sq.std(0, ddof=1) / 2
    assert np.all(np.abs(s.main.pooled.bias_sq) < 4 * se), (s.main.pooled.bias_sq, se)


def test_specs_override_only_the_clip_knobs_an_entry_reads():
    assert asynchronous.parse("trl/async_grpo[eps_high=0.28]") == (
        "trl/async_grpo",
        {"eps_high": 0.28},
    )
    assert asynchronous.knobs("trl/async_grpo[eps_high=0.28]") == (0.2, 0.28, None)
    assert asynchronous.knobs("verl/decoupled") == (0.2, 0.2, 3.0)
    assert asynchronous.spec("trl/async_grpo", {"eps_low": 0.2, "eps_high": 0.28}) == (
        "trl/async_grpo[eps_high=0.28]"
    )
    for spec in ("verl/decoupled[clip_c=5]", "trl/async_grpo[eps_low=0.1,eps_high=0.3]"):
        name, over = asynchronous.parse(spec)
        assert asynchronous.parse(asynchronous.spec(name, over)) == (name, over)
    # gpolab's ppo rule is symmetric: an asymmetric spec runs the clip-higher rule
    assert asynchronous.correction("trl/async_grpo[eps_high=0.28]").clip == "higher"
    assert asynchronous.correction("trl/async_grpo[eps_high=0.2]").clip == "ppo"
    for bad, message in (
        ("verl/decoupled[eps_high=0.28]", "allowed: equal values"),
        ("trl/async_grpo[clip_c=3]", "option 'clip_c' not understood"),
        ("sis[eps_low=0.1]", "none (this entry has no clip)"),
        ("verl/decoupled[clip_c=1]", "a finite number > 1"),
        ("trl/async_grpo[eps_low=x]", "a finite number > 0"),
        ("trl/async_grpo[eps_low]", "not understood"),
    ):
        with pytest.raises(validate.ConfigError, match=re.escape(message)):
            asynchronous.parse(bad)


def _tokens(seed, shape=(3, 4, 6), spread=0.3):
    rng = np.random.default_rng(seed)
    logp = jnp.asarray(np.log(rng.uniform(0.2, 0.9, shape)), jnp.float32)
    old = logp + jnp.asarray(rng.normal(0, spread, shape), jnp.float32)
    c = jnp.asarray(rng.normal(0, 1, shape[:-1]), jnp.float32)
    return logp, old, c, jnp.ones(shape, jnp.float32)


def _token_grad(corr, logp, old, c, mask, *knobs):
    def total(lp):
        return jnp.sum(asynchronous.objective(corr, lp, old, c, mask, *knobs)[0])

    return jax.grad(total)(logp), asynchronous.objective(corr, logp, old, c, mask, *knobs)[1]


def test_ctpos_ratio_is_the_prefix_product_with_the_gradient_through_its_own_token():
    """CTPO (cum-token-cumprod-la): d/d log π_θ,t of the objective is c·R_t, R_t = Π_{s≤t}
    π_θ,s/π_old,s, on the tokens its √t log-space clip keeps: for A > 0 where log R_t ≤
    0.05√t, for A < 0 where −0.025√t ≤ log R_t ≤ 0.05√t (the dual bound equals the upper);
    0 elsewhere, and those are the tokens flagged."""
    corr = asynchronous.get("ctpo/cumtoken").correction
    logp, old, c, mask = _tokens(0)
    knobs = tuple(jnp.float32(x) for x in (0.025, 0.05, 3.0))
    grad, cut = _token_grad(corr, logp, old, c, mask, *knobs)
    log_r = np.cumsum(np.asarray(logp - old), -1)
    root = np.sqrt(np.arange(1, logp.shape[-1] + 1))
    a = np.broadcast_to(np.asarray(c)[..., None], log_r.shape)
    keep = np.where(a > 0, log_r <= 0.05 * root, (log_r >= -0.025 * root) & (log_r <= 0.05 * root))
    np.testing.assert_allclose(grad, np.where(keep, a * np.exp(log_r), 0.0), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(cut), ~keep)
    assert 0 < keep.mean() < 1  # both regions occur


def test_m2pos_clip_is_the_papers_mask_at_the_codes_tau():
    """M2PO: τ is the water-filling breakpoint of the harmful tokens' (log r)² (checked against a
    loop as the authors' _solve_tau_from_sorted_delta2 runs it, its −1e-12 under the root left
    out: it only decides the tie at the breakpoint, kept here); the gradient is c·r where a
    token is kept and 0 where it is harmful (A > 0, r > 1 or A < 0, r < 1) with |log r| > τ;
    no token is cut where the harmful tokens' mean (log r)² is within the budget."""

    def loop(d2, budget):
        s = np.sort(d2)
        n = len(s)
        if n == 0 or s.mean() <= budget:
            return math.inf
        csum = np.cumsum(s)
        for k in range(n):
            if (s[k] - 1e-12) * (n - k - 1) + csum[k] >= budget * n - 1e-12:
                return 0.0 if k == 0 else math.sqrt(s[k - 1])
        return math.inf

    corr = asynchronous.get("m2po/m2").correction
    for seed, spread in ((1, 0.3), (2, 0.05)):
        logp, old, c, mask = _tokens(seed, spread=spread)
        grad, cut = _token_grad(corr, logp, old, c, mask, *(jnp.float32(0.2),) * 3)
        log_r = np.asarray(logp - old)
        a = np.broadcast_to(np.asarray(c)[..., None], log_r.shape)
        harm = ((a > 0) & (log_r > 0)) | ((a < 0) & (log_r < 0))
        tau = loop(log_r[harm] ** 2, asynchronous.M2_BUDGET)
        tau_jax = float(asynchronous.m2_tau(jnp.where(harm, log_r**2, jnp.inf), 0.04))
        assert tau_jax == pytest.approx(tau, rel=1e-5) or (math.isinf(tau) and math.isinf(tau_jax))
        keep = ~(harm & (log_r**2 > tau**2))  # the token at the breakpoint kept
        np.testing.assert_allclose(grad, np.where(keep, a * np.exp(log_r), 0.0), rtol=1e-5)
        np.testing.assert_array_equal(np.asarray(cut), ~keep)
        assert (keep.all()) == (spread == 0.05)  # a small spread is within the budget


def test_seq_mask_tis_keeps_untruncated_token_weights_of_sequences_whose_geometric_mean_is_inside():
    """NeMo-RL's and OpenRLHF's seq-mask-tis: weight e^{d_t} on sequences with exp(mean_t d) in
    [L, U], 0 on the others (their tokens flagged); no truncation of the token weight."""
    from gpolab.estimators import mismatch

    logp, mu, _, mask = _tokens(4, spread=0.8)
    A = jnp.ones(logp.shape[:-1], jnp.float32)
    d = np.asarray(logp - mu)
    geo = np.exp(d.mean(-1, keepdims=True))
    for name, (lo, hi) in (
        ("openrlhf/seq_mask_tis", (0.5, 5.0)),
        ("nemo/seq_mask_tis", (0.999, 1.002)),
    ):
        w = mismatch.correction(name, A, logp, mu, mask)
        inside = (geo >= lo) & (geo <= hi)
        np.testing.assert_allclose(w.coef, np.where(inside, np.exp(d), 0.0), rtol=1e-5)
        np.testing.assert_array_equal(np.asarray(w.flagged), np.broadcast_to(~inside, d.shape))
    assert np.exp(d).max() > 2  # untruncated where verl's TIS would cap


def test_vcpos_step_scale_is_the_root_of_its_ess_ratio():
    """ESS ratio (Σ w)²/(N Σ w²): 1 for equal weights, 1/N for one weight; VCPO's step scale
    √min(1, ESS/1.0), detached."""
    n = 8
    assert float(asynchronous.ess_ratio(jnp.zeros(n))) == pytest.approx(1.0)
    assert float(asynchronous.ess_ratio(jnp.asarray([0.0] + [-80.0] * (n - 1)))) == pytest.approx(
        1 / n
    )
    logw = np.random.default_rng(5).normal(0, 1, (2, 4))
    w = np.exp(logw)
    ess = w.sum() ** 2 / (w.size * (w**2).sum())
    assert float(asynchronous.ess_ratio(jnp.asarray(logw))) == pytest.approx(ess, rel=1e-6)
    corr = asynchronous.get("gpolab/vcpo_ess").correction
    prox = jnp.asarray(logw[..., None] * np.ones(3) / 3, jnp.float32)
    scale = asynchronous.step_scale(corr, prox, jnp.zeros_like(prox), jnp.ones_like(prox))
    assert float(scale) == pytest.approx(math.sqrt(ess), rel=1e-5)


def _vcpo_loop(rewards, log_rho, grad_norm, threshold=8.0):
    """VCPO's code, one group at a time in float64 (staleness_utils.py::compute_opob_baseline,
    get_weighted_mean; megatron_actor.py::_compute_grad_norms, _update_grad_buffers): the
    advantage each sequence's gradient is accumulated with."""
    out = np.zeros_like(rewards, dtype=float)
    for i, (r, lr, gn) in enumerate(zip(rewards, log_rho, grad_norm, strict=True)):
        rho = np.exp(lr.astype(float))
        unscaled = np.minimum(rho, threshold) * gn  # the loss carries min(ρ, C)
        w = unscaled**2 * rho**2
        b = float((r * w).sum() / (w.sum() + 1e-8))
        std = float(np.std(r))
        out[i] = (r - b) / std if std > 1e-8 else r - b
    return out


def test_vcpos_baseline_is_its_codes_weighted_mean_and_finite_on_degenerate_groups():
    """opob_advantages against the loop VCPO runs, on random groups, a group of equal rewards (0,
    where the code leaves R·1e-8/ΣW) and a sequence weight past float32's range (finite)."""
    rng = np.random.default_rng(11)
    r = rng.integers(0, 2, (6, 4)).astype(float)
    r[0] = 1.0
    lr = rng.normal(0, 1.5, (6, 4))
    gn = rng.uniform(0.5, 3, (6, 4))

    def opob():
        args = (jnp.asarray(x, jnp.float32) for x in (r, lr, gn**2))
        return asynchronous.opob_advantages(*args, 8.0)

    np.testing.assert_allclose(opob(), _vcpo_loop(r, lr, gn), rtol=1e-5, atol=1e-6)
    lr[1, 2] = 200.0  # ρ⁴ overflows float32; the log-space weights do not
    got = opob()
    assert np.isfinite(np.asarray(got)).all()
    want = _vcpo_loop(r[1:2], lr[1:2], gn[1:2])[0]
    np.testing.assert_allclose(got[1], want, rtol=1e-5, atol=1e-6)


def test_vcpos_update_on_policy_is_its_baselines_gradient():
    """π_θ = μ: ρ = 1, ESS 1, so vcpo/opob's update is Σ (A/G) ∇log π_θ(y) / B with A its
    baseline's advantages from each sequence's own gradient norm (computed here one sequence at a
    time with the env's gradient)."""
    cell = _cell("vcpo/opob")
    b = async_rl._draw(cell, PARAMS, markov.table(PARAMS, THETA), jax.random.key(4))
    knobs = tuple(jnp.float32(x) for x in (0.2, 0.28, 3.0))
    grad = jax.grad(async_rl._objective, argnums=3, has_aux=True)
    ghat, _ = grad(cell, PARAMS, b, THETA, b.engine, jnp.float32(0.0), *knobs)
    B, G = b.rewards.shape
    norms = np.zeros((B, G))
    for i in range(B):
        for j in range(G):
            one = jnp.zeros((1, G)).at[0, j].set(1.0)
            g = markov.gradient(PARAMS, THETA, b.prompts[i : i + 1], b.tokens[i : i + 1], one)
            norms[i, j] = float(jnp.linalg.norm(g))
    A = _vcpo_loop(np.asarray(b.rewards), np.zeros((B, G)), norms)
    want = markov.gradient(PARAMS, THETA, b.prompts, b.tokens, jnp.asarray(A / G / B, jnp.float32))
    np.testing.assert_allclose(ghat, want, rtol=1e-4, atol=1e-5 * float(jnp.abs(want).max()))
    assert np.abs(A).max() > 0  # some group is not degenerate
