"""What the sweep computes on each env: one small object per env (:data:`ENVS`) with the same
methods, so :mod:`gpolab.labs.sweep.lab` never asks which env it runs.

An env object turns the sweep's config (its grid and ``cfg.instance``, the env's
:class:`Instance`) into the table's keys (:meth:`Grouped.grid`, the store's row ids), compiled
units ``(rows, context, cell)`` of :mod:`gpolab.kernels`, the instance and its truth
(``setup``), and two tables on the same keys (:data:`Grouped.KEYS`): the Monte Carlo rows of a
finished unit (:meth:`Grouped.monte_carlo`, from the engine's moments) and the exact theory of
every key (:meth:`Grouped.theory`, from the truth only).  :func:`join` merges them into the
result rows.  The bandit and the arithmetic surrogate share the grouped rows (one group of G
responses per prompt); the tree has its own (K thoughts × M continuations).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import sys

import jax
import numpy as np
import pandas as pd

from gpolab import engine, estimators, validate
from gpolab.envs import arithmetic, bandit, graded, tree
from gpolab.kernels import dynamic as dynamic_kernel
from gpolab.kernels import grouped
from gpolab.kernels import tree as tree_kernel
from gpolab.theory import aggregation, dynamic, exact, graded_exact
from gpolab.theory import mse as theory_mse
from gpolab.theory import tree as theory_tree

OPTIONS = ("scale", "ddof", "eps")
DEFAULT_AGG = estimators.DEFAULT_LOSS_AGG


def check_common(cfg) -> None:
    """The settings every env reads (seeds, seed, chunk, ddof, eps) and the env's instance."""
    validate.run_sizes(cfg)
    validate.choice("ddof", cfg.ddof, (0, 1))
    validate.real("eps", cfg.eps, low=0.0)
    cfg.instance.validate()


def shared_options(cfg) -> dict:
    return {o: getattr(cfg, o) for o in OPTIONS}


def mode_id(mode: str) -> dict:
    """A row id's loss_agg entry: absent for the default mode (its stored cells stay valid)."""
    return {} if mode == DEFAULT_AGG else {"loss_agg": mode}


STATS = ("mse", "mse_se", "mse_ci_low", "mse_ci_high", "variance", "bias_sq")


def stats_row(stats) -> dict:
    """The :data:`STATS` of an :class:`gpolab.engine.ErrorStats` by name."""
    return {k: getattr(stats, k) for k in STATS}


# a result row's columns, Monte Carlo and theory interleaved as the table shows them; the settings
# and ``seconds`` follow (the store adds its provenance after them)
CELL_COLUMNS = ("estimator", "variant", "G", "K", "M", "B", "n_seeds", *STATS)  # every env's
GROUPED_COLUMNS = tuple(
    ["env", "kind", "policy", *CELL_COLUMNS]
    + (
        "cos target_sq best_scale scaled_mse degenerate_frac mean_V theory_best_scale "
        "theory_scaled_mse theory theory_mse theory_mse_se theory_bias_sq theory_first_order "
        "loss_agg lengths"
    ).split()
    # dynamic sampling
    + (
        "dynamic_sampling draws_per_kept_group draws_per_kept_group_ci_low "
        "draws_per_kept_group_ci_high kept_groups responses_per_step cap_reached_frac "
        "theory_draws_per_kept_group"
    ).split()
    + [dynamic.RATE_COLUMN, dynamic.LOOP_COLUMN]
    + (
        "theory_cap_reached_frac theory_kept_groups theory_responses_per_step theory_kappa "
        "plain_B plain_mse plain_mse_se plain_cos plain_scaled_mse theory_plain_mse"
    ).split()
)
TREE_COLUMNS = (
    "env",
    "kind",
    *CELL_COLUMNS,
    *"mse_group corr leaves degenerate_frac theory_degenerate_frac theory_mse".split(),
)


def join(mc: pd.DataFrame, theory: pd.DataFrame, keys, columns) -> pd.DataFrame:
    """The Monte Carlo table ``mc`` and the theory table joined on ``keys`` (every Monte Carlo
    row has one theory row; a key the grid repeats has the same theory), in the order of
    ``columns``, then ``mc``'s other columns."""
    theory = theory.drop_duplicates(list(keys))
    df = mc.merge(theory, on=list(keys), how="left", validate="many_to_one")
    first = [c for c in columns if c in df]
    return df[first + [c for c in df if c not in first]]


class Grouped:
    """Envs with groups of G responses per prompt (the bandit, the arithmetic surrogate)."""

    name = ""
    DRAWS = ""  # how the Monte Carlo draws, in the store keys once it changed ("": as first stored)
    ESTIMATORS = ("vanilla", "oracle", "loo", "mean", "grpo")
    REPORT: tuple[str, ...] = ()
    KEYS: tuple[str, ...] = ("estimator", "G", "loss_agg")
    COLUMNS = GROUPED_COLUMNS

    def validate(self, cfg) -> None:
        check_common(cfg)
        validate.group_sizes("G", cfg.G)
        for mode in cfg.loss_agg:
            estimators.check_loss_agg(mode)
        validate.integer("norm_length", cfg.norm_length, 0)
        for spec in self.specs(cfg).values():
            for G in cfg.G:
                estimators.check_estimator(
                    spec, G, scale=cfg.scale, ddof=cfg.ddof, eps=cfg.eps, field="G"
                )
                estimators.check_callable(spec, G)

    def specs(self, cfg) -> dict:
        """Each estimator spec of ``cfg`` resolved once (:class:`gpolab.estimators.Bound`): the
        cells, the theory and the aggregation take these, never the string again."""
        return {name: estimators.bound(name) for name in cfg.estimators}

    def contexts(self, cfg) -> tuple:
        return (None,)

    def row_ids(self, cfg) -> list[dict]:
        """(policy,) loss_agg, estimator, G: one id per row, in table order."""
        return [
            {**({"policy": c} if c else {}), "estimator": e, "G": G, **mode_id(m)}
            for c in self.contexts(cfg)
            for m in cfg.loss_agg
            for e in cfg.estimators
            for G in cfg.G
        ]

    def bound(self, cfg, rid: dict) -> dict:
        """Of ``scale, ddof, eps`` those the row's estimator reads, as bound."""
        return self.bounds(cfg, [rid])[0]

    def bounds(self, cfg, ids: list[dict]) -> list[dict]:
        """:meth:`bound` of every row of ``ids`` (each spec resolved once)."""
        specs, shared = self.specs(cfg), shared_options(cfg)
        return [estimators.bind(specs[rid["estimator"]], shared)[1] for rid in ids]

    def norm_length(self, cfg) -> float:
        """L_norm of seq-mean-token-sum-norm: ``cfg.norm_length`` or the longest response."""
        return float(cfg.norm_length or cfg.instance.longest_response())

    def units(self, cfg, ids: list[dict], pending: set[int]):
        """Per (policy,) loss_agg, G: the pending estimators, drawn on common random numbers
        (computing a subset changes nothing)."""
        specs = self.specs(cfg)
        for context, mode in itertools.product(self.contexts(cfg), cfg.loss_agg):
            for G in cfg.G:
                rows = [
                    i
                    for i in sorted(pending)
                    if ids[i]["G"] == G
                    and ids[i].get("policy") == context
                    and ids[i].get("loss_agg", DEFAULT_AGG) == mode
                ]
                if rows:
                    names = tuple(specs[ids[i]["estimator"]] for i in rows)
                    yield rows, context, self.cell(cfg, names, G, mode)

    def prepare(self, cfg, cell, truth):
        return cell

    def unit_key(self, key, context, cell):
        """Every G (and policy) draws from its own stream (:func:`gpolab.engine.cell_key`)."""
        return engine.cell_key(key, self.name, *((context,) if context else ()), cell.G)

    def chunk(self, cfg) -> int:
        return engine.AUTO

    def response_length(self, cfg, params):
        return 1

    def B(self, cfg):
        """The mini-batch of the theory (None: one group per prompt)."""
        return None

    def batch(self, cfg):
        """The row's ``B`` column."""
        return None

    def columns(self, cfg, truth, context) -> dict:
        """The env's own columns of a row."""
        return {"env": self.name}

    def monte_carlo(self, cfg, cell, m, truth, context) -> list[dict]:
        """The Monte Carlo rows of one unit (one per estimator of ``cell``), from the engine's
        moments ``m``: the keys (:data:`KEYS`), the env's columns and the statistics."""
        B = self.B(cfg)
        mode = getattr(cell, "loss_agg", DEFAULT_AGG)  # dynamic cells: the default
        target_sq = theory_mse.target_sq(truth, B)
        out = []
        for name in cell.estimators:  # bound specs (:meth:`specs`); rows name them as given
            stats = engine.error_stats(m, err=f"{name}/err", sq=f"{name}/sq")
            out.append(
                {
                    **self.columns(cfg, truth, context),
                    "estimator": str(name),
                    "variant": cfg.scale,
                    "G": cell.G,
                    "K": None,
                    "M": None,
                    "B": self.batch(cfg),
                    "n_seeds": m.n,
                    **stats_row(stats),
                    "cos": float(m.mean(f"{name}/cos")),
                    "target_sq": target_sq,
                    **grouped.best_scale(m, name, target_sq),
                    "degenerate_frac": float(m.mean("degenerate")),
                    "loss_agg": mode,
                    "lengths": cfg.instance.lengths,
                    **self.extra_columns(cfg, cell, m, truth, name),
                }
            )
        return out

    def grid(self, cfg) -> pd.DataFrame:
        """The table's keys (:data:`KEYS`), one row per result row, in table order."""
        return pd.DataFrame(
            [{**rid, "loss_agg": rid.get("loss_agg", DEFAULT_AGG)} for rid in self.row_ids(cfg)],
            columns=self.KEYS,
        )

    def theory(self, cfg, grid: pd.DataFrame, setup) -> pd.DataFrame:
        """The exact columns of every key of ``grid``, from the truth of ``setup(policy)``:
        the finite-G theory of :func:`gpolab.theory.exact.theory_columns` (``theory_mse_se``:
        the standard error it carries where its inputs are Monte Carlo, the arithmetic
        surrogate's S2), the first-order MSE, and the theory of the key's loss aggregation.
        The count tables are one per G (their shape), so the theory is computed key by key."""
        specs, B, shared = self.specs(cfg), self.B(cfg), shared_options(cfg)
        rows = []
        for key in grid.to_dict(orient="records"):
            (params, *_), truth = setup(key.get("policy"))
            spec, G = specs[key["estimator"]], key["G"]
            length = self.response_length(cfg, params) if cfg.instance.lengths == "one" else None
            row = {
                **key,
                "mean_V": float(np.asarray(truth.prompt_probs) @ np.asarray(truth.V)),
                **exact.theory_columns(truth, spec, G, B, length, **shared),
                "theory_first_order": theory_mse.mse(truth, "oracle", G, B),
            }
            if key["loss_agg"] != DEFAULT_AGG:
                row |= self.aggregation_theory(cfg, params, truth, spec, G, key["loss_agg"], B)
            rows.append(row | self.extra_theory(cfg, truth, spec, G))
        return pd.DataFrame(rows)

    def aggregation_theory(self, cfg, params, truth, spec, G, mode, B) -> dict:
        """Under a loss aggregation other than seq-mean-token-sum the count-table theory is NaN
        (the bandit adds the exact bias² of :mod:`gpolab.theory.aggregation`)."""
        nan, why = math.nan, "none: no exact theory of loss aggregation on this env"
        return {
            "theory_mse": nan,
            "theory_mse_se": nan,
            "theory_best_scale": nan,
            "theory_scaled_mse": nan,
            "theory_bias_sq": nan,
            "theory": why,
        }

    def extra_theory(self, cfg, truth, spec, G) -> dict:
        return {}

    def extra_columns(self, cfg, cell, m, truth, name) -> dict:
        return {}

    def report_columns(self, cfg) -> list[str]:
        cols = list(self.REPORT)
        if cfg.loss_agg != (DEFAULT_AGG,) or cfg.instance.lengths != "one":
            cols = ["loss_agg", "lengths", *cols, "cos", "scaled_mse"]
        return cols

    def label(self, row: dict) -> str:
        policy = f"{row['policy']} " if row.get("policy") else ""
        mode = row.get("loss_agg", DEFAULT_AGG)
        mode = "" if mode == DEFAULT_AGG else f" {mode}"
        return f"{policy}{row['estimator']}{mode} G={row['G']}: mse={row['mse']:.4g}"

    def finish(self, cfg, df) -> None:
        """After the table is read: nothing (dynamic sampling warns about its cap)."""


class Bandit(Grouped):
    name = "bandit"
    DRAWS = "alias"  # responses drawn by the alias method (issue 44): rows stored before recompute
    REPORT = tuple(
        "estimator G mse mse_ci_low mse_ci_high theory_mse bias_sq degenerate_frac seconds".split()
    )

    def validate(self, cfg) -> None:
        super().validate(cfg)
        if cfg.instance.dynamic_sampling and tuple(cfg.loss_agg) != (DEFAULT_AGG,):
            raise validate.ConfigError(
                f"loss_agg: got {','.join(cfg.loss_agg)}; allowed with "
                f"dynamic_sampling: {DEFAULT_AGG} only"
            )

    def setup(self, cfg):
        params = bandit.make(cfg.instance)
        truth = bandit.exact(params)
        tables = bandit.outcome_tables(params)  # the alias draw's tables, built once
        return lambda _: ((params, truth, tables), truth)

    def cell(self, cfg, names, G, mode):
        inst = cfg.instance
        if inst.dynamic_sampling:
            return dynamic_kernel.DynamicBanditCell(
                names, G, inst.B, inst.max_draws, 1, cfg.scale, cfg.ddof
            )
        return grouped.BanditCell(
            names, G, inst.B, cfg.scale, cfg.ddof, True, mode, norm_length=self.norm_length(cfg)
        )

    def error(self, cfg):
        if cfg.instance.dynamic_sampling:
            return dynamic_kernel.dynamic_bandit_error
        return grouped.bandit_error

    def prepare(self, cfg, cell, truth):
        """A dynamic cell gets ``plain_B`` = round(exact E[groups drawn per step]) (at least 1,
        at most every drawn group): plain sampling at the same mean responses per step."""
        if not cfg.instance.dynamic_sampling:
            return cell
        return dataclasses.replace(cell, plain_B=plain_B(truth, cell.G, cell.B, cell.max_draws))

    def B(self, cfg):
        return cfg.instance.B or None

    def batch(self, cfg):
        return cfg.instance.B

    def columns(self, cfg, truth, context) -> dict:
        return {"env": self.name, "kind": cfg.instance.kind}

    def aggregation_theory(self, cfg, params, truth, spec, G, mode, B) -> dict:
        out = super().aggregation_theory(cfg, params, truth, spec, G, mode, B)
        bias, how = aggregation.bias_sq(
            params, truth, spec, G, mode, B, self.norm_length(cfg), **shared_options(cfg)
        )
        return out | {"theory_bias_sq": bias, "theory": how}

    def extra_columns(self, cfg, cell, m, truth, name) -> dict:
        if not cfg.instance.dynamic_sampling:
            return {}
        return dynamic_columns(cell, m, truth, name)

    def extra_theory(self, cfg, truth, spec, G) -> dict:
        if not cfg.instance.dynamic_sampling:
            return {}
        return dynamic_theory(cfg, truth, spec, G)

    def report_columns(self, cfg) -> list[str]:
        if not cfg.instance.dynamic_sampling:
            return super().report_columns(cfg)
        return [
            *"estimator G mse theory_mse degenerate_frac draws_per_kept_group".split(),
            "theory_draws_per_kept_group",
            dynamic.LOOP_COLUMN,
            dynamic.RATE_COLUMN,
            *"responses_per_step plain_B plain_mse scaled_mse plain_scaled_mse".split(),
            "cos",
            "plain_cos",
        ]

    def finish(self, cfg, df) -> None:
        if cfg.instance.dynamic_sampling:
            cap_warning(df)


class Graded(Grouped):
    """The graded bandit (:mod:`gpolab.envs.graded`): rewards on a finite grid, the exact theory
    of every reward-only estimator by enumeration over the grid's compositions
    (:func:`gpolab.theory.graded_exact.instance_theory`), theory §3's closed forms for the
    estimators that read V(x) (oracle)."""

    name = "graded"
    REPORT = Bandit.REPORT

    def validate(self, cfg) -> None:
        super().validate(cfg)
        if tuple(cfg.loss_agg) != (DEFAULT_AGG,):  # one-token responses: nothing to aggregate
            raise validate.ConfigError(
                f"loss_agg: got {','.join(cfg.loss_agg)}; allowed on graded: {DEFAULT_AGG} "
                "(responses are one token)"
            )

    def setup(self, cfg):
        params = graded.make(cfg.instance)
        truth = graded.exact(params)
        tables = graded.outcome_tables(params)
        return lambda _: ((params, truth, tables), truth)

    def cell(self, cfg, names, G, mode):
        return grouped.BanditCell(names, G, cfg.instance.B, cfg.scale, cfg.ddof, True, mode)

    def error(self, cfg):
        return grouped.graded_error

    B, batch = Bandit.B, Bandit.batch

    def columns(self, cfg, truth, context) -> dict:
        return {"env": self.name, "kind": graded.describe(cfg.instance)}

    def theory(self, cfg, grid: pd.DataFrame, setup) -> pd.DataFrame:
        """Per key: the graded count-table theory for a reward-only estimator, theory §3's closed
        form for one that reads V(x) (``oracle``), else none (the reason in ``theory``).
        ``binary_theory_mse``: what the binary theory (count tables, closed forms) says of the
        same instance with its rewards replaced by Bernoulli(μ(x, a)) of the same means (NaN
        when a mean lies outside [0, 1]): the number a reader using the binary tables gets."""
        (params, *_), truth = setup(None)
        specs, B, shared = self.specs(cfg), self.B(cfg), shared_options(cfg)
        law = (np.asarray(params.grid, np.float64), _rows(params.probs))
        pi, f = _rows(bandit.policy(params.bandit)), _rows(truth.prompt_probs)
        mu = np.asarray(params.bandit.success)
        binary = bandit.exact(params.bandit) if mu.min() >= 0 and mu.max() <= 1 else None
        rows = []
        for key in grid.to_dict(orient="records"):
            spec, G = specs[key["estimator"]], key["G"]
            row = {
                **key,
                "mean_V": float(f @ np.asarray(truth.V)),
                "theory_first_order": theory_mse.mse(truth, "oracle", G, B),
                "theory_mse_se": 0.0,
                "binary_theory_mse": math.nan
                if binary is None
                else exact.theory_columns(binary, spec, G, B, **shared)["theory_mse"],
            }
            try:
                th = graded_exact.instance_theory(spec, G, *law, pi, f, B, **shared)
                how = "graded count table"
            except validate.ConfigError as e:
                th, how = None, f"none: {e}"
            if th is None and str(spec) in theory_mse.PER_PROMPT:  # reads V(x): closed form
                rows.append(row | exact.theory_columns(truth, spec, G, B, **shared))
                continue
            nan = math.nan
            th = th or {"mse": nan, "bias_sq": nan, "best_scale": nan, "scaled_mse": nan}
            rows.append(
                row
                | {
                    "theory": how,
                    "theory_mse": th["mse"],
                    "theory_bias_sq": th["bias_sq"],
                    "theory_best_scale": th["best_scale"],
                    "theory_scaled_mse": th["scaled_mse"],
                }
            )
        return pd.DataFrame(rows)


def _rows(probs) -> np.ndarray:
    """Probabilities in float64, renormalised along the last axis (float32 rows sum to 1 only
    to ~1e-7)."""
    p = np.asarray(probs, np.float64)
    return p / p.sum(-1, keepdims=True)


def plain_B(truth, G: int, B: int, max_draws: int) -> int:
    """round(exact E[groups drawn per step]) (at least 1, at most every drawn group): the groups
    of plain sampling at the same mean responses per step as dynamic sampling."""
    d = dynamic.draws(dynamic.nondegenerate_prob(truth, G), B, max_draws)
    return min(max(1, round(d.batches * B)), B * max_draws)


def dynamic_columns(cell, m, truth, name: str) -> dict:
    """A dynamic-sampling row's Monte Carlo columns: measured draws (groups drawn / groups kept,
    a ratio of means with its delta-method CI), responses per step, the capped-step fraction and
    plain sampling with ``plain_B`` groups on the same draws (``plain_*``)."""
    ratio, ratio_se = dynamic_kernel.draws_per_kept_group(m)
    plain = engine.error_stats(m, err=f"plain/{name}/err", sq=f"plain/{name}/sq")
    target_sq = theory_mse.target_sq(truth, cell.B)
    return {
        "dynamic_sampling": True,
        "draws_per_kept_group": ratio,
        "draws_per_kept_group_ci_low": ratio - engine.Z95 * ratio_se,
        "draws_per_kept_group_ci_high": ratio + engine.Z95 * ratio_se,
        "kept_groups": float(m.mean("kept")),
        "responses_per_step": float(m.mean("drawn")) * cell.G,
        "cap_reached_frac": float(m.mean("capped")),
        "plain_B": cell.plain_B,
        "plain_mse": plain.mse,
        "plain_mse_se": plain.mse_se,
        "plain_cos": float(m.mean(f"plain/{name}/cos")),
        "plain_scaled_mse": grouped.best_scale(m, f"plain/{name}", target_sq)["scaled_mse"],
    }


def dynamic_theory(cfg, truth, spec, G: int) -> dict:
    """A dynamic-sampling key's exact columns, overriding the plain-sampling theory: the theory
    of :mod:`gpolab.theory.dynamic` and the exact MSE of plain sampling with :func:`plain_B`
    groups (``theory_plain_mse``)."""
    inst, shared = cfg.instance, shared_options(cfg)
    th = dynamic.columns(truth, spec, G, inst.B, inst.max_draws, **shared)
    table = exact.registry_table(spec, G, strict=False, length=1, **shared)
    return {
        **{k: v for k, v in th.items() if not k.startswith("theory_dyn_")},
        "theory": "dynamic sampling (gpolab)" if table.ok else f"none: {table.reason}",
        "theory_mse": th["theory_dyn_mse"],
        "theory_mse_se": 0.0,
        "theory_bias_sq": th["theory_dyn_bias_sq"],
        "theory_scaled_mse": th["theory_dyn_scaled_mse"],
        "theory_kappa": th["theory_dyn_kappa"],
        "theory_plain_mse": exact.mse(truth, table, G, plain_B(truth, G, inst.B, inst.max_draws)),
    }


def cap_warning(df) -> None:
    """One stderr line naming the settings where the cap was reached (verl raises there)."""
    hit = df[df["cap_reached_frac"] > 0].drop_duplicates("G")
    if hit.empty:
        return
    worst = hit.loc[hit["cap_reached_frac"].idxmax()]
    Gs = ",".join(map(str, hit["G"]))
    print(
        f"warning: dynamic sampling reached max_draws={int(worst['max_draws'])} generation "
        f"batches with fewer than B={int(worst['B'])} kept groups at G={Gs} "
        f"(up to {worst['cap_reached_frac']:.2%} of steps at G={int(worst['G'])}); verl raises "
        "ValueError there, gpolab trained on the groups it kept",
        file=sys.stderr,
    )


class Arithmetic(Grouped):
    """Cells do not depend on the policy (its weights are traced), so each G compiles once
    for every policy."""

    name = "arithmetic"
    REPORT = tuple(
        (
            "policy estimator G mse mse_ci_low mse_ci_high theory_mse theory_mse_se "
            "theory_first_order degenerate_frac seconds"
        ).split()
    )
    KEYS = ("policy", *Grouped.KEYS)

    def contexts(self, cfg) -> tuple:
        return cfg.instance.policy

    def setup(self, cfg):
        """Pre-training (all policies) once, the truth of a policy once, when first needed."""
        inst = cfg.instance
        policies = functools.cache(lambda: arithmetic.make(inst))
        truth_of = jax.jit(arithmetic.exact)

        @functools.cache
        def arithmetic_setup(policy):
            a = policies()[policy]
            truth = truth_of(a)
            return (a.policy, truth, a.questions), truth

        return arithmetic_setup

    def cell(self, cfg, names, G, mode):
        return grouped.ArithmeticCell(
            names,
            G,
            cfg.instance.per_seed,
            cfg.scale,
            cfg.ddof,
            mode,
            norm_length=self.norm_length(cfg),
            lengths=cfg.instance.lengths,
        )

    def error(self, cfg):
        return grouped.arithmetic_error

    def chunk(self, cfg) -> int:
        return grouped.arithmetic_chunk()

    def response_length(self, cfg, params):
        return arithmetic.response_length(params)

    def columns(self, cfg, truth, context) -> dict:
        return {"env": self.name, "kind": f"filler{cfg.instance.filler}", "policy": context}


class Tree:
    """K thoughts × M continuations; the tree lab's cell (same settings, same numbers as
    ``gpolab tree``); the estimators are the tree's variants."""

    name = "tree"
    DRAWS = ""
    ESTIMATORS = ("thought-std",)
    REPORT = (
        "variant K M mse mse_group variance corr degenerate_frac theory_degenerate_frac seconds"
    ).split()
    KEYS = ("variant", "K", "M")
    COLUMNS = TREE_COLUMNS

    def validate(self, cfg) -> None:
        check_common(cfg)
        for v in cfg.estimators:
            validate.choice("estimators", v, estimators.TREE_VARIANTS)

    def bounds(self, cfg, ids: list[dict]) -> list[dict]:
        return [self.bound(cfg, rid) for rid in ids]

    def row_ids(self, cfg) -> list[dict]:
        inst = cfg.instance
        return [
            {"variant": v, "K": K, "M": M} for v in cfg.estimators for K in inst.K for M in inst.M
        ]

    def bound(self, cfg, rid: dict) -> dict:
        """mean-only has no std, so no eps; ddof still sets the group target."""
        reads = ("ddof",) if rid["variant"] == "mean-only" else ("ddof", "eps")
        return {o: getattr(cfg, o) for o in reads}

    def setup(self, cfg):
        params = tree.make(cfg.instance)
        truth = tree.exact(params)
        return lambda _: ((params, truth), truth)

    def units(self, cfg, ids: list[dict], pending: set[int]):
        inst = cfg.instance
        for i in sorted(pending):
            K, M, variant = ids[i]["K"], ids[i]["M"], ids[i]["variant"]
            yield (
                [i],
                None,
                tree_kernel.tree_cell(
                    K, M, variant, cfg.ddof, model=inst.model, a=inst.beta_a, b=inst.beta_b
                ),
            )

    def prepare(self, cfg, cell, truth):
        return cell

    def error(self, cfg):
        return tree_kernel.tree_error

    def chunk(self, cfg) -> int:
        return engine.AUTO

    def unit_key(self, key, context, cell):
        """``gpolab tree``'s stream for the same (K, M) (its variants share draws)."""
        return engine.cell_key(key, "tree", cell.K, cell.M)

    def grid(self, cfg) -> pd.DataFrame:
        return pd.DataFrame(self.row_ids(cfg), columns=self.KEYS)

    def theory(self, cfg, grid: pd.DataFrame, setup) -> pd.DataFrame:
        """P(all K thought values are equal) of every (K, M) (the exact MSE is the tree lab's)."""
        (params, _), _ = setup(None)
        keys = grid.to_dict(orient="records")
        return pd.DataFrame(
            [
                {
                    **k,
                    "theory_degenerate_frac": theory_tree.degenerate_prob(params, k["K"], k["M"]),
                    "theory_mse": math.nan,
                }
                for k in keys
            ]
        )

    def monte_carlo(self, cfg, cell, m, truth, context) -> list[dict]:
        stats = engine.error_stats(m)
        cond_var = float(m.mean("cond_var"))
        cov = float(m.mean("at") - m.mean("a") * m.mean("t"))
        va = float(m.mean("aa") - m.mean("a") ** 2)
        vt = float(m.mean("tt") - m.mean("t") ** 2)
        return [
            {
                "env": "tree",
                "kind": cfg.instance.model,
                "estimator": "tree",
                "variant": cell.variant,
                "G": None,
                "K": cell.K,
                "M": cell.M,
                "B": None,
                "n_seeds": m.n,
                **stats_row(stats),
                "variance": cond_var,  # E[Var(Â_k | thoughts)]
                "bias_sq": stats.mse - cond_var,  # E[(E[Â_k | thoughts] − A_k)²]
                "mse_group": float(m.mean("sq_group")),
                "corr": cov / math.sqrt(va * vt) if va > 0 and vt > 0 else math.nan,
                "leaves": cell.K * cell.M,
                "degenerate_frac": float(m.mean("degenerate")),
            }
        ]

    def report_columns(self, cfg) -> list[str]:
        return list(self.REPORT)

    def label(self, row: dict) -> str:
        return f"{row['variant']} K={row['K']} M={row['M']}: mse={row['mse']:.4g}"

    def finish(self, cfg, df) -> None:
        """Nothing to add."""


ENVS = {"bandit": Bandit(), "tree": Tree(), "arithmetic": Arithmetic(), "graded": Graded()}


def get(name: str):
    """The sweep's object of env ``name``; an unknown name's object only validates (one error
    naming the allowed envs)."""
    return ENVS.get(name, UNKNOWN)


class Unknown:
    """Not an env: ``validate`` says which are."""

    def validate(self, cfg) -> None:
        validate.choice("env", cfg.env, tuple(ENVS))


UNKNOWN = Unknown()
