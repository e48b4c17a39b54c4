"""Sweeps: a frozen config → one engine run per cell → a tidy table (one row per cell).

:class:`SweepConfig` is the single source of defaults; TOML files in ``experiments/`` and CLI flags
only override it (:func:`load_config`, :meth:`SweepConfig.replace`).  :meth:`SweepConfig.validate`
checks everything in plain Python, before anything is traced.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from gpolab import estimators, validate

ENVS = ("bandit", "tree", "arithmetic")
POLICIES = ("base", "instruct", "icl")
BANDIT_ESTIMATORS = estimators.ESTIMATORS
# chunk=0 on the arithmetic surrogate: its compilation (~4 s) outweighs what the engine's chunk
# probe could save at a sweep's few thousand seeds; 32 was the fastest of 4…32 seeds per chunk.
ARITHMETIC_CHUNK = 32


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    """Everything a sweep needs.  Tuples are grids; every combination is one cell."""

    env: str = "bandit"
    estimators: tuple[str, ...] = ("vanilla", "oracle", "loo", "mean", "grpo")
    G: tuple[int, ...] = (2, 4, 8, 16, 32, 64)
    K: tuple[int, ...] = (2, 4, 8, 16)
    M: tuple[int, ...] = (1, 2, 4, 8)
    variants: tuple[str, ...] = ("thought-std",)
    seeds: int = 100_000
    chunk: int = 0  # 0: engine.auto_chunk
    seed: int = 0
    B: int = 0  # 0: every prompt gets a group; b > 0: b iid prompts per estimate
    scale: str = "group"
    ddof: int = 1
    eps: float = 1e-4
    # bandit instance
    kind: str = "tabular"
    prompts: int = 16
    actions: int = 64
    dim: int = 8
    logit_scale: float = 1.0
    success_a: float = 0.5
    success_b: float = 1.0
    instance_seed: int = 0
    # tree thoughts
    model: str = "beta"
    a: float = 2.0
    b: float = 3.0
    thoughts: int = 32
    # arithmetic LLM surrogate
    policy: tuple[str, ...] = POLICIES
    questions: int = 500
    per_seed: int = 8  # questions per seed, one group each
    filler: int = 64  # chain-of-thought filler tokens per answer
    hidden: int = 32
    truth_samples: int = 256  # sequences per question for the Monte Carlo part of S2
    x64: bool = False
    shard: bool = False  # shard the seed axis over every device (of every process)
    out: str = "results/sweep"

    def replace(self, **changes) -> SweepConfig:
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            allowed = ", ".join(f.name for f in dataclasses.fields(self))
            raise validate.ConfigError(f"{sorted(unknown)[0]}: unknown field; allowed: {allowed}")
        return dataclasses.replace(self, **{k: _coerce(self, k, v) for k, v in changes.items()})

    def validate(self, check_out: bool = True) -> None:
        validate.choice("env", self.env, ENVS)
        validate.integer("seeds", self.seeds, 1)
        validate.integer("chunk", self.chunk, 0)
        validate.integer("seed", self.seed, 0)
        validate.choice("ddof", self.ddof, (0, 1))
        validate.real("eps", self.eps, low=0.0)
        if self.env in ("bandit", "arithmetic"):
            if not self.estimators:
                raise validate.ConfigError(
                    f"estimators: empty; allowed: {', '.join(BANDIT_ESTIMATORS)}"
                )
            validate.integers("G", self.G, 1)
            for name in self.estimators:
                for G in self.G:
                    estimators.check_estimator(
                        name, G, scale=self.scale, ddof=self.ddof, eps=self.eps
                    )
        if self.env == "arithmetic":
            if not self.policy:
                raise validate.ConfigError(f"policy: empty; allowed: {', '.join(POLICIES)}")
            for name in self.policy:
                validate.choice("policy", name, POLICIES)
            validate.integer("questions", self.questions, 1)
            validate.integer("per_seed", self.per_seed, 1)
            validate.integer("filler", self.filler, 0)
            validate.integer("hidden", self.hidden, 1)
            validate.integer("truth_samples", self.truth_samples, 2)
        elif self.env == "bandit":
            validate.integer("B", self.B, 0)
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
        if check_out:
            check_writable(self.out)


_LISTS = {"estimators": str, "G": int, "K": int, "M": int, "variants": str, "policy": str}


def _coerce(cfg: SweepConfig, name: str, value):
    """Accept "2,4,8" or lists for grid fields; leave other values as given (validated later)."""
    if name in _LISTS:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if isinstance(value, (str, int)):
            value = [value]
        try:
            return tuple(_LISTS[name](v) for v in value)
        except (TypeError, ValueError):
            raise validate.ConfigError(
                f"{name}: got {value!r}; allowed: a comma-separated list of "
                f"{'integers' if _LISTS[name] is int else 'names'}"
            ) from None
    return value


def check_writable(out: str) -> None:
    """Create ``out`` if needed and check a file can be written there."""
    try:
        Path(out).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out):
            pass
    except OSError as err:
        msg = f"out: {out!r} is not a writable directory ({err.strerror})"
        raise validate.ConfigError(msg) from None


def load_config(path: str | os.PathLike, base: SweepConfig | None = None) -> SweepConfig:
    """Read a TOML experiment file: its ``[sweep]`` table overrides :class:`SweepConfig` fields."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as err:
        raise validate.ConfigError(f"config: cannot read {str(path)!r} ({err.strerror})") from None
    except tomllib.TOMLDecodeError as err:
        raise validate.ConfigError(f"config: {str(path)!r} is not valid TOML ({err})") from None
    return (base or SweepConfig()).replace(**data.get("sweep", {}))


def num_cells(cfg: SweepConfig) -> int:
    """Rows in the result table."""
    return len(_row_ids(cfg))


def make_setup(cfg: SweepConfig) -> Callable:
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
                questions, seed=cfg.instance_seed, hidden=cfg.hidden, filler=cfg.filler
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


def _bandit_rows(cfg, cell, m, truth, policy=None) -> list[dict]:
    """Rows of the bandit and of the arithmetic surrogate (whose S2 is a Monte Carlo estimate:
    ``theory_mse_se`` is the standard error it carries into the exact formula)."""
    from gpolab import engine
    from gpolab.theory import mse as theory_mse

    B = cfg.B or None if cfg.env == "bandit" else None
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
                "degenerate_frac": float(m.mean("degenerate")),
                "mean_V": float(np.asarray(truth.prompt_probs) @ np.asarray(truth.V)),
                "theory_mse": theory_mse.mse(truth, name, cell.G, B),
                "theory_mse_se": theory_mse.mse_se(truth, name, cell.G, B),
                "theory_first_order": theory_mse.mse(truth, "oracle", cell.G, B),
                "theory_bias_sq": theory_mse.bias_sq(truth, name, cell.G, B),
            }
        )
    return rows


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


_NOT_IN_KEY = ("estimators", "G", "K", "M", "variants", "policy", "out", "chunk", "shard")


def config_hash(cfg: SweepConfig) -> str:
    from gpolab.store import digest

    return digest(dataclasses.asdict(cfg))


def _row_ids(cfg: SweepConfig) -> list[dict]:
    """One id per table row, in table order: (estimator, G) for the bandit, (variant, K, M)."""
    if cfg.env == "bandit":
        return [{"estimator": e, "G": G} for e in cfg.estimators for G in cfg.G]
    if cfg.env == "arithmetic":
        return [
            {"policy": p, "estimator": e, "G": G}
            for p in cfg.policy
            for e in cfg.estimators
            for G in cfg.G
        ]
    return [{"variant": v, "K": K, "M": M} for v in cfg.variants for K in cfg.K for M in cfg.M]


def cell_keys(cfg: SweepConfig) -> list[str]:
    """Store key of every row: a hash of the row's id and of every setting its numbers depend
    on (not the grids it sits in, the output directory, the chunk size or the sharding)."""
    from gpolab.store import digest

    base = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in _NOT_IN_KEY}
    return [digest({"sweep": base, "row": rid}) for rid in _row_ids(cfg)]


def _units(cfg: SweepConfig, pending: set[int]):
    """(rows, context, cell) units covering the pending rows: per (policy,) G the missing
    estimators (drawn on common random numbers, so computing a subset changes nothing), per
    (variant, K, M) for trees.  Arithmetic cells do not depend on the policy (its weights are
    traced), so each G compiles once for every policy."""
    from gpolab.cells import ArithmeticCell, BanditCell, TreeCell

    ids = _row_ids(cfg)
    if cfg.env == "tree":
        for i in sorted(pending):
            yield [i], None, TreeCell(ids[i]["K"], ids[i]["M"], ids[i]["variant"], cfg.ddof)
        return
    for policy in cfg.policy if cfg.env == "arithmetic" else (None,):
        for G in cfg.G:
            rows = [
                i for i in sorted(pending) if ids[i]["G"] == G and ids[i].get("policy") == policy
            ]
            if not rows:
                continue
            names = tuple(ids[i]["estimator"] for i in rows)
            if cfg.env == "bandit":
                yield rows, None, BanditCell(names, G, cfg.B, cfg.scale, cfg.ddof)
            else:
                yield rows, policy, ArithmeticCell(names, G, cfg.per_seed, cfg.scale, cfg.ddof)


def run_sweep(
    cfg: SweepConfig,
    on_row: Callable[[dict], None] | None = None,
    store=None,
    on_skip: Callable[[int], None] | None = None,
):
    """Validate ``cfg``, run every cell, return a pandas DataFrame with one row per cell.

    With a :class:`gpolab.store.Store`, finished rows are read back instead of recomputed and
    each new row is written atomically as soon as its unit finishes (resumable).  ``seconds`` is
    the wall time of the compiled unit a row belongs to (compile included), split evenly among
    its rows.
    """
    cfg.validate()
    import jax
    import pandas as pd

    from gpolab import cells, engine

    keys = cell_keys(cfg)
    pending = {i for i, k in enumerate(keys) if store is None or not store.has(k)}
    if on_skip is not None and len(pending) < len(keys):
        on_skip(len(keys) - len(pending))
    rows: dict[int, dict] = {}
    if pending:
        setup = make_setup(cfg)
        key = jax.random.key(cfg.seed)
        eps = np.asarray(cfg.eps, dtype=np.float64 if cfg.x64 else np.float32)
        fn = {"bandit": cells.bandit_error, "tree": cells.tree_error}.get(
            cfg.env, cells.arithmetic_error
        )
        chunk = cfg.chunk or (ARITHMETIC_CHUNK if cfg.env == "arithmetic" else engine.AUTO)
        mesh = engine.seed_mesh() if cfg.shard else engine.LOCAL
        chash = config_hash(cfg)
        for idx, context, cell in _units(cfg, pending):
            start = time.perf_counter()
            args, truth = setup(context)
            m = engine.run(fn, cell, (*args, eps), key, cfg.seeds, chunk, mesh=mesh)
            new = (
                _tree_rows(cfg, cell, m, args[0])
                if cfg.env == "tree"
                else _bandit_rows(cfg, cell, m, truth, context)
            )
            wall = time.perf_counter() - start
            for i, row in zip(idx, new, strict=True):
                row["seconds"] = wall / len(new)
                if store is not None:
                    store.write(keys[i], [row], chash, row["seconds"])
                rows[i] = row
                if on_row is not None:
                    on_row(row)
    if store is not None:
        df = store.read(keys)
    else:
        df = pd.DataFrame([rows[i] for i in range(len(keys))])
    for col in ("G", "K", "M", "B"):
        df[col] = df[col].astype("Int64")
    return df


def write_results(df, out: str | os.PathLike) -> list[Path]:
    """Write ``results.parquet`` and ``results.csv`` atomically (temp file + rename)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, writer in (("results.parquet", df.to_parquet), ("results.csv", df.to_csv)):
        tmp = out / f".{name}.tmp"
        writer(tmp, index=False)
        os.replace(tmp, out / name)
        paths.append(out / name)
    return paths
