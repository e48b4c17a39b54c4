"""Which group size trains fastest on a real trainer, against ``gpolab plan``'s recommendation: a
repository tool, run in the TRL venv (``.venv-trl/bin/python -m tools.trl_groupsize``; torch,
transformers and trl are imported only to train).

TRL's ``GRPOTrainer`` (its defaults: ``loss_type = dapo``, ``scale_rewards = group``, one update
per generation) trains gpolab's small task (:mod:`gpolab.integrations.trl_task`: a 2-layer GPT-2
from a config, 62 prompts with single-token answers, easy and hard halves, binary reward) at
several group sizes G with the same rollouts per step N = B·G (B = N/G prompts), a constant
learning rate and no KL term, several seeds each (the seed draws the model's weights and TRL's
sampling).  Per run, from TRL's logged reward of every step: **rollouts to target** = N × the
first step at which the mean reward over the last ``window`` steps reaches ``target`` (∞: never
within the run, kept and reported as not reached) and the **final reward** (mean of the last
``window`` steps).  Per G: the median rollouts to target over seeds with a 95% percentile
bootstrap interval (seeds resampled; a median of ∞ is "not reached"), the share of seeds that
reached, the final reward's mean ± SE.

The **base runs** (one per G of ``bases``, seed 0, the same settings) carry ``PlanCallback``
measuring every group of every step; ``gpolab plan`` on each folder gives G* and its 95% interval
(the estimator the run trains, ``estimator_gstar*``, where plan gives it; loo's ``gstar*``
otherwise).  The comparison reads the one at G = ``base``; the others show how much plan's answer
depends on the run it reads.

**Comparison** (:func:`compare`): the best G is the one with the fewest median rollouts to target;
the G whose intervals overlap the best's are not told apart from it ("inconclusive" when there is
more than one); the verdict says whether the best G (or the set not told apart) lies in plan's
interval.  Output: ``--csv`` (one row per G with the settings, the intervals and plan's G*),
``--runs-csv`` (one row per run) and ``--plans-csv`` (one row per base run).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from gpolab import validate

COMMAND = "python -m tools.trl_groupsize"
FULL = {
    "gs": (2, 3, 4, 6, 8, 16),
    "seeds": 16,
    "rollouts": 48,
    "steps": 200,
    "lr": 3e-3,
    "target": 0.5,
    "window": 10,
    "base": 8,
    "bases": (4, 6, 8, 16),
    "boot": 2000,
}
QUICK = {
    **FULL,
    "gs": (2, 4),
    "seeds": 2,
    "rollouts": 8,
    "steps": 30,
    "window": 5,
    "base": 4,
    "bases": (4,),
    "boot": 200,
}
COLUMNS = [
    "G",
    "B",
    "rollouts_per_step",
    "seeds",
    "reached",
    "reached_share",
    "rollouts_median",
    "rollouts_lo",
    "rollouts_hi",
    "diff_median",
    "diff_lo",
    "diff_hi",
    "final_mean",
    "final_se",
    "steps",
    "lr",
    "target",
    "window",
    "base_G",
    "plan_gstar",
    "plan_lo",
    "plan_hi",
    "plan_model",
    "trl_version",
]
PLAN_COLUMNS = [
    "base_G",
    "groups",
    "plan_gstar",
    "plan_lo",
    "plan_hi",
    "plan_model",
    "reason",
    "safe_G",
    "safe_regret",
]


# ---- bookkeeping (numpy only) -------------------------------------------------------------------
def first_reach(rewards, target: float, window: int) -> float:
    """The first step t (1-based) at which the mean reward of steps t − window + 1 .. t reaches
    ``target``; ∞ when no full window does."""
    r = np.asarray(rewards, np.float64)
    if len(r) < window:
        return math.inf
    means = np.convolve(r, np.ones(window) / window, mode="valid")  # windows ending at window..T
    hit = np.flatnonzero(means >= target - 1e-12)
    return float(hit[0] + window) if hit.size else math.inf


def median_interval(x, *, level: float = 0.95, boot: int = 2000, seed: int = 0):
    """(median, lo, hi) of ``x`` over seeds, ∞ allowed (not reached): a percentile bootstrap
    interval of the median, seeds resampled; percentiles without interpolation (``inverted_cdf``),
    so ∞ stays ∞ and never turns into NaN."""
    x = np.asarray(x, np.float64)
    rng = np.random.default_rng(seed)
    reps = np.sort(x[rng.integers(0, len(x), (boot, len(x)))], axis=1)
    meds = _median_sorted(reps)
    a = (1 - level) / 2
    lo, hi = np.quantile(meds, [a, 1 - a], method="inverted_cdf")
    return float(_median_sorted(np.sort(x)[None])[0]), float(lo), float(hi)


def _median_sorted(s: np.ndarray) -> np.ndarray:
    """Row medians of sorted rows; the mean of the two middle values (∞ when one of them is)."""
    n = s.shape[1]
    lo, hi = s[:, (n - 1) // 2], s[:, n // 2]
    return np.where(np.isinf(hi), np.inf, (lo + hi) / 2)


def paired_difference(x, y, *, level: float = 0.95, boot: int = 2000, seed: int = 0):
    """(median(x) − median(y), lo, hi): a percentile bootstrap interval of the difference of
    medians with the seeds resampled jointly (``x[i]``, ``y[i]``: the same seed, so the same
    initial weights).  A replicate where both medians are ∞ (neither reached) counts as 0."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(x), (boot, len(x)))

    def diff(a, b):
        with np.errstate(invalid="ignore"):
            d = _median_sorted(np.sort(a, axis=1)) - _median_sorted(np.sort(b, axis=1))
        return np.where(np.isnan(d), 0.0, d)

    a = (1 - level) / 2
    lo, hi = np.quantile(diff(x[idx], y[idx]), [a, 1 - a], method="inverted_cdf")
    return float(diff(x[None], y[None])[0]), float(lo), float(hi)


def summarize(runs: pd.DataFrame, settings: dict, plan: dict) -> pd.DataFrame:
    """One row per G from the per-run table (G, seed, rollouts_to_target, final); ``diff_*``:
    each G's median rollouts to target minus the fastest G's (:func:`paired_difference`, by
    seed; NaN when no G's median reached)."""
    by_G = {
        int(G): d.sort_values("seed").set_index("seed")["rollouts_to_target"]
        for G, d in runs.groupby("G", sort=True)
    }
    medians = {G: median_interval(x, boot=2)[0] for G, x in by_G.items()}
    best = min(medians, key=lambda G: (medians[G], G))
    rows = []
    for G, d in runs.groupby("G", sort=True):
        med, lo, hi = median_interval(d["rollouts_to_target"], boot=settings["boot"])
        x, y = by_G[int(G)].align(by_G[best], join="inner")
        diff = (
            paired_difference(x, y, boot=settings["boot"])
            if math.isfinite(medians[best])
            else (math.nan,) * 3
        )
        final = d["final"].to_numpy(np.float64)
        reached = int(np.isfinite(d["rollouts_to_target"]).sum())
        rows.append(
            {
                "G": int(G),
                "B": settings["rollouts"] // int(G),
                "rollouts_per_step": settings["rollouts"],
                "seeds": len(d),
                "reached": reached,
                "reached_share": reached / len(d),
                "rollouts_median": med,
                "rollouts_lo": lo,
                "rollouts_hi": hi,
                "diff_median": diff[0],
                "diff_lo": diff[1],
                "diff_hi": diff[2],
                "final_mean": float(final.mean()),
                "final_se": float(final.std(ddof=1) / math.sqrt(len(final)))
                if len(final) > 1
                else math.nan,
                "steps": settings["steps"],
                "lr": settings["lr"],
                "target": settings["target"],
                "window": settings["window"],
                "base_G": settings["base"],
                "plan_gstar": plan["gstar"],
                "plan_lo": plan["lo"],
                "plan_hi": plan["hi"],
                "plan_model": plan.get("model", ""),
                "trl_version": settings.get("trl_version", ""),
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS)


def _nan(x) -> float:
    """A plan.json number (None: NaN; JSON has no ∞, so plan writes "inf")."""
    return math.nan if x is None else float(x)


def compare(rows) -> dict:
    """The verdict of the per-G rows (dicts or a DataFrame with G, rollouts_median, rollouts_lo,
    rollouts_hi, plan_gstar, plan_lo, plan_hi): ``best`` (the G with the fewest median rollouts
    to target; None when no G's median reached), ``tied`` (the G whose interval overlaps the
    best's, the best included), ``inside`` (those of ``tied`` in plan's interval), ``verdict``
    (agree / disagree / inconclusive / no comparison) and ``text``, one line.  With the
    ``diff_*`` columns, ``slower``: the G whose paired difference to the best is above 0 (the
    sharper reading, said in the text; the verdict is the intervals' overlap)."""
    rows = rows.to_dict("records") if isinstance(rows, pd.DataFrame) else list(rows)
    plan = rows[0]
    lo, hi, gstar = plan["plan_lo"], plan["plan_hi"], plan["plan_gstar"]
    reached = [r for r in rows if math.isfinite(r["rollouts_median"])]
    out = {"best": None, "tied": [], "inside": [], "verdict": "no comparison"}
    if not reached:
        return {**out, "text": "no G reached the target in half of its seeds: no comparison"}
    best = min(reached, key=lambda r: (r["rollouts_median"], r["G"]))
    tied = [int(r["G"]) for r in rows if r["rollouts_lo"] <= best["rollouts_hi"]]
    out.update(best=int(best["G"]), tied=tied)
    fastest = (
        f"fastest G = {int(best['G'])} ({best['rollouts_median']:,.0f} rollouts to target, 95% "
        f"interval {best['rollouts_lo']:,.0f} .. {_end(best['rollouts_hi'])})"
    )
    if len(tied) > 1:
        others = ", ".join(str(g) for g in tied if g != out["best"])
        fastest += f", not told apart from G = {others} by the intervals' overlap"
    if not math.isnan(rows[0].get("diff_lo", math.nan)):  # the sharper, paired reading
        slower = [int(r["G"]) for r in rows if r["diff_lo"] > 0]
        out["slower"] = slower
        fastest += (
            f"; paired by seed, G = {', '.join(map(str, slower))} slower than it"
            if slower
            else "; paired by seed, no G slower than it"
        )
    if math.isnan(lo):
        return {**out, "text": f"{fastest}; plan gave no G* and no bound: no comparison"}
    inside = [g for g in tied if lo <= g <= hi]
    out["inside"] = inside
    if math.isnan(gstar):  # undecided: the lower bound the log allows
        where = f"plan's bound G* >= {lo:.3g} (no estimate: the log cannot decide)"
    else:
        where = f"plan's G* = {gstar:.3g} (95% interval {lo:.3g} .. {_end(hi)})"
    if len(tied) > 1:
        verdict = "inconclusive"
        held = f"holds G = {', '.join(map(str, inside))} of them" if inside else "holds none"
        text = f"inconclusive: {fastest}; {where} {held}"
    elif inside:
        verdict, text = "agree", f"agree: {fastest}; {where} holds it"
    else:
        verdict, text = "disagree", f"disagree: {fastest}; {where} does not hold it"
    return {**out, "verdict": verdict, "text": text}


def _end(x: float) -> str:
    return "∞" if math.isinf(x) else f"{x:.3g}" if x < 1000 else f"{x:,.0f}"


def plan_gstar(summary: dict) -> dict:
    """G* and its 95% interval from ``gpolab plan``'s plan.json: the run's estimator's
    (``estimator_gstar*``, named by ``estimator_spec``) where plan gives it, else loo's
    (``gstar*``; with no G*, ``gstar_lo`` is the lower bound the log allows).  An interval end at
    the top of plan's G grid (``estimator_grid_max``) is open: ∞.  ``safe_G``/``safe_regret``:
    plan's safe G and its worst excess noise (the run's estimator's where plan gives it)."""
    if summary.get("estimator_gstar") is not None:
        key, model = "estimator_gstar", str(summary.get("estimator_spec") or "estimator")
        if summary.get("gstar") is None:
            model += "; loo's G*: not estimated"
    else:
        key, model = "gstar", "loo"
        if summary.get("estimator_spec"):
            model += f"; the run's estimator {summary['estimator_spec']}: not estimated"
    safe = "estimator_safe" if summary.get("estimator_safe_G") is not None else "safe"
    hi = _nan(summary.get(f"{key}_hi"))
    top = summary.get("estimator_grid_max") if key == "estimator_gstar" else None
    if top is not None and hi >= float(top):
        hi = math.inf
    return {
        "gstar": _nan(summary.get(key)),
        "lo": _nan(summary.get(f"{key}_lo")),
        "hi": hi,
        "model": model,
        "reason": summary.get("estimator_reason" if key == "estimator_gstar" else "gstar_reason"),
        "safe_G": _nan(summary.get(f"{safe}_G")),
        "safe_regret": _nan(summary.get(f"{safe}_regret")),
    }


# ---- training (torch, trl) ----------------------------------------------------------------------
def train(out, G: int, seed: int, s: dict, *, callback: bool = False):
    """One TRL run; its per-step rewards (TRL's logged ``reward``) and the trainer."""
    import torch
    from transformers import PrinterCallback

    from gpolab.integrations.trl_task import build

    torch.set_num_threads(1)
    trainer = build(
        out,
        G=G,
        groups=s["rollouts"] // G,
        steps=s["steps"],
        lr=s["lr"],
        seed=seed,
        lr_scheduler_type="constant",
        log_completions=False,
    )
    trainer.remove_callback(PrinterCallback)
    if callback:
        from gpolab.integrations.trl import PlanCallback

        trainer.add_callback(PlanCallback(trainer, groups_per_step=s["rollouts"] // G, every=1))
    trainer.train()
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    if len(rewards) != s["steps"]:
        raise RuntimeError(f"TRL logged {len(rewards)} rewards for {s['steps']} steps")
    return np.asarray(rewards, np.float64), trainer


def plans(s: dict, out: Path, *, progress=print) -> pd.DataFrame:
    """A base run at each G of ``s["bases"]`` (seed 0, ``PlanCallback`` on every group of every
    step) and `gpolab plan` on its folder (``out/plan-G{G}``): one row per base run."""
    from gpolab.runner.cli import main as gpolab

    rows = []
    for G in s["bases"]:
        base, folder = out / f"base-G{G}", out / f"plan-G{G}"
        train(base, G, 0, s, callback=True)
        args = ["plan", str(base), "--out", str(folder)] + (["--quick"] if s["quick"] else [])
        if gpolab(args) != 0:
            raise RuntimeError(f"gpolab {' '.join(args)} failed")
        rows.append(plan_row(G, s, folder))
        progress(f"plan on the base run at G = {G}: {rows[-1]}")
    return pd.DataFrame(rows, columns=PLAN_COLUMNS)


def plan_row(G: int, s: dict, folder: Path) -> dict:
    """One base run's row: :func:`plan_gstar` of ``folder/plan.json``."""
    p = plan_gstar(json.loads((Path(folder) / "plan.json").read_text()))
    return {
        "base_G": G,
        "groups": s["steps"] * (s["rollouts"] // G),
        **{f"plan_{k}": p[k] for k in ("gstar", "lo", "hi", "model")},
        "reason": p["reason"] or "",
        "safe_G": p["safe_G"],
        "safe_regret": p["safe_regret"],
    }


def grid(s: dict, out: Path, *, progress=print) -> pd.DataFrame:
    """Every (G, seed) run: one row each; their per-step rewards go to ``out/rewards.csv``."""
    per_run, curves = [], []
    for G in s["gs"]:
        for seed in range(s["seeds"]):
            r, _ = train(out / "runs" / f"G{G}-s{seed}", G, seed, s)
            curves.append(
                pd.DataFrame({"G": G, "seed": seed, "step": np.arange(1, len(r) + 1), "reward": r})
            )
            t = first_reach(r, s["target"], s["window"])
            per_run.append(
                {
                    "G": G,
                    "seed": seed,
                    "rollouts_to_target": t * s["rollouts"],
                    "final": float(r[-s["window"] :].mean()),
                    "first_reward": float(r[: s["window"]].mean()),
                }
            )
            progress(f"G={G} seed={seed}: {per_run[-1]}")
    out.mkdir(parents=True, exist_ok=True)
    pd.concat(curves).to_csv(out / "rewards.csv", index=False)
    return pd.DataFrame(per_run)


def primary(s: dict, plan_rows: pd.DataFrame) -> dict:
    """The comparison's plan: the row of the base run at ``s["base"]``, as :func:`summarize`
    reads it."""
    r = plan_rows[plan_rows["base_G"] == s["base"]].iloc[0]
    return {k: r[f"plan_{k}"] for k in ("gstar", "lo", "hi", "model")}


def _version(package: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return ""


def settings(args) -> dict:
    """The run's settings from the flags (quick or full defaults, each overridable), checked."""
    s = dict(QUICK if args.quick else FULL)
    for k in ("seeds", "rollouts", "steps", "lr", "target", "window", "base"):
        if getattr(args, k) is not None:
            s[k] = getattr(args, k)
    if args.gs:
        s["gs"] = tuple(args.gs)
    if args.bases:
        s["bases"] = tuple(args.bases)
    s["bases"] = tuple(sorted({*s["bases"], s["base"]}))  # the comparison's base among them
    validate.integer("seeds", s["seeds"], 2)
    validate.integer("steps", s["steps"], 1)
    validate.integer("window", s["window"], 1)
    validate.integer("base", s["base"], 3)  # plan's U-statistics need groups of >= 3
    if s["window"] > s["steps"]:
        raise validate.ConfigError(f"--window {s['window']} > --steps {s['steps']}")
    for G in s["bases"]:
        validate.integer("base G", G, 3)
    for G in (*s["gs"], *s["bases"]):
        validate.integer("G", G, 2)
        if s["rollouts"] % G or s["rollouts"] // G < 2:
            raise validate.ConfigError(
                f"--rollouts {s['rollouts']} is not a multiple of G = {G} with >= 2 groups "
                "(the same rollouts per step at every G)"
            )
    if not 0 < s["lr"] < 1:
        raise validate.ConfigError(f"--lr {s['lr']}: allowed: 0 < lr < 1")
    return {**s, "quick": bool(args.quick)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="CI size: G 2, 4; 2 seeds; 30 steps")
    p.add_argument("--gs", type=int, nargs="+", help=f"group sizes (default {FULL['gs']})")
    p.add_argument("--seeds", type=int, help=f"seeds per G (default {FULL['seeds']})")
    p.add_argument("--rollouts", type=int, help=f"rollouts per step B·G ({FULL['rollouts']})")
    p.add_argument("--steps", type=int, help=f"steps per run ({FULL['steps']})")
    p.add_argument("--lr", type=float, help=f"learning rate ({FULL['lr']})")
    p.add_argument("--target", type=float, help=f"target reward ({FULL['target']})")
    p.add_argument("--window", type=int, help=f"steps in the sliding mean ({FULL['window']})")
    p.add_argument("--base", type=int, help=f"the comparison's base run G ({FULL['base']})")
    p.add_argument("--bases", type=int, nargs="+", help=f"base runs' G ({FULL['bases']})")
    p.add_argument("--out", default="results/trl_groupsize", help="the runs' folders")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--plans-only",
        action="store_true",
        help="train the base runs only; the (G, seed) runs are read from --runs-csv",
    )
    mode.add_argument(
        "--resummarize",
        action="store_true",
        help="no training: the tables again from --runs-csv and OUT/plan-G*/plan.json",
    )
    p.add_argument("--csv", default="docs/data/trl_groupsize.csv", help="per-G table")
    p.add_argument("--runs-csv", default="docs/data/trl_groupsize_runs.csv", help="per-run table")
    p.add_argument(
        "--plans-csv", default="docs/data/trl_groupsize_plans.csv", help="per-base-run table"
    )
    args = p.parse_args(argv)
    try:
        s = settings(args)
    except validate.ConfigError as e:
        print(f"{COMMAND}: {e}", file=sys.stderr)
        return 2
    out, say = Path(args.out), lambda m: print(m, file=sys.stderr)
    s["trl_version"] = _version("trl")
    if args.resummarize:
        plan_rows = pd.DataFrame(
            [plan_row(G, s, out / f"plan-G{G}") for G in s["bases"]], columns=PLAN_COLUMNS
        )
    else:
        plan_rows = plans(s, out, progress=say)
    runs = (
        pd.read_csv(args.runs_csv)
        if args.resummarize or args.plans_only
        else grid(s, out, progress=say)
    )
    rows = summarize(runs, s, primary(s, plan_rows))
    for path, df in ((args.csv, rows), (args.runs_csv, runs), (args.plans_csv, plan_rows)):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        df.to_csv(path, index=False)
    print(rows.to_string(index=False))
    print(plan_rows.to_string(index=False))
    print(compare(rows)["text"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
