"""DAPO dynamic sampling on the bandit (verl ``filter_groups``, :mod:`gpolab.theory.dynamic`):
groups drawn until B non-degenerate ones are kept, every estimator on the kept groups, and plain
sampling at about the same responses per step on the same draws.  The protocol is
:mod:`gpolab.kernels`'; :func:`draws_per_kept_group` summarises the draw counts."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from gpolab import estimators
from gpolab.envs import bandit
from gpolab.kernels.grouped import bandit_inputs, cell_weights, cosine, per_estimator


@dataclasses.dataclass(frozen=True)
class DynamicBanditCell:
    """``max_draws`` generation batches of B iid prompts are drawn per seed (static shapes); the
    first B non-degenerate groups in draw order are kept and every estimator is applied to them
    only, mean over the kept groups.  ``plain_B``: the first ``plain_B`` drawn groups, all kept,
    are plain sampling at about the same responses per step (common random numbers)."""

    estimators: tuple  # specs (str) or bound specs (estimators.Bound), rows named as given
    G: int
    B: int
    max_draws: int = 8
    plain_B: int = 1
    scale: str = "group"
    ddof: int = 1


def _batch_estimates(cell, key, args, draws: tuple, pick, keep):
    """(E, D) (1/k) Σ_{kept} ĝ_x per estimator, k = Σ keep (0 when nothing is kept), on the
    groups ``pick`` of ``draws`` = (prompts, actions, rewards)."""
    params, truth, _, eps = args
    prompts, actions, rewards = (x[pick] for x in draws)
    inputs = bandit_inputs(key, params, truth, prompts, actions, rewards.dtype)
    weights = cell_weights(cell, rewards, inputs, eps) * keep[None, :, None]
    ghat = jax.vmap(bandit.weighted_scores, in_axes=(None, None, None, 0))(
        params, prompts, actions, weights
    )
    total = jax.vmap(bandit.to_global, in_axes=(None, None, 0))(params, prompts, ghat)
    k = jnp.sum(keep)
    return total * (prompts.shape[0] / jnp.maximum(k, 1))


def dynamic_bandit_error(cell: DynamicBanditCell, key: jax.Array, args) -> dict:
    """``args = (params, truth, tables, eps)``.  Per estimator: ``{err, sq, cos, dot, norm2}`` of
    the kept-groups estimate and the same of plain sampling with ``plain_B`` groups (``plain/…``);
    per seed: groups drawn (whole batches until B are kept, at most ``max_draws``), groups kept
    and whether the cap was reached with fewer than B kept (verl raises there; we keep what we
    have).  Batch-scoped estimators see the non-kept padding rows only in capped seeds."""
    params, truth, tables, _ = args
    B, n = cell.B, cell.B * cell.max_draws
    k_prompts, k_group = jax.random.split(key)
    prompts = bandit.sample_prompts(k_prompts, params, n)
    actions, rewards = bandit.sample(k_group, params, prompts, cell.G, tables)
    ok = jnp.logical_or(~estimators.degenerate(rewards), cell.G == 1)
    rank = jnp.cumsum(ok)  # kept groups so far, in draw order
    filled = rank[B - 1 :: B] >= B  # after each batch: are B kept?
    batches = jnp.where(jnp.any(filled), jnp.argmax(filled) + 1, cell.max_draws)
    keep = ok & (rank <= B)
    order = jnp.argsort(~keep, stable=True)[:B]  # kept groups first, in draw order
    k = jnp.sum(keep)
    draws, dtype = (prompts, actions, rewards), rewards.dtype
    slot = (jnp.arange(B) < k).astype(dtype)
    dyn = _batch_estimates(cell, key, args, draws, order, slot)
    plain_keep = jnp.ones(cell.plain_B, dtype)
    plain = _batch_estimates(cell, key, args, draws, slice(0, cell.plain_B), plain_keep)
    out = {
        "drawn": (batches * B).astype(dtype),
        "kept": k.astype(dtype),
        "drawn_kept": (batches * B * k).astype(dtype),  # for the ratio's standard error
        "capped": (k < B).astype(dtype),
        "degenerate": 1.0 - jnp.mean(ok.astype(dtype)),
    }
    for tag, total in (("", dyn), ("plain/", plain)):
        err = total - truth.g[None]
        sq, cos = jnp.sum(err**2, axis=-1), cosine(total, truth.g)
        dot, norm2 = total @ truth.g, jnp.sum(total**2, axis=-1)
        out |= per_estimator(cell.estimators, tag, err=err, sq=sq, cos=cos, dot=dot, norm2=norm2)
    return out


def draws_per_kept_group(m) -> tuple[float, float]:
    """(groups drawn / groups kept, its delta-method standard error) from the moments ``m`` of
    ``drawn``, ``kept`` and ``drawn_kept``: a ratio of means (NaN when nothing was kept)."""
    drawn, kept, n = float(m.mean("drawn")), float(m.mean("kept")), m.n
    ratio = drawn / kept if kept > 0 else math.nan
    cov = (float(m.mean("drawn_kept")) - drawn * kept) * n / max(n - 1, 1)
    var = m.var("drawn") - 2 * ratio * cov + ratio**2 * m.var("kept")
    return ratio, math.sqrt(max(var, 0.0) / n) / kept if kept > 0 else math.nan
