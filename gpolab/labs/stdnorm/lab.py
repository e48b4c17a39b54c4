"""The std-normalization lab (``gpolab train``): SGD / Adam training of GRPO against REINFORCE on
the log-linear bandit.

theory §7; gpolab's reconstruction of the abstract of [N] arXiv 2601.23135 (its body was not
available).  Two regimes, both with exact diagnostics at every iterate:

* ``admissible`` — the premise of the reconstructed gain law: every method at its theoretically
  admissible step
  from the curvature law ‖H_x‖ ≤ cB²σ_x (:func:`gpolab.theory.curvature.admissible_steps`):
  GRPO at η = N/(cB²κ), REINFORCE (RLOO) at η = 1/L = N/(cB²σ_max κ) with σ_max = 1/2, and
  REINFORCE told the current smoothness constant (η_t = N/(cB²κ σ_max(θ_t)), an oracle; with equal
  σ_x across prompts it coincides with GRPO — the control).  Every ``rho`` and the equal-σ
  control, exact gradients (G = ∞) and ``gain_G`` sampled groups.
* ``tuned`` — every estimator × G (and G = ∞) × optimizer at its best step size on a log grid
  (vmapped over seeds and step sizes in one jit per configuration), for the first ``rho`` and
  the control.

One unit of work is one compiled training call (every step size × seed of one configuration) or
one entry of the finite-sample bias table; the store keeps each unit's raw per-seed curves under
a key of exactly the settings it depends on (eps and ddof only where the run reads them), so
the analysis settings (``target``) and the other grids never recompute anything.

Tables: ``summary`` (one row per run at its best step size: iterations to ``target``, final
gap, σ̄ and the mean pairwise gradient cosine along the trajectory), ``gain`` (GRPO over
REINFORCE, measured with a bootstrap CI against the predicted σ_max/σ̄ and √(σ̄/σ_max)),
``finite_sample`` (bias of E ĝ_grpo at θ₀ for eps ∈ {1e-4, 1e-8}, ddof ∈ {0, 1}), ``curves``
(seed-mean curves at the best step size, with the level gain along training) and ``phases``
(the heuristic phase boundaries of that gain).
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from typing import ClassVar

import jax
import numpy as np

from gpolab import configs, envs, validate
from gpolab.configs import borrow, option
from gpolab.engine import train
from gpolab.envs import loglinear
from gpolab.kit.store import cell_key as store_key
from gpolab.kit.store import config_hash, resume, resumed
from gpolab.kit.tables import table_text
from gpolab.labs.groupsize import lab as groupsize  # B·G = N training on its envs
from gpolab.labs.stdnorm import arcsin, plots
from gpolab.labs.stdnorm.analysis import curve_id, curve_table, gain_table, phase_table, summarize
from gpolab.theory import curvature
from gpolab.validate import ConfigError

NAME = "stdnorm"
TABLES = ("summary", "gain", "finite_sample", "curves", "phases", *arcsin.TABLES)
# one env: the lab builds loglinear.Instance (rho, align, block) and its trainer reads that
# truth's g_global and one_minus_V, which no Env capability names (the registry checks the name)
NEEDS = envs.Needs(("init",), ("rho", "align", "block"), only=("loglinear",))
ENVS = envs.names(NEEDS)
REGIMES = ("admissible", "tuned", "arcsin")  # arcsin: labs/stdnorm_arcsin.py (Prop. 13)
LOGLINEAR = {"env": ("loglinear",)}
TUNED = {**LOGLINEAR, "regimes": ("tuned",)}
ADMISSIBLE = {**LOGLINEAR, "regimes": ("admissible",)}
ARCSIN = {**LOGLINEAR, "regimes": ("arcsin",)}
INSTANCE = ("env", "prompts", "responses", "block", "align", "seed")  # what every unit reads
BIAS_GRID = tuple((ddof, eps) for ddof in (0, 1) for eps in (1e-4, 1e-8))
CURVES = ("J", "sigma_bar", "sigma_max", "sigma_eff", "cos", "gbar", "zero_frac")


@dataclasses.dataclass(frozen=True)
class Config(configs.Config):
    """Everything a training run needs (flags of ``gpolab train``)."""

    LAB: ClassVar[str] = NAME
    QUICK: ClassVar[dict] = {
        "seeds": 4,
        "steps": 60,
        "adm_steps": 500,
        "adm_seeds": 4,
        "G": (8,),
        "estimators": ("grpo", "loo"),
        "optimizers": ("sgd",),
        "rho": (0.0, 0.9),
        "bias_seeds": 256,
        "lr_grid": "10:1000:3",
        "adam_lr_grid": "0.03:0.3:2",
        "gain_G": (32,),
    }

    env: str = option(
        "loglinear",
        "loglinear (this lab; B*G = N training on bandit or arithmetic: gpolab groupsize --train)",
    )
    regimes: tuple[str, ...] = option(
        REGIMES[:2],
        "comma list of admissible (curvature-law steps), tuned (best step of a grid), arcsin "
        "(Prop. 13 and Lemma 11)",
        when=LOGLINEAR,
    )
    estimators: tuple[str, ...] = option(
        ("grpo", "mean", "loo", "grpo[scale=batch]"),
        "tuned regime: comma list of estimator specs that train (`gpolab estimators`; G = inf "
        "runs for those whose limit is known)",
        when=TUNED,
    )
    G: tuple[int, ...] = option(
        (2, 8),
        "tuned regime (and bias table): comma list of group sizes (G = inf is added)",
        when=LOGLINEAR,
    )
    optimizers: tuple[str, ...] = option(
        ("sgd", "adam"), "tuned regime: comma list of sgd, adam", when=TUNED
    )
    steps: int = option(200, "tuned-regime steps", when=TUNED)
    seeds: int = option(16, "tuned-regime seeds (training runs per step size)", when=TUNED)
    lr_grid: str = option(
        "1:10000:5", "tuned SGD step sizes: lo:hi:n (n log-spaced) or a comma list", when=TUNED
    )
    adam_lr_grid: str = option("0.01:1:3", "tuned Adam step sizes (as --lr-grid)", when=TUNED)
    adm_steps: int = option(800, "admissible-regime steps", when=ADMISSIBLE)
    adm_seeds: int = option(16, "admissible-regime seeds (sampled G)", when=ADMISSIBLE)
    curv_const: float = option(4.0, "c in L_x = cB^2 sigma_x (4: the bound)", when=ADMISSIBLE)
    rho: tuple[float, ...] = option(
        (0.0, 0.3, 0.6, 0.9),
        "comma list of rho, the shared-block "
        "weight (first = main: tuned regime, control, bias table)",
        when=LOGLINEAR,
    )
    control: bool = option(
        True, "also run the equal-sigma control (identical prompts)", when=LOGLINEAR
    )
    target: float = option(0.9, "target J for iterations-to-target (analysis only)", when=LOGLINEAR)
    gain_G: tuple[int, ...] = option(
        (8, 32),
        "admissible regime (and bias table): comma list of sampled G (G = inf always runs)",
        when=LOGLINEAR,
    )
    eps: float = option(
        1e-4,
        "grpo eps added to the std (and to s in the oracle step eta/(s + eps))",
        when=LOGLINEAR,
    )
    ddof: int = option(1, "grpo std ddof, 0 or 1", when=LOGLINEAR)
    bias_seeds: int = option(4096, "seeds of the finite-sample bias table", when=LOGLINEAR)
    prompts: int = borrow(loglinear.Instance, "prompts", when=LOGLINEAR)
    responses: int = borrow(loglinear.Instance, "responses", when=LOGLINEAR)
    block: int = borrow(loglinear.Instance, "block", when=LOGLINEAR)
    align: float = borrow(loglinear.Instance, "align", when=LOGLINEAR, default=1.0)
    arcsin_G: tuple[int, ...] = option(
        (2, 4, 8, 16, 32, 64, 128, 256),
        "arcsin regime: comma list of G of the direction and Lemma 11 table",
        when=ARCSIN,
    )
    arcsin_draws: int = option(2000, "arcsin regime: Lemma 11 draws per G", when=ARCSIN)
    arcsin_rho: float = option(
        0.0, "arcsin regime: rho of its instance (0: no shared block)", when=ARCSIN
    )
    arcsin_align: float = option(
        0.5,
        "arcsin regime: align of its instance (below 1, so that "
        "grad E[2 arcsin sqrt V] and grad E V differ)",
        when=ARCSIN,
    )
    seed: int = option(0, "master PRNG seed (instance and training keys)")
    out: str = option("results/train", "output folder (tables, config.toml, figures)", key=False)

    def validate(self) -> None:
        if self.env in groupsize.ENVS:
            raise ConfigError(
                f"env: got {self.env!r}; allowed: loglinear (for B*G = N training on {self.env} "
                f"use gpolab groupsize --train --env {self.env})"
            )
        validate.choice("env", self.env, ENVS)
        for r in self.regimes:
            validate.choice("regimes", r, REGIMES)
        validate.integers("G", self.G, 2)
        validate.group_sizes("G", self.G)
        for e in self.estimators:
            for G in self.G:
                try:
                    train.Run(e, G, ddof=self.ddof).validate()
                except ConfigError as err:  # name this config's field
                    raise ConfigError(re.sub(r"^estimator:", "estimators:", str(err))) from None
        for o in self.optimizers:
            validate.choice("optimizers", o, train.OPTIMIZERS)
        for name in ("steps", "seeds", "adm_steps", "adm_seeds"):
            validate.integer(name, getattr(self, name), 1)
        step_sizes("lr_grid", self.lr_grid)
        step_sizes("adam_lr_grid", self.adam_lr_grid)
        validate.real("curv_const", self.curv_const, low=0.0, open_low=True)
        for r in self.rho:
            validate.real("rho", r, 0.0, 1.0)
        validate.real("target", self.target, 0.0, 1.0, open_low=True)
        validate.integers("gain_G", self.gain_G, 2)
        validate.real("eps", self.eps, low=0.0)
        validate.choice("ddof", self.ddof, (0, 1))
        validate.integer("bias_seeds", self.bias_seeds, 2)
        validate.integers("arcsin_G", self.arcsin_G, 2)
        validate.integer("arcsin_draws", self.arcsin_draws, 2)
        validate.real("arcsin_rho", self.arcsin_rho, 0.0, 1.0)
        validate.real("arcsin_align", self.arcsin_align, 0.0, 1.0)
        instance(self, self.rho[0], False).validate()  # prompts, responses, block, align
        validate.integer("seed", self.seed, 0)


def step_sizes(name: str, text: str) -> np.ndarray:
    """The step sizes of an lr grid field: ``lo:hi:n`` (n log-spaced values from lo to hi) or a
    comma list of positive numbers (:func:`gpolab.configs.coerce_list`)."""
    allowed = "lo:hi:n with 0 < lo <= hi and n >= 1, or a comma list of positive numbers"
    if ":" in text:
        parts = text.split(":")
        try:
            lo, hi, n = float(parts[0]), float(parts[1]), int(parts[2])
        except (ValueError, IndexError):
            lo = hi = n = None
        if len(parts) != 3 or lo is None or not 0 < lo <= hi < math.inf or n < 1:
            raise ConfigError(f"{name}: got {text!r}; allowed: {allowed}")
        return np.geomspace(lo, hi, n)
    values = np.asarray(configs.coerce_list(name, text, float))
    if np.any(values <= 0) or not np.all(np.isfinite(values)):
        raise ConfigError(f"{name}: got {text!r}; allowed: {allowed}")
    return values


# ----------------------------------------------------------------------------- units of work


@dataclasses.dataclass(frozen=True)
class Unit:
    """One compiled training call: every step size × seed of one configuration."""

    regime: str
    setting: str  # "rho=0.3" or "control"
    rho: float
    control: bool  # equal-σ instance
    method: str  # admissible: grpo, reinforce, reinforce-iterate; tuned: the estimator
    run: object  # gpolab.engine.train.Run
    lrs: tuple[float, ...]
    seeds: int  # seeds actually run (1 for the deterministic exact mode)
    lr_grid: str | None  # the grid field (tuned) or None (admissible: one step size)


def _unique(values) -> list:
    return list(dict.fromkeys(values))


def settings(cfg: Config) -> list[tuple[str, float, bool]]:
    """(label, ρ, equal-σ) of every instance: each ``rho`` and the control at the first ρ."""
    found = [(f"rho={r:g}", r, False) for r in _unique(cfg.rho)]
    return found + [("control", cfg.rho[0], True)] * cfg.control


def admissible_runs(cfg: Config, rho: float) -> list[tuple[str, str, str, float]]:
    """(method, estimator, step rule, η) of the admissible regime at ρ."""
    eta = curvature.admissible_steps(cfg.prompts, rho, c=cfg.curv_const)
    return [
        ("grpo", "grpo", "constant", eta["grpo"]),
        ("reinforce", "loo", "constant", eta["reinforce"]),
        ("reinforce-iterate", "loo", "curvature", eta["reinforce_iterate"]),
    ]


def train_units(cfg: Config) -> list[Unit]:
    """Every training call, in table order (per instance: admissible, then tuned)."""
    units = []
    for label, rho, equal in settings(cfg):
        if "admissible" in cfg.regimes:
            for G in (train.EXACT, *_unique(cfg.gain_G)):
                n = 1 if G == train.EXACT else cfg.adm_seeds
                for method, e, step, lr in admissible_runs(cfg, rho):
                    run = train.Run(e, G, "sgd", cfg.adm_steps, cfg.ddof, step)
                    units.append(Unit("admissible", label, rho, equal, method, run, (lr,), n, None))
        if "tuned" in cfg.regimes and (equal or rho == cfg.rho[0]):
            for opt in _unique(cfg.optimizers):
                grid = cfg.lr_grid if opt == "sgd" else cfg.adam_lr_grid
                lrs = tuple(float(x) for x in step_sizes(f"{opt} lr grid", grid))
                for G in (*_unique(cfg.G), train.EXACT):
                    n = 1 if G == train.EXACT else cfg.seeds
                    for e in _unique(cfg.estimators):
                        run = train.Run(e, G, opt, cfg.steps, cfg.ddof)
                        if G == train.EXACT and train.why_not(run.estimator, G):
                            continue  # no known G = ∞ limit: finite G only
                        units.append(
                            Unit("tuned", label, rho, equal, run.estimator, run, lrs, n, grid)
                        )
    return units


def bias_Gs(cfg: Config) -> list[int]:
    """G of the bias table: every G and gain_G (none with the arcsin regime alone)."""
    return sorted({*cfg.G, *cfg.gain_G}) if set(cfg.regimes) - {"arcsin"} else []


def cells(cfg: Config) -> int:
    """Units of work: training calls, bias-table entries and the arcsin regime's units."""
    own = len(arcsin.units(cfg)) if "arcsin" in cfg.regimes else 0
    return len(train_units(cfg)) + len(bias_Gs(cfg)) * len(BIAS_GRID) + own


def unit_settings(cfg: Config, unit: Unit) -> dict:
    """Every setting the curves of ``unit`` depend on (its cache key): the instance, the run,
    its step sizes and seeds, and of eps and ddof those the run reads (the others None)."""
    run, reads = unit.run, unit.run.options()
    stored = train.stored_name(run.estimator)  # keys stored before specs stay found
    found = dict(rho=unit.rho, control=unit.control, estimator=stored, G=run.G)
    found |= dict(optimizer=run.optimizer, steps=run.steps, step_rule=run.step, lrs=list(unit.lrs))
    found["n_seeds"] = unit.seeds
    found |= {k: getattr(cfg, k) if k in reads else None for k in ("eps", "ddof")}
    return {k: getattr(cfg, k) for k in INSTANCE} | found


def bias_settings(cfg: Config, G: int, ddof: int, eps: float) -> dict:
    """The settings of one bias-table entry (GRPO at θ₀ of the first ρ's instance)."""
    found = dict(rho=cfg.rho[0], estimator="grpo", G=G, ddof=ddof, eps=eps, n_seeds=cfg.bias_seeds)
    return {k: getattr(cfg, k) for k in INSTANCE} | found


def cell_key(kind: str, settings: dict) -> str:
    """The store key of a ``train`` or ``bias`` unit with ``settings``."""
    return store_key(NAME, unit=kind, **settings)


def cell_keys(cfg: Config) -> tuple[list[str], list[str]]:
    """Store keys of every training unit (:func:`train_units` order) and bias entry."""
    train_keys = [cell_key("train", unit_settings(cfg, u)) for u in train_units(cfg)]
    bias_keys = [cell_key("bias", bias_settings(cfg, G, d, e)) for G, d, e in bias_entries(cfg)]
    return train_keys, bias_keys


def bias_entries(cfg: Config) -> list[tuple[int, int, float]]:
    """(G, ddof, eps) of every entry of the finite-sample bias table."""
    return [(G, ddof, eps) for G in bias_Gs(cfg) for ddof, eps in BIAS_GRID]


def instance(cfg: Config, rho: float, equal: bool) -> loglinear.Instance:
    """The log-linear instance at (ρ, equal-σ) (its seed is ``seed``)."""
    return configs.borrowed(loglinear.Instance, cfg, rho=rho, equal=equal, instance_seed=cfg.seed)


# ----------------------------------------------------------------------------- running


class _Context:
    """What computing a unit needs, built once and only when a unit is computed."""

    def __init__(self, cfg: Config, key):
        self.cfg, self.key = cfg, key
        self.env = envs.get(cfg.env)
        self.instances = {}

    def params(self, rho: float, equal: bool):
        """The log-linear instance at (ρ, equal-σ), drawn once."""
        if (rho, equal) not in self.instances:
            self.instances[rho, equal] = loglinear.make(instance(self.cfg, rho, equal))
        return self.instances[rho, equal]

    def optimum(self, unit: Unit) -> float:
        """J* of the unit's instance."""
        return self.env.optimum(self.params(unit.rho, unit.control))


def _raw_rows(res: dict, lrs) -> list[dict]:
    """One store row per (step size, seed) with that run's curves as arrays."""
    L, S = res["J"].shape[:2]
    return [
        {"lr_index": i, "lr": lrs[i], "seed": s, **{k: res[k][i, s] for k in CURVES}}
        for i in range(L)
        for s in range(S)
    ]


def _raw_arrays(df) -> dict:
    """:func:`_raw_rows` back to (L, S, ·) arrays (the float32 values bit for bit)."""
    L, S = int(df["lr_index"].max()) + 1, int(df["seed"].max()) + 1
    return {k: np.stack(df[k].to_list()).reshape(L, S, -1) for k in CURVES}


def train_unit(ctx: _Context, unit: Unit) -> tuple[dict, str]:
    """The curves of one unit, computed, and its progress note."""
    params = ctx.params(unit.rho, unit.control)
    res = train.train(unit.run, ctx.env, ctx.key, params, unit.lrs, unit.seeds, ctx.cfg.eps)
    G = "inf" if unit.run.G == train.EXACT else unit.run.G
    return res, f"{unit.regime} {unit.setting} {unit.run.optimizer} G={G} {unit.method}"


def bias_row(ctx: _Context, G: int, ddof: int, eps: float) -> dict:
    """One row of the finite-sample table, computed."""
    cfg = ctx.cfg
    start = time.perf_counter()
    params = ctx.params(cfg.rho[0], False)
    key = jax.random.fold_in(ctx.key, 1000 + G)
    options = dict(seeds=cfg.bias_seeds, eps=eps, ddof=ddof)
    r = train.finite_sample_bias(key, ctx.env, params, ctx.env.init(params), G, **options)
    row = {"G": G, "ddof": ddof, "eps": eps, **r, **bias_settings(cfg, G, ddof, eps)}
    row["seconds"] = time.perf_counter() - start
    return row


def train_curves(cfg: Config, ctx: _Context, store, progress) -> list[tuple[dict, float]]:
    """(curves, seconds) of every training unit, resumed from ``store``: a computed unit's
    curves as trained, a stored one's from its rows."""
    units, fresh, notes = train_units(cfg), {}, []

    def compute(i: int) -> list[dict]:
        start = time.perf_counter()
        res, note = train_unit(ctx, units[i])
        fresh[i] = res, time.perf_counter() - start
        notes.append(note)
        return _raw_rows(res, units[i].lrs)

    keys = cell_keys(cfg)[0]
    df = resume(
        store,
        keys,
        compute,
        config_hash=config_hash(cfg),
        progress=progress,
        label=lambda rows: notes[-1],  # the note compute appended
    )
    if store is None:
        return [fresh[i] for i in range(len(units))]
    stored = dict(tuple(df.groupby("cell_key", sort=False)))
    return [
        fresh.get(i) or (_raw_arrays(stored[k]), float(stored[k]["wall_s"].iloc[0]))
        for i, k in enumerate(keys)
    ]


def bias_table(cfg: Config, ctx: _Context, store, progress):
    """The finite-sample table, one row per :func:`bias_entries`, resumed from ``store``."""
    entries, notes = bias_entries(cfg), []

    def compute(i: int) -> list[dict]:
        G, ddof, eps = entries[i]
        notes.append(f"bias G={G} ddof={ddof} eps={eps:g}")
        return [bias_row(ctx, G, ddof, eps)]

    keys = cell_keys(cfg)[1]
    return resumed(cfg, store, keys, compute, progress=progress, label=lambda rows: notes[-1])


def summary_row(cfg: Config, unit: Unit, res: dict, seconds: float, optimum: float) -> dict:
    """The summary row of one unit at its best step size (every setting a column)."""
    s = unit_settings(cfg, unit)
    row = {
        "regime": unit.regime,
        "setting": unit.setting,
        "rho": unit.rho,
        "prompts": cfg.prompts,
        "control": unit.control,
        "method": unit.method,
        "estimator": unit.run.estimator,
        "step_rule": s["step_rule"],
        "optimizer": s["optimizer"],
        "G": math.inf if unit.run.G == train.EXACT else unit.run.G,
        **summarize({**res, "lrs": np.asarray(unit.lrs)}, cfg.target, optimum),
    }
    row.update({k: s[k] for k in "env responses block align seed steps n_seeds eps ddof".split()})
    row["lr_grid"] = unit.lr_grid
    row["curv_const"] = cfg.curv_const if unit.regime == "admissible" else None
    row["target"] = cfg.target
    row["seconds"] = seconds
    return row


def run(cfg: Config, key=None, *, store=None, progress=None) -> dict:
    """The lab protocol's entry: ``{summary, gain, finite_sample, curves, phases}`` of the
    admissible and tuned regimes and ``{arcsin_direction}`` of the arcsin regime
    (empty tables for a regime that did not run), every unit resumed from ``store``
    (:func:`gpolab.kit.store.resume`)."""
    cfg.validate()
    import pandas as pd

    key = jax.random.key(cfg.seed) if key is None else key
    found = {name: pd.DataFrame() for name in TABLES}
    if train_units(cfg):
        found.update(training_tables(cfg, key, store, progress))
    if "arcsin" in cfg.regimes:
        found.update(arcsin.tables(cfg, jax.random.fold_in(key, 7919), store, progress))
    return found


def training_tables(cfg: Config, key, store, progress) -> dict:
    """The admissible and tuned regimes' tables (see :func:`run`)."""
    import pandas as pd

    ctx = _Context(cfg, key)
    rows, curves = [], {}
    for unit, (res, seconds) in zip(
        train_units(cfg), train_curves(cfg, ctx, store, progress), strict=True
    ):
        row = summary_row(cfg, unit, res, seconds, ctx.optimum(unit))
        rows.append(row)
        curves[curve_id(row)] = {k: v[row["lr_index"]] for k, v in res.items()}
    summary = pd.DataFrame(rows).astype({"ddof": "Int64"})
    bias = bias_table(cfg, ctx, store, progress)
    curve_df = curve_table(summary, curves)
    return {
        "summary": summary,
        "gain": gain_table(summary, curves, cfg.target),
        "finite_sample": bias,
        "curves": curve_df,
        "phases": phase_table(curve_df),
    }


# ----------------------------------------------------------------------------- analysis
# gpolab.labs.stdnorm.analysis: curves → summary, gain, curve and phase tables (imported above)


# ----------------------------------------------------------------------------- output

SUMMARY_COLUMNS = (
    "regime setting optimizer G method best_lr iters final_J gap_q50 sigma_bar cos_mean zero_frac"
).split()
GAIN_REPORT = (
    "comparison setting optimizer G reinforce iters_reinforce iters_grpo gain gain_ci_low "
    "gain_ci_high pred_gain gnorm_ratio pred_gnorm_ratio cos_mean"
).split()
BIAS_REPORT = (
    "G ddof eps rel_bias rel_bias_noise cosine norm_ratio zero_frac zero_frac_theory"
).split()


def report(cfg: Config, tables: dict) -> str:
    if not len(tables["summary"]):
        return arcsin.report(tables)
    return table_text(tables["summary"], SUMMARY_COLUMNS)


def notes(cfg: Config, tables: dict) -> str:
    """The gain table, the finite-sample bias table and the arcsin regime's tables."""
    parts = [table_text(tables["gain"], GAIN_REPORT)] if len(tables["gain"]) else []
    if len(tables["finite_sample"]):
        parts.append(table_text(tables["finite_sample"], BIAS_REPORT))
    if len(tables["summary"]) and len(tables.get("arcsin_direction", ())):
        parts.append(arcsin.report(tables))
    return "\n\n".join(parts)


def figures(tables: dict) -> dict:
    """The training curves, the gain figure (when a comparison ran), the phase figure and the
    arcsin figure (when that regime ran)."""
    found = {}
    if len(tables["summary"]):
        found["train_curves.png"] = plots.curves_figure
    if len(tables["gain"]):
        found["train_gain.png"] = plots.gain_figure
    if len(tables["summary"]) and plots.phase_selection(tables["summary"]) is not None:
        found["train_phases.png"] = plots.phases_figure
    if len(tables.get("arcsin_direction", ())):
        found["arcsin.png"] = plots.arcsin_figure
    return found
