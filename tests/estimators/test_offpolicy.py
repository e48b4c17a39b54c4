"""Ratio rules and KL estimators (gpolab.estimators.offpolicy): exact identities, each number
derived in its comment; the on-policy expectations of the KL gradients by enumeration."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpolab import envs, estimators
from gpolab.envs import arithmetic, bandit
from gpolab.estimators import offpolicy as rules

CASES = [(r, c) for r in rules.RATIOS for c in rules.rule_clips(r)]


def _grad(ratio, clip, logp_fn, theta, old, c, mask, eps=(0.2, 0.28, 3.0)):
    def obj(th):
        return jnp.sum(rules.objective(ratio, clip, logp_fn(th), old, c, mask, *eps)[0])

    return jax.grad(obj)(theta)


@pytest.fixture(scope="module")
def tiny_arith():
    """A small untrained surrogate with 3 filler tokens: responses of 3 + 4 tokens."""
    policy = arithmetic.init(0, hidden=8, filler=3)
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
    whole = arithmetic.log_prob(
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


def test_cispo_reweights_without_cutting():
    """CISPO: sg(clamp(ρ, 0.8, 1.28))·c·log π: slope c·1.28 at ρ = 2, c·0.8 at ρ = 0.5."""
    old, mask = jnp.zeros((1, 2)), jnp.ones((1, 2))
    l = jnp.log(jnp.array([[2.0, 0.5]]))

    def obj(l):
        return jnp.sum(
            rules.objective("cispo", "weight", l, old, jnp.ones(1), mask, 0.2, 0.28, 3.0)[0]
        )

    np.testing.assert_allclose(jax.grad(obj)(l), [[1.28, 0.8]], rtol=1e-6)


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
