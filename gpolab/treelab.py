"""Tree branching lab (issue 6, DESIGN §6, [T] arXiv 2509.24494): K thoughts × M continuations.

One engine run per (K, M): each seed draws K thought values, two independent sets of M
continuations per thought (two sets give an unbiased estimate of the conditional variance
E[Var(Â_k | p)] = E[½(Â¹_k − Â²_k)²]), and the thought advantages of
:func:`gpolab.estimators.tree_advantages`.  Rows carry the Monte Carlo metrics and the closed
forms of :mod:`gpolab.theory.tree`.

Speed (both exact samplers, measured on 2 CPU cores, 1.28M draws):

* thought values: ``jax.random.beta`` takes 2.2 s; for integer (a, b) we draw
  p = X/(X + Y) with X = Σ_{i<a} E_i, Y = Σ_{i<b} E'_i sums of exponentials (Gamma(a), Gamma(b)),
  a + b uniforms per thought (the compiled shape depends on (a, b), so this path makes them
  static).  Non-integer (a, b) fall back to ``jax.random.beta``.
* continuations: only the success count S_k ~ Binomial(M, p_k) matters (every variant is a
  function of the counts: the leaves are binary), so for M > 16 S_k comes from
  ``jax.random.binomial``; the leaf array handed to ``tree_advantages`` is then
  Z_kj = 1[j < S_k], which has the same V̂_k and leaf std as any arrangement of the successes.

Thought-policy gradient (finite thoughts under softmax π): ĝ = (1/K) Σ_k Â_k (e_{t_k} − π) is
compared with the exact gradient of what the variant estimates as K, M → ∞: ∇J/sd(p) for
thought-std, ∇J/√(J(1 − J)) for leaf-std, ∇J for mean-only (∇J = π ⊙ (values − J), see
:func:`gpolab.envs.tree.exact`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

import jax
import numpy as np

from gpolab import estimators, validate
from gpolab.envs import tree

MODELS = ("beta", "finite")
LEAVES_PER_CHUNK = 1 << 21  # chunk = seeds per compiled chunk, so that chunk·K·M ≲ this
JSON_KEYS = (
    "K",
    "M",
    "variance",
    "mse",
    "mse_group",
    "corr",
    "degenerate_frac",
    "theory_variance",
    "theory_corr",
)
COST_KEYS = ("leaves", "cost", "mse_x_cost")


# ----------------------------------------------------------------------------- configuration


@dataclasses.dataclass(frozen=True)
class TreeLabConfig:
    """Everything ``gpolab tree`` needs; the single source of defaults."""

    a: float = 2.0
    b: float = 3.0
    K: tuple[int, ...] = (4, 16, 64, 512)
    M: tuple[int, ...] = (1, 2, 4, 16, 64)
    budget: int = 0  # > 0: every split K·M = budget with K ≥ 2 (K restricted to ``K`` if given)
    seeds: int = 20_000
    chunk: int = 4096
    seed: int = 0
    variant: str = "thought-std"
    ddof: int = 1
    eps: float = 1e-4
    model: str = "beta"
    thoughts: int = 32
    logit_scale: float = 1.0
    instance_seed: int = 0
    think_len: float = 256.0
    answer_len: float = 256.0
    out: str = "results/tree"

    def validate(self) -> None:
        validate.real("a", self.a, low=0.0, open_low=True)
        validate.real("b", self.b, low=0.0, open_low=True)
        if not self.budget:
            validate.integers("K", self.K, 2)
            validate.integers("M", self.M, 1)
        validate.integer("budget", self.budget, 0)
        validate.integer("seeds", self.seeds, 2)
        validate.integer("chunk", self.chunk, 1)
        validate.integer("seed", self.seed, 0)
        validate.choice("variant", self.variant, estimators.TREE_VARIANTS)
        validate.choice("ddof", self.ddof, (0, 1))
        validate.real("eps", self.eps, low=0.0)
        validate.choice("model", self.model, MODELS)
        validate.integer("thoughts", self.thoughts, 2)
        validate.real("logit_scale", self.logit_scale, low=0.0)
        validate.real("think_len", self.think_len, low=0.0)
        validate.real("answer_len", self.answer_len, low=0.0)
        if self.budget:
            self.cells()  # raises when no split exists

    def cells(self) -> list[tuple[int, int]]:
        """(K, M) of every row: the grid, or the splits of the budget."""
        if not self.budget:
            return [(K, M) for K in self.K for M in self.M]
        given = set(self.K) if self.K != TreeLabConfig.K else None
        splits = [
            (K, self.budget // K)
            for K in range(2, self.budget + 1)
            if self.budget % K == 0 and (given is None or K in given)
        ]
        if not splits:
            raise validate.ConfigError(
                f"budget: got {self.budget!r}; allowed: an integer >= 2 with a split K·M = budget, "
                "K >= 2" + (f" and K in {sorted(given)}" if given else "")
            )
        return splits


def cost(K: int, M: int, think_len: float, answer_len: float) -> float:
    """Token cost of one tree: K·(L_think + M·L_answer) (each thought once, M answers each)."""
    return K * (think_len + M * answer_len)


def setup(cfg: TreeLabConfig):
    """(params, truth, law, grad_target) for the configured thought model."""
    from gpolab.theory import tree as theory

    if cfg.model == "beta":
        params = tree.make_beta(cfg.a, cfg.b)
    else:
        params = tree.make_finite(
            cfg.instance_seed, cfg.thoughts, logit_scale=cfg.logit_scale, a=cfg.a, b=cfg.b
        )
    truth = tree.exact(params)
    law = theory.thought_law(params)
    grad_target = np.zeros(0, np.float32)
    if cfg.model == "finite":
        g = np.asarray(truth.grad, np.float64)
        J = law.mean
        scale = {"thought-std": math.sqrt(law.var), "leaf-std": math.sqrt(J * (1 - J))}
        grad_target = (g / scale.get(cfg.variant, 1.0)).astype(np.float32)
    return params, truth, law, grad_target


def chunk_for(cfg: TreeLabConfig, K: int, M: int) -> int:
    """Seeds per compiled chunk: ``cfg.chunk`` capped so a chunk holds ≲ 2M leaves (a power of 2;
    depends on (K, M) only, so one compilation serves every seed count)."""
    cap = max(1, LEAVES_PER_CHUNK // (K * M))
    return min(cfg.chunk, 1 << (cap.bit_length() - 1))


def measure(cfg: TreeLabConfig, K: int, M: int, setup_=None) -> dict:
    """Run one (K, M) cell and return its row (Monte Carlo metrics, closed forms, cost)."""
    from gpolab import engine
    from gpolab.cells import tree_cell, tree_error
    from gpolab.theory import tree as theory

    params, truth, law, grad_target = setup_ or setup(cfg)
    grad = cfg.model == "finite"
    cell = tree_cell(K, M, cfg.variant, cfg.ddof, model=cfg.model, a=cfg.a, b=cfg.b, grad=grad)
    args = (params, truth, np.float32(cfg.eps), grad_target)
    start = time.perf_counter()
    key, chunk = jax.random.key(cfg.seed), chunk_for(cfg, K, M)
    m = engine.run(tree_error, cell, args, key, cfg.seeds, chunk)
    cov = float(m.mean("at") - m.mean("a") * m.mean("t"))
    va = float(m.mean("aa") - m.mean("a") ** 2)
    vt = float(m.mean("tt") - m.mean("t") ** 2)
    adv = theory.advantage_moments(law, K, M, cfg.variant, cfg.ddof, cfg.eps)
    row = {
        "K": K,
        "M": M,
        "variance": float(m.mean("cond_var")),
        "mse": float(m.mean("sq")),
        "mse_group": float(m.mean("sq_group")),
        "corr": cov / math.sqrt(va * vt) if va > 0 and vt > 0 else math.nan,
        "degenerate_frac": float(m.mean("degenerate")),
        "theory_variance": theory.variance(law, K, M, cfg.variant, cfg.ddof, cfg.eps),
        "theory_corr": adv["corr"],
        "variance_se": m.se("cond_var"),
        "mse_se": m.se("sq"),
        "theory_mse": adv["mse"],
        "theory_exact": adv["exact"],
        "theory_floor": theory.floor(law, M, cfg.variant, cfg.eps),
        "theory_degenerate_frac": theory.degenerate_prob(params, K, M),
        "leaves": K * M,
        "cost": cost(K, M, cfg.think_len, cfg.answer_len),
        "variant": cfg.variant,
        "ddof": cfg.ddof,
        "model": cfg.model,
        "n_seeds": cfg.seeds,
    }
    if cell.grad:
        stats = engine.error_stats(m, err="grad_err", sq="grad_sq")
        row.update(grad_mse=stats.mse, grad_mse_se=stats.mse_se, grad_variance=stats.variance)
    row["mse_x_cost"] = row.get("grad_mse", row["mse"]) * row["cost"]
    row["seconds"] = time.perf_counter() - start
    return row


def run_lab(cfg: TreeLabConfig, on_row: Callable[[dict], None] | None = None):
    """Validate ``cfg``, measure every (K, M) cell, return a DataFrame (one row per cell)."""
    import pandas as pd

    cfg.validate()
    ctx = setup(cfg)
    rows = []
    for K, M in cfg.cells():
        rows.append(measure(cfg, K, M, ctx))
        if on_row is not None:
            on_row(rows[-1])
    return pd.DataFrame(rows)


def json_keys(cfg: TreeLabConfig) -> tuple[str, ...]:
    """Keys of the ``--json`` records: :data:`JSON_KEYS`, + ``grad_mse`` for the finite model,
    + :data:`COST_KEYS` in budget mode."""
    keys = JSON_KEYS + (("grad_mse",) if cfg.model == "finite" else ())
    return keys + (COST_KEYS if cfg.budget else ())


def recommend(df, metric: str | None = None) -> dict:
    """The split with the lowest ``metric`` × cost (default: grad_mse if present, else mse):
    the MSE one gets per unit of token budget when independent trees of that shape are averaged
    (MSE ∝ 1/n for n trees, cost ∝ n)."""
    metric = metric or ("grad_mse" if "grad_mse" in df else "mse")
    score = df[metric] * df["cost"]
    best = df.loc[score.idxmin()]
    lowest = df.loc[df[metric].idxmin()]
    return dict(
        K=int(best["K"]),
        M=int(best["M"]),
        metric=metric,
        value=float(best[metric]),
        cost=float(best["cost"]),
        score=float(score.min()),
        lowest_K=int(lowest["K"]),
        lowest_M=int(lowest["M"]),
        lowest_value=float(lowest[metric]),
    )


# ----------------------------------------------------------------------------- figures


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, plt, path):
    from pathlib import Path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def plot_floor(df, path, title: str = ""):
    """Conditional variance vs K (log x) for each M: Monte Carlo ± 2 SE, the O(1/K) theory
    dashed, and the exact K → ∞ floor as a dashed horizontal line."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4), constrained_layout=True)
    for i, (M, sub) in enumerate(df.sort_values("K").groupby("M")):
        c = f"C{i}"
        K = sub["K"].to_numpy(float)
        ax.errorbar(
            K, sub["variance"], 2 * sub["variance_se"], fmt="o-", color=c, ms=4, label=f"M = {M}"
        )
        ax.plot(K, sub["theory_variance"], "x", color=c, ms=6)
        ax.axhline(sub["theory_floor"].iloc[0], color=c, ls="--", lw=1)
    ax.plot([], [], "k--", lw=1, label="exact K→∞ floor")
    ax.plot([], [], "kx", label="O(1/K) theory")
    Ks = sorted(df["K"].unique())
    ax.set(xscale="log", xlabel="K (thoughts per prompt)", ylabel="E Var(Â_k | thought values)")
    ax.set_xticks(Ks, labels=map(str, Ks))
    ax.minorticks_off()
    ax.set_title(title or "More thoughts only reach a floor")
    ax.legend(fontsize=8, ncol=2)
    ax.grid(alpha=0.3)
    return _save(fig, plt, path)


def plot_variance_vs_M(df, path, title: str = "", floor_fn: Callable | None = None):
    """Conditional variance vs M, log-log, at the largest K: Monte Carlo, the exact floor
    dashed (``floor_fn(M)`` on a fine grid, else interpolated between the rows), and a slope −1
    reference; the fitted slope over M ≥ 16 in the legend."""
    plt = _pyplot()
    K = int(df["K"].max())
    sub = df[df["K"] == K].sort_values("M")
    M = sub["M"].to_numpy(float)
    fig, ax = plt.subplots(figsize=(6.0, 4.4), constrained_layout=True)
    ax.errorbar(
        M,
        sub["variance"],
        2 * sub["variance_se"],
        fmt="o",
        color="C0",
        label=f"Monte Carlo, K = {K}",
    )
    grid = np.geomspace(M.min(), M.max(), 100)
    if floor_fn is not None:
        curve = np.array([floor_fn(float(x)) for x in grid])
    else:
        log_floor = np.log(sub["theory_floor"].to_numpy())
        curve = np.exp(np.interp(np.log(grid), np.log(M), log_floor))
    ax.plot(grid, curve, "k--", lw=1.2, label="exact K→∞ floor")
    big = sub[sub["M"] >= 16]
    if len(big) >= 2:
        slope = np.polyfit(np.log(big["M"]), np.log(big["variance"]), 1)[0]
        ref = big["variance"].iloc[-1] * big["M"].iloc[-1] / grid
        ax.plot(grid, ref, ":", color="C3", label=f"slope −1 (fit over M ≥ 16: {slope:.3f})")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="M (continuations per thought)",
        ylabel="E Var(Â_k | thought values)",
    )
    ax.set_title(title or "Continuations drive the variance to zero at rate 1/M")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    return _save(fig, plt, path)


def plot_heatmap(df, path, value: str = "mse", title: str = ""):
    """``value`` over the (K, M) grid with equal-budget diagonals (:func:`plots.tree_heatmap`)."""
    from gpolab import plots

    return plots.tree_heatmap(df, path, value=value, title=title or None)


def plot_budget(df, path, best: dict, title: str = ""):
    """Fixed leaf budget: the MSE of every split (bars, theory ×), and MSE × cost (line)."""
    plt = _pyplot()
    metric = best["metric"]
    df = df.sort_values("K")
    x = np.arange(len(df))
    fig, ax = plt.subplots(figsize=(6.6, 4.4), constrained_layout=True)
    splits = list(zip(df["K"], df["M"], strict=True))
    colors = ["C3" if (K, M) == (best["K"], best["M"]) else "C0" for K, M in splits]
    se = df[f"{metric}_se"] if f"{metric}_se" in df else None
    ax.bar(
        x,
        df[metric],
        yerr=None if se is None else 2 * se,
        color=colors,
        alpha=0.8,
        label=f"{metric} (Monte Carlo, red: recommended)",
    )
    if metric == "mse":
        ax.plot(x, df["theory_mse"], "kx", label="exact theory")
    ax.set_xticks(x, labels=[f"K={K}\nM={M}" for K, M in splits], fontsize=7)
    ax.set(ylabel=metric, yscale="log", xlabel="split of the leaf budget K·M")
    ax2 = ax.twinx()
    ax2.plot(x, df[metric] * df["cost"], "o--", color="C2", label=f"{metric} × token cost")
    ax2.set(ylabel=f"{metric} × K(L_think + M L_answer)", yscale="log")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=8)
    ax.set_title(title or f"Fixed budget K·M = {int(df['leaves'].iloc[0])}")
    return _save(fig, plt, path)
