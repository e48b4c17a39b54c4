"""The sweep lab: MSE of every estimator over a grid (G for the bandits and the arithmetic
surrogate, K × M for trees) against the exact gradient, one engine run per cell.

:class:`Config` is the single source of defaults; ``validate()`` checks everything in plain
Python before anything is traced.  Rows carry every setting their numbers depend on (grpo's
``scale``, ``ddof``, ``eps`` included) and the exact finite-G theory where it exists.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import ClassVar, NamedTuple

import numpy as np
import pandas as pd

from gpolab import configs, engine, envs, estimators, validate
from gpolab.configs import option
from gpolab.engine.stats import agreement, joint_test  # noqa: F401  (sweep.joint_test: claims, tests)
from gpolab.envs import arithmetic, bandit, graded, tree
from gpolab.kit.store import cell_key, config_hash, resume
from gpolab.kit.tables import table_text
from gpolab.labs.sweep import units

NAME = "sweep"
TABLES = ("results",)
NEEDS = envs.Needs(only=tuple(units.ENVS))  # the envs the sweep has units for (units.py)
INSTANCES = envs.instances(*envs.names(NEEDS))
ENVS = tuple(INSTANCES)
POLICIES = tuple(arithmetic.POLICIES)
TREE_VARIANTS = estimators.TREE_VARIANTS
GROUPED = {"env": ("bandit", "arithmetic", "graded")}
STRENGTH = tuple(arithmetic.POLICIES.values())
# options added after cells were stored: left out of a row's key at their defaults, so stored
# cells of the default settings stay valid
KEY_IF_CHANGED = {
    "strength": STRENGTH,
    "filler_sharpen": 0.0,
    "lengths": "one",
    "length_min": 50,
    "length_max": 1000,
    "norm_length": 0,
    "dynamic_sampling": False,
}
DEFAULT_AGG, LOSS_AGG_MODES = estimators.DEFAULT_LOSS_AGG, estimators.LOSS_AGG_MODES
GRIDS = ("estimators", "G", "K", "M", "variants", "policy", "loss_agg")
# version of the row's columns: cells stored by an older gpolab lack columns (cos, scaled_mse,
# the count-table theory added in 2) and are recomputed rather than mixed into a table
SCHEMA = 3  # 3: each G draws from its own key stream (unit_key)
OPTIONS = units.OPTIONS


@dataclasses.dataclass(frozen=True, init=False)
class Config(configs.Config):
    """The sweep's grid and ``instance``, the env's own settings (:class:`gpolab.envs.bandit.
    Instance`, ...; flags and file keys name its fields flat: ``--prompts 32``; in a file its
    subtable ``[sweep.bandit]``).  Tuples are grids; every combination is one cell."""

    LAB: ClassVar[str] = NAME
    QUICK: ClassVar[dict] = {"seeds": 4000}
    INSTANCES: ClassVar[tuple] = ("env", INSTANCES)
    MODES: ClassVar[dict] = {("env", "tree"): {"defaults": {"estimators": units.Tree.ESTIMATORS}}}

    env: str = option(
        "bandit",
        "bandit (softmax contextual bandit), tree (K thoughts x M "
        "continuations), arithmetic (autoregressive LLM surrogate) or graded (the bandit with "
        "rewards on a grid of values)",
    )
    estimators: tuple[str, ...] = option(
        units.Grouped.ESTIMATORS,
        "comma list of estimators: registry names (`gpolab estimators` lists them, e.g. grpo, "
        "verl/grpo, nemo/grpo), NAME[option=value,...] (e.g. trl/grpo[scale_rewards=batch]) or "
        "package.module:function (your own); trees: "
        + ", ".join(TREE_VARIANTS)
        + " (default thought-std)",
    )
    G: tuple[int, ...] = option((2, 4, 8, 16, 32, 64), "comma list of group sizes", when=GROUPED)
    loss_agg: tuple[str, ...] = option(
        (DEFAULT_AGG,),
        "comma list of loss aggregation modes (verl loss_agg_mode): " + ", ".join(LOSS_AGG_MODES),
        when=GROUPED,
    )
    norm_length: int = option(
        0,
        "L_norm of seq-mean-token-sum-norm (0: the longest possible "
        "response, like TRL's max_completion_length)",
        when=GROUPED,
    )
    seeds: int = option(100_000, "Monte Carlo seeds per cell")
    chunk: int = option(
        0,
        "seeds per compiled chunk (0: sized to the CPU cache; results do not depend on it)",
        key=False,
    )
    seed: int = option(0, "master PRNG seed; seed i uses fold_in(key, i)")
    scale: str = option("group", "grpo std: group, batch or none (TRL scale_rewards)", when=GROUPED)
    ddof: int = option(1, "std degrees of freedom, 0 or 1 (TRL/verl/OpenRLHF use 1)")
    eps: float = option(1e-4, "added to the std (TRL 1e-4, verl 1e-6, OpenRLHF 1e-9)")
    x64: bool = option(False, "float64 mode (theory checks)")
    shard: bool = option(
        False, "shard the seed axis over every device (of every process)", key=False
    )
    out: str = option("results/sweep", "output folder (tables, config.toml, figure)", key=False)
    instance: bandit.Instance | tree.Instance | arithmetic.Instance | graded.Instance = option(
        None, "the env's settings (default: the env's defaults)"
    )

    def __init__(self, **kw) -> None:
        """Keywords: the fields above, or the instance's fields flat (``prompts=4``)."""
        if "estimators" not in kw:
            kw["estimators"] = units.ENVS.get(kw.get("env"), units.Grouped).ESTIMATORS
        configs.init(self, kw)

    def validate(self) -> None:
        units.ENVS.get(self.env, units.UNKNOWN).validate(self)


def cells(cfg: Config) -> int:
    """Rows in the result table."""
    return len(_row_ids(cfg))


def make_setup(cfg: Config) -> Callable:
    """``context → (cell args without eps, truth)``, each built once and only when a pending
    unit needs it (the context is the arithmetic policy; None for the other envs).  With
    ``cfg.x64`` call it inside ``engine.float64_mode()`` (as :func:`run_sweep` does)."""
    return units.ENVS[cfg.env].setup(cfg)


def _bandit_rows(cfg, cell, m, truth, policy, params) -> list[dict]:
    """The grouped rows of one unit: its Monte Carlo rows joined with the theory of its keys."""
    env = units.ENVS[cfg.env]
    mc = pd.DataFrame(env.monte_carlo(cfg, cell, m, truth, policy))
    theory = env.theory(cfg, mc[list(env.KEYS)], lambda _: ((params,), truth))
    return units.join(mc, theory, env.KEYS, env.COLUMNS).to_dict(orient="records")


def _row_ids(cfg: Config) -> list[dict]:
    """One id per table row, in table order."""
    return units.ENVS[cfg.env].row_ids(cfg)


def norm_length(cfg: Config) -> float:
    """L_norm of seq-mean-token-sum-norm (grouped envs)."""
    return units.ENVS[cfg.env].norm_length(cfg)


def row_settings(cfg: Config, rid: dict) -> dict:
    """Every setting the numbers of row ``rid`` depend on: the settings the env uses, without
    the grids the row sits in; of ``scale, ddof, eps`` those its estimator reads, as bound (a
    spec's bracket options win; the others None).  They are the row's cache key and its columns."""
    return _settings(cfg, [rid])[0]


def _settings(cfg: Config, ids: list[dict]) -> list[dict]:
    """:func:`row_settings` of every row of ``ids`` (the shared part computed once)."""
    common = configs.key_settings(cfg, exclude=GRIDS + OPTIONS)
    common = {k: v for k, v in common.items() if k not in KEY_IF_CHANGED or KEY_IF_CHANGED[k] != v}
    stored = getattr(type(cfg.instance), "STORED_NAMES", {})  # renamed fields: keys as stored
    common = {stored.get(k, k): v for k, v in common.items()}
    bound = units.ENVS[cfg.env].bounds(cfg, ids)  # each estimator spec resolved once
    return [{**common, **{o: b.get(o) for o in OPTIONS}} for b in bound]


def cell_keys(cfg: Config) -> list[str]:
    """Store key of every row: a hash of the row's id and of :func:`row_settings` (not the grids
    it sits in, the output folder, the chunk size, the sharding or an option it ignores)."""
    ids = _row_ids(cfg)
    return _keys(cfg, ids, _settings(cfg, ids))


def _keys(cfg: Config, ids: list[dict], settings: list[dict]) -> list[str]:
    """The rows' store keys; an env's ``DRAWS`` (how its Monte Carlo draws, when that changed
    after rows were stored) joins them, so rows drawn another way are computed again."""
    draws = units.ENVS[cfg.env].DRAWS
    tag = {"draws": draws} if draws else {}
    return [
        cell_key(NAME, schema=SCHEMA, settings=s, row=rid, **tag)
        for rid, s in zip(ids, settings, strict=True)
    ]


def _agree(pending: set[int], n: int) -> set[int]:
    """In a multi-process run every process must compute the same cells (each unit's seeds are
    sharded over all of them): process 0, which holds the store, decides for all."""
    import jax

    if jax.process_count() == 1:
        return pending
    from jax.experimental import multihost_utils

    mask = np.zeros(n, dtype=np.int32)
    mask[sorted(pending)] = 1
    mask = np.asarray(multihost_utils.broadcast_one_to_all(mask))
    return {int(i) for i in np.flatnonzero(mask)}


def _grouper(cfg: Config, ids: list[dict], plan: dict) -> Callable:
    """``group(indices)`` of :func:`gpolab.kit.store.resume`: the compiled units covering the
    rows
    ``indices`` (:meth:`gpolab.labs.sweep.units.Grouped.units`), each unit's (context, cell) kept in
    ``plan`` under its rows for :func:`_computer`."""

    def group(indices):
        for rows, context, cell in units.ENVS[cfg.env].units(cfg, ids, set(indices)):
            plan[tuple(rows)] = (context, cell)
            yield rows

    return group


def share_cells(cfg: Config, i: int, n: int) -> set[int]:
    """The cells (row indices) of share ``i`` of ``n``: whole compiled units, unit j going to
    share j mod n, so jobs of an array never split the draws one unit shares, and their union is
    every cell exactly once (:func:`gpolab.kit.store.resume`'s ``share``)."""
    _check_share(i, n)
    ids = _row_ids(cfg)
    group = _grouper(cfg, ids, {})
    return {r for j, rows in enumerate(group(range(len(ids)))) if j % n == i for r in rows}


def _check_share(i: int, n: int) -> None:
    validate.integer("cells (n)", n, 1)
    validate.integer("cells (i)", i, 0, n - 1)


def unit_key(cfg: Config, key, context, cell):
    """The unit's own key stream (:func:`gpolab.engine.cell_key`): every G (and policy) draws
    independently, so cells of different G are independent checks; the estimators of one unit
    share draws (common random numbers).  A tree cell's stream is ``gpolab tree``'s for the same
    (K, M) (its variants share draws), so both labs give the same numbers."""
    return units.ENVS[cfg.env].unit_key(key, context, cell)


def run(cfg: Config, key=None, *, store=None, progress=None) -> dict:
    """The lab protocol's entry: ``{"results": table}`` (see :func:`run_sweep`)."""
    return {"results": run_sweep(cfg, store, progress, key=key)}


def label(row: dict) -> str:
    """One progress line: the row's cell and its MSE."""
    return units.ENVS[row["env"]].label(row)


def run_sweep(
    cfg: Config, store=None, progress=None, key=None, share: tuple[int, int] | None = None
):
    """Validate ``cfg``, run every cell, return a pandas DataFrame with one row per cell.

    Through :func:`gpolab.kit.store.resume`: with a :class:`gpolab.kit.store.Store`, finished
    rows are
    read back instead of recomputed and each new row is written atomically as soon as its unit
    finishes (resumable).  ``seconds`` is the wall time of the compiled unit a row belongs to
    (compile included), split evenly among its rows.  ``share=(i, n)``: only the compiled units
    j with j mod n = i (a job array's share, :func:`share_cells`); the rows returned are that
    share's.  In a multi-process run process 0 decides which cells every process computes.
    """
    cfg.validate()
    if share is not None:
        _check_share(*share)
    ids, plan = _row_ids(cfg), {}
    settings = _settings(cfg, ids)
    keys, group = _keys(cfg, ids, settings), _grouper(cfg, ids, plan)
    compute = _computer(cfg, plan, settings, key)
    with engine.float64_mode(cfg.x64):  # scoped: later computations keep their precision
        df = resume(
            store,
            keys,
            compute,
            group=group,
            share=share,
            agree=_agree,
            progress=progress,
            label=lambda rows: label(rows[0]),
            config_hash=config_hash(cfg),
        )
    if df.empty:  # a multi-process run's other processes when nothing was left to compute
        return df
    for col in ("G", "K", "M", "B", "ddof"):
        df[col] = df[col].astype("Int64")
    units.ENVS[cfg.env].finish(cfg, df)
    return df


def _computer(cfg: Config, plan: dict, settings: list[dict], key) -> Callable:
    """``compute(unit)`` of :func:`gpolab.kit.store.resume`: one row list per cell of the
    unit, its Monte Carlo row (one engine run of the unit's cell,
    :meth:`gpolab.labs.sweep.units.Grouped.monte_carlo`) joined on its keys with the theory
    table (:meth:`gpolab.labs.sweep.units.Grouped.theory`, every key of the grid, computed from
    the config and the truth alone).  The instance, its truth, the theory table and the key are
    built at the first unit computed (never when every cell is stored)."""
    env = units.ENVS[cfg.env]
    state = functools.cache(lambda: _run_state(cfg, env, key))
    theory = functools.cache(lambda: env.theory(cfg, env.grid(cfg), state().setup))

    def compute(unit: list[int]) -> list[list[dict]]:
        built, exact = state(), theory()
        start = time.perf_counter()
        context, cell = plan[tuple(unit)]
        args, truth = built.setup(context)
        cell = env.prepare(cfg, cell, truth)
        stream = env.unit_key(built.key, context, cell)
        m = engine.run(
            built.fn, cell, (*args, built.eps), stream, cfg.seeds, built.chunk, mesh=built.mesh
        )
        mc = env.monte_carlo(cfg, cell, m, truth, context)
        wall = time.perf_counter() - start
        for i, row in zip(unit, mc, strict=True):
            row.update({k: v for k, v in settings[i].items() if k not in row})
            row["seconds"] = wall / len(mc)
        rows = units.join(pd.DataFrame(mc), exact, env.KEYS, env.COLUMNS)
        return [[row] for row in rows.to_dict(orient="records")]

    return compute


class RunState(NamedTuple):
    """What a run that computes something builds once (:func:`_run_state`)."""

    setup: Callable  # :func:`make_setup`'s context → (cell args without eps, truth)
    key: object  # the run's root key
    eps: np.ndarray  # the traced eps, in the run's precision
    fn: Callable  # the env's per-seed function (:mod:`gpolab.kernels`)
    chunk: int
    mesh: object


def _run_state(cfg: Config, env, key) -> RunState:
    """The :class:`RunState` of a run that computes something."""
    import jax

    setup = make_setup(cfg)
    key = jax.random.key(cfg.seed) if key is None else key
    eps = np.asarray(cfg.eps, dtype=np.float64 if cfg.x64 else np.float32)
    mesh = engine.seed_mesh() if cfg.shard else engine.LOCAL
    return RunState(setup, key, eps, env.error(cfg), cfg.chunk or env.chunk(cfg), mesh)


def report(cfg: Config, tables: dict) -> str:
    """The table.  Grouped envs leave out ``seconds``: the estimators of one G run together on
    common draws, so it is their unit's time split evenly (the run's time is printed once)."""
    columns = units.ENVS[cfg.env].report_columns(cfg)
    if cfg.env != "tree":
        columns = [c for c in columns if c != "seconds"]
    return table_text(tables["results"], columns)


NEXT = (
    "next: `gpolab groupsize` measures the best G at a fixed budget of responses per step "
    "(fewer prompts as G grows); `gpolab plan LOG` estimates it from your own rollout "
    "log"
)
REFERENCES = ("oracle",)  # estimators that read the true values: a reference, not a choice


def notes(cfg: Config, tables: dict) -> str:
    """The reading of a negative ``bias_sq``, Monte Carlo against the exact theory (where a row
    has it), and (grouped envs) the table's conclusion (:func:`conclusion`) and the next command."""
    df, lines = tables["results"], []
    negative = int((df["bias_sq"] < 0).sum()) if "bias_sq" in df else 0
    if negative:
        lines.append(
            f"bias_sq = mse - variance is an unbiased estimate of the squared bias: below 0 in "
            f"{negative} of {len(df)} rows by Monte Carlo noise (there the bias is within noise "
            "of 0), never a negative square"
        )
    agree = agreement(df)
    if agree:
        lines += ["Monte Carlo vs exact finite-G theory:", *agree]
        t = joint_test(df)
        if t is not None and t["reason"] is None:
            found = "no departure" if t["joint_p"] >= 0.05 else "a departure"
            lines.append(
                f"(joint p {'>=' if t['joint_p'] >= 0.05 else '<'} 0.05: {found} from "
                "the exact theory detected at the 5% level)"
            )
    if cfg.env != "tree":
        lines += [*conclusion(df), NEXT]
    return "\n".join(lines)


def conclusion(df) -> list[str]:
    """What the table shows, in words from its numbers: the estimator with the lowest MSE at
    each G, the scale-free ranking (``scaled_mse``: the MSE after the best rescaling; the exact
    value where every row has it), and how the MSE moves with G.  Several policies, loss
    aggregations or lengths: one conclusion each would not fit a line; none is drawn."""
    if any(k in df and df[k].nunique() > 1 for k in ("policy", "loss_agg", "lengths")):
        return []
    rows = df[~df["estimator"].isin(REFERENCES)]
    if rows["estimator"].nunique() < 1 or not np.isfinite(rows["mse"]).all():
        return []
    Gs = sorted(rows["G"].unique())
    best = [rows[rows["G"] == G].sort_values("mse").iloc[0] for G in Gs]
    first = _lowest(best)
    if df["estimator"].isin(REFERENCES).any():
        first += f"; {', '.join(REFERENCES)} reads the true values: a reference, not ranked"
    ref = rows[rows["estimator"] == best[-1]["estimator"]].sort_values("G")
    return [first, *_scale_free(rows[rows["G"] == Gs[-1]].copy(), Gs[-1]), *_trend(ref)]


def _lowest(best: list) -> str:
    """The conclusion's first line: the lowest-MSE estimator at each G (``best``: its rows)."""
    if len({b["estimator"] for b in best}) > 1:
        return "conclusion: lowest MSE: " + ", ".join(
            f"G={int(b['G'])} {b['estimator']}" for b in best
        )
    share = max(float(b["bias_sq"] / b["mse"]) for b in best)
    biased = (
        f" (biased: bias² up to {100 * share:.1f}% of its MSE; the plain MSE rewards "
        "shrinking an estimator, the scale-free MSE below does not)"
        if share > 0.01
        else ""
    )
    return f"conclusion: lowest MSE at every G: {best[0]['estimator']}{biased}"


def _scale_free(at, G) -> list[str]:
    """The scale-free ranking at the largest G (``at``: its rows), where two estimators have it."""
    if at["estimator"].nunique() < 2 or "scaled_mse" not in at:
        return []
    exact = "theory_scaled_mse" in at and np.isfinite(at["theory_scaled_mse"]).all()
    at["free"] = at["theory_scaled_mse" if exact else "scaled_mse"]
    at = at[np.isfinite(at["free"])].sort_values("free")
    if at["estimator"].nunique() < 2:
        return []
    first = at.iloc[0]
    rest = ", ".join(
        f"{r.estimator} {100 * (r.free / first['free'] - 1):+.1f}%"
        for r in at.iloc[1:].itertuples()
    )
    source = "exact" if exact else "Monte Carlo"
    return [
        f"scale-free (scaled_mse, {source}) at G={int(G)}: {first['estimator']} "
        f"{first['free']:.4g} lowest; {rest}"
    ]


def _trend(ref) -> list[str]:
    """How the best estimator's MSE moves from the smallest G to the largest (``ref``: its rows
    by G)."""
    if len(ref) < 2:
        return []
    lo, hi = ref.iloc[0], ref.iloc[-1]
    trend = "falls" if hi["mse"] < lo["mse"] else "does not fall"
    return [
        f"G: {lo['estimator']}'s MSE {trend} from {lo['mse']:.4g} at G={int(lo['G'])} "
        f"to {hi['mse']:.4g} at G={int(hi['G'])} (more responses for the same "
        "prompt); this table does not price responses, so it picks no G"
    ]


def figures(tables: dict) -> dict:
    """The figure of the saved table: MSE vs G (grouped envs) or the (K, M) heatmap (trees)."""
    from gpolab.labs.sweep import plots
    from gpolab.labs.sweep import plots_dynamic as dynamic
    from gpolab.labs.sweep import plots_lengths as lengths

    df = tables["results"]
    if (df["env"] == "tree").all():
        return {"mse_heatmap.png": plots.tree_heatmap_figure}
    out = {"mse_vs_G.png": plots.mse_vs_G_figure}
    if "loss_agg" in df and df["loss_agg"].nunique() > 1:
        out["loss_agg.png"] = lengths.loss_agg_figure
    if dynamic.has_dynamic(df):
        out["dynamic.png"] = dynamic.dynamic_figure
    return out
