"""The χ² lab: SGD on the Gaussian testbed and the weighted-χ² limit of n·Δ ([U] arXiv
2603.01162, Thm 8; theory §5).

Each seed runs SGD ascent θ_{i+1} = θ_i + (β/i) ĝ_i, i = 1, …, n_max, from θ_0, with the shared
estimators (:func:`gpolab.estimators.advantages` → :func:`~gpolab.estimators.policy_gradient`) on
B prompts × G responses of :mod:`gpolab.envs.gaussian`, and records n·Δ(θ_n) at every checkpoint
n.  The step size β/i does not depend on n, so the checkpoints of one trajectory *are* the runs of
length n.  Seeds are ``jit(vmap(per_seed))`` through :func:`gpolab.engine.per_seed` (seed i uses
``fold_in(key, i)``), steps a ``lax.scan`` per checkpoint segment.

One store cell per (estimator, G) (its trajectories give every n at once).  Tables: ``results``
(one row per (estimator, G, n): the predicted weights and mean, the empirical mean with a 95% CI,
the Kolmogorov–Smirnov test against the Imhof CDF, every setting), ``samples`` (n·Δ per estimator,
G, n and seed) and ``law`` (the predicted CDF on a grid per estimator and G), from which the QQ
and ECDF figures are drawn.  Several G (``--G 4,8,16``) give the rate in G of Corollaries 9 and 10
([U] §4.2); ``--paired`` runs every estimator on the same draws per seed, so differences between
estimators are paired (common random numbers).
"""

from __future__ import annotations

import dataclasses
import math
import time
from functools import partial
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from scipy import stats

from gpolab import configs, engine, envs, estimators, validate
from gpolab.configs import borrow, option
from gpolab.engine import train
from gpolab.engine.progress import Clock
from gpolab.envs import gaussian
from gpolab.kit.store import cell_key, config_hash, digest, resume
from gpolab.kit.tables import table_text
from gpolab.labs.chi2 import plots
from gpolab.theory import chi2 as theory

NAME = "chi2"
# the χ² lab drives the gaussian env through its own functions
NEEDS = envs.Needs(only=("gaussian",))
TABLES = ("results", "samples", "law")
DEFAULT = ("vanilla", "loo", "oracle", "mean", "grpo")  # the default run; streams 0-4 (stream)
LAW_POINTS = 4096  # CDF grid of each predicted law (uniform in √x up to its 1 − 1e-10 quantile)
STORED_NAMES = {"instance_seed": "env_seed"}  # in the cell keys: its name before --instance-seed
PAIRED_STREAM = 5  # --paired: the one stream every estimator draws from (0-4 and 8+ are taken)
JSON = tuple(
    (
        "estimator n B G paired beta n_seeds rank lambda_min weights predicted_mean empirical_mean "
        "ci_low ci_high ks_stat ks_pvalue seconds"
    ).split()
)


class _Reading:
    """The estimator specs for which ``test(spec)`` holds: a live registry query standing for a
    tuple in ``option(when=...)`` (a grid holds when it includes one of them).  Listed (help,
    errors) as the built-in names it holds for, or as ``label`` when given."""

    def __init__(self, test, label: str = ""):
        self.test, self.label = test, label

    def __contains__(self, spec) -> bool:
        try:
            return bool(self.test(spec))
        except validate.ConfigError:
            return False

    def __iter__(self):
        return iter([self.label] if self.label else [n for n in estimators.REGISTRY if n in self])


def _reads(option_name: str) -> dict:
    """``when``: the grid includes an estimator reading ``option_name`` (not fixed by brackets)."""

    def test(spec: str) -> bool:
        entry, fixed = estimators.bind(spec)
        return option_name in entry.options and option_name not in fixed

    return {"estimator": _Reading(test)}


MONTE_CARLO = {
    "estimator": _Reading(
        lambda spec: not theory.closed_form(spec) and not theory.why_not(spec),
        "an estimator with a Monte Carlo law (grpo; `gpolab estimators` says which)",
    )
}


@dataclasses.dataclass(frozen=True)
class Config(configs.Config):
    """Every setting of a ``gpolab chi2`` run.

    The defaults were chosen so the whole run (five estimators, 4,096 seeds, n up to 10⁴) takes
    about a minute on 2 CPU cores, with β λ_min(Λ_M) ∈ [0.75, 2.9] across estimators.  Any
    registry spec the law covers (:func:`gpolab.theory.chi2.why_not`) may be named; ``all`` is
    every built-in one.
    """

    LAB: ClassVar[str] = NAME
    QUICK: ClassVar[dict] = {"seeds": 512}  # experiments/chi2.toml's [quick] also cuts n

    estimator: tuple[str, ...] = option(
        DEFAULT,
        "comma list of estimator specs with a limit law "
        "(group-scoped, needing at most V(x)), or all",
    )
    B: int = option(4, "prompts per step")
    G: tuple[int, ...] = option(
        (8,),
        "comma list of responses per prompt, each >= 2 (several: "
        "one cell per estimator and G, the rate in G)",
    )
    beta: float = option(3.0, "step size scale, eta_i = beta/i; needs beta*lambda_min > 1/2")
    seeds: int = option(4096, "independent SGD runs")
    n: tuple[int, ...] = option(
        (100, 1000, 10_000),
        "comma list of step counts n at which n*gap is recorded (strictly increasing)",
    )
    prompts: int = borrow(gaussian.Instance, "prompts")
    dim: int = borrow(gaussian.Instance, "dim")
    rank: int = borrow(gaussian.Instance, "rank")
    init: float = option(0.3, "||theta_0 - theta*||, along a fixed identifiable direction")
    eps: float = option(1e-4, "grpo: A = (Z - mean)/(std + eps)", when=_reads("eps"))
    ddof: int = option(1, "grpo: std degrees of freedom, 0 or 1", when=_reads("ddof"))
    mc_groups: int = option(
        2**19,
        "Monte Carlo laws (grpo): groups per prompt for the Jacobian "
        "and covariance (SE about 0.1%)",
        when=MONTE_CARLO,
    )
    instance_seed: int = borrow(gaussian.Instance, "instance_seed")
    seed: int = option(0, "PRNG seed of the runs (and of grpo's theory)")
    paired: bool = option(
        False,
        "every estimator runs on the same draws per seed (paired "
        "differences); off: each estimator has its own stream",
    )
    chunk: int = option(4096, "seeds per compiled chunk (results do not depend on it)", key=False)
    out: str = option("results/chi2", "output folder (tables, config.toml, figures)", key=False)

    def __post_init__(self):
        if isinstance(self.G, int):  # Config(G=8): one group size
            object.__setattr__(self, "G", (self.G,))
        if tuple(self.estimator) == ("all",):
            found = [n for n, e in estimators.REGISTRY.items() if not e.user]
            object.__setattr__(self, "estimator", tuple(n for n in found if not theory.why_not(n)))

    def validate(self) -> None:
        """Plain-Python checks (ConfigError naming the field) before anything is traced."""
        validate.integers("G", self.G, 2)
        if len(set(self.G)) != len(self.G):
            raise validate.ConfigError(f"G: got {list(self.G)}; allowed: distinct group sizes")
        validate.group_sizes("G", self.G)
        for name in self.estimator:
            reason = theory.why_not(name)  # an unknown name: ConfigError listing the names
            if reason:
                raise validate.ConfigError(
                    f"estimator: {name} has no limit law here: {reason}; allowed: a group-scoped "
                    "estimator needing at most V(x) (`gpolab estimators` lists them)"
                )
            for G in self.G:
                estimators.check_estimator(name, G, ddof=self.ddof, eps=self.eps)
        validate.integer("B", self.B, 1)
        validate.real("beta", self.beta, low=0.0, open_low=True)
        validate.seeds("seeds", self.seeds, 2)
        validate.integers("n", self.n, 1)
        if list(self.n) != sorted(set(self.n)):
            raise validate.ConfigError(f"n: got {self.n}; allowed: strictly increasing integers")
        instance(self).validate()  # prompts, dim, rank, instance_seed
        validate.real("init", self.init, low=0.0)
        validate.integer("mc_groups", self.mc_groups, 1024)
        validate.integer("chunk", self.chunk, 1)
        validate.integer("seed", self.seed, 0)


def instance(cfg: Config) -> gaussian.Instance:
    """The testbed's settings (the others at the env's defaults)."""
    return configs.borrowed(gaussian.Instance, cfg)


def make_env(cfg: Config) -> gaussian.GaussianParams:
    return gaussian.make(instance(cfg))


def initial_theta(params: gaussian.GaussianParams, init: float, seed: int = 0) -> np.ndarray:
    """θ_0 = θ* + init · u, u a fixed unit vector in the identifiable subspace (float64)."""
    theta_star = gaussian.optimum(params)
    phi = np.asarray(params.phi, np.float64)
    _, sv, vt = np.linalg.svd(phi, full_matrices=False)
    basis = vt[sv > 1e-8 * sv[0]]
    u = np.random.default_rng(seed).normal(size=basis.shape[0]) @ basis
    return theta_star + init * u / np.linalg.norm(u)


# ----------------------------------------------------------------------------- the SGD loop


@dataclasses.dataclass(frozen=True)
class Chi2Cell:
    """Static settings (shapes and code paths): one compilation per cell."""

    estimator: str
    B: int
    G: int
    steps: tuple[int, ...]
    ddof: int = 1


@struct.dataclass
class Chi2Args:
    """Traced data: changing β, eps, θ_0 or the instance does not recompile."""

    params: gaussian.GaussianParams
    theta0: jax.Array  # (d,)
    beta: jax.Array  # ()
    eps: jax.Array  # ()


def sgd_direction(cell: Chi2Cell, args: Chi2Args, key: jax.Array, theta: jax.Array, i):
    """ĝ = (1/B) Σ_b (1/G) Σ_g A_bg W_bg with the shared estimator ``cell.estimator`` (no aux).

    The oracle baseline is the exact V_x(θ) at the current θ.
    """
    k_prompt, k_resp = jax.random.split(key)
    prompts = gaussian.sample_prompts(k_prompt, args.params, cell.B)
    _, rewards, scores = gaussian.sample(k_resp, args.params, theta, prompts, cell.G)
    baseline = gaussian.value(args.params, theta)[prompts]
    if estimators.resolve(cell.estimator).weights is not None:  # its own weights (ustat)
        c = estimators.gradient_weights(cell.estimator, rewards)
        return jnp.mean(jnp.einsum("bg,bgd->bd", c, scores), axis=0), None
    adv = estimators.advantages(
        cell.estimator, rewards, baseline=baseline, scale="group", ddof=cell.ddof, eps=args.eps
    )
    return jnp.mean(estimators.policy_gradient(adv, scores), axis=0), None


def harmonic_step(beta: jax.Array, i, aux) -> jax.Array:
    """η_i = β/i."""
    return beta / i.astype(beta.dtype)


def per_seed(cell: Chi2Cell, key: jax.Array, args: Chi2Args) -> dict:
    """One SGD trajectory θ_{i+1} = θ_i + (β/i) ĝ_i (:func:`gpolab.engine.train.ascend`):
    ``scaled_gap`` (len(steps),) = n·Δ(θ_n) at each checkpoint n.

    Step i draws with ``fold_in(key, i)``; each checkpoint segment is one ``lax.scan``.
    """
    direction = partial(sgd_direction, cell, args)
    lr = partial(harmonic_step, args.beta)
    theta, start, out = args.theta0, 0, []
    for n in cell.steps:
        steps = jnp.arange(start + 1, n + 1, dtype=jnp.uint32)
        theta, _, _ = train.ascend(direction, theta, key, steps, lr=lr)
        out.append(n * gaussian.gap(args.params, theta))
        start = n
    return {"scaled_gap": jnp.stack(out)}


def simulate(
    key: jax.Array, cell: Chi2Cell, args: Chi2Args, seeds: int, chunk: int, mesh=None
) -> np.ndarray:
    """(seeds, len(steps)) n·Δ per seed, in chunks of ``chunk`` seeds (the last one padded).

    With ``mesh`` (:func:`gpolab.engine.seed_mesh`) each chunk's seeds are split over its
    devices; seed i's draws do not depend on the chunking or the mesh.
    """
    chunk = min(chunk, seeds)
    if mesh is not None:
        chunk = -(-chunk // mesh.size) * mesh.size
    parts, clock = [], Clock(seeds)  # progress inside the cell; an endless one refused
    for start in range(0, seeds, chunk):
        idx = np.arange(start, start + chunk, dtype=np.uint32)
        out = engine.per_seed(per_seed, cell, key, args, idx, mesh=mesh)
        parts.append(np.asarray(out["scaled_gap"], np.float64)[: seeds - start])
        clock.tick(min(start + chunk, seeds))
    return np.concatenate(parts)


# ----------------------------------------------------------------------------- theory vs samples


def predict(
    key: jax.Array, cfg: Config, params, estimator: str, G: int | None = None
) -> theory.LimitLaw:
    """Theorem 8's law for one estimator at group size ``G`` (default: the config's first);
    ConfigError if β λ_min(Λ_M) ≤ 1/2."""
    G = cfg.G[0] if G is None else G
    options = dict(ddof=cfg.ddof, eps=cfg.eps, n_groups=cfg.mc_groups)
    return theory.estimator_law(key, params, estimator, cfg.B, G, cfg.beta, **options)


def compare(samples: np.ndarray, law: theory.WeightedChi2) -> dict:
    """Mean with a normal 95% CI and the KS test of ``samples`` against ``law.cdf``; with a
    non-finite sample (a diverged run) every statistic is NaN and ``ks_note`` says why (a NaN
    p-value is never a pass)."""
    n = samples.size
    bad = int(np.sum(~np.isfinite(samples)))
    if bad:
        nan = dict.fromkeys(
            ("empirical_mean", "ci_low", "ci_high", "ks_stat", "ks_pvalue"), math.nan
        )
        return nan | {"ks_note": f"{bad} of {n} runs diverged (non-finite n*gap): no test"}
    mean = float(np.mean(samples))
    half = engine.Z95 * float(np.std(samples, ddof=1)) / math.sqrt(n)
    ks = stats.kstest(samples, law.cdf)
    return dict(
        empirical_mean=mean,
        ci_low=mean - half,
        ci_high=mean + half,
        ks_stat=float(ks.statistic),
        ks_pvalue=float(ks.pvalue),
        ks_note="",
    )


def law_grid(dist: theory.WeightedChi2, points: int = LAW_POINTS) -> tuple:
    """(x, CDF(x)) on a grid uniform in √x up to the law's 1 − 1e-10 quantile."""
    x = np.linspace(0.0, math.sqrt(dist.x_max), points) ** 2
    return x, np.maximum.accumulate(dist.cdf(x))


# ----------------------------------------------------------------------------- cells


def row_settings(cfg: Config, estimator: str, G: int | None = None) -> dict:
    """Every setting the cell (``estimator``, ``G``; default G the config's first) depends on:
    of eps and ddof those it reads (grpo), mc_groups only for a Monte Carlo law (grpo); the
    others None.  Its columns; its cache key without ``paired`` when off (the keys stored before
    the option)."""
    settings = configs.key_settings(cfg, exclude=("estimator",))
    settings["G"] = cfg.G[0] if G is None else int(G)
    entry, fixed = estimators.bind(estimator)
    for option_name in ("eps", "ddof"):
        if option_name not in entry.options or option_name in fixed:
            settings[option_name] = None
    if theory.closed_form(estimator):
        settings["mc_groups"] = None
    return settings


def cell_list(cfg: Config) -> list[tuple[str, int]]:
    """(estimator, G) of every cell, estimator-major."""
    return [(e, G) for e in cfg.estimator for G in cfg.G]


def cell_keys(cfg: Config) -> list[str]:
    """Store key of every cell (:func:`cell_list`): its estimator and :func:`row_settings`
    (``instance_seed`` under ``env_seed``, the name the stored keys were written with)."""
    return [
        cell_key(NAME, settings=_stored_names(row_settings(cfg, e, G)), estimator=e)
        for e, G in cell_list(cfg)
    ]


def _stored_names(settings: dict) -> dict:
    out = {STORED_NAMES.get(k, k): v for k, v in settings.items()}
    if not out["paired"]:  # the default: keys as stored before --paired existed
        del out["paired"]
    return out


def stream(name: str) -> int:
    """The index of estimator ``name``'s own PRNG stream: its place in :data:`DEFAULT` (the
    streams results were stored with), else 8 + a 24-bit hash of its canonical spec."""
    if name in DEFAULT:
        return DEFAULT.index(name)
    return 8 + int(digest(estimators.canonical(name))[:6], 16)


def cells(cfg: Config) -> int:
    return len(cfg.estimator) * len(cfg.G)


def estimator_rows(
    cfg: Config, name: str, G: int, law, key: jax.Array, args: Chi2Args, mesh
) -> list:
    """The rows (one per n) of one cell (estimator ``name``, group size ``G``), each with its
    n·Δ samples and the law's CDF grid (split into the ``samples`` and ``law`` tables by
    :func:`run`).  The cell's key is its estimator's :func:`stream` (:data:`PAIRED_STREAM` with
    ``paired``) whatever G: seed i of two cells of one estimator starts from the same key."""
    law, t_theory = law
    start = time.perf_counter()
    dist = theory.WeightedChi2(law.weights)
    cell = Chi2Cell(name, cfg.B, G, tuple(cfg.n), cfg.ddof)
    k_est = jax.random.fold_in(key, PAIRED_STREAM if cfg.paired else stream(name))
    samples = simulate(k_est, cell, args, cfg.seeds, cfg.chunk, mesh)
    x, cdf = law_grid(dist)
    seconds = time.perf_counter() - start + t_theory
    settings = {k: v for k, v in row_settings(cfg, name, G).items() if k not in ("seeds", "n")}
    return [
        {
            "estimator": name,
            "n": int(n),
            **settings,
            "n_seeds": cfg.seeds,
            "rank": law.rank,
            "lambda_min": law.lambda_min,
            "weights": [float(w) for w in law.weights],
            "predicted_mean": law.mean,
            **compare(samples[:, j], dist),
            "seconds": seconds,
            "samples": samples[:, j],
            "law_x": x,
            "law_cdf": cdf,
        }
        for j, n in enumerate(cfg.n)
    ]


def run(cfg: Config, key=None, *, store=None, progress=None) -> dict:
    """Predict and simulate every estimator of ``cfg`` not yet in ``store`` (seeds split over
    this process's devices): ``{"results", "samples", "law"}`` (module docstring).

    Every missing law is computed first, so a bad β fails before any simulation.  Each
    estimator's runs use their own key (``fold_in`` of :func:`stream`), so the KS
    tests of different estimators are independent and a cell does not depend on the others.
    """
    cfg.validate()
    key = jax.random.key(cfg.seed) if key is None else key
    k_theory, k_sim = jax.random.split(key)
    keys, units = cell_keys(cfg), cell_list(cfg)
    missing = [u for u, k in zip(units, keys, strict=True) if not _stored(store, k)]
    laws, args, mesh = prepare(cfg, missing, k_theory) if missing else ({}, None, None)

    def compute(i: int) -> list[dict]:
        name, G = units[i]
        return estimator_rows(cfg, name, G, laws[units[i]], k_sim, args, mesh)

    df = resume(store, keys, compute, config_hash=config_hash(cfg), progress=progress, label=label)
    return split_tables(df)


def prepare(cfg: Config, units, key: jax.Array) -> tuple:
    """(laws, traced args, seed mesh) for the cells ``units`` ((estimator, G) pairs): every law
    first (closed forms before grpo's Monte Carlo one), so a bad β fails before any
    simulation."""
    params = make_env(cfg)
    laws = {}
    for name, G in sorted(units, key=lambda u: not theory.closed_form(u[0])):
        t0 = time.perf_counter()
        law = predict(jax.random.fold_in(key, 0), cfg, params, name, G)
        laws[name, G] = (law, time.perf_counter() - t0)
    theta0 = initial_theta(params, cfg.init, cfg.instance_seed)
    theta0, beta, eps = (jnp.asarray(x, params.phi.dtype) for x in (theta0, cfg.beta, cfg.eps))
    args = Chi2Args(params, theta0, beta, eps)
    return laws, args, engine.local_mesh()


def _stored(store, key: str) -> bool:
    return store is not None and store.has(key)


def label(rows: list[dict]) -> str:
    r = rows[-1]
    return (
        f"{r['estimator']}, G={r['G']}: predicted mean {r['predicted_mean']:.4g}, n={r['n']}: "
        f"{r['empirical_mean']:.4g} [{r['ci_low']:.4g}, {r['ci_high']:.4g}], "
        f"KS p={r['ks_pvalue']:.3g}"
    )


def _long(df, keys: tuple, columns: dict):
    """A long table: ``keys`` of each row of ``df`` repeated beside its array ``columns``
    (name → the row's column of arrays, each flattened as float64)."""
    import pandas as pd

    first = next(iter(columns.values()))
    sizes = [len(x) for x in df[first]]
    out = {k: np.repeat(df[k].to_numpy(), sizes) for k in keys}
    out |= {
        name: np.concatenate([np.asarray(x, np.float64) for x in df[col]])
        for name, col in columns.items()
    }
    return pd.DataFrame(out)


def split_tables(df) -> dict:
    """The store's rows (with their samples and CDF grids) as the three tidy tables."""
    samples = _long(df, ("estimator", "G", "n"), {"scaled_gap": "samples"})
    samples.insert(3, "seed", np.concatenate([np.arange(len(s)) for s in df["samples"]]))
    law = _long(
        df.drop_duplicates(["estimator", "G"]), ("estimator", "G"), {"x": "law_x", "cdf": "law_cdf"}
    )
    results = df.drop(columns=["samples", "law_x", "law_cdf"]).reset_index(drop=True)
    results["weights"] = [[float(w) for w in ws] for ws in results["weights"]]
    for col in ("ddof", "mc_groups"):  # None where the estimator does not read it
        results[col] = results[col].astype("Int64")
    return {"results": results, "samples": samples, "law": law}


# ----------------------------------------------------------------------------- report, figures

COLUMNS = (
    "estimator G n rank predicted_mean empirical_mean ci_low ci_high ks_stat ks_pvalue seconds"
).split()


def report(cfg: Config, tables: dict) -> str:
    return table_text(tables["results"], COLUMNS)


def notes(cfg: Config, tables: dict) -> str:
    """Per estimator: the predicted weights and mean and β·λ_min (the theorem needs > 1/2)."""
    lines = []
    for r in tables["results"].drop_duplicates(["estimator", "G"]).to_dict(orient="records"):
        w = ", ".join(f"{v:.4g}" for v in r["weights"])
        lines.append(
            f"{r['estimator']}, G={r['G']}: weights [{w}]  "
            f"predicted mean {r['predicted_mean']:.4g}  "
            f"(rank {r['rank']}, beta*lambda_min {r['beta'] * r['lambda_min']:.3g})"
        )
    for r in tables["results"].to_dict(orient="records"):
        if isinstance(r.get("ks_note"), str) and r["ks_note"]:  # NaN KS p: say why
            lines.append(f"{r['estimator']}, G={r['G']}, n={r['n']}: KS p = nan: {r['ks_note']}")
    return "\n".join(lines)


def figures(tables: dict) -> dict:
    """QQ and ECDF (at the first G); with several G and the oracle, the rate figure."""
    found = {"chi2_qq.png": plots.qq_figure, "chi2_ecdf.png": plots.ecdf_figure}
    df = tables["results"]
    if df["G"].nunique() > 1 and "oracle" in set(df["estimator"]) and df["estimator"].nunique() > 1:
        found["chi2_rate.png"] = plots.rate_figure
    return found
