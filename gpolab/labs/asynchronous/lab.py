"""The asynchronous-RL lab (``gpolab asynchronous``, issue 58): rollouts drawn by a mismatched
inference engine from the policy k versions old and reused over m minibatch updates, with each
framework's composition of the trainer's, the proximal and the engine's log-probs
(:mod:`gpolab.estimators.asynchronous`), on the Markov env at long T, with the kernel
:mod:`gpolab.kernels.async_rl`.

One unit per (correction, mismatch); every η, staleness k and update of a unit is one engine run,
and the corrections of one mismatch share their draws (common random numbers), so differences
between corrections are paired.  Tables:

* ``updates``: one row per single update (correction, mismatch, η, k, j) against the exact
  gradient at the θ where it is applied: bias², variance, MSE with SEs, the paired bias against the
  sequence-IS update on the same minibatch, cos, scale, the excess over a fresh on-policy update at
  the same θ, the clipped share and the mean |log π_θ − log μ|;
* ``results``: one row per (correction, mismatch, η, k, m), the first m updates averaged (what a
  run with m minibatches per rollout batch does);
* ``safe_staleness`` (:mod:`gpolab.labs.asynchronous.analysis`): per (correction, mismatch, η, m)
  the largest k whose excess over a fresh update stays within 10%;
* ``curves``: training on the exact expected reward J, ``rounds`` rollout batches of m updates
  each with the rollouts k versions old, per round (mean J over ``curve_seeds`` seeds and its SE),
  beside exact gradient ascent with the same η and number of updates;
* ``training``: per (mismatch, η, k, m) each correction's final J and its paired difference from
  the best one's (SE from the seed splits, which the corrections share).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from gpolab import configs, engine, envs, validate
from gpolab.configs import option
from gpolab.envs import markov
from gpolab.estimators import asynchronous as compositions
from gpolab.kernels import async_rl as kernel
from gpolab.kernels import splits
from gpolab.kernels.splits import split_se
from gpolab.kit.store import cell_key, resumed
from gpolab.kit.tables import table_text
from gpolab.labs.asynchronous import analysis, plots, queue
from gpolab.labs.mismatch.from_config import stamp
from gpolab.labs.offpolicy.tables import UPDATE, epoch_at, frame, stats_columns

NAME = "asynchronous"
TABLES = ("results", "updates", "safe_staleness", "staleness_law", "curves", "training")
# the code names markov (its make, parse_mismatch, behaviour logits and exact gradient)
NEEDS = envs.Needs(("token_logp", "behaviour"), fields=("batch", "length"), only=("markov",))
INSTANCES = envs.instances(*envs.names(NEEDS))
SPLITS = 8  # independent seed batches: the standard errors (shared by the corrections)
SCHEMA = 3  # 2: the curves' staleness laws (law, mean_age, drop); 3: ess
MAX_STALENESS = 64  # the curves keep kmax + 1 policy versions; stale steps are unrolled per seed
KNOB_DEFAULTS = (0.2, 0.28, 3.0)  # the clip knobs a composition does not read (placeholders)
JSON = (  # the --json columns
    *("env", "T", "G", "B", "correction", "framework", "mismatch", "mismatch_kl", "switch"),
    *("eta", "staleness", "m", "bias_sq", "bias_sq_se", "variance", "mse", "mse_se"),
    *("mse_fresh", "excess_mse", "excess_mse_se", "excess_mse_scaled", "excess_mse_scaled_se"),
    *("bias_sq_paired", "bias_sq_paired_se"),
    *("cos", "scale", "clip_frac", "log_gap", "ess", "n_seeds", "yours"),
)


@dataclasses.dataclass(frozen=True, init=False)
class Config(configs.Config):
    """The asynchronous grid and ``instance``, the env's own settings (flags name its fields flat:
    ``--batch 8``; in a file its subtable ``[asynchronous.markov]``).  Tuples are grids."""

    LAB: ClassVar[str] = NAME
    QUICK: ClassVar[dict] = {
        "seeds": 64,
        "curve_seeds": 16,
        "correction": ("trl/async_grpo", "areal/decoupled", "verl/decoupled_token_is", "sis"),
        "mismatch": ("noise:0.2",),
        "staleness": (0, 4),
        "eta": (0.2,),
        "rounds": 6,
    }
    INSTANCES: ClassVar[tuple] = ("env", INSTANCES)

    env: str = option(
        "markov", "markov (responses of T tokens; the engine's policy differs from the trainer's)"
    )
    G: int = option(4, "group size")
    T: int = option(256, "response length (replaces the instance's length)")
    mismatch: tuple[str, ...] = option(
        ("noise:0.05", "noise:0.2"),
        "comma list of the inference engine's mismatch as KIND:SIZE: noise:S (fixed log-prob "
        "noise of scale S), temperature:TAU, bf16:OFFSET (logits rounded to bfloat16)",
    )
    correction: tuple[str, ...] = option(
        tuple(compositions.REGISTRY),
        "comma list of the frameworks' compositions (registry names, NAME[eps_low=...,"
        "eps_high=...,clip_c=...] for other clip knobs): " + ", ".join(compositions.REGISTRY),
    )
    from_config: str = option(
        "",
        "a TRL AsyncGRPOConfig or GRPOConfig (JSON/YAML), a verl config (YAML; its fully-async "
        "recipe too) or an AReaL one: "
        "adds the composition it runs, with its clip, at the staleness it keeps and its updates "
        "per batch, as the rows marked yours",
        key=False,
    )
    staleness: tuple[int, ...] = option(
        (0, 1, 2, 4, 8), "comma list of policy versions the rollouts are behind the trainer"
    )
    queue: tuple[str, ...] = option(
        (),
        "comma list of staleness laws for the training curves besides the fixed k: "
        "queue:MEAN:SIGMA (gpolab's queue model: age = floor(MEAN*L), L lognormal with mean 1 and "
        "log-sd SIGMA; MEAN = rollouts in flight / rollouts per step, TRL's default 4; ages above "
        "the largest staleness dropped)",
    )
    m: tuple[int, ...] = option((1, 4), "comma list of minibatch updates per rollout batch")
    eta: tuple[float, ...] = option((0.05, 0.1, 0.2, 0.4), "comma list of SGD step sizes")
    switch: int = option(
        0,
        "tokens a response has before the engine's weights move one version on mid-response "
        "(in-flight weight updates: mixed-age sequences); 0: never",
    )
    rounds: int = option(20, "rollout batches of each training curve on the exact J (0: no curves)")
    curve_seeds: int = option(64, f"seeds per training curve ({SPLITS} independent batches)")
    seeds: int = option(256, f"Monte Carlo seeds per update ({SPLITS} independent batches)")
    chunk: int = option(
        0, "seeds per compiled chunk (0: automatic; results do not depend on it)", key=False
    )
    seed: int = option(0, "master PRNG seed")
    out: str = option(
        "results/asynchronous", "output folder (tables, config.toml, figures)", key=False
    )
    instance: markov.Instance = option(None, "the env's settings (default: the env's defaults)")

    def __init__(self, **kw) -> None:
        configs.init(self, kw)

    def validate(self) -> None:
        """Plain-Python checks before anything is traced (each names the field)."""
        validate.choice("env", self.env, tuple(INSTANCES))
        self.instance.validate()
        validate.integer("G", self.G, 2)
        validate.group_sizes("G", self.G)
        validate.integer("T", self.T, 2)
        validate.at_most("T", (self.T,), 4096, "the exact gradient's dynamic program is O(T²A²)")
        validate.run_sizes(self, 2 * SPLITS)
        for field in ("mismatch", "correction", "staleness", "m", "eta"):
            validate.nonempty(field, getattr(self, field))
        for spec in self.mismatch:
            markov.parse_mismatch(spec)
        for spec in self.correction:
            compositions.parse(spec)
        validate.integers("staleness", self.staleness, 0)
        validate.at_most("staleness", self.staleness, MAX_STALENESS, "versions kept per seed")
        validate.integers("m", self.m, 1)
        validate.at_most("m", self.m, 64, "the updates of an epoch are unrolled per seed")
        for e in self.eta:
            validate.real("eta", e, low=0.0, open_low=True)
        validate.integer("switch", self.switch, 0, self.T - 1)
        if self.switch and min(self.staleness) < 1:
            raise validate.ConfigError(
                f"staleness: got {min(self.staleness)} with switch {self.switch}; allowed: at "
                "least 1 (the engine's later weights are the trainer's next version)"
            )
        validate.integer("rounds", self.rounds, 0, 10_000)
        if self.rounds:
            validate.seeds("curve_seeds", self.curve_seeds, 2 * SPLITS)
        mine = yours(self)
        if mine is not None:
            validate.at_most("from_config", (mine["staleness"],), MAX_STALENESS, "versions kept")
        kmax = max(_grid(self)[0])  # the grid that runs: the user's oldest rollouts included
        for spec in self.queue:
            queue.law(spec, kmax)


# ---------------------------------------------------------------- the user's own setup


@functools.cache
def _yours(path: str, stamp) -> dict:
    """:func:`yours` of the file at ``path`` as it was at ``stamp`` (its mtime, or None when it
    cannot be read: the reader then gives the one error naming it)."""
    from gpolab.labs.asynchronous import from_config

    return from_config.setup_of(from_config.read(path), f"{path}: ")


def yours(cfg: Config) -> dict | None:
    """The user's setup (:func:`gpolab.labs.asynchronous.from_config.setup_of`), or None."""
    if not cfg.from_config:
        return None
    path = str(cfg.from_config)
    return _yours(path, stamp(path))  # read once per run, again when the file changes


# ---------------------------------------------------------------- units and keys


def specs(cfg: Config) -> list[str]:
    """The compositions measured, each spelled once, the user's own (``from_config``) last
    unless the grid has it."""
    out = [compositions.spec(*compositions.parse(c)) for c in cfg.correction]
    mine = yours(cfg)
    return list(dict.fromkeys(out + ([mine["correction"]] if mine else [])))


def units(cfg: Config) -> list[dict]:
    return [{"mismatch": s, "correction": c} for s in cfg.mismatch for c in specs(cfg)]


def cells(cfg: Config) -> int:
    return len(units(cfg))


def cell_keys(cfg: Config) -> list[str]:
    common = configs.key_settings(cfg, exclude=("mismatch", "correction"))
    if yours(cfg) is not None:  # the user's staleness and m join the grid
        common["grid"] = [list(x) for x in _grid(cfg)]
    return [cell_key(NAME, schema=SCHEMA, unit=u, settings=common) for u in units(cfg)]


@functools.lru_cache(maxsize=4)
def _params(instance, T: int):
    params = markov.make(dataclasses.replace(instance, length=T))
    return params, markov.init_theta(params)


def _grid(cfg: Config) -> tuple:
    """(staleness, m) measured: the config's, with the user's oldest rollouts and m."""
    mine = yours(cfg)
    extra_k, extra_m = ({mine["staleness"]}, {mine["m"]}) if mine else (set(), set())
    return tuple(sorted(set(cfg.staleness) | extra_k)), tuple(sorted(set(cfg.m) | extra_m))


def _cell(cfg: Config, unit: dict, m: int) -> kernel.Cell:
    params, _ = _params(cfg.instance, cfg.T)
    kind, _ = markov.parse_mismatch(unit["mismatch"])
    correction = compositions.correction(unit["correction"])
    staleness = _grid(cfg)[0]
    B = cfg.instance.batch
    return kernel.Cell(
        correction, kind, cfg.G, B, m, staleness, markov.count_cap(params), cfg.switch
    )


def _knobs(spec: str) -> tuple:
    """The composition's (ε_low, ε_high, c): its spec's or its framework's values, placeholders
    where it reads none."""
    own = compositions.knobs(spec)
    return tuple(d if k is None else k for k, d in zip(own, KNOB_DEFAULTS, strict=True))


# ---------------------------------------------------------------- a unit's rows


def _base(cfg: Config, unit: dict, cell: kernel.Cell) -> dict:
    params, theta = _params(cfg.instance, cfg.T)
    kind, size = markov.parse_mismatch(unit["mismatch"])
    mu = markov.behaviour_logits(params, theta, kind, size)
    corr = cell.correction
    name = unit["correction"]
    eps_low, eps_high, clip_c = compositions.knobs(name)
    return {
        "env": cfg.env,
        "T": cfg.T,
        "G": cfg.G,
        "B": cell.B,
        "correction": name,
        "framework": name.split("/")[0] if "/" in name else "gpolab",
        **{f: getattr(corr, f) for f in ("ratio", "clip", "anchor", "weight")},
        "eps_low": eps_low,
        "eps_high": eps_high,
        "clip_c": clip_c,
        "mismatch": unit["mismatch"],
        "mismatch_kind": kind,
        "mismatch_size": size,
        "mismatch_kl": float(markov.mismatch(params, theta, mu).kl_token),
        "switch": cfg.switch,
        "J_start": float(markov.expected_return(params, theta)),
    }


def _error_rows(cfg: Config, unit: dict, key, base: dict) -> list[dict]:
    """The ``updates`` and ``results`` rows of one unit."""
    staleness, ms = _grid(cfg)
    cell = _cell(cfg, unit, max(ms))
    params, theta = _params(cfg.instance, cfg.T)
    size = markov.parse_mismatch(unit["mismatch"])[1]
    args = kernel.inputs(cell, params, theta, cfg.eta, size, *_knobs(unit["correction"]))
    s = kernel.summary(splits.run(kernel.per_seed, cell, args, key, cfg.seeds, SPLITS, cfg.chunk))
    eta = np.asarray(cfg.eta, float)[:, None, None]
    k = np.asarray(staleness)[None, :, None]
    rows = []
    for table, at, last in (
        ("updates", UPDATE, {"update": np.arange(cell.m)[None, None, :]}),
        ("results", epoch_at(ms), {"m": np.asarray(ms)[None, None, :]}),
    ):
        cols = stats_columns(s.main, at, "bias_sq bias_sq_se variance mse mse_se")
        cols |= stats_columns(s.paired, at, "bias_sq bias_sq_se", suffix="_paired")
        for name in ("cos", "scale", "clip_frac", "log_gap", "ess"):
            cols[name] = at.of(getattr(s, name))
        cols["mse_fresh"] = at.of(s.fresh)
        cols["excess_mse"] = cols["mse"] / cols["mse_fresh"] - 1
        cols["excess_mse_se"] = split_se(at.of(s.main.split.mse) / at.of(s.fresh_split))
        scaled = at.of(s.best_split) / at.of(s.best_fresh_split)  # (S, …) per split
        cols["excess_mse_scaled"] = scaled.mean(0) - 1
        cols["excess_mse_scaled_se"] = split_se(scaled)
        index = {"eta": eta, "staleness": k, **last}
        rows += frame(table, base | {"n_seeds": s.n}, index, cols)
    return rows


def _curve_rows(cfg: Config, unit: dict, key, base: dict) -> list[dict]:
    """The ``curves`` rows of one unit and its per-split final J (table ``splits``, read by
    :func:`gpolab.labs.asynchronous.analysis.training`)."""
    staleness, ms = _grid(cfg)
    params, theta = _params(cfg.instance, cfg.T)
    size = markov.parse_mismatch(unit["mismatch"])[1]
    dtype = theta.dtype
    names, laws, drops = _laws(cfg, staleness)
    knobs = (jnp.asarray(x, dtype) for x in (size, *_knobs(unit["correction"])))
    args = (params, theta, jnp.asarray(cfg.eta, dtype), jnp.asarray(laws, dtype), *knobs)
    eta = np.asarray(cfg.eta, float)[:, None, None]
    law = np.asarray(names, object)[None, :, None]
    k = np.asarray([*staleness, *[max(staleness)] * len(cfg.queue)])[None, :, None]
    drop = np.asarray(drops)[None, :, None]
    rnd = np.arange(cfg.rounds)[None, None, :]
    ascent = _ascent(cfg.instance, cfg.T, tuple(cfg.eta), cfg.rounds * max(ms))
    rows = []
    for m in ms:
        run = kernel.Training(_cell(cfg, unit, m), cfg.rounds)
        key_m = jax.random.fold_in(key, m)
        parts = splits.run(kernel.train_seed, run, args, key_m, cfg.curve_seeds, SPLITS, cfg.chunk)
        n = sum(p.n for p in parts)
        split_J = np.stack([p.sums["J"] / p.n for p in parts])  # (S, E, L, R)
        names_out = ("J", "clip_frac", "log_gap", "ess", "age")
        cols = {name: sum(p.sums[name] for p in parts) / n for name in names_out}
        cols["J_se"] = split_se(split_J)
        cols["J_ascent"] = ascent[:, None, (np.arange(cfg.rounds) + 1) * m]
        cols["drop"] = drop
        index = {"eta": eta, "law": law, "staleness": k, "m": m, "round": rnd + 1}
        rows += frame(
            "curves", base | {"n_seeds": n}, index | {"updates": (rnd + 1) * m}, cols, {}, False, {}
        )
        final = {"J_final": split_J[..., -1], "J_area": split_J.mean(-1)}
        s_index = {"split": np.arange(SPLITS)[:, None, None], "eta": eta[..., 0], "m": m}
        s_index |= {"law": law[..., 0], "staleness": k[..., 0]}
        rows += frame("splits", base, s_index, final)
    return rows


def _laws(cfg: Config, staleness: tuple) -> tuple:
    """(names, (L, kmax + 1) probabilities of a rollout's age, dropped shares): each fixed k of
    the grid ("k=K", one-hot), then each ``queue`` law (:mod:`gpolab.labs.asynchronous.queue`)."""
    kmax = max(staleness)
    fixed = np.eye(kmax + 1)[list(staleness)]
    queued = [queue.law(spec, kmax) for spec in cfg.queue]
    names = [f"k={k}" for k in staleness] + list(cfg.queue)
    laws = np.concatenate([fixed, *[p[None] for p, _ in queued]])
    return names, laws, [0.0] * len(staleness) + [d for _, d in queued]


@functools.lru_cache(maxsize=4)
def _ascent(instance, T: int, etas: tuple, steps: int) -> np.ndarray:
    """(E, steps + 1) exact J along exact gradient ascent θ ← θ + η g(θ) from θ_0 (the
    noiseless, synchronous reference of the curves)."""
    params, theta = _params(instance, T)
    cap = markov.count_cap(params)

    def path(eta):
        def step(th, _):
            J, g = markov.value_gradient(params, th, cap)
            return th + eta * g, jnp.mean(J)

        last, Js = jax.lax.scan(step, theta, None, length=steps)
        return jnp.append(Js, markov.expected_return(params, last))

    return np.asarray(jax.jit(jax.vmap(path))(jnp.asarray(etas, theta.dtype)), float)


def unit_rows(cfg: Config, unit: dict, key) -> list[dict]:
    """Every row of a (correction, mismatch) unit; ``key``: its mismatch's draws."""
    base = _base(cfg, unit, _cell(cfg, unit, 1))
    rows = _error_rows(cfg, unit, jax.random.fold_in(key, 0), base)
    if cfg.rounds:
        rows += _curve_rows(cfg, unit, jax.random.fold_in(key, 1), base)
    for r in rows:
        if r["table"] in ("updates", "results") and not math.isfinite(r["mse"]):
            r["why_nan"] = "non-finite updates on some seeds (ratios overflowed)"
    return rows


# ---------------------------------------------------------------- the lab


def run(cfg: Config, key=None, *, store=None, progress=None) -> dict:
    """``{results, updates, safe_staleness, staleness_law, curves, training}``, resumed from
    ``store``."""
    cfg.validate()
    key = jax.random.key(cfg.seed) if key is None else key
    todo = units(cfg)

    def compute(i: int) -> list[dict]:
        return unit_rows(cfg, todo[i], engine.cell_key(key, NAME, todo[i]["mismatch"]))

    df = resumed(cfg, store, cell_keys(cfg), compute, progress=progress, label=label)
    tables = {}
    for name in ("results", "updates", "curves", "splits"):
        t = df[df["table"] == name].drop(columns="table").dropna(axis=1, how="all")
        tables[name] = t.reset_index(drop=True)
    for name, cols in (("results", ("m",)), ("updates", ("update",)), ("curves", CURVE_INTS)):
        if not tables[name].empty:
            tables[name] = tables[name].astype({c: int for c in cols})
    per_split = tables.pop("splits")
    tables["safe_staleness"] = analysis.safe_staleness(tables["results"])
    tables["staleness_law"] = analysis.staleness_law(tables["updates"])
    tables["training"] = analysis.training(per_split)
    mine = yours(cfg)
    for name in ("results", "curves", "training"):
        t = tables[name]
        if not t.empty:
            t["yours"] = False if mine is None else analysis.is_yours(t, mine)
    return {name: tables[name] for name in TABLES}


CURVE_INTS = ("m", "round", "updates")


def label(rows: list[dict]) -> str:
    return f"{rows[0]['mismatch']} {rows[0]['correction']}"


REPORT = (  # the printed table's columns
    *("mismatch", "correction", "eta", "staleness", "m", "bias_sq", "variance", "mse"),
    *("excess_mse", "cos", "scale", "clip_frac"),
)


def report(cfg: Config, tables: dict) -> str:
    return table_text(tables["results"], REPORT)


def notes(cfg: Config, tables: dict) -> str:
    """The safe staleness of each composition, which one trains best, and where the user's own
    setup lands."""
    lines = []
    mine = yours(cfg)
    for title, df, cols in (
        (
            "Safe staleness (excess MSE over a fresh on-policy update at most "
            f"{analysis.SAFE - 1:.0%}, every smaller k too):",
            tables["safe_staleness"],
            analysis.SAFE_COLUMNS,
        ),
        (
            "Training on the exact J: final J and the paired gap to the best composition:",
            tables["training"],
            analysis.TRAINING_COLUMNS,
        ),
    ):
        if not df.empty:
            lines += ["", title, table_text(df, [c for c in cols if c in df])]
    if mine is not None:
        lines += ["", f"Your config ({cfg.from_config}): {mine['text']}."]
        lines += [f"  - {note}" for note in mine["notes"]]
        found = analysis.decision(tables, mine)
        if not found.empty:
            lines += [
                "",
                "Your setup beside the best alternatives:",
                table_text(found, list(found)),
            ]
    return "\n".join(lines).strip()


def figures(tables: dict) -> dict:
    out = {"asynchronous_staleness.png": plots.staleness_figure}
    if not tables["curves"].empty:
        out["asynchronous_curves.png"] = plots.curves_figure
    return out
