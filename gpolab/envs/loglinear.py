"""Log-linear policy over large finite response sets, binary rewards: the std-normalization testbed.

theory §7, [N] arXiv 2601.23135.  N prompts, A responses each; response y of prompt x carries a
vector u(x, y) ∈ R^k with ‖u‖ = B, and the policy features are

    φ(x, y) = √(1 − ρ²) · (e_x ⊗ u(x, y))  ⊕  ρ · u(x, y)          ‖φ(x, y)‖ = B,

a per-prompt *own* block (orthogonal across prompts) and one *shared* block of the same content.
θ = (θ_1, …, θ_N, θ_s) ∈ R^{Nk + k}, so logits(x, y) = ⟨u(x, y), v_x⟩ with the effective vector
v_x = √(1 − ρ²) θ_x + ρ θ_s.  ρ = 0 gives exactly orthogonal per-prompt gradients; ρ = 1 one
shared k-dimensional problem.

Rewards are binary and deterministic, r(x, y) = 1 for the top q_x·A responses along one target
direction w (so the optimum is at infinity and every prompt can reach p_x → 1).  At θ = 0 the policy
is uniform and p_x = q_x, geometrically spaced from ``p_low`` to ``p_high`` (a poor, heterogeneous
initial policy).  ``equal=True`` is the control: every prompt is a copy of one prompt with
q = ``p_equal``, so σ_x is equal across prompts along any trajectory that starts at θ = 0.

Because φ restricted to prompt x is u(x, y) ⊗ (√(1 − ρ²), ρ), every per-prompt quantity is a
k-dimensional *local* one: with c_x = Cov_π(r, u) and M_x = E_π[(r − p_x) ψ_u ψ_uᵀ]
(ψ_u = u − E_π u),  g_x = ∇p_x = (√(1 − ρ²) c_x at block x, ρ c_x at the shared block) and
H_x = ∇²p_x = M_x ⊗ vvᵀ with v = (√(1 − ρ²), ρ), so ‖g_x‖ = ‖c_x‖ and ‖H_x‖_op = ‖M_x‖_op.
``ENV`` is the :class:`gpolab.envs.Env` over θ.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from gpolab import configs, validate
from gpolab.configs import option
from gpolab.envs import Env, axis, resolve
from gpolab.envs.sampling import inverse_cdf


@struct.dataclass
class LogLinearParams:
    u: jax.Array  # (N, A, k) response vectors, ‖u(x, y)‖ = B
    reward: jax.Array  # (N, A) binary rewards r(x, y)
    rho: jax.Array  # () orthogonality knob ρ ∈ [0, 1] (traced: sweeping it does not recompile)
    bound: float = struct.field(pytree_node=False, default=1.0)  # B

    num_prompts = axis("u", 0)
    num_responses = axis("u", 1)
    block = axis("u", 2)

    @property
    def dim(self) -> int:
        """D = N·k + k, the size of θ."""
        return (self.num_prompts + 1) * self.block


@struct.dataclass
class LogLinearTruth:
    """Exact per-prompt quantities at one θ (arrays of shape (N,) unless noted), under the shared
    names of :class:`gpolab.envs.Env`."""

    prompt_probs: jax.Array  # f = 1/N (uniform prompts)
    V: jax.Array  # E_π r = p_x
    one_minus_V: jax.Array  # 1 − p_x, summed directly (no cancellation near p_x = 1)
    sigma2: jax.Array  # σ_x² = p_x (1 − p_x)
    g_local: jax.Array  # (N, k) c_x = Cov_π(r, u)
    g_global: jax.Array  # (N, D) g_x = ∇p_x in global coordinates
    g: jax.Array  # (D,) ∇J = (1/N) Σ_x g_x
    pi: jax.Array  # (N, A) π(y|x), which :func:`sample` and :func:`gradient` reuse
    mean_u: jax.Array  # (N, k) E_π u(x, ·)


@dataclasses.dataclass(frozen=True)
class Instance(configs.Config):
    """The log-linear env's settings (:func:`make` draws the instance from ``instance_seed``)."""

    prompts: int = option(32, "number of prompts N")
    responses: int = option(256, "responses per prompt A (>= 256)")
    block: int = option(8, "feature dimension k (each prompt moves one block of theta)")
    bound: float = option(1.0, "feature norm B")
    rho: float = option(0.0, "overlap of the prompts' blocks, in [0, 1]")
    p_low: float = option(0.02, "success fraction of the hardest prompt")
    p_high: float = option(0.9, "success fraction of the easiest prompt")
    align: float = option(0.5, "alignment of the reward with the features, in [0, 1]")
    equal: bool = option(False, "every prompt the same (success fraction p_equal)")
    p_equal: float = option(0.2, "success fraction of every prompt with equal")
    instance_seed: int = option(0, "seed of the instance")

    def validate(self) -> None:
        validate.integer("prompts", self.prompts, 1)
        validate.integer("responses", self.responses, 256)
        validate.integer("block", self.block, 1)
        validate.real("bound", self.bound, low=0.0, open_low=True)
        validate.real("rho", self.rho, 0.0, 1.0)
        validate.real("p_low", self.p_low, 0.0, 1.0, open_low=True)
        validate.real("p_high", self.p_high, self.p_low, 1.0)
        validate.real("p_equal", self.p_equal, 0.0, 1.0, open_low=True)
        validate.real("align", self.align, 0.0, 1.0)
        if self.p_high >= 1.0 or self.p_equal >= 1.0:
            raise validate.ConfigError("p_high, p_equal: got 1; allowed: numbers in (0, 1)")
        validate.integer("instance_seed", self.instance_seed, 0)


def make(inst: Instance | jax.Array | int = 0, **settings) -> LogLinearParams:
    """The instance of ``inst`` (an :class:`Instance`), or of a key or seed and keywords (the
    older form, same instance)."""
    return draw(*resolve(Instance, inst, settings))


def draw(key: jax.Array | int, inst: Instance) -> LogLinearParams:
    """A random instance of the (validated) settings ``inst``, drawn with ``key``.

    u(x, y) uniform on the sphere of radius B in R^k; the target w uniform on the unit sphere;
    r(x, y) = 1 for the round(q_x·A) responses with the largest ⟨u(x, y), w⟩,
    q_x = p_low·(p_high/p_low)^{x/(N−1)} (``equal``: q_x = p_equal and u(x, ·) = u(0, ·)).
    """
    prompts, responses, block, bound = inst.prompts, inst.responses, inst.block, inst.bound
    p_low, p_high = inst.p_low, inst.p_high
    key = jax.random.key(key) if isinstance(key, int) else key
    k_u, k_w, k_n = jax.random.split(key, 3)  # float32 draws: the same instance in float64 mode
    rows = 1 if inst.equal else prompts
    u = np.array(jax.random.normal(k_u, (rows, responses, block), jnp.float32), np.float64)
    u *= bound / np.linalg.norm(u, axis=-1, keepdims=True)
    w = np.array(jax.random.normal(k_w, (block,), jnp.float32), np.float64)
    w /= np.linalg.norm(w)
    if inst.equal:
        q = np.full(prompts, inst.p_equal)
        u = np.broadcast_to(u, (prompts, responses, block))
    else:
        q = np.geomspace(p_low, p_high, prompts) if prompts > 1 else np.array([p_low])
    n_correct = np.clip(np.round(q * responses), 1, responses - 1).astype(int)
    noise = np.asarray(jax.random.normal(k_n, (rows, responses), jnp.float32), np.float64) * bound
    noise = np.broadcast_to(noise / np.sqrt(block), (prompts, responses))
    score = inst.align * (u @ w) + np.sqrt(1.0 - inst.align**2) * noise
    rank = np.argsort(np.argsort(-score, axis=-1), axis=-1)  # 0 = largest score
    reward = (rank < n_correct[:, None]).astype(np.float32)
    return LogLinearParams(
        u=jnp.asarray(u, jnp.float32),
        reward=jnp.asarray(reward),
        rho=jnp.asarray(inst.rho, jnp.float32),
        bound=float(bound),
    )


def init_theta(params: LogLinearParams) -> jax.Array:
    """θ₀ = 0: the uniform policy, p_x = q_x."""
    return jnp.zeros((params.dim,), params.u.dtype)


def split_theta(params: LogLinearParams, theta: jax.Array) -> tuple[jax.Array, jax.Array]:
    """θ (D,) → own blocks (N, k) and shared block (k,)."""
    N, k = params.num_prompts, params.block
    return theta[: N * k].reshape(N, k), theta[N * k :]


def mixing(params: LogLinearParams) -> tuple[jax.Array, jax.Array]:
    """(a, ρ) with a = √(1 − ρ²): the weights of the own and shared blocks."""
    return jnp.sqrt(jnp.maximum(1.0 - params.rho**2, 0.0)), params.rho


def to_global(params: LogLinearParams, local: jax.Array) -> jax.Array:
    """Per-prompt local vectors (N, k) → per-prompt global vectors (N, D):
    m_x ↦ (a·m_x at block x, ρ·m_x at the shared block)."""
    N = params.num_prompts
    a, rho = mixing(params)
    own = (jnp.eye(N, dtype=local.dtype)[:, :, None] * local[None, :, :]).reshape(N, -1)
    return jnp.concatenate([a * own, rho * local], axis=-1)


def logits(params: LogLinearParams, theta: jax.Array) -> jax.Array:
    """(N, A) logits ⟨φ(x, y), θ⟩ = ⟨u(x, y), √(1 − ρ²) θ_x + ρ θ_s⟩."""
    own, shared = split_theta(params, theta)
    a, rho = mixing(params)
    v = a * own + rho * shared[None, :]
    return jnp.einsum("nak,nk->na", params.u, v)


def features(params: LogLinearParams) -> jax.Array:
    """(N, A, D) the full feature table φ(x, y) (tests and small instances only)."""
    N, A, k = params.u.shape
    a, rho = mixing(params)
    own = jnp.eye(N, dtype=params.u.dtype)[:, None, :, None] * params.u[:, :, None, :]
    return jnp.concatenate([a * own.reshape(N, A, N * k), rho * params.u], axis=-1)


def policy(params: LogLinearParams, theta: jax.Array) -> jax.Array:
    """(N, A) π(y|x)."""
    return jax.nn.softmax(logits(params, theta), axis=-1)


def success(params: LogLinearParams, theta: jax.Array) -> jax.Array:
    """(N,) p_x(θ) = Σ_y π(y|x) r(x, y)."""
    return jnp.sum(policy(params, theta) * params.reward, axis=-1)


def expected_return(params: LogLinearParams, theta: jax.Array) -> jax.Array:
    """J(θ) = (1/N) Σ_x p_x(θ)."""
    return jnp.mean(success(params, theta))


def exact(params: LogLinearParams, theta: jax.Array) -> LogLinearTruth:
    """p_x, σ_x² and g_x = Cov_π(r, φ) = E_π[(r − p_x) ψ] by enumeration over responses."""
    pi = policy(params, theta)
    r = params.reward
    p = jnp.sum(pi * r, axis=-1)
    q = jnp.sum(pi * (1.0 - r), axis=-1)
    c = jnp.einsum("na,nak->nk", pi * (r - p[:, None]), params.u)
    g_global = to_global(params, c)
    return LogLinearTruth(
        prompt_probs=jnp.full_like(p, 1.0 / params.num_prompts),
        V=p,
        one_minus_V=q,
        sigma2=jnp.maximum(p * q, 0.0),
        g_local=c,
        g_global=g_global,
        g=jnp.mean(g_global, axis=0),
        pi=pi,
        mean_u=jnp.einsum("na,nak->nk", pi, params.u),
    )


def hessian_local(params: LogLinearParams, theta: jax.Array) -> jax.Array:
    """(N, k, k) M_x = E_π[(r − p_x) ψ_u ψ_uᵀ], ψ_u = u − E_π u; H_x = M_x ⊗ vvᵀ."""
    pi = policy(params, theta)
    r = params.reward
    p = jnp.sum(pi * r, axis=-1, keepdims=True)
    psi = params.u - jnp.einsum("na,nak->nk", pi, params.u)[:, None, :]
    return jnp.einsum("na,nak,nal->nkl", pi * (r - p), psi, psi)


def hessian(params: LogLinearParams, theta: jax.Array, x: int) -> jax.Array:
    """(D, D) H_x = ∇²p_x in global coordinates (tests and small instances only)."""
    M = hessian_local(params, theta)[x]
    N, k = params.num_prompts, params.block
    a, rho = mixing(params)
    embed = jnp.zeros((params.dim, k), M.dtype)
    embed = embed.at[x * k : (x + 1) * k].set(a * jnp.eye(k)).at[N * k :].set(rho * jnp.eye(k))
    return embed @ M @ embed.T


def smoothness_sigma(params: LogLinearParams, truth: LogLinearTruth) -> jax.Array:
    """s = λ_max(Σ_x σ_x w_x w_xᵀ), w_x = √(1 − ρ²) e_x + ρ e_s ∈ R^{N+1}: from ‖H_x‖ ≤ cB²σ_x,
    zᵀ∇²J z = (1/N) Σ_x (a z_x + ρ z_s)ᵀ M_x (a z_x + ρ z_s) ≤ (cB²/N)·s·‖z‖², so L = cB²s/N.
    ρ = 0: s = max_x σ_x; ρ = 1: s = Σ_x σ_x = N σ̄.

    The matrix is diagonal plus one border row, so λ_max is the root above a²σ_max of the
    secular equation f(λ) = ρ²Σσ − λ + Σ_x a²ρ²σ_x²/(λ − a²σ_x) (decreasing there), found by
    bisection on [max(a²σ_max, ρ²Σσ), σ_max·(1 + (N − 1)ρ²)] (an eigensolver per step costs
    3× the whole exact step)."""
    a, rho = mixing(params)
    sig = jnp.sqrt(truth.sigma2)
    d = a**2 * sig
    num = (a * rho * sig) ** 2
    total = rho**2 * jnp.sum(sig)
    lo = jnp.maximum(jnp.max(d), total)
    hi = jnp.maximum(jnp.max(sig) * (a**2 + sig.shape[0] * rho**2), lo)

    def f(lam):
        gap = lam - d
        terms = jnp.where(
            gap > 0, num / jnp.where(gap > 0, gap, 1.0), jnp.where(num > 0, jnp.inf, 0.0)
        )
        return total - lam + jnp.sum(terms)

    def body(_, bounds):
        lo, hi = bounds
        mid = 0.5 * (lo + hi)
        up = f(mid) > 0
        return jnp.where(up, mid, lo), jnp.where(up, hi, mid)

    lo, hi = jax.lax.fori_loop(0, 40, body, (lo, hi))
    return 0.5 * (lo + hi)


def curvature_norms(params: LogLinearParams, theta: jax.Array):
    """(σ_x, ‖g_x‖, ‖H_x‖_op), each (N,): the quantities of the curvature law."""
    truth = exact(params, theta)
    M = hessian_local(params, theta)
    h = jnp.max(jnp.abs(jnp.linalg.eigvalsh(M)), axis=-1)
    return jnp.sqrt(truth.sigma2), jnp.linalg.norm(truth.g_local, axis=-1), h


def sample_prompts(key: jax.Array, params: LogLinearParams, n: int) -> jax.Array:
    """(n,) iid uniform prompt indices."""
    return jax.random.randint(key, (n,), 0, params.num_prompts)


def sample(key, params: LogLinearParams, theta, prompts: jax.Array, G: int, truth=None):
    """G responses from π_θ for each prompt of ``prompts`` (n,): (responses (n, G) int32,
    rewards (n, G)); π is read from ``truth`` (:func:`exact` at θ) when given."""
    pi = (policy(params, theta) if truth is None else truth.pi)[prompts]
    u = jax.random.uniform(key, (prompts.shape[0], G), dtype=pi.dtype)
    ys = inverse_cdf(pi, u)
    return ys, jnp.take_along_axis(params.reward[prompts], ys, axis=-1)


def gradient(params: LogLinearParams, theta, prompts, ys: jax.Array, weights, truth=None):
    """(D,) Σ_i Σ_g c_ig W(x_i, y_ig), W = φ − E_π φ, without per-sample scores: local
    m_i = Σ_g c_ig u(x_i, y_ig) − (Σ_g c_ig) E_π u(x_i, ·), added into block x_i (weight
    √(1 − ρ²)) and the shared block (weight ρ); E_π u is read from ``truth`` when given."""
    if truth is None:
        mean_u = jnp.einsum("na,nak->nk", policy(params, theta), params.u)
    else:
        mean_u = truth.mean_u
    chosen = jnp.take_along_axis(params.u[prompts], ys[:, :, None], axis=1)  # (n, G, k)
    total = jnp.sum(weights, axis=-1, keepdims=True)
    local = jnp.einsum("ng,ngk->nk", weights, chosen) - total * mean_u[prompts]
    own = jnp.zeros((params.num_prompts, params.block), local.dtype).at[prompts].add(local)
    a, rho = mixing(params)
    return jnp.concatenate([a * own.reshape(-1), rho * jnp.sum(local, axis=0)])


def optimum(params: LogLinearParams) -> float:
    """J* = 1: every prompt has a rewarded response, reached as θ → ∞ along the target."""
    return 1.0


ENV = Env(
    "loglinear",
    init_theta,
    expected_return,
    exact,
    sample_prompts,
    sample,
    gradient,
    optimum,
    curvature=smoothness_sigma,
)
