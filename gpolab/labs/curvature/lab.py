"""The curvature lab (``gpolab curvature``): the curvature law ‖g_x‖ ≤ 2Bσ_x,
‖H_x‖_op ≤ 4B²σ_x on random θ of the log-linear bandit.

theory §7: gpolab's derivation of the curvature law claimed in the abstract of [N] arXiv
2601.23135 (its body was not available).  Samples many θ (random directions at log-uniform
scales, so σ_x covers (0, 1/2]), computes the exact σ_x, ‖g_x‖ and ‖H_x‖_op of every prompt
(table ``curvature``, one row per (θ, prompt); one unit of work, resumable through the store)
and fits the constants C in ‖g_x‖ ≈ C·B·σ_x and ‖H_x‖_op ≈ C·B²·σ_x (table ``fits``: the
tightest C, the least-squares slope, whether the bound holds at every point).
"""

from __future__ import annotations

import dataclasses
import time
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from gpolab import configs, engine, envs, validate
from gpolab.configs import borrow, option
from gpolab.envs import loglinear
from gpolab.kit.store import PROVENANCE, cell_key, config_hash, resume
from gpolab.labs.curvature import plots
from gpolab.theory import curvature as theory

NAME = "curvature"
NEEDS = envs.Needs(only=("loglinear",))  # the log-linear env's own Hessian
TABLES = ("fits", "curvature")
QUANTITIES = {
    # column: (the bound's constant, the power of B it scales with, what it is)
    "grad_norm": (2.0, 1, "||g_x|| <= C B sigma_x"),
    "hess_norm": (4.0, 2, "||H_x||_op <= C B^2 sigma_x"),
}


@dataclasses.dataclass(frozen=True)
class Config(configs.Config):
    """Everything a curvature run needs (flags of ``gpolab curvature``)."""

    LAB: ClassVar[str] = NAME
    QUICK: ClassVar[dict] = {"thetas": 60}

    thetas: int = option(400, "random theta draws")
    prompts: int = borrow(loglinear.Instance, "prompts")
    responses: int = borrow(loglinear.Instance, "responses")
    block: int = borrow(loglinear.Instance, "block")
    bound: float = borrow(loglinear.Instance, "bound")
    rho: float = borrow(loglinear.Instance, "rho", default=0.5)
    scale_min: float = option(0.1, "smallest theta scale (scales are log-uniform)")
    scale_max: float = option(30.0, "largest theta scale")
    seed: int = option(0, "PRNG seed (instance: seed; theta draws: seed + 1)")
    out: str = option("results/curvature", "output folder (tables, config.toml, figure)", key=False)

    def validate(self) -> None:
        validate.integer("thetas", self.thetas, 1)
        instance(self).validate()  # prompts, responses, block, bound, rho
        validate.real("scale_min", self.scale_min, low=0.0, open_low=True)
        validate.real("scale_max", self.scale_max, low=self.scale_min)
        validate.integer("seed", self.seed, 0)


def cells(cfg: Config) -> int:
    return 1


def instance(cfg: Config) -> loglinear.Instance:
    """The log-linear instance the θ are drawn on (its seed is ``seed``)."""
    return configs.borrowed(loglinear.Instance, cfg, instance_seed=cfg.seed)


def sample_thetas(key, dim: int, n: int, scale_min: float, scale_max: float):
    """(n, D) θ = s·z: Gaussian directions z ~ N(0, I), scales s log-uniform."""
    k_s, k_z = jax.random.split(key)
    log_s = jax.random.uniform(k_s, (n, 1), minval=jnp.log(scale_min), maxval=jnp.log(scale_max))
    return jnp.exp(log_s) * jax.random.normal(k_z, (n, dim))


def measure(key, params, n: int, scale_min: float, scale_max: float):
    """(σ, ‖g‖, ‖H‖_op), each (n, N), at n random θ."""
    with engine.prng_mode():
        thetas = sample_thetas(key, params.dim, n, scale_min, scale_max)
        out = jax.jit(jax.vmap(lambda th: loglinear.curvature_norms(params, th)))(thetas)
    return out


def points(cfg: Config):
    """The ``curvature`` table: σ_x, ‖g_x‖, ‖H_x‖_op per (θ, prompt) (float64 columns)."""
    import pandas as pd

    params = loglinear.make(instance(cfg))
    key = jax.random.key(cfg.seed + 1)
    sigma, gnorm, hnorm = (
        np.asarray(a, np.float64)
        for a in measure(key, params, cfg.thetas, cfg.scale_min, cfg.scale_max)
    )
    return pd.DataFrame(
        dict(
            theta=np.repeat(np.arange(cfg.thetas), cfg.prompts),
            prompt=np.tile(np.arange(cfg.prompts), cfg.thetas),
            sigma=sigma.ravel(),
            grad_norm=gnorm.ravel(),
            hess_norm=hnorm.ravel(),
        )
    )


def fit_table(cfg: Config, df):
    """One row per quantity: the tightest constant C (max ratio), the least-squares slope, the
    bound's constant and whether the bound holds at every point (1e-6 slack)."""
    import pandas as pd

    bounds = {"grad_norm": theory.gradient_bound, "hess_norm": theory.hessian_bound}
    sigma = df["sigma"].to_numpy()
    common = dict(points=len(df), sigma_min=float(sigma.min()), sigma_max=float(sigma.max()))
    rows = []
    for col, (const, power, law) in QUANTITIES.items():
        fit = theory.fit_constant(df[col], sigma, cfg.bound**power)
        holds = bool(np.all(df[col].to_numpy() <= bounds[col](sigma, cfg.bound) + 1e-6))
        row = dict(quantity=col, law=law, bound_const=const, **fit, holds=holds, **common)
        rows.append(row | configs.key_settings(cfg))
    return pd.DataFrame(rows)


def cell_keys(cfg: Config) -> list[str]:
    """The store key of the one unit: every setting (all of them change the points)."""
    return [cell_key(NAME, **configs.key_settings(cfg))]


def run(cfg: Config, key=None, *, store=None, progress=None) -> dict:
    """``{fits, curvature}``; the points are one unit of work, resumed from ``store``
    (:func:`gpolab.kit.store.resume`) under :func:`cell_keys`.  ``key`` is unused: the instance
    is drawn from ``seed`` and the θ from ``seed + 1``, as before the lab protocol."""
    cfg.validate()
    timed = {}

    def compute(i: int) -> list[dict]:
        start = time.perf_counter()
        df = points(cfg)
        timed["seconds"] = time.perf_counter() - start
        return df.to_dict("records")

    keys = cell_keys(cfg)
    df = resume(store, keys, compute, config_hash=config_hash(cfg), progress=progress, label=label)
    seconds = float(df["wall_s"].iloc[0]) if "wall_s" in df else timed["seconds"]
    df = df.drop(columns=[c for c in PROVENANCE if c in df])
    fits = fit_table(cfg, df)
    fits["seconds"] = seconds
    return {"fits": fits, "curvature": df}


def label(rows: list[dict]) -> str:
    return f"{len(rows)} (theta, prompt) points"


def report(cfg: Config, tables: dict) -> str:
    """The fitted constants against the bounds (the lines ``gpolab curvature`` always printed)."""
    fits = tables["fits"].set_index("quantity").loc[list(QUANTITIES)]
    s = fits.iloc[0]
    head = (
        f"{int(s.points)} (theta, prompt) points, sigma in [{s.sigma_min:.3g}, {s.sigma_max:.3g}]"
    )
    laws = (
        f"{f.law}: tightest C = {f.max_ratio:.4f} (bound {f.bound_const:g}), "
        f"LS slope {f.ls_slope:.4f}; holds: {bool(f.holds)}"
        for f in fits.itertuples()
    )
    return "\n".join([head, *laws])


def figures(tables: dict) -> dict:
    return {"curvature.png": plots.curvature_figure}
