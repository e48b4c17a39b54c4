"""``gpolab tree``: the tree-branching lab, K thoughts × M continuations (issue 6, DESIGN §6).

Grid mode (default) measures every (K, M) of ``--K × --M``; ``--budget N`` measures every split
K·M = N (K ≥ 2) and recommends the one with the lowest MSE × token cost K·(L_think + M·L_answer).
``--model finite`` (softmax thought policy over ``--thoughts`` thoughts) adds ``grad_mse``, the MSE
of the thought-level policy gradient ĝ = (1/K) Σ_k Â_k (e_{t_k} − π), and ranks splits by it.
"""

from __future__ import annotations

import argparse
import dataclasses

from gpolab.commands import add_config_flags, given
from gpolab.treelab import TreeLabConfig

DEFAULTS = TreeLabConfig()
HELP = {
    "a": "thought values p ~ Beta(a, b): a",
    "b": "thought values p ~ Beta(a, b): b",
    "K": "comma-separated thought counts K >= 2",
    "M": "comma-separated continuations per thought M >= 1",
    "budget": "fixed leaf budget N: measure every split K*M = N with K >= 2 (--K restricts the K)",
    "seeds": "Monte Carlo trees per cell",
    "chunk": "largest number of seeds per compiled chunk (capped at ~2M leaves per chunk)",
    "seed": "master PRNG seed; seed i uses fold_in(key, i)",
    "variant": "thought-std (std over thought means), leaf-std (over all leaves) or mean-only",
    "ddof": "std degrees of freedom, 0 or 1",
    "eps": "added to the std",
    "model": "beta (p ~ Beta(a, b)) or finite (softmax policy over --thoughts thoughts, values "
    "~ Beta(a, b); adds grad_mse)",
    "thoughts": "finite model: number of distinct thoughts",
    "logit_scale": "finite model: std of the thought-policy logits",
    "instance_seed": "finite model: seed of the random thought set",
    "think_len": "token cost model: tokens per thought L_think",
    "answer_len": "token cost model: tokens per continuation L_answer",
    "out": "output directory for results.parquet, results.csv and the figures",
}


def register(sub) -> None:
    p = sub.add_parser(
        "tree",
        help="tree branching lab: K thoughts x M continuations, variance floor, best split",
        description="Thought-level advantages of K thoughts x M continuations (arXiv 2509.24494) "
        "over many seeds: conditional variance, MSE against the population-standardized value, "
        "correlation and degenerate-group fraction, with the exact closed forms for Beta(a, b) "
        "thought values.  --budget N compares every split K*M = N and recommends one.  Writes "
        "results.parquet, results.csv and figures to --out.",
    )
    p.add_argument("--json", action="store_true", help="print the rows as JSON lines on stdout")
    p.add_argument("--figures-dir", default=None, help="also copy the figures here (e.g. figures)")
    add_config_flags(p, TreeLabConfig, HELP)
    p.set_defaults(func=run)


def _ints(field: str, text: str) -> tuple[int, ...]:
    from gpolab.validate import ConfigError

    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ConfigError(
            f"{field}: got {text!r}; allowed: a comma-separated list of integers"
        ) from None


def config(args: argparse.Namespace) -> TreeLabConfig:
    """The validated config: defaults overridden by the flags that were given."""
    changes = given(args, TreeLabConfig)
    for name in ("K", "M"):
        if name in changes:
            changes[name] = _ints(name, changes[name])
    cfg = dataclasses.replace(DEFAULTS, **changes)
    cfg.validate()
    from gpolab.output import prepare as check_writable

    check_writable(cfg.out)
    return cfg


def _record(rec: dict) -> dict:
    """A JSON-safe row: NaN → null, integer columns as int."""
    import math

    out = {}
    for k, v in rec.items():
        if isinstance(v, float) and math.isnan(v):
            v = None
        out[k] = int(v) if k in ("K", "M", "leaves") else v
    return out


def run(args) -> int:
    import json
    import shutil
    import sys
    from pathlib import Path

    import pandas as pd

    from gpolab import treelab
    from gpolab.output import write_tables
    from gpolab.progress import Progress

    cfg = config(args)
    cells = cfg.cells()
    with Progress(len(cells), "tree") as progress:
        df = treelab.run_lab(
            cfg,
            on_row=lambda r: progress.update(1, f"K={r['K']} M={r['M']}: mse={r['mse']:.4g}"),
        )
    out = Path(cfg.out)
    paths = write_tables(out, {"results": df})
    label = f"Beta({cfg.a:g}, {cfg.b:g})" if cfg.model == "beta" else f"{cfg.thoughts} thoughts"
    tag = f"{label}, {cfg.variant}, ddof {cfg.ddof}, {cfg.seeds} seeds"
    figs, best = [], None
    if cfg.budget:
        best = treelab.recommend(df)
        figs.append(treelab.plot_budget(df, out / "tree_budget.png", best, f"K·M = {cfg.budget}"))
    else:
        if df["K"].nunique() > 1:
            figs.append(treelab.plot_floor(df, out / "tree_floor.png", f"Floor in K ({tag})"))
        if df["M"].nunique() > 1:
            from gpolab.theory import tree as theory

            law = treelab.setup(cfg)[2]
            figs.append(
                treelab.plot_variance_vs_M(
                    df,
                    out / "tree_variance_vs_M.png",
                    f"Variance vs M ({tag})",
                    lambda M: theory.floor(law, M, cfg.variant, cfg.eps),
                )
            )
        if df["K"].nunique() > 1 and df["M"].nunique() > 1:
            figs.append(treelab.plot_heatmap(df, out / "tree_lab_heatmap.png", title=tag))
    if args.figures_dir:
        Path(args.figures_dir).mkdir(parents=True, exist_ok=True)
        for fig in figs:
            shutil.copy(fig, Path(args.figures_dir) / fig.name)
    keys = treelab.json_keys(cfg)
    if args.json:
        for rec in df[list(keys)].to_dict(orient="records"):
            print(json.dumps(_record(rec)))
    else:
        with pd.option_context("display.width", 200, "display.max_columns", 20):
            print(df[list(keys)].to_string(index=False, float_format="%.4g"))
    if best is not None:  # on stderr with --json, so stdout stays JSON lines
        print(
            f"recommended split: K={best['K']}, M={best['M']}: lowest {best['metric']} x cost "
            f"({best['value']:.4g} x {best['cost']:.4g} tokens = {best['score']:.4g}; averaging "
            f"independent trees of this shape gives the lowest {best['metric']} per token); "
            f"lowest {best['metric']} at this leaf budget regardless of cost: "
            f"K={best['lowest_K']}, M={best['lowest_M']} ({best['lowest_value']:.4g})",
            file=sys.stderr if args.json else sys.stdout,
        )
    if not args.json:
        wrote = ", ".join(map(str, [*paths, *figs]))
        print(f"\nwrote {wrote}; total {df['seconds'].sum():.1f} s")
    return 0
