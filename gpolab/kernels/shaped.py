"""DAPO dynamic sampling under a shaped reward (verl ``filter_groups.metric``): which groups a
metric keeps, and the GRPO update they give, against the exact gradients of accuracy and of the
shaped objective (:mod:`gpolab.envs.shaped`).

verl-recipe ``dapo/dapo_ray_trainer.py::RayDAPOTrainer.fit`` (@ 21892b92; the same lines at
48ea0a7) groups the values of ``non_tensor_batch[metric]`` by prompt uid and keeps a prompt iff
``np.std(metric_vals) > 0 or len(metric_vals) == 1``; ``acc`` and ``score`` are the reward
function's ``reward_extra_info`` (correctness and the shaped reward), the advantage is then GRPO
on ``token_level_rewards`` = the shaped score in both cases.  So ``metric = acc`` drops the
all-fail and all-pass groups; ``metric = score`` keeps every group whose shaping values differ,
and GRPO's std normalization turns the shaping differences of an all-fail group into a
full-size update (the "phantom gradient" of verl-recipe PR #125).

Protocol of :mod:`gpolab.kernels`: :class:`ShapedCell` (static), :func:`shaped_error` per seed,
and :func:`train_run` (one training run, :func:`gpolab.engine.train.ascend`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from gpolab import estimators, validate
from gpolab.engine.train import ascend
from gpolab.envs import bandit, shaped
from gpolab.kernels.grouped import cosine

METRICS = ("acc", "score")  # verl algorithm.filter_groups.metric (reward_extra_info keys)
VERL_EPS = 1e-6  # verl compute_grpo_outcome_advantage's epsilon


def check_metric(metric: str) -> None:
    """One error line for a metric verl's filter would not find here."""
    validate.choice("metric", metric, METRICS)


@dataclasses.dataclass(frozen=True)
class ShapedCell:
    """``max_draws`` generation batches of B iid prompts, G responses each, are drawn per seed;
    for each metric of ``metrics`` the first B groups whose metric has std > 0 are kept (draw
    order, verl's ``batch[:traj_bsz]``) and GRPO (ddof 1) on the shaped score gives the update.
    The metrics share the draws (common random numbers)."""

    G: int
    B: int
    max_draws: int = 4
    metrics: tuple = METRICS

    def validate(self) -> None:
        validate.integer("G", self.G, 2)
        validate.integer("B", self.B, 1)
        validate.integer("max_draws", self.max_draws, 1)
        validate.nonempty("metrics", self.metrics)
        for m in self.metrics:
            check_metric(m)


def metric_values(metric: str, correct: jax.Array, score: jax.Array) -> jax.Array:
    """The values verl's filter reads: ``acc`` (correct) or ``score`` (the shaped reward)."""
    check_metric(metric)
    return correct if metric == "acc" else score


def keep_groups(values: jax.Array, B: int) -> tuple[jax.Array, jax.Array]:
    """(keep (n,) bool, capped []) of verl's loop on groups ``values`` (n, G) in draw order,
    n = B·max_draws: a group is kept iff its values are not all equal (std > 0; any group when
    G = 1), and only the first B of those (the surplus of the last batch is thrown away).
    ``capped``: fewer than B were kept (verl raises ``ValueError`` there; here the kept ones
    train)."""
    ok = jnp.logical_or(~estimators.degenerate(values), values.shape[-1] == 1)
    rank = jnp.cumsum(ok)
    keep = ok & (rank <= B)
    return keep, jnp.sum(keep) < B


def kept_update(params, theta, prompts, actions, score, keep, eps) -> tuple[jax.Array, jax.Array]:
    """(ĝ (D,), per-group gradients (n, A)): ĝ = (1/(k·G)) Σ_{kept b} Σ_g A_bg W(x_b, a_bg), GRPO
    advantages A (ddof 1, + eps) on the shaped ``score``; k = kept groups (token-mean of one-token
    responses)."""
    G = score.shape[-1]
    adv = estimators.grpo_advantages(score, ddof=1, eps=eps)
    k = jnp.maximum(jnp.sum(keep), 1)
    weights = adv * keep[:, None] / (k * G)
    b = bandit.at(params.bandit, theta)
    per_group = bandit.weighted_scores(b, prompts, actions, weights)  # (n, A) local
    return bandit.to_global(b, prompts, per_group) * prompts.shape[0], per_group


def _draw(cell: ShapedCell, key, params, theta):
    """Prompts (n,), actions, correct and score (n, G) at θ, n = B·max_draws."""
    k_prompts, k_group = jax.random.split(key)
    prompts = bandit.sample_prompts(k_prompts, params.bandit, cell.B * cell.max_draws)
    actions, correct, s = shaped.sample(k_group, params, theta, prompts, cell.G)
    return prompts, actions, correct, shaped.score(correct, s, params.lam)


def shaped_error(cell: ShapedCell, key: jax.Array, args) -> dict:
    """``args = (params, truth, eps)`` (truth: :func:`gpolab.envs.shaped.exact` at θ₀).  Per
    metric ``m``: ``m/cos_acc``, ``m/cos_score`` (cosine of ĝ with ∇J_acc, ∇J_score),
    ``m/sq_acc``, ``m/sq_score`` (‖ĝ − ∇J‖²), ``m/kept`` (groups kept), ``m/allfail`` (kept
    groups with every response wrong), ``m/allfail_share`` and ``m/allpass_share`` (their share
    Σ_{those} ‖ĝ_b‖ / Σ_{kept} ‖ĝ_b‖ of the kept update's per-group norms), ``m/capped``."""
    params, truth, eps = args
    theta = bandit.init_theta(params.bandit)
    prompts, actions, correct, score = _draw(cell, key, params, theta)
    allfail, allpass = jnp.all(correct == 0, -1), jnp.all(correct == 1, -1)
    dtype, out = score.dtype, {}
    for m in cell.metrics:
        keep, capped = keep_groups(metric_values(m, correct, score), cell.B)
        g, per_group = kept_update(params, theta, prompts, actions, score, keep, eps)
        norms = jnp.linalg.norm(per_group, axis=-1)
        total = jnp.sum(norms)

        def share(mask, norms=norms, total=total):
            return jnp.where(total > 0, jnp.sum(norms * mask) / total, 0.0)

        out |= {
            f"{m}/cos_acc": cosine(g[None], truth.g_acc)[0],
            f"{m}/cos_score": cosine(g[None], truth.g_score)[0],
            f"{m}/sq_acc": jnp.sum((g - truth.g_acc) ** 2),
            f"{m}/sq_score": jnp.sum((g - truth.g_score) ** 2),
            f"{m}/kept": jnp.sum(keep).astype(dtype),
            f"{m}/allfail": jnp.sum(keep & allfail).astype(dtype),
            f"{m}/allfail_share": share(allfail),
            f"{m}/allpass_share": share(allpass),
            f"{m}/capped": capped.astype(dtype),
        }
    return out


def train_run(cell: ShapedCell, metric: str, key, params, lr, steps: int, eps) -> dict:
    """One SGD run of ``steps`` steps (:func:`gpolab.engine.train.ascend`: θ += lr·ĝ_t, ĝ_t the
    kept update of ``metric`` at θ_t, fresh draws from ``fold_in(key, t)``): ``J_acc`` and
    ``J_score`` (T + 1,) at θ_0 … θ_T, and ``allfail`` (T,), the share of step t's kept groups
    with every response wrong."""
    check_metric(metric)

    def direction(k, theta, t):
        prompts, actions, correct, score = _draw(cell, k, params, theta)
        keep, _ = keep_groups(metric_values(metric, correct, score), cell.B)
        g, _ = kept_update(params, theta, prompts, actions, score, keep, eps)
        kept = jnp.maximum(jnp.sum(keep), 1)
        allfail = jnp.sum(keep & jnp.all(correct == 0, -1)) / kept
        return g, (allfail, *shaped.objectives(params, theta))

    theta0 = bandit.init_theta(params.bandit)
    last, _, (allfail, j_acc, j_score) = ascend(
        direction, theta0, key, jnp.arange(steps), lr=lr, record=lambda aux: aux
    )
    end_acc, end_score = shaped.objectives(params, last)
    return {
        "J_acc": jnp.append(j_acc, end_acc),
        "J_score": jnp.append(j_score, end_score),
        "allfail": allfail,
    }
