"""The estimator zoo (``gpolab zoo``): every registered estimator × G on the bandit, on the
arithmetic LLM surrogate and on the graded bandit (rewards on a grid of values,
:mod:`gpolab.envs.graded`), measured against the exact gradient, with exact finite-G theory
where it exists, and the weight κ_G(p) each reward-only estimator gives a prompt of difficulty p.

Table ``results``: the sweep's rows for every (env, estimator, G) cell — MSE with its CI, bias²
(bandit), ``cos`` (cosine of the batch estimate with its exact gradient), the scale-invariant
``scaled_mse`` (MSE after the best single rescaling) and ``snr`` = (‖g‖² − scaled_mse) /
scaled_mse = E[ĝ·g]² / (E‖ĝ‖² ‖g‖² − E[ĝ·g]²), the degenerate-group share, and ``theory_*``
columns.  Rankings use ``snr`` (relative to ``loo`` at the same G): rescaling an estimator's
advantages, e.g. shrinking them toward 0, leaves it unchanged, so no estimator wins by shrinking.

Table ``kappa``: κ_G(p) with E[ĝ_x | p] = κ_G(p) g_x (theory §8; the count-table theory is
gpolab's derivation), for every reward-only estimator at each G of ``kappa_G`` — how strongly it
up-weights hard (p → 0) and easy (p → 1) prompts against medium ones.  The Dr. GRPO critique of
std normalization, made exact: grpo's κ tends to 1/√(p(1 − p)) as G grows.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from gpolab import configs, envs, estimators, validate
from gpolab.configs import borrow, option
from gpolab.engine.stats import agreement, families  # noqa: F401  (zoo.families: tests)
from gpolab.envs import arithmetic, bandit, graded
from gpolab.labs.sweep import lab as sweep

NAME = "zoo"
TABLES = ("results", "kappa")
# the grouped envs the sweep runs with exact finite-G theory beside the Monte Carlo (the binary
# count tables, the graded ones), named (the lab builds their instances), bandit first (the
# stored runs' order)
NEEDS = envs.Needs(fields=("instance_seed",), only=("bandit", "arithmetic", "graded"))
ENVS = envs.names(NEEDS)
ZOO = tuple(n for n, e in estimators.REGISTRY.items() if not e.user)
REFERENCE = "loo"  # the snr ranking's reference: unbiased, defined at every G >= 2
ARITH = {"env": ("arithmetic",)}
GRADED = {"env": ("graded",)}


@dataclasses.dataclass(frozen=True)
class Config(configs.Config):
    """Everything a zoo run needs; bandit and arithmetic settings as in ``gpolab sweep``."""

    LAB: ClassVar[str] = NAME
    QUICK: ClassVar[dict] = {
        "seeds": 4000,
        "arithmetic_seeds": 64,
        "G": (2, 4, 8, 16),
        "arithmetic_G": (4, 8),
        "questions": 100,
    }

    env: tuple[str, ...] = option(ENVS, "comma list of " + ", ".join(ENVS))
    estimators: tuple[str, ...] = option(
        ZOO,
        "comma list of estimator specs (default: every registered one; `gpolab estimators` "
        "lists them)",
    )
    G: tuple[int, ...] = option(
        (2, 4, 8, 16, 32),
        "bandit and graded group sizes (an estimator runs at the sizes it is defined for)",
    )
    seeds: int = option(100_000, "bandit and graded Monte Carlo seeds per cell")
    arithmetic_G: tuple[int, ...] = option((4, 8, 16), "arithmetic group sizes", when=ARITH)
    arithmetic_seeds: int = option(
        2_000, "arithmetic seeds per cell (8 questions each)", when=ARITH
    )
    policy: str = option("instruct", "arithmetic policy: base, instruct or icl", when=ARITH)
    questions: int = borrow(arithmetic.Instance, "questions", when=ARITH, prefix="arithmetic: ")
    grid: tuple[float, ...] = borrow(graded.Instance, "grid", when=GRADED, prefix="graded: ")
    concentration: float = borrow(graded.Instance, "concentration", when=GRADED, prefix="graded: ")
    kappa_G: tuple[int, ...] = option((4, 8, 16, 64), "group sizes of the kappa table")
    kappa_points: int = option(99, "difficulties p in (0, 1) of the kappa table")
    scale: str = option("group", "gpolab grpo's std: group, batch or none")
    ddof: int = option(1, "gpolab grpo's std degrees of freedom, 0 or 1")
    eps: float = option(1e-4, "gpolab grpo's eps (a framework entry uses its own option)")
    seed: int = option(0, "master PRNG seed")
    instance_seed: int = borrow(bandit.Instance, "instance_seed")
    out: str = option("results/zoo", "output folder (tables, config.toml, figures)", key=False)

    def validate(self) -> None:
        for env in self.env:
            validate.choice("env", env, ENVS)
        for field in ("G", "arithmetic_G", "kappa_G"):  # snr and kappa are relative to loo,
            sizes = getattr(self, field)  # which needs two responses (as the sweep's default)
            validate.integers(field, sizes, 1)
            for G in sizes:
                if G < 2:
                    raise validate.ConfigError(
                        f"{field}: got {G!r}; allowed: integers >= 2 (the zoo compares every "
                        "estimator with loo, which needs two responses per group)"
                    )
            validate.group_sizes(field, sizes)
        validate.integer("kappa_points", self.kappa_points, 1)
        validate.choice("policy", self.policy, sweep.POLICIES)
        if not self.estimators:
            raise validate.ConfigError("estimators: got an empty list; allowed: one or more")
        for spec in self.estimators:
            estimators.check_estimator(spec, max(self.G + self.arithmetic_G), field="G")
        for cfg in sweeps(self):
            cfg.validate()


def _sweep_for(cfg: Config, env: str, specs: tuple, Gs: tuple) -> sweep.Config:
    common = dict(
        env=env,
        estimators=specs,
        G=Gs,
        seed=cfg.seed,
        scale=cfg.scale,
        ddof=cfg.ddof,
        eps=cfg.eps,
        out=cfg.out,
    )
    if env == "arithmetic":
        inst = arithmetic.Instance(
            policy=(cfg.policy,), questions=cfg.questions, instance_seed=cfg.instance_seed
        )
        return sweep.Config(**common, seeds=cfg.arithmetic_seeds, instance=inst)
    if env == "graded":
        inst = graded.Instance(
            grid=cfg.grid, concentration=cfg.concentration, instance_seed=cfg.instance_seed
        )
        return sweep.Config(**common, seeds=cfg.seeds, instance=inst)
    inst = bandit.Instance(instance_seed=cfg.instance_seed)
    return sweep.Config(**common, seeds=cfg.seeds, instance=inst)


def sweeps(cfg: Config) -> list[sweep.Config]:
    """One sweep per (env, set of group sizes): an estimator runs at the sizes it is defined for
    (pass@k needs G >= k), estimators sharing the sizes share a sweep (common random numbers)."""
    out = []
    for env in cfg.env:
        grid = cfg.arithmetic_G if env == "arithmetic" else cfg.G
        by_sizes: dict[tuple, list] = {}
        for spec in cfg.estimators:
            sizes = tuple(G for G in grid if G >= estimators.minimum_G(spec))
            if sizes:
                by_sizes.setdefault(sizes, []).append(spec)
        out += [_sweep_for(cfg, env, tuple(specs), Gs) for Gs, specs in by_sizes.items()]
    return out


def cells(cfg: Config) -> int:
    return sum(sweep.cells(s) for s in sweeps(cfg)) + 1


def kappa_table(cfg: Config):
    """κ_G(p) of every reward-only estimator (its count table) at each G of ``kappa_G``; empty
    for a graded-only run (κ_G(p), p the success rate, is a binary-reward quantity)."""
    import numpy as np
    import pandas as pd

    from gpolab.theory import exact

    p = (np.arange(cfg.kappa_points) + 0.5) / cfg.kappa_points
    shared = {"scale": cfg.scale, "ddof": cfg.ddof, "eps": cfg.eps}
    rows = []
    binary = set(cfg.env) != {"graded"}
    for name in cfg.estimators if binary else ():
        spec = estimators.bound(name)  # resolved once for every G
        for G in cfg.kappa_G:
            if G < estimators.minimum_G(spec):
                continue
            table = exact.registry_table(spec, G, strict=False, **shared)
            if table.ok:
                kappa = exact.kappa(table, G, p)
                rows += [
                    {"estimator": name, "G": G, "p": float(q), "kappa": float(k)}
                    for q, k in zip(p, kappa, strict=True)
                ]
    return pd.DataFrame(rows, columns=["estimator", "G", "p", "kappa"])


def with_scores(df):
    """``snr`` and ``snr_vs_loo`` (and their theory) added to the sweep rows."""
    import numpy as np

    df = df.copy()
    for pre in ("", "theory_"):
        scaled = df[f"{pre}scaled_mse"].astype(float)
        df[f"{pre}snr"] = np.where(scaled > 0, (df["target_sq"] - scaled) / scaled, np.nan)
    keys = ["env", "G"]
    ref = df[df["estimator"] == REFERENCE].set_index(keys)["snr"].rename("ref")
    ref_theory = df[df["estimator"] == REFERENCE].set_index(keys)["theory_snr"].rename("ref_th")
    df = df.join(ref, on=keys).join(ref_theory, on=keys)
    df["snr_vs_loo"] = df["snr"] / df.pop("ref")
    df["theory_snr_vs_loo"] = df["theory_snr"] / df.pop("ref_th")
    return df


def run(cfg: Config, key=None, *, store=None, progress=None) -> dict:
    """``{results, kappa}``; the sweep cells resume from ``store`` like ``gpolab sweep``'s."""
    import pandas as pd

    cfg.validate()
    parts = [sweep.run_sweep(s, store, progress, key=key) for s in sweeps(cfg)]
    kappa = kappa_table(cfg)
    if progress is not None:
        progress.update(1, f"kappa table: {kappa['estimator'].nunique()} reward-only estimators")
    results = pd.concat(parts, ignore_index=True)
    order = {e: i for i, e in enumerate(cfg.estimators)}
    results = results.sort_values(
        ["env", "G", "estimator"], key=lambda c: c.map(order) if c.name == "estimator" else c
    )
    return {"results": with_scores(results.reset_index(drop=True)), "kappa": kappa}


COLUMNS = (
    "estimator mse theory_mse bias_sq theory_bias_sq cos snr_vs_loo theory_snr_vs_loo "
    "degenerate_frac"
).split()


def report(cfg: Config, tables: dict) -> str:
    """The results at the group size nearest 8 of each env, best direction (snr) first."""
    from gpolab.kit.tables import table_text

    df = tables["results"]
    parts = []
    for env, rows in df.groupby("env", sort=False):
        G = min(rows["G"].unique(), key=lambda g: (abs(math.log2(g / 8)), g))
        at = rows[rows["G"] == G].sort_values("snr", ascending=False)
        head = (
            f"{env}, G = {G}, best direction first (snr: signal/noise after the best "
            "rescaling; theory NaN: Monte Carlo only):"
        )
        parts.append(head + "\n" + table_text(at, COLUMNS))
    return "\n\n".join(parts)


def kappa_summary(kappa, G: int = 8, ps=(0.05, 0.5, 0.95)) -> list[dict]:
    """κ_G at a few difficulties per estimator, estimators with identical curves merged."""
    import numpy as np

    rows = []
    for names, curve in families(kappa[kappa["G"] == G]):
        p = curve["p"].to_numpy()
        vals = {f"p={q:g}": float(np.interp(q, p, curve["kappa"])) for q in ps}
        rows.append({"estimators": " = ".join(names), **vals})
    return rows


def notes(cfg: Config, tables: dict) -> str:
    kappa = tables["kappa"]
    lines = ["Monte Carlo vs exact finite-G theory:", *agreement(tables["results"])]
    if kappa.empty:
        return "\n".join(lines)
    G = 8 if 8 in set(kappa["G"]) else int(kappa["G"].iloc[0])
    lines.append(
        f"kappa_{G}(p): the weight E[g_hat | p] = kappa g_x gives a prompt of difficulty p"
    )
    for row in kappa_summary(kappa, G):
        vals = "  ".join(f"{k} {v:.3g}" for k, v in row.items() if k != "estimators")
        lines.append(f"  {vals}   {row['estimators']}")
    return "\n".join(lines)


def figures(tables: dict) -> dict:
    from gpolab.labs.zoo import plots

    if tables["kappa"].empty:  # a graded-only run
        return {"zoo.png": plots.zoo_figure}
    return {"zoo.png": plots.zoo_figure, "kappa.png": plots.kappa_figure}
