"""Token-level rules on the arithmetic surrogate: verl's optimal token baseline (OTB), TRL's
``top_entropy_quantile`` mask and the response-level estimators on the same draws, against the
exact per-question gradient.

One seed draws Q questions and one group of G responses each (as
:func:`gpolab.kernels.grouped.arithmetic_error`); every estimator's per-token weights c_gt give
ĝ_x = Σ_g Σ_t c_gt ∇ log π(y_gt | x, y_g,<t) (one vjp per estimator).  A response-level
estimator's weights are its A_g/G on every counted token (``seq-mean-token-sum``, the estimators'
scale); a token rule's (:data:`TOKEN`) are its A_gt/G.  TRL's entropy quantile is taken over
the seed's Q·G responses, one micro-batch.  verl's default ``token-mean`` divides the batch's sum
by its token count, one positive number per batch: the cosine is unchanged by it and the
best-scale MSE (``scaled_mse``, the MSE after the one rescaling that fits best) nearly so, which
is why the
comparison of a token-mean trainer's estimators is made on those two, not on the raw MSE.

Outputs per estimator (sums over seeds, :func:`gpolab.engine.run`): ``sq`` the per-question
mean ‖ĝ_x − g_x‖², ``dot`` ĝ_x·g_x, ``norm2`` ‖ĝ_x‖² (the moments of
:func:`gpolab.kernels.grouped.best_scale`) and ``cos`` the batch cosine.

:func:`train_run` trains with one estimator: Adam ascent (verl's actor optimizer is AdamW; Adam
removes the advantages' overall scale, so runs compare directions, not step sizes) on fresh draws
of Q questions × G responses per step, recording the exact J(θ_t) = mean_x V(x).
"""

from __future__ import annotations

import dataclasses
import inspect

import jax
import jax.numpy as jnp

from gpolab import estimators, validate
from gpolab.engine.train import ascend, optimizer
from gpolab.envs import arithmetic
from gpolab.estimators.frameworks.trl import trl_high_entropy_mask
from gpolab.estimators.frameworks.verl import verl_optimal_token_baseline
from gpolab.estimators.registry import _coerce_option
from gpolab.kernels.grouped import arithmetic_draws, cell_weights, per_estimator, question_moments


def verl_otb(rewards, live, energy, entropy, *, handle_zero_tail=True, epsilon=1e-8):
    """verl ``optimal_token_baseline`` (:func:`gpolab.estimators.frameworks.verl.
    verl_optimal_token_baseline`) on the kernel's per-token inputs."""
    return verl_optimal_token_baseline(
        rewards, live, energy, handle_zero_tail=handle_zero_tail, epsilon=epsilon
    )


def trl_top_entropy(rewards, live, energy, entropy, *, top_entropy_quantile=1.0):
    """TRL's GRPO (``trl/grpo``, its default ``scale_rewards="group"``) with its
    ``top_entropy_quantile`` mask over the seed's tokens (:func:`gpolab.estimators.frameworks.
    trl.trl_high_entropy_mask`; ρ = 1, TRL's default, keeps every token)."""
    keep = trl_high_entropy_mask(entropy, live, top_entropy_quantile)
    return estimators.advantages("trl/grpo", rewards)[..., None] * keep


TOKEN = {"verl/otb": verl_otb, "trl/top_entropy": trl_top_entropy}  # token rules: name → rule


def parse(spec: str) -> tuple[str, dict]:
    """(name, options) of a spec: a token-level rule of :data:`TOKEN` with its own keyword options
    (``verl/otb[handle_zero_tail=false]``, coerced to the defaults' types), else a registry spec
    (:func:`gpolab.estimators.parse_spec`); an unknown option is one error naming the allowed."""
    name, items = validate.bracketed("estimator", spec, "NAME or NAME[option=value,...]")
    if name not in TOKEN:
        return estimators.parse_spec(spec)
    defaults = {
        k: p.default
        for k, p in inspect.signature(TOKEN[name]).parameters.items()
        if p.kind is p.KEYWORD_ONLY
    }
    options = {}
    for key, sep, raw in items:
        if not sep or key not in defaults:
            allowed = ", ".join(f"{k}={v!r}" for k, v in defaults.items())
            raise validate.ConfigError(
                f"estimator {name}: option {key}{sep}{raw!r} not understood; allowed: {allowed}"
            )
        options[key] = _coerce_option(name, key, raw, defaults[key])
    return name, options


def check(spec: str) -> None:
    """One clear error for a bad spec or option, before any computation: a token rule is run
    once on a tiny input, a registry spec checked as the registry does."""
    name, options = parse(spec)
    if name not in TOKEN:
        estimators.check_estimator(spec, 2)
        return
    ones = jnp.ones((1, 2, 3))
    TOKEN[name](jnp.asarray([[0.0, 1.0]]), ones, ones, ones, **options)


@dataclasses.dataclass(frozen=True)
class TokenCell:
    """``estimators``: response-level registry specs and token-level specs (:data:`TOKEN`), all
    on the same draws; ``Q`` questions per seed, one group of ``G`` each."""

    estimators: tuple
    G: int
    Q: int = 8
    scale: str = "group"  # what gpolab's own grpo-family entries normalise over
    ddof: int = 1


def _weights(cell: TokenCell, params, feats, tokens, rewards, eps) -> jax.Array:
    """(E, Q, G, T) per-token weights of every estimator of ``cell``."""
    energy, entropy, live = jax.vmap(arithmetic.token_stats, in_axes=(None, 0, 0))(
        params, feats, tokens
    )
    response = [s for s in cell.estimators if parse(s)[0] not in TOKEN]
    if response:
        inputs = {"lengths": lambda: jnp.sum(live, -1)}
        sub = dataclasses.replace(cell, estimators=tuple(response))
        by_response = iter(cell_weights(sub, rewards, inputs, eps))
    rows = []
    for spec in cell.estimators:
        name, options = parse(spec)
        if name in TOKEN:
            rows.append(TOKEN[name](rewards, live, energy, entropy, **options) / cell.G)
        else:
            rows.append(next(by_response)[..., None] * live)
    return jnp.stack(rows)


def token_error(cell: TokenCell, key: jax.Array, args) -> dict:
    """``args = (params, truth, questions, eps)`` (``eps``: gpolab's grpo epsilon, traced):
    per-question gradient errors of every estimator of ``cell`` on common draws (see the module
    docstring)."""
    params, truth, questions, eps = args
    idx, feats, _, tokens, rewards = arithmetic_draws(cell, key, params, questions)
    weights = _weights(cell, params, feats, tokens, rewards, eps)  # (E, Q, G, T)
    moments = question_moments(
        arithmetic.token_gradient_estimates, params, feats, tokens, weights, truth.g_local[idx]
    )
    return per_estimator(cell.estimators, **moments)


def train_run(cell: TokenCell, key: jax.Array, instance, lr, steps: int, eps) -> jax.Array:
    """One training run with the first estimator of ``cell``: ``steps`` Adam steps
    (:func:`gpolab.engine.train.ascend`, ``scale_by_adam`` times ``lr``, traced) from the
    instance's θ₀, step t drawing ``cell.Q`` questions and a group of ``cell.G`` each from
    ``fold_in(key, t)``; the direction is the per-question mean of ĝ_x (the estimator's per-token
    weights, as :func:`token_error`).  Returns J(θ_0) … J(θ_T), (steps + 1,), exact."""
    validate.integer("steps", steps, 1)

    def direction(k, theta, t):
        params = arithmetic.at(instance, theta)
        _, feats, _, tokens, rewards = arithmetic_draws(cell, k, params, instance.questions)
        weights = _weights(cell, params, feats, tokens, rewards, eps)[0]  # (Q, G, T)
        per_question = jax.vmap(
            lambda f, tok, w: arithmetic.token_gradient_estimates(params, f, tok, w[None])[0]
        )(feats, tokens, weights)
        return jnp.mean(per_question, 0), arithmetic.value(instance, theta)

    theta0 = arithmetic.init_theta(instance)
    last, _, J = ascend(
        direction, theta0, key, jnp.arange(steps), lr=lr, tx=optimizer("adam"), record=lambda j: j
    )
    return jnp.append(J, arithmetic.value(instance, last))
