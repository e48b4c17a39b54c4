"""Arithmetic surrogate: log π normalises over every answer, exact V and g, pre-training."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from gpolab.envs import arithmetic as ar
from gpolab.envs import arithmetic_model as am


@pytest.fixture(scope="module")
def setup():
    q = ar.make_questions(0, 40)
    return q, am.init(1, hidden=8)


def all_canonical_answers() -> np.ndarray:
    """Every canonical answer: k free tokens (not <eos>) then <eos> padding, or 4 free tokens."""
    free = [t for t in range(ar.VOCAB) if t != ar.EOS]
    seqs = []
    for k in range(ar.LENGTH + 1):
        for head in itertools.product(free, repeat=k):
            seqs.append(list(head) + [ar.EOS] * (ar.LENGTH - k))
    return np.array(seqs, np.int32)


def test_questions_cover_categories_and_encode_answers():
    q = ar.make_questions(3, 500)
    counts = np.bincount(np.asarray(q.category), minlength=5)
    assert counts.min() > 70  # uniform over 5 categories: 100 ± 4·9
    for i in range(20):
        v = int(q.values[i])
        tokens = ar.encode(v)
        assert "".join("-" if t == ar.MINUS else str(t) for t in tokens if t != ar.EOS) == str(v)
        np.testing.assert_array_equal(q.answers[i], tokens)
    assert np.abs(np.asarray(q.values)).max() <= 99


def test_probabilities_sum_to_one_and_V_is_teacher_forced(setup):
    """Brute-force enumeration of all 16,105 canonical answers of one question."""
    q, params = setup
    seqs = jnp.asarray(all_canonical_answers())
    assert seqs.shape[0] == 1 + 11 + 11**2 + 11**3 + 11**4
    feats = jnp.broadcast_to(q.features[0], (seqs.shape[0], ar.FEATURES))
    probs = jnp.exp(am.log_prob(params.weights, params, feats, seqs))
    np.testing.assert_allclose(float(jnp.sum(probs)), 1.0, rtol=1e-4)
    star = int(np.flatnonzero(np.all(np.asarray(seqs) == np.asarray(q.answers[0]), -1))[0])
    np.testing.assert_allclose(ar.success_prob(params, q)[0], probs[star], rtol=1e-5)


@pytest.mark.slow
def test_reasoning_prefix_probabilities_and_V_by_enumeration():
    """With R = 2 thought tokens from k = 3: Σ over every (prefix, answer) = 1 and
    V = Σ_prefix π(prefix, y*)."""
    q = ar.make_questions(1, 5)
    params = am.init(2, hidden=8, thoughts=2, thought_vocab=3)
    answers = all_canonical_answers()[::7]  # a subset of answers, every prefix
    answers = np.concatenate([answers, np.asarray(q.answers[:1])])
    pre = np.asarray(ar.thought_prefixes(params))
    seqs = np.concatenate([np.repeat(pre, len(answers), 0), np.tile(answers, (len(pre), 1))], 1)
    feats = jnp.broadcast_to(q.features[0], (len(seqs), ar.FEATURES))
    probs = np.asarray(jnp.exp(am.log_prob(params.weights, params, feats, jnp.asarray(seqs))))
    star = np.all(seqs[:, 2:] == np.asarray(q.answers[0]), -1)
    np.testing.assert_allclose(ar.success_prob(params, q)[0], probs[star].sum(), rtol=1e-5)
    # the prefix marginal: Σ_y π(prefix, y) over all answers = π(prefix); Σ_prefix = 1
    full = all_canonical_answers()
    total = 0.0
    for p in pre:
        s = np.concatenate([np.repeat(p[None], len(full), 0), full], 1)
        f = jnp.broadcast_to(q.features[0], (len(s), ar.FEATURES))
        total += float(jnp.sum(jnp.exp(am.log_prob(params.weights, params, f, jnp.asarray(s)))))
    np.testing.assert_allclose(total, 1.0, rtol=1e-4)
    toks = ar.sample(jax.random.key(0), params, q.features[0], 64)
    assert toks.shape == (64, 6) and bool(jnp.all(toks[:, :2] >= ar.VOCAB))


def test_score_has_mean_zero_by_enumeration(setup):
    """Σ_y π(y) ∇log π(y) = ∇ Σ_y π(y) = 0, over every canonical answer."""
    q, params = setup
    seqs = jnp.asarray(all_canonical_answers())
    feats = jnp.broadcast_to(q.features[2], (seqs.shape[0], ar.FEATURES))

    def total(w):
        return jnp.sum(jnp.exp(am.log_prob(w, params, feats, seqs)))

    flat = jax.flatten_util.ravel_pytree(jax.grad(total)(params.weights))[0]
    assert float(jnp.max(jnp.abs(flat))) < 1e-4


def test_sampling_frequency_of_the_answer_matches_V(setup):
    q, params = setup
    V = np.asarray(ar.success_prob(params, q))
    i = int(np.argmax(V))
    toks = ar.sample(jax.random.key(0), params, q.features[i], 40_000)
    hit = float(jnp.mean(ar.rewards(toks, q.answers[i])))
    assert abs(hit - V[i]) < 4 * np.sqrt(V[i] * (1 - V[i]) / 40_000)


@pytest.mark.slow
def test_exact_gradient_and_identities(setup):
    q, params = setup
    g = ar.exact_gradients(params, q)
    eps = 1e-3
    flat, unravel = jax.flatten_util.ravel_pytree(params.weights)
    V = jax.jit(lambda w: ar.success_prob(am.ArithmeticParams(unravel(w), params.hidden), q)[5])
    for j in (0, 17, flat.size - 1):
        e = jnp.zeros_like(flat).at[j].set(eps)
        fd = (V(flat + e) - V(flat - e)) / (2 * eps)
        np.testing.assert_allclose(g[5, j], fd, rtol=2e-2, atol=1e-6)
    truth = ar.exact(jax.random.key(0), params, q, samples=16)
    # without a reasoning prefix, E‖WZ‖² = V ‖∇ log π(y*)‖² = ‖g‖²/V
    w_star = ar.gradient_estimate(params, q.features[5], q.answers[5][None], jnp.ones(1))
    np.testing.assert_allclose(truth.e_wz2[5], truth.V[5] * jnp.sum(w_star**2), rtol=1e-3)
    np.testing.assert_allclose(truth.e_wz2[5], jnp.sum(g[5] ** 2) / truth.V[5], rtol=1e-3)


def test_pretraining_is_deterministic_and_reaches_targets():
    q = ar.make_questions(0, 60)
    targets = {"weak": 0.1, "strong": 0.3}
    a = ar.pretrain(q, seed=2, hidden=8, targets=targets, lr=1e-2)
    b = ar.pretrain(q, seed=2, hidden=8, targets=targets, lr=1e-2)
    for name, level in targets.items():
        va, vb = ar.success_prob(a[name], q), ar.success_prob(b[name], q)
        np.testing.assert_array_equal(va, vb)
        assert level <= float(jnp.mean(va)) < level + 0.1


@pytest.fixture(scope="module")
def filler_setup():
    q = ar.make_questions(0, 40)
    return q, am.init(1, hidden=8, filler=6, filler_vocab=5)


def test_filler_leaves_V_and_g_unchanged_and_marginalises(filler_setup):
    """The answer does not depend on the filler: V and g equal those of the same decoder
    without it, and log π(f, y) = log π(y) + Σ_r log p(f_r)."""
    q, params = filler_setup
    core = am.ArithmeticParams(
        {"params": {k: v for k, v in params.weights["params"].items() if k != "filler_head"}}, 8
    )
    np.testing.assert_allclose(ar.success_prob(params, q), ar.success_prob(core, q), rtol=1e-6)
    g, g_core = ar.exact_gradients(params, q), ar.exact_gradients(core, q)
    assert g.shape[1] == g_core.shape[1] + (ar.FEATURES + 1) * 5
    np.testing.assert_allclose(jnp.sort(g, axis=1)[:, -50:], jnp.sort(g_core, axis=1)[:, -50:])
    toks = ar.sample(jax.random.key(3), params, q.features[1], 16)
    assert toks.shape == (16, 6 + ar.LENGTH) and int(toks[:, :6].max()) < 5
    p = am.filler_probs(params, q.features[1])
    feats = jnp.broadcast_to(q.features[1], (16, ar.FEATURES))
    expect = am.log_prob(core.weights, core, feats, toks[:, 6:]) + jnp.sum(
        jnp.log(p)[toks[:, :6]], -1
    )
    got = am.log_prob(params.weights, params, feats, toks)
    np.testing.assert_allclose(got, expect, rtol=1e-5)


def test_filler_score_norm_closed_form_matches_monte_carlo(filler_setup):
    """E‖W_f‖² = F (‖x‖² + 1)(1 − ‖p‖²) against the sampled score norms of the filler block
    (total minus decoded block), within 4 standard errors."""
    q, params = filler_setup
    feat = q.features[2]
    toks = ar.sample(jax.random.key(0), params, feat, 4000)
    total = ar.score_norms(params, feat, toks)
    core = ar.score_norms(params, feat, toks[:, 6:], am.core_log_prob)
    filler = np.asarray(total - core)
    se = filler.std(ddof=1) / np.sqrt(filler.size)
    assert abs(filler.mean() - float(am.filler_score_norm(params, feat))) < 4 * se


def test_batched_gradient_estimates_equal_one_at_a_time(filler_setup):
    q, params = filler_setup
    toks = ar.sample(jax.random.key(1), params, q.features[0], 8)
    w = jax.random.normal(jax.random.key(2), (3, 8))
    many = ar.gradient_estimates(params, q.features[0], toks, w)
    for e in range(3):
        one = ar.gradient_estimate(params, q.features[0], toks, w[e])
        np.testing.assert_allclose(many[e], one, rtol=1e-4, atol=1e-6)


def _paired(cell, key, args):
    """The arithmetic cell plus per-seed paired differences of ‖ĝ − g‖² (common random numbers:
    every estimator of a seed sees the same questions and answers)."""
    from gpolab.kernels import grouped

    out = grouped.arithmetic_error(cell, key, args)
    out["vanilla-loo"] = out["vanilla"]["sq"] - out["loo"]["sq"]
    out["loo-oracle"] = out["loo"]["sq"] - out["oracle"]["sq"]
    return out


@pytest.mark.slow
def test_sweep_mse_matches_exact_formula_and_orders_estimators():
    """The arithmetic sweep's cells (its setup and row code) at a small size: every MC MSE within
    4 SE (MC and the S2 error of the formula) of the exact formula; the Monte Carlo ordering
    vanilla > loo > oracle from paired per-seed differences on common random numbers, each
    difference > 3 of its own SE and within 4 SE of the exact difference."""
    from gpolab import engine
    from gpolab.kernels import grouped
    from gpolab.labs.sweep import lab as sweep

    cfg = sweep.Config(
        env="arithmetic",
        policy=("base", "icl"),
        estimators=("vanilla", "loo", "oracle", "mean"),
        G=(4, 16),
        seeds=300,
        questions=100,
        hidden=16,
        filler=64,
        truth_samples=128,
    )
    setup = sweep.make_setup(cfg)
    rows, diffs = [], []
    for policy in cfg.instance.policy:
        args, truth = setup(policy)
        for G in cfg.G:
            cell = grouped.ArithmeticCell(cfg.estimators, G, cfg.instance.per_seed)
            m = engine.run(
                _paired,
                cell,
                (*args, np.float32(cfg.eps)),
                jax.random.key(G),
                cfg.seeds,
                grouped.ARITHMETIC_CHUNK,
            )
            sub = pd.DataFrame(sweep._bandit_rows(cfg, cell, m, truth, policy, args[0]))
            rows.append(sub)
            sub = sub.set_index("estimator")
            for hi, lo in (("vanilla", "loo"), ("loo", "oracle")):
                exact = sub.loc[hi, "theory_mse"] - sub.loc[lo, "theory_mse"]
                exact_se = np.hypot(sub.loc[hi, "theory_mse_se"], sub.loc[lo, "theory_mse_se"])
                diffs.append(
                    (
                        policy,
                        G,
                        f"{hi}-{lo}",
                        float(m.mean(f"{hi}-{lo}")),
                        m.se(f"{hi}-{lo}"),
                        exact,
                        exact_se,
                    )
                )
    df = pd.concat(rows)
    assert len(df) == 2 * 4 * 2 and set(df["policy"]) == {"base", "icl"}
    tol = 4 * np.hypot(df["mse_se"], df["theory_mse_se"])
    assert (np.abs(df["mse"] - df["theory_mse"]) < tol).all(), df
    d = pd.DataFrame(diffs, columns=["policy", "G", "pair", "d", "se", "exact", "exact_se"])
    # each paired difference agrees with the exact one
    assert (np.abs(d["d"] - d["exact"]) < 4 * np.hypot(d["se"], d["exact_se"])).all(), d
    # the ordering, on the Monte Carlo: pooled over the four independent cells (own keys) each
    # difference is > 4 SE; in every cell whose exact difference is > 6 SE, it is > 3 SE there
    for _, g in d.groupby("pair"):
        assert g["d"].sum() > 4 * np.sqrt(np.sum(g["se"] ** 2)), g
        powered = g[g["exact"] > 6 * g["se"]]
        assert len(powered) >= 2 and (powered["d"] > 3 * powered["se"]).all(), g


def test_logit_proxy_is_the_logit_gradient_norm(filler_setup):
    """verl's W(τ) = Σ_t [1 − 2 π_t(y_t) + Σ_a π_t(a)²] is ‖∇_z log softmax(z_t)[y_t]‖² summed
    over the counted tokens (filler and the answer up to its first <eos>): checked against
    autodiff with respect to the logits, token by token."""
    q, params = filler_setup
    f = q.features[2]
    toks = ar.sample(jax.random.key(5), params, f, 16)
    F = params.filler

    def sq_grad(z, y):
        g = jax.grad(lambda z: jax.nn.log_softmax(z)[y])(z)
        return jnp.sum(g * g)

    feats = jnp.broadcast_to(f, (16, ar.FEATURES))
    logits = params.model.apply(params.weights, feats, toks[:, F:])  # (16, LENGTH, V)
    core = jax.vmap(jax.vmap(sq_grad))(logits, toks[:, F:])
    live = am.live_mask(am.answer_part(toks[:, F:]))
    zf = params.model.apply(params.weights, f, method=am.Policy.filler_logits)
    fill = jax.vmap(jax.vmap(lambda y: sq_grad(zf, y)))(toks[:, :F])
    want = jnp.sum(core * live, -1) + jnp.sum(fill, -1)
    np.testing.assert_allclose(ar.logit_proxy(params, f, toks), want, rtol=1e-5)
    w, h, counted = ar.token_stats(params, f, toks)  # per token (OTB's w_t), filler first
    np.testing.assert_allclose(w * counted, jnp.concatenate([fill, core * live], -1), atol=1e-5)
    np.testing.assert_array_equal(counted, jnp.concatenate([jnp.ones_like(fill), live], -1))

    def entropy(z):
        p = jax.nn.softmax(z)
        return -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0))

    core_h = jax.vmap(jax.vmap(entropy))(logits)
    want_h = jnp.concatenate([jnp.broadcast_to(entropy(zf), (16, F)), core_h], -1)
    np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-6)


def test_token_gradient_estimates_equal_response_weights_on_every_token(filler_setup):
    """Per-token weights c_g on every counted token give the response-level ĝ; a token weight
    on an uncounted (after <eos>) token changes nothing."""
    q, params = filler_setup
    f = q.features[1]
    toks = ar.sample(jax.random.key(2), params, f, 8)
    c = jax.random.normal(jax.random.key(3), (2, 8))
    _, _, live = ar.token_stats(params, f, toks)
    want = ar.gradient_estimates(params, f, toks, c)
    got = ar.token_gradient_estimates(params, f, toks, c[..., None] * live[None])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    padded = ar.token_gradient_estimates(params, f, toks, c[..., None] * jnp.ones_like(live)[None])
    np.testing.assert_allclose(padded, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("thoughts, filler", [(0, 0), (2, 3)])
def test_the_forward_pass_binds_the_flax_policys_operations(thoughts, filler, x64):
    """``am.logits``, ``am.step``, ``am.init_state`` and ``am.filler_logits`` read the flax
    weights without ``Module.apply`` (whose per-parameter shape check traced each initializer at
    every use): the same jaxpr as :class:`am.Policy`'s methods, so the same numbers bit for bit,
    with and without thoughts and filler, in float32 and float64."""
    from gpolab import engine

    with engine.float64_mode(x64):
        params = am.init(0, hidden=8, thoughts=thoughts, filler=filler)
        w, model, T = params.weights, params.model, params.length
        f = jnp.linspace(-1.0, 1.0, 2 * ar.FEATURES).reshape(2, ar.FEATURES)
        toks = jnp.zeros((2, T), jnp.int32).at[:, -1].set(ar.EOS)
        state = model.apply(w, f, method=am.Policy.init_state)
        pairs = [
            (lambda: model.apply(w, f, toks), lambda: am.logits(w, params, f, toks)),
            (lambda: model.apply(w, f, method=am.Policy.init_state), lambda: am.init_state(w, f)),
        ]
        pairs += [
            (
                lambda t=t: model.apply(w, state, toks[:, 0], t, method=am.Policy.step),
                lambda t=t: am.step(w, params, state, toks[:, 0], t),
            )
            for t in range(T)
        ]
        if filler:
            pairs.append(
                (
                    lambda: model.apply(w, f, method=am.Policy.filler_logits),
                    lambda: am.filler_logits(w, f),
                )
            )
        for flax_way, ours in pairs:
            assert str(jax.make_jaxpr(ours)()) == str(jax.make_jaxpr(flax_way)())
