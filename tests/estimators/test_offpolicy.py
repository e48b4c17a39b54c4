"""Ratio rules and KL estimators (gpolab.estimators.offpolicy): exact identities, each number
derived in its comment; the on-policy expectations of the KL gradients by enumeration."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpolab import envs, estimators
from gpolab.envs import arithmetic, arithmetic_model, bandit
from gpolab.estimators import offpolicy as rules

CASES = [(r, c) for r in rules.RATIOS for c in rules.rule_clips(r)]


def _grad(ratio, clip, logp_fn, theta, old, c, mask, eps=(0.2, 0.28, 3.0)):
    def obj(th):
        return jnp.sum(rules.objective(ratio, clip, logp_fn(th), old, c, mask, *eps)[0])

    return jax.grad(obj)(theta)


@pytest.fixture(scope="module")
def tiny_arith():
    """A small untrained surrogate with 3 filler tokens: responses of 3 + 4 tokens."""
    policy = arithmetic_model.init(0, hidden=8, filler=3)
    questions = arithmetic.make_questions(0, 6)
    return arithmetic.ArithmeticInstance(policy, questions, jax.random.key(0), 8)


def _draws(env, params, theta, G=4, n=3, key=0):
    k_p, k_y = jax.random.split(jax.random.key(key))
    prompts = env.sample_prompts(k_p, params, n)
    responses, rewards = env.sample(k_y, params, theta, prompts, G)
    return prompts, responses, rewards


@pytest.mark.parametrize("env_name", ["bandit", "arithmetic"])
def test_every_rule_is_the_on_policy_gradient_at_theta_old(env_name, tiny_arith):
    """At θ = θ_old every ρ_t = 1, so every rule's gradient is Σ_g c_g Σ_t s_t, the env's own
    on-policy gradient with weights c (float rounding only)."""
    env = envs.get(env_name)
    params = (
        bandit.make(bandit.Instance(prompts=4, actions=6)) if env_name == "bandit" else tiny_arith
    )
    theta = env.init(params)
    prompts, responses, rewards = _draws(env, params, theta)
    c = estimators.gradient_weights("loo", rewards)
    c = c + 0.1 * jax.random.normal(jax.random.key(7), c.shape)  # untrained: rewards may be all 0
    old, mask = env.token_logp(params, theta, prompts, responses)
    want = np.asarray(env.gradient(params, theta, prompts, responses, c))
    logp = lambda th: env.token_logp(params, th, prompts, responses)[0]  # noqa: E731
    for ratio, clip in CASES:
        got = np.asarray(_grad(ratio, clip, logp, theta, old, c, mask))
        np.testing.assert_allclose(
            got, want, rtol=2e-4, atol=2e-6 * np.abs(want).max(), err_msg=f"{ratio}/{clip}"
        )


def test_one_token_responses_make_token_sequence_and_sis_equal():
    """On the bandit a response is one token: ρ = Π_t ρ_t = exp(mean_t log ρ_t), so the token,
    sequence and sis rules (unclipped) give the same gradient at any θ."""
    env, params = envs.get("bandit"), bandit.make(bandit.Instance(prompts=4, actions=6))
    theta_old = env.init(params)
    prompts, responses, rewards = _draws(env, params, theta_old)
    c = estimators.gradient_weights("loo", rewards)
    old, mask = env.token_logp(params, theta_old, prompts, responses)
    theta = theta_old + 0.3 * jax.random.normal(jax.random.key(1), theta_old.shape)
    logp = lambda th: env.token_logp(params, th, prompts, responses)[0]  # noqa: E731
    g = {
        r: np.asarray(_grad(r, "none", logp, theta, old, c, mask))
        for r in ("token", "sequence", "sis")
    }
    np.testing.assert_allclose(g["sequence"], g["token"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(g["sis"], g["token"], rtol=1e-5, atol=1e-7)
    none = np.asarray(_grad("none", "none", logp, theta, old, c, mask))
    assert np.abs(none - g["token"]).max() > 1e-3  # θ ≠ θ_old: the correction matters


def test_multi_token_responses_separate_token_from_sis(tiny_arith):
    """With 7 tokens per response Σ_t ρ_t s_t ≠ (Π_t ρ_t) Σ_t s_t away from θ_old."""
    env, params = envs.get("arithmetic"), tiny_arith
    theta_old = env.init(params)
    prompts, responses, rewards = _draws(env, params, theta_old)
    c = jax.random.normal(jax.random.key(7), rewards.shape)  # weights of either sign
    old, mask = env.token_logp(params, theta_old, prompts, responses)
    theta = theta_old + 0.05 * jax.random.normal(jax.random.key(1), theta_old.shape)
    logp = lambda th: env.token_logp(params, th, prompts, responses)[0]  # noqa: E731
    token = np.asarray(_grad("token", "none", logp, theta, old, c, mask))
    sis = np.asarray(_grad("sis", "none", logp, theta, old, c, mask))
    seq = np.asarray(_grad("sequence", "none", logp, theta, old, c, mask))
    scale = np.abs(token).max()
    assert np.abs(token - sis).max() > 1e-3 * scale
    assert np.abs(seq - sis).max() > 1e-3 * scale


def test_token_log_probs_sum_to_the_sequence_log_prob(tiny_arith):
    """Σ_t mask·log π_t = log π(y|x) of the env's own log_prob."""
    env, params = envs.get("arithmetic"), tiny_arith
    theta = env.init(params)
    prompts, responses, _ = _draws(env, params, theta)
    logp, mask = env.token_logp(params, theta, prompts, responses)
    feats = params.questions.features[prompts][:, None, :]
    whole = arithmetic_model.log_prob(
        params.policy.weights,
        params.policy,
        jnp.broadcast_to(feats, responses.shape[:2] + feats.shape[-1:]),
        responses,
    )
    np.testing.assert_allclose(np.sum(logp * mask, -1), whole, rtol=1e-5, atol=1e-5)


# one token, weight c and ratio ρ = e^(l − l_old): d objective / d l by hand for each clip
# (ε_low = 0.2, ε_high = 0.28, c_dual = 3): the PPO objective min(ρc, clip(ρ)c) has slope ρc
# where ρc is the smaller term, else 0 (clipped).
@pytest.mark.parametrize(
    "clip,rho,c,slope",
    [
        ("ppo", 1.1, 1.0, 1.1),  # inside [0.8, 1.2]
        ("ppo", 1.3, 1.0, 0.0),  # c > 0, ρ > 1.2: clipped
        ("ppo", 1.3, -1.0, -1.3),  # c < 0, ρ > 1.2: min picks ρc (unclipped)
        ("ppo", 0.7, -1.0, 0.0),  # c < 0, ρ < 0.8: clipped
        ("ppo", 0.7, 1.0, 0.7),  # c > 0, ρ < 0.8: min picks ρc
        ("higher", 1.25, 1.0, 1.25),  # inside [0.8, 1.28]
        ("higher", 1.3, 1.0, 0.0),  # above 1.28
        ("dual", 3.5, -1.0, 0.0),  # c < 0 and ρ > c_dual = 3 (ρc < 3c): the floor 3c, constant
        ("dual", 2.5, -1.0, -2.5),  # c < 0, ρ below c_dual: as ppo (unclipped)
        # issue 40 defect 1: dual is ppo's symmetric clip (verl's defaults clip_ratio_low =
        # clip_ratio_high = 0.2) plus the floor; c > 0 and 1.2 < ρ < 1.28 is clipped (the old
        # rule used 1 + ε_high and gave slope 1.234)
        ("dual", 1.234, 1.0, 0.0),
        ("higher", 1.234, 1.0, 1.234),  # the same token under clip-higher: inside [0.8, 1.28]
        ("dual", 1.234, -1.0, -1.234),  # c < 0, 1.2 < ρ < 3: min picks ρc, above the floor
        ("dual", 0.7, -1.0, 0.0),  # c < 0, ρ < 0.8: clipped as ppo
        ("none", 1.3, 1.0, 1.3),
    ],
)
def test_clip_modes_cut_the_gradient_where_ppo_does(clip, rho, c, slope):
    old = jnp.zeros((1, 1))
    mask = jnp.ones((1, 1))
    cw = jnp.full((1,), c)

    def obj(l):
        return jnp.sum(rules.objective("token", clip, l, old, cw, mask, 0.2, 0.28, 3.0)[0])

    got = float(jax.grad(obj)(jnp.full((1, 1), np.log(rho)))[0, 0])
    assert got == pytest.approx(slope, abs=1e-5)  # d(ρc)/dl = ρc


@pytest.mark.parametrize(
    "ratio, eps, want",
    [
        # verl's CISPO recipe (clip_ratio_low 10, clip_ratio_high 0.2): min(ρ, 1.2), no floor
        ("cispo", rules.CISPO_EPS, [1.2, 0.5, 0.1, 1.1]),
        # gpolab's two-sided variant at the lab's ε (0.2, 0.28): clamp(ρ, 0.8, 1.28) — the lab's
        # only CISPO rule before issue 55
        ("cispo-two-sided", (0.2, 0.28), [1.28, 0.8, 0.8, 1.1]),
    ],
)
def test_cispo_reweights_without_cutting(ratio, eps, want):
    """sg(clamp(ρ, 1 − ε_low, 1 + ε_high))·c·log π at ρ = 2, 0.5, 0.1, 1.1: the slope is c times
    the clamped ratio, never 0."""
    old, mask = jnp.zeros((1, 4)), jnp.ones((1, 4))
    l = jnp.log(jnp.array([[2.0, 0.5, 0.1, 1.1]]))

    def obj(l):
        return jnp.sum(rules.objective(ratio, "weight", l, old, jnp.ones(1), mask, *eps, 3.0)[0])

    np.testing.assert_allclose(jax.grad(obj)(l), [want], rtol=1e-6)


def test_gspo_and_cispo_defaults_are_the_authors_shipped_settings():
    """Pinned to the numbers in the authors' files (verl-project/verl 1dda039b9c63):
    examples/gspo_trainer/run_qwen3_8b_fsdp.sh CLIP_RATIO_LOW 3e-4, CLIP_RATIO_HIGH 4e-4 (also the
    GSPO paper v2 §5.1 and TRL's paper_index); examples/cispo_trainer/run_qwen3_8b_fsdp.sh
    clip_ratio_low 10, clip_ratio_high 0.2.  The mismatch lab's verl/gspo and verl/cispo read the
    same scripts and hold the same numbers."""
    from gpolab.estimators import mismatch

    assert rules.GSPO_EPS == (3e-4, 4e-4)
    assert rules.CISPO_EPS == (10.0, 0.2)
    for name, eps in (("verl/gspo", rules.GSPO_EPS), ("verl/cispo", rules.CISPO_EPS)):
        d = mismatch.REGISTRY[name].defaults
        assert (d["eps_low"], d["eps_high"]) == eps, name
    assert "gspo_trainer/run_qwen3_8b_fsdp.sh" in rules.RATIOS["gspo"].source
    assert "cispo_trainer/run_qwen3_8b_fsdp.sh" in rules.RATIOS["cispo"].source
    assert rules.RATIOS["cispo-two-sided"].source.startswith("gpolab's variant")
    assert rules.RATIOS["gspo"].clips == ("higher",)  # verl: clip_ratio_low and _high apart


def _verl_gspo_losses(old_log_prob, log_prob, advantages, response_mask, low, high):
    """verl-project/verl 1dda039b9c63 core_algos.py::compute_policy_loss_gspo up to pg_losses
    (before agg_loss), line by line in jax (.detach() is stop_gradient)."""
    sg = jax.lax.stop_gradient
    negative_approx_kl = log_prob - old_log_prob
    seq_lengths = jnp.maximum(jnp.sum(response_mask, -1), 1)
    negative_approx_kl_seq = jnp.sum(negative_approx_kl * response_mask, -1) / seq_lengths
    log_seq_importance_ratio = log_prob - sg(log_prob) + sg(negative_approx_kl_seq)[:, None]
    log_seq_importance_ratio = jnp.minimum(log_seq_importance_ratio, 10.0)
    seq_importance_ratio = jnp.exp(log_seq_importance_ratio)
    pg_losses1 = -advantages * seq_importance_ratio
    pg_losses2 = -advantages * jnp.clip(seq_importance_ratio, 1 - low, 1 + high)
    return jnp.maximum(pg_losses1, pg_losses2)


def _verl_cispo_losses(old_log_prob, log_prob, advantages, low, high):
    """verl-project/verl 1dda039b9c63 core_algos.py::compute_policy_loss_cispo's pg_losses."""
    negative_approx_kl = jnp.clip(log_prob - old_log_prob, -20.0, 20.0)
    ratio = jnp.exp(negative_approx_kl)
    clipped_ratio = jnp.clip(ratio, 1 - low, 1 + high)
    return -jax.lax.stop_gradient(clipped_ratio) * advantages * log_prob


def _trl_cispo_losses(old_log_prob, log_prob, advantages, epsilon_high):
    """huggingface/trl f2cd57710ae3 grpo_trainer.py::_compute_loss, loss_type="cispo" (token
    level): clamp(coef_1, max=epsilon_high).detach() · A · log π, negated."""
    coef_1 = jnp.exp(log_prob - old_log_prob)
    clamped_ratios = jax.lax.stop_gradient(jnp.minimum(coef_1, epsilon_high))
    return -clamped_ratios * advantages * log_prob


def _token_batch(scale, key=0, G=6, T=4):
    """log π_old, log π (log ratios ~ N(0, scale²)), c of both signs, a mask with padding."""
    k1, k2 = jax.random.split(jax.random.key(key))
    old = -1.0 - jax.random.uniform(k1, (G, T))
    logp = old + scale * jax.random.normal(k2, (G, T))
    c = jnp.array([1.0, -1.0, 0.5, -2.0, 1.5, -0.5])[:G]
    mask = jnp.ones((G, T)).at[1, 3].set(0.0).at[4, 2:].set(0.0)
    return old, logp, c, mask


def test_gspo_weight_is_the_gradient_of_verls_gspo_loss():
    """∂/∂log π of −Σ mask·objective("gspo") equals ∂/∂log π of verl's Σ mask·pg_losses at the
    script's ε, token by token, on responses whose sequence ratios fall inside and outside
    [1 − 3e-4, 1 + 4e-4] with advantages of both signs (the case has both)."""
    old, logp, c, mask = _token_batch(1e-3)
    A = jnp.broadcast_to(c[:, None], logp.shape)

    def ours(lp):
        return -jnp.sum(
            rules.objective("gspo", "higher", lp, old, c, mask, *rules.GSPO_EPS, 3.0)[0]
        )

    def verl(lp):
        return jnp.sum(_verl_gspo_losses(old, lp, A, mask, *rules.GSPO_EPS) * mask)

    got, want = jax.grad(ours)(logp), jax.grad(verl)(logp)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    cut = rules.objective("gspo", "higher", logp, old, c, mask, *rules.GSPO_EPS, 3.0)[1]
    assert bool(cut.any()) and not bool(cut[mask > 0].all())  # both kinds of token occur
    # the lab's pre-issue-55 GSPO rows (sequence/ppo at ε 0.2) cut none of these tokens
    old_rule = rules.objective("sequence", "ppo", logp, old, c, mask, 0.2, 0.28, 3.0)[1]
    assert not bool(old_rule.any())


def test_cispo_weight_is_the_gradient_of_verls_and_trls_cispo_loss():
    """∂/∂log π of −Σ mask·objective("cispo") at verl's recipe's ε equals the gradient of verl's
    pg_losses there, and of TRL's one-sided clamp at epsilon_high = 1.2 (TRL's ε_high is the
    cap itself): verl's recipe and TRL's loss are one rule; log ratios up to ±1.5 reach both
    sides of the old two-sided band [0.8, 1.28], which gives other numbers."""
    old, logp, c, mask = _token_batch(0.5, key=1)
    A = jnp.broadcast_to(c[:, None], logp.shape)
    low, high = rules.CISPO_EPS

    def ours(ratio, eps):
        f = lambda lp: -jnp.sum(rules.objective(ratio, "weight", lp, old, c, mask, *eps, 3.0)[0])  # noqa: E731
        return jax.grad(f)(logp)

    verl = jax.grad(lambda lp: jnp.sum(_verl_cispo_losses(old, lp, A, low, high) * mask))(logp)
    trl = jax.grad(lambda lp: jnp.sum(_trl_cispo_losses(old, lp, A, 1 + high) * mask))(logp)
    got = ours("cispo", rules.CISPO_EPS)
    np.testing.assert_allclose(got, verl, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got, trl, rtol=1e-6, atol=1e-7)
    rho = np.exp(np.asarray(logp - old))[np.asarray(mask) > 0]
    assert (rho < 0.8).any() and (rho > 1.28).any()
    two_sided = ours("cispo-two-sided", (0.2, 0.28))
    assert np.abs(np.asarray(two_sided - got)).max() > 0.1 * np.abs(np.asarray(got)).max()


def test_kl_estimators_expected_gradients_by_enumeration():
    """On-policy, by enumerating the actions of each prompt (exact, no sampling):
    E_π[∇k1] = E_π[s] = 0; E_π[∇k2] = E_π[(log π − log π_ref) s] = ∇KL(π‖π_ref);
    E_π[∇k3] = E_π[(1 − π_ref/π) s] = −Σ_a π_ref ∇log π = ∇KL(π_ref‖π) (gpolab's derivation)."""
    env, params = envs.get("bandit"), bandit.make(bandit.Instance(prompts=3, actions=5))
    theta = env.init(params)
    theta_ref = theta + 0.7 * jax.random.normal(jax.random.key(3), theta.shape)
    P, A = params.success.shape
    prompts = jnp.repeat(jnp.arange(P), A)[:, None]  # every (prompt, action) once
    actions = jnp.tile(jnp.arange(A), P)[:, None, None]
    pi = jax.nn.softmax(theta.reshape(P, A), -1)
    weight = (params.prompt_probs[:, None] * pi).reshape(-1)  # f_x π(a|x)

    def expected(kl):
        def est(th):
            logp, mask = env.token_logp(params, th, prompts[:, 0], actions[:, :, 0])
            ref = env.token_logp(params, theta_ref, prompts[:, 0], actions[:, :, 0])[0]
            return jnp.sum(weight * rules.kl_terms(kl, logp, ref, mask)[:, 0, 0])

        return np.asarray(jax.grad(est)(theta))

    forward = np.asarray(jax.grad(lambda th: env.kl(params, th, theta_ref))(theta))
    reverse = np.asarray(jax.grad(lambda th: env.kl(params, theta_ref, th))(theta))  # KL(ref‖θ)
    scale = np.abs(forward).max()
    np.testing.assert_allclose(expected("k1"), 0.0, atol=1e-6 * scale + 1e-7)
    np.testing.assert_allclose(expected("k2"), forward, atol=1e-5 * scale)
    np.testing.assert_allclose(expected("k3"), reverse, atol=1e-5 * scale)
    assert np.abs(reverse - forward).max() > 0.05 * scale  # k3's target differs here


def test_registry_entries_name_their_sources():
    for name, rule in {**rules.RATIOS, **rules.KLS}.items():
        assert rule.doc
        if name != "none":
            assert rule.source
    assert "compute_policy_loss_gspo" in rules.RATIOS["sequence"].source
    # verl's GSPO loss has no clip_ratio_c: sequence/dual is labelled gpolab's
    assert "dual: gpolab's extension" in rules.RATIOS["sequence"].source
    assert "gpolab's extension" in rules.RATIOS["sequence"].doc
    assert "importance_sampling_level" in rules.RATIOS["sequence"].source


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda a: rules.objective("tokn", "none", *a), "ratio: got 'tokn'"),
        (lambda a: rules.objective("cispo", "ppo", *a), "clip: got 'ppo'"),
        (lambda a: rules.objective("gspo", "ppo", *a), "clip: got 'ppo'"),
        (lambda a: rules.kl_terms("k4", a[0], a[1], a[3]), "kl: got 'k4'"),
    ],
)
def test_an_unknown_rule_is_one_named_error(call, message):
    """A misspelled ratio, a clip mode the ratio does not take and an unknown KL estimator name
    the setting and its choices (was: a bare KeyError from the registry)."""
    logp = jnp.zeros((1, 2, 3))
    args = (logp, logp, jnp.ones((1, 2)), jnp.ones_like(logp), 0.2, 0.28, 3.0)
    with pytest.raises(ValueError, match=message):
        call(args)
