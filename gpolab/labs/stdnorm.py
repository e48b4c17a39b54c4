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
import time
from typing import ClassVar

import numpy as np

from gpolab import configs, validate
from gpolab.configs import option
from gpolab.validate import ConfigError

NAME = "stdnorm"
TABLES = ("summary", "gain", "finite_sample", "curves", "phases")
ENVS = ("loglinear",)
GROUPSIZE_ENVS = ("bandit", "arithmetic")  # B·G = N training lives with the group-size lab
REGIMES = ("admissible", "tuned")
LOGLINEAR = {"env": ("loglinear",)}
TUNED = {**LOGLINEAR, "regimes": ("tuned",)}
ADMISSIBLE = {**LOGLINEAR, "regimes": ("admissible",)}
INSTANCE = ("env", "prompts", "responses", "block", "align", "seed")  # what every unit reads
BIAS_GRID = tuple((ddof, eps) for ddof in (0, 1) for eps in (1e-4, 1e-8))
CURVES = ("J", "sigma_bar", "sigma_max", "sigma_eff", "cos", "gbar", "zero_frac")


@dataclasses.dataclass(frozen=True)
class Config:
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

    env: str = option("loglinear", "loglinear (this lab; B*G = N training on bandit or "
                      "arithmetic: gpolab groupsize --train)")  # fmt: skip
    regimes: tuple[str, ...] = option(REGIMES, "comma list of admissible (curvature-law steps), "
                                      "tuned (best step of a grid)", when=LOGLINEAR)  # fmt: skip
    estimators: tuple[str, ...] = option(
        ("grpo", "mean", "loo", "grpo[scale=batch]"),
        "tuned regime: comma list of estimator specs that train (`gpolab estimators`; G = inf "
        "runs for those whose limit is known)", when=TUNED,
    )  # fmt: skip
    G: tuple[int, ...] = option(
        (2, 8), "tuned regime (and bias table): comma list of group sizes (G = inf is added)",
        when=LOGLINEAR,
    )  # fmt: skip
    optimizers: tuple[str, ...] = option(("sgd", "adam"), "tuned regime: comma list of sgd, adam",
                                         when=TUNED)  # fmt: skip
    steps: int = option(200, "tuned-regime steps", when=TUNED)
    seeds: int = option(16, "tuned-regime seeds (training runs per step size)", when=TUNED)
    lr_grid: str = option("1:10000:5", "tuned SGD step sizes: lo:hi:n (n log-spaced) or a comma "
                          "list", when=TUNED)  # fmt: skip
    adam_lr_grid: str = option("0.01:1:3", "tuned Adam step sizes (as --lr-grid)", when=TUNED)
    adm_steps: int = option(800, "admissible-regime steps", when=ADMISSIBLE)
    adm_seeds: int = option(16, "admissible-regime seeds (sampled G)", when=ADMISSIBLE)
    curv_const: float = option(4.0, "c in L_x = cB^2 sigma_x (4: the bound)", when=ADMISSIBLE)
    rho: tuple[float, ...] = option((0.0, 0.3, 0.6, 0.9), "comma list of rho, the shared-block "
                                    "weight (first = main: tuned regime, control, bias table)",
                                    when=LOGLINEAR)  # fmt: skip
    control: bool = option(True, "also run the equal-sigma control (identical prompts)",
                           when=LOGLINEAR)  # fmt: skip
    target: float = option(0.9, "target J for iterations-to-target (analysis only)",
                           when=LOGLINEAR)  # fmt: skip
    gain_G: tuple[int, ...] = option(
        (8, 32), "admissible regime (and bias table): comma list of sampled G (G = inf always "
        "runs)", when=LOGLINEAR,
    )  # fmt: skip
    eps: float = option(1e-4, "grpo eps added to the std (and to s in the oracle step "
                        "eta/(s + eps))", when=LOGLINEAR)  # fmt: skip
    ddof: int = option(1, "grpo std ddof, 0 or 1", when=LOGLINEAR)
    bias_seeds: int = option(4096, "seeds of the finite-sample bias table", when=LOGLINEAR)
    prompts: int = option(32, "prompts N", when=LOGLINEAR)
    responses: int = option(256, "responses per prompt (>= 256)", when=LOGLINEAR)
    block: int = option(8, "feature block size k", when=LOGLINEAR)
    align: float = option(1.0, "reward alignment with features", when=LOGLINEAR)
    seed: int = option(0, "master PRNG seed (instance and training keys)")
    out: str = option("results/train", "output folder (tables, config.toml, figures)", key=False)

    def replace(self, **changes) -> Config:
        return configs.replace(self, **changes)

    def validate(self) -> None:
        if self.env in GROUPSIZE_ENVS:
            raise ConfigError(
                f"env: got {self.env!r}; allowed: loglinear (for B*G = N training on {self.env} "
                f"use gpolab groupsize --train --env {self.env})"
            )
        validate.choice("env", self.env, ENVS)
        from gpolab import train  # deferred: jax (`gpolab train --help` stays fast)

        for r in self.regimes:
            validate.choice("regimes", r, REGIMES)
        validate.integers("G", self.G, 2)
        validate.group_sizes("G", self.G)
        for e in self.estimators:
            for G in self.G:
                try:
                    train.Run(e, G, ddof=self.ddof).validate()
                except ConfigError as err:  # name this config's field
                    text = str(err)
                    raise ConfigError(
                        "estimators" + text[len("estimator") :]
                        if text.startswith("estimator:")
                        else text
                    ) from None
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
        validate.integer("prompts", self.prompts, 1)
        validate.integer("responses", self.responses, 256)
        validate.integer("block", self.block, 1)
        validate.real("align", self.align, 0.0, 1.0)
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
    run: object  # gpolab.train.Run
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
    from gpolab.theory import curvature

    eta = curvature.admissible_steps(cfg.prompts, rho, c=cfg.curv_const)
    return [
        ("grpo", "grpo", "constant", eta["grpo"]),
        ("reinforce", "loo", "constant", eta["reinforce"]),
        ("reinforce-iterate", "loo", "curvature", eta["reinforce_iterate"]),
    ]


def train_units(cfg: Config) -> list[Unit]:
    """Every training call, in table order (per instance: admissible, then tuned)."""
    from gpolab import train

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
                        units.append(Unit("tuned", label, rho, equal, run.estimator, run, lrs,
                                          n, grid))  # fmt: skip
    return units


def bias_Gs(cfg: Config) -> list[int]:
    return sorted({*cfg.G, *cfg.gain_G})


def cells(cfg: Config) -> int:
    """Units of work: training calls and bias-table entries."""
    return len(train_units(cfg)) + len(bias_Gs(cfg)) * len(BIAS_GRID)


def unit_settings(cfg: Config, unit: Unit) -> dict:
    """Every setting the curves of ``unit`` depend on (its cache key): the instance, the run,
    its step sizes and seeds, and of eps and ddof those the run reads (the others None)."""
    from gpolab import train  # deferred: jax

    run = unit.run
    reads = run.options()
    return {
        **{k: getattr(cfg, k) for k in INSTANCE},
        "rho": unit.rho,
        "control": unit.control,
        "estimator": train.stored_name(run.estimator),  # keys stored under an alias stay found
        "G": run.G,
        "optimizer": run.optimizer,
        "steps": run.steps,
        "step_rule": run.step,
        "lrs": list(unit.lrs),
        "n_seeds": unit.seeds,
        "eps": cfg.eps if "eps" in reads else None,
        "ddof": cfg.ddof if "ddof" in reads else None,
    }


def bias_settings(cfg: Config, G: int, ddof: int, eps: float) -> dict:
    """The settings of one bias-table entry (GRPO at θ₀ of the first ρ's instance)."""
    return {
        **{k: getattr(cfg, k) for k in INSTANCE},
        "rho": cfg.rho[0],
        "estimator": "grpo",
        "G": G,
        "ddof": ddof,
        "eps": eps,
        "n_seeds": cfg.bias_seeds,
    }


def cell_key(kind: str, settings: dict) -> str:
    from gpolab.store import digest

    return digest({"lab": NAME, "unit": kind, **settings})


# ----------------------------------------------------------------------------- running


class _Context:
    """What computing a unit needs, built once and only when a unit is computed."""

    def __init__(self, cfg: Config, key, store, progress):
        from gpolab import envs
        from gpolab.store import digest

        self.cfg, self.key, self.store, self.progress = cfg, key, store, progress
        self.env = envs.get(cfg.env)
        self.config_hash = digest(dataclasses.asdict(cfg))
        self.instances = {}

    def params(self, rho: float, equal: bool):
        """The log-linear instance at (ρ, equal-σ), drawn once."""
        from gpolab.envs import loglinear

        c = self.cfg
        if (rho, equal) not in self.instances:
            self.instances[rho, equal] = loglinear.make(
                c.seed, prompts=c.prompts, responses=c.responses, block=c.block, rho=rho,
                align=c.align, equal=equal,
            )  # fmt: skip
        return self.instances[rho, equal]

    def optimum(self, unit: Unit) -> float:
        """J* of the unit's instance."""
        return self.env.optimum(self.params(unit.rho, unit.control))

    def cached(self, key: str):
        """The stored rows of ``key`` (None when not finished)."""
        if self.store is None or not self.store.has(key):
            return None
        return self.store.read([key])

    def save(self, key: str, rows: list[dict], seconds: float, note: str) -> None:
        if self.store is not None:
            self.store.write(key, rows, self.config_hash, seconds)
        if self.progress is not None:
            self.progress.update(1, note)


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


def train_unit(ctx: _Context, unit: Unit) -> tuple[dict, float]:
    """The curves of one unit (from the store or computed) and the seconds they took."""
    from gpolab import train

    key = cell_key("train", unit_settings(ctx.cfg, unit))
    df = ctx.cached(key)
    if df is not None:
        return _raw_arrays(df), float(df["wall_s"].iloc[0])
    start = time.perf_counter()
    params = ctx.params(unit.rho, unit.control)
    res = train.train(unit.run, ctx.env, ctx.key, params, unit.lrs, unit.seeds, ctx.cfg.eps)
    seconds = time.perf_counter() - start
    G = "inf" if unit.run.G == train.EXACT else unit.run.G
    note = f"{unit.regime} {unit.setting} {unit.run.optimizer} G={G} {unit.method}"
    ctx.save(key, _raw_rows(res, unit.lrs), seconds, note)
    return res, seconds


def bias_row(ctx: _Context, G: int, ddof: int, eps: float) -> dict:
    """One row of the finite-sample table (from the store or computed)."""
    import jax

    from gpolab import train

    cfg = ctx.cfg
    settings = bias_settings(cfg, G, ddof, eps)
    key = cell_key("bias", settings)
    df = ctx.cached(key)
    if df is not None:
        from gpolab.store import PROVENANCE

        return df.drop(columns=list(PROVENANCE)).iloc[0].to_dict()
    start = time.perf_counter()
    params = ctx.params(cfg.rho[0], False)
    r = train.finite_sample_bias(
        jax.random.fold_in(ctx.key, 1000 + G), ctx.env, params, ctx.env.init(params), G,
        seeds=cfg.bias_seeds, eps=eps, ddof=ddof,
    )  # fmt: skip
    row = {"G": G, "ddof": ddof, "eps": eps, **r, **settings}
    row["seconds"] = time.perf_counter() - start
    ctx.save(key, [row], row["seconds"], f"bias G={G} ddof={ddof} eps={eps:g}")
    return row


def summary_row(cfg: Config, unit: Unit, res: dict, seconds: float, optimum: float) -> dict:
    """The summary row of one unit at its best step size (every setting a column)."""
    from gpolab import train

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
    row.update({k: s[k] for k in ("env", "responses", "block", "align", "seed", "steps",
                                  "n_seeds", "eps", "ddof")})  # fmt: skip
    row["lr_grid"] = unit.lr_grid
    row["curv_const"] = cfg.curv_const if unit.regime == "admissible" else None
    row["target"] = cfg.target
    row["seconds"] = seconds
    return row


def run(cfg: Config, key=None, *, store=None, progress=None) -> dict:
    """The lab protocol's entry: ``{summary, gain, finite_sample, curves, phases}``, every
    training call and bias entry resumed from ``store`` when finished there."""
    cfg.validate()
    import jax
    import pandas as pd

    key = jax.random.key(cfg.seed) if key is None else key
    units = train_units(cfg)
    if progress is not None and store is not None:
        done = [cell_key("train", unit_settings(cfg, u)) for u in units]
        done += [cell_key("bias", bias_settings(cfg, G, d, e))
                 for G in bias_Gs(cfg) for d, e in BIAS_GRID]  # fmt: skip
        finished = sum(store.has(k) for k in done)
        if finished:
            progress.skip(finished)
    ctx = _Context(cfg, key, store, progress)
    rows, curves = [], {}
    for unit in units:
        res, seconds = train_unit(ctx, unit)
        row = summary_row(cfg, unit, res, seconds, ctx.optimum(unit))
        rows.append(row)
        curves[curve_id(row)] = {k: v[row["lr_index"]] for k, v in res.items()}
    summary = pd.DataFrame(rows).astype({"ddof": "Int64"})
    bias = pd.DataFrame(
        [bias_row(ctx, G, ddof, eps) for G in bias_Gs(cfg) for ddof, eps in BIAS_GRID]
    )
    curve_df = curve_table(summary, curves)
    return {
        "summary": summary,
        "gain": gain_table(summary, curves, cfg.target),
        "finite_sample": bias,
        "curves": curve_df,
        "phases": phase_table(curve_df),
    }


# ----------------------------------------------------------------------------- analysis


def curve_id(row) -> tuple:
    """(regime, setting, method, G, optimizer): a run's curves."""
    return (row["regime"], row["setting"], row["method"], row["G"], row["optimizer"])


def hit_time(curve: np.ndarray, target: float) -> np.ndarray:
    """First t with curve[..., t] ≥ target (float, inf where never), over the last axis."""
    reached = curve >= target
    first = np.argmax(reached, axis=-1).astype(float)
    return np.where(reached.any(axis=-1), first, np.inf)


def best_lr_index(J: np.ndarray, target: float) -> int:
    """Step size (axis 0 of J (L, S, T+1)) whose seed-mean curve reaches ``target`` first; ties
    and never-reached broken by the larger mean final J."""
    mean = J.mean(axis=1)
    t = hit_time(mean, target)
    order = np.lexsort((-mean[:, -1], t))
    return int(order[0])


def level_gain(J_fast: np.ndarray, J_slow: np.ndarray) -> np.ndarray:
    """Iteration gain along the trajectory: for each t, (iterations the slow curve needs to reach
    J_fast[t]) / t; nan where the slow curve never gets there (or t = 0)."""
    t = np.arange(J_fast.shape[-1], dtype=float)
    slow_best = np.maximum.accumulate(J_slow)
    need = np.searchsorted(slow_best, J_fast, side="left").astype(float)
    need = np.where(need >= J_slow.shape[-1], np.nan, need)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(t > 0, need / t, np.nan)


def bootstrap_hit_ratio(
    J_num: np.ndarray, J_den: np.ndarray, target: float, n_boot: int = 200, seed: int = 0
) -> tuple[float, float]:
    """95% bootstrap interval (over seeds, resampled independently for both curves) of
    hit_time(mean J_num) / hit_time(mean J_den); J_* are (S, T+1)."""
    rng = np.random.default_rng(seed)
    ratios = []
    for _ in range(n_boot):
        a = J_num[rng.integers(0, J_num.shape[0], J_num.shape[0])].mean(axis=0)
        b = J_den[rng.integers(0, J_den.shape[0], J_den.shape[0])].mean(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratios.append(hit_time(a, target) / hit_time(b, target))
    ratios = np.asarray(ratios)
    if not np.isfinite(ratios).any():
        return float("nan"), float("nan")
    ratios = ratios[~np.isnan(ratios)]
    return float(np.quantile(ratios, 0.025)), float(np.quantile(ratios, 0.975))


def summarize(res: dict, target: float, optimum: float) -> dict:
    """Best step size and the per-run report of one configuration's curves.  Trajectory averages
    (σ̄, σ_max, cosine, ḡ) run over the iterations before the seed-mean curve hits ``target``."""
    from gpolab.engine import Z95

    J = res["J"]
    i = best_lr_index(J, target)
    Jb = J[i]  # (S, T+1)
    mean = Jb.mean(axis=0)
    T = hit_time(mean, target)
    per_seed = hit_time(Jb, target)
    end = int(T) if np.isfinite(T) else Jb.shape[-1] - 1
    window = slice(0, max(end, 1))
    gap = optimum - Jb[:, -1]
    sbar = res["sigma_bar"][i].mean(axis=0)[window]
    smax_t = res["sigma_max"][i].mean(axis=0)[window]
    S = Jb.shape[0]
    return dict(
        lr_index=i,
        best_lr=float(res["lrs"][i]),
        iters=float(T),
        iters_seed_median=float(np.median(per_seed)),
        reached_frac=float(np.mean(np.isfinite(per_seed))),
        final_J=float(mean[-1]),
        final_J_se=float(Jb[:, -1].std(ddof=1) / np.sqrt(S)) if S > 1 else 0.0,
        gap_mean=float(gap.mean()),
        gap_q10=float(np.quantile(gap, 0.1)),
        gap_q50=float(np.quantile(gap, 0.5)),
        gap_q90=float(np.quantile(gap, 0.9)),
        sigma_bar=float(sbar.mean()),
        sigma_max=float(res["sigma_max"][i].max(axis=0)[window].max()),
        sigma_max_iter=float(smax_t.mean()),
        sigma_eff=float(res["sigma_eff"][i].mean(axis=0)[window].mean()),
        cos_mean=float(res["cos"][i].mean(axis=0)[window].mean()),
        cos_final=float(res["cos"][i].mean(axis=0)[-1]),
        gbar_rms=float(np.sqrt(np.mean(res["gbar"][i].mean(axis=0)[window] ** 2))),
        zero_frac=float(res["zero_frac"][i].mean()),
        ci_half=float(Z95 * Jb.std(axis=0, ddof=1).max() / np.sqrt(S)) if S > 1 else 0.0,
    )


COMPARISONS = {
    # name: (regime, REINFORCE methods, σ_max of the prediction)
    "admissible 1/L": ("admissible", ("reinforce",), "const"),
    "oracle 1/L_t": ("admissible", ("reinforce-iterate",), "iterate"),
    "tuned": ("tuned", None, "max"),  # None: every unnormalized estimator run (limit ∇J)
}
GAIN_COLUMNS = ("comparison", "setting", "rho", "control", "optimizer", "G", "reinforce",
                "lr_grpo", "lr_reinforce", "iters_reinforce", "iters_grpo", "gain", "gain_ci_low",
                "gain_ci_high", "pred_gain", "gnorm_ratio", "pred_gnorm_ratio", "sigma_bar",
                "sigma_max", "cos_mean", "cos_final", "n_seeds", "target",
                "curv_const")  # fmt: skip


def unnormalized(methods) -> list[str]:
    """The tuned methods that are REINFORCE: estimators whose G = ∞ limit is ∇J (registry)."""
    from gpolab import estimators, train  # deferred: jax

    def limit(spec: str) -> str:
        entry, options = estimators.bind(train.ALIASES.get(spec, spec))
        return entry.limit_for(options)

    return [m for m in set(methods) if limit(m) == "gradient"]


def gain_table(summary, curves: dict, target: float):
    """Per comparison, setting, optimizer and G: iterations to ``target`` of GRPO and REINFORCE
    (tuned: the faster unnormalized estimator), the measured gain with a bootstrap CI over seeds
    (exact runs: one trajectory, no CI) and the prediction of the reconstructed gain law along
    GRPO's trajectory:
    σ_max/σ̄ in iterations (σ_max = 1/2 for the a-priori 1/L step; for the oracle 1/L_t step
    σ_max → mean_t s(θ_t)/κ, :func:`gpolab.theory.curvature.predicted_gain_iterate`, which is
    max_x σ_x at ρ = 0 and σ̄ at ρ = 1; the trajectory max for tuned steps), √(σ̄/σ_max) in the
    average gradient norm — compared with the measured ratio of rms_t mean_x ‖g_x(θ_t)‖ (GRPO over
    REINFORCE) over GRPO's iterations to target."""
    import pandas as pd

    rows = []
    for name, (regime, methods, smax_kind) in COMPARISONS.items():
        sub = summary[summary.regime == regime]
        for _, grp in sub.groupby(["setting", "optimizer", "G"], sort=False):
            g = grp[grp.method == "grpo"]
            r = grp[grp.method.isin(methods or unnormalized(grp.method))]
            if g.empty or r.empty:
                continue
            r = r.sort_values(["iters", "final_J"], ascending=[True, False]).iloc[0]
            rows.append(_gain_row(name, smax_kind, g.iloc[0], r, curves, target))
    return pd.DataFrame(rows, columns=list(GAIN_COLUMNS))


def _gain_row(name: str, smax_kind: str, g, r, curves: dict, target: float) -> dict:
    """One comparison: GRPO's summary row ``g`` against REINFORCE's ``r``."""
    from gpolab.theory import curvature

    Jg = curves[curve_id(g)]["J"]
    Jr = curves[curve_id(r)]["J"]
    lo, hi = bootstrap_hit_ratio(Jr, Jg, target) if Jg.shape[0] > 1 else (math.nan, math.nan)
    smax = {
        "const": 0.5,
        "iterate": g.sigma_bar
        * curvature.predicted_gain_iterate(g.sigma_eff, g.sigma_bar, int(g.prompts), g.rho),
        "max": g.sigma_max,
    }[smax_kind]
    cr = curves[curve_id(r)]["gbar"].mean(axis=0)
    end = int(g.iters) if np.isfinite(g.iters) else cr.size - 1
    r_rms = float(np.sqrt(np.mean(cr[: max(end, 1)] ** 2)))
    return dict(
        comparison=name,
        setting=g.setting,
        rho=g.rho,
        control=g.control,
        optimizer=g.optimizer,
        G=g.G,
        reinforce=r.method,
        lr_grpo=g.best_lr,
        lr_reinforce=r.best_lr,
        iters_reinforce=r.iters,
        iters_grpo=g.iters,
        gain=float(np.float64(r.iters) / g.iters) if np.isfinite(g.iters) else np.nan,
        gain_ci_low=lo,
        gain_ci_high=hi,
        pred_gain=smax / g.sigma_bar,
        gnorm_ratio=g.gbar_rms / r_rms,
        pred_gnorm_ratio=float(np.sqrt(g.sigma_bar / smax)),
        sigma_bar=g.sigma_bar,
        sigma_max=smax,
        cos_mean=g.cos_mean,
        cos_final=g.cos_final,
        n_seeds=g.n_seeds,
        target=target,
        curv_const=g.curv_const,
    )


PHASE_AGAINST = ("reinforce-iterate", "reinforce", "loo")  # the phases' comparison, by priority
LEVEL_METHODS = ("reinforce", "reinforce-iterate", "loo")  # level gains the phase figure shows


def curve_table(summary, curves: dict):
    """Seed-mean curves of every run at its best step size, one row per (run, t): J with its 95%
    half-width, σ̄_t, max_x σ_x, the mean pairwise gradient cosine, ḡ_t, and for REINFORCE runs
    ``level_gain``: GRPO's level gain over them at GRPO's J_t (same regime, instance, G and
    optimizer; the first max(5, T/50) iterations left out: a ratio of a few iterations is not a
    rate)."""
    import pandas as pd

    from gpolab.engine import Z95

    frames = []
    for _, row in summary.iterrows():
        c = curves[curve_id(row)]
        J = c["J"]
        S, n = J.shape
        half = Z95 * J.std(axis=0, ddof=1) / np.sqrt(S) if S > 1 else np.full(n, np.nan)
        gain = np.full(n, np.nan)
        grpo = curves.get((row.regime, row.setting, "grpo", row.G, row.optimizer))
        if row.method != "grpo" and grpo is not None:
            gain = level_gain(grpo["J"].mean(0), J.mean(0))
            gain[: max(5, gain.size // 50)] = np.nan
        cols = {k: row[k] for k in ("regime", "setting", "rho", "control", "method", "G",
                                    "optimizer", "n_seeds", "target")}  # fmt: skip
        frames.append(
            pd.DataFrame(
                {
                    **cols,
                    "t": np.arange(n),
                    "J": J.mean(0),
                    "J_ci_half": half,
                    **{k: c[k].mean(0) for k in ("sigma_bar", "sigma_max", "cos", "gbar")},
                    "level_gain": gain,
                }
            )  # fmt: skip
        )
    return pd.concat(frames, ignore_index=True)


def phase_bounds(gain: np.ndarray) -> tuple[int, int]:
    """Phase boundaries from the level gain g(t) (nan-tolerant): phase I (acceleration) until g
    first reaches 90% of its peak, phase III (saturation) from the first time after the peak
    that g falls below 90% of it (or the end), phase II in between."""
    g = np.where(np.isfinite(gain), gain, np.nan)
    if not np.isfinite(g).any():
        return len(g) - 1, len(g) - 1
    peak = np.nanmax(g)
    t1 = int(np.nanargmax(g >= 0.9 * peak))
    tp = int(np.nanargmax(g))
    after = np.where((np.arange(len(g)) > tp) & (g < 0.9 * peak))[0]
    t2 = int(after[0]) if after.size else len(g) - 1
    return t1, max(t2, t1)


def phase_table(curve_df):
    """Per (regime, instance, G, optimizer) with GRPO and a REINFORCE comparison: the phases
    (:func:`phase_bounds`) of GRPO's level gain against the oracle 1/L_t step (else the a-priori
    1/L step, else RLOO; with the equal-σ control the oracle gain is 1)."""
    import pandas as pd

    rows = []
    keys = ["regime", "setting", "G", "optimizer"]
    for (regime, setting, G, opt), grp in curve_df.groupby(keys, sort=False):
        methods = set(grp.method)
        against = next((m for m in PHASE_AGAINST if m in methods), None)
        if "grpo" not in methods or against is None:
            continue
        gain = grp[grp.method == against].level_gain.to_numpy()
        t1, t2 = phase_bounds(gain)
        first = grp.iloc[0]
        peak = float(np.nanmax(gain)) if np.isfinite(gain).any() else math.nan
        rows.append(dict(regime=regime, setting=setting, rho=first.rho, control=first.control,
                         G=G, optimizer=opt, against=against, t1=t1, t2=t2,
                         t_end=len(gain) - 1, peak_gain=peak))  # fmt: skip
    columns = ["regime", "setting", "rho", "control", "G", "optimizer", "against", "t1", "t2",
               "t_end", "peak_gain"]  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


# ----------------------------------------------------------------------------- output

SUMMARY_COLUMNS = ["regime", "setting", "optimizer", "G", "method", "best_lr", "iters", "final_J",
                   "gap_q50", "sigma_bar", "cos_mean", "zero_frac"]  # fmt: skip
GAIN_REPORT = ["comparison", "setting", "optimizer", "G", "reinforce", "iters_reinforce",
               "iters_grpo", "gain", "gain_ci_low", "gain_ci_high", "pred_gain", "gnorm_ratio",
               "pred_gnorm_ratio", "cos_mean"]  # fmt: skip
BIAS_REPORT = ["G", "ddof", "eps", "rel_bias", "rel_bias_noise", "cosine", "norm_ratio",
               "zero_frac", "zero_frac_theory"]  # fmt: skip


def report(cfg: Config, tables: dict) -> str:
    from gpolab.labs import table_text

    return table_text(tables["summary"], SUMMARY_COLUMNS)


def notes(cfg: Config, tables: dict) -> str:
    """The gain table and the finite-sample bias table."""
    from gpolab.labs import table_text

    parts = [table_text(tables["gain"], GAIN_REPORT)] if len(tables["gain"]) else []
    return "\n\n".join([*parts, table_text(tables["finite_sample"], BIAS_REPORT)])


def figures(tables: dict) -> dict:
    """The training curves, the gain figure (when a comparison ran) and the phase figure."""
    from gpolab.plots import stdnorm as plots

    found = {"train_curves.png": plots.curves_figure}
    if len(tables["gain"]):
        found["train_gain.png"] = plots.gain_figure
    if plots.phase_selection(tables["summary"]) is not None:
        found["train_phases.png"] = plots.phases_figure
    return found
