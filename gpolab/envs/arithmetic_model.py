"""The arithmetic surrogate's policy (:mod:`gpolab.envs.arithmetic`): the network π_θ and its
log-probabilities.

* :class:`Policy`: a question encoder (dense, one-hot category and operands) into the initial
  state of a GRU decoder that emits ``thoughts`` reasoning tokens, then the ``LENGTH`` answer
  tokens; optional ``filler`` chain-of-thought tokens come first, iid from their own head.
* :class:`ArithmeticParams`: the flax weights and the static sizes; :func:`init` draws them.
* log π(f, t, y|x) (:func:`log_prob`) sums every filler and thought token and the answer tokens
  up to and including the first ``<eos>`` (:func:`live_mask`); :func:`token_log_probs` gives
  its per-token terms.

Sampling, rewards, gradient estimates, the exact truth and the env's settings are in
:mod:`gpolab.envs.arithmetic`.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct
from flax.linen.activation import sigmoid, tanh
from flax.linen.dtypes import promote_dtype

from gpolab import validate
from gpolab.envs.questions import EOS, FEATURES, LENGTH, VOCAB


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


THOUGHTS, THOUGHT_VOCAB = 0, 4  # reasoning prefix: off by default (see ArithmeticTruth)
FILLER, FILLER_VOCAB = 0, 16  # chain-of-thought filler: off in the bare env; the lab sets it


class Policy(nn.Module):
    """Question encoder → GRU decoder: ``thoughts`` reasoning tokens, then the answer tokens.

    Token ids: 0–11 answer tokens, 12 … 12 + k − 1 thought tokens, 12 + k the start token.
    Thought positions may only emit thought tokens and answer positions only answer tokens.

    ``filler`` chain-of-thought tokens (ids 0 … filler_vocab − 1 of their own vocabulary) come
    first, iid from softmax(filler_head(question)), and the answer does not depend on them: like
    the long reasoning of an LLM they add score noise ‖W_f‖² to every sample whatever its reward,
    while V(x) = π(y*|x) and g_x stay exact.
    """

    hidden: int = 32
    thoughts: int = THOUGHTS
    thought_vocab: int = THOUGHT_VOCAB
    filler: int = FILLER
    filler_vocab: int = FILLER_VOCAB

    def setup(self):
        self.encoder = nn.Dense(self.hidden)
        self.embed = nn.Embed(VOCAB + self.thought_vocab + 1, self.hidden)
        self.cell = nn.GRUCell(features=self.hidden)
        self.head = nn.Dense(VOCAB + self.thought_vocab)
        if self.filler:
            self.filler_head = nn.Dense(self.filler_vocab)

    def filler_logits(self, features):
        return self.filler_head(features)

    def init_all(self, features, tokens):
        if self.filler:
            self.filler_logits(features)
        return self(features, tokens)

    def init_state(self, features):
        return jnp.tanh(self.encoder(features))

    def step(self, state, token, position: int):
        state, out = self.cell(state, self.embed(token))
        logits = self.head(out)
        thought = position < self.thoughts
        allowed = (jnp.arange(logits.shape[-1]) >= VOCAB) == thought
        return state, jnp.where(allowed, logits, -1e9)

    def __call__(self, features, tokens):
        """Teacher-forced logits (..., T, V) for full sequences ``tokens`` (..., T)."""
        state = self.init_state(features)
        start = jnp.full(tokens.shape[:-1] + (1,), VOCAB + self.thought_vocab)
        prev = jnp.concatenate([start, tokens[..., :-1]], -1)
        logits = []
        for t in range(tokens.shape[-1]):
            state, lg = self.step(state, prev[..., t], t)
            logits.append(lg)
        return jnp.stack(logits, axis=-2)


@struct.dataclass
class ArithmeticParams:
    weights: dict  # flax parameters of :class:`Policy`
    hidden: int = struct.field(pytree_node=False, default=32)
    thoughts: int = struct.field(pytree_node=False, default=THOUGHTS)
    thought_vocab: int = struct.field(pytree_node=False, default=THOUGHT_VOCAB)
    filler: int = struct.field(pytree_node=False, default=FILLER)
    filler_vocab: int = struct.field(pytree_node=False, default=FILLER_VOCAB)

    @property
    def model(self) -> Policy:
        return Policy(
            self.hidden, self.thoughts, self.thought_vocab, self.filler, self.filler_vocab
        )

    @property
    def length(self) -> int:
        """Tokens decoded by the GRU: thoughts + answer (the filler comes before them)."""
        return self.thoughts + LENGTH


def init(
    key: jax.Array | int = 0,
    hidden: int = 32,
    thoughts: int = THOUGHTS,
    thought_vocab: int = THOUGHT_VOCAB,
    filler: int = FILLER,
    filler_vocab: int = FILLER_VOCAB,
) -> ArithmeticParams:
    validate.integer("hidden", hidden, 1)
    validate.integer("thoughts", thoughts, 0)
    validate.integer("thought_vocab", thought_vocab, 1)
    validate.integer("filler", filler, 0)
    validate.integer("filler_vocab", filler_vocab, 2)
    key = jax.random.key(key) if isinstance(key, int) else key
    params = ArithmeticParams({}, hidden, thoughts, thought_vocab, filler, filler_vocab)
    weights = params.model.init(
        key, jnp.zeros((FEATURES,)), jnp.zeros((params.length,), jnp.int32), method=Policy.init_all
    )
    return params.replace(weights=weights)


# ---------------------------------------------------------------- the forward pass, op for op
# flax's ``Module.apply`` checks each parameter's shape at every use by tracing its initializer
# (``jax.eval_shape``): most of a trace of this env's kernels under vmap and grad.  The functions
# below read the same weights and bind the same operations in the same order as :class:`Policy`
# (flax's Dense, Embed and GRUCell; tests/envs/test_arithmetic.py checks the jaxprs are equal),
# without that check; :class:`Policy` still draws the weights (:func:`init`).


def _dense(p: dict, x: jax.Array) -> jax.Array:
    """``nn.Dense`` on its parameters ``p`` (kernel, and bias when it has one)."""
    x, kernel, bias = promote_dtype(x, p["kernel"], p.get("bias"), dtype=None)
    y = jax.lax.dot_general(x, kernel, (((x.ndim - 1,), (0,)), ((), ())), precision=None)
    if bias is not None:
        y += jnp.reshape(bias, (1,) * (y.ndim - 1) + (-1,))
    return y


def _gru(p: dict, h: jax.Array, x: jax.Array) -> jax.Array:
    """``nn.GRUCell``'s new state from state ``h`` and input ``x``."""
    r = sigmoid(_dense(p["ir"], x) + _dense(p["hr"], h))
    z = sigmoid(_dense(p["iz"], x) + _dense(p["hz"], h))
    n = tanh(_dense(p["in"], x) + r * _dense(p["hn"], h))
    return (1.0 - z) * n + z * h


def init_state(weights, features: jax.Array) -> jax.Array:
    """:meth:`Policy.init_state`: the decoder's first state from the question's features."""
    return jnp.tanh(_dense(weights["params"]["encoder"], features))


def step(weights, params: ArithmeticParams, state, token, position: int) -> tuple:
    """:meth:`Policy.step`: (the next state, the logits of the token at ``position``)."""
    w = weights["params"]
    (embedding,) = promote_dtype(w["embed"]["embedding"], dtype=None, inexact=False)
    state = _gru(w["cell"], state, jnp.take(embedding, token, axis=0))
    logits = _dense(w["head"], state)
    allowed = (jnp.arange(logits.shape[-1]) >= VOCAB) == (position < params.thoughts)
    return state, jnp.where(allowed, logits, -1e9)


def logits(weights, params: ArithmeticParams, features: jax.Array, tokens: jax.Array):
    """:meth:`Policy.__call__`: teacher-forced logits (..., T, V) for full sequences ``tokens``
    (..., T)."""
    state = init_state(weights, features)
    start = jnp.full(tokens.shape[:-1] + (1,), VOCAB + params.thought_vocab)
    prev = jnp.concatenate([start, tokens[..., :-1]], -1)
    out = []
    for t in range(tokens.shape[-1]):
        state, lg = step(weights, params, state, prev[..., t], t)
        out.append(lg)
    return jnp.stack(out, axis=-2)


def filler_logits(weights, features: jax.Array) -> jax.Array:
    """:meth:`Policy.filler_logits`."""
    return _dense(weights["params"]["filler_head"], features)


def answer_part(tokens: jax.Array) -> jax.Array:
    return tokens[..., -LENGTH:]


def filler_probs(params: ArithmeticParams, features: jax.Array) -> jax.Array:
    """π of one filler token (..., filler_vocab)."""
    return jax.nn.softmax(filler_logits(params.weights, features))


def _core_token_logp(weights, params: ArithmeticParams, features: jax.Array, core: jax.Array):
    """(log π of each decoded token, the mask of those log π counts), each (..., thoughts +
    LENGTH): every thought token and the answer up to and including the first <eos>."""
    lg = logits(weights, params, features, core)
    logp = jnp.take_along_axis(jax.nn.log_softmax(lg), core[..., None], -1)[..., 0]
    live = jnp.concatenate(
        [jnp.ones(core.shape[:-1] + (params.thoughts,)), live_mask(answer_part(core))], -1
    )
    return logp, live


def core_log_prob(weights, params: ArithmeticParams, features: jax.Array, core: jax.Array):
    """log π(t, y|x) of the decoded part (..., thoughts + LENGTH)."""
    logp, live = _core_token_logp(weights, params, features, core)
    return jnp.sum(logp * live, axis=-1)


def _filler_token_logp(weights, params: ArithmeticParams, features, filler: jax.Array):
    """(..., F) log π of each filler token (iid from the filler head)."""
    fl = jax.nn.log_softmax(filler_logits(weights, features))
    fl = jnp.broadcast_to(fl[..., None, :], filler.shape + fl.shape[-1:])
    return jnp.take_along_axis(fl, filler[..., None], -1)[..., 0]


def log_prob(weights, params: ArithmeticParams, features: jax.Array, tokens: jax.Array):
    """log π(f, t, y|x) for full sequences (..., filler + thoughts + LENGTH): every filler and
    thought token plus the answer tokens up to and including the first <eos>."""
    F = params.filler
    logp = core_log_prob(weights, params, features, tokens[..., F:])
    if F:
        logp = logp + jnp.sum(_filler_token_logp(weights, params, features, tokens[..., :F]), -1)
    return logp


def token_log_probs(weights, params: ArithmeticParams, features: jax.Array, tokens: jax.Array):
    """(log π of every token, mask), each (..., filler + thoughts + LENGTH): the per-token terms
    of :func:`log_prob` (its value is ``sum(logp * mask, -1)``)."""
    F = params.filler
    logp, live = _core_token_logp(weights, params, features, tokens[..., F:])
    if F:
        filler = _filler_token_logp(weights, params, features, tokens[..., :F])
        logp = jnp.concatenate([filler, logp], -1)
        live = jnp.concatenate([jnp.ones_like(filler), live], -1)
    return logp, live


def filler_score_norm(params: ArithmeticParams, features: jax.Array) -> jax.Array:
    """E‖W_f‖² of the filler block, exactly: the filler head is dense, so for F iid tokens
    ‖W_f‖² = (‖x‖² + 1) ‖Σ_r (e_{t_r} − p)‖², whose mean is F (‖x‖² + 1)(1 − ‖p‖²)."""
    if not params.filler:
        return jnp.zeros(features.shape[:-1])
    p = filler_probs(params, features)
    return params.filler * (jnp.sum(features**2, -1) + 1) * (1 - jnp.sum(p**2, -1))
