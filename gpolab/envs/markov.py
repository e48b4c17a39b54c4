"""Long responses with an exact gradient: a first-order Markov policy over tokens, a count reward.

gpolab's env for the rollout–training mismatch (issue 43).  Prompt x draws a response of exactly
T tokens y_1 … y_T from a vocabulary of A tokens, each from

    π_θ(y_t = a | x, y_{t−1}) = softmax(θ[x, y_{t−1}])_a        (y_0 = the start symbol A),

so θ ∈ R^{P × (A + 1) × A} (a table per prompt and previous token).  The reward is binary,
Z = 1[#{t : y_t = 0} ≥ k_x]: at least k_x copies of token 0.  The pair (previous token, count of
token 0) is a sufficient state, so dynamic programming over (A + 1)·(T + 1) states gives V_x(θ)
exactly in O(T²A²) for any T (hundreds of tokens), and autodiff through it gives g_x = ∇V_x
exactly: no enumeration of the A^T responses.  The thresholds k_x spread the prompts' difficulty
(V_x from about ``p_high`` down to about ``p_low`` at the initial θ, set from the count's normal
approximation).

The **mismatch**: the sampler's policy μ replaces θ's logits by :func:`behaviour_logits` —
``noise`` (θ + size·ε with a fixed ε ~ N(0, 1) per table entry, drawn with the instance),
``temperature`` (θ / size) or ``bf16`` (the logits θ + size, size a typical logit magnitude,
rounded to bfloat16, as an engine that computes logits in bf16).  :func:`mismatch` gives its size
exactly: the per-token KL(μ‖π) averaged over μ's own visits, the per-sequence KL(μ‖π) = E_μ Σ_t
KL_t, and the sequence χ²(π‖μ) = E_μ[(π(y)/μ(y))²] − 1 (the variance of sequence-level importance
sampling) by a forward recursion in log space.  ``ENV`` is the :class:`gpolab.envs.Env` over θ.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from scipy.stats import norm

from gpolab import configs, validate
from gpolab.configs import option
from gpolab.envs import Env, axis

MISMATCH_KINDS = ("noise", "temperature", "bf16")


@struct.dataclass
class MarkovParams:
    theta0: jax.Array  # (P, A + 1, A) the initial logits
    k: jax.Array  # (P,) int32 reward thresholds: Z = 1[count of token 0 >= k_x]
    noise: jax.Array  # (P, A + 1, A) the fixed ε of the ``noise`` mismatch
    T: int = struct.field(pytree_node=False, default=64)  # tokens per response (a static shape)

    num_prompts = axis("theta0", 0)
    vocab = axis("theta0", 2)

    @property
    def dim(self) -> int:
        return int(np.prod(self.theta0.shape))


@struct.dataclass
class MarkovTruth:
    """Exact per-prompt quantities at one θ ((P,) unless noted), the shared names of
    :class:`gpolab.envs.Env`."""

    prompt_probs: jax.Array  # f = 1/P
    V: jax.Array  # P(Z = 1 | x)
    sigma2: jax.Array  # V (1 − V)
    g_local: jax.Array  # (P, (A + 1)·A) g_x in prompt x's own block of θ
    g: jax.Array  # (D,) ∇J = Σ_x f_x g_x


@dataclasses.dataclass(frozen=True)
class Instance(configs.Config):
    """The Markov env's settings (:func:`make` draws the instance from ``instance_seed``)."""

    prompts: int = option(8, "number of prompts P")
    vocab: int = option(4, "tokens A (token 0 is the one the reward counts)")
    length: int = option(64, "tokens per response T")
    scale: float = option(0.5, "standard deviation of the initial logits")
    p_low: float = option(0.1, "success probability of the hardest prompt (about, at theta_0)")
    p_high: float = option(0.9, "success probability of the easiest prompt (about, at theta_0)")
    instance_seed: int = option(0, "seed of the instance")
    batch: int = option(8, "prompts per batch B (iid uniform; the off-policy lab's mismatch mode)")

    def validate(self) -> None:
        validate.integer("prompts", self.prompts, 1, 4096)
        validate.integer("batch", self.batch, 1, 4096)
        validate.integer("vocab", self.vocab, 2, 64)
        validate.integer("length", self.length, 1, 4096)
        validate.real("scale", self.scale, 0.0, 10.0)
        validate.real("p_low", self.p_low, 0.0, 0.999, open_low=True)
        validate.real("p_high", self.p_high, self.p_low, 0.999)
        validate.integer("instance_seed", self.instance_seed, 0)


def make(inst: Instance | int = 0, **settings) -> MarkovParams:
    """The instance: initial logits N(0, scale²) per entry, the noise table ε, and thresholds
    k_x = ⌈mean + z_x·sd⌉ of the count of token 0 under the initial policy's normal approximation,
    z_x evenly spaced so V_x runs from about p_high to p_low."""
    inst = inst if isinstance(inst, Instance) else Instance(instance_seed=inst, **settings)
    inst.validate()
    P, A, T = inst.prompts, inst.vocab, inst.length
    rng = np.random.default_rng(inst.instance_seed)
    theta0 = rng.normal(0.0, inst.scale, (P, A + 1, A))
    noise = rng.normal(0.0, 1.0, (P, A + 1, A))
    params = MarkovParams(jnp.asarray(theta0), jnp.zeros(P, jnp.int32), jnp.asarray(noise), T)
    mean, var = _count_moments(params)
    z = norm.ppf(np.linspace(inst.p_high, inst.p_low, P)) if P > 1 else [norm.ppf(inst.p_high)]
    k = np.clip(np.ceil(mean - np.asarray(z) * np.sqrt(var)), 0, T).astype(np.int32)
    return params.replace(k=jnp.asarray(k))


def _count_moments(params: MarkovParams) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance of the count of token 0 per prompt at θ₀, exactly by the DP."""
    dist = np.asarray(count_distribution(params, init_theta(params)))  # (P, T + 1)
    c = np.arange(params.T + 1)
    mean = dist @ c
    return mean, dist @ c**2 - mean**2


def init_theta(params: MarkovParams) -> jax.Array:
    return params.theta0.reshape(-1)


def table(params: MarkovParams, theta: jax.Array) -> jax.Array:
    """θ as its (P, A + 1, A) logit table."""
    return jnp.reshape(theta, params.theta0.shape)


def behaviour_logits(params: MarkovParams, theta, kind: str, size) -> jax.Array:
    """The sampler's logit table μ (P, A + 1, A) for mismatch ``kind`` of ``size`` (module
    docstring); size 0 (temperature 1) is no mismatch."""
    validate.choice("mismatch kind", kind, MISMATCH_KINDS)
    logits = table(params, theta)
    if kind == "noise":
        return logits + size * params.noise
    if kind == "temperature":
        return logits / size
    return (logits + size).astype(jnp.bfloat16).astype(logits.dtype) - size


# the sizes each kind allows, [low, high] (temperature (0, 20]); no mismatch: noise 0, temperature 1
MISMATCH_SIZES = {"noise": (0.0, 10.0), "temperature": (0.0, 20.0), "bf16": (0.0, 1e4)}


def parse_mismatch(spec: str) -> tuple[str, float]:
    """``"kind:size"`` (``noise:0.2``, ``temperature:1.1``, ``bf16:8``) → (kind, size), checked."""
    kind, sep, raw = str(spec).strip().partition(":")
    if not sep:
        raise validate.ConfigError(
            f"mismatch: got {spec!r}; allowed: KIND:SIZE with KIND one of "
            f"{', '.join(MISMATCH_KINDS)} (e.g. noise:0.2)"
        )
    validate.choice("mismatch kind", kind, MISMATCH_KINDS)
    try:
        size = float(raw)
    except ValueError:
        raise validate.ConfigError(
            f"mismatch {kind}: got size {raw!r}; allowed: a number"
        ) from None
    low, high = MISMATCH_SIZES[kind]
    validate.real(f"mismatch {kind} size", size, low, high, open_low=kind == "temperature")
    return kind, size


def _step(alpha: jax.Array, logp: jax.Array) -> jax.Array:
    """One token: α (A + 1, T + 1) over (previous token, count) → the next α, under the log
    policy ``logp`` (A + 1, A); emitting token 0 moves the count up by one."""
    mass = jnp.einsum("sc,sa->ac", alpha, jnp.exp(logp))  # (A, T + 1)
    up = jnp.concatenate([jnp.zeros_like(mass[:1, :1]), mass[:1, :-1]], axis=1)
    new = jnp.concatenate([up, mass[1:]], axis=0)
    return jnp.concatenate([new, jnp.zeros_like(alpha[:1])], axis=0)  # no return to the start


def _start(params: MarkovParams, dtype) -> jax.Array:
    A, T = params.vocab, params.T
    return jnp.zeros((A + 1, T + 1), dtype).at[A, 0].set(1.0)


def count_distribution(params: MarkovParams, theta: jax.Array) -> jax.Array:
    """(P, T + 1) the exact law of the count of token 0 in a response, per prompt."""
    logp = jax.nn.log_softmax(table(params, theta), axis=-1)

    def one(lp):
        alpha = jax.lax.fori_loop(0, params.T, lambda _, a: _step(a, lp), _start(params, lp.dtype))
        return jnp.sum(alpha, axis=0)

    return jax.vmap(one)(logp)


def values(params: MarkovParams, theta: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(f, V): uniform prompts and V_x = P(count >= k_x), differentiable in θ."""
    dist = count_distribution(params, theta)
    c = jnp.arange(params.T + 1)
    V = jnp.sum(jnp.where(c[None, :] >= params.k[:, None], dist, 0.0), axis=1)
    return jnp.full(params.num_prompts, 1.0 / params.num_prompts, V.dtype), V


def expected_return(params: MarkovParams, theta: jax.Array) -> jax.Array:
    f, V = values(params, theta)
    return f @ V


def exact(params: MarkovParams, theta: jax.Array) -> MarkovTruth:
    """V, σ² and the exact gradients (reverse-mode autodiff through the DP)."""
    f, V = values(params, theta)
    jac = jax.jacrev(lambda t: values(params, t)[1])(theta)  # (P, D)
    P = params.num_prompts
    local = jac.reshape(P, P, -1)[jnp.arange(P), jnp.arange(P)]  # prompt x moves its own block
    return MarkovTruth(f, V, V * (1 - V), local, f @ jac)


def value_gradient(params: MarkovParams, theta: jax.Array, cap: int) -> tuple:
    """(V (P,), g = ∇J (D,)) exactly, by one backward and one forward pass over the T tokens with
    the count of token 0 capped at k_x (reaching k_x is absorbing), in ``cap`` count states (a
    static bound > every k_x): the gradient :func:`exact` takes by reverse-mode autodiff through
    :func:`values`, without its tape and in cap instead of T + 1 counts (gpolab's recursion).

    With Q_t(c, a) = P(success | token a emitted at step t from count c) and β_t(s, c) =
    Σ_a π(a|s) Q_t(c, a), the forward occupancy α_t(s, c) gives ∂V/∂θ[s, a] = π(a|s)·(M[s, a] −
    Σ_a' π(a'|s) M[s, a']) with M = Σ_t α_t(·, ·) Q_t (the score of the softmax)."""
    P, A, T = params.num_prompts, params.vocab, params.T
    logits = table(params, theta)
    counts = jnp.arange(cap)

    def one(logit, k):
        p = jax.nn.softmax(logit, axis=-1)  # (A + 1, A)
        reached = (counts == k).astype(p.dtype)

        def q_of(beta):  # β_{t+1} (A + 1, cap) → Q_t (cap, A): token 0 moves the count up
            up = jnp.where(counts < k, jnp.concatenate([beta[0, 1:], beta[0, -1:]]), beta[0])
            return jnp.concatenate([up[:, None], beta[1:A].T], axis=1)

        def back(beta, _):  # β_{t+1} → (β_t, Q_t)
            q = q_of(beta)
            return jnp.einsum("ca,sa->sc", q, p), q

        _, qs = jax.lax.scan(back, jnp.broadcast_to(reached, (A + 1, cap)), None, length=T)
        qs = qs[::-1]  # Q_0 … Q_{T−1}

        def forward(alpha, q):
            mass = jnp.einsum("sc,sa->ac", alpha, p)
            shifted = jnp.concatenate([jnp.zeros_like(mass[0, :1]), mass[0, :-1]])
            zero = jnp.where(counts <= k, shifted, 0.0)
            zero = zero + jnp.where(counts == k, mass[0], 0.0)
            nxt = jnp.concatenate([zero[None], mass[1:], jnp.zeros_like(alpha[:1])], 0)
            return nxt, alpha @ q

        start = jnp.zeros((A + 1, cap), p.dtype).at[A, 0].set(1.0)
        _, m = jax.lax.scan(forward, start, qs)
        M = jnp.sum(m, axis=0)  # (A + 1, A)
        value = p[A] @ qs[0][0]
        return value, p * (M - jnp.sum(p * M, axis=-1, keepdims=True))

    V, grads = jax.vmap(one)(logits, params.k)
    return V, grads.reshape(-1) / P


def count_cap(params: MarkovParams) -> int:
    """The fewest count states :func:`value_gradient` needs: the largest threshold k_x + 1."""
    return int(np.max(np.asarray(params.k))) + 1


def sample_prompts(key: jax.Array, params: MarkovParams, n: int) -> jax.Array:
    return jax.random.randint(key, (n,), 0, params.num_prompts)


def sample_table(
    key, params: MarkovParams, logits: jax.Array, prompts: jax.Array, G: int, later=None, switch=0
):
    """G responses for each prompt of ``prompts`` (n,) from the logit table ``logits`` (θ's or
    a sampler's): (tokens (n, G, T) int32, rewards (n, G)).  Each step reads its logits as rows
    of the flat (P·(A + 1), A) table, one gather from the shared table (a per-prompt copy
    gathered along the previous token ran the mismatch kernel 3× slower; the same draws).
    ``later``: the table from token ``switch`` on (an engine whose weights change mid-response);
    the tokens before it are the draws of ``logits`` alone with the same key."""
    n, A = prompts.shape[0], params.vocab
    rows = logits.reshape(-1, A)  # row x·(A + 1) + previous token
    first = (prompts * (A + 1))[:, None]  # (n, 1)

    def step(prev, k):
        y = jax.random.categorical(k, rows[first + prev], axis=-1).astype(jnp.int32)
        return y, y

    def switching(prev, inputs):
        k, t = inputs
        row = first + prev
        now = jnp.where(t < switch, rows[row], late_rows[row])
        y = jax.random.categorical(k, now, axis=-1).astype(jnp.int32)
        return y, y

    start = jnp.full((n, G), A, jnp.int32)
    keys = jax.random.split(key, params.T)
    if later is None:
        _, ys = jax.lax.scan(step, start, keys)
    else:
        late_rows = later.reshape(-1, A)
        _, ys = jax.lax.scan(switching, start, (keys, jnp.arange(params.T)))
    ys = jnp.moveaxis(ys, 0, -1)
    count = jnp.sum(ys == 0, axis=-1)
    return ys, (count >= params.k[prompts][:, None]).astype(logits.dtype)


def sample(key, params: MarkovParams, theta, prompts: jax.Array, G: int, truth=None):
    """G responses from π_θ for each prompt (the contract's ``sample``)."""
    return sample_table(key, params, table(params, theta), prompts, G)


def table_logp(params: MarkovParams, logits, prompts, responses) -> jax.Array:
    """(n, G, T) log-probabilities of each sampled token under the logit table ``logits``: one
    gather from the flat log-softmax table at (x, previous token, token)."""
    A = params.vocab
    prev = jnp.concatenate(
        [jnp.full(responses.shape[:-1] + (1,), A, responses.dtype), responses[..., :-1]], -1
    )
    flat = jax.nn.log_softmax(logits, axis=-1).reshape(-1)
    return flat[(prompts[:, None, None] * (A + 1) + prev) * A + responses]


def token_logp(params: MarkovParams, theta, prompts, responses):
    """(log π_θ(y_t | x, y_{t−1}) (n, G, T), mask of ones): every response has T tokens."""
    logp = table_logp(params, table(params, theta), prompts, responses)
    return logp, jnp.ones_like(logp)


def token_gradient(params: MarkovParams, theta, prompts, responses, weights) -> jax.Array:
    """(D,) Σ_{i,g,t} w_igt ∇_θ log π_θ(y_igt | x_i, y_ig,t−1) for per-token weights (n, G, T)."""
    return jax.grad(lambda t: jnp.sum(weights * token_logp(params, t, prompts, responses)[0]))(
        theta
    )


def gradient(params: MarkovParams, theta, prompts, responses, weights, truth=None):
    """(D,) Σ_i Σ_g w_ig ∇_θ log π_θ(y_ig | x_i) (the contract's ``gradient``)."""
    return token_gradient(params, theta, prompts, responses, weights[..., None])


def _occupancy(params: MarkovParams, logits: jax.Array) -> jax.Array:
    """(P, A + 1) expected visits of each previous token over the T steps under ``logits``."""
    P = jax.nn.softmax(logits, axis=-1)  # (P, A + 1, A)

    def one(p):
        start = jnp.zeros(params.vocab + 1, p.dtype).at[params.vocab].set(1.0)

        def body(carry, _):
            nxt = jnp.concatenate([carry @ p, jnp.zeros_like(carry[:1])])
            return nxt, carry

        _, visits = jax.lax.scan(body, start, None, length=params.T)
        return jnp.sum(visits, axis=0)

    return jax.vmap(one)(P)


def _kl_rows(p_logits, q_logits) -> jax.Array:
    """KL(p‖q) per row of two logit tables (…, A)."""
    lp, lq = jax.nn.log_softmax(p_logits, -1), jax.nn.log_softmax(q_logits, -1)
    return jnp.sum(jnp.exp(lp) * (lp - lq), axis=-1)


def kl(params: MarkovParams, theta, theta_ref) -> jax.Array:
    """Σ_x f_x KL(π_θ(·|x) ‖ π_ref(·|x)) over whole responses = E_θ Σ_t KL_t, exactly."""
    lt, lr = table(params, theta), table(params, theta_ref)
    per = jnp.sum(_occupancy(params, lt) * _kl_rows(lt, lr), axis=-1)
    return jnp.mean(per)


class Mismatch(NamedTuple):
    """The sampler μ's distance from π_θ (:func:`mismatch`), each a scalar array."""

    kl_token: jax.Array
    kl_seq: jax.Array
    tv_token: jax.Array
    tv_max: jax.Array
    chi2_token: jax.Array
    chi2_seq: jax.Array
    log1p_chi2_seq: jax.Array


def mismatch(params: MarkovParams, theta, mu_logits) -> Mismatch:
    """The sampler μ's distance from π_θ, exactly, averaged over prompts: ``kl_token`` (KL(μ‖π)
    per token over μ's visits), ``kl_seq`` = T·kl_token (E_μ Σ_t KL_t), ``tv_token`` (the total
    variation ½Σ_a|μ − π| per token over μ's visits), ``tv_max`` (its largest value over the
    (prompt, previous token) states μ visits: a Δ_max), ``chi2_token`` (E_μ
    [(π/μ)²] − 1 per token over μ's visits) and ``chi2_seq`` = E_μ[Π_t (π/μ)²] − 1 (and its log
    ``log1p_chi2_seq``, finite when χ² overflows)."""
    lt = jax.nn.log_softmax(table(params, theta), -1)
    lm = jax.nn.log_softmax(mu_logits, -1)
    occ = _occupancy(params, mu_logits)  # (P, A + 1)
    kl_rows = _kl_rows(mu_logits, lt)
    w = 2 * lt - lm  # log π²/μ per (prev, a)
    chi_rows = jnp.exp(jax.nn.logsumexp(w, axis=-1)) - 1
    T = params.T

    def log_second(wp):  # log Σ_y Π_t π²/μ by a forward pass over the previous token
        start = jnp.full(params.vocab + 1, -jnp.inf, wp.dtype).at[params.vocab].set(0.0)

        def body(logm, _):
            nxt = jax.nn.logsumexp(logm[:, None] + wp, axis=0)
            return jnp.concatenate([nxt, jnp.full(1, -jnp.inf, wp.dtype)]), None

        logm, _ = jax.lax.scan(body, start, None, length=T)
        return jax.nn.logsumexp(logm)

    log2 = jax.vmap(log_second)(w)
    kl_seq = jnp.mean(jnp.sum(occ * kl_rows, -1))
    tv_rows = 0.5 * jnp.sum(jnp.abs(jnp.exp(lm) - jnp.exp(lt)), axis=-1)  # (P, A + 1)
    return Mismatch(
        kl_token=kl_seq / T,
        kl_seq=kl_seq,
        tv_token=jnp.mean(jnp.sum(occ * tv_rows, -1)) / T,
        tv_max=jnp.max(jnp.where(occ > 0, tv_rows, 0.0)),
        chi2_token=jnp.mean(jnp.sum(occ * chi_rows, -1)) / T,
        chi2_seq=jnp.mean(jnp.expm1(log2)),
        log1p_chi2_seq=jax.nn.logsumexp(log2) - jnp.log(log2.shape[0]),
    )


def optimum(params: MarkovParams) -> float:
    """J* = 1: emitting token 0 at every step reaches any k_x <= T."""
    return 1.0


ENV = Env(
    "markov",
    init_theta,
    expected_return,
    exact,
    sample_prompts,
    sample,
    gradient,
    optimum,
    token_logp=token_logp,
    values=values,
    kl=kl,
    behaviour=behaviour_logits,
)
