"""Rollout logs simulated from gpolab's surrogates, with their truth (validation of ``gpolab plan``,
issue 18; theory §3, §10).

A simulated GRPO run at a fixed policy θ: ``steps`` steps of B prompts with G responses each,
one row per response (``Simulated.frame``), plus measured norms ‖ĝ‖ of the leave-one-out
gradient at a few batch sizes (``Simulated.norms``), plus the exact truth the log came from
(``Simulated.truth``), so that what ``gpolab plan`` recovers from the log can be compared with it.

* Prompts of the log come in a dataloader's order: each epoch is a seeded permutation of the
  prompts cut into steps of B distinct prompts, the remainder dropped (``drop_last``), so every
  (step, prompt) is one group of G responses, as in a trainer's log.  The envs' prompt
  distribution f is uniform, so each response's prompt still has law f.
* ``proxy`` q = ‖W‖², W = ∇_θ log π(y|x) over all of θ: the tabular bandit's W = e_a − π_x gives
  q = 1 − 2π(a|x) + ‖π_x‖² exactly; the arithmetic surrogate's is autodiff over every flax
  parameter.  E[q | x] = S2(x), the truth's ``S2``.
* ``norms``: ``norm_steps`` independent steps at each B of ``norm_batches``, B prompts iid from f
  (the theory's mini-batch), ĝ = (1/(BG)) Σ_b Σ_g A_bg W_bg with loo advantages
  A = G/(G − 1)(Z − Z̄), in the flat global parameter space.  Exactly (theory §3, gpolab's
  derivation in :mod:`gpolab.theory.mse`):  E‖ĝ‖² = ‖g‖² + [c1 + E_X MSE_loo(X; G)]/B
  (truth ``grad_sq_exact``).
* truth: ``V``, ``prompt_probs``, ``S2`` per prompt; ``degenerate`` {G: Σ_x f(x)[V^G + (1 − V)^G]}
  for G = 2 … 256; c1, C2, C3 (:func:`gpolab.theory.groupsize.constants`), ``gstar`` = 1 + √(C3/c1),
  ``g_sq`` = ‖g‖², ``mean_V`` = Σ_x f(x) V(x), with standard errors (0 where exact).
"""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from gpolab import estimators, validate
from gpolab.envs import arithmetic, bandit
from gpolab.theory import difficulty, groupsize, mse

# bandit.make settings of simulate_bandit: peaked policies (logit_scale 4) over mostly-0/1 success
# probabilities (Beta(0.3, 0.5)) give V from ~0.001 to ~0.997 (mean 0.37, sd 0.25 at 512 prompts)
# and about 21% degenerate groups at G = 8.
BANDIT_SETTINGS = {"logit_scale": 4.0, "success_a": 0.3, "success_b": 0.5}
# bandit.make options besides the sizes
MAKE_OPTIONS = ("kind", "dim", "logit_scale", "success_a", "success_b")
# the arithmetic surrogate as ``gpolab sweep`` builds it (its defaults): GRU width, filler tokens,
# sampled sequences per question of the Monte Carlo S2
ARITHMETIC_SETTINGS = {"hidden": 32, "filler": 64, "truth_samples": 256}
DEGENERATE_G = tuple(range(2, 257))
ANSWER_TEXT = "0123456789-"  # answer token id → character (<eos> ends the text)


@dataclasses.dataclass(frozen=True)
class Simulated:
    """A simulated rollout log, its gradient norms and the truth it was drawn from."""

    frame: pd.DataFrame  # one row per response: step, prompt, prompt_id, reward, proxy, length,
    # completion
    norms: pd.DataFrame  # batch, grad_norm: one row per simulated step of ``norm_batches``
    truth: dict  # module docstring


def degenerate_truth(V, prompt_probs, Gs=DEGENERATE_G) -> dict[int, float]:
    """{G: P(a group of G is all-equal)} = Σ_x f(x) [V(x)^G + (1 − V(x))^G] (binary rewards)."""
    return {int(G): difficulty.degenerate_fraction_known(V, prompt_probs, G) for G in Gs}


def truth_summary(truth, G: int, batches, **extra) -> dict:
    """The truth dict of :class:`Simulated` from an env truth (bandit or arithmetic field names).

    ``grad_sq_exact`` {B: E‖ĝ_B‖² = ‖g‖² + MSE_loo(B, G)} and ``grad_sq_se`` {B: its standard
    error from a Monte Carlo S2} for each B of ``batches``."""
    c = groupsize.constants(truth)
    f = np.asarray(truth.prompt_probs, dtype=np.float64)
    V = np.asarray(truth.V, dtype=np.float64)
    g_sq = float(np.sum(np.asarray(truth.g, dtype=np.float64) ** 2))
    return {
        "V": V,
        "prompt_probs": f,
        "S2": np.asarray(truth.S2, dtype=np.float64),
        "G": G,
        "degenerate": degenerate_truth(V, f),
        "mean_V": float(f @ V),
        **dataclasses.asdict(c),  # c1, C2, C3 and their SEs
        "gstar": c.g_star_exact,
        "gstar_se": c.g_star_se,
        "g_sq": g_sq,
        "grad_sq_exact": {B: g_sq + mse.mse(truth, "loo", G, B) for B in batches},
        "grad_sq_se": {B: mse.mse_se(truth, "loo", G, B) for B in batches},
        "exact": truth,  # the env's truth (the trainer's estimator's exact G*: compare)
        **extra,
    }


def batch_order(key: jax.Array, prompts: int, steps: int, B: int) -> np.ndarray:
    """(steps, B) prompt ids in a dataloader's order: epochs of a permutation of ``prompts`` ids
    (epoch e from ``fold_in(key, e)``), each cut into ⌊prompts/B⌋ steps of B distinct ids."""
    per_epoch = prompts // B
    epochs = -(-steps // per_epoch)
    perms = [jax.random.permutation(jax.random.fold_in(key, e), prompts) for e in range(epochs)]
    order = np.stack([np.asarray(p)[: per_epoch * B] for p in perms]).reshape(-1, B)
    return order[:steps].astype(np.int64)


def rollout_frame(
    order, rewards, proxy, length, completion, logit_proxy, pair_score=None
) -> pd.DataFrame:
    """One row per response from (steps, B) prompt ids and (steps, B, G) per-response values
    (``logit_proxy``: verl's forward-only W(τ), :func:`gpolab.envs.arithmetic.logit_proxy`;
    ``pair_score``: :func:`gpolab.theory.gstar.pair_scores`, NaN when not given)."""
    steps, B, G = np.shape(rewards)
    ids = np.repeat(np.asarray(order, dtype=np.int64).reshape(-1), G)
    return pd.DataFrame(
        {
            "step": np.repeat(np.arange(steps, dtype=np.int64), B * G),
            "prompt": [f"q{i}" for i in ids],
            "prompt_id": ids,
            "reward": np.asarray(rewards, dtype=np.float64).reshape(-1),
            "proxy": np.asarray(proxy, dtype=np.float64).reshape(-1),
            "length": np.asarray(length, dtype=np.float64).reshape(-1),
            "completion": list(completion),
            "logit_proxy": np.asarray(logit_proxy, dtype=np.float64).reshape(-1),
            "pair_score": np.full(np.size(rewards), np.nan)
            if pair_score is None
            else np.asarray(pair_score, dtype=np.float64).reshape(-1),
        }
    )


@partial(jax.jit, static_argnums=(0, 3, 4, 5))
def _grad_norms(env, params, key: jax.Array, B: int, G: int, steps: int) -> jax.Array:
    """(steps,) ‖ĝ‖ of independent loo mini-batch steps at the env's θ₀ (module docstring)."""
    theta = env.init(params)

    def one(k):
        k_prompts, k_sample = jax.random.split(k)
        prompts = env.sample_prompts(k_prompts, params, B)
        responses, rewards = env.sample(k_sample, params, theta, prompts, G)
        weights = estimators.loo_advantages(rewards) / (B * G)
        return jnp.linalg.norm(env.gradient(params, theta, prompts, responses, weights))

    return jax.lax.map(one, jax.random.split(key, steps))


def grad_norms(env, params, key: jax.Array, G: int, batches, steps: int) -> pd.DataFrame:
    """Columns batch, grad_norm: ``steps`` rows for each B of ``batches``, drawn with key
    ``fold_in(key, B)``."""
    rows = [
        (B, np.asarray(_grad_norms(env, params, jax.random.fold_in(key, B), B, G, steps)))
        for B in batches
    ]
    return pd.DataFrame(
        {
            "batch": np.concatenate([np.full(len(n), B, np.int64) for B, n in rows]),
            "grad_norm": np.concatenate([n.astype(np.float64) for _, n in rows]),
        }
    )


def check_sizes(steps, B, G, norm_batches, norm_steps, seed, prompts, field="prompts") -> None:
    """Plain-Python checks shared by both simulations (one-line ConfigError); ``prompts`` is the
    number of prompts (field name ``field``), at least B."""
    validate.integer("steps", steps, 1)
    validate.integer("G", G, 2)
    validate.integer(field, prompts, 1)
    validate.integer("B", B, 1, prompts)
    validate.integers("norm_batches", tuple(norm_batches), 1)
    validate.integer("norm_steps", norm_steps, 1)
    validate.integer("seed", seed, 0)


# ---------------------------------------------------------------- bandit


def bandit_proxy(params: bandit.BanditParams, prompts, actions) -> np.ndarray:
    """q = ‖e_a − π_x‖² = 1 − 2π(a|x) + ‖π_x‖² (tabular W), float64, shape of ``actions``."""
    pi = np.asarray(bandit.policy(params), dtype=np.float64)[np.asarray(prompts)]  # (n, A)
    pa = np.take_along_axis(pi, np.asarray(actions), axis=-1)
    return 1 - 2 * pa + np.sum(pi**2, axis=-1, keepdims=True)


def bandit_pairs(params: bandit.BanditParams, prompts, actions, rewards) -> np.ndarray:
    """:func:`gpolab.theory.gstar.pair_scores` of each group (rows of ``actions``/``rewards``,
    (n, G)) from the tabular W's inner products (e_a − π)·(e_b − π) = [a = b] − π(a) − π(b) +
    ‖π‖², float64, shape of ``actions``."""
    from gpolab.theory import gstar

    pi = np.asarray(bandit.policy(params), dtype=np.float64)[np.asarray(prompts)]  # (n, A)
    a = np.asarray(actions)
    pa = np.take_along_axis(pi, a, axis=-1)
    gram = (a[:, :, None] == a[:, None, :]) - pa[:, :, None] - pa[:, None, :]
    gram = gram + np.sum(pi**2, axis=-1)[:, None, None]
    return gstar.pair_scores(np.asarray(rewards, np.float64), gram)


def simulate_bandit(
    *,
    steps=50,
    B=32,
    G=8,
    norm_batches=(8, 64),
    norm_steps=200,
    seed=0,
    prompts=512,
    actions=64,
    **make_kwargs,
) -> Simulated:
    """A rollout log of the tabular bandit ``bandit.make(seed, prompts, actions, ...)`` at its θ
    (:data:`BANDIT_SETTINGS` unless ``make_kwargs`` overrides them), exact truth by enumeration.
    Completions are the action as text ("a17"); length is 1 (one action, one token)."""
    check_sizes(steps, B, G, norm_batches, norm_steps, seed, prompts)
    for name in make_kwargs:
        validate.choice("make_kwargs", name, MAKE_OPTIONS)
    settings = {**BANDIT_SETTINGS, **make_kwargs, "prompts": prompts, "actions": actions}
    if settings.setdefault("kind", "tabular") != "tabular":
        raise validate.ConfigError(
            f"kind: got {settings['kind']!r}; allowed: tabular (the proxy q = ‖e_a − π‖²)"
        )
    params = bandit.make(seed, **settings)
    key = jax.random.key(seed)
    order = batch_order(jax.random.fold_in(key, 1), prompts, steps, B)
    actions_, rewards = jax.jit(bandit.sample, static_argnums=3)(
        jax.random.fold_in(key, 2),
        params,
        jnp.asarray(order.reshape(-1), jnp.int32),
        G,
        bandit.outcome_tables(params),
    )
    actions_ = np.asarray(actions_)
    proxy = bandit_proxy(params, order.reshape(-1), actions_)  # also verl's W (one token)
    frame = rollout_frame(
        order,
        np.asarray(rewards).reshape(steps, B, G),
        proxy,
        np.asarray(bandit.response_length(params, jnp.asarray(order.reshape(-1)), actions_)),
        (f"a{a}" for a in actions_.reshape(-1)),
        proxy,
        bandit_pairs(params, order.reshape(-1), actions_, np.asarray(rewards)),
    )
    norms = grad_norms(bandit.ENV, params, jax.random.fold_in(key, 3), G, norm_batches, norm_steps)
    truth = truth_summary(bandit.exact(params), G, norm_batches, settings=settings, V_exact=True)
    return Simulated(frame, norms, truth)


# ---------------------------------------------------------------- arithmetic


def answer_text(tokens) -> str:
    """The answer tokens (LENGTH,) as text, up to the first <eos>: [1, 2, <eos>, <eos>] → "12"."""
    out = []
    for t in np.asarray(tokens):
        if t == arithmetic.EOS:
            break
        out.append(ANSWER_TEXT[t])
    return "".join(out)


def arithmetic_instance(seed: int, policy: str, questions: int) -> arithmetic.ArithmeticInstance:
    """The questions and the pre-trained ``policy`` snapshot as ``gpolab sweep`` builds them
    (instance seed ``seed``, :data:`ARITHMETIC_SETTINGS`, truth key ``fold_in(key(seed), 1)``)."""
    validate.choice("policy", policy, arithmetic.POLICIES)
    validate.integer("questions", questions, 1)
    qs = arithmetic.make_questions(seed, questions)
    s = ARITHMETIC_SETTINGS
    target = {policy: arithmetic.POLICIES[policy]}
    pol = arithmetic.pretrain(qs, seed, s["hidden"], target, filler=s["filler"])[policy]
    truth_key = jax.random.fold_in(jax.random.key(seed), 1)
    return arithmetic.ArithmeticInstance(pol, qs, truth_key, s["truth_samples"])


@jax.jit
def _arithmetic_per_response(policy, features, tokens):
    """(n, G) proxy ‖∇_θ log π(y|x)‖², length (filler + answer tokens up to the first <eos>) and
    verl's forward-only W(τ) for tokens (n, G, T) of questions with ``features`` (n, F)."""
    proxy = jax.lax.map(lambda a: arithmetic.score_norms(policy, a[0], a[1]), (features, tokens))
    live = arithmetic.live_mask(arithmetic.answer_part(tokens))
    logit = jax.vmap(arithmetic.logit_proxy, in_axes=(None, 0, 0))(policy, features, tokens)
    return proxy, policy.filler + jnp.sum(live, axis=-1), logit


def simulate_arithmetic(
    *,
    steps=20,
    B=16,
    G=8,
    norm_batches=(4, 32),
    norm_steps=100,
    seed=0,
    policy="instruct",
    questions=500,
) -> Simulated:
    """A rollout log of the arithmetic LLM surrogate (``policy`` pre-trained as the sweep does).
    V is exact (teacher forcing); S2, hence C2, C3 and G*, carry the Monte Carlo error of
    ``truth_samples`` sequences per question (``C2_se``, ``C3_se``, ``gstar_se``).  Completions
    are the answer text; length counts the filler and the answer tokens up to the first <eos>."""
    check_sizes(steps, B, G, norm_batches, norm_steps, seed, questions, "questions")
    instance = arithmetic_instance(seed, policy, questions)
    env, key = arithmetic.ENV, jax.random.key(seed)
    order = batch_order(jax.random.fold_in(key, 1), questions, steps, B)
    prompts = jnp.asarray(order.reshape(-1), jnp.int32)
    theta = env.init(instance)
    tokens, rewards = jax.jit(env.sample, static_argnums=4)(
        jax.random.fold_in(key, 2), instance, theta, prompts, G
    )
    feats = instance.questions.features[prompts]
    proxy, length, logit = _arithmetic_per_response(instance.policy, feats, tokens)
    answers = np.asarray(arithmetic.answer_part(tokens)).reshape(-1, arithmetic.LENGTH)
    frame = rollout_frame(
        order,
        np.asarray(rewards).reshape(steps, B, G),
        proxy,
        length,
        (answer_text(a) for a in answers),
        logit,
    )
    norms = grad_norms(env, instance, jax.random.fold_in(key, 3), G, norm_batches, norm_steps)
    truth = jax.jit(env.exact)(instance, theta)
    settings = {**ARITHMETIC_SETTINGS, "policy": policy, "questions": questions}
    return Simulated(
        frame, norms, truth_summary(truth, G, norm_batches, settings=settings, V_exact=True)
    )
