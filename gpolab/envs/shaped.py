"""Shaped rewards on the tabular bandit: score = correct + λ·s(x, a), exact truth of both J.

Each (prompt, action) of the tabular softmax bandit (:mod:`gpolab.envs.bandit`) carries a success
probability p(x, a) (correct ~ Bernoulli(p)) and a shaping value s(x, a) ∈ [0, 1] (a format or
length bonus, a property of the response, so deterministic given the action).  The reward a
trainer sees is the shaped score

    r = correct + λ·s(x, a),     λ = ``shaping_weight`` ∈ [0, 1]

and the two objectives are J_acc(θ) = Σ_x f_x Σ_a π_θ(a|x) p(x, a) (accuracy) and
J_score(θ) = J_acc(θ) + λ·J_s(θ), J_s = Σ_x f_x Σ_a π_θ(a|x) s(x, a).  Their exact gradients, by
enumeration over actions (tabular: W(x, a) = e_a − π_x), are

    ∇J_acc = Σ_x f_x Σ_a π(a|x) (p(x, a) − V_x) W(x, a),    ∇J_score = ∇J_acc + λ·∇J_s.

Shaping models (``shaping``): ``none`` (s = 0), ``independent`` (s iid uniform on [0, 1],
independent of p), ``wrong`` (s = u·(1 − p), u iid uniform: the bonus is earned mostly by
likely-wrong responses, e.g. a short or well-formatted wrong answer; anti-correlated with
correctness, so ∇J_s points away from accuracy; not a function of p alone, so ∇J_s is not
−∇J_acc).  Under ``wrong`` an all-fail group of distinct actions has distinct scores:
the verl-recipe PR #125 setting (``filter_groups.metric = score`` keeps it).

λ is a traced leaf of :class:`ShapedParams` (sweeping it does not recompile); the sizes are
static.  No :class:`gpolab.envs.Env`: the shaped lab calls this module's functions.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from gpolab import configs, validate
from gpolab.configs import option
from gpolab.envs import bandit

NAME = "shaped"
SHAPING_MODELS = ("none", "independent", "wrong")
SHAPING_TAG = 0x5A4  # fold_in tag of the shaping draw (the bandit's own draws unchanged)


@struct.dataclass
class ShapedParams:
    bandit: bandit.BanditParams  # tabular bandit: θ (P, A), success p (P, A), f (P,)
    shaping: jax.Array  # (P, A) s(x, a) ∈ [0, 1]
    lam: jax.Array  # [] λ, the shaping weight (traced)


@struct.dataclass
class ShapedTruth:
    """Exact quantities at θ: per-prompt values (P,) and flat gradients (D,) = (P·A,)."""

    prompt_probs: jax.Array  # f
    V_acc: jax.Array  # Σ_a π p
    V_shaping: jax.Array  # Σ_a π s
    J_acc: jax.Array  # [] Σ_x f_x V_acc
    J_shaping: jax.Array  # [] Σ_x f_x V_shaping
    J_score: jax.Array  # [] J_acc + λ J_shaping
    g_acc: jax.Array  # (D,) ∇J_acc
    g_shaping: jax.Array  # (D,) ∇J_s
    g_score: jax.Array  # (D,) ∇J_score = g_acc + λ g_shaping


@dataclasses.dataclass(frozen=True)
class Instance(configs.Config):
    """The shaped bandit's settings: a tabular bandit (:class:`gpolab.envs.bandit.Instance`'s
    fields of the same names) and its shaping model and weight λ."""

    prompts: int = option(16, "number of prompts P")
    actions: int = option(16, "actions (responses) per prompt A")
    logit_scale: float = option(1.0, "std of the initial logits")
    success_a: float = option(0.5, "success probabilities ~ Beta(success_a, success_b)")
    success_b: float = option(1.0, "success probabilities ~ Beta(success_a, success_b)")
    instance_seed: int = option(0, "seed of the random bandit and shaping table")
    shaping: str = option(
        "wrong",
        "shaping value s(x, a) in [0, 1]: none, independent (iid uniform), wrong (u * (1 - p))",
    )
    shaping_weight: float = option(0.3, "lambda in score = correct + lambda * s, in [0, 1]")

    def validate(self) -> None:
        bandit.Instance(**self._bandit_settings()).validate()
        validate.choice("shaping", self.shaping, SHAPING_MODELS)
        validate.real("shaping_weight", self.shaping_weight, 0.0, 1.0)

    def _bandit_settings(self) -> dict:
        names = ("prompts", "actions", "logit_scale", "success_a", "success_b", "instance_seed")
        return {n: getattr(self, n) for n in names}


def make(inst: Instance | None = None, **settings) -> ShapedParams:
    """The shaped bandit of ``inst`` (validated first: one error line before any draw); the
    bandit is :func:`gpolab.envs.bandit.make` of the same settings (the same instance), the
    shaping table a draw of its own fold of the seed."""
    if inst is not None and settings:
        raise TypeError("make: pass an Instance or settings, not both")
    inst = Instance(**settings) if inst is None else inst
    inst.validate()
    params = bandit.make(bandit.Instance(kind="tabular", **inst._bandit_settings()))
    key = jax.random.fold_in(jax.random.key(inst.instance_seed), SHAPING_TAG)
    table = shaping_table(key, params.success, inst.shaping)
    lam = jnp.asarray(inst.shaping_weight, params.success.dtype)
    return ShapedParams(params, table, lam)


def shaping_table(key: jax.Array, success: jax.Array, model: str) -> jax.Array:
    """(P, A) s(x, a): 0 (``none``), u (``independent``) or u·(1 − p) (``wrong``), u iid
    U[0, 1] drawn with ``key``."""
    validate.choice("shaping", model, SHAPING_MODELS)
    u = jax.random.uniform(key, success.shape, success.dtype)
    if model == "none":
        return jnp.zeros_like(success)
    if model == "independent":
        return u
    return u * (1.0 - success)


def with_weight(params: ShapedParams, lam) -> ShapedParams:
    """``params`` with λ replaced (a traced scalar; checked to lie in [0, 1] when concrete)."""
    if not isinstance(lam, jax.core.Tracer):
        validate.real("shaping_weight", float(lam), 0.0, 1.0)
    return params.replace(lam=jnp.asarray(lam, params.shaping.dtype))


def objectives(params: ShapedParams, theta: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(J_acc, J_score) at flat θ (D,): the closed forms, differentiable (autodiff's check)."""
    pi = bandit.policy(bandit.at(params.bandit, theta))
    f = params.bandit.prompt_probs
    j_acc = f @ jnp.sum(pi * params.bandit.success, axis=-1)
    j_s = f @ jnp.sum(pi * params.shaping, axis=-1)
    return j_acc, j_acc + params.lam * j_s


def exact(params: ShapedParams, theta: jax.Array) -> ShapedTruth:
    """Every field of :class:`ShapedTruth` at flat θ, by enumeration over actions."""
    b = bandit.at(params.bandit, theta)
    pi, W, f = bandit.policy(b), bandit.score_table(b), b.prompt_probs

    def grad(values):  # Σ_a π (v − V) W per prompt, then f_x on row x (tabular, flat)
        V = jnp.sum(pi * values, axis=-1)
        local = jnp.einsum("pa,pad->pd", pi * (values - V[:, None]), W)
        return V, (f[:, None] * local).reshape(-1)

    V_acc, g_acc = grad(b.success)
    V_s, g_s = grad(params.shaping)
    J_acc, J_s = f @ V_acc, f @ V_s
    return ShapedTruth(
        prompt_probs=f,
        V_acc=V_acc,
        V_shaping=V_s,
        J_acc=J_acc,
        J_shaping=J_s,
        J_score=J_acc + params.lam * J_s,
        g_acc=g_acc,
        g_shaping=g_s,
        g_score=g_acc + params.lam * g_s,
    )


def sample(key: jax.Array, params: ShapedParams, theta, prompts: jax.Array, G: int):
    """G responses per prompt of ``prompts`` (n,) at flat θ: (actions (n, G) int32, correct
    (n, G) in {0, 1}, shaping s(x, a) (n, G)); the bandit's draws (:func:`bandit.sample_at`)."""
    actions, correct = bandit.sample_at(key, params.bandit, theta, prompts, G)
    return actions, correct, params.shaping[prompts[:, None], actions]


def score(correct: jax.Array, shaping: jax.Array, lam) -> jax.Array:
    """The shaped reward correct + λ·s."""
    return correct + lam * shaping
