"""``gpolab plan``: read a real GRPO run's rollout log and say what its group size, estimator and
sampling do (theory §10, §8; issue 18).

The log (:mod:`gpolab.labs.plan.rollouts`: TRL's completions parquet, verl's rollout jsonl, or a
plain
table) gives, per prompt group, the rewards of its G responses at every logged step.  With binary
rewards, c successes of n per group, and prompt difficulty p ~ Beta(a, b) fitted by beta-binomial
maximum likelihood (per window of steps and pooled), everything below is exact under the fit
(:mod:`gpolab.theory.difficulty`):

* the degenerate (all-equal, zero-signal) group fraction at any G, E[p^G + (1 − p)^G], checked
  against the fraction the log shows at its own group sizes (the check of the fit);
* the smallest G keeping it under ``target``; at a response budget N = B·G per step, the
  informative groups per step of each split and DAPO dynamic sampling's groups drawn per kept
  group, 1/(1 − degenerate);
* κ_G of each reward-only registry estimator averaged over the fitted difficulties (E[ĝ_x | p] =
  κ_G(p) g_x: how strongly it weights hard and easy prompts against loo's 1).

Graded rewards with a few values use a Dirichlet-multinomial fit instead; continuous rewards
give measured zero-std fractions only.  What rewards cannot give — ‖g_x‖², tr Σ_oracle, the
prompt variance c1, hence the MSE-optimal G* = 1 + √(C3/c1) — is said plainly, and estimated
when the log has a per-response score-norm proxy column (``proxy_column``) and gradient norms
at two or more batch sizes are given (``grad_norms``); that estimate is gpolab's derivation.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from typing import ClassVar

import numpy as np
import pandas as pd

from gpolab import configs, envs, estimators, validate
from gpolab.configs import option
from gpolab.labs.plan import plots, rollouts
from gpolab.labs.plan.report import (  # noqa: F401  (the lab's report and JSON summary)
    MAX_G,
    POOLED,
    need_text,
    pooled,
    report,
    report_sizes,
    summary_json,
)
from gpolab.theory import difficulty, graded, gstar

NAME = "plan"
NEEDS = envs.Needs(only=())  # no env: the lab reads a trainer's rollout log
TABLES = ("summary", "curve", "kappa", "groups")
FORMATS = ("auto", "trl", "verl", "table")
GRADED_LEVELS = 10  # at most this many distinct reward values: a Dirichlet-multinomial fit
MAX_DRAWS = 100_000  # 25x the default: the bands' Monte Carlo error is already small
DEFAULT_ESTIMATORS = ("grpo", "loo", "mean", "nemo/grpo", "verl/grpo_passk", "paper/passk-training")


@dataclasses.dataclass(frozen=True)
class Config(configs.Config):
    """What ``gpolab plan`` reads and which answers it gives."""

    LAB: ClassVar[str] = NAME
    QUICK: ClassVar[dict] = {"draws": 500}

    log: str = option(
        "",
        "the rollout log: a file or a folder (TRL completions parquet, verl "
        "rollout jsonl, or a CSV/parquet table with prompt, reward)",
    )
    format: str = option("auto", "log format: auto, trl, verl or table")
    reward_column: str = option(
        "",
        "TRL: the reward function's column (default: the sum of "
        "them all, as TRL does with unit weights)",
    )
    proxy_column: str = option(
        "",
        "per-response score-norm proxy column (||grad log pi||^2 or "
        "verl's sum_t(1 - 2 pi_t + sum pi^2)): enables G*",
    )
    length_column: str = option("", "per-response length column (table: 'length' if present)")
    grad_norms: str = option(
        "",
        "CSV/parquet with columns batch, grad_norm: ||g_hat|| of the "
        "loo estimate at >= 2 batch sizes (prompts) at the log's G",
    )
    trainer_estimator: str = option(
        "",
        "the estimator the run trains with, for its G* beside loo's (a reward-only registry "
        "spec such as trl/grpo[scale_rewards=group]; '' reads it from the training hook's "
        "run.json, and without one only loo's G* is given)",
    )
    pool: int = option(
        -1,
        "prompts in the run's training set, for the training rule (gpolab's, theory "
        "groupsize.training_rule): -1 infers it from the log (its distinct prompts when they "
        "repeat, else prompts drawn afresh), 0 prompts drawn afresh",
    )
    success_threshold: float = option(
        math.nan,
        "binarize the rewards: reward >= T is a success (1), else a failure (0); e.g. "
        "--success-threshold 1 reads a 0/1 log with a stray 5.0 as binary (nan: off, rewards "
        "as logged; more than two values are then graded)",
    )
    window: int = option(0, "steps per window (0: the whole log pooled only)")
    G: tuple[int, ...] = option(
        (2, 4, 8, 16, 32, 64, 128, 256),
        "group sizes reported by G, at most 256 (the curve table has every G in 2..256)",
    )
    target: float = option(0.1, "degenerate-group fraction to stay under")
    N: int = option(0, "responses per step N = B*G for the split table (0: the log's)")
    estimators: tuple[str, ...] = option(DEFAULT_ESTIMATORS, "estimator specs of the kappa table")
    draws: int = option(4000, "parametric draws of the fit for the intervals (at most 100,000)")
    seed: int = option(0, "seed of the intervals' draws and bootstraps")
    allocate: bool = option(
        False,
        "also write allocation.csv/json: a group size per prompt for "
        "the next steps (gpolab's reward-only allocation, theory §12)",
    )
    allocate_estimator: str = option(
        "loo",
        "the estimator the allocation is for (reward-only registry entry)",
        when={"allocate": (True,)},
    )
    allocate_rho: float = option(
        0.0,
        "signal share of the allocation's reward-only model (0: allocation by p(1-p))",
        when={"allocate": (True,)},
    )
    out: str = option("results/plan", "output folder (report.md, tables, plan.png)", key=False)

    def validate(self) -> None:
        if not self.log:
            raise validate.ConfigError("log: missing; allowed: a rollout log file or folder")
        if not os.path.exists(self.log):
            raise validate.ConfigError(f"log: {self.log!r} does not exist")
        if not (os.path.isfile(self.log) or os.path.isdir(self.log)):  # stat only: a FIFO
            raise validate.ConfigError(  # is never opened (a read would block)
                f"log: {self.log!r} is not a regular file or a folder (a pipe or a device); "
                f"allowed: a folder or a file of the supported formats ({rollouts.ALLOWED})"
            )
        check_out(self.log, self.out)
        validate.choice("format", self.format, FORMATS)
        if not (math.isnan(self.success_threshold) or math.isfinite(self.success_threshold)):
            raise validate.ConfigError(
                f"success_threshold: got {self.success_threshold}; allowed: a finite number "
                "(or nan: off)"
            )
        if self.grad_norms and not os.path.isfile(self.grad_norms):
            raise validate.ConfigError(f"grad_norms: {self.grad_norms!r} is not a file")
        validate.integer("window", self.window, 0)
        validate.integers("G", self.G, 2)
        validate.at_most(
            "G",
            list(self.G),
            MAX_G,
            "the curve table covers G = 2..256, and kappa's exact cost grows as G^2",
        )
        validate.real("target", self.target, 0.0, 1.0, open_low=True)
        validate.integer("N", self.N, 0)
        validate.integer("pool", self.pool, -1)
        validate.integer("draws", self.draws, 10)
        validate.at_most(
            "draws",
            self.draws,
            MAX_DRAWS,
            "the 95% bands' Monte Carlo error is already far below their width",
        )
        validate.memory("draws", self.draws, draws_bytes(self.draws), "the intervals' draws")
        validate.integer("seed", self.seed, 0, (1 << 63) - 1)
        if not self.estimators:
            raise validate.ConfigError("estimators: got an empty list; allowed: one or more")
        for spec in self.estimators:
            estimators.check_estimator(spec, max(self.G), field="G")
        if self.trainer_estimator:
            estimators.check_reward_only(
                "trainer_estimator", self.trainer_estimator, "G* reads their count tables"
            )
        if self.allocate:
            estimators.check_reward_only(
                "allocate_estimator",
                self.allocate_estimator,
                "the allocation reads their count tables",
            )
            validate.real("allocate_rho", self.allocate_rho, low=0.0, high=1.0)


def check_out(log: str, out: str) -> None:
    """``out`` is not the log's folder nor inside it: the report's tables there would make the
    folder a log of mixed formats, and every later read of it fail (issue 55)."""
    if not out:
        return
    path, where = os.path.realpath(log), os.path.realpath(out)
    if where == path or (os.path.isdir(log) and where.startswith(path + os.sep)):
        raise validate.ConfigError(
            f"out: got {out!r}, which is the log {log!r} or inside its folder; allowed: a "
            "folder outside the log (plan's tables there would be read as part of the log)"
        )


def draws_bytes(draws: int) -> float:
    """Peak bytes of the intervals' draws: about 8 float64 arrays of draws x (MAX_G + 1) in the
    degenerate curve's products (the log's size does not enter: the check sums by group size)."""
    return 8.0 * 8 * draws * (MAX_G + 1)


# ----------------------------------------------------------------------------- reading


@functools.lru_cache(maxsize=2)
def _read(path, fmt, reward, proxy, length, stamp):
    return rollouts.read(
        path,
        format=None if fmt == "auto" else fmt,
        reward_column=reward or None,
        proxy_column=proxy or None,
        length_column=length or None,
    )


def load(cfg: Config):
    """The log (read once per process while the files are unchanged); errors name the file.
    A log too large for the memory available is refused first, with its estimate."""
    stamp = _stamp(cfg.log)
    need = rollouts.footprint(cfg.log, None if cfg.format == "auto" else cfg.format)
    validate.memory(
        "log",
        cfg.log,
        need,
        f"about {rollouts.READ_FACTOR}x its size as text, to read it and sum its groups",
    )
    return _read(cfg.log, cfg.format, cfg.reward_column, cfg.proxy_column, cfg.length_column, stamp)


def _stamp(path) -> tuple:
    if os.path.isfile(path):
        return (os.path.getmtime(path),)
    return tuple(sorted((e.name, e.stat().st_mtime) for e in os.scandir(path)))


def read_norms(path):
    """The gradient-norm file: columns batch (prompts per step) and grad_norm, one row per step."""
    try:
        df = pd.read_parquet(path) if str(path).endswith(".parquet") else pd.read_csv(path)
    except Exception as err:  # noqa: BLE001 - any reader failure is one line naming the file
        raise validate.ConfigError(f"grad_norms: cannot read {path!r} ({err})") from None
    missing = [c for c in ("batch", "grad_norm") if c not in df.columns]
    if missing:
        raise validate.ConfigError(
            f"grad_norms: {path!r} has no column {missing[0]!r}; allowed: columns batch, "
            f"grad_norm (got {', '.join(map(str, df.columns))})"
        )
    df = df[["batch", "grad_norm"]]
    if not all(pd.api.types.is_numeric_dtype(df[c]) for c in df):
        raise validate.ConfigError(f"grad_norms: {path!r}: allowed: numeric batch, grad_norm")
    validate.finite_array(f"grad_norms ({path})", df.to_numpy(float), 0.0)
    if df["batch"].nunique() < 2:
        raise validate.ConfigError(
            f"grad_norms: {path!r} has one batch size; allowed: two or more distinct batch sizes"
        )
    return df.astype(float)


def binarized(cfg: Config, log):
    """The log with rewards >= ``success_threshold`` as 1 and the rest as 0 (a note says so);
    without a threshold, the log with a note naming the values that make a nearly binary log
    graded (:func:`stray_values`)."""
    r = log.frame["reward"].to_numpy(dtype=float)
    if math.isnan(cfg.success_threshold):
        note = stray_values(log)
        return dataclasses.replace(log, notes=(*log.notes, note)) if note else log
    t = cfg.success_threshold
    z = (r >= t).astype(np.float64)
    values = ", ".join(f"{v:g}" for v in np.unique(r)[:6]) + (
        ", ..." if np.unique(r).size > 6 else ""
    )
    note = (
        f"rewards binarized by --success-threshold {t:g}: reward >= {t:g} is a success; "
        f"{int(z.sum()):,} of {z.size:,} responses succeed (logged values {values})"
    )
    frame, reward = log.frame.assign(reward=z), f"{log.reward} >= {t:g}"
    return dataclasses.replace(log, frame=frame, reward=reward, notes=(*log.notes, note))


def stray_values(log, share: float = 0.05) -> str:
    """A note when the rewards take more than two values but two of them hold all but at most
    ``share`` of the responses (a binary log with a few stray values, read as graded): the
    stray values, their counts and where the first of each is; empty otherwise."""
    f = log.frame
    r = f["reward"].to_numpy(dtype=float)
    values, counts = np.unique(r, return_counts=True)
    if values.size <= 2:
        return ""
    main = np.sort(values[np.argsort(-counts, kind="stable")[:2]])
    stray = ~np.isin(values, main)
    if counts[stray].sum() > share * r.size:
        return ""
    shown = []
    for v, k in list(zip(values[stray], counts[stray], strict=True))[:5]:
        i = int(np.flatnonzero(r == v)[0])
        shown.append(
            f"{v:g} x{k} (first at step {f['step'].iloc[i]}, prompt "
            f"{str(f['prompt'].iloc[i])[:40]!r})"
        )
    more = f", and {int(stray.sum()) - 5} more values" if stray.sum() > 5 else ""
    return (
        f"rewards are read as GRADED (no beta-binomial a, b or kappa) because "
        f"{int(counts[stray].sum())} of {r.size:,} responses have values other than the two "
        f"main levels {main[0]:g}/{main[1]:g}: {'; '.join(shown)}{more}; if success/failure "
        "is what matters, pass --success-threshold T (reward >= T is a success)"
    )


# ----------------------------------------------------------------------------- analysis


def cells(cfg: Config) -> int:
    return 1


def with_callback_files(cfg: Config) -> tuple[Config, dict]:
    """A run's output folder holding the training hook's files (``gpolab/rollouts.parquet``,
    :mod:`gpolab.integrations.files`): read that log as a table with its ``proxy`` column and
    its ``grad_norms.csv``, unless the user chose a format, proxy column or norms file; and the
    hook's ``run.json`` (the trainer's settings).  Other logs: unchanged, {}."""
    from gpolab.integrations import files

    found = files.find(cfg.log) if os.path.exists(cfg.log) else None
    if found is None or cfg.format not in ("auto", "table"):
        return cfg, {}
    changes = {"log": str(found["log"]), "format": "table"}
    changes["proxy_column"] = cfg.proxy_column or "proxy"
    if not cfg.grad_norms and found["norms"] is not None:  # the user's norms file wins
        changes["grad_norms"] = str(found["norms"])
    return cfg.replace(**changes), found["run"]


# run.json keys the hook adds about itself, not the trainer's settings
HOOK_KEYS = ("framework", "seconds", "overhead", "decision", "proxy_scale", "proxy_scale_responses")


def trainer_text(run: dict) -> str:
    """What the trainer's loss followed, and what neither G* models."""
    if not run:
        return ""
    keys = (
        "loss_type",
        "scale_rewards",
        "num_generations",
        "beta",
        "importance_sampling_level",
        "steps_per_generation",
    )
    said = ", ".join(f"{k} = {run[k]}" for k in keys if run.get(k) is not None)
    who = "verl" if run.get("framework") == "verl" else f"TRL {run.get('trl_version', '?')}"
    said = said or ", ".join(f"{k} = {v}" for k, v in run.items() if k not in HOOK_KEYS)
    return (
        f"trainer: {who} ({said}); G* is given for the plain leave-one-out gradient and for "
        "the estimator this trainer runs (## G*); clipping over several updates and a KL term "
        "are in neither model"
    )


def run(cfg: Config, key=None, *, store=None, progress=None) -> dict:
    """``{summary, curve, kappa, groups}``: one summary row per window and a pooled one."""
    cfg.validate()
    named, (cfg, trainer) = cfg, with_callback_files(cfg)
    log = binarized(cfg, load(cfg))
    for name, col in ((named.proxy_column, "proxy"), (named.length_column, "length")):
        if name and not log.frame[col].notna().any():  # a column the user named: no value
            raise validate.ConfigError(
                f"{col}_column: {name!r} has no value in {cfg.log!r} (every row is empty or "
                "NaN); allowed: a column with numbers"
            )
    norms = read_norms(cfg.grad_norms) if cfg.grad_norms else None
    groups = rollouts.groups(log)
    levels = rollouts.binary_levels(log)
    groups = _windows(groups, cfg.window)
    check_groups(cfg, groups)
    G = _modal(groups["n"])
    if cfg.allocate and G > MAX_G:  # before any fit: the tables would not fit in memory
        raise validate.ConfigError(
            f"allocate: the log's G = {G:,} is above {MAX_G}; allowed: a log with G <= {MAX_G} "
            f"(the allocation's count tables hold (8G)^2 numbers: {(8 * G) ** 2:,} here)"
        )
    summary, curve = [], []
    for window, sub in _by_window(groups):
        row, rows = analyze_window(cfg, sub, levels, window, log.frame)
        summary.append(row)
        curve += rows
    kappa = kappa_table(cfg, summary[-1])
    summary = pd.DataFrame(summary)
    gs = gstar_row(cfg, log, levels, norms)
    replicates = gs.pop("replicates", None)
    pooled_row = {**summary.iloc[-1].to_dict(), **gs}
    safe = safe_row(pooled_row, replicates)
    loo_excess = safe.pop("excess", None)
    est = estimator_row(cfg, trainer, {**pooled_row, **safe}, replicates)
    est_excess = est.pop("excess", None)
    gs |= safe | est | rule_row(cfg, pooled_row)
    gs |= price_row({**pooled_row, **gs}, loo_excess, est_excess)
    for k, v in gs.items():
        summary[k] = [v if w == POOLED else None for w in summary["window"]]
    summary["format"], summary["reward"] = log.format, log.reward
    summary["log_path"], summary["trainer"] = cfg.log, trainer_text(trainer)
    summary["notes"] = "; ".join(log.notes)
    if progress is not None:
        progress.update(1, f"{len(groups):,} groups")
    return {"summary": summary, "curve": pd.DataFrame(curve), "kappa": kappa, "groups": groups}


def check_groups(cfg: Config, groups) -> None:
    """A fit needs two groups in the log and in each window: say what the log lacks."""
    for window, sub in _by_window(groups):
        if len(sub) >= 2:
            continue
        what = (
            f"{len(sub)} group ({int(sub['n'].sum())} responses to 1 prompt)"
            if len(sub)
            else "no group"
        )
        if window == POOLED:
            raise validate.ConfigError(
                f"log: {cfg.log!r} has {what}; plan needs at least 2 groups of >= 2 responses "
                "(one prompt at 2 steps, or 2 prompts) to fit how success varies"
            )
        raise validate.ConfigError(
            f"window: got {cfg.window}; window {window} of the log has {what}; allowed: a "
            "window holding at least 2 groups (or 0: the whole log pooled)"
        )


def _windows(groups, window: int):
    """Adds ``window``: "first-last" step of each run of ``window`` logged steps."""
    steps = np.sort(groups["step"].unique())
    if window == 0 or window >= len(steps):
        return groups.assign(window=POOLED)
    rank = np.searchsorted(steps, groups["step"].to_numpy()) // window
    first = steps[np.arange(0, len(steps), window)]
    last = steps[np.minimum(np.arange(0, len(steps), window) + window - 1, len(steps) - 1)]
    labels = np.array([f"{a}-{b}" if a != b else str(a) for a, b in zip(first, last, strict=True)])
    return groups.assign(window=labels[rank])


def _by_window(groups):
    windows = [w for w in dict.fromkeys(groups["window"]) if w != POOLED]
    for w in windows:
        yield w, groups[groups["window"] == w]
    yield POOLED, groups


def _modal(values) -> int:
    return int(pd.Series(values).mode().iloc[0])


def analyze_window(cfg: Config, groups, levels, window: str, frame) -> tuple[dict, list]:
    """The summary row and the curve rows of one window of groups (``frame``: the log's rows)."""
    n = groups["n"].to_numpy()
    G = _modal(n)
    base = {
        "window": window,
        "steps": int(groups["step"].nunique()),
        "first_step": int(groups["step"].min()),
        "last_step": int(groups["step"].max()),
        "groups": len(groups),
        "prompts": int(groups["prompt"].nunique()),
        "responses": int(n.sum()),
        "G": G,
        "G_min": int(n.min()),
        "G_max": int(n.max()),
    }
    per_step = len(groups) / base["steps"]
    budget = cfg.N or int(round(per_step * G))
    grid = list(range(2, MAX_G + 1))
    if levels is None:
        rows = frame[frame["group"].isin(groups["group"])]
        return _graded_window(cfg, rows, groups, base, grid, budget)
    c = groups["successes"].to_numpy()
    if c.sum() in (0, n.sum()):
        return _boundary_window(cfg, groups, base, levels, grid, budget)
    prompt = groups["prompt"].to_numpy()  # a prompt's groups share its p: clustered SEs
    fit = difficulty.fit(c, n, clusters=prompt)
    check = difficulty.logged_check(c, n, fit, draws=cfg.draws, seed=cfg.seed, clusters=prompt)
    counts = difficulty.count_check(c, n, fit)
    curve = difficulty.degenerate_curve(fit, grid, draws=cfg.draws, seed=cfg.seed)
    a, b = difficulty.draws(fit, cfg.draws, seed=cfg.seed)
    mean_lo, mean_hi = np.quantile(a / (a + b), [0.025, 0.975])  # the mean difficulty's 95%
    row = {
        **base,
        "rewards": "binary",
        "low": levels[0],
        "high": levels[1],
        "success_rate": float(groups["successes"].sum() / n.sum()),
        "a": fit.a,
        "b": fit.b,
        "a_se": fit.a_se,
        "b_se": fit.b_se,
        "se_method": fit.se_method,
        "mean_p": fit.mean,
        "mean_p_lo": float(mean_lo),
        "mean_p_hi": float(mean_hi),
        "loglik": fit.loglik,
        "p10": fit.quantile(0.1),
        "p50": fit.quantile(0.5),
        "p90": fit.quantile(0.9),
        **_check_columns(check),
        "fit_chi2": counts["chi2"],
        "fit_df": counts["df"],
        "fit_p": counts["p_value"],
        "target": cfg.target,
        "budget": budget,
        "G_needed": difficulty.g_needed(fit, cfg.target, grid),
    }
    if base["prompts"] == 1:
        row["fit_reason"] = (
            "one prompt: the Beta fit describes how its success rate varies across steps, "
            "not a spread of difficulty across prompts, and has no standard errors (they need "
            ">= 2 prompts)"
        )
    return row, _curve_rows(curve, window, budget)


def _boundary_window(cfg: Config, groups, base, levels, grid, budget: int) -> tuple[dict, list]:
    """Every response succeeded (or every one failed): p-hat = 1 (0) at the boundary, no Beta
    fit.  What the log still says (gpolab's bound): with no failure in n responses that are
    independent given their prompts' p, P(none | mean p) = prod p_i <= (mean p)^n, so at 95%
    the mean success rate is >= 0.05^(1/n); and E[p^G] >= (mean p)^G (Jensen), so the degenerate
    fraction at G is >= 0.05^(G/n) (the curve's ``lo``; ``hi`` = 1, ``predicted`` NaN)."""
    total = int(groups["n"].sum())
    passed = bool(groups["successes"].sum() > 0)
    bound = 0.05 ** (1.0 / total)
    lo = bound ** np.asarray(grid, float)
    why = (
        f"every one of the {total:,} responses {'succeeded' if passed else 'failed'} "
        f"(p-hat = {int(passed)} at the boundary): no prompt varies, so there is no spread "
        "of difficulty to fit (a, b, kappa and the fit checks need at least one success "
        "and one failure)"
    )
    row = {
        **base,
        "rewards": "binary",
        "low": levels[0],
        "high": levels[1],
        "success_rate": float(passed),
        "a": math.nan,
        "b": math.nan,
        "a_se": math.nan,
        "b_se": math.nan,
        "fit_reason": why,
        "mean_p": float(passed),
        "mean_p_lo": bound if passed else 0.0,
        "mean_p_hi": 1.0 if passed else 1.0 - bound,
        "logged_groups": len(groups),
        "logged_measured": 1.0,
        "logged_measured_se": 0.0,
        "target": cfg.target,
        "budget": budget,
        "G_needed": None,
        "G_needed_min": next((G for G, v in zip(grid, lo, strict=True) if v <= cfg.target), None),
    }
    curve = pd.DataFrame(
        {"G": grid, "predicted": math.nan, "lo": lo, "hi": 1.0, "dapo_draws": math.nan}
    )
    return row, _curve_rows(curve, base["window"], budget)


def _check_columns(check: dict) -> dict:
    return {f"logged_{k}" if not k.startswith("logged") else k: v for k, v in check.items()}


def _curve_rows(curve, window: str, budget: int) -> list[dict]:
    """Curve rows with the split at budget N: B = N/G prompts (G dividing N), informative groups
    B·(1 − degenerate) per step."""
    rows = []
    for rec in curve.to_dict(orient="records"):
        G = int(rec["G"])
        B = budget // G if budget % G == 0 else math.nan
        rows.append(
            {
                "window": window,
                **rec,
                "G": G,
                "budget": budget,
                "B": B,
                "informative_groups": B * (1 - rec["predicted"]),
            }
        )
    return rows


def _graded_window(cfg: Config, rows, groups, base, grid, budget: int) -> tuple[dict, list]:
    """Graded rewards: Dirichlet-multinomial over at most GRADED_LEVELS values, else measured
    zero-std fractions and the unbiased all-equal estimate for G up to the smallest group."""
    measured = float(groups["degenerate"].mean())
    row = {
        **base,
        "rewards": "graded",
        "mean_reward": float(np.average(groups["mean"], weights=groups["n"])),
        "logged_measured": measured,
        "target": cfg.target,
        "budget": budget,
    }
    table = pd.crosstab(rows["group"], rows["reward"])  # groups x reward values
    counts = table.to_numpy()
    prompt = groups.set_index("group").loc[table.index, "prompt"].to_numpy()
    if counts.shape[1] <= GRADED_LEVELS:
        fit = graded.fit_graded(counts, clusters=prompt)
        check = graded.logged_check_graded(counts, fit, clusters=prompt)
        pred = graded.degenerate_fraction_graded(fit.alpha, np.asarray(grid, float))
        row |= {
            "model": "dirichlet-multinomial",
            "se_method": fit.se_method,
            **_check_columns(check),
            "G_max_estimated": grid[-1],
        }
    else:
        per_group = [g.to_numpy() for _, g in rows.groupby("group")["reward"]]
        pred = graded.degenerate_unbiased(per_group, np.asarray(grid))
        row |= {
            "model": "empirical (U-statistic, G up to the smallest group)",
            "logged_measured_se": difficulty.mean_se(
                groups["degenerate"].to_numpy(float), groups["prompt"].to_numpy()
            ),
            "G_max_estimated": int(min(base["G_min"], grid[-1])),
        }
    # the smallest G whose estimate is <= target, among the G with an estimate
    row["G_needed"] = next((G for G, v in zip(grid, pred, strict=True) if v <= cfg.target), None)
    curve = pd.DataFrame(
        {
            "G": grid,
            "predicted": pred,
            "lo": np.nan,
            "hi": np.nan,
            "dapo_draws": difficulty.dapo_draws(pred),
        }
    )
    return row, _curve_rows(curve, base["window"], budget)


def kappa_table(cfg: Config, whole: dict):
    """κ of each estimator averaged over the pooled fit, at ``cfg.G`` ∪ {the log's G}."""
    cols = ["estimator", "G", "kappa_mean", "kappa_p10", "kappa_p50", "kappa_p90", "reason"]
    if whole.get("rewards") != "binary" or not math.isfinite(whole["a"]):
        return pd.DataFrame(columns=cols)
    rows = []
    for name in cfg.estimators:
        spec = estimators.bound(name)  # resolved once for every G
        for G in report_sizes(cfg, whole["G"]):
            if G >= estimators.minimum_G(spec):
                k = difficulty.kappa_mix(spec, G, whole["a"], whole["b"])
                rows.append({"estimator": name, "G": G, **{c: k.get(c) for c in cols[2:]}})
    return pd.DataFrame(rows, columns=cols)


def gstar_row(cfg: Config, log, levels, norms) -> dict:
    """G* and its terms when the proxy column and gradient norms allow; else the reason."""
    none = {"gstar": None, "gstar_lo": None, "gstar_hi": None}
    f = log.frame
    if levels is None:
        return {**none, "gstar_reason": "G* needs binary rewards (the loo MSE law per prompt)"}
    if f["reward"].nunique() < 2:
        return {
            **none,
            "gstar_reason": "undefined: every group is all-equal, so no group of "
            "this log carries a gradient signal (loo's gradient is 0 on each) and the "
            "prompts' gradient variance c1 has nothing to be estimated from",
        }
    if not f["proxy"].notna().any():
        return {
            **none,
            "gstar_reason": "rewards alone cannot give ||g_x||^2, tr Sigma_oracle or "
            "the prompt variance c1, hence not G* = 1 + sqrt(C3/c1): give --proxy-column "
            "(per-response ||grad log pi||^2) and --grad-norms (||g_hat|| at two batch sizes)",
        }
    f, G = gstar.measured(f)  # the groups whose every response carries the proxy
    z = (f["reward"].to_numpy() == levels[1]).astype(float)
    args = (z, f["proxy"].to_numpy(float), f["group"].to_numpy())
    if norms is None:
        out = gstar.gstar_bounds(*args)
    else:
        out = gstar.gstar(
            *args,
            norms,
            G,
            seed=cfg.seed,
            clusters=f["prompt"].to_numpy(),
            keep_replicates=True,
            pairs=gstar.pairs_of(f),
        )
    reason, replicates = out.pop("reason", None), out.pop("replicates", None)
    out["proxy_groups"] = int(f["group"].nunique())
    out["norm_rows"] = 0 if norms is None else len(norms)
    return {
        **none,
        **{k: out.get(k) for k in ("gstar", "gstar_lo", "gstar_hi")},
        **{f"gstar_{k}": v for k, v in out.items() if k not in none},
        "gstar_reason": reason,
        "replicates": replicates,
    }


def safe_row(p: dict, replicates) -> dict:
    """loo's G with the least worst-case noise excess over the best G over the joint 95% region
    the log's bootstrap replicates allow (:func:`gpolab.theory.gstar.safe_g`), among the sizes
    the run can set at its responses per step: given whether or not the log decides G*; with
    ``safe_c1_max``, the largest c1 of that region, and ``excess`` (popped by :func:`run`)."""
    out = {"safe_G": None, "safe_regret": None, "safe_c1_max": None}
    if replicates is None or not p.get("budget"):
        return out
    safe = gstar.safe_g(replicates, float(p["budget"]), df=_df(p))
    if safe["G"] is None:
        return out
    return {
        "safe_G": safe["G"],
        "safe_regret": safe["regret"],
        "safe_c1_max": safe["c1_max"],
        "excess": safe["excess"],
    }


def price_row(p: dict, loo: dict | None, est: dict | None) -> dict:
    """The one G the report leads with, and the price of the run's own G and of the settable
    sizes next to the lead (gpolab's rule; issue 56).  ``loo``/``est``: the excess tables
    (:func:`gpolab.theory.gstar.excess`) of loo and of the run's estimator over the joint
    region, on the sizes the run can set.  The lead: for the run's estimator when it is
    modelled, else loo; when the log decides loo's G*, the settable G with the least noise at
    the region's centre (the log's constants), else the one with the least worst-case excess
    (the safe G).  Each price: the excess at the centre and its least and largest over the
    region ("costs 0% .. 12% more noise than the best G")."""
    out = {
        "lead_G": None,
        "lead_for": None,
        "lead_rule": None,
        **{f"{w}_excess{k}": None for w in ("lead", "current") for k in ("", "_lo", "_hi")},
        "current_G": p.get("G"),
        "prices": None,
    }
    ex, who = (est, p.get("estimator_spec")) if est and est.get("used") else (loo, "loo")
    if not ex or not ex.get("used"):
        out["lead_rule"] = "no G: needs loo's constants from score norms and gradient norms"
        return out
    decided = p.get("gstar") is not None and _finite_all(p.get("gstar_hi"))
    by = ex["point"] if decided and np.isfinite(ex["point"]).any() else ex["hi"]
    i = int(np.nanargmin(by))
    sizes = [int(g) for g in ex["G"]]

    def price(j: int) -> dict:
        return {"G": sizes[j], **{k: _float(ex[k][j]) for k in ("point", "lo", "hi")}}

    def fields(who: str, r: dict) -> dict:  # lead_excess, lead_excess_lo, lead_excess_hi
        return {f"{who}_excess{k}": r[c] for k, c in (("", "point"), ("_lo", "lo"), ("_hi", "hi"))}

    rows = [price(j) for j in sorted({max(i - 1, 0), i, min(i + 1, len(sizes) - 1)})]
    if p.get("G") in sizes:
        cur = price(sizes.index(p["G"]))
        out |= fields("current", cur)
        rows = [r for r in rows if r["G"] != cur["G"]] + [cur]
    lead = price(i)
    out |= fields("lead", lead)
    out |= {
        "lead_G": lead["G"],
        "lead_for": who,
        "lead_rule": "decided: the least noise at the log's constants"
        if by is ex["point"]
        else "not decided: the least worst-case excess over the joint 95% region",
        "prices": json.dumps(sorted(rows, key=lambda r: r["G"])),
    }
    return out


def _df(p: dict) -> float:
    """The bootstrap's degrees of freedom (:func:`gpolab.theory.gstar.radius`), inf if unknown."""
    df = p.get("gstar_boot_df")
    return float(df) if _finite_all(df) else math.inf


def _float(x) -> float | None:
    return float(x) if np.isfinite(x) else None


ESTIMATOR_KEYS = (
    "gstar",
    "gstar_lo",
    "gstar_hi",
    "gstar_mse",
    "scale",
    "safe_G",
    "safe_regret",
    "notes",
    "reason",
)


def estimator_row(cfg: Config, run: dict, p: dict, replicates) -> dict:
    """G* of the estimator the run trains with (:mod:`gpolab.labs.plan.trainer` reads it from
    the hook's run.json, or ``--trainer-estimator``) and loo's on the same grid, both under the
    transfer model (:mod:`gpolab.theory.gstar_model`) set by the log's constants, at the log's
    responses per step; the interval from the bootstrap replicates of loo's constants.  ``p``:
    the pooled summary row with :func:`gstar_row`'s columns."""
    from gpolab.labs.plan import trainer
    from gpolab.theory import gstar_model

    which = trainer.modelled(run, cfg.trainer_estimator)
    out = {
        "estimator_spec": which["spec"],
        "estimator_source": which["source"],
        "estimator_aggregation": "; ".join(
            t for t in (which["aggregation"], which.get("batch", "")) if t
        ),
        **{f"estimator_{k}": None for k in ESTIMATOR_KEYS},
        **{f"loo_model_{k}": None for k in ("gstar", "gstar_lo", "gstar_hi")},
        "estimator_reason": which["reason"],
    }
    consts = [p.get(f"gstar_{k}") for k in ("c1", "g_sq", "s", "a")]
    if which["spec"] is None:
        return out
    if p.get("rewards") != "binary" or not _finite_all(p.get("a"), p.get("b"), *consts):
        out["estimator_reason"] = (
            "needs loo's constants (c1, ‖g‖², s, a: score norms and gradient norms at two batch "
            "sizes) and a beta-binomial difficulty fit: " + str(p.get("gstar_reason") or "no fit")
        )
        return out
    args = (*consts, p["a"], p["b"], p["budget"], replicates)
    grid = gstar.settable(float(p["budget"]))
    try:
        est = gstar_model.gstar(which["spec"], *args, grid=grid, df=_df(p))
        loo = gstar_model.gstar("loo", *args, grid=grid, df=_df(p))
    except validate.ConfigError as err:  # e.g. an option value run.json gave that TRL has not
        out["estimator_reason"] = f"{which['spec']}: {err}"
        return out
    out.update({f"estimator_{k}": est.get(k) for k in ESTIMATOR_KEYS})
    out.update({f"loo_model_{k}": loo.get(k) for k in ("gstar", "gstar_lo", "gstar_hi")})
    out["estimator_grid_max"] = est.get("grid_max")
    out["excess"] = est.get("excess")  # popped by run()
    return out


def rule_row(cfg: Config, p: dict) -> dict:
    """gpolab's training rule (:func:`gpolab.theory.groupsize.training_rule`) at the log's
    responses per step N and pool P, from loo's constants when the log decides them: the G to
    use in training and why (a finite pool moves it only through B = N/G <= P).  ``p``: the
    pooled summary row with :func:`gstar_row`'s columns."""
    from gpolab.theory import groupsize

    prompts, groups, N = p.get("prompts") or 0, p.get("groups") or 0, int(p.get("budget") or 0)
    P = cfg.pool if cfg.pool >= 0 else (prompts if groups >= 1.5 * prompts else 0)
    out = {"rule_G": None, "rule_reason": None, "rule_pool": P}
    if p.get("gstar") is None or not _finite_all(p.get("gstar_c1"), p.get("gstar_C3")):
        out["rule_reason"] = "needs loo's G* decided by the log (## G*)"
        return out
    if N < 2:
        out["rule_reason"] = f"needs at least 2 responses per step (the log's N = {N})"
        return out
    c = groupsize.Constants(float(p["gstar_c1"]), float(p["gstar_C2"]), float(p["gstar_C3"]))
    rule = groupsize.training_rule(c, N, P)
    return {**out, "rule_G": rule["G"], "rule_reason": rule["reason"]}


def _finite_all(*xs) -> bool:
    return all(x is not None and math.isfinite(float(x)) for x in xs)


# ----------------------------------------------------------------------------- output
# the report and JSON summary: gpolab.labs.plan.report (imported above)


def notes(cfg: Config, tables: dict) -> str:
    return ""


def figures(tables: dict) -> dict:
    return {"plan.png": plots.plan_figure}


# ----------------------------------------------------------------------------- allocation

ALLOCATION_CAP = 8  # the largest group the allocation gives: this many times the log's G


def allocation_table(cfg: Config, tables: dict):
    """``plan --allocate``: a group size per prompt for the next steps (theory §12).

    Each prompt's p gets the Beta posterior of its logged rewards under the pooled beta-binomial
    fit as prior (a + successes, b + failures: empirical Bayes); gpolab's reward-only rule (the
    ``gpolab`` entry of :mod:`gpolab.labs.allocate.rules`) then spreads the log's own budget —
    its modal G per prompt, over the prompts seen — to minimize the posterior-expected MSE,
    keeping every prompt (G ≥ 2, at most ALLOCATION_CAP × G).  Beside each G: the prompt's
    predicted share of the step's MSE and of zero-signal groups, at the log's G and at its own.
    Returns (table, summary dict); binary rewards only."""
    from gpolab.theory import allocation as theory

    p = pooled(tables)
    if p.get("rewards") != "binary":
        raise validate.ConfigError(
            "allocate: needs binary rewards and a difficulty fit (give --success-threshold for "
            "a graded log)"
        )
    if p.get("a") is None:
        raise validate.ConfigError(f"allocate: needs a difficulty fit, and {p['fit_reason']}")
    g = tables["groups"]
    per = g.groupby("prompt", sort=True).agg(
        groups=("n", "size"), responses=("n", "sum"), successes=("successes", "sum")
    )
    a, b, G0 = float(p["a"]), float(p["b"]), int(p["G"])
    alpha = a + per["successes"].to_numpy(float)
    beta = b + (per["responses"] - per["successes"]).to_numpy(float)
    cap = max(ALLOCATION_CAP * G0, 4)
    a1, a0, reasons = theory.tables(cfg.allocate_estimator, cap)
    curve = theory.posterior_curves(a1, a0, alpha, beta, cfg.allocate_rho)
    P = len(per)
    G = theory.greedy(curve, np.ones(P), G0 * P) if G0 >= 2 else np.full(P, G0)
    uniform = np.full(P, G0)
    mse_u, mse_a = (np.take_along_axis(curve, x[:, None], -1)[:, 0] for x in (uniform, G))

    def zero_signal(size):  # E[p^G + (1 − p)^G] under each prompt's posterior
        from scipy.special import betaln

        return np.exp(betaln(alpha + size, beta) - betaln(alpha, beta)) + np.exp(
            betaln(alpha, beta + size) - betaln(alpha, beta)
        )

    zs_u, zs_a = zero_signal(uniform), zero_signal(G)
    table = pd.DataFrame(
        {
            "prompt": per.index.astype(str),
            "groups": per["groups"].to_numpy(),
            "responses": per["responses"].to_numpy(),
            "successes": per["successes"].to_numpy(),
            "p_mean": alpha / (alpha + beta),
            "G": G.astype(int),
            "G_log": uniform,
            "mse_share_log": mse_u / mse_u.sum(),
            "mse_share": mse_a / mse_u.sum(),
            "zero_signal_log": zs_u,
            "zero_signal": zs_a,
        }
    )
    summary = {
        "estimator": cfg.allocate_estimator,
        "rho": cfg.allocate_rho,
        "prompts": P,
        "G_log": G0,
        "budget_per_pass": int(G.sum()),
        "prior_a": a,
        "prior_b": b,
        "G_min": int(G.min()),
        "G_max": int(G.max()),
        "cap": cap,
        "convex": theory.is_convex(curve),
        "predicted_mse_ratio": float(mse_a.sum() / mse_u.sum()),
        "zero_signal_groups_log": float(zs_u.sum()),
        "zero_signal_groups": float(zs_a.sum()),
        "zero_signal_rollouts_log": float(zs_u @ uniform),
        "zero_signal_rollouts": float(zs_a @ G),
        "model": "reward-only: E||W||^2 the same for every response, ||g_x||^2 = rho p(1-p); "
        "posterior Beta(a + successes, b + failures) per prompt, the pooled fit as prior",
    }
    return table, summary


def allocation_text(summary: dict) -> str:
    s = summary
    return "\n".join(
        [
            "## Allocation (--allocate)",
            f"Per-prompt group sizes for {s['prompts']} prompts at the log's budget "
            f"({s['G_log']} per prompt, {s['budget_per_pass']} per pass over them): G from "
            f"{s['G_min']} to {s['G_max']} ({s['estimator']}, rho = {s['rho']:g}).",
            f"Predicted MSE against G = {s['G_log']} for every prompt: "
            f"x{s['predicted_mse_ratio']:.3f} (under the reward-only model: " + s["model"] + ").",
            f"Zero-signal groups per pass: {s['zero_signal_groups_log']:.1f} at the log's G, "
            f"{s['zero_signal_groups']:.1f} allocated ({s['zero_signal_rollouts_log']:.0f} and "
            f"{s['zero_signal_rollouts']:.0f} rollouts).",
            "allocation.csv (prompt, G, ...) is the table a script applies: give prompt x "
            "G responses when it is next drawn.",
        ]
    )
