"""A synthetic arithmetic LLM surrogate (theory §1, [U] §6): questions → answer token sequences.

* Questions: ``n`` (default 500) from a seeded generator, uniform over 5 categories
  ``a + b − c``, ``a + b − c + d``, ``a × b``, ``a ÷ b`` (exact quotient) and ``a − (b − c)``,
  with small operands so every answer has |y*| ≤ 99.
* Answers are token sequences over ``0–9, '-', <eos>`` of length ``L = 4`` (sign, two digits,
  end); everything after the first ``<eos>`` is ``<eos>`` (the canonical form).
* Policy: a small autoregressive flax model: the question (category and operands, one-hot) is
  encoded by a dense layer into the initial state of a GRU decoder that emits one token per step.
  log π(y|x) sums the token log-probabilities up to and including the first ``<eos>``.  The
  network and its log-probabilities: :mod:`gpolab.envs.arithmetic_model`; here sampling,
  rewards, gradient estimates, the exact truth and the env's settings.
* Reward Z = 1 iff the canonical generated answer equals y*.  Hence exactly
  V(x) = π_θ(y*|x) (teacher forcing) and g_x = ∇_θ π_θ(y*|x) (autodiff).
* A Monte Carlo gradient needs only sampled sequences and one backward pass per group
  (theory §2): ĝ = ∇_θ (1/G) Σ_g stop_gradient(A_g) log π_θ(y_g|x).
* ``ENV``: the :class:`gpolab.envs.Env` over the flat weights θ of one
  :class:`ArithmeticInstance` (policy, questions).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.flatten_util import ravel_pytree

from gpolab import configs, validate
from gpolab.configs import option
from gpolab.envs import Env
from gpolab.envs import arithmetic_model as model
from gpolab.envs.arithmetic_model import (
    FILLER,
    FILLER_VOCAB,
    THOUGHT_VOCAB,
    THOUGHTS,
    ArithmeticParams,
    answer_part,
    canonical,
    core_log_prob,
    filler_probs,
    filler_score_norm,
    init,
    live_mask,
    log_prob,
    token_log_probs,
)
from gpolab.envs.questions import (  # noqa: F401  (re-exported: arithmetic.encode, ...)
    CATEGORIES,
    EOS,
    FEATURES,
    LENGTH,
    MINUS,
    OPERAND_MAX,
    START,
    VOCAB,
    Questions,
    encode,
    make_questions,
)
from gpolab.envs.sampling import inverse_cdf


def thought_prefixes(params: ArithmeticParams) -> jax.Array:
    """Every reasoning prefix (k^R, R) as token ids."""
    k, R = params.thought_vocab, params.thoughts
    grid = np.indices((k,) * R).reshape(R, -1).T if R else np.zeros((1, 0), np.int64)
    return jnp.asarray(grid + VOCAB, jnp.int32)


def correct_sequences(params: ArithmeticParams, answer: jax.Array) -> jax.Array:
    """Every successful decoded sequence for one answer: each prefix followed by y*
    (k^R, thoughts + LENGTH); the filler, independent of both, is marginalised out."""
    pre = thought_prefixes(params)
    return jnp.concatenate([pre, jnp.broadcast_to(answer, (pre.shape[0], LENGTH))], -1)


def _success_one(weights, params, features, answer):
    seqs = correct_sequences(params, answer)
    feats = jnp.broadcast_to(features, (seqs.shape[0], FEATURES))
    return jnp.exp(jax.nn.logsumexp(core_log_prob(weights, params, feats, seqs)))


def success_prob(params: ArithmeticParams, questions: Questions) -> jax.Array:
    """V(x) = Σ_t π_θ(t, y*|x) over every reasoning prefix t, for each question (n,)."""
    return jax.vmap(_success_one, in_axes=(None, None, 0, 0))(
        params.weights, params, questions.features, questions.answers
    )


def exact_gradients(params: ArithmeticParams, questions: Questions) -> jax.Array:
    """(n, D) g_x = ∇_θ V(x) for every question, flattened."""
    grads = jax.vmap(jax.grad(_success_one), in_axes=(None, None, 0, 0))(
        params.weights, params, questions.features, questions.answers
    )
    return jax.vmap(lambda g: ravel_pytree(g)[0])(grads)


def _decode(params: ArithmeticParams, features: jax.Array, G: int, pick) -> jax.Array:
    """(G, thoughts + LENGTH) tokens, ``pick(t, probs (G, V)) -> (G,)`` choosing each token."""
    state = model.init_state(params.weights, jnp.broadcast_to(features, (G, FEATURES)))
    token = jnp.full((G,), VOCAB + params.thought_vocab, jnp.int32)
    out = []
    for t in range(params.length):
        state, logits = model.step(params.weights, params, state, token, t)
        token = pick(t, jax.nn.softmax(logits))
        out.append(token)
    tokens = jnp.stack(out, axis=-1)
    return jnp.concatenate([tokens[:, : params.thoughts], canonical(answer_part(tokens))], -1)


def sample(key: jax.Array, params: ArithmeticParams, features: jax.Array, G: int):
    """G full sequences (G, filler + thoughts + LENGTH) int32 for one question, by inverse-CDF
    sampling at every step; the answer part is canonicalised."""
    key, k_filler = jax.random.split(key)
    u = jax.random.uniform(key, (params.length, G))
    tokens = _decode(params, features, G, lambda t, p: inverse_cdf(p, u[t][:, None])[:, 0])
    if params.filler:
        u_f = jax.random.uniform(k_filler, (G, params.filler))
        tokens = jnp.concatenate([inverse_cdf(filler_probs(params, features), u_f), tokens], -1)
    return tokens


def greedy_reward(params: ArithmeticParams, features: jax.Array, answer: jax.Array) -> jax.Array:
    """() reward of the greedy answer (argmax token at every step; the filler, which the reward
    ignores, is left out): what ReMax uses as its baseline."""
    tokens = _decode(params, features, 1, lambda t, p: jnp.argmax(p, -1).astype(jnp.int32))
    return rewards(tokens, answer)[0]


def response_length(params: ArithmeticParams) -> int:
    """Tokens per response (filler + thoughts + answer): the same for every response."""
    return params.filler + params.length


def generated_lengths(params: ArithmeticParams, tokens: jax.Array) -> jax.Array:
    """(..., G) tokens each response generated: filler + thoughts + answer tokens up to and
    including the first <eos> (the tokens log π counts), float32; tokens (..., G, T)."""
    live = jnp.sum(live_mask(answer_part(tokens)), axis=-1)
    return params.filler + params.thoughts + live


def rewards(tokens: jax.Array, answer: jax.Array) -> jax.Array:
    """Z = 1 iff the (canonical) answer part equals y*."""
    return jnp.all(answer_part(tokens) == answer[None], axis=-1).astype(jnp.float32)


def gradient_estimate(
    params: ArithmeticParams, features: jax.Array, tokens: jax.Array, weights: jax.Array
) -> jax.Array:
    """ĝ = ∇_θ Σ_g stop_gradient(c_g) log π_θ(y_g|x), flattened (D,): one backward pass."""
    c = jax.lax.stop_gradient(weights)
    feats = jnp.broadcast_to(features, (tokens.shape[0], FEATURES))

    def surrogate(w):
        return jnp.sum(c * log_prob(w, params, feats, tokens))

    return ravel_pytree(jax.grad(surrogate)(params.weights))[0]


def gradient_estimates(
    params: ArithmeticParams, features: jax.Array, tokens: jax.Array, weights: jax.Array
) -> jax.Array:
    """(E, D): ĝ_e = ∇_θ Σ_g c_eg log π_θ(y_g|x) for E weight rows (E, G) at once: one forward
    pass and a vjp per row."""
    feats = jnp.broadcast_to(features, (tokens.shape[0], FEATURES))
    flat, unravel = ravel_pytree(params.weights)
    logp, vjp = jax.vjp(lambda w: log_prob(unravel(w), params, feats, tokens), flat)
    return jax.vmap(lambda c: vjp(c)[0])(jax.lax.stop_gradient(weights).astype(logp.dtype))


def score_norms(
    params: ArithmeticParams, features: jax.Array, tokens: jax.Array, fn=log_prob
) -> jax.Array:
    """‖W‖² = ‖∇_θ log π(f, t, y|x)‖² of each sequence (N,) (``fn=core_log_prob`` on decoded
    sequences: the decoded block only)."""
    grads = jax.vmap(jax.grad(fn), in_axes=(None, None, None, 0))(
        params.weights, params, features, tokens
    )
    return jax.vmap(lambda t: jnp.sum(ravel_pytree(t)[0] ** 2))(grads)


def _energy_entropy(logits: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(1 − 2π(y) + Σ_a π(a)², −Σ_a π(a) log π(a)) of softmax(logits) [..., V] at tokens y [...]
    (a masked logit, −1e9, has π = 0 and adds 0 to the entropy)."""
    logp = jax.nn.log_softmax(logits)
    p = jnp.exp(logp)
    p_y = jnp.take_along_axis(p, y[..., None], -1)[..., 0]
    return 1 - 2 * p_y + jnp.sum(p * p, -1), -jnp.sum(jnp.where(p > 0, p * logp, 0.0), -1)


def token_stats(params: ArithmeticParams, features: jax.Array, tokens: jax.Array) -> tuple:
    """(w, entropy, live), each (..., filler + thoughts + LENGTH): w_t = 1 − 2 π_t(y_t) +
    Σ_a π_t(a)², the squared norm of ∂ log π_t(y_t)/∂logits (verl's forward-only "logit-gradient
    proxy"), the entropy of π_t (TRL's ``entropies``, temperature 1), and the mask of the tokens
    :func:`log_prob` counts."""
    F = params.filler
    core = tokens[..., F:]
    features = jnp.broadcast_to(features, tokens.shape[:-1] + features.shape[-1:])
    w, h = _energy_entropy(model.logits(params.weights, params, features, core), core)
    live = jnp.concatenate(
        [jnp.ones(core.shape[:-1] + (params.thoughts,)), live_mask(answer_part(core))], -1
    )
    if F:
        zf = model.filler_logits(params.weights, features)
        zf = jnp.broadcast_to(zf[..., None, :], tokens.shape[:-1] + (F, zf.shape[-1]))
        wf, hf = _energy_entropy(zf, tokens[..., :F])
        w, h = jnp.concatenate([wf, w], -1), jnp.concatenate([hf, h], -1)
        live = jnp.concatenate([jnp.ones_like(wf), live], -1)
    return w, h, live


def logit_proxy(params: ArithmeticParams, features: jax.Array, tokens: jax.Array) -> jax.Array:
    """verl's forward-only score-norm proxy W(τ) = Σ_t [1 − 2 π_t(y_t) + Σ_a π_t(a)²] of each
    sequence (..., filler + thoughts + LENGTH) → (...): the squared norm of ∇_logits log π_t(y_t)
    summed over the counted tokens (those of :func:`log_prob`), without the network's Jacobian
    or the cross-token terms of ‖∇_θ log π‖² (:func:`score_norms`).  Source: verl
    ``trainer/ppo/metric_utils.py::compute_variance_proxy_metrics`` (``w_per_timestep``)."""
    w, _, live = token_stats(params, features, tokens)
    return jnp.sum(live * w, -1)


def token_gradient_estimates(
    params: ArithmeticParams, features: jax.Array, tokens: jax.Array, weights: jax.Array
) -> jax.Array:
    """(E, D): ĝ_e = ∇_θ Σ_g Σ_t c_egt log π_θ(y_gt | x, y_g,<t) for E per-token weight rows
    (E, G, T), T = filler + thoughts + LENGTH (weights on tokens :func:`log_prob` does not count
    are ignored): one forward pass and a vjp per row, as :func:`gradient_estimates`."""
    feats = jnp.broadcast_to(features, (tokens.shape[0], FEATURES))
    flat, unravel = ravel_pytree(params.weights)

    def counted(w):
        logp, live = token_log_probs(unravel(w), params, feats, tokens)
        return logp * live

    logp, vjp = jax.vjp(counted, flat)
    return jax.vmap(lambda c: vjp(c)[0])(jax.lax.stop_gradient(weights).astype(logp.dtype))


POLICIES = {"base": 0.15, "instruct": 0.40, "icl": 0.65}  # target mean V(x) of each strength
NAME = "arithmetic"


@dataclasses.dataclass(frozen=True)
class Instance(configs.Config):
    """The surrogate's settings: its questions, the pre-trained policies (one per strength) and
    how a seed samples them (``per_seed`` questions, one group each)."""

    policy: tuple[str, ...] = option(
        tuple(POLICIES), "comma list of base, instruct, icl (mean V 0.15 / 0.40 / 0.65)"
    )
    questions: int = option(500, "number of questions (seeded generator, 5 categories)")
    per_seed: int = option(8, "questions per seed, one group each (row: mean per-question MSE)")
    filler: int = option(64, "chain-of-thought filler tokens before each answer")
    strength: tuple[float, ...] = option(
        tuple(POLICIES.values()),
        "mean V(x) at which "
        "pre-training snapshots base, instruct, icl (3 "
        "increasing values in (0, 1))",
    )
    filler_sharpen: float = option(
        0.0,
        "weight of the filler entropy in the pre-training loss (> 0: stronger policies "
        "reason with lower-entropy filler)",
    )
    hidden: int = option(32, "GRU width")
    truth_samples: int = option(
        256, "sampled sequences per question for the Monte Carlo part of S2"
    )
    instance_seed: int = option(0, "seed of the random bandit / thought set / questions")
    lengths: str = option("one", "response lengths: one, generated (arithmetic: up to <eos>)")

    def validate(self) -> None:
        for name in self.policy:
            validate.choice("policy", name, tuple(POLICIES))
        for field, low in (
            ("questions", 1),
            ("per_seed", 1),
            ("filler", 0),
            ("hidden", 1),
            ("truth_samples", 2),
            ("instance_seed", 0),
        ):
            validate.integer(field, getattr(self, field), low)
        validate.real("filler_sharpen", self.filler_sharpen, low=0.0)
        validate.choice("lengths", self.lengths, ("one", "generated"))
        if len(self.strength) != len(POLICIES):
            raise validate.ConfigError(
                f"strength: got {self.strength!r}; allowed: {len(POLICIES)} values, one for "
                "each of " + ", ".join(POLICIES)
            )
        for v in self.strength:
            validate.real("strength", v, low=0.0, high=1.0, open_low=True)
        if any(b <= a for a, b in zip(self.strength[:-1], self.strength[1:], strict=True)):
            raise validate.ConfigError(
                f"strength: got {self.strength!r}; allowed: strictly increasing values"
            )

    def longest_response(self) -> int:
        """Tokens of the longest possible response (L_norm's default): filler + answer."""
        return self.filler + THOUGHTS + LENGTH


def make(inst: Instance) -> dict[str, ArithmeticInstance]:
    """Questions, the pre-trained policies of ``inst.policy`` and the key of the Monte Carlo
    part of :func:`exact`, one :class:`ArithmeticInstance` per policy (pre-training is the
    slow part: call once)."""
    questions = make_questions(inst.instance_seed, inst.questions)
    policies = pretrain(
        questions,
        seed=inst.instance_seed,
        hidden=inst.hidden,
        filler=inst.filler,
        targets=dict(zip(POLICIES, inst.strength, strict=True)),
        filler_sharpen=inst.filler_sharpen,
    )
    key = jax.random.fold_in(jax.random.key(inst.instance_seed), 1)
    return {
        p: ArithmeticInstance(policies[p], questions, key, inst.truth_samples) for p in inst.policy
    }


def pretrain(
    questions: Questions,
    seed: int = 0,
    hidden: int = 32,
    targets: dict[str, float] | None = None,
    lr: float = 3e-3,
    max_steps: int = 5000,
    thoughts: int = THOUGHTS,
    thought_vocab: int = THOUGHT_VOCAB,
    filler: int = FILLER,
    filler_vocab: int = FILLER_VOCAB,
    filler_sharpen: float = 0.0,
) -> dict[str, ArithmeticParams]:
    """Supervised pre-training (optax Adam on −log V(x), full batch) from one seeded init,
    snapshotting the first parameters whose mean V(x) reaches each target: three policies of
    increasing strength standing in for Base / Instruct / Instruct+few-shot.  Deterministic.

    ``filler_sharpen`` = λ > 0 adds λ · mean_x H(p_f(x)), the entropy of the filler token, to
    the loss: the filler head (which −log V does not reach) sharpens along with training, so a
    later (stronger) snapshot also reasons with lower-entropy filler.  The filler head's weights
    are disjoint from the decoder's, so the decoded part, V and g_x follow the same trajectory
    as with λ = 0 (which leaves the loss, and every default policy, exactly as before)."""
    import optax

    validate.real("filler_sharpen", filler_sharpen, low=0.0)
    targets = dict(POLICIES if targets is None else targets)
    params = init(seed, hidden, thoughts, thought_vocab, filler, filler_vocab)
    opt = optax.adam(lr)

    sharpen = filler_sharpen if filler else 0.0
    loss = functools.partial(_pretrain_loss, params=params, questions=questions, sharpen=sharpen)

    @jax.jit
    def step(weights, state):
        (_, mean_v), grad = jax.value_and_grad(loss, has_aux=True)(weights)
        updates, state = opt.update(grad, state, weights)
        return optax.apply_updates(weights, updates), state, mean_v

    weights, state = params.weights, opt.init(params.weights)
    out: dict[str, ArithmeticParams] = {}
    pending = sorted(targets.items(), key=lambda kv: kv[1])
    for _ in range(max_steps):
        new_weights, new_state, mean_v = step(weights, state)
        while pending and float(mean_v) >= pending[0][1]:
            out[pending.pop(0)[0]] = params.replace(weights=weights)
        if not pending:
            return out
        weights, state = new_weights, new_state
    raise RuntimeError(f"pre-training reached mean V = {float(mean_v):.3f} < targets {pending}")


def _pretrain_loss(weights, *, params: ArithmeticParams, questions: Questions, sharpen: float):
    """:func:`pretrain`'s loss −mean_x log V(x) (plus ``sharpen`` times the filler token's mean
    entropy) and mean V(x)."""
    v = jax.vmap(_success_one, in_axes=(None, None, 0, 0))(
        weights, params, questions.features, questions.answers
    )
    loss = -jnp.mean(jnp.log(v))
    if sharpen:
        p = filler_probs(params.replace(weights=weights), questions.features)
        loss = loss + sharpen * jnp.mean(-jnp.sum(p * jnp.log(p), -1))
    return loss, jnp.mean(v)


@struct.dataclass
class ArithmeticTruth:
    """Per-question truth (arrays of shape (n,) unless noted).

    V, g_x and A = E[‖W‖² Z] are exact (enumerating the k^R successful sequences; the filler
    block adds its exact E‖W_f‖² independently of Z); S2 = E‖W‖² is the exact filler part plus a
    Monte Carlo estimate of the decoded part, with its standard error.  Because Z is binary, the
    rest follows: E‖WZ‖² = A, E[‖W‖²(Z − V)²] = (1 − 2V) A + V² S2, E[‖W‖²(Z − V)] = A − V S2.
    The oracle baseline beats no baseline iff S2 < 2 E[‖W‖² | Z = 1]: without filler this
    surrogate violates it (failed answers have larger score norms); a chain-of-thought filler,
    whose score norm does not depend on correctness, restores it.
    """

    prompt_probs: jax.Array
    V: jax.Array
    sigma2: jax.Array
    g_local: jax.Array  # (n, D) g_x (every question moves all of θ)
    g: jax.Array  # (D,) g = E_X g_X
    S2: jax.Array
    S2_se: jax.Array
    e_wz2: jax.Array
    tr_sigma_oracle: jax.Array
    e_w2_zv: jax.Array
    c1: jax.Array


def exact(params, *older, **kw) -> ArithmeticTruth:
    """Truth of an :class:`ArithmeticInstance` (S2 with its key and sample count), the one
    signature of every env; the older ``exact(key, policy, questions, samples=64)`` too."""
    if isinstance(params, ArithmeticInstance):
        return truth(params.truth_key, params.policy, params.questions, params.truth_samples)
    return truth(params, *older, **kw)


def truth(
    key: jax.Array, params: ArithmeticParams, questions: Questions, samples: int = 64
) -> ArithmeticTruth:
    """Truth of every question; S2 from ``samples`` sampled sequences per question."""
    V = success_prob(params, questions)
    g = exact_gradients(params, questions)
    gsq = jnp.sum(g**2, axis=-1)

    def per_question(key, feat, answer):
        seqs = correct_sequences(params, answer)
        feats = jnp.broadcast_to(feat, (seqs.shape[0], FEATURES))
        probs = jnp.exp(core_log_prob(params.weights, params, feats, seqs))
        filler = filler_score_norm(params, feat)
        A = probs @ score_norms(params, feat, seqs, core_log_prob) + jnp.sum(probs) * filler
        core = sample(key, params, feat, samples)[:, params.filler :]
        w2 = score_norms(params, feat, core, core_log_prob)
        return A, filler + jnp.mean(w2), jnp.std(w2, ddof=1) / np.sqrt(samples)

    n = questions.features.shape[0]
    keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, jnp.arange(n))
    A, S2, S2_se = jax.lax.map(
        lambda a: per_question(*a), (keys, questions.features, questions.answers)
    )
    f = jnp.full((n,), 1.0 / n)
    gbar = f @ g
    return ArithmeticTruth(
        prompt_probs=f,
        V=V,
        sigma2=V * (1 - V),
        g_local=g,
        g=gbar,
        S2=S2,
        S2_se=S2_se,
        e_wz2=A,
        tr_sigma_oracle=(1 - 2 * V) * A + V**2 * S2 - gsq,
        e_w2_zv=A - V * S2,
        c1=f @ jnp.sum((g - gbar[None]) ** 2, axis=-1),
    )


# ---------------------------------------------------------------- the Env contract (flat θ)


@struct.dataclass
class ArithmeticInstance:
    """The env's ``params`` for :class:`gpolab.envs.Env`: a policy (its weights are θ₀ and its
    static fields fix the model), the questions, and the key and sample count of the Monte Carlo
    part of :func:`exact` (S2)."""

    policy: ArithmeticParams
    questions: Questions
    truth_key: jax.Array
    truth_samples: int = struct.field(pytree_node=False, default=64)


def at(instance: ArithmeticInstance, theta: jax.Array) -> ArithmeticParams:
    """The policy with its weights replaced by the flat vector ``theta`` (D,)."""
    unravel = ravel_pytree(instance.policy.weights)[1]
    return instance.policy.replace(weights=unravel(theta))


def init_theta(instance: ArithmeticInstance) -> jax.Array:
    """θ₀ (D,): the policy's weights, flat."""
    return ravel_pytree(instance.policy.weights)[0]


def value(instance: ArithmeticInstance, theta: jax.Array) -> jax.Array:
    """J(θ) = mean_x V(x) (uniform questions)."""
    return jnp.mean(success_prob(at(instance, theta), instance.questions))


def exact_at(instance: ArithmeticInstance, theta: jax.Array) -> ArithmeticTruth:
    """:func:`exact` at flat θ, with the instance's key and samples for S2."""
    policy = at(instance, theta)
    return truth(instance.truth_key, policy, instance.questions, instance.truth_samples)


def sample_prompts(key: jax.Array, instance: ArithmeticInstance, n: int) -> jax.Array:
    """(n,) iid uniform question indices."""
    return jax.random.randint(key, (n,), 0, instance.questions.features.shape[0])


def sample_at(key, instance: ArithmeticInstance, theta, prompts, G: int, truth=None):
    """G sequences per question of ``prompts`` (n,) at flat θ, question i drawing with key i of
    ``split(key, n)``: tokens (n, G, T) int32 and rewards (n, G).  ``truth`` is not needed."""
    policy = at(instance, theta)
    feats = instance.questions.features[prompts]
    keys = jax.random.split(key, prompts.shape[0])
    tokens = jax.vmap(lambda k, f: sample(k, policy, f, G))(keys, feats)
    return tokens, jax.vmap(rewards)(tokens, instance.questions.answers[prompts])


def gradient(instance: ArithmeticInstance, theta, prompts, tokens, weights, truth=None):
    """Σ_i Σ_g w_ig ∇_θ log π_θ(y_ig|x_i), flat (D,): one backward pass over all n·G sequences,
    each row carrying its own question's features.  ``truth`` is not needed."""
    n, G = weights.shape
    feats = jnp.repeat(instance.questions.features[prompts], G, axis=0)
    flat = tokens.reshape(n * G, tokens.shape[-1])
    return gradient_estimate(at(instance, theta), feats, flat, weights.reshape(-1))


def optimum(instance: ArithmeticInstance) -> float:
    """J* = 1: every answer y* is reachable."""
    return 1.0


def token_logp(instance: ArithmeticInstance, theta, prompts, tokens):
    """(log π_θ of every token, mask), each (n, G, T), for sequences ``tokens`` (n, G, T) of
    questions ``prompts`` (n,) (:func:`token_log_probs`)."""
    policy = at(instance, theta)
    feats = instance.questions.features[prompts][:, None, :]
    feats = jnp.broadcast_to(feats, tokens.shape[:2] + feats.shape[-1:])
    return token_log_probs(policy.weights, policy, feats, tokens)


def values(instance: ArithmeticInstance, theta: jax.Array) -> jax.Array:
    """(f, V): uniform question weights (n,) and V_x(θ) = π_θ(y*|x) of every question (n,)."""
    V = success_prob(at(instance, theta), instance.questions)
    return jnp.full(V.shape, 1.0 / V.shape[0], V.dtype), V


ENV = Env(
    "arithmetic",
    init_theta,
    value,
    exact_at,
    sample_prompts,
    sample_at,
    gradient,
    optimum,
    token_logp=token_logp,
    values=values,
    mse_law=True,
)
