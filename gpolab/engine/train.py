"""Policy-gradient training: the one SGD loop of every lab, and the trainer of the std-normalization
lab (SGD / Adam on exact surrogates, vmapped over seeds and step sizes).

theory §4 and §7, [N] arXiv 2601.23135.  :func:`ascend` is the loop: ``lax.scan`` over steps t of

    (d_t, aux_t) = direction(k_t, θ_t, t)
    θ_{t+1} = θ_t + η_t(aux_t) · opt(d_t)  (ascent; opt = identity for SGD, optax.scale_by_adam)

with each caller's keys (``split`` or ``fold_in``) and step sizes; the group-size and χ² labs
call it with their own directions.  Here, one training run (:func:`train_one`) is a pure
function of (key, env params, traced knobs) whose direction is a sampled estimator with group
size G or the exact G = ∞ limit, and :func:`train` is ``jit(vmap_lr(vmap_seed(run)))``: every
step size of a log grid and every seed in one compiled call.  Shape-setting settings
(estimator, G, optimizer, steps, ddof) live in the static :class:`Run`; the step size η and eps
are traced, so sweeping them does not recompile.

The trainer talks to an environment only through :class:`gpolab.envs.Env`; each step samples G
responses for every prompt.  Besides the shared truth fields it reads the per-prompt gradients
``g_global`` (P, D) (and :func:`finite_sample_bias` ``one_minus_V``), which the log-linear bandit
provides.  Directions:

=================== ===================================== ====================================
estimator           sampled (G < ∞)                       exact (G = ∞)
=================== ===================================== ====================================
grpo                (Z − Z̄)/(s_x + eps), std per group    (1/N) Σ_x g_x / (σ_x + eps)
grpo[scale=batch]   (Z − Z̄)/(s + eps), one std per batch  (1/N) Σ_x g_x / (σ_pool + eps)
mean                Z − Z̄  (Dr.GRPO)                      (1/N) Σ_x g_x
loo                 RLOO                                  (1/N) Σ_x g_x
vanilla             Z                                     (1/N) Σ_x g_x
=================== ===================================== ====================================

Any registry spec trains at a finite G when it needs nothing the environments lack (``oracle``
gets the exact V(x)); at G = ∞ when its entry records its limit (``Entry.limit``: the rows above,
``oracle`` and ``ustat``).  :func:`why_not` says why a spec does not train.  Stored results name
``grpo[scale=batch]`` ``grpo-batch``, its spelling before specs (:data:`STORED_NAMES`).
σ_x = √sigma2_x, p_x = V_x; σ_pool² = mean_x σ_x² + Var_x(p_x) is the G → ∞ limit of the pooled
batch variance.
"REINFORCE" below means the unnormalized estimators (limit ∇J: mean, loo, vanilla).

Step rules (``Run.step``): ``constant`` (θ += η·opt(d)) or ``curvature``
(θ += η/(s(θ_t) + eps)·opt(d)) with s = ``env.curvature(params, truth)`` (default
max_x σ_x): the oracle step 1/L_t of the curvature law ‖H_x‖ ≤ cB²σ_x at the current iterate,
L_t = cB²·s(θ_t)/N — REINFORCE told the exact current smoothness constant.  With orthogonal
prompts and equal σ_x it *is* exact GRPO (the control of theory §7).
"""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from gpolab import engine, spans, validate
from gpolab import estimators as est
from gpolab.envs import Env

STORED_NAMES = {"grpo[scale=batch]": "grpo-batch"}  # spec → its name in stored keys and tables
OPTIMIZERS = ("sgd", "adam")
STEP_RULES = ("constant", "curvature")
EXACT = 0  # G = 0 stands for the exact-gradient mode (G = ∞)


def stored_name(spec: str) -> str:
    """The name runs of ``spec`` are stored under (:data:`STORED_NAMES`: results stored before
    the spec spelling keep their keys), else ``spec``."""
    return STORED_NAMES.get(est.canonical(spec), spec)


def spec_of(name: str) -> str:
    """The registry spec of a stored estimator name (the inverse of :func:`stored_name`)."""
    return {v: k for k, v in STORED_NAMES.items()}.get(name, name)


def why_not(spec: str, G: int | None = None) -> str:
    """Why :func:`train` cannot run estimator ``spec`` (at ``G``; ``EXACT``: its G = ∞ limit),
    or "" when it can.  Decided by the registry entry: what it needs (the environments give
    V(x), no lengths or greedy responses) and, for G = ∞, whether it records its limit."""
    entry, options = est.bind(spec)
    missing = [n for n in entry.needs if n != "baseline"]
    if missing:
        return f"it needs {', '.join(missing)}, which the training environments do not provide"
    if G == EXACT and not entry.limit_for(options):
        return "its G = inf limit is not known (train it at a finite G)"
    return ""


@dataclasses.dataclass(frozen=True)
class Run:
    """Static settings of one training configuration (each distinct Run compiles once)."""

    estimator: str
    G: int  # EXACT (0) = exact gradient
    optimizer: str = "sgd"
    steps: int = 500
    ddof: int = 1
    step: str = "constant"  # STEP_RULES: η, or η / s(θ_t) (oracle 1/L_t)

    def validate(self) -> None:
        reason = why_not(self.estimator, self.G)  # an unknown name: ConfigError listing names
        if reason:
            raise validate.ConfigError(
                f"estimator: {self.estimator} does not train here: {reason}; allowed: a registry "
                "spec that needs at most V(x) (`gpolab estimators` lists them)"
            )
        validate.choice("step", self.step, STEP_RULES)
        validate.choice("optimizer", self.optimizer, OPTIMIZERS)
        validate.integer("steps", self.steps, 1)
        validate.choice("ddof", self.ddof, (0, 1))
        if self.G != EXACT:
            est.check_estimator(self.estimator, self.G, ddof=self.ddof)
            if est.resolve(self.estimator).user:  # a user's function: traced once, finite
                est.check_callable(self.estimator, self.G)

    def options(self) -> tuple[str, ...]:
        """Which of ``ddof``, ``eps`` this run's numbers depend on: ddof for sampled estimators
        that read it, eps for those that read it (sampled or exact) and for the curvature step
        rule (η / (s(θ_t) + eps)).  The others (and those the spec's brackets fix) are left out
        of cache keys and result columns."""
        entry, fixed = est.bind(self.estimator)
        reads = set(entry.options) - set(fixed)
        ddof = self.G != EXACT and "ddof" in reads
        eps = "eps" in reads or self.step == "curvature"
        return ("ddof",) * ddof + ("eps",) * eps


@struct.dataclass
class Knobs:
    """Traced continuous settings."""

    lr: jax.Array  # step size η
    eps: jax.Array  # added to the std (grpo)


def sigma(truth) -> jax.Array:
    """(P,) σ_x = √Var(Z|x) from the truth's ``sigma2``."""
    return jnp.sqrt(jnp.maximum(truth.sigma2, 0.0))


def pooled_sigma(truth) -> jax.Array:
    """σ_pool = √(mean_x σ_x² + Var_x p_x): the G → ∞ batch std of rewards (uniform prompts)."""
    s = sigma(truth)
    var = jnp.mean(s**2) + jnp.mean(truth.V**2) - jnp.mean(truth.V) ** 2
    return jnp.sqrt(jnp.maximum(var, 0.0))


def exact_direction(estimator: str, truth, eps) -> jax.Array:
    """The G = ∞ direction of the entry's recorded limit: (1/N) Σ_x g_x / (σ_x + eps) (``std``:
    grpo), ∇J / (σ_pool + eps) (``pooled-std``: grpo[scale=batch]), (1/N) Σ_x g_x = ∇J
    (``gradient``).  (gpolab's reconstruction of [N]'s claim)"""
    entry, options = est.bind(estimator)
    limit, eps = entry.limit_for(options), options.get("eps", eps)
    if limit == "std":
        return jnp.mean(truth.g_global / (sigma(truth) + eps)[:, None], axis=0)
    if limit == "pooled-std":
        return truth.g / (pooled_sigma(truth) + eps)
    if limit == "gradient":
        return truth.g
    raise validate.ConfigError(f"estimator: {estimator}: {why_not(estimator, EXACT)}")


def sampled_weights(estimator: str, rewards: jax.Array, ddof: int, eps, baseline=None):
    """Per-sample weights c (P, G), ĝ_x = Σ_g c_g W_g (:func:`estimators.gradient_weights`;
    the spec's bracket options win over ``ddof``/``eps``; ``baseline`` V(x) for ``oracle``)."""
    return est.gradient_weights(
        estimator, rewards, scale="group", ddof=ddof, eps=eps, baseline=baseline
    )


def mean_pairwise_cosine(g: jax.Array) -> jax.Array:
    """(1/(P(P−1))) Σ_{x≠z} cos(g_x, g_z) from the unit vectors n_x: (‖Σ n‖² − Σ‖n‖²)/(P(P−1)).
    Zero gradients count as cosine 0."""
    P = g.shape[0]
    norm = jnp.linalg.norm(g, axis=-1, keepdims=True)
    n = jnp.where(norm > 0, g / jnp.where(norm > 0, norm, 1.0), 0.0)
    total = jnp.sum(n, axis=0)
    return (jnp.sum(total**2) - jnp.sum(n**2)) / (P * (P - 1))


def optimizer(name: str) -> optax.GradientTransformation:
    """The step-size-free part of the update (η multiplies it outside, traced)."""
    return optax.scale_by_adam() if name == "adam" else optax.identity()


def ascend(direction, theta0, keys, steps, *, lr, tx=None, state=None, record=None):
    """Policy-gradient ascent: one ``lax.scan`` over the step indices t of ``steps`` (T,) of

        (d_t, aux_t) = direction(k_t, θ_t, t)
        θ_{t+1} = θ_t + lr(t, aux_t) · tx(d_t)

    θ is a flat (D,) vector.  ``keys`` (typed): one key per step (T,), or a single key and
    k_t = ``fold_in(keys, t)``.  ``lr``: a step size, or ``lr(t, aux_t)``.  ``tx``: the
    step-size-free optax transformation (None: identity, plain SGD), continued from ``state``
    when given.  ``record(aux_t)``: what to keep of each step (stacked along a leading T axis).
    Returns (θ_T, the tx state, the records).

    Its callers: :func:`train_one` (split keys, identity or Adam, η or η/(s(θ_t) + eps)), the
    group-size lab's ``train_run`` (fold_in from t = 0, η0/(1 + t/τ)) and the χ² lab's
    ``per_seed`` (fold_in from i = 1, β/i, one call per checkpoint segment).
    """
    tx = optax.identity() if tx is None else tx
    state = tx.init(theta0) if state is None else state
    fold = keys.ndim == 0

    def step(carry, xs):
        theta, state = carry
        t, key = (xs, jax.random.fold_in(keys, xs)) if fold else xs
        d, aux = direction(key, theta, t)
        updates, state = tx.update(d, state, theta)
        eta = lr(t, aux) if callable(lr) else lr
        return (theta + eta * updates, state), None if record is None else record(aux)

    (theta, state), records = jax.lax.scan(step, (theta0, state), steps if fold else (steps, keys))
    return theta, state, records


def sampled_direction(run: Run, env: Env, key, params, theta, truth, knobs: Knobs):
    """(ĝ, zero-variance fraction) of the sampled estimator ``run.estimator``: G = ``run.G``
    responses for each of the P prompts, ĝ = (1/P) Σ_x Σ_g c_xg W(x, y_xg).  ``truth`` (exact at
    θ, computed anyway) lets the env reuse its policy."""
    P = truth.V.shape[0]
    prompts = jnp.arange(P)
    responses, rewards = env.sample(key, params, theta, prompts, run.G, truth=truth)
    weights = sampled_weights(run.estimator, rewards, run.ddof, knobs.eps, truth.V)
    zero = jnp.mean(est.degenerate(rewards).astype(rewards.dtype))
    return env.gradient(params, theta, prompts, responses, weights, truth=truth) / P, zero


def curvature_sigma(env: Env, params, truth) -> jax.Array:
    """s(θ) of :class:`gpolab.envs.Env` (``env.curvature`` or max_x σ_x)."""
    if env.curvature is None:
        return jnp.max(sigma(truth))
    return env.curvature(params, truth)


def diagnostics(truth) -> dict:
    """Per-step exact diagnostics at θ_t: J, σ̄ = mean_x σ_x, max_x σ_x, mean pairwise cosine of
    the g_x, ‖∇J‖ and ḡ = mean_x ‖g_x‖ (the quantity the convergence bounds control:
    (1/T) Σ_t ḡ_t² ≤ 2c·σ·(J* − J₀)/T with σ = σ̄ for GRPO and σ_max for REINFORCE)."""
    s = sigma(truth)
    return dict(
        J=jnp.mean(truth.V),
        sigma_bar=jnp.mean(s),
        sigma_max=jnp.max(s),
        cos=mean_pairwise_cosine(truth.g_global),
        grad_norm=jnp.linalg.norm(truth.g),
        gbar=jnp.mean(jnp.linalg.norm(truth.g_global, axis=-1)),
    )


def direction(run: Run, env: Env, params, knobs: Knobs, key, theta, t):
    """:func:`ascend`'s direction at θ_t: the exact (``run.G == EXACT``) or sampled direction,
    and aux = the exact truth at θ_t, s(θ_t) and the zero-variance fraction."""
    truth = env.exact(params, theta)
    if run.G == EXACT:
        d, zero = exact_direction(run.estimator, truth, knobs.eps), jnp.zeros(())
    else:
        d, zero = sampled_direction(run, env, key, params, theta, truth, knobs)
    return d, dict(truth=truth, sigma_eff=curvature_sigma(env, params, truth), zero_frac=zero)


def step_size(run: Run, knobs: Knobs, t, aux) -> jax.Array:
    """η (``constant``) or η / (s(θ_t) + eps) (``curvature``: the oracle 1/L_t)."""
    if run.step == "curvature":
        return knobs.lr / (aux["sigma_eff"] + knobs.eps)
    return knobs.lr


def step_record(aux) -> tuple:
    """What :func:`train_one` keeps of a step: the diagnostics at θ_t and the zero fraction."""
    return dict(diagnostics(aux["truth"]), sigma_eff=aux["sigma_eff"]), aux["zero_frac"]


def train_one(run: Run, env: Env, key: jax.Array, params, knobs: Knobs) -> dict:
    """One training run: per-step diagnostics (steps + 1,) (entry t at θ_t; with ``sigma_eff``
    = s(θ_t)) and the per-step zero-variance fraction (steps,).  Step t draws with key t of
    ``split(key, steps)``."""
    keys = jax.random.split(key, run.steps)
    theta, _, (diag, zero) = ascend(
        partial(direction, run, env, params, knobs),
        env.init(params),
        keys,
        jnp.arange(run.steps),
        lr=partial(step_size, run, knobs),
        tx=optimizer(run.optimizer),
        record=step_record,
    )
    truth = env.exact(params, theta)
    last = dict(diagnostics(truth), sigma_eff=curvature_sigma(env, params, truth))
    out = {k: jnp.concatenate([v, last[k][None]]) for k, v in diag.items()}
    out["zero_frac"] = zero
    return out


@partial(jax.jit, static_argnames=("run", "env"))
def _train(run: Run, env: Env, keys: jax.Array, params, lrs: jax.Array, eps: jax.Array):
    per_seed = jax.vmap(train_one, in_axes=(None, None, 0, None, None))
    per_lr = jax.vmap(lambda lr: per_seed(run, env, keys, params, Knobs(lr=lr, eps=eps)), in_axes=0)
    return per_lr(lrs)


def train(run: Run, env: Env, key: jax.Array, params, lrs, seeds: int, eps: float = 1e-4) -> dict:
    """Every step size in ``lrs`` × every seed in one jit: dict of numpy arrays (L, S, steps + 1)
    (``zero_frac``: (L, S, steps)).  Seed i uses ``fold_in(key, i)``; the exact mode is
    deterministic and runs one seed."""
    run.validate()
    validate.integer("seeds", seeds, 1)
    lrs = np.asarray(lrs, np.float32).reshape(-1)
    if lrs.size == 0 or not np.all(np.isfinite(lrs)) or np.any(lrs <= 0):
        raise validate.ConfigError("lr-grid: got an empty or non-positive list; allowed: lr > 0")
    validate.real("eps", eps, low=0.0)
    n = 1 if run.G == EXACT else seeds
    with engine.prng_mode(), spans.span("monte carlo"):
        keys = engine.seed_keys(key, jnp.arange(n, dtype=jnp.uint32))
        out = _train(run, env, keys, params, jnp.asarray(lrs), jnp.asarray(eps, jnp.float32))
        return {k: np.asarray(v) for k, v in out.items()}


@partial(jax.jit, static_argnames=("run", "env"))
def _directions(run: Run, env: Env, keys, params, theta, truth, knobs: Knobs):
    """Sampled directions at one θ for every key (compiled once per (run, env, seed count))."""
    return jax.vmap(lambda k: sampled_direction(run, env, k, params, theta, truth, knobs))(keys)


def finite_sample_bias(
    key: jax.Array,
    env: Env,
    params,
    theta,
    G: int,
    *,
    seeds: int = 4096,
    eps: float = 1e-4,
    ddof: int = 1,
    estimator: str = "grpo",
) -> dict:
    """Monte Carlo E ĝ of a sampled estimator at fixed θ against the exact G = ∞ direction
    d* (:func:`exact_direction`): relative bias ‖E ĝ − d*‖/‖d*‖ (with its Monte Carlo noise
    floor √(tr Cov ĝ / S)/‖d*‖), cosine(E ĝ, d*) and the zero-variance group fraction."""
    run = Run(estimator, G, ddof=ddof)
    run.validate()
    knobs = Knobs(lr=jnp.ones(()), eps=jnp.asarray(eps, jnp.float32))
    truth = env.exact(params, theta)
    with engine.prng_mode():
        keys = engine.seed_keys(key, jnp.arange(seeds, dtype=jnp.uint32))
        d, zero = _directions(run, env, keys, params, theta, truth, knobs)
    d = np.asarray(d, np.float64)
    target = np.asarray(exact_direction(estimator, truth, eps), np.float64)
    mean = d.mean(axis=0)
    noise = np.sqrt(np.sum(d.var(axis=0, ddof=1)) / seeds)
    tn = np.linalg.norm(target)
    return dict(
        rel_bias=float(np.linalg.norm(mean - target) / tn),
        rel_bias_noise=float(noise / tn),
        cosine=float(mean @ target / (np.linalg.norm(mean) * tn)),
        norm_ratio=float(np.linalg.norm(mean) / tn),
        zero_frac=float(np.mean(zero)),
        zero_frac_theory=float(
            np.mean(
                np.asarray(truth.V, np.float64) ** G
                + np.asarray(truth.one_minus_V, np.float64) ** G
            )
        ),
    )
