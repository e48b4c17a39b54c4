"""The tree-branching lab (issue 6, theory §6, [T] arXiv 2509.24494): K thoughts × M continuations.

One engine run of :func:`gpolab.kernels.tree.tree_error` per (K, M) cell (the sweep's
``env = tree`` runs the same function on the same cells): each seed draws K thought values and
two independent sets of M continuations per thought (two sets give an unbiased estimate of the
conditional variance E[Var(Â_k | p)] = E[½(Â¹_k − Â²_k)²]) and the thought advantages of
:func:`gpolab.estimators.tree_advantages`.  Rows carry the Monte Carlo metrics, the closed forms of
:mod:`gpolab.theory.tree` and every setting that produced them; the ``floor`` table holds the
exact K → ∞ floor on a fine M grid (the curve of the variance-vs-M figure).

Grid mode (``leaves = 0``) measures K × M; budget mode every split K·M = leaves with K ≥ 2 (only
the K of ``K`` when it is not the default grid), the token cost K·(L_think + M·L_answer) and a
recommended split (:func:`rank`, :func:`recommend`, printed by :func:`notes`).  Splits are ranked by
a score invariant to rescaling Â (theory §11), never by the plain MSE: shrinkage (degenerate trees
give Â = 0) lowers E(Â − A)² without helping, and an always-zero advantage scores MSE 1 against a
standardized target, below flat GRPO's.  The score is the tokens one effective thought costs,
(L_think + M·L_answer)/corr² (:func:`score`, gpolab's derivation), with the exact corr of
:mod:`gpolab.theory.tree` where it exists and the Monte Carlo corr (delta-method SE) otherwise.

Randomness: cell (K, M) draws from ``engine.cell_key(key, "tree", K, M)`` (variants of one (K, M)
share draws; the sweep's ``env = tree`` cells use the same identity).

Thought-policy gradient (finite thoughts under softmax π): ĝ = (1/K) Σ_k Â_k (e_{t_k} − π) is
compared with the exact gradient of what the variant estimates as K, M → ∞: ∇J/sd(p) for
thought-std, ∇J/√(J(1 − J)) for leaf-std, ∇J for mean-only (∇J = π ⊙ (values − J), see
:func:`gpolab.envs.tree.exact`).

A cell's cache key is its (K, M) and :func:`settings`: the cost model (``think_len``,
``answer_len``) and ``leaves`` only enter columns added after the cells are read back, and
mean-only reads no ``eps``, so changing them reuses every finished cell.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import ClassVar, NamedTuple

import numpy as np

from gpolab import configs, engine, envs, estimators, validate
from gpolab.configs import borrow, option
from gpolab.envs import tree as tree_env
from gpolab.kernels.tree import corr_stats, tree_cell, tree_error, tree_overlap_error
from gpolab.kit.store import cell_key, config_hash, resume
from gpolab.kit.tables import table_text
from gpolab.labs.tree import plots
from gpolab.theory import tree as theory
from gpolab.theory import tree_overlap
from gpolab.theory.tree import TIE_Z, rank, recommend, score  # noqa: F401  (re-exported)

NAME = "tree"
NEEDS = envs.Needs(only=("tree",))  # thoughts × continuations: the tree env's own samplers
TABLES = ("results", "floor")
MODELS = tree_env.MODELS
LEAVES_PER_CHUNK = validate.MAX_TREE_LEAVES  # seeds per compiled chunk: chunk·K·M ≲ this
DEFAULT_K = (4, 16, 64, 512)
FINITE = {"model": tree_env.FINITE_MODELS}
LOGLINEAR_BUDGET = {"model": ("loglinear",), "mode": ("budget",)}
GRID = {"mode": ("grid",)}  # Config.mode: "budget" when leaves > 0, else "grid"
BUDGET = {"mode": ("budget",)}
# the cell / columns added on read (the loglinear cells serve every overlap)
NOT_IN_KEY = ("K", "M", "leaves", "think_len", "answer_len", "overlap")
# settings under the names the stored keys (and the columns, shared with the sweep's tree rows)
# were written with: the Beta parameters were a, b before the flags became --beta-a, --beta-b
STORED_NAMES = tree_env.Instance.STORED_NAMES
SCHEMA = 2  # in the cell keys: cells stored before the per-cell key streams and corr_se recompute
JSON_KEYS = tuple(
    (
        "K M variance mse mse_group corr corr_se degenerate_frac theory_degenerate_frac "
        "theory_variance theory_corr theory_mse"
    ).split()
)
GRAD_KEYS = ("grad_mse", "grad_bias2_share")  # finite model
COST_KEYS = tuple(
    (
        "leaves cost rescaled_mse score score_se score_source recommended tie distinguishable "
        "grad_score"
    ).split()
)
# loglinear model, budget mode: the whole-budget gradient at the configured overlap
OVERLAP_KEYS = tuple(
    "overlap trees grad_cos2 grad_cos2_se theory_grad_cos2 grad_budget_mse orthogonal_score".split()
)
JSON = (*JSON_KEYS, *GRAD_KEYS, *COST_KEYS, *OVERLAP_KEYS)  # those in the table


@dataclasses.dataclass(frozen=True)
class Config(configs.Config):
    """Everything ``gpolab tree`` needs; the single source of defaults."""

    LAB: ClassVar[str] = NAME
    QUICK: ClassVar[dict] = {"seeds": 1000, "M": (1, 4, 64)}

    beta_a: float = borrow(tree_env.Instance, "beta_a")
    beta_b: float = borrow(tree_env.Instance, "beta_b")
    K: tuple[int, ...] = option(
        DEFAULT_K,
        "comma list of thought counts K >= 2 (with --leaves: "
        "only these K; the default: every split)",
    )
    M: tuple[int, ...] = option(
        (1, 2, 4, 16, 64), "comma list of continuations per thought M >= 1", when=GRID
    )
    leaves: int = option(
        0,
        "leaves per prompt N (budget mode): measure every split K*M = N with "
        "K >= 2 and recommend one; 0: the K x M grid",
    )
    seeds: int = option(20_000, "Monte Carlo trees per cell")
    chunk: int = option(
        4096,
        "largest number of seeds per compiled chunk (capped at ~2M leaves "
        "per chunk; results do not depend on it)",
        key=False,
    )
    seed: int = option(0, "master PRNG seed; seed i uses fold_in(key, i)")
    variant: str = option(
        "thought-std",
        "thought-std (std over thought means), leaf-std (over all leaves) or mean-only",
    )
    ddof: int = option(1, "std degrees of freedom, 0 or 1")
    eps: float = option(1e-4, "added to the std (mean-only has none)")
    model: str = borrow(tree_env.Instance, "model")
    thoughts: int = borrow(tree_env.Instance, "thoughts", when=FINITE)
    logit_scale: float = option(1.0, "std of the thought-policy logits", when=FINITE)
    instance_seed: int = borrow(tree_env.Instance, "instance_seed", when=FINITE)
    overlap: float = borrow(tree_env.Instance, "overlap", when=LOGLINEAR_BUDGET)
    think_len: float = option(256.0, "token cost model: tokens per thought L_think", when=BUDGET)
    answer_len: float = option(
        256.0, "token cost model: tokens per continuation L_answer", when=BUDGET
    )
    out: str = option("results/tree", "output folder (tables, config.toml, figures)", key=False)

    @property
    def mode(self) -> str:
        return "budget" if self.leaves else "grid"

    def validate(self) -> None:
        validate.real("beta_a", self.beta_a, low=0.0, open_low=True)
        validate.real("beta_b", self.beta_b, low=0.0, open_low=True)
        validate.integers("K", self.K, 2)
        if not self.leaves:
            validate.integers("M", self.M, 1)
        validate.integer("leaves", self.leaves, 0)
        validate.run_sizes(self, 2, min_chunk=1)
        validate.choice("variant", self.variant, estimators.TREE_VARIANTS)
        validate.choice("ddof", self.ddof, (0, 1))
        validate.real("eps", self.eps, low=0.0)
        validate.choice("model", self.model, MODELS)
        validate.integer("thoughts", self.thoughts, 2)
        validate.real("logit_scale", self.logit_scale, low=0.0)
        validate.integer("instance_seed", self.instance_seed, 0)
        validate.real("think_len", self.think_len, low=0.0)
        validate.real("answer_len", self.answer_len, low=0.0)
        tree_env.check_overlap(self.overlap)
        if self.leaves:  # checked before splits() loops over the budget's divisors
            validate.at_most("leaves", self.leaves, validate.MAX_TREE_LEAVES, "leaves per tree")
            self.splits()  # raises when no split exists
        else:
            validate.tree_leaves(self.K, self.M)

    def splits(self) -> list[tuple[int, int]]:
        """(K, M) of every row: the grid, or the splits of the leaf budget."""
        if not self.leaves:
            return [(K, M) for K in self.K for M in self.M]
        given = set(self.K) if self.K != DEFAULT_K else None
        splits = [
            (K, self.leaves // K)
            for K in range(2, self.leaves + 1)
            if self.leaves % K == 0 and (given is None or K in given)
        ]
        if not splits:
            raise validate.ConfigError(
                f"leaves: got {self.leaves!r}; allowed: an integer >= 2 with a split K·M = leaves, "
                "K >= 2" + (f" and K in {sorted(given)}" if given else "")
            )
        return splits


def cells(cfg: Config) -> int:
    return len(cfg.splits())


def settings(cfg: Config) -> dict:
    """The settings every cell's numbers depend on (besides its K, M): its cache key and columns.
    mean-only reads no eps (None)."""
    out = configs.key_settings(cfg, exclude=NOT_IN_KEY)
    out = {STORED_NAMES.get(k, k): v for k, v in out.items()}
    if cfg.variant == "mean-only":
        out["eps"] = None
    return out


def cell_keys(cfg: Config) -> list[str]:
    common = settings(cfg)
    return [cell_key(NAME, schema=SCHEMA, settings=common, K=K, M=M) for K, M in cfg.splits()]


def cost(K: int, M: int, think_len: float, answer_len: float) -> float:
    """Token cost of one tree: K·(L_think + M·L_answer) (each thought once, M answers each)."""
    return K * (think_len + M * answer_len)


class Setup(NamedTuple):
    """The configured thought model's instance and what its cells compare with (:func:`setup`)."""

    params: object  # the tree env's params
    truth: object  # its exact truth (:func:`gpolab.envs.tree.exact`)
    law: object  # the thought values' law (:func:`gpolab.theory.tree.thought_law`)
    grad_target: np.ndarray  # the thought gradient the variant estimates (finite models; else ())


def setup(cfg: Config) -> Setup:
    """The :class:`Setup` of the configured thought model."""
    if cfg.model == "beta":
        params = tree_env.make_beta(cfg.beta_a, cfg.beta_b)
    else:
        params = tree_env.make_finite(
            cfg.instance_seed, cfg.thoughts, cfg.logit_scale, cfg.beta_a, cfg.beta_b
        )
    truth = tree_env.exact(params)
    law = theory.thought_law(params)
    grad_target = np.zeros(0, np.float32)
    if cfg.model in tree_env.FINITE_MODELS:
        g = np.asarray(truth.grad, np.float64)
        J = law.mean
        scale = {"thought-std": math.sqrt(law.var), "leaf-std": math.sqrt(J * (1 - J))}
        grad_target = (g / scale.get(cfg.variant, 1.0)).astype(np.float32)
    return Setup(params, truth, law, grad_target)


def chunk_for(cfg: Config, K: int, M: int) -> int:
    """Seeds per compiled chunk: ``cfg.chunk`` capped so a chunk holds ≲ 2M leaves (a power of 2;
    depends on (K, M) only, so one compilation serves every seed count)."""
    cap = max(1, LEAVES_PER_CHUNK // (K * M))
    return min(cfg.chunk, 1 << (cap.bit_length() - 1))


def _theory(cfg: Config, params, law, K: int, M: int) -> dict:
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
    """One (K, M) cell's row: Monte Carlo metrics, closed forms, settings (``ctx`` = setup).
    ``key`` is the run's root key; the cell draws from ``engine.cell_key(key, "tree", K, M)``."""
    params, truth, law, grad_target = ctx
    grad = cfg.model in tree_env.FINITE_MODELS
    psi = tree_env.strategy_feature(params) if cfg.model == "loglinear" else None
    cell = tree_cell(
        K, M, cfg.variant, cfg.ddof, model=cfg.model, a=cfg.beta_a, b=cfg.beta_b, grad=grad
    )
    start = time.perf_counter()
    args = (params, truth, np.float32(cfg.eps), grad_target)
    fn = tree_error if psi is None else tree_overlap_error
    args = args if psi is None else (*args, psi)
    stream = engine.cell_key(key, NAME, K, M)
    m = engine.run(fn, cell, args, stream, cfg.seeds, chunk_for(cfg, K, M))
    corr, corr_se = corr_stats(m)
    row = {
        "K": K,
        "M": M,
        "variance": float(m.mean("cond_var")),
        "mse": float(m.mean("sq")),
        "mse_group": float(m.mean("sq_group")),
        "corr": corr,
        "corr_se": corr_se,
        "degenerate_frac": float(m.mean("degenerate")),
        "variance_se": m.se("cond_var"),
        "mse_se": m.se("sq"),
        **_theory(cfg, params, law, K, M),
        **settings(cfg),
        "n_seeds": m.n,
    }
    if grad:
        row.update(grad_stats(m, grad_target))
    if psi is not None:
        row.update(overlap_stats(m, cfg, params, K, M))
    row["seconds"] = time.perf_counter() - start
    return row


def grad_stats(m, grad_target) -> dict:
    """The thought-policy gradient ĝ of one tree against ``grad_target`` g: MSE (± SE), tr Cov V,
    bias² (mse − V, unbiased), its share of the MSE, ``grad_dot`` = E ĝ·g = ē·g + ‖g‖² (ē the
    mean error) and ‖g‖² (``grad_norm2``), which :func:`rank` turns into ``grad_score``."""
    stats = engine.error_stats(m, err="grad_err", sq="grad_sq")
    g = np.asarray(grad_target, np.float64)
    gg, eg = float(g @ g), float(np.asarray(m.mean("grad_err"), np.float64) @ g)
    return dict(
        grad_mse=stats.mse,
        grad_mse_se=stats.mse_se,
        grad_variance=stats.variance,
        grad_bias_sq=stats.bias_sq,
        grad_bias2_share=stats.bias_sq / stats.mse if stats.mse > 0 else math.nan,
        grad_dot=eg + gg,
        grad_norm2=gg,
    )


def overlap_stats(m, cfg: Config, params, K: int, M: int) -> dict:
    """The loglinear model's per-tree moments (:data:`gpolab.theory.tree_overlap.MOMENTS`):
    Monte Carlo ``ov_*`` ± ``ov_*_se``, their covariance ``ov_cov_*`` (ddof 1) and the exact
    ``theory_ov_*`` (NaN past the exact grid); every overlap and token budget is computed from
    them after the cells are read back."""
    n, names = m.n, tree_overlap.MOMENTS
    w = np.asarray(m.mean("ov_w"), np.float64)
    cov = (np.asarray(m.mean("ov_ww"), np.float64) - np.outer(w, w)) * n / max(n - 1, 1)
    exact = tree_overlap.moments(params, K, M, cfg.variant, cfg.ddof, cfg.eps)
    row = {f"ov_{k}": float(w[i]) for i, k in enumerate(names)}
    row |= {f"ov_{k}_se": math.sqrt(max(cov[i, i], 0.0) / n) for i, k in enumerate(names)}
    row |= {name: float(cov[i, j]) for name, i, j in tree_overlap.covariance_columns()}
    tt, c = tree_overlap.geometry(theory.thought_law(params))
    row |= {"ov_target_sq": tt, "ov_strategy_dot": c}  # ‖t₀‖², ψ·t₀ (the thoughts' geometry)
    return row | {f"theory_ov_{k}": float(exact[i]) for i, k in enumerate(names)}


def run(cfg: Config, key=None, *, store=None, progress=None) -> dict:
    """``{"results": one row per (K, M), "floor": the exact floor on a fine M grid}``; finished
    cells are read back from ``store`` instead of recomputed."""
    cfg.validate()
    import jax

    splits, keys = cfg.splits(), cell_keys(cfg)
    key = jax.random.key(cfg.seed) if key is None else key
    ctx = setup(cfg)

    def note(rows):
        r = rows[0]
        return f"K={r['K']} M={r['M']}: mse={r['mse']:.4g}"

    df = resume(
        store,
        keys,
        lambda i: [measure(cfg, *splits[i], ctx, key)],
        config_hash=config_hash(cfg),
        progress=progress,
        label=note,
    )
    df = with_score(cfg, df)
    return {"results": df, "floor": floor_table(cfg, df, ctx.law)}


def with_score(cfg: Config, df):
    """``budget`` (the ``leaves`` setting; ``leaves`` is each row's K·M), and in budget mode the
    cost model, leaves, cost and the ranking columns of :func:`rank` (the loglinear model: of
    :func:`gpolab.theory.tree_overlap.rank` at ``overlap``): columns of the run, not of the
    cells."""
    df = df.assign(budget=cfg.leaves)
    if not cfg.leaves:
        return df
    tokens = cost(df["K"], df["M"], cfg.think_len, cfg.answer_len)
    df = df.assign(
        think_len=cfg.think_len, answer_len=cfg.answer_len, leaves=df["K"] * df["M"], cost=tokens
    )
    if cfg.model == "loglinear":
        geometry = float(df["ov_target_sq"].iloc[0]), float(df["ov_strategy_dot"].iloc[0])
        return tree_overlap.rank(df.assign(overlap=cfg.overlap), *geometry)
    return rank(df)


def floor_table(cfg: Config, df, law):
    """The exact K → ∞ floor on 100 log-spaced M over the rows' M range (a saved theory curve)."""
    import pandas as pd

    grid = np.geomspace(float(df["M"].min()), float(df["M"].max()), 100)
    floor = [theory.floor(law, float(M), cfg.variant, cfg.eps) for M in grid]
    return pd.DataFrame({"M": grid, "theory_floor": floor, **settings(cfg)})


def report(cfg: Config, tables: dict) -> str:
    return table_text(tables["results"], JSON)


def notes(cfg: Config, tables: dict) -> str:
    """Budget mode: the recommended split, its runner-up and whether they differ beyond noise (on
    stderr with ``--json``); with the finite model, the policy gradient's bias² share."""
    if not cfg.leaves:
        return ""
    df = tables["results"]
    b = recommend(df)
    src = "exact theory" if b["source"] == "exact" else "Monte Carlo"
    se = f" ± {b['score_se']:.3g}" if b["source"] != "exact" else ""
    value = b["runner_up_score"] if cfg.model != "loglinear" else 1 - b["runner_up_score"]
    runner = f"runner-up K={b['runner_up_K']}, M={b['runner_up_M']}: {value:.4g}; "
    if b["candidates"] == 1:
        runner, verdict = "", "only one candidate at this budget (no other split to compare with)"
    elif b["distinguishable"]:
        verdict = "distinguishable from the runner-up"
    else:
        ties = ", ".join(f"K={K}, M={M}" for K, M in b["ties"])
        verdict = f"a tie within Monte Carlo noise (95%) with {ties}: either split"
    lines = [_recommended(cfg, b, src, se, runner + verdict, df)]
    if "grad_mse" in df:
        parts = [
            f"{int(r.K)}x{int(r.M)}: {r.grad_mse:.3g} (bias² {100 * r.grad_bias2_share:.0f}%; "
            f"grad_score {r.grad_score:.4g})"
            for r in df.sort_values("K").itertuples()
        ]
        head = (
            "thought-policy gradient MSE per tree (bias² share; grad_score = tokens per unit "
            "of squared correlation after the best rescaling): "
        )
        lines.append(head + "; ".join(parts))
    return "\n".join(lines)


def _recommended(cfg: Config, b: dict, src: str, se: str, rest: str, df) -> str:
    """The recommendation's lines, each stating the regime it assumes (the thoughts' overlap)."""
    if cfg.model == "loglinear":
        orth = df.loc[df["orthogonal_recommended"]].iloc[0]
        row = df.loc[df["recommended"]].iloc[0]
        return (
            f"recommended split: K={b['K']}, M={b['M']}: highest cos² of the whole-budget "
            f"thought-policy gradient with the exact one, {1 - b['score']:.4f}{se} ({src}; "
            f"thoughts' feature overlap {cfg.overlap:g}, {row['trees']:.3g} trees in the token "
            f"budget of flat sampling, leaves·(L_think + L_answer)); {rest}\n"
            f"assuming near-orthogonal thought scores (overlap 0) the advantage score "
            f"(L_think + M·L_answer)/corr² would recommend K={int(orth['K'])}, M={int(orth['M'])}"
        )
    return (
        f"recommended split: K={b['K']}, M={b['M']}: lowest tokens per effective thought "
        f"(L_think + M·L_answer)/corr² = {b['score']:.4g}{se} (corr {b['corr']:.4f}, {src}; "
        f"1 − corr² = {b['rescaled_mse']:.4f}; degenerate share {b['degenerate_frac']:.4f} "
        f"measured, {b['theory_degenerate_frac']:.4f} exact); {rest}\n"
        f"highest corr at this leaf budget regardless of cost: K={b['top_corr_K']}, "
        f"M={b['top_corr_M']} ({b['top_corr']:.4f}); the plain MSE is not a ranking (it "
        "rewards shrinkage: an always-zero advantage scores 1); the score assumes near-orthogonal "
        "thought scores (features that do not overlap; --model loglinear --overlap measures "
        "thoughts that share features)"
    )


def figures(tables: dict) -> dict:
    """Budget mode: the splits (tree_budget.png; the loglinear model: cos² against the overlap
    and the boundary, tree_overlap.png); grid mode: the floor in K, the decay in M and
    the (K, M) heatmap, each where the grid has more than one K, M or both."""
    df = tables["results"]
    if int(df["budget"].iloc[0]) > 0 and "theory_grad_cos2" in df:
        return {"tree_overlap.png": plots.overlap}
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
