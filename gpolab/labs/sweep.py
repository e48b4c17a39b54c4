"""The sweep lab: MSE of every estimator over a grid (G for the bandits and the arithmetic
surrogate, K × M for trees) against the exact gradient, one engine run per cell.

:class:`Config` is the single source of defaults; ``validate()`` checks everything in plain
Python before anything is traced.  Rows carry every setting their numbers depend on (grpo's
``scale``, ``ddof``, ``eps`` included) and the exact finite-G theory where it exists.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from gpolab import configs, estimators, validate
from gpolab.configs import option

NAME = "sweep"
TABLES = ("results",)
ENVS = ("bandit", "tree", "arithmetic")
POLICIES = ("base", "instruct", "icl")
TREE_VARIANTS = estimators.TREE_VARIANTS
# the arithmetic surrogate's chunk on CPU: its compilation (~4 s) outweighs what the engine's
# chunk probe could save at a sweep's few thousand seeds; 32 was the fastest of 4…32 seeds per
# chunk.  On an accelerator 32 seeds would leave it idle: there the chunk is automatic.
ARITHMETIC_CHUNK = 32


def arithmetic_chunk() -> int:
    """:data:`ARITHMETIC_CHUNK` on CPU, the engine's automatic chunk on an accelerator."""
    import jax

    return ARITHMETIC_CHUNK if jax.default_backend() == "cpu" else 0


GROUPED = {"env": ("bandit", "arithmetic")}
BANDIT = {"env": ("bandit",)}
TREE = {"env": ("tree",)}
ARITH = {"env": ("arithmetic",)}
STRENGTH = (0.15, 0.40, 0.65)  # = arithmetic.POLICIES (kept in sync by a test)
# arithmetic options added after cells were stored: left out of a row's key at their defaults,
# so stored cells of the default policies stay valid
KEY_IF_CHANGED = {"strength": STRENGTH, "filler_sharpen": 0.0, "lengths": "one",
                  "length_min": 50, "length_max": 1000, "norm_length": 0,
                  "dynamic_sampling": False}  # fmt: skip
DEFAULT_AGG, LOSS_AGG_MODES = estimators.DEFAULT_LOSS_AGG, estimators.LOSS_AGG_MODES
LENGTHS = {"bandit": ("one", "independent", "longer-when-wrong", "longer-when-right"),
           "arithmetic": ("one", "generated")}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything a sweep needs.  Tuples are grids; every combination is one cell."""

    LAB: ClassVar[str] = NAME
    QUICK: ClassVar[dict] = {"seeds": 4000}

    env: str = option("bandit", "bandit (softmax contextual bandit), tree (K thoughts x M "
                      "continuations) or arithmetic (autoregressive LLM surrogate)")  # fmt: skip
    estimators: tuple[str, ...] = option(
        ("vanilla", "oracle", "loo", "mean", "grpo"),
        "comma list of estimators: registry names (`gpolab estimators` lists them, e.g. grpo, "
        "verl/grpo, nemo/grpo), NAME[option=value,...] (e.g. trl/grpo[scale_rewards=batch]) or "
        "package.module:function (your own)", when=GROUPED,
    )  # fmt: skip
    G: tuple[int, ...] = option((2, 4, 8, 16, 32, 64), "comma list of group sizes", when=GROUPED)
    K: tuple[int, ...] = option((2, 4, 8, 16), "comma list of thought counts (>= 2)", when=TREE)
    M: tuple[int, ...] = option((1, 2, 4, 8), "comma list of continuations per thought (>= 1)",
                                when=TREE)  # fmt: skip
    variants: tuple[str, ...] = option(
        ("thought-std",), "comma list of " + ", ".join(TREE_VARIANTS), when=TREE
    )
    seeds: int = option(100_000, "Monte Carlo seeds per cell")
    chunk: int = option(0, "seeds per compiled chunk (0: sized to the CPU cache; results do not "
                        "depend on it)", key=False)  # fmt: skip
    seed: int = option(0, "master PRNG seed; seed i uses fold_in(key, i)")
    B: int = option(0, "0 = one group for every prompt (mean per-prompt MSE); b > 0 = b iid "
                    "prompts", when=BANDIT)  # fmt: skip
    scale: str = option("group", "grpo std: group, batch or none (TRL scale_rewards)",
                        when=GROUPED)  # fmt: skip
    ddof: int = option(1, "std degrees of freedom, 0 or 1 (TRL/verl/OpenRLHF use 1)")
    eps: float = option(1e-4, "added to the std (TRL 1e-4, verl 1e-6, OpenRLHF 1e-9)")
    # bandit instance
    kind: str = option("tabular", "bandit policy: tabular or loglinear", when=BANDIT)
    prompts: int = option(16, "number of prompts P", when=BANDIT)
    actions: int = option(64, "actions (responses) per prompt A", when=BANDIT)
    dim: int = option(8, "feature dimension d", when={**BANDIT, "kind": ("loglinear",)})
    logit_scale: float = option(1.0, "std of the initial logits", when=BANDIT)
    success_a: float = option(0.5, "success probabilities ~ Beta(success_a, success_b)",
                              when=BANDIT)  # fmt: skip
    success_b: float = option(1.0, "success probabilities ~ Beta(success_a, success_b)",
                              when=BANDIT)  # fmt: skip
    instance_seed: int = option(0, "seed of the random bandit / thought set / questions")
    # tree thoughts
    model: str = option("beta", "thought values: beta (p ~ Beta(a, b)) or finite (softmax "
                        "thought policy)", when=TREE)  # fmt: skip
    a: float = option(2.0, "Beta a", when=TREE)
    b: float = option(3.0, "Beta b", when=TREE)
    thoughts: int = option(32, "finite model: number of distinct thoughts",
                           when={**TREE, "model": ("finite",)})  # fmt: skip
    # arithmetic LLM surrogate
    policy: tuple[str, ...] = option(POLICIES, "comma list of base, instruct, icl (mean V 0.15 / "
                                     "0.40 / 0.65)", when=ARITH)  # fmt: skip
    questions: int = option(500, "number of questions (seeded generator, 5 categories)",
                            when=ARITH)  # fmt: skip
    per_seed: int = option(8, "questions per seed, one group each (row: mean per-question MSE)",
                           when=ARITH)  # fmt: skip
    filler: int = option(64, "chain-of-thought filler tokens before each answer", when=ARITH)
    strength: tuple[float, ...] = option(STRENGTH, "mean V(x) at which pre-training snapshots "
                                         "base, instruct, icl (3 increasing values in (0, 1))",
                                         when=ARITH)  # fmt: skip
    filler_sharpen: float = option(0.0, "weight of the filler entropy in the pre-training loss "
                                   "(> 0: stronger policies reason with lower-entropy filler)",
                                   when=ARITH)  # fmt: skip
    hidden: int = option(32, "GRU width", when=ARITH)
    truth_samples: int = option(256, "sampled sequences per question for the Monte Carlo part "
                                "of S2", when=ARITH)  # fmt: skip
    x64: bool = option(False, "float64 mode (theory checks)")
    shard: bool = option(False, "shard the seed axis over every device (of every process)",
                         key=False)  # fmt: skip
    out: str = option("results/sweep", "output folder (tables, config.toml, figure)", key=False)
    # response lengths and loss aggregation (issue 19)
    loss_agg: tuple[str, ...] = option(
        (DEFAULT_AGG,), "comma list of loss aggregation modes (verl loss_agg_mode): "
        + ", ".join(LOSS_AGG_MODES), when=GROUPED,
    )  # fmt: skip
    lengths: str = option("one", "response lengths: one, independent, longer-when-wrong, "
                          "longer-when-right (bandit); one, generated (arithmetic: up to <eos>)",
                          when=GROUPED)  # fmt: skip
    length_min: int = option(50, "shortest response (tokens)", when=BANDIT)
    length_max: int = option(1000, "longest response (tokens)", when=BANDIT)
    norm_length: int = option(0, "L_norm of seq-mean-token-sum-norm (0: the longest possible "
                              "response, like TRL's max_completion_length)",
                              when=GROUPED)  # fmt: skip
    # DAPO dynamic sampling (gpolab.theory.dynamic; bandit mini-batches)
    dynamic_sampling: bool = option(False, "DAPO dynamic sampling (verl filter_groups): keep the "
                                    "first B groups with unequal rewards, drawing batches of B "
                                    "prompts; needs B >= 1", when=BANDIT)  # fmt: skip
    max_draws: int = option(8, "cap on generation batches per step (verl max_num_gen_batches)",
                            when={**BANDIT, "dynamic_sampling": (True,)})  # fmt: skip

    def replace(self, **changes) -> Config:
        return configs.replace(self, **changes)

    def validate(self) -> None:
        validate.choice("env", self.env, ENVS)
        validate.seeds("seeds", self.seeds, 1)
        validate.integer("chunk", self.chunk, 0)
        validate.integer("seed", self.seed, 0)
        validate.choice("ddof", self.ddof, (0, 1))
        validate.real("eps", self.eps, low=0.0)
        if self.env in ("bandit", "arithmetic"):
            validate.group_sizes("G", self.G)
            _validate_lengths(self)
            for name in self.estimators:
                for G in self.G:
                    estimators.check_estimator(
                        name, G, scale=self.scale, ddof=self.ddof, eps=self.eps, field="G"
                    )
                    estimators.check_callable(name, G)
        if self.env == "arithmetic":
            for name in self.policy:
                validate.choice("policy", name, POLICIES)
            validate.integer("questions", self.questions, 1)
            validate.integer("per_seed", self.per_seed, 1)
            validate.integer("filler", self.filler, 0)
            validate.integer("hidden", self.hidden, 1)
            validate.integer("truth_samples", self.truth_samples, 2)
            validate.real("filler_sharpen", self.filler_sharpen, low=0.0)
            if len(self.strength) != len(POLICIES):
                raise validate.ConfigError(
                    f"strength: got {self.strength!r}; allowed: {len(POLICIES)} values, one for "
                    "each of " + ", ".join(POLICIES)
                )
            for v in self.strength:
                validate.real("strength", v, low=0.0, high=1.0, open_low=True)
            if any(b <= a for a, b in zip(self.strength[:-1], self.strength[1:], strict=True)):
                raise validate.ConfigError(
                    f"strength: got {self.strength!r}; allowed: strictly increasing values"
                )
        elif self.env == "bandit":
            validate.integer("B", self.B, 0)
            if self.dynamic_sampling:
                validate.integer("max_draws", self.max_draws, 1)
                if self.B < 1:
                    raise validate.ConfigError(
                        "B: got 0; dynamic_sampling keeps B groups per step: set B >= 1"
                    )
                if tuple(self.loss_agg) != (DEFAULT_AGG,):
                    raise validate.ConfigError(
                        f"loss_agg: got {','.join(self.loss_agg)}; allowed with dynamic_sampling: "
                        f"{DEFAULT_AGG} only"
                    )
            from gpolab.envs.bandit import check_instance

            check_instance(
                self.kind,
                self.prompts,
                self.actions,
                self.dim,
                self.logit_scale,
                self.success_a,
                self.success_b,
            )
        else:
            validate.integers("K", self.K, 2)
            validate.integers("M", self.M, 1)
            for v in self.variants:
                validate.choice("variant", v, estimators.TREE_VARIANTS)
            validate.choice("model", self.model, ("beta", "finite"))
            validate.real("a", self.a, low=0.0, open_low=True)
            validate.real("b", self.b, low=0.0, open_low=True)
            validate.integer("thoughts", self.thoughts, 2)


def _validate_lengths(cfg: Config) -> None:
    """The length and loss-aggregation options (grouped envs)."""
    if not cfg.loss_agg:
        raise validate.ConfigError("loss_agg: got an empty list; allowed: one or more modes")
    for mode in cfg.loss_agg:
        estimators.check_loss_agg(mode)
    allowed = LENGTHS[cfg.env]
    validate.choice("lengths", cfg.lengths, allowed)
    validate.integer("norm_length", cfg.norm_length, 0)
    if cfg.env == "bandit":
        from gpolab.envs.bandit import check_lengths

        check_lengths(cfg.lengths, cfg.length_min, cfg.length_max)


SweepConfig = Config  # the name gpolab has exported since issue 1


def cells(cfg: Config) -> int:
    """Rows in the result table."""
    return len(_row_ids(cfg))


def make_setup(cfg: Config) -> Callable:
    """``context → (cell args without eps, truth)``, each built once and only when a pending
    unit needs it (the context is the arithmetic policy; None for the other envs)."""
    import functools

    import jax

    if cfg.x64:
        jax.config.update("jax_enable_x64", True)
    from gpolab.envs import arithmetic, bandit, tree

    if cfg.env == "arithmetic":
        questions = arithmetic.make_questions(cfg.instance_seed, cfg.questions)
        policies = functools.cache(
            lambda: arithmetic.pretrain(
                questions,
                seed=cfg.instance_seed,
                hidden=cfg.hidden,
                filler=cfg.filler,
                targets=dict(zip(POLICIES, cfg.strength, strict=True)),
                filler_sharpen=cfg.filler_sharpen,
            )
        )
        exact = jax.jit(arithmetic.exact, static_argnames="samples")
        truth_key = jax.random.fold_in(jax.random.key(cfg.instance_seed), 1)

        @functools.cache
        def arithmetic_setup(policy):
            params = policies()[policy]
            truth = exact(truth_key, params, questions, samples=cfg.truth_samples)
            return (params, truth, questions), truth

        return arithmetic_setup
    if cfg.env == "bandit":
        params = bandit.make(
            cfg.instance_seed,
            prompts=cfg.prompts,
            actions=cfg.actions,
            kind=cfg.kind,
            dim=cfg.dim,
            logit_scale=cfg.logit_scale,
            success_a=cfg.success_a,
            success_b=cfg.success_b,
            lengths=cfg.lengths,
            length_min=cfg.length_min,
            length_max=cfg.length_max,
        )
        truth = bandit.exact(params)
    else:
        params = (
            tree.make_beta(cfg.a, cfg.b)
            if cfg.model == "beta"
            else tree.make_finite(cfg.instance_seed, cfg.thoughts, a=cfg.a, b=cfg.b)
        )
        truth = tree.exact(params)
    return lambda _: ((params, truth), truth)


def _stats_row(stats) -> dict:
    return {
        "mse": stats.mse,
        "mse_se": stats.mse_se,
        "mse_ci_low": stats.mse_ci_low,
        "mse_ci_high": stats.mse_ci_high,
        "variance": stats.variance,
        "bias_sq": stats.bias_sq,
    }


def _bandit_rows(cfg, cell, m, truth, policy, params) -> list[dict]:
    """Rows of the bandit and of the arithmetic surrogate (whose S2 is a Monte Carlo estimate:
    ``theory_mse_se`` is the standard error it carries into the exact formula)."""
    from gpolab import engine
    from gpolab.envs import arithmetic
    from gpolab.theory import exact
    from gpolab.theory import mse as theory_mse

    B = cfg.B or None if cfg.env == "bandit" else None
    shared = {o: getattr(cfg, o) for o in OPTIONS}
    length = (1 if cfg.env == "bandit" else arithmetic.response_length(params)) if (
        cfg.lengths == "one") else None  # fmt: skip
    target_sq = theory_mse.target_sq(truth, B)
    rows = []
    for name in cell.estimators:
        stats = engine.error_stats(m, err=f"{name}/err", sq=f"{name}/sq")
        rows.append(
            {
                "env": cfg.env,
                "kind": cfg.kind if cfg.env == "bandit" else f"filler{cfg.filler}",
                **({"policy": policy} if policy is not None else {}),
                "estimator": name,
                "variant": cfg.scale,
                "G": cell.G,
                "K": None,
                "M": None,
                "B": cfg.B if cfg.env == "bandit" else None,
                "n_seeds": m.n,
                **_stats_row(stats),
                "cos": float(m.mean(f"{name}/cos")),
                "target_sq": target_sq,
                **best_scale(m, name, target_sq),
                "degenerate_frac": float(m.mean("degenerate")),
                "mean_V": float(np.asarray(truth.prompt_probs) @ np.asarray(truth.V)),
                **exact.theory_columns(truth, name, cell.G, B, length, **shared),
                "theory_first_order": theory_mse.mse(truth, "oracle", cell.G, B),
                **aggregation_columns(cfg, cell, name, truth, params, B, shared),
                **(dynamic_columns(cfg, cell, m, truth, name) if cfg.dynamic_sampling else {}),
            }
        )
    return rows


def aggregation_columns(cfg, cell, name, truth, params, B, shared) -> dict:
    """``loss_agg`` and ``lengths`` of a row; under a mode other than seq-mean-token-sum the
    count-table theory (for that mode's scale) is replaced by the exact bias² of
    :mod:`gpolab.theory.aggregation` where it exists (bandit), the other theory columns NaN."""
    mode = getattr(cell, "loss_agg", estimators.DEFAULT_LOSS_AGG)  # dynamic cells: the default
    out = {"loss_agg": mode, "lengths": cfg.lengths}
    if mode == estimators.DEFAULT_LOSS_AGG:
        return out
    nan = math.nan
    out |= {"theory_mse": nan, "theory_mse_se": nan, "theory_best_scale": nan,
            "theory_scaled_mse": nan, "theory_bias_sq": nan,
            "theory": "none: no exact theory of loss aggregation on this env"}  # fmt: skip
    if cfg.env == "bandit":
        from gpolab.theory import aggregation

        bias, how = aggregation.bias_sq(params, truth, name, cell.G, cell.loss_agg, B,
                                        cell.norm_length, **shared)  # fmt: skip
        out |= {"theory_bias_sq": bias, "theory": how}
    return out


def best_scale(m, name: str, target_sq: float) -> dict:
    """The scale-invariant score (theory §11, applied to gradients): the MSE after the best single
    rescaling c* = E[ĝ·g]/E‖ĝ‖², ``scaled_mse`` = ‖g‖² − E[ĝ·g]²/E‖ĝ‖² (same averaging as
    ``mse``).  Shrinking ĝ toward 0 does not lower it, so it ranks directions, not step sizes."""
    dot, norm2 = float(m.mean(f"{name}/dot")), float(m.mean(f"{name}/norm2"))
    if norm2 <= 0:
        return {"best_scale": math.nan, "scaled_mse": target_sq}
    return {"best_scale": dot / norm2, "scaled_mse": target_sq - dot**2 / norm2}


def budget_matched(cfg: Config, cell, truth):
    """The dynamic cell with ``plain_B`` = round(exact E[groups drawn per step]) (at least 1, at
    most every drawn group): plain sampling at the same mean responses per step."""
    from gpolab.theory import dynamic

    d = dynamic.draws(dynamic.nondegenerate_prob(truth, cell.G), cell.B, cell.max_draws)
    plain_B = min(max(1, round(d.batches * cell.B)), cell.B * cell.max_draws)
    return dataclasses.replace(cell, plain_B=plain_B)


def dynamic_columns(cfg: Config, cell, m, truth, name: str) -> dict:
    """A dynamic-sampling row's own columns, overriding the plain-sampling theory: measured draws
    (groups drawn / groups kept, a ratio of means with its delta-method CI), responses per step,
    the capped-step fraction, the exact theory of :mod:`gpolab.theory.dynamic` and plain sampling
    with ``plain_B`` groups on the same draws (``plain_*``, its exact MSE ``theory_plain_mse``)."""
    from gpolab import engine
    from gpolab.theory import dynamic, exact
    from gpolab.theory import mse as theory_mse

    drawn, kept, n = float(m.mean("drawn")), float(m.mean("kept")), m.n
    ratio = drawn / kept if kept > 0 else math.nan
    cov = (float(m.mean("drawn_kept")) - drawn * kept) * n / max(n - 1, 1)
    var = m.var("drawn") - 2 * ratio * cov + ratio**2 * m.var("kept")
    ratio_se = math.sqrt(max(var, 0.0) / n) / kept if kept > 0 else math.nan
    plain = engine.error_stats(m, err=f"plain/{name}/err", sq=f"plain/{name}/sq")
    target_sq = theory_mse.target_sq(truth, cell.B)
    shared = {o: getattr(cfg, o) for o in OPTIONS}
    th = dynamic.columns(truth, name, cell.G, cell.B, cell.max_draws, **shared)
    table = exact.registry_table(name, cell.G, strict=False, length=1, **shared)
    return {
        "dynamic_sampling": True,
        "draws_per_kept_group": ratio,
        "draws_per_kept_group_ci_low": ratio - engine.Z95 * ratio_se,
        "draws_per_kept_group_ci_high": ratio + engine.Z95 * ratio_se,
        "kept_groups": kept,
        "responses_per_step": drawn * cell.G,
        "cap_reached_frac": float(m.mean("capped")),
        **{k: v for k, v in th.items() if not k.startswith("theory_dyn_")},
        "theory": "dynamic sampling (gpolab)" if table.ok else f"none: {table.reason}",
        "theory_mse": th["theory_dyn_mse"],
        "theory_mse_se": 0.0,
        "theory_bias_sq": th["theory_dyn_bias_sq"],
        "theory_scaled_mse": th["theory_dyn_scaled_mse"],
        "theory_kappa": th["theory_dyn_kappa"],
        "plain_B": cell.plain_B,
        "plain_mse": plain.mse,
        "plain_mse_se": plain.mse_se,
        "plain_cos": float(m.mean(f"plain/{name}/cos")),
        "plain_scaled_mse": best_scale(m, f"plain/{name}", target_sq)["scaled_mse"],
        "theory_plain_mse": exact.mse(truth, table, cell.G, cell.plain_B),
    }


def cap_warning(df) -> None:
    """One stderr line naming the settings where the cap was reached (verl raises there)."""
    import sys

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


def _tree_rows(cfg, cell, m, params) -> list[dict]:
    from gpolab import engine
    from gpolab.theory import tree as theory_tree

    stats = engine.error_stats(m)
    cond_var = float(m.mean("cond_var"))
    cov = float(m.mean("at") - m.mean("a") * m.mean("t"))
    va = float(m.mean("aa") - m.mean("a") ** 2)
    vt = float(m.mean("tt") - m.mean("t") ** 2)
    return [
        {
            "env": "tree",
            "kind": cfg.model,
            "estimator": "tree",
            "variant": cell.variant,
            "G": None,
            "K": cell.K,
            "M": cell.M,
            "B": None,
            "n_seeds": m.n,
            **_stats_row(stats),
            "variance": cond_var,  # E[Var(Â_k | thoughts)]
            "bias_sq": stats.mse - cond_var,  # E[(E[Â_k | thoughts] − A_k)²]
            "mse_group": float(m.mean("sq_group")),
            "corr": cov / math.sqrt(va * vt) if va > 0 and vt > 0 else math.nan,
            "leaves": cell.K * cell.M,
            "degenerate_frac": float(m.mean("degenerate")),
            "theory_degenerate_frac": theory_tree.degenerate_prob(params, cell.K, cell.M),
            "theory_mse": math.nan,
        }
    ]


GRIDS = ("estimators", "G", "K", "M", "variants", "policy", "loss_agg")
# version of the row's columns: cells stored by an older gpolab lack columns (cos, scaled_mse,
# the count-table theory added in 2) and are recomputed rather than mixed into a table
SCHEMA = 3  # 3: each G draws from its own key stream (unit_key)
OPTIONS = ("scale", "ddof", "eps")


def config_hash(cfg: Config) -> str:
    from gpolab.store import digest

    return digest(dataclasses.asdict(cfg))


def _row_ids(cfg: Config) -> list[dict]:
    """One id per table row, in table order: (estimator, G) for the bandit, (variant, K, M)."""
    if cfg.env == "bandit":
        return [{"estimator": e, "G": G, **_mode_id(m)} for m in cfg.loss_agg
                for e in cfg.estimators for G in cfg.G]  # fmt: skip
    if cfg.env == "arithmetic":
        return [
            {"policy": p, "estimator": e, "G": G, **_mode_id(m)}
            for p in cfg.policy
            for m in cfg.loss_agg
            for e in cfg.estimators
            for G in cfg.G
        ]
    return [{"variant": v, "K": K, "M": M} for v in cfg.variants for K in cfg.K for M in cfg.M]


def _mode_id(mode: str) -> dict:
    """A row id's loss_agg entry: absent for the default mode (its stored cells stay valid)."""
    return {} if mode == estimators.DEFAULT_LOSS_AGG else {"loss_agg": mode}


def norm_length(cfg: Config) -> float:
    """L_norm of seq-mean-token-sum-norm: ``cfg.norm_length``, or the longest possible response
    (bandit: length_max, 1 with lengths=one; arithmetic: filler + answer)."""
    from gpolab.envs import arithmetic

    if cfg.norm_length:
        return float(cfg.norm_length)
    if cfg.env == "arithmetic":
        return float(cfg.filler + arithmetic.THOUGHTS + arithmetic.LENGTH)
    return float(cfg.length_max if cfg.lengths != "one" else 1)


def row_settings(cfg: Config, rid: dict) -> dict:
    """Every setting the numbers of row ``rid`` depend on: the settings the env uses, without
    the grids the row sits in; of ``scale, ddof, eps`` those its estimator reads, as bound (a
    spec's bracket options win; the others None).  They are the row's cache key and its columns."""
    common = configs.key_settings(cfg, exclude=GRIDS + OPTIONS)
    common = {k: v for k, v in common.items() if k not in KEY_IF_CHANGED or KEY_IF_CHANGED[k] != v}
    shared = {o: getattr(cfg, o) for o in OPTIONS}
    if cfg.env == "tree":  # mean-only has no std, so no eps; ddof still sets the group target
        reads = ("ddof",) if rid["variant"] == "mean-only" else ("ddof", "eps")
        bound = {o: shared[o] for o in reads}
    else:
        bound = estimators.bind(rid["estimator"], shared)[1]
    return {**common, **{o: bound.get(o) for o in OPTIONS}}


def cell_keys(cfg: Config) -> list[str]:
    """Store key of every row: a hash of the row's id and of :func:`row_settings` (not the grids
    it sits in, the output folder, the chunk size, the sharding or an option it ignores)."""
    from gpolab.store import digest

    return [
        digest({"lab": NAME, "schema": SCHEMA, "settings": row_settings(cfg, rid), "row": rid})
        for rid in _row_ids(cfg)
    ]


def _units(cfg: Config, pending: set[int]):
    """(rows, context, cell) units covering the pending rows: per (policy,) G the missing
    estimators (drawn on common random numbers, so computing a subset changes nothing), per
    (variant, K, M) for trees.  Arithmetic cells do not depend on the policy (its weights are
    traced), so each G compiles once for every policy."""
    from gpolab.cells import ArithmeticCell, BanditCell, DynamicBanditCell, tree_cell

    ids = _row_ids(cfg)
    if cfg.env == "tree":  # the tree lab's cell: same settings, same numbers as `gpolab tree`
        for i in sorted(pending):
            K, M, variant = ids[i]["K"], ids[i]["M"], ids[i]["variant"]
            yield [i], None, tree_cell(K, M, variant, cfg.ddof, model=cfg.model, a=cfg.a, b=cfg.b)
        return
    agg = {"norm_length": norm_length(cfg)}
    for policy, mode in itertools.product(
        cfg.policy if cfg.env == "arithmetic" else (None,), cfg.loss_agg
    ):
        for G in cfg.G:
            rows = [
                i for i in sorted(pending) if ids[i]["G"] == G and ids[i].get("policy") == policy
                and ids[i].get("loss_agg", estimators.DEFAULT_LOSS_AGG) == mode
            ]  # fmt: skip
            if not rows:
                continue
            names = tuple(ids[i]["estimator"] for i in rows)
            if cfg.env == "bandit" and cfg.dynamic_sampling:
                yield rows, None, DynamicBanditCell(names, G, cfg.B, cfg.max_draws, 1, cfg.scale,
                                                    cfg.ddof)  # fmt: skip
            elif cfg.env == "bandit":
                yield rows, None, BanditCell(names, G, cfg.B, cfg.scale, cfg.ddof, True, mode,
                                             **agg)  # fmt: skip
            else:
                yield rows, policy, ArithmeticCell(names, G, cfg.per_seed, cfg.scale, cfg.ddof,
                                                   mode, **agg, lengths=cfg.lengths)  # fmt: skip


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


def share_cells(cfg: Config, i: int, n: int) -> set[int]:
    """The cells (row indices) of share ``i`` of ``n``: whole compiled units, unit j going to
    share j mod n, so jobs of an array never split the draws one unit shares, and their union is
    every cell exactly once."""
    validate.integer("cells (n)", n, 1)
    validate.integer("cells (i)", i, 0, n - 1)
    units = _units(cfg, set(range(len(cell_keys(cfg)))))
    return {r for j, (rows, _, _) in enumerate(units) if j % n == i for r in rows}


def unit_key(cfg: Config, key, context, cell):
    """The unit's own key stream (:func:`gpolab.engine.cell_key`): every G (and policy) draws
    independently, so cells of different G are independent checks; the estimators of one unit
    share draws (common random numbers).  A tree cell's stream is ``gpolab tree``'s for the same
    (K, M) (its variants share draws), so both labs give the same numbers."""
    from gpolab import engine

    if cfg.env == "tree":
        return engine.cell_key(key, "tree", cell.K, cell.M)
    return engine.cell_key(key, cfg.env, *((context,) if context else ()), cell.G)


def run(cfg: Config, key=None, *, store=None, progress=None) -> dict:
    """The lab protocol's entry: ``{"results": table}`` (see :func:`run_sweep`)."""
    on_row = None if progress is None else lambda row: progress.update(1, label(row))
    on_skip = None if progress is None else progress.skip
    return {"results": run_sweep(cfg, on_row, store, on_skip, key=key)}


def label(row: dict) -> str:
    """One progress line: the row's cell and its MSE."""
    if row["env"] == "tree":
        return f"{row['variant']} K={row['K']} M={row['M']}: mse={row['mse']:.4g}"
    policy = f"{row['policy']} " if row.get("policy") else ""
    mode = row.get("loss_agg", estimators.DEFAULT_LOSS_AGG)
    mode = "" if mode == estimators.DEFAULT_LOSS_AGG else f" {mode}"
    return f"{policy}{row['estimator']}{mode} G={row['G']}: mse={row['mse']:.4g}"


def run_sweep(
    cfg: Config,
    on_row: Callable[[dict], None] | None = None,
    store=None,
    on_skip: Callable[[int], None] | None = None,
    key=None,
    share: tuple[int, int] | None = None,
):
    """Validate ``cfg``, run every cell, return a pandas DataFrame with one row per cell.

    With a :class:`gpolab.store.Store`, finished rows are read back instead of recomputed and
    each new row is written atomically as soon as its unit finishes (resumable).  ``seconds`` is
    the wall time of the compiled unit a row belongs to (compile included), split evenly among
    its rows.  ``share=(i, n)``: only the compiled units j with j mod n = i (a job array's share,
    :func:`share_cells`); the rows returned are that share's.
    """
    cfg.validate()
    import jax
    import pandas as pd

    from gpolab import cells, engine

    keys = cell_keys(cfg)
    mine = share_cells(cfg, *share) if share else set(range(len(keys)))
    keys = [k if i in mine else None for i, k in enumerate(keys)]
    pending = _agree({i for i in mine if store is None or not store.has(keys[i])}, len(keys))
    if on_skip is not None and len(pending) < len(mine):
        on_skip(len(mine) - len(pending))
    rows: dict[int, dict] = {}
    if pending:
        setup = make_setup(cfg)
        key = jax.random.key(cfg.seed) if key is None else key
        eps = np.asarray(cfg.eps, dtype=np.float64 if cfg.x64 else np.float32)
        fn = {"bandit": cells.bandit_error, "tree": cells.tree_error}.get(
            cfg.env, cells.arithmetic_error
        )
        fn = cells.dynamic_bandit_error if cfg.dynamic_sampling else fn
        chunk = cfg.chunk or (arithmetic_chunk() if cfg.env == "arithmetic" else engine.AUTO)
        mesh = engine.seed_mesh() if cfg.shard else engine.LOCAL
        chash = config_hash(cfg)
        for idx, context, cell in _units(cfg, pending):
            start = time.perf_counter()
            args, truth = setup(context)
            cell = budget_matched(cfg, cell, truth) if cfg.dynamic_sampling else cell
            ukey = unit_key(cfg, key, context, cell)
            m = engine.run(fn, cell, (*args, eps), ukey, cfg.seeds, chunk, mesh=mesh)
            new = (
                _tree_rows(cfg, cell, m, args[0])
                if cfg.env == "tree"
                else _bandit_rows(cfg, cell, m, truth, context, args[0])
            )
            wall = time.perf_counter() - start
            for i, row in zip(idx, new, strict=True):
                settings = row_settings(cfg, _row_ids(cfg)[i])
                row.update({k: v for k, v in settings.items() if k not in row})
                row["seconds"] = wall / len(new)
                if store is not None:
                    store.write(keys[i], [row], chash, row["seconds"])
                rows[i] = row
                if on_row is not None:
                    on_row(row)
    mine = sorted(mine)
    if store is not None:
        df = store.read([keys[i] for i in mine])
    else:  # a multi-process run's other processes: only the cells computed now
        df = pd.DataFrame([rows[i] for i in mine if i in rows])
        if df.empty:
            return df
    for col in ("G", "K", "M", "B", "ddof"):
        df[col] = df[col].astype("Int64")
    if cfg.dynamic_sampling:
        cap_warning(df)
    return df


TABLE_COLUMNS = {
    "bandit": ["estimator", "G", "mse", "mse_ci_low", "mse_ci_high", "theory_mse", "bias_sq",
               "degenerate_frac", "seconds"],
    "arithmetic": ["policy", "estimator", "G", "mse", "mse_ci_low", "mse_ci_high", "theory_mse",
                   "theory_mse_se", "theory_first_order", "degenerate_frac", "seconds"],
    "tree": ["variant", "K", "M", "mse", "mse_group", "variance", "corr", "degenerate_frac",
             "theory_degenerate_frac", "seconds"],
}  # fmt: skip


def report(cfg: Config, tables: dict) -> str:
    from gpolab.labs import table_text

    cols = TABLE_COLUMNS[cfg.env]
    default = (estimators.DEFAULT_LOSS_AGG,)
    if cfg.env != "tree" and (cfg.loss_agg != default or cfg.lengths != "one"):
        cols = ["loss_agg", "lengths", *cols, "cos", "scaled_mse"]
    if cfg.env == "bandit" and cfg.dynamic_sampling:  # cost, and what it buys at equal cost
        from gpolab.theory import dynamic

        cols = ["estimator", "G", "mse", "theory_mse", "degenerate_frac", "draws_per_kept_group",
                "theory_draws_per_kept_group", dynamic.LOOP_COLUMN, dynamic.RATE_COLUMN,
                "responses_per_step", "plain_B", "plain_mse", "scaled_mse", "plain_scaled_mse",
                "cos", "plain_cos"]  # fmt: skip
    return table_text(tables["results"], cols)


def joint_test(rows, by=("policy", "estimator")) -> dict | None:
    """Monte Carlo against the exact theory as one statistic (None without exact theory).

    z = (mse − theory_mse)/se per cell (se combines the Monte Carlo SE with the theory's own where
    its inputs are Monte Carlo).  Each G draws from its own key stream, so an estimator's cells
    are independent and Σ_G z² ~ χ²(#cells) under the theory; the estimators of one G share draws
    (and some coincide), so they are combined by Bonferroni: joint p = min(1, E · min_e p_e),
    valid under any dependence.  (On the arithmetic surrogate the theory's Monte Carlo S2 is
    shared by every G of a policy: there the χ² is approximate.)  A cell with no finite z (fewer
    than 2 seeds, an overflowed estimator) makes every p NaN with its ``reason``: a NaN is never
    a pass (``min(1, nan)`` used to read 1)."""
    import numpy as np
    from scipy.stats import chi2

    rows = rows[np.isfinite(rows["theory_mse"].astype(float))]
    if rows.empty:
        return None
    se = np.hypot(rows["mse_se"].astype(float), rows["theory_mse_se"].fillna(0).astype(float))
    with np.errstate(divide="ignore", invalid="ignore"):
        z2 = ((rows["mse"].astype(float) - rows["theory_mse"].astype(float)) / se) ** 2
    keys = [k for k in by if k in rows and rows[k].notna().any()]
    per = rows.assign(z2=z2).groupby(keys, sort=False)["z2"].agg(["sum", "count"])
    p = chi2.sf(per["sum"], per["count"])
    bad = ~np.isfinite(z2.to_numpy())
    if bad.any():  # a NaN is never a pass: no p-value where a cell has no finite z
        return {"cells": len(rows), "groups": len(per), "min_p": math.nan, "worst": None,
                "joint_p": math.nan, "max_abs_z": math.nan,
                "reason": f"{int(bad.sum())} of {len(rows)} cells have no finite z "
                          f"({_no_z_reason(rows[bad])})"}  # fmt: skip
    return {"cells": len(rows), "groups": len(per), "min_p": float(np.min(p)),
            "worst": per.index[int(np.argmin(p))], "joint_p": min(1.0, len(per) * float(np.min(p))),
            "max_abs_z": float(np.sqrt(z2.max())), "reason": None}  # fmt: skip


def _no_z_reason(rows) -> str:
    """Why the cells ``rows`` have no finite z."""
    if "n_seeds" in rows and (rows["n_seeds"].astype(float) < 2).any():
        return "fewer than 2 seeds: no standard error"
    if not np.isfinite(rows["mse"].astype(float)).all():
        return "a non-finite Monte Carlo MSE: the estimator overflowed or divided by zero"
    return "a zero or non-finite standard error"


def agreement(results) -> list[str]:
    """One line per env: :func:`joint_test` of its cells."""
    lines = []
    for env, rows in results.groupby("env", sort=False):
        t = joint_test(rows)
        if t is not None and t["reason"] is not None:
            lines.append(f"{env}: joint p = nan: {t['reason']} (no test, not a pass)")
        elif t is not None:
            lines.append(
                f"{env}: {t['cells']} cells with exact theory; per estimator, sum of z^2 over its "
                f"G (independent draws) vs chi^2: smallest p {t['min_p']:.3g} ({t['worst']}); "
                f"joint p (Bonferroni over {t['groups']}) = {t['joint_p']:.3g}; largest |z| "
                f"{t['max_abs_z']:.2f}"
            )
    return lines


def notes(cfg: Config, tables: dict) -> str:
    """Monte Carlo against the exact theory (grouped envs)."""
    if cfg.env == "tree":
        return ""
    return "\n".join(["Monte Carlo vs exact finite-G theory:", *agreement(tables["results"])])


def figures(tables: dict) -> dict:
    """The figure of the saved table: MSE vs G (grouped envs) or the (K, M) heatmap (trees)."""
    from gpolab.plots import dynamic, lengths
    from gpolab.plots import sweep as plots

    df = tables["results"]
    if (df["env"] == "tree").all():
        return {"mse_heatmap.png": plots.tree_heatmap_figure}
    out = {"mse_vs_G.png": plots.mse_vs_G_figure}
    if "loss_agg" in df and df["loss_agg"].nunique() > 1:
        out["loss_agg.png"] = lengths.loss_agg_figure
    if dynamic.has_dynamic(df):
        out["dynamic.png"] = dynamic.dynamic_figure
    return out
