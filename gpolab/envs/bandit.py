"""Contextual softmax bandit: P prompts × A actions, Bernoulli rewards, exact truth by enumeration.

One "action" stands for a whole LLM response.  Two parameterisations share every function:

* tabular:    logits[x, a] = θ[x, a],     θ of shape (P, A); local score W = e_a − π_x
* log-linear: logits[x, a] = φ(x, a) · θ,  θ of shape (d,);   local score W = φ(x, a) − E_π φ(x, ·)

"Local" coordinates are the parameter block prompt x can move: row x of θ (tabular, d = A) or all
of θ (log-linear).  Per-prompt gradients live there; :func:`to_global` places a mini-batch of them
into the flat parameter space of size D (P·A or d).  ``ENV`` is the :class:`gpolab.envs.Env` over
that flat θ.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from gpolab import configs, validate
from gpolab.configs import option
from gpolab.envs import Env, axis, resolve
from gpolab.envs.sampling import alias_draw, alias_tables, inverse_cdf, inverse_cdf_rows

KINDS = ("tabular", "loglinear")
# response-length models (tokens per (prompt, action)); "one" = one token per response
LENGTH_MODELS = ("one", "independent", "longer-when-wrong", "longer-when-right")
LENGTHS_TAG = 0x1E7  # fold_in tag of the length draw (the other draws of an instance unchanged)


@struct.dataclass
class BanditParams:
    theta: jax.Array  # (P, A) tabular logits or (d,) log-linear weights
    features: jax.Array  # (P, A, d) log-linear features; (P, A, 0) for tabular
    success: jax.Array  # (P, A) Bernoulli reward probabilities
    prompt_probs: jax.Array  # (P,) prompt distribution f
    tabular: bool = struct.field(pytree_node=False, default=True)
    lengths: jax.Array | None = None  # (P, A) tokens of response (x, a); None = all 1

    num_prompts = axis("success", 0)
    num_actions = axis("success", 1)

    @property
    def local_dim(self) -> int:
        return self.num_actions if self.tabular else self.features.shape[-1]


@struct.dataclass
class BanditTruth:
    """Exact per-prompt quantities (all conditional on x, arrays of shape (P,) unless noted)."""

    prompt_probs: jax.Array  # f
    V: jax.Array  # E[Z|x], the oracle baseline
    sigma2: jax.Array  # Var(Z|x)
    g_local: jax.Array  # (P, d) g_x = E[W Z | x] in local coordinates
    g: jax.Array  # (D,) g = E_X g_X, flat global
    S2: jax.Array  # E‖W‖²
    tr_sigma_oracle: jax.Array  # E[‖W‖² (Z − V)²] − ‖g_x‖²
    e_wz2: jax.Array  # E‖W Z‖²
    e_w2_zv: jax.Array  # E[‖W‖² (Z − V)]
    c1: jax.Array  # scalar E_X ‖g_X − g‖² (prompt variance)


NAME = "bandit"
LOGLINEAR = {"kind": ("loglinear",)}
DYNAMIC = {"dynamic_sampling": (True,)}


@dataclasses.dataclass(frozen=True)
class Instance(configs.Config):
    """The bandit's settings: the instance :func:`make` draws and how the sweep samples it
    (one group per prompt or ``B`` iid prompts, DAPO dynamic sampling)."""

    kind: str = option("tabular", "bandit policy: tabular or loglinear")
    prompts: int = option(16, "number of prompts P")
    actions: int = option(64, "actions (responses) per prompt A")
    dim: int = option(8, "feature dimension d", when=LOGLINEAR)
    logit_scale: float = option(1.0, "std of the initial logits")
    success_a: float = option(0.5, "success probabilities ~ Beta(success_a, success_b)")
    success_b: float = option(1.0, "success probabilities ~ Beta(success_a, success_b)")
    instance_seed: int = option(0, "seed of the random bandit / thought set / questions")
    lengths: str = option(
        "one", "response lengths: one, independent, longer-when-wrong, longer-when-right (bandit)"
    )
    length_min: int = option(50, "shortest response (tokens)")
    length_max: int = option(1000, "longest response (tokens)")
    B: int = option(
        0, "0 = one group for every prompt (mean per-prompt MSE); b > 0 = b iid prompts"
    )
    dynamic_sampling: bool = option(
        False,
        "DAPO dynamic sampling (verl filter_groups): keep the "
        "first B groups with unequal rewards, drawing batches of B "
        "prompts; needs B >= 1",
    )
    max_draws: int = option(
        8, "cap on generation batches per step (verl max_num_gen_batches)", when=DYNAMIC
    )

    def validate(self) -> None:
        validate.choice("kind", self.kind, KINDS)
        validate.integer("prompts", self.prompts, 1)
        validate.integer("actions", self.actions, 2)
        validate.integer("dim", self.dim, 1)
        validate.real("logit_scale", self.logit_scale, low=0.0)
        validate.real("success_a", self.success_a, low=0.0, open_low=True)
        validate.real("success_b", self.success_b, low=0.0, open_low=True)
        validate.integer("instance_seed", self.instance_seed, 0)
        check_lengths(self.lengths, self.length_min, self.length_max)
        validate.integer("B", self.B, 0)
        if self.dynamic_sampling:
            validate.integer("max_draws", self.max_draws, 1)
            if self.B < 1:
                raise validate.ConfigError(
                    "B: got 0; dynamic_sampling keeps B groups per step: set B >= 1"
                )

    def longest_response(self) -> int:
        """Tokens of the longest possible response (L_norm's default)."""
        return self.length_max if self.lengths != "one" else 1


def make(inst: Instance | jax.Array | int = 0, **settings) -> BanditParams:
    """The bandit of ``inst`` (an :class:`Instance`; its ``instance_seed`` draws it).  The older
    form ``make(key, prompts=..., ...)`` (a key or seed and keywords) gives the same instance."""
    return draw(*resolve(Instance, inst, settings))


def draw(key: jax.Array | int, inst: Instance) -> BanditParams:
    """A random bandit instance of the (validated) settings ``inst``, drawn with ``key``.

    Logits (tabular) or θ and φ (log-linear, φ ~ N(0, 1/d) so logits have scale ``logit_scale``)
    are Gaussian; success probabilities are Beta(``success_a``, ``success_b``), so prompts have
    heterogeneous V(x); prompts are uniform.  ``lengths``: the response-length model of
    :func:`length_table` (its draw uses its own fold of ``key``: the other draws do not change).
    Every draw is made in float32 and cast to the default precision, so float64 mode (``x64``)
    gives the same instance for the same ``key``.
    """
    key = jax.random.key(key) if isinstance(key, int) else key
    static = (inst.prompts, inst.actions, inst.kind, inst.dim)  # _draw's compiled shape
    params = _draw(key, *static, inst.logit_scale, inst.success_a, inst.success_b)
    k_len = jax.random.fold_in(key, LENGTHS_TAG)
    table = length_table(k_len, params.success, inst.lengths, inst.length_min, inst.length_max)
    # one instance per seed whatever the precision: drawn in float32, then cast (float64 mode
    # holds the same numbers); the uniform f is exact in either precision
    real = jnp.zeros(()).dtype
    return params.replace(
        theta=params.theta.astype(real),
        features=params.features.astype(real),
        success=params.success.astype(real),
        prompt_probs=jnp.full((inst.prompts,), 1.0 / inst.prompts, real),
        lengths=table.astype(real),
    )


def check_lengths(lengths="one", length_min=50, length_max=1000) -> None:
    """Plain-Python checks of the length model of :func:`make`."""
    validate.choice("lengths", lengths, LENGTH_MODELS)
    validate.integer("length_min", length_min, 1)
    validate.integer("length_max", length_max, length_min)


def length_table(key, success: jax.Array, model: str, lo: int, hi: int) -> jax.Array:
    """(P, A) tokens per response (float):

    one                all 1 (a response is one token: gpolab's bandit before lengths)
    independent        iid uniform integers in [lo, hi], independent of p(x, a)
    longer-when-wrong  round(lo + (hi − lo)(1 − p(x, a)))   (likely-wrong actions are long)
    longer-when-right  round(lo + (hi − lo) p(x, a))        (the mirror)
    """
    validate.choice("lengths", model, LENGTH_MODELS)
    if model == "one":
        return jnp.ones_like(success)
    if model == "independent":
        draw = jax.random.randint(key, success.shape, lo, hi + 1, jnp.int32)
        return draw.astype(success.dtype)
    frac = 1 - success if model == "longer-when-wrong" else success
    return jnp.round(lo + (hi - lo) * frac)


@partial(jax.jit, static_argnums=(1, 2, 3, 4))
def _draw(key, prompts, actions, kind, dim, logit_scale, success_a, success_b) -> BanditParams:
    """One compiled draw (eager dispatch would compile the Beta sampler op by op)."""
    f32 = jnp.float32  # whatever the precision mode (:func:`make` casts)
    k_theta, k_feat, k_succ = jax.random.split(key, 3)
    success = jax.random.beta(k_succ, f32(success_a), f32(success_b), (prompts, actions), f32)
    probs = jnp.full((prompts,), 1.0 / prompts, f32)
    if kind == "tabular":
        theta = f32(logit_scale) * jax.random.normal(k_theta, (prompts, actions), f32)
        features = jnp.zeros((prompts, actions, 0), f32)
    else:
        theta = f32(logit_scale) * jax.random.normal(k_theta, (dim,), f32)
        features = jax.random.normal(k_feat, (prompts, actions, dim), f32) / f32(np.sqrt(dim))
    return BanditParams(theta, features, success, probs, tabular=kind == "tabular")


def validate_params(params: BanditParams) -> None:
    """Plain-Python checks of a user-built instance (probabilities in range, finite θ)."""
    validate.finite_array("theta", params.theta)
    validate.finite_array("features", params.features)
    validate.finite_array("success", params.success, 0.0, 1.0)
    validate.finite_array("prompt_probs", params.prompt_probs, 0.0, 1.0)
    if abs(float(np.sum(params.prompt_probs)) - 1.0) > 1e-5:
        raise validate.ConfigError("prompt_probs: must sum to 1")


def logits(params: BanditParams) -> jax.Array:
    """(P, A) policy logits."""
    if params.tabular:
        return params.theta
    return params.features @ params.theta


def policy(params: BanditParams) -> jax.Array:
    """(P, A) action probabilities π(a|x)."""
    return jax.nn.softmax(logits(params), axis=-1)


def expected_return(params: BanditParams) -> jax.Array:
    """J(θ) = Σ_x f(x) Σ_a π(a|x) p(x, a); its gradient is the true policy gradient g."""
    return jnp.sum(params.prompt_probs * jnp.sum(policy(params) * params.success, axis=-1))


def score_table(params: BanditParams) -> jax.Array:
    """(P, A, d) exact local scores W(x, a) = ∇ log π(a|x) for every prompt and action."""
    pi = policy(params)
    if params.tabular:
        return jnp.eye(params.num_actions)[None] - pi[:, None, :]
    mean_feat = jnp.einsum("pa,pad->pd", pi, params.features)
    return params.features - mean_feat[:, None, :]


def lengths_of(params: BanditParams) -> jax.Array:
    """(P, A) tokens per (prompt, action): the instance's table, all 1 when it has none."""
    if params.lengths is None:
        return jnp.ones_like(params.success)
    return params.lengths


def response_length(params: BanditParams, prompts: jax.Array, actions: jax.Array) -> jax.Array:
    """(B, G) tokens of the sampled responses ``actions`` (B, G) of ``prompts`` (B,)."""
    return lengths_of(params)[prompts[:, None], actions]


def greedy_success(params: BanditParams) -> jax.Array:
    """(P,) success probability of each prompt's greedy (most likely) action."""
    best = jnp.argmax(logits(params), axis=-1)
    return jnp.take_along_axis(params.success, best[:, None], axis=-1)[:, 0]


def greedy_rewards(key: jax.Array, params: BanditParams, prompts: jax.Array) -> jax.Array:
    """(B,) rewards of the greedy action for ``prompts``: Bernoulli(p(x, argmax π)), the baseline
    ReMax draws once per prompt."""
    p = greedy_success(params)[prompts]
    return (jax.random.uniform(key, p.shape, dtype=p.dtype) < p).astype(p.dtype)


def sample_prompts(key: jax.Array, params: BanditParams, B: int) -> jax.Array:
    """(B,) iid prompt indices from f."""
    u = jax.random.uniform(key, (B,), dtype=params.prompt_probs.dtype)
    return inverse_cdf(params.prompt_probs, u)


def outcome_probs(params: BanditParams) -> jax.Array:
    """(P, 2A) probabilities of the joint outcomes (a, z) of one response, interleaved: column
    2a + z holds π(a|x)·p(x, a)^z·(1 − p(x, a))^(1−z).  Its marginal over z is π(·|x) and z given
    a is Bernoulli(p(x, a)), so one categorical draw from it is one (action, reward) pair."""
    pi, p = policy(params), params.success
    return jnp.stack([pi * (1 - p), pi * p], axis=-1).reshape(pi.shape[0], -1)


def split_outcomes(idx: jax.Array, dtype=jnp.float32) -> tuple[jax.Array, jax.Array]:
    """Outcome indices of :func:`outcome_probs` → (actions int32, rewards in ``dtype``)."""
    return idx >> 1, (idx & 1).astype(dtype)


@struct.dataclass
class OutcomeTables:
    """Walker's alias tables of every prompt's joint outcomes (:func:`outcome_probs`), built once
    on the host for one instance at its own θ (:func:`outcome_tables`)."""

    keep: jax.Array  # (P, 2A) probability of keeping the uniformly picked column
    alias: jax.Array  # (P, 2A) int32 outcome taken otherwise


def outcome_tables(params: BanditParams) -> OutcomeTables:
    """The alias tables of ``params``' joint outcomes at its own θ, for :func:`sample`: built on
    the host in float64 (:func:`~gpolab.envs.sampling.alias_tables`, O(P·A)), ``keep`` cast to
    the instance's precision.  Tables belong to one instance: built from another θ or other
    success probabilities they draw another law, so they are made where the instance is."""
    keep, alias = alias_tables(np.asarray(outcome_probs(params), np.float64))
    return OutcomeTables(jnp.asarray(keep, params.success.dtype), jnp.asarray(alias))


def sample(
    key: jax.Array,
    params: BanditParams,
    prompts: jax.Array,
    G: int,
    tables: OutcomeTables | None = None,
):
    """G responses per prompt in ``prompts`` (B,): actions (B, G) int32 and rewards (B, G).

    One uniform per response: (action, reward) is a single categorical draw over the 2A joint
    outcomes (:func:`outcome_probs`), the same law as an action from π then a Bernoulli reward,
    at half the random numbers and without a gather of p(x, a) (W1 1.3× faster, ``gpolab bench``).
    With the instance's ``tables`` (:func:`outcome_tables`) the draw is the alias method (one
    column picked by the uniform and one keep-or-alias test: O(1) per draw; what the sweep and
    ``gpolab bench``'s W1 use); without, the two-level inverse CDF (what :func:`sample_at` draws
    at a moving θ, where tables would be rebuilt every step).  The same law, other draws.
    """
    dtype = params.success.dtype
    u = jax.random.uniform(key, (prompts.shape[0], G), dtype=dtype)
    if tables is not None:
        return split_outcomes(alias_draw(tables.keep[prompts], tables.alias[prompts], u), dtype)
    return split_outcomes(inverse_cdf(outcome_probs(params)[prompts], u), dtype)


def scores(params: BanditParams, prompts: jax.Array, actions: jax.Array) -> jax.Array:
    """(B, G, d) local scores of the sampled actions."""
    return score_table(params)[prompts[:, None], actions]


def weighted_scores(
    params: BanditParams, prompts: jax.Array, actions: jax.Array, weights: jax.Array
) -> jax.Array:
    """(B, d) Σ_g c_g W(x_b, a_bg) without materialising per-sample scores.

    Tabular: Σ_g c_g e_{a_g} − (Σ_g c_g) π_x, a scatter-add into A bins (one flat index per
    sample: ~5% faster on CPU than a (row, action) index pair).
    Log-linear: Σ_g c_g φ(x, a_g) − (Σ_g c_g) E_π φ(x, ·).
    """
    pi = policy(params)[prompts]
    total = jnp.sum(weights, axis=-1, keepdims=True)
    if params.tabular:
        B, A = pi.shape
        flat = (jnp.arange(B)[:, None] * A + actions).reshape(-1)
        hits = jnp.zeros(B * A, weights.dtype).at[flat].add(weights.reshape(-1))
        return hits.reshape(B, A) - total * pi
    feats = params.features[prompts]  # (B, A, d)
    mean_feat = jnp.einsum("ba,bad->bd", pi, feats)
    chosen = jnp.take_along_axis(feats, actions[:, :, None], axis=1)  # (B, G, d)
    return jnp.einsum("bg,bgd->bd", weights, chosen) - total * mean_feat


def prompt_average(params: BanditParams, local: jax.Array) -> jax.Array:
    """Σ_x f(x) ĝ_x in flat global coordinates (D,) from one local estimate per prompt (P, d)."""
    f = params.prompt_probs
    if not params.tabular:
        return f @ local
    return (f[:, None] * local).reshape(-1)


def to_global(params: BanditParams, prompts: jax.Array, local: jax.Array) -> jax.Array:
    """Mini-batch gradient (1/B) Σ_b ĝ_{x_b} in flat global coordinates (D,)."""
    if not params.tabular:
        return jnp.mean(local, axis=0)
    full = jnp.zeros(params.success.shape, local.dtype).at[prompts].add(local)
    return full.reshape(-1) / prompts.shape[0]


@jax.jit
def exact(params: BanditParams, second: jax.Array | None = None) -> BanditTruth:
    """Every exact quantity of theory §3, by enumeration over actions (one compiled call).

    ``second``: (P, A) E[Z² | x, a] of a reward that is not Bernoulli (the graded env's; ``success``
    then holds its mean); None: Bernoulli, E[Z²|x, a] = p(x, a)."""
    pi = policy(params)
    p = params.success
    f = params.prompt_probs
    W = score_table(params)
    w2 = jnp.sum(W**2, axis=-1)  # ‖W(x, a)‖²
    V = jnp.sum(pi * p, axis=-1)
    g_local = jnp.einsum("pa,pad->pd", pi * (p - V[:, None]), W)
    gsq = jnp.sum(g_local**2, axis=-1)
    m2 = p if second is None else second  # E[Z² | x, a]
    var_a = p * (1 - p) if second is None else second - p**2  # Var(Z | x, a)
    e_w2_zv2 = jnp.sum(pi * w2 * (var_a + (p - V[:, None]) ** 2), axis=-1)
    if params.tabular:  # prompt x's gradient sits in row x only: g's row x is f_x g_x, and
        # ‖g_x − g‖² = Σ_{y≠x} f_y² ‖g_y‖² + (1 − f_x)² ‖g_x‖² (gpolab's; no (P, P·A) array)
        g = (f[:, None] * g_local).reshape(-1)
        others = jnp.maximum(jnp.sum(f**2 * gsq) - f**2 * gsq, 0.0)
        c1 = f @ (others + (1 - f) ** 2 * gsq)
    else:
        g = f @ g_local
        c1 = f @ jnp.sum((g_local - g[None]) ** 2, axis=-1)
    return BanditTruth(
        prompt_probs=f,
        V=V,
        sigma2=V * (1 - V) if second is None else jnp.maximum(jnp.sum(pi * m2, -1) - V**2, 0.0),
        g_local=g_local,
        g=g,
        S2=jnp.sum(pi * w2, axis=-1),
        tr_sigma_oracle=e_w2_zv2 - gsq,
        e_wz2=jnp.sum(pi * w2 * m2, axis=-1),
        e_w2_zv=jnp.sum(pi * w2 * (p - V[:, None]), axis=-1),
        c1=c1,
    )


# ---------------------------------------------------------------- the Env contract (flat θ)


def at(params: BanditParams, theta: jax.Array) -> BanditParams:
    """The instance with its θ replaced by the flat vector ``theta`` (D,)."""
    return params.replace(theta=theta.reshape(params.theta.shape))


def init_theta(params: BanditParams) -> jax.Array:
    """θ₀ (D,): the instance's own θ, flat."""
    return params.theta.reshape(-1)


def value(params: BanditParams, theta: jax.Array) -> jax.Array:
    """J(θ) at flat θ."""
    return expected_return(at(params, theta))


def exact_at(params: BanditParams, theta: jax.Array) -> BanditTruth:
    """:func:`exact` at flat θ."""
    return exact(at(params, theta))


def sample_at(key, params: BanditParams, theta, prompts: jax.Array, G: int, truth=None):
    """G (action, reward) pairs per prompt of ``prompts`` (n,) at flat θ: actions (n, G) int32
    and rewards (n, G), the draws of :func:`sample` without tables (same uniforms, same inverse
    CDF over the joint outcomes) gathering only row x_i's ≈ √(2A) block ends and one block per draw
    (:func:`~gpolab.envs.sampling.inverse_cdf_rows`).  ``truth`` is not needed."""
    params = at(params, theta)
    dtype = params.success.dtype
    u = jax.random.uniform(key, (prompts.shape[0], G), dtype=dtype)
    rows = jnp.broadcast_to(prompts[:, None], u.shape).reshape(-1)
    idx = inverse_cdf_rows(outcome_probs(params), rows, u.reshape(-1))
    return split_outcomes(idx.reshape(u.shape), dtype)


def gradient(params: BanditParams, theta, prompts, actions: jax.Array, weights, truth=None):
    """Σ_i Σ_g w_ig W(x_i, a_ig) in flat global coordinates (D,), O(n·G) memory: tabular
    W = e_a − π_x, so scatter w_ig into cell (x_i, a_ig) and subtract (Σ_{i: x_i = x} Σ_g w_ig) π_x
    per prompt; log-linear through :func:`weighted_scores`.  ``truth`` is not needed."""
    params = at(params, theta)
    if not params.tabular:
        return jnp.sum(weighted_scores(params, prompts, actions, weights), axis=0)
    P, A = params.success.shape
    rows = jnp.broadcast_to(prompts[:, None], actions.shape).reshape(-1)
    w = weights.reshape(-1)
    hits = jnp.zeros((P, A), w.dtype).at[rows, actions.reshape(-1)].add(w)
    per_prompt = jax.ops.segment_sum(w, rows, num_segments=P)
    return (hits - per_prompt[:, None] * policy(params)).reshape(-1)


def optimum(params: BanditParams) -> float:
    """J* = Σ_x f_x max_a p(x, a) (the best action of every prompt)."""
    return float(np.asarray(params.prompt_probs) @ np.max(np.asarray(params.success), 1))


def token_logp(params: BanditParams, theta, prompts: jax.Array, actions: jax.Array):
    """(log π_θ(a|x), mask), each (n, G, 1): a response is one token."""
    logp = jax.nn.log_softmax(logits(at(params, theta)), axis=-1)[prompts[:, None], actions]
    return logp[..., None], jnp.ones_like(logp)[..., None]


def values(params: BanditParams, theta: jax.Array) -> jax.Array:
    """(f, V): the prompt distribution (P,) and V_x(θ) = Σ_a π_θ(a|x) p(x, a) (P,)."""
    return params.prompt_probs, jnp.sum(policy(at(params, theta)) * params.success, axis=-1)


def kl(params: BanditParams, theta: jax.Array, theta_ref: jax.Array) -> jax.Array:
    """Σ_x f_x KL(π_θ(·|x) ‖ π_θref(·|x)), by enumeration over the actions."""
    logp = jax.nn.log_softmax(logits(at(params, theta)), axis=-1)
    log_ref = jax.nn.log_softmax(logits(at(params, theta_ref)), axis=-1)
    return params.prompt_probs @ jnp.sum(jnp.exp(logp) * (logp - log_ref), axis=-1)


ENV = Env(
    "bandit",
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
    kl=kl,
)
