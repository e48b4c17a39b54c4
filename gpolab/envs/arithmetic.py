"""A synthetic arithmetic LLM surrogate (DESIGN §1, [U] §6): questions → answer token sequences.

* Questions: ``n`` (default 500) from a seeded generator, uniform over 5 categories
  ``a + b − c``, ``a + b − c + d``, ``a × b``, ``a ÷ b`` (exact quotient) and ``a − (b − c)``,
  with small operands so every answer has |y*| ≤ 99.
* Answers are token sequences over ``0–9, '-', <eos>`` of length ``L = 4`` (sign, two digits,
  end); everything after the first ``<eos>`` is ``<eos>`` (the canonical form).
* Policy: a small autoregressive flax model: the question (category and operands, one-hot) is
  encoded by a dense layer into the initial state of a GRU decoder that emits one token per step.
  log π(y|x) sums the token log-probabilities up to and including the first ``<eos>``.
* Reward Z = 1 iff the canonical generated answer equals y*.  Hence exactly
  V(x) = π_θ(y*|x) (teacher forcing) and g_x = ∇_θ π_θ(y*|x) (autodiff).
* A Monte Carlo gradient needs only sampled sequences and one backward pass per group
  (DESIGN §2): ĝ = ∇_θ (1/G) Σ_g stop_gradient(A_g) log π_θ(y_g|x).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.flatten_util import ravel_pytree

from gpolab import validate

VOCAB = 12  # 0-9, '-', <eos>
MINUS, EOS, START = 10, 11, 12
LENGTH = 4
CATEGORIES = ("a+b-c", "a+b-c+d", "a*b", "a/b", "a-(b-c)")
OPERAND_MAX = 20  # operands are one-hot over 0..OPERAND_MAX
FEATURES = len(CATEGORIES) + 4 * (OPERAND_MAX + 1)


@struct.dataclass
class Questions:
    features: jax.Array  # (n, FEATURES) float one-hot encoding of category and operands
    answers: jax.Array  # (n, LENGTH) int32 canonical answer tokens y*
    category: jax.Array  # (n,) int32
    values: jax.Array  # (n,) int32 the integer answers


def make_questions(seed: int = 0, n: int = 500) -> Questions:
    """``n`` questions, uniform over the 5 categories, from a seeded numpy generator."""
    validate.integer("questions", n, 1)
    validate.integer("seed", seed, 0)
    rng = np.random.default_rng(seed)
    cats = rng.integers(0, len(CATEGORIES), n)
    feats = np.zeros((n, FEATURES), np.float32)
    values = np.zeros(n, np.int64)
    for i, c in enumerate(cats):
        if c == 0:
            ops = rng.integers(0, 21, 3)
            val = ops[0] + ops[1] - ops[2]
        elif c == 1:
            ops = rng.integers(0, 16, 4)
            val = ops[0] + ops[1] - ops[2] + ops[3]
        elif c == 2:
            ops = rng.integers(0, 10, 2)
            val = ops[0] * ops[1]
        elif c == 3:
            b, q = rng.integers(1, 10), rng.integers(0, 10)
            ops = np.array([b * q, b]) if b * q <= OPERAND_MAX else np.array([b * (q % 3), b])
            val = ops[0] // ops[1]
        else:
            ops = rng.integers(0, 21, 3)
            val = ops[0] - (ops[1] - ops[2])
        feats[i, c] = 1.0
        for j, o in enumerate(ops):
            feats[i, len(CATEGORIES) + j * (OPERAND_MAX + 1) + int(o)] = 1.0
        values[i] = val
    answers = np.stack([encode(int(v)) for v in values])
    return Questions(
        jnp.asarray(feats),
        jnp.asarray(answers, jnp.int32),
        jnp.asarray(cats, jnp.int32),
        jnp.asarray(values, jnp.int32),
    )


def encode(value: int) -> np.ndarray:
    """Canonical tokens of an integer answer, e.g. −7 → [-, 7, <eos>, <eos>]."""
    digits = [int(d) for d in str(abs(value))]
    tokens = ([MINUS] if value < 0 else []) + digits + [EOS]
    if len(tokens) > LENGTH:
        raise ValueError(f"answer {value} needs {len(tokens)} tokens; LENGTH is {LENGTH}")
    return np.array(tokens + [EOS] * (LENGTH - len(tokens)), np.int32)


def canonical(tokens: jax.Array) -> jax.Array:
    """Every token after the first <eos> becomes <eos> (last axis)."""
    seen = jnp.cumsum(tokens == EOS, axis=-1) > 0
    after = jnp.concatenate([jnp.zeros_like(seen[..., :1]), seen[..., :-1]], axis=-1)
    return jnp.where(after, EOS, tokens)


def live_mask(tokens: jax.Array) -> jax.Array:
    """1 for the tokens that count in log π: up to and including the first <eos>."""
    seen = jnp.cumsum(tokens == EOS, axis=-1) > 0
    after = jnp.concatenate([jnp.zeros_like(seen[..., :1]), seen[..., :-1]], axis=-1)
    return 1.0 - after.astype(jnp.float32)


class Policy(nn.Module):
    """Question encoder → GRU decoder over answer tokens."""

    hidden: int = 32

    def setup(self):
        self.encoder = nn.Dense(self.hidden)
        self.embed = nn.Embed(VOCAB + 1, self.hidden)
        self.cell = nn.GRUCell(features=self.hidden)
        self.head = nn.Dense(VOCAB)

    def init_state(self, features):
        return jnp.tanh(self.encoder(features))

    def step(self, state, token):
        state, out = self.cell(state, self.embed(token))
        return state, self.head(out)

    def __call__(self, features, tokens):
        """Teacher-forced logits (..., LENGTH, VOCAB) for answer ``tokens`` (..., LENGTH)."""
        state = self.init_state(features)
        prev = jnp.concatenate([jnp.full(tokens.shape[:-1] + (1,), START), tokens[..., :-1]], -1)
        logits = []
        for t in range(LENGTH):
            state, lg = self.step(state, prev[..., t])
            logits.append(lg)
        return jnp.stack(logits, axis=-2)


@struct.dataclass
class ArithmeticParams:
    weights: dict  # flax parameters of :class:`Policy`
    hidden: int = struct.field(pytree_node=False, default=32)

    @property
    def model(self) -> Policy:
        return Policy(self.hidden)


def init(key: jax.Array | int = 0, hidden: int = 32) -> ArithmeticParams:
    validate.integer("hidden", hidden, 1)
    key = jax.random.key(key) if isinstance(key, int) else key
    model = Policy(hidden)
    weights = model.init(key, jnp.zeros((FEATURES,)), jnp.zeros((LENGTH,), jnp.int32))
    return ArithmeticParams(weights, hidden)


def log_prob(weights, params: ArithmeticParams, features: jax.Array, tokens: jax.Array):
    """log π(y|x) for token sequences (..., LENGTH), summed up to the first <eos>."""
    logits = params.model.apply(weights, features, tokens)
    logp = jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[..., None], -1)[..., 0]
    return jnp.sum(logp * live_mask(tokens), axis=-1)


def success_prob(params: ArithmeticParams, questions: Questions) -> jax.Array:
    """V(x) = π_θ(y*|x) for every question (n,), by teacher forcing."""
    return jnp.exp(log_prob(params.weights, params, questions.features, questions.answers))


def exact_gradients(params: ArithmeticParams, questions: Questions) -> jax.Array:
    """(n, D) g_x = ∇_θ π_θ(y*|x) for every question, flattened."""

    def v(weights, feat, ans):
        return jnp.exp(log_prob(weights, params, feat, ans))

    grads = jax.vmap(jax.grad(v), in_axes=(None, 0, 0))(
        params.weights, questions.features, questions.answers
    )
    return jax.vmap(lambda g: ravel_pytree(g)[0])(grads)


def sample(key: jax.Array, params: ArithmeticParams, features: jax.Array, G: int):
    """G answers for one question: tokens (G, LENGTH) int32 by inverse-CDF sampling per step,
    canonicalised, and rewards are computed by the caller against y*."""
    model = params.model
    u = jax.random.uniform(key, (LENGTH, G))
    state = model.apply(
        params.weights, jnp.broadcast_to(features, (G, FEATURES)), method=Policy.init_state
    )
    token = jnp.full((G,), START, jnp.int32)
    out = []
    for t in range(LENGTH):
        state, logits = model.apply(params.weights, state, token, method=Policy.step)
        cdf = jnp.cumsum(jax.nn.softmax(logits), axis=-1)
        token = jnp.minimum(
            jax.vmap(lambda c, v: jnp.searchsorted(c, v * c[-1], side="right"))(cdf, u[t]),
            VOCAB - 1,
        ).astype(jnp.int32)
        out.append(token)
    return canonical(jnp.stack(out, axis=-1))


POLICIES = {"base": 0.15, "instruct": 0.40, "icl": 0.65}  # target mean V(x) of each strength


def pretrain(
    questions: Questions,
    seed: int = 0,
    hidden: int = 32,
    targets: dict[str, float] | None = None,
    lr: float = 3e-3,
    max_steps: int = 5000,
) -> dict[str, ArithmeticParams]:
    """Supervised pre-training (optax Adam on −log π(y*|x), full batch) from one seeded init,
    snapshotting the first parameters whose mean V(x) reaches each target: three policies of
    increasing strength standing in for Base / Instruct / Instruct+few-shot.  Deterministic."""
    import optax

    targets = dict(POLICIES if targets is None else targets)
    params = init(seed, hidden)
    opt = optax.adam(lr)

    def loss(weights):
        return -jnp.mean(log_prob(weights, params, questions.features, questions.answers))

    @jax.jit
    def step(weights, state):
        value, grad = jax.value_and_grad(loss)(weights)
        updates, state = opt.update(grad, state, weights)
        mean_v = jnp.mean(jnp.exp(log_prob(weights, params, questions.features, questions.answers)))
        return optax.apply_updates(weights, updates), state, mean_v

    weights, state = params.weights, opt.init(params.weights)
    out: dict[str, ArithmeticParams] = {}
    pending = sorted(targets.items(), key=lambda kv: kv[1])
    for _ in range(max_steps):
        new_weights, new_state, mean_v = step(weights, state)
        while pending and float(mean_v) >= pending[0][1]:
            out[pending.pop(0)[0]] = ArithmeticParams(weights, hidden)
        if not pending:
            return out
        weights, state = new_weights, new_state
    raise RuntimeError(f"pre-training reached mean V = {float(mean_v):.3f} < targets {pending}")


@struct.dataclass
class ArithmeticTruth:
    """Per-question truth.  V and g_x are exact; S2 = E‖W‖² is a Monte Carlo estimate (with its
    standard error) from which the other moments follow exactly, because Z = 1{y = y*} and
    W(y*) = g_x / V:  E‖WZ‖² = ‖g_x‖²/V,  E[‖W‖²(Z − V)²] = ‖g_x‖²(1 − 2V)/V + V² S2."""

    prompt_probs: jax.Array  # (n,) uniform
    V: jax.Array
    sigma2: jax.Array
    g_all: jax.Array  # (n, D)
    g_local: jax.Array  # (n, D) (= g_all; named as in the bandit for the theory module)
    S2: jax.Array
    S2_se: jax.Array
    e_wz2: jax.Array
    tr_sigma_oracle: jax.Array
    e_w2_zv: jax.Array
    c1: jax.Array


def exact(
    key: jax.Array, params: ArithmeticParams, questions: Questions, samples: int = 64
) -> ArithmeticTruth:
    """Exact V, g_x (and so E‖WZ‖²); S2 by ``samples`` sampled answers per question."""
    V = success_prob(params, questions)
    g = exact_gradients(params, questions)
    gsq = jnp.sum(g**2, axis=-1)

    def score_norms(key, feat):
        toks = sample(key, params, feat, samples)
        grads = jax.vmap(jax.grad(log_prob), in_axes=(None, None, None, 0))(
            params.weights, params, feat, toks
        )
        return jax.vmap(lambda t: jnp.sum(ravel_pytree(t)[0] ** 2))(grads)

    n = questions.features.shape[0]
    keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, jnp.arange(n))
    w2 = jax.lax.map(lambda kf: score_norms(*kf), (keys, questions.features), batch_size=25)
    S2 = jnp.mean(w2, axis=-1)
    S2_se = jnp.std(w2, axis=-1, ddof=1) / np.sqrt(samples)
    e_w2_zv2 = gsq * (1 - 2 * V) / V + V**2 * S2
    # E[‖W‖²(Z − V)] = (1 − V)‖W*‖² V − V (S2 − V‖W*‖²) = ‖g‖²/V − V S2
    f = jnp.full((n,), 1.0 / n)
    gbar = f @ g
    return ArithmeticTruth(
        prompt_probs=f,
        V=V,
        sigma2=V * (1 - V),
        g_all=g,
        g_local=g,
        S2=S2,
        S2_se=S2_se,
        e_wz2=gsq / V,
        tr_sigma_oracle=e_w2_zv2 - gsq,
        e_w2_zv=gsq / V - V * S2,
        c1=f @ jnp.sum((g - gbar[None]) ** 2, axis=-1),
    )


def gradient_estimate(
    params: ArithmeticParams, features: jax.Array, tokens: jax.Array, weights: jax.Array
) -> jax.Array:
    """ĝ = ∇_θ Σ_g stop_gradient(c_g) log π_θ(y_g|x), flattened (D,): one backward pass."""
    c = jax.lax.stop_gradient(weights)
    feats = jnp.broadcast_to(features, (tokens.shape[0], FEATURES))

    def surrogate(w):
        return jnp.sum(c * log_prob(w, params, feats, tokens))

    return ravel_pytree(jax.grad(surrogate)(params.weights))[0]
