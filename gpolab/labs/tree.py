"""The tree-branching lab (issue 6, DESIGN §6, [T] arXiv 2509.24494): K thoughts × M continuations.

One engine run of :func:`gpolab.cells.tree_error` per (K, M) cell (the sweep's ``env = tree``
runs the same function on the same cells): each seed draws K thought values and two independent
sets of M continuations per thought (two sets give an unbiased estimate of the conditional
variance E[Var(Â_k | p)] = E[½(Â¹_k − Â²_k)²]) and the thought advantages of
:func:`gpolab.estimators.tree_advantages`.  Rows carry the Monte Carlo metrics, the closed forms of
:mod:`gpolab.theory.tree` and every setting that produced them; the ``floor`` table holds the
exact K → ∞ floor on a fine M grid (the curve of the variance-vs-M figure).

Grid mode (``budget = 0``) measures K × M; budget mode every split K·M = budget with K ≥ 2 (only
the K of ``K`` when it is not the default grid), the token cost K·(L_think + M·L_answer) and a
recommended split (:func:`recommend`, printed by :func:`notes`).

Thought-policy gradient (finite thoughts under softmax π): ĝ = (1/K) Σ_k Â_k (e_{t_k} − π) is
compared with the exact gradient of what the variant estimates as K, M → ∞: ∇J/sd(p) for
thought-std, ∇J/√(J(1 − J)) for leaf-std, ∇J for mean-only (∇J = π ⊙ (values − J), see
:func:`gpolab.envs.tree.exact`).

A cell's cache key is its (K, M) and :func:`settings`: the cost model (``think_len``,
``answer_len``) and ``budget`` only enter columns added after the cells are read back, and
mean-only reads no ``eps``, so changing them reuses every finished cell.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import ClassVar

import numpy as np

from gpolab import configs, estimators, validate
from gpolab.configs import option

NAME = "tree"
TABLES = ("results", "floor")
MODELS = ("beta", "finite")
LEAVES_PER_CHUNK = 1 << 21  # chunk = seeds per compiled chunk, so that chunk·K·M ≲ this
DEFAULT_K = (4, 16, 64, 512)
FINITE = {"model": ("finite",)}
GRID = {"mode": ("grid",)}  # Config.mode: "budget" when budget > 0, else "grid"
BUDGET = {"mode": ("budget",)}
NOT_IN_KEY = ("K", "M", "budget", "think_len", "answer_len")  # the cell / columns added on read
JSON_KEYS = ("K", "M", "variance", "mse", "mse_group", "corr", "degenerate_frac",
             "theory_variance", "theory_corr")  # fmt: skip
COST_KEYS = ("leaves", "cost", "mse_x_cost")
JSON = (*JSON_KEYS, "grad_mse", *COST_KEYS)  # those in the table: grad_mse (finite), cost (budget)


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything ``gpolab tree`` needs; the single source of defaults."""

    LAB: ClassVar[str] = NAME
    QUICK: ClassVar[dict] = {"seeds": 1000, "M": (1, 4, 64)}

    a: float = option(2.0, "thought values p ~ Beta(a, b): a")
    b: float = option(3.0, "thought values p ~ Beta(a, b): b")
    K: tuple[int, ...] = option(DEFAULT_K, "comma list of thought counts K >= 2 (with --budget: "
                                "only these K; the default: every split)")  # fmt: skip
    M: tuple[int, ...] = option((1, 2, 4, 16, 64), "comma list of continuations per thought "
                                "M >= 1", when=GRID)  # fmt: skip
    budget: int = option(0, "fixed leaf budget N (budget mode): measure every split K*M = N with "
                         "K >= 2 and recommend one; 0: the K x M grid")  # fmt: skip
    seeds: int = option(20_000, "Monte Carlo trees per cell")
    chunk: int = option(4096, "largest number of seeds per compiled chunk (capped at ~2M leaves "
                        "per chunk; results do not depend on it)", key=False)  # fmt: skip
    seed: int = option(0, "master PRNG seed; seed i uses fold_in(key, i)")
    variant: str = option("thought-std", "thought-std (std over thought means), leaf-std (over "
                          "all leaves) or mean-only")  # fmt: skip
    ddof: int = option(1, "std degrees of freedom, 0 or 1")
    eps: float = option(1e-4, "added to the std (mean-only has none)")
    model: str = option("beta", "beta (p ~ Beta(a, b)) or finite (softmax policy over --thoughts "
                        "thoughts, values ~ Beta(a, b); adds grad_mse)")  # fmt: skip
    thoughts: int = option(32, "number of distinct thoughts", when=FINITE)
    logit_scale: float = option(1.0, "std of the thought-policy logits", when=FINITE)
    instance_seed: int = option(0, "seed of the random thought set", when=FINITE)
    think_len: float = option(256.0, "token cost model: tokens per thought L_think", when=BUDGET)
    answer_len: float = option(256.0, "token cost model: tokens per continuation L_answer",
                               when=BUDGET)  # fmt: skip
    out: str = option("results/tree", "output folder (tables, config.toml, figures)", key=False)

    @property
    def mode(self) -> str:
        return "budget" if self.budget else "grid"

    def replace(self, **changes) -> Config:
        return configs.replace(self, **changes)

    def validate(self) -> None:
        validate.real("a", self.a, low=0.0, open_low=True)
        validate.real("b", self.b, low=0.0, open_low=True)
        validate.integers("K", self.K, 2)
        if not self.budget:
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
        validate.integer("instance_seed", self.instance_seed, 0)
        validate.real("think_len", self.think_len, low=0.0)
        validate.real("answer_len", self.answer_len, low=0.0)
        if self.budget:
            self.splits()  # raises when no split exists

    def splits(self) -> list[tuple[int, int]]:
        """(K, M) of every row: the grid, or the splits of the budget."""
        if not self.budget:
            return [(K, M) for K in self.K for M in self.M]
        given = set(self.K) if self.K != DEFAULT_K else None
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


def cells(cfg: Config) -> int:
    return len(cfg.splits())


def settings(cfg: Config) -> dict:
    """The settings every cell's numbers depend on (besides its K, M): its cache key and columns.
    mean-only reads no eps (None)."""
    out = configs.key_settings(cfg, exclude=NOT_IN_KEY)
    if cfg.variant == "mean-only":
        out["eps"] = None
    return out


def cell_keys(cfg: Config) -> list[str]:
    from gpolab.store import digest

    common = settings(cfg)
    return [digest({"lab": NAME, "settings": common, "K": K, "M": M}) for K, M in cfg.splits()]


def cost(K: int, M: int, think_len: float, answer_len: float) -> float:
    """Token cost of one tree: K·(L_think + M·L_answer) (each thought once, M answers each)."""
    return K * (think_len + M * answer_len)


def setup(cfg: Config):
    """(params, truth, law, grad_target) for the configured thought model."""
    from gpolab.envs import tree
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


def chunk_for(cfg: Config, K: int, M: int) -> int:
    """Seeds per compiled chunk: ``cfg.chunk`` capped so a chunk holds ≲ 2M leaves (a power of 2;
    depends on (K, M) only, so one compilation serves every seed count)."""
    cap = max(1, LEAVES_PER_CHUNK // (K * M))
    return min(cfg.chunk, 1 << (cap.bit_length() - 1))


def _theory(cfg: Config, params, law, K: int, M: int) -> dict:
    from gpolab.theory import tree as theory

    adv = theory.advantage_moments(law, K, M, cfg.variant, cfg.ddof, cfg.eps)
    return {
        "theory_variance": theory.variance(law, K, M, cfg.variant, cfg.ddof, cfg.eps),
        "theory_corr": adv["corr"],
        "theory_mse": adv["mse"],
        "theory_exact": adv["exact"],
        "theory_floor": theory.floor(law, M, cfg.variant, cfg.eps),
        "theory_degenerate_frac": theory.degenerate_prob(params, K, M),
    }


def measure(cfg: Config, K: int, M: int, ctx, key) -> dict:
    """One (K, M) cell's row: Monte Carlo metrics, closed forms, settings (``ctx`` = setup)."""
    from gpolab import engine
    from gpolab.cells import tree_cell, tree_error

    params, truth, law, grad_target = ctx
    grad = cfg.model == "finite"
    cell = tree_cell(K, M, cfg.variant, cfg.ddof, model=cfg.model, a=cfg.a, b=cfg.b, grad=grad)
    start = time.perf_counter()
    args = (params, truth, np.float32(cfg.eps), grad_target)
    m = engine.run(tree_error, cell, args, key, cfg.seeds, chunk_for(cfg, K, M))
    cov = float(m.mean("at") - m.mean("a") * m.mean("t"))
    va = float(m.mean("aa") - m.mean("a") ** 2)
    vt = float(m.mean("tt") - m.mean("t") ** 2)
    row = {
        "K": K,
        "M": M,
        "variance": float(m.mean("cond_var")),
        "mse": float(m.mean("sq")),
        "mse_group": float(m.mean("sq_group")),
        "corr": cov / math.sqrt(va * vt) if va > 0 and vt > 0 else math.nan,
        "degenerate_frac": float(m.mean("degenerate")),
        "variance_se": m.se("cond_var"),
        "mse_se": m.se("sq"),
        **_theory(cfg, params, law, K, M),
        **settings(cfg),
        "n_seeds": m.n,
    }
    if grad:
        stats = engine.error_stats(m, err="grad_err", sq="grad_sq")
        row.update(grad_mse=stats.mse, grad_mse_se=stats.mse_se, grad_variance=stats.variance)
    row["seconds"] = time.perf_counter() - start
    return row


def run(cfg: Config, key=None, *, store=None, progress=None) -> dict:
    """``{"results": one row per (K, M), "floor": the exact floor on a fine M grid}``; finished
    cells are read back from ``store`` instead of recomputed."""
    cfg.validate()
    import jax

    from gpolab.store import digest, resume

    splits, keys = cfg.splits(), cell_keys(cfg)
    key = jax.random.key(cfg.seed) if key is None else key
    ctx = setup(cfg)

    def note(rows):
        r = rows[0]
        progress.update(1, f"K={r['K']} M={r['M']}: mse={r['mse']:.4g}")

    df = resume(
        store,
        keys,
        lambda i: [measure(cfg, *splits[i], ctx, key)],
        config_hash=digest(dataclasses.asdict(cfg)),
        on_skip=None if progress is None else progress.skip,
        on_unit=None if progress is None else note,
    )
    df = with_cost(cfg, df)
    return {"results": df, "floor": floor_table(cfg, df, ctx[2])}


def with_cost(cfg: Config, df):
    """``budget``, and in budget mode the cost model and leaves, cost, mse_x_cost (grad_mse × cost
    for the finite model): columns of the run, not of the cells."""
    df = df.assign(budget=cfg.budget)
    if not cfg.budget:
        return df
    tokens = cost(df["K"], df["M"], cfg.think_len, cfg.answer_len)
    metric = df["grad_mse"] if "grad_mse" in df else df["mse"]
    return df.assign(think_len=cfg.think_len, answer_len=cfg.answer_len, leaves=df["K"] * df["M"],
                     cost=tokens, mse_x_cost=metric * tokens)  # fmt: skip


def floor_table(cfg: Config, df, law):
    """The exact K → ∞ floor on 100 log-spaced M over the rows' M range (a saved theory curve)."""
    import pandas as pd

    from gpolab.theory import tree as theory

    grid = np.geomspace(float(df["M"].min()), float(df["M"].max()), 100)
    floor = [theory.floor(law, float(M), cfg.variant, cfg.eps) for M in grid]
    return pd.DataFrame({"M": grid, "theory_floor": floor, **settings(cfg)})


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


def report(cfg: Config, tables: dict) -> str:
    from gpolab.labs import table_text

    return table_text(tables["results"], JSON)


def notes(cfg: Config, tables: dict) -> str:
    """Budget mode: the recommended split (on stderr with ``--json``)."""
    if not cfg.budget:
        return ""
    best = recommend(tables["results"])
    return (
        f"recommended split: K={best['K']}, M={best['M']}: lowest {best['metric']} x cost "
        f"({best['value']:.4g} x {best['cost']:.4g} tokens = {best['score']:.4g}; averaging "
        f"independent trees of this shape gives the lowest {best['metric']} per token); "
        f"lowest {best['metric']} at this leaf budget regardless of cost: "
        f"K={best['lowest_K']}, M={best['lowest_M']} ({best['lowest_value']:.4g})"
    )


def figures(tables: dict) -> dict:
    """Budget mode: the splits (tree_budget.png); grid mode: the floor in K, the decay in M and
    the (K, M) heatmap, each where the grid has more than one K, M or both."""
    from gpolab.plots import tree as plots

    df = tables["results"]
    if int(df["budget"].iloc[0]) > 0:
        return {"tree_budget.png": plots.budget}
    several_K, several_M = df["K"].nunique() > 1, df["M"].nunique() > 1
    found = {}
    if several_K:
        found["tree_floor.png"] = plots.floor
    if several_M:
        found["tree_variance_vs_M.png"] = plots.variance_vs_M
    if several_K and several_M:
        found["tree_lab_heatmap.png"] = plots.heatmap
    return found
