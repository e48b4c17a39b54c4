"""``gpolab sweep``: MSE of every estimator over a grid, against exact gradients."""

from __future__ import annotations

import json

from gpolab.commands import add_config_flags, given
from gpolab.sweep import SweepConfig

TABLE_COLUMNS = {
    "bandit": [
        "estimator",
        "G",
        "mse",
        "mse_ci_low",
        "mse_ci_high",
        "theory_mse",
        "bias_sq",
        "degenerate_frac",
        "seconds",
    ],
    "arithmetic": [
        "policy",
        "estimator",
        "G",
        "mse",
        "mse_ci_low",
        "mse_ci_high",
        "theory_mse",
        "theory_mse_se",
        "theory_first_order",
        "degenerate_frac",
        "seconds",
    ],
    "tree": [
        "variant",
        "K",
        "M",
        "mse",
        "mse_group",
        "variance",
        "corr",
        "degenerate_frac",
        "theory_degenerate_frac",
        "seconds",
    ],
}
HELP = {
    "env": "environment: bandit (softmax contextual bandit), tree (K thoughts x M continuations) "
    "or arithmetic (autoregressive LLM surrogate on arithmetic questions)",
    "estimators": "bandit, arithmetic: comma list of vanilla, oracle, loo, mean, grpo, ustat",
    "G": "bandit, arithmetic: comma list of group sizes",
    "K": "tree: comma list of thought counts (>= 2)",
    "M": "tree: comma list of continuations per thought (>= 1)",
    "variants": "tree: comma list of thought-std, leaf-std, mean-only",
    "seeds": "Monte Carlo seeds per cell",
    "chunk": "seeds per compiled chunk (0: sized to the CPU cache from XLA's memory analysis; "
    "memory bound; results do not depend on it)",
    "seed": "master PRNG seed; seed i uses fold_in(key, i)",
    "B": "bandit: 0 = one group for every prompt (mean per-prompt MSE); b > 0 = b iid prompts",
    "scale": "grpo std: group, batch or none (TRL scale_rewards)",
    "ddof": "std degrees of freedom, 0 or 1 (TRL/verl/OpenRLHF use 1)",
    "eps": "added to the std (TRL 1e-4, verl 1e-6, OpenRLHF 1e-9)",
    "kind": "bandit policy: tabular or loglinear",
    "prompts": "bandit: number of prompts P",
    "actions": "bandit: actions (responses) per prompt A",
    "dim": "bandit loglinear: feature dimension d",
    "logit_scale": "bandit: std of the initial logits",
    "success_a": "bandit: success probabilities ~ Beta(success_a, success_b)",
    "success_b": "bandit: success probabilities ~ Beta(success_a, success_b)",
    "instance_seed": "seed of the random bandit / finite-thought instance",
    "model": "tree thought values: beta (p ~ Beta(a, b)) or finite (softmax thought policy)",
    "a": "tree: Beta a",
    "b": "tree: Beta b",
    "thoughts": "tree finite model: number of distinct thoughts",
    "policy": "arithmetic: comma list of base, instruct, icl (mean V 0.15 / 0.40 / 0.65)",
    "questions": "arithmetic: number of questions (seeded generator, 5 categories)",
    "per_seed": "arithmetic: questions per seed, one group each (row: mean per-question MSE)",
    "filler": "arithmetic: chain-of-thought filler tokens before each answer (0 = answer only)",
    "hidden": "arithmetic: GRU width",
    "truth_samples": "arithmetic: sampled sequences per question for the Monte Carlo part of S2",
    "x64": "float64 mode (theory checks)",
    "shard": "shard the seed axis over all devices (and all processes with --coordinator)",
    "out": "output directory for results.parquet, results.csv and the figure",
}


def register(sub) -> None:
    p = sub.add_parser(
        "sweep",
        help="MSE of gradient estimators over a grid of G (bandit) or K x M (tree)",
        description="Run every (estimator, G) or (K, M) cell over many seeds and compare the "
        "Monte Carlo MSE with the exact finite-G theory.  Writes results.parquet, results.csv "
        "and a figure to --out.",
    )
    p.add_argument("--config", help="TOML experiment file ([sweep] table); flags override it")
    p.add_argument("--json", action="store_true", help="print the rows as JSON lines on stdout")
    p.add_argument(
        "--fresh",
        action="store_true",
        help="recompute every cell (default: reuse finished cells found in --out)",
    )
    dist = p.add_argument_group("multi-process (jax.distributed; implies --shard)")
    dist.add_argument("--coordinator", help="host:port of process 0, e.g. 127.0.0.1:12345")
    dist.add_argument("--num-processes", type=int, default=1, help="processes in the run")
    dist.add_argument("--process-id", type=int, default=0, help="this process's index")
    add_config_flags(p, SweepConfig, HELP)
    p.set_defaults(func=run)


def run(args) -> int:
    import pandas as pd

    from gpolab import plots
    from gpolab.sweep import load_config, num_cells, run_sweep, write_results

    cfg = load_config(args.config) if args.config else SweepConfig()
    cfg = cfg.replace(**given(args, SweepConfig))
    cfg.validate()
    if args.coordinator:
        from gpolab.engine import init_distributed

        init_distributed(args.coordinator, args.num_processes, args.process_id)
        cfg = cfg.replace(shard=True)
    if args.process_id != 0:  # every process computes; process 0 reports and writes
        run_sweep(cfg)
        return 0
    from gpolab.progress import Progress
    from gpolab.store import Store

    def label(row):
        if cfg.env == "arithmetic":
            return f"{row['policy']} {row['estimator']} G={row['G']}: mse={row['mse']:.4g}"
        if cfg.env == "bandit":
            return f"{row['estimator']} G={row['G']}: mse={row['mse']:.4g}"
        return f"{row['variant']} K={row['K']} M={row['M']}: mse={row['mse']:.4g}"

    # a multi-process run keeps every process in lockstep, so it computes every cell
    store = None if args.fresh or args.coordinator else Store(cfg.out)
    with Progress(num_cells(cfg), f"sweep {cfg.env}") as progress:
        df = run_sweep(
            cfg,
            store=store,
            on_skip=progress.skip,
            on_row=lambda row: progress.update(1, label(row)),
        )
    paths = write_results(df, cfg.out)
    if cfg.env == "bandit":
        fig = plots.mse_vs_G(
            df,
            f"{cfg.out}/mse_vs_G.png",
            title=f"{cfg.kind} bandit, P={cfg.prompts}, A={cfg.actions}, {cfg.seeds} seeds",
        )
    elif cfg.env == "arithmetic":
        fig = plots.mse_vs_G(
            df,
            f"{cfg.out}/mse_vs_G.png",
            title=f"arithmetic surrogate, {cfg.questions} questions, filler {cfg.filler}, "
            f"{cfg.seeds} seeds × {cfg.per_seed} questions",
        )
    else:
        fig = plots.tree_heatmap(
            df,
            f"{cfg.out}/mse_heatmap.png",
            title=f"tree ({cfg.model} thoughts), {cfg.seeds} seeds",
        )
    if args.json:
        for rec in json.loads(df.to_json(orient="records")):
            print(json.dumps(rec))
    else:
        with pd.option_context("display.width", 200, "display.max_columns", 20):
            print(df[TABLE_COLUMNS[cfg.env]].to_string(index=False, float_format="%.4g"))
        print(f"\nwrote {', '.join(map(str, paths))}, {fig}; total {df['seconds'].sum():.1f} s")
    return 0
