"""``gpolab plan``: read a real GRPO run's rollout log and say what its group size, estimator and
sampling do (theory §10, §8; issue 18).

The log (:mod:`gpolab.integrations.rollouts`: TRL's completions parquet, verl's rollout jsonl, or a
plain table) gives, per prompt group, the rewards of its G responses at every logged step. With
binary rewards, c successes of n per group, and prompt difficulty p ~ Beta(a, b) fitted by
beta-binomial maximum likelihood (per window of steps and pooled), everything below is exact under
the fit (:mod:`gpolab.theory.difficulty`):

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
import math
import os

import numpy as np
import pandas as pd

from gpolab import validate
from gpolab.integrations import rollouts
from gpolab.labs.plan import plots

# the lab protocol's NAME, NEEDS, Config, and the checks Config.validate runs
from gpolab.labs.plan.config import (  # noqa: F401
    DEFAULT_ESTIMATORS,
    FORMATS,
    MAX_DRAWS,
    NAME,
    NEEDS,
    Config,
    check_log,
    check_out,
    draws_bytes,
)
from gpolab.labs.plan.gstar_rows import estimator_row, gstar_row, price_row, rule_row, safe_row

# report and summary_json: the lab protocol's text and JSON; pooled: the pooled row (plancheck)
from gpolab.labs.plan.report import MAX_G, POOLED, pooled, report, summary_json  # noqa: F401
from gpolab.labs.plan.windows import analyze_window, kappa_table, modal

TABLES = ("summary", "curve", "kappa", "groups")


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
# run.json keys the report names first (the trainer's loss and sampling)
TRAINER_KEYS = (
    "loss_type scale_rewards num_generations beta importance_sampling_level steps_per_generation"
).split()


def trainer_text(run: dict) -> str:
    """What the trainer's loss followed, and what neither G* models."""
    if not run:
        return ""
    said = ", ".join(f"{k} = {run[k]}" for k in TRAINER_KEYS if run.get(k) is not None)
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
    levels = rollouts.binary_levels(log)
    groups = _windows(rollouts.groups(log), cfg.window)
    check_groups(cfg, groups)
    G = modal(groups["n"])
    if cfg.allocate and G > MAX_G:  # before any fit: the tables would not fit in memory
        raise validate.ConfigError(
            f"allocate: the log's G = {G:,} is above {MAX_G}; allowed: a log with G <= {MAX_G} "
            f"(the allocation's count tables hold (8G)^2 numbers: {(8 * G) ** 2:,} here)"
        )
    summary, curve = [], []
    for window, sub in _by_window(groups):
        row, rows = analyze_window(cfg, sub, levels, window, log.frame)
        summary.append(row)
        curve.append(rows)
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
    curve = pd.concat(curve, ignore_index=True)
    return {"summary": summary, "curve": curve, "kappa": kappa, "groups": groups}


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


# ----------------------------------------------------------------------------- output
# the report and JSON summary: gpolab.labs.plan.report (imported above)


def figures(tables: dict) -> dict:
    return {"plan.png": plots.plan_figure}
