"""The rollout–training mismatch lab (``gpolab mismatch``, issue 43): responses of T tokens drawn
by a rollout engine whose policy μ differs from the trainer's π_θ, and every framework's mismatch
correction (TRL, verl) against the exact gradient of the Markov env, with the kernel
:mod:`gpolab.kernels.rollout_mismatch`.

One unit per (T, mismatch, correction); the corrections of one (T, mismatch) share their draws,
and so do the mismatches of one T (common random numbers).  Tables: ``results`` (one row per
unit) and ``decision`` (:mod:`gpolab.labs.mismatch.decision`: which correction, at the measured
batch and at ``LARGE_B`` prompts).  ``--from-config`` reads a TRL or verl config
(:mod:`gpolab.labs.mismatch.from_config`) and adds the correction it runs as the rows marked
``yours``.  Until issue 57 this was the off-policy lab's ``--env markov`` mode: the store keys and
the draws keep that lab's name (``STORE``), so stored cells are reused.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import ClassVar

import jax

from gpolab import configs, engine, envs, validate
from gpolab.configs import option
from gpolab.envs import markov
from gpolab.estimators import mismatch as corrections
from gpolab.kernels import rollout_mismatch as kernel
from gpolab.kit.store import cell_key, resumed
from gpolab.kit.tables import table_text
from gpolab.labs.mismatch import decision, plots
from gpolab.labs.mismatch.from_config import stamp

NAME = "mismatch"
STORE = "offpolicy"  # the store keys' and the draws' lab name (the off-policy lab's mode before)
TABLES = ("results", "decision")
# the code names markov (its make, parse_mismatch, behaviour logits and token gradient)
NEEDS = envs.Needs(("token_logp", "behaviour"), fields=("batch", "length"), only=("markov",))
INSTANCES = envs.instances(*envs.names(NEEDS))
SCHEMA = 3  # the rows' store schema (2: the total-variation columns; 3: the large batch measured
# for batch-dependent entries, the π-sampled mean of unresolved sequence weights)
SPLITS = kernel.SPLITS
JSON = (  # the --json columns (as when this was the off-policy lab's mode)
    *("env", "G", "B", "bias_sq", "bias_sq_se", "variance", "mse", "mse_se", "cos", "n_seeds"),
    *("T", "mismatch", "mismatch_kl", "mismatch_kl_seq", "mismatch_chi2_seq", "correction"),
    *("yours", "truncated_share", "truncated_share_se", "variance_se", "rel_mse", "rel_mse_se"),
    *("cos_se", "scale", "scale_se", "resolved", "large_from", "mse_large", "mse_large_se"),
)


@dataclasses.dataclass(frozen=True, init=False)
class Config(configs.Config):
    """The mismatch grid and ``instance``, the env's own settings (flags name its fields flat:
    ``--batch 8``; in a file its subtable ``[mismatch.markov]``).  Tuples are grids."""

    LAB: ClassVar[str] = NAME
    QUICK: ClassVar[dict] = {"seeds": 512}
    INSTANCES: ClassVar[tuple] = ("env", INSTANCES)

    env: str = option(
        "markov",
        "markov (responses of T tokens from a rollout engine whose policy differs from the "
        "trainer's: the rollout-training mismatch and each framework's correction)",
    )
    G: int = option(4, "group size")
    T: tuple[int, ...] = option(
        (16, 64, 256), "comma list of response lengths (one instance per T, its length replaced)"
    )
    mismatch: tuple[str, ...] = option(
        ("noise:0.05", "noise:0.2"),
        "comma list of the rollout engine's mismatch as KIND:SIZE: noise:S (fixed log-prob "
        "noise of scale S), temperature:TAU, bf16:OFFSET (logits rounded to bfloat16)",
    )
    correction: tuple[str, ...] = option(
        tuple(corrections.REGISTRY),
        "comma list of mismatch corrections (registry names, NAME[key=value,...] for other "
        "thresholds): " + ", ".join(corrections.REGISTRY),
    )
    from_config: str = option(
        "",
        "a TRL GRPOConfig (JSON/YAML) or verl config (YAML): adds the correction it runs, "
        "with its thresholds, as the rows marked yours",
        key=False,
    )
    seeds: int = option(4096, f"Monte Carlo seeds per cell ({SPLITS} independent batches)")
    chunk: int = option(
        0, "seeds per compiled chunk (0: automatic; results do not depend on it)", key=False
    )
    seed: int = option(0, "master PRNG seed")
    out: str = option("results/mismatch", "output folder (tables, config.toml, figures)", key=False)
    instance: markov.Instance = option(None, "the env's settings (default: the env's defaults)")

    def __init__(self, **kw) -> None:
        configs.init(self, kw)

    def validate(self) -> None:
        """Plain-Python checks before anything is traced (each names the field); the user's own
        correction (``from_config``) is read here, so a bad file is one error before any run."""
        validate.choice("env", self.env, tuple(INSTANCES))
        self.instance.validate()
        validate.integer("G", self.G, 2)
        validate.group_sizes("G", self.G)
        validate.run_sizes(self, 2 * SPLITS)
        for field in ("T", "mismatch", "correction"):
            validate.nonempty(field, getattr(self, field))
        validate.integers("T", self.T, 1)
        validate.at_most("T", self.T, 4096, "the exact gradient's dynamic program is O(T²A²)")
        for spec in self.mismatch:
            markov.parse_mismatch(spec)
        for spec in self.correction:
            corrections.parse(spec)
        yours(self)


# ---------------------------------------------------------------- the user's own correction


@functools.cache
def _yours(path: str, stamp) -> tuple[str, str]:
    """:func:`yours` of the file at ``path`` as it was at ``stamp`` (its mtime, or None when it
    cannot be read: the reader then gives the one error naming it)."""
    from gpolab.labs.mismatch import from_config

    found = from_config.correction_of(from_config.read(path))
    if found["name"] is None:
        raise validate.ConfigError(f"from_config: {path}: {found['text']}")
    text = found["text"] + "".join(f"\n  - {note}" for note in found["notes"])
    return corrections.spec(found["name"], found["overrides"]), text


def yours(cfg: Config) -> tuple[str, str] | None:
    """(the correction spec, one sentence naming it) of ``cfg.from_config``, or None."""
    if not cfg.from_config:
        return None
    path = str(cfg.from_config)
    return _yours(path, stamp(path))  # read once per run, again when the file changes


# ---------------------------------------------------------------- units and keys


def specs(cfg: Config) -> list[str]:
    """The corrections measured, each spelled once (:func:`gpolab.estimators.mismatch.spec`),
    the user's own (``from_config``) last unless the grid has it."""
    out = [corrections.spec(*corrections.parse(c)) for c in cfg.correction]
    mine = yours(cfg)
    return list(dict.fromkeys(out + ([mine[0]] if mine else [])))


def units(cfg: Config) -> list[dict]:
    return [
        {"T": int(T), "mismatch": m, "correction": c}
        for T in cfg.T
        for m in cfg.mismatch
        for c in specs(cfg)
    ]


def cells(cfg: Config) -> int:
    return len(units(cfg))


def cell_keys(cfg: Config) -> list[str]:
    """One store key per unit (the off-policy lab's keys of its markov mode: ``STORE``)."""
    common = configs.key_settings(cfg, exclude=("T", "mismatch", "correction"))
    return [
        cell_key(STORE, schema=f"mismatch-{SCHEMA}", unit=u, settings=common) for u in units(cfg)
    ]


# ---------------------------------------------------------------- a unit's row


@functools.lru_cache(maxsize=8)
def _point(instance, T: int, spec: str) -> kernel.Point:
    params = markov.make(dataclasses.replace(instance, length=T))
    theta = markov.init_theta(params)
    return kernel.point(params, theta, *markov.parse_mismatch(spec))


def large_seeds(cfg: Config) -> int:
    """Seeds for a batch-dependent entry's measurement at ``LARGE_B`` prompts: the measured
    batch's prompt draws (seeds × B / LARGE_B), at least two per split."""
    large = decision.LARGE_B
    return max(cfg.seeds * cfg.instance.batch // large, 2 * SPLITS) // SPLITS * SPLITS


def unit_rows(cfg: Config, unit: dict, key) -> list[dict]:
    """The one row of a (T, mismatch, correction) unit (``key``: its T's draws).  An entry whose
    mean depends on the batch (:func:`gpolab.estimators.mismatch.batch_dependent`) is measured
    again at ``LARGE_B`` prompts (its ``*_large`` columns, ``large_from`` = "measured"); for every
    other entry the large batch's MSE is exact from the measured one (``large_from`` = "exact")."""
    at = _point(cfg.instance, unit["T"], unit["mismatch"])
    name, options = corrections.parse(unit["correction"])
    cell = functools.partial(kernel.Cell, name, G=cfg.G, options=tuple(sorted(options.items())))
    draws = kernel.Draws(cfg.seeds, SPLITS, cfg.chunk)
    r = kernel.measure(at, cell(B=cfg.instance.batch), draws, key)
    entry = corrections.REGISTRY[name]
    row = {
        "env": cfg.env,
        "T": unit["T"],
        "mismatch": unit["mismatch"],
        "mismatch_kind": at.kind,
        "mismatch_size": at.size,
        "mismatch_kl": r["mismatch_kl_token"],
        **{k: v for k, v in r.items() if k.startswith("mismatch_") and k != "mismatch_kl_token"},
        "correction": unit["correction"],
        "level": entry.level,
        "kind": entry.kind,
        "yours": bool(cfg.from_config) and unit["correction"] == yours(cfg)[0],
    }
    skip = {"T", "kind", "size", "correction"}
    row.update({k: v for k, v in r.items() if k not in skip and not k.startswith("mismatch_")})
    row["n_seeds"] = cfg.seeds // SPLITS * SPLITS
    measured = corrections.batch_dependent(name) and cfg.instance.batch != decision.LARGE_B
    row["large_from"] = "measured" if measured else "exact"
    big = {}
    if measured:
        large = kernel.Draws(large_seeds(cfg), SPLITS, cfg.chunk)
        big = kernel.measure(
            at, cell(B=decision.LARGE_B), large, jax.random.fold_in(key, decision.LARGE_B)
        )
    for col in ("bias_sq", "variance", "mse"):
        for suffix in ("", "_se"):
            row[f"{col}_large{suffix}"] = big.get(f"{col}{suffix}", math.nan)
    row["n_seeds_large"] = large_seeds(cfg) if measured else 0
    return [row]


# ---------------------------------------------------------------- the lab


def run(cfg: Config, key=None, *, store=None, progress=None) -> dict:
    """``{results, decision}``: one row per (T, mismatch, correction), resumed from ``store``."""
    cfg.validate()
    key = jax.random.key(cfg.seed) if key is None else key
    todo = units(cfg)

    def compute(i: int) -> list[dict]:
        unit = todo[i]
        return unit_rows(cfg, unit, engine.cell_key(key, STORE, "mismatch", unit["T"]))

    results = resumed(
        cfg, store, cell_keys(cfg), compute, progress=progress, label=lambda rows: label(rows[0])
    ).reset_index(drop=True)
    return {"results": results, "decision": decision.decision(results)}


def label(row: dict) -> str:
    return f"T={row['T']} {row['mismatch']} {row['correction']}"


REPORT = (  # the printed table's columns
    "T mismatch mismatch_kl_seq correction truncated_share bias_sq variance rel_mse cos scale"
).split()


def report(cfg: Config, tables: dict) -> str:
    return table_text(tables["results"], REPORT)


def notes(cfg: Config, tables: dict) -> str:
    """The decision table, the rows μ's draws cannot resolve, and where the user's own setting
    lands."""
    lines = decision.notes(tables)
    mine = yours(cfg)
    if mine is not None:
        lines += ["", f"Your config ({cfg.from_config}): {mine[1]}"]
    return "\n".join(lines).strip()


def figures(tables: dict) -> dict:
    return {"mismatch.png": plots.mismatch_figure}
