"""The shaped-reward lab (``gpolab shaped``): DAPO dynamic sampling's filter metric under a
shaped reward, on the shaped bandit (:mod:`gpolab.envs.shaped`, :mod:`gpolab.kernels.shaped`).

verl-recipe PR #125: with ``algorithm.filter_groups.metric = score`` (not ``acc``) and a reward
correct + λ·shaping, an all-fail group has score std > 0, survives the filter, and GRPO turns its
shaping differences into a full-size "phantom gradient".  For each λ of the grid and each metric,
on common draws: table ``gradient`` (one row per (λ, metric)): the kept update's cosine with
∇J_acc and ∇J_score, its squared error against each, the groups kept and the share of the kept
update from all-fail groups, each with its standard error over seeds; table ``training`` (one
row per (λ, metric, step)): J_acc and J_score of SGD on that update, mean and standard error
over training seeds.  λ = 0 is the negative control (both metrics keep the same groups).
"""

from __future__ import annotations

import dataclasses
import time
from typing import ClassVar

import numpy as np

from gpolab import configs, engine, envs, validate
from gpolab.configs import borrow, option
from gpolab.envs import shaped
from gpolab.kernels import shaped as kernel
from gpolab.kit.store import cell_key, resumed

NAME = "shaped"
NEEDS = envs.Needs(only=("shaped",))  # the shaped bandit's own functions
TABLES = ("gradient", "training")
GRADIENT_STATS = ("cos_acc", "cos_score", "sq_acc", "sq_score", "kept", "allfail")
GRADIENT_STATS += ("allfail_share", "allpass_share", "capped")


@dataclasses.dataclass(frozen=True)
class Config(configs.Config):
    """Everything a shaped-reward run needs (flags of ``gpolab shaped``)."""

    LAB: ClassVar[str] = NAME
    QUICK: ClassVar[dict] = {"seeds": 2000, "train_seeds": 32, "steps": 40}

    shaping_weight: tuple[float, ...] = option(
        (0.0, 0.1, 0.3), "comma list of lambda in score = correct + lambda * s, each in [0, 1]"
    )
    metrics: tuple[str, ...] = option(
        kernel.METRICS, "comma list of verl filter_groups.metric values: acc, score"
    )
    G: int = option(8, "responses per group")
    B: int = option(8, "groups kept per step (verl train_batch_size)")
    max_draws: int = option(4, "cap on generation batches per step (verl max_num_gen_batches)")
    prompts: int = borrow(shaped.Instance, "prompts")
    actions: int = borrow(shaped.Instance, "actions")
    logit_scale: float = borrow(shaped.Instance, "logit_scale")
    success_a: float = borrow(shaped.Instance, "success_a", default=0.3)
    success_b: float = borrow(shaped.Instance, "success_b", default=2.0)
    shaping: str = borrow(shaped.Instance, "shaping")
    instance_seed: int = borrow(shaped.Instance, "instance_seed")
    seeds: int = option(20_000, "Monte Carlo seeds of the gradient table")
    train_seeds: int = option(256, "training runs per (lambda, metric)")
    steps: int = option(200, "SGD steps per training run")
    lr: float = option(2.0, "SGD step size")
    every: int = option(10, "training table: one row every this many steps (and the last)")
    eps: float = option(kernel.VERL_EPS, "added to the group std (verl 1e-6)")
    seed: int = option(0, "master PRNG seed")
    out: str = option("results/shaped", "output folder (tables, config.toml, figure)", key=False)

    def validate(self) -> None:
        validate.nonempty("shaping_weight", self.shaping_weight)
        for lam in self.shaping_weight:
            validate.real("shaping_weight", lam, 0.0, 1.0)
        validate.nonempty("metrics", self.metrics)
        for m in self.metrics:
            kernel.check_metric(m)
        instance(self, self.shaping_weight[0]).validate()
        kernel.ShapedCell(self.G, self.B, self.max_draws, tuple(self.metrics)).validate()
        validate.integer("seeds", self.seeds, 2)
        validate.integer("train_seeds", self.train_seeds, 2)
        validate.integer("steps", self.steps, 1)
        validate.real("lr", self.lr, 0.0, open_low=True)
        validate.integer("every", self.every, 1)
        validate.real("eps", self.eps, 0.0)
        validate.integer("seed", self.seed, 0)


def instance(cfg: Config, lam: float) -> shaped.Instance:
    """The shaped bandit of ``cfg`` at shaping weight ``lam``."""
    return configs.borrowed(shaped.Instance, cfg, shaping_weight=float(lam))


def cells(cfg: Config) -> int:
    return len(cfg.shaping_weight)


def cell_keys(cfg: Config) -> list[str]:
    """One store key per λ: every other setting changes its rows."""
    common = configs.key_settings(cfg, exclude=("shaping_weight",))
    return [cell_key(NAME, lam=float(lam), **common) for lam in cfg.shaping_weight]


def _cell(cfg: Config) -> kernel.ShapedCell:
    return kernel.ShapedCell(cfg.G, cfg.B, cfg.max_draws, tuple(cfg.metrics))


def gradient_rows(cfg: Config, lam: float, key) -> list[dict]:
    """One row per metric: mean and standard error over ``cfg.seeds`` of every per-seed
    statistic of :func:`gpolab.kernels.shaped.shaped_error` at θ₀, with the exact J's."""
    params = shaped.make(instance(cfg, lam))
    theta0 = params.bandit.theta.reshape(-1)
    truth = shaped.exact(params, theta0)
    eps = np.asarray(cfg.eps, np.float32)
    m = engine.run(kernel.shaped_error, _cell(cfg), (params, truth, eps), key, cfg.seeds)
    rows = []
    for metric in cfg.metrics:
        row = dict(table="gradient", shaping_weight=float(lam), metric=metric, n_seeds=cfg.seeds)
        for s in GRADIENT_STATS:
            row[s] = float(m.mean(f"{metric}/{s}"))
            row[f"{s}_se"] = m.se(f"{metric}/{s}")
        row["mse_acc"], row["mse_acc_se"] = row.pop("sq_acc"), row.pop("sq_acc_se")
        row["mse_score"], row["mse_score_se"] = row.pop("sq_score"), row.pop("sq_score_se")
        row["cos_exact_acc_score"] = _cos(truth.g_acc, truth.g_score)
        row["J_acc0"], row["J_score0"] = float(truth.J_acc), float(truth.J_score)
        rows.append(row)
    return rows


def _cos(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def training_rows(cfg: Config, lam: float, key) -> list[dict]:
    """Rows (metric, step) every ``cfg.every`` steps and the last: J_acc and J_score of
    ``cfg.train_seeds`` SGD runs (mean, standard error) and the all-fail share of the kept
    groups over the steps before (mean over runs and steps)."""
    import jax
    import jax.numpy as jnp

    params = shaped.make(instance(cfg, lam))
    cell, rows = _cell(cfg), []
    keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(cfg.train_seeds))
    shown = sorted({*range(0, cfg.steps + 1, cfg.every), cfg.steps})
    for metric in cfg.metrics:
        with engine.prng_mode():
            run = jax.jit(
                jax.vmap(
                    lambda k, m=metric: kernel.train_run(
                        cell, m, k, params, cfg.lr, cfg.steps, cfg.eps
                    )
                )
            )
            out = {k: np.asarray(v, np.float64) for k, v in run(keys).items()}
        n = cfg.train_seeds
        for t in shown:
            row = dict(table="training", shaping_weight=float(lam), metric=metric, step=t)
            for name in ("J_acc", "J_score"):
                col = out[name][:, t]
                row[name], row[f"{name}_se"] = col.mean(), col.std(ddof=1) / np.sqrt(n)
            share = out["allfail"][:, :t].mean(axis=1) if t else np.zeros(n)
            row["allfail"], row["allfail_se"] = share.mean(), share.std(ddof=1) / np.sqrt(n)
            row["n_seeds"] = n
            rows.append(row)
    return rows


def run(cfg: Config, key=None, *, store=None, progress=None) -> dict:
    """``{gradient, training}``: one unit per λ (both tables' rows), resumed from ``store``.
    Every λ draws from its own key (``fold_in(key, i)`` of its index in the grid; the gradient
    and training draws are two further folds): the metrics share them."""
    import jax

    cfg.validate()
    root = jax.random.key(cfg.seed) if key is None else key

    def compute(i: int) -> list[dict]:
        start = time.perf_counter()
        lam, k = cfg.shaping_weight[i], jax.random.fold_in(root, i)
        rows = gradient_rows(cfg, lam, jax.random.fold_in(k, 0))
        rows += training_rows(cfg, lam, jax.random.fold_in(k, 1))
        settings = configs.key_settings(cfg, exclude=("shaping_weight", "metrics"))
        for row in rows:
            row |= settings | {"seconds": time.perf_counter() - start}
        return rows

    df = resumed(cfg, store, cell_keys(cfg), compute, progress=progress, label=label)
    tables = {}
    for name in TABLES:
        part = df[df["table"] == name].drop(columns=["table"]).dropna(axis=1, how="all")
        tables[name] = part.reset_index(drop=True)
    return tables


def label(rows: list[dict]) -> str:
    return f"lambda = {rows[0]['shaping_weight']:g}"


def report(cfg: Config, tables: dict) -> str:
    """The gradient table and the final accuracy of training, per (λ, metric)."""
    g = tables["gradient"]
    t = tables["training"]
    last = t[t["step"] == t["step"].max()].set_index(["shaping_weight", "metric"])
    lines = [
        "lambda metric | cos(g, grad J_acc) | cos(g, grad J_score) | all-fail share of update "
        f"| J_acc after {int(t['step'].max())} steps"
    ]
    for r in g.itertuples():
        end = last.loc[(r.shaping_weight, r.metric)]
        lines.append(
            f"{r.shaping_weight:g} {r.metric} | {r.cos_acc:.3f} ± {r.cos_acc_se:.3f} | "
            f"{r.cos_score:.3f} ± {r.cos_score_se:.3f} | {r.allfail_share:.3f} ± "
            f"{r.allfail_share_se:.3f} | {end.J_acc:.3f} ± {end.J_acc_se:.3f}"
        )
    return "\n".join(lines)


def figures(tables: dict) -> dict:
    from gpolab.labs.shaped import plots

    return {"shaped_training.png": plots.training_figure}
