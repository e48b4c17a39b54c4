"""The ``arcsin`` regime of the std-normalization lab: Proposition 13 and Lemma 11 of [U] arXiv
2603.01162 (Appendix A) on the log-linear bandit, with Algorithm 2's advantage
(Z_g − Z̄_−g)/se = G/(G − 1) × gpolab's ``grpo`` (ddof 1, eps 0).

``arcsin_direction`` (one row per G, at θ = 0): the exact mean direction of the estimator,
(1/N) Σ_x κ_G(V_x) g_x (count tables, :mod:`gpolab.theory.arcsin`), against ∇𝒥 = (1/N) Σ_x
g_x/σ_x (Prop. 13's objective E[2 arcsin √V]) and against ∇E V; and Lemma 11's
E‖ĝ − U_std‖²/E‖U_std‖² (U_std = loo's estimate over the population σ_x), exact and measured on
the same draws.  The instance has its own ρ and alignment (``arcsin_rho``, ``arcsin_align``):
with aligned prompt gradients (the lab's default align = 1) ∇𝒥 and ∇E V are parallel and the
direction test could not tell them apart.  Training to argmax 𝒥 (with a KL term) is not here:
the arcsin objective's 1/σ weight made the optimum search unreliable (see docs/normalization.md).
"""

from __future__ import annotations

import math
import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from gpolab import configs, engine
from gpolab.envs import loglinear
from gpolab.kit.store import cell_key, config_hash, resume
from gpolab.kit.tables import table_text
from gpolab.theory import arcsin as theory

TABLES = ("arcsin_direction",)
CHUNK = 250  # Lemma 11 draws per compiled call


def advantages(rewards: jax.Array) -> jax.Array:
    """Algorithm 2's advantage (Z_g − Z̄_−g)/se, se the ddof-1 group std; 0 in an all-equal
    group (numerator 0).  ``rewards`` (..., G)."""
    G = rewards.shape[-1]
    centred = rewards - rewards.mean(-1, keepdims=True)
    se = jnp.sqrt(jnp.sum(centred**2, -1, keepdims=True) / (G - 1))
    loo = centred * (G / (G - 1))  # Z − Z̄_−g
    return jnp.where(se > 0, loo / jnp.where(se > 0, se, 1.0), 0.0)


def sampled_gradient(params, theta, key, G: int):
    """Algorithm 2's ĝ (the mean over prompts) on one draw of G responses for every prompt,
    with U_std, Lemma 11's U-statistic on the same draw (loo's weights over the population σ_x),
    and the exact truth at θ."""
    truth = loglinear.exact(params, theta)
    prompts = jnp.arange(params.num_prompts)
    ys, rewards = loglinear.sample(key, params, theta, prompts, G, truth)
    scale = 1.0 / (params.num_prompts * G)
    loo = (rewards - rewards.mean(-1, keepdims=True)) * (G / (G - 1))
    sigma = jnp.sqrt(truth.sigma2)[:, None]
    paper = loglinear.gradient(params, theta, prompts, ys, advantages(rewards) * scale, truth)
    ustat = loglinear.gradient(params, theta, prompts, ys, loo / sigma * scale, truth)
    return paper, ustat, truth


@partial(jax.jit, static_argnames=("G",))
def _lemma11(params, keys, G: int):
    theta = loglinear.init_theta(params)

    def one(key):
        paper, ustat, _ = sampled_gradient(params, theta, key, G)
        return jnp.sum((paper - ustat) ** 2), jnp.sum(ustat**2)

    return jax.vmap(one)(keys)


def lemma11_draws(params, key, G: int, draws: int) -> tuple[np.ndarray, np.ndarray]:
    """Per draw at θ = 0: ‖ĝ − U_std‖² and ‖U_std‖² (float32 draws, returned as float64)."""
    parts = []
    with engine.prng_mode():
        for lo in range(0, draws, CHUNK):
            idx = jnp.arange(lo, min(lo + CHUNK, draws), dtype=jnp.uint32)
            parts.append(_lemma11(params, engine.seed_keys(key, idx), G))
    return tuple(np.concatenate([np.asarray(p[i], np.float64) for p in parts]) for i in (0, 1))


# ----------------------------------------------------------------------------- units and tables

INSTANCE = ("env", "prompts", "responses", "block", "seed")
SETTINGS = [*INSTANCE, "rho", "align", "G"]
DIRECTION_REPORT = (
    "G cos_arcsin rel_err cos_plain cos_target_plain norm_ratio u_ratio u_ratio_se u_ratio_exact"
).split()
DIRECTION = [*SETTINGS, *DIRECTION_REPORT[1:], "draws", "seconds"]


def instance(cfg) -> loglinear.Instance:
    """The log-linear instance of the regime (``arcsin_rho``, ``arcsin_align``; its seed is
    ``seed``)."""
    return configs.borrowed(
        loglinear.Instance, cfg, rho=cfg.arcsin_rho, align=cfg.arcsin_align, instance_seed=cfg.seed
    )


def direction_settings(cfg, G: int) -> dict:
    return {
        **{k: getattr(cfg, k) for k in INSTANCE},
        "rho": cfg.arcsin_rho,
        "align": cfg.arcsin_align,
        "G": G,
        "draws": cfg.arcsin_draws,
    }


def units(cfg) -> list[int]:
    """G of every unit: a direction row per ``arcsin_G``."""
    return sorted(set(cfg.arcsin_G))


def keys(cfg) -> list[str]:
    """Store keys of :func:`units` (the stdnorm lab's, unit = arcsin-direction)."""
    return [
        cell_key("stdnorm", unit="arcsin-direction", **direction_settings(cfg, G))
        for G in units(cfg)
    ]


class Context:
    """The instance, built once and only when a unit is computed."""

    def __init__(self, cfg, key):
        self.cfg, self.key = cfg, key
        self.params = loglinear.make(instance(cfg))
        self.problem = theory.Problem.of(self.params)


def direction_row(ctx: Context, G: int) -> dict:
    """The exact direction at θ = 0 and Lemma 11's ratio, exact and on ``arcsin_draws`` draws
    (ratio of means; delta-method SE)."""
    start = time.perf_counter()
    pb, cfg = ctx.problem, ctx.cfg
    row = theory.direction_row(pb, np.zeros(pb.dim), G)
    d, u = lemma11_draws(ctx.params, jax.random.fold_in(ctx.key, 3000 + G), G, cfg.arcsin_draws)
    ratio = d.mean() / u.mean()
    cov = np.cov(d, u) / len(d)
    rel = cov[0, 0] / d.mean() ** 2 + cov[1, 1] / u.mean() ** 2
    se = abs(ratio) * math.sqrt(max(rel - 2 * cov[0, 1] / (d.mean() * u.mean()), 0.0))
    exact = theory.lemma11_exact(pb, np.zeros(pb.dim), G)
    row.update(u_ratio=ratio, u_ratio_se=se, u_ratio_exact=exact)
    row.update(direction_settings(cfg, G), seconds=time.perf_counter() - start)
    return row


def label(rows: list[dict]) -> str:
    return f"arcsin direction G={rows[0]['G']}"


def tables(cfg, key, store=None, progress=None) -> dict:
    """``{arcsin_direction}``, every unit resumed from ``store``."""
    found, ctx = units(cfg), []

    def compute(i: int) -> list[dict]:
        ctx[:] = ctx or [Context(cfg, key)]
        return [direction_row(ctx[0], found[i])]

    df = resume(
        store, keys(cfg), compute, config_hash=config_hash(cfg), progress=progress, label=label
    )
    return {"arcsin_direction": df[DIRECTION].sort_values("G").reset_index(drop=True)}


# ----------------------------------------------------------------------------- output


def report(tables: dict) -> str:
    """The direction / Lemma 11 table."""
    return table_text(tables["arcsin_direction"], DIRECTION_REPORT)
