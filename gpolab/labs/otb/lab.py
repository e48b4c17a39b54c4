"""The token-level lab (``gpolab otb``): verl's optimal token baseline (OTB) and TRL's
``top_entropy_quantile`` mask against response-level estimators on the arithmetic surrogate, per
policy and group size.

OTB (:func:`gpolab.estimators.frameworks.verl.verl_optimal_token_baseline`, ported from verl's
``compute_optimal_token_baseline_advantage``) gives each token its own baseline, a mean of the
group's returns weighted by each response's cumulative logit-gradient energy up to that token,
the response itself included.  Each (policy, G) is one unit: every estimator on the same draws
(:mod:`gpolab.kernels.token_baseline`), ``splits`` independent seed batches for the standard
errors.

Table ``results``, one row per (policy, G, estimator): ``mse`` (per-question mean ‖ĝ_x − g_x‖²,
seq-mean-token-sum scale) and ``rel_scaled_mse`` (the MSE after the best single rescaling over
‖g‖²: 1 − E[ĝ·g]²/(E‖ĝ‖²‖g‖²), the error of the direction, unchanged by verl's token-mean
divisor), ``cos`` (the batch cosine), each with its SE (``*_se``: spread of the splits).

Table ``match``, one row per policy: OTB at G = ``small`` against ``reference`` at G = ``large``
on ``rel_scaled_mse``: the ratio and its SE (independent draws: the delta method), OTB's own
ratio between the two sizes, and the control ``reference`` at ``small`` against itself at
``large`` (a test that cannot tell the two sizes apart fails the control).

Tables ``train`` and ``train_match`` (with ``train_steps``, :mod:`gpolab.labs.otb.training`): the
same comparison in training at equal steps, the paper's own measure.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import ClassVar

import numpy as np

from gpolab import configs, engine, envs, estimators, validate
from gpolab.configs import borrow, option
from gpolab.envs import arithmetic
from gpolab.kernels import grouped, splits
from gpolab.kernels import token_baseline as kernel
from gpolab.kit.store import cell_key, resumed
from gpolab.labs.otb import training

NAME = "otb"
NEEDS = envs.Needs(only=("arithmetic",))  # per-token probabilities of a policy with lengths
TABLES = ("results", "match", "train", "train_match")
OTB = "verl/otb"
SPLITS = 4


@dataclasses.dataclass(frozen=True)
class Config(configs.Config):
    """Everything an OTB run needs (flags of ``gpolab otb``)."""

    LAB: ClassVar[str] = NAME
    QUICK: ClassVar[dict] = {"policy": ("instruct",), "G": (4, 32), "seeds": 64}

    policy: tuple[str, ...] = borrow(arithmetic.Instance, "policy")
    estimators: tuple[str, ...] = option(
        ("verl/grpo", "loo", OTB),
        "comma list: verl/otb (options handle_zero_tail, epsilon), trl/top_entropy (option "
        "top_entropy_quantile) and registry specs",
    )
    G: tuple[int, ...] = option((4, 8, 32), "group sizes")
    seeds: int = option(256, "seeds per (policy, G), split in 4 independent batches")
    small: int = option(4, "the match table's small group size (OTB)")
    large: int = option(32, "the match table's large group size (the reference)")
    reference: str = option("verl/grpo", "the match table's reference estimator at G = large")
    questions: int = borrow(arithmetic.Instance, "questions")
    per_seed: int = borrow(arithmetic.Instance, "per_seed")
    filler: int = borrow(arithmetic.Instance, "filler")
    truth_samples: int = borrow(arithmetic.Instance, "truth_samples", default=64)
    instance_seed: int = borrow(arithmetic.Instance, "instance_seed")
    eps: float = option(1e-6, "gpolab grpo's eps (framework entries use their own option)")
    train_steps: int = option(
        0,
        "Adam steps of the training comparison at equal steps (0: none): OTB at small, the "
        "reference at small and at large, from the same start",
    )
    train_runs: int = option(16, "independent training runs per configuration (with train_steps)")
    train_batch: int = option(32, "questions per training step, one group each (with train_steps)")
    lr: tuple[float, ...] = option(
        (1e-3, 1e-2), "comma list of Adam learning rates (with train_steps)"
    )
    seed: int = option(0, "master PRNG seed")
    out: str = option("results/otb", "output folder (tables, config.toml, figure)", key=False)

    def validate(self) -> None:
        validate.nonempty("policy", self.policy)
        for p in self.policy:
            validate.choice("policy", p, tuple(arithmetic.POLICIES))
        validate.nonempty("estimators", self.estimators)
        validate.integers("G", self.G, 2)
        validate.group_sizes("G", self.G)
        validate.integer("seeds", self.seeds, 2 * SPLITS)
        for spec in self.estimators:
            if kernel.parse(spec)[0] in kernel.TOKEN:
                kernel.check(spec)
            else:
                estimators.check_estimator(spec, max(self.G), field="G")
        validate.integer("small", self.small, 2)
        validate.integer("large", self.large, 2)
        kernel.parse(self.reference)
        validate.real("eps", self.eps, low=0.0)
        validate.integer("seed", self.seed, 0)
        validate.integer("train_steps", self.train_steps, 0)
        if self.train_steps:
            validate.integer("train_runs", self.train_runs, 2)
            validate.integer("train_batch", self.train_batch, 1)
            validate.nonempty("lr", self.lr)
            for lr in self.lr:
                validate.real("lr", lr, low=0.0, open_low=True)
        instance(self).validate()


def instance(cfg: Config) -> arithmetic.Instance:
    return configs.borrowed(arithmetic.Instance, cfg)


def _units(cfg: Config) -> list[tuple[str, int]]:
    return [(p, G) for p in cfg.policy for G in cfg.G]


def cells(cfg: Config) -> int:
    return len(_units(cfg)) + (len(training.units(cfg)) if cfg.train_steps else 0)


def cell_keys(cfg: Config) -> list[str]:
    common = configs.key_settings(cfg)
    drop = ("policy", "G", "small", "large", "reference")
    drop += ("train_steps", "train_runs", "train_batch", "lr")  # the training tables' own
    common = {k: v for k, v in common.items() if k not in drop}
    return [cell_key(NAME, **common, policy=p, G=G) for p, G in _units(cfg)]


def summarize(parts: list, specs: tuple, target_sq: float) -> list[dict]:
    """One row per estimator from the splits' moments (:mod:`gpolab.kernels.token_baseline`):
    each value from every seed, its SE from the spread of the splits."""
    pooled = engine.Moments(
        sum(p.n for p in parts),
        {k: sum(p.sums[k] for p in parts) for k in parts[0].sums},
        {k: sum(p.sumsq[k] for p in parts) for k in parts[0].sumsq},
    )

    def values(m, spec: str) -> tuple[float, float, float]:
        scaled = grouped.best_scale(m, spec, target_sq)["scaled_mse"]
        return float(m.mean(f"{spec}/sq")), scaled / target_sq, float(m.mean(f"{spec}/cos"))

    rows = []
    for spec in specs:
        se = splits.split_se([values(p, spec) for p in parts])
        mse, rel, cos = values(pooled, spec)
        rows.append(
            dict(
                estimator=spec,
                mse=mse,
                mse_se=float(se[0]),
                rel_scaled_mse=rel,
                rel_scaled_mse_se=float(se[1]),
                cos=cos,
                cos_se=float(se[2]),
                target_sq=target_sq,
                seeds=pooled.n,
            )
        )
    return rows


def results(cfg: Config, key=None, store=None, progress=None, policies=None):
    """The ``results`` table; ``policies``: a thunk of the pre-trained policies (shared with
    the training tables; built here otherwise)."""
    import jax

    if policies is None:
        policies = functools.cache(lambda: arithmetic.make(instance(cfg)))  # pre-trains them all
    setups = {}

    def setup(policy):
        if policy not in setups:
            a = policies()[policy]
            truth = jax.jit(arithmetic.exact)(a)
            target = float(np.mean(np.sum(np.asarray(truth.g_local, np.float64) ** 2, -1)))
            eps = np.float32(cfg.eps)
            setups[policy] = ((a.policy, truth, a.questions, eps), target)
        return setups[policy]

    base = jax.random.key(cfg.seed) if key is None else key
    units = _units(cfg)

    def compute(i: int) -> list[dict]:
        policy, G = units[i]
        args, target = setup(policy)
        cell = kernel.TokenCell(tuple(cfg.estimators), G, cfg.per_seed)
        start = time.perf_counter()
        k = jax.random.fold_in(jax.random.fold_in(base, cfg.policy.index(policy)), G)
        parts = splits.run(
            kernel.token_error, cell, args, k, cfg.seeds, SPLITS, grouped.arithmetic_chunk()
        )
        rows = summarize(parts, cell.estimators, target)
        wall = (time.perf_counter() - start) / len(rows)
        return [dict(policy=policy, G=G, **r, seconds=wall) for r in rows]

    return resumed(
        cfg,
        store,
        cell_keys(cfg),
        compute,
        progress=progress,
        label=lambda r: f"{r[0]['policy']} G={r[0]['G']}",
    )


# the match table's ratios of rel_scaled_mse: name → (numerator, denominator), each an
# (estimator: OTB or the reference, group size: small or large)
RATIOS = {
    "otb_small_vs_ref_large": (("otb", "small"), ("ref", "large")),
    "otb_small_vs_otb_large": (("otb", "small"), ("otb", "large")),
    "ref_small_vs_ref_large": (("ref", "small"), ("ref", "large")),
    "otb_vs_ref_small": (("otb", "small"), ("ref", "small")),
    "otb_vs_ref_large": (("otb", "large"), ("ref", "large")),
}
MATCH_COLUMNS = ["policy", "small", "large", "reference"] + [
    f"{name}{se}" for name in RATIOS for se in ("", "_se")
]


def _ratio(a: dict, b: dict) -> tuple[float, float]:
    """a/b of ``rel_scaled_mse`` and its delta-method SE (independent draws)."""
    x, y = a["rel_scaled_mse"], b["rel_scaled_mse"]
    if not (y > 0):
        return math.nan, math.nan
    r = x / y
    rel = math.hypot(a["rel_scaled_mse_se"] / x, b["rel_scaled_mse_se"] / y) if x > 0 else math.nan
    return r, r * rel


def match_table(cfg: Config, df):
    """Per policy: OTB at ``small`` against ``reference`` at ``large`` (and the two controls);
    no row where the run lacks one of the four cells (G without ``small`` or ``large``, or the
    estimators without ``verl/otb`` or ``reference``)."""
    import pandas as pd

    rows = []
    need = [(e, G) for e in (OTB, cfg.reference) for G in (cfg.small, cfg.large)]
    for policy, at in df.groupby("policy", sort=False):
        cell = {(r["estimator"], r["G"]): r for r in at.to_dict("records")}
        if any(k not in cell for k in need):
            continue
        est = {"otb": OTB, "ref": cfg.reference}
        size = {"small": cfg.small, "large": cfg.large}
        row = dict(policy=policy, small=cfg.small, large=cfg.large, reference=cfg.reference)
        for name, ((ea, ga), (eb, gb)) in RATIOS.items():
            a, b = cell[(est[ea], size[ga])], cell[(est[eb], size[gb])]
            row[name], row[f"{name}_se"] = _ratio(a, b)
        rows.append(row)
    return pd.DataFrame(rows, columns=MATCH_COLUMNS)


def run(cfg: Config, key=None, *, store=None, progress=None) -> dict:
    """``{results, match, train, train_match}``; each (policy, G) unit and each training
    configuration resumes from ``store``; the policies are pre-trained once, when a unit needs
    them."""
    cfg.validate()
    policies = functools.cache(lambda: arithmetic.make(instance(cfg)))  # pre-trains them all
    df = results(cfg, key, store, progress, policies)
    train = training.table(cfg, policies, key, store, progress)
    return {
        "results": df,
        "match": match_table(cfg, df),
        "train": train,
        "train_match": training.match(cfg, train),
    }


COLUMNS = "policy G estimator mse mse_se rel_scaled_mse rel_scaled_mse_se cos cos_se".split()


def report(cfg: Config, tables: dict) -> str:
    from gpolab.kit.tables import table_text

    m = tables["match"]
    lines = [table_text(tables["results"], COLUMNS), ""]
    for r in m.to_dict("records"):
        lines.append(
            f"{r['policy']}: best-scale MSE of OTB at G={r['small']} / {r['reference']} at "
            f"G={r['large']} = {r['otb_small_vs_ref_large']:.3g} ± "
            f"{r['otb_small_vs_ref_large_se']:.2g}; control {r['reference']} G={r['small']} / "
            f"G={r['large']} = {r['ref_small_vs_ref_large']:.3g} ± "
            f"{r['ref_small_vs_ref_large_se']:.2g}"
        )
    for r in tables["train_match"].to_dict("records"):
        lines.append(
            f"{r['policy']}, lr {r['lr']:g}, {r['steps']} Adam steps: gain of {r['reference']} at "
            f"G={r['large']} / OTB at G={r['small']} = {r['ref_large_vs_otb_small']:.3g} ± "
            f"{r['ref_large_vs_otb_small_se']:.2g} (1: OTB matches); control {r['reference']} "
            f"G={r['large']} / G={r['small']} = {r['ref_large_vs_ref_small']:.3g} ± "
            f"{r['ref_large_vs_ref_small_se']:.2g}"
        )
    return "\n".join(lines)


def figures(tables: dict) -> dict:
    from gpolab.labs.otb import plots

    if tables["train"].empty:
        return {"otb.png": plots.otb_figure}
    return {"otb.png": plots.otb_figure, "otb_train.png": plots.train_figure}
