"""The float32 lab (``gpolab float32``): NeMo-RL's leave-one-out std normalization and verl's
GRPO std normalization in float32 on rewards beyond 0/1, against their exact values, over every
group on a reward grid.

NeMo-RL PR#4161 and PR#4158 report that with ``use_leave_one_out_baseline`` and
``normalize_rewards`` a (G−1)-vs-1 split on a non-dyadic reward gives the singleton an advantage
in the thousands: its peers are equal, their true std is 0, and NeMo's one-pass float32 std
sqrt(E[x²] − E[x]²) leaves a residue that passes ``std > 0``.  The arithmetic is
:mod:`gpolab.theory.float_arith` (numpy float32, the framework's operations in its order; the
reduction order is an assumption stated there).  No Monte Carlo: every group (composition) of G
rewards on each grid, with each value equally likely.

Tables: ``grid``, one row per (grid, G): the exact largest |A| over the groups (``bound``), the
largest float32 |A| before (7ea279ab) and after PR#4158's mask, each over the bound, the exact
probability that a group has a member past the bound (by more than
:data:`gpolab.theory.float_arith.SLACK`) before and after, that some member's equal peers leave a
positive float32 std, the group with the largest float32 |A|, and the probabilities' sum (1);
``splits``, one row per (grid, G, singleton u, peers v ≠ u): the singleton's float32 advantage
before and after the mask, its exact one and the residue.

verl PR#6348 reports that ``grpo_vectorized`` floored the group variance at epsilon (1e-6), so a
low-variance group's advantages came out ~100× smaller than canonical ``grpo``'s.  Table ``verl``,
one row per (grid, G) of ``verl_grids``: the exact largest |A|, the largest float32 |A| of
``grpo_vectorized`` before (b178a3cd) and after the fix and of canonical ``grpo``, the smallest
ratio of a group's floored |A| to its exact |A| (``shrink``), P(a group shrunk by more than 2×) and
the largest |A_fixed − A_grpo|.  A (grid, G) with more than ``max_compositions`` groups is not
enumerated: its row says so (``computed`` false, NaN values).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import ClassVar

import numpy as np

from gpolab import configs, envs, validate
from gpolab.configs import option
from gpolab.kit.store import cell_key, resumed
from gpolab.kit.tables import table_text
from gpolab.theory import float_arith

NAME = "float32"
NEEDS = envs.Needs(only=())  # reads no env: the rewards are the grids below
TABLES = ("grid", "splits", "verl")
GRIDS = {  # name: reward values (data as data)
    "binary": (0.0, 1.0),
    "quarters": (0.0, 0.25, 0.5, 0.75, 1.0),
    "fifths": (0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
    "tenths": tuple(round(0.1 * k, 1) for k in range(11)),
    "pr4161": (0.0, 0.35, 1.0),  # NeMo-RL PR#4161's partial-credit reward 0.35
    "pr4158": (0.0, 0.95),  # NeMo-RL PR#4158's example [0, 0.95 × 7]
    "pr6348": (1.0, 1.00001),  # verl PR#6348's repro: float32 scores 1.0 and 1.0000100135803223
    "lowvar": (0.5, 0.5005),  # a low-variance grid: var₁ ≤ 1.25e-7 < 1e-6, the floor binds
}
NEMO_GRIDS = ("binary", "quarters", "fifths", "tenths", "pr4161", "pr4158")


@dataclasses.dataclass(frozen=True)
class Config(configs.Config):
    """Everything a float32 run needs (the flags of ``gpolab float32``)."""

    LAB: ClassVar[str] = NAME
    QUICK: ClassVar[dict] = {"G": (2, 4, 8)}

    grids: tuple[str, ...] = option(
        NEMO_GRIDS, f"reward grids of the NeMo tables (grid, splits), of: {', '.join(GRIDS)}"
    )
    verl_grids: tuple[str, ...] = option(
        ("pr6348", "lowvar", "binary", "tenths"),
        f"reward grids of the verl table (PR#6348), of: {', '.join(GRIDS)}",
    )
    G: tuple[int, ...] = option((2, 3, 4, 8, 16), "group sizes")
    max_compositions: int = option(
        200_000, "largest number of groups enumerated per (grid, G); beyond: a row saying so"
    )
    out: str = option("results/float32", "output folder (tables, config.toml)", key=False)

    def validate(self) -> None:
        for name in ("grids", "verl_grids"):
            if not getattr(self, name):
                raise validate.ConfigError(f"{name}: allowed: one or more of " + ", ".join(GRIDS))
            for g in getattr(self, name):
                validate.choice(name, g, GRIDS)
        validate.integers("G", self.G, 2)
        validate.integer("max_compositions", self.max_compositions, 1)


def cells(cfg: Config) -> int:
    return (2 * len(cfg.grids) + len(cfg.verl_grids)) * len(cfg.G)


def _size(grid: str, G: int) -> int:
    return math.comb(G + len(GRIDS[grid]) - 1, len(GRIDS[grid]) - 1)


def _head(cfg: Config, grid: str, G: int) -> dict:
    values = GRIDS[grid]
    head = dict(grid=grid, values=" ".join(f"{v:g}" for v in values), G=G)
    head |= dict(dyadic=float_arith.dyadic(values), compositions=_size(grid, G))
    return head | dict(max_compositions=cfg.max_compositions)


def grid_row(cfg: Config, grid: str, G: int) -> dict:
    """One (grid, G) of the ``grid`` table (:func:`gpolab.theory.float_arith.enumerate_grid`)."""
    values = GRIDS[grid]
    head = _head(cfg, grid, G)
    if head["compositions"] > cfg.max_compositions:
        nan = dict.fromkeys(float_arith.GridResult._fields[1:], math.nan)
        return head | nan | dict(worst="", ratio_pre=math.nan, ratio_post=math.nan, computed=False)
    start = time.perf_counter()
    res = float_arith.enumerate_grid(values, G)._asdict()
    res.pop("compositions")
    ratios = dict(
        ratio_pre=res["max_pre"] / res["bound"], ratio_post=res["max_post"] / res["bound"]
    )
    return head | res | ratios | dict(computed=True, seconds=time.perf_counter() - start)


def verl_row(cfg: Config, grid: str, G: int) -> dict:
    """One (grid, G) of the ``verl`` table (:func:`gpolab.theory.float_arith.enumerate_verl`)."""
    head = _head(cfg, grid, G)
    if head["compositions"] > cfg.max_compositions:
        nan = dict.fromkeys(float_arith.VerlResult._fields[1:], math.nan)
        return head | nan | dict(worst="", computed=False)
    start = time.perf_counter()
    res = float_arith.enumerate_verl(GRIDS[grid], G)._asdict()
    res.pop("compositions")
    return head | res | dict(computed=True, seconds=time.perf_counter() - start)


def split_rows(grid: str, G: int) -> list[dict]:
    """Every (G−1)-vs-1 split of (grid, G) (:func:`gpolab.theory.float_arith.splits`)."""
    s = float_arith.splits(GRIDS[grid], G)
    n = len(s["single"])
    cols = {"grid": [grid] * n, "G": [G] * n, **{k: v.tolist() for k, v in s.items()}}
    return [dict(zip(cols, row, strict=True)) for row in zip(*cols.values(), strict=True)]


def run(cfg: Config, key=None, *, store=None, progress=None) -> dict:
    """``{grid, splits, verl}``: one unit per (grid, G) of each, resumed from ``store`` (keys: the
    settings and that (grid, G)).  ``key`` is unused: nothing is random."""
    cfg.validate()
    units = [(g, G) for g in cfg.grids for G in cfg.G]
    verl_units = [(g, G) for g in cfg.verl_grids for G in cfg.G]
    cap = cfg.max_compositions

    def grid_unit(i: int) -> list[dict]:
        return [grid_row(cfg, *units[i])]

    def split_unit(i: int) -> list[dict]:
        return split_rows(*units[i])

    def verl_unit(i: int) -> list[dict]:
        return [verl_row(cfg, *verl_units[i])]

    def label(rows: list[dict]) -> str:
        return f"{rows[0]['grid']}, G = {rows[0]['G']}"

    grid_keys = [cell_key(NAME, table="grid", grid=g, G=G, max_compositions=cap) for g, G in units]
    split_keys = [cell_key(NAME, table="splits", grid=g, G=G) for g, G in units]
    verl_keys = [
        cell_key(NAME, table="verl", grid=g, G=G, max_compositions=cap) for g, G in verl_units
    ]
    return {
        "grid": resumed(cfg, store, grid_keys, grid_unit, progress=progress, label=label),
        "splits": resumed(cfg, store, split_keys, split_unit, progress=progress, label=label),
        "verl": resumed(cfg, store, verl_keys, verl_unit, progress=progress, label=label),
    }


def figures(tables: dict) -> dict:
    return {}


def _skipped(cfg: Config, df) -> str:
    skipped = df[~df["computed"].astype(bool)]
    if not len(skipped):
        return ""
    where = ", ".join(f"{r.grid} G = {r.G}" for r in skipped.itertuples())
    return f"\nnot enumerated (more than {cfg.max_compositions:,} groups): {where}"


def report(cfg: Config, tables: dict) -> str:
    """Per (grid, G): the exact bound, the largest float32 |A| before and after PR#4158's mask,
    and the exact spike probabilities; then verl's grpo_vectorized before and after PR#6348."""
    df = tables["grid"]
    cols = ["grid", "G", "dyadic", "compositions", "bound", "max_pre", "max_post"]
    cols += ["p_spike_pre", "p_spike_post", "worst"]
    spl = tables["splits"]
    big = spl[np.abs(spl["a_pre"]) > 100]
    verl = tables["verl"]
    vcols = ["grid", "G", "bound", "max_floored", "max_fixed", "max_grpo", "shrink", "p_shrink2"]
    vcols += ["fix_vs_grpo", "worst"]
    return (
        table_text(df, cols)
        + _skipped(cfg, df)
        + f"\n(G-1)-vs-1 splits with float32 |A| > 100 before the mask: {len(big)} of {len(spl)}"
        + "\n\nverl grpo_vectorized before (b178a3cd: variance floored at 1e-6) and after PR#6348"
        + ":\n"
        + table_text(verl, vcols)
        + _skipped(cfg, verl)
    )
