"""SGD on the Gaussian testbed and the weighted-χ² limit of n·Δ ([U] arXiv 2603.01162, Thm 8).

Each seed runs SGD ascent θ_{i+1} = θ_i + (β/i) ĝ_i, i = 1, …, n_max, from θ_0, with the shared
estimators (:func:`gpolab.estimators.advantages` → :func:`~gpolab.estimators.policy_gradient`) on
B prompts × G responses of :mod:`gpolab.envs.gaussian`, and records n·Δ(θ_n) at every checkpoint
n.  The step size β/i does not depend on n, so the checkpoints of one trajectory *are* the runs of
length n.  Seeds are ``jit(vmap(per_seed))`` through :func:`gpolab.engine.per_seed` (seed i uses
``fold_in(key, i)``), steps a ``lax.scan`` per checkpoint segment.

:func:`run` compares the empirical n·Δ with the prediction of :mod:`gpolab.theory.chi2`: mean with
a 95% CI, and a Kolmogorov–Smirnov test against the Imhof CDF.
"""

from __future__ import annotations

import dataclasses
import math
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from gpolab import engine, estimators, validate
from gpolab.envs import gaussian
from gpolab.theory import chi2 as theory

__all__ = [
    "Chi2Config",
    "Chi2Cell",
    "Chi2Args",
    "Chi2Result",
    "validate_config",
    "make_env",
    "initial_theta",
    "sgd_step",
    "per_seed",
    "simulate",
    "predict",
    "compare",
    "run",
]


@dataclasses.dataclass(frozen=True)
class Chi2Config:
    """Every setting of a ``gpolab chi2`` run (the single source of defaults).

    The defaults were chosen so the whole run (five estimators, 4,096 seeds, n up to 10⁴) takes
    about a minute on 2 CPU cores, with β λ_min(Λ_M) ∈ [0.75, 2.9] across estimators.
    """

    estimators: tuple[str, ...] = theory.CHI2_ESTIMATORS
    B: int = 4
    G: int = 8
    beta: float = 3.0
    seeds: int = 4096
    steps: tuple[int, ...] = (100, 1000, 10_000)
    prompts: int = 4
    dim: int = 3
    rank: int | None = None
    env_seed: int = 0
    seed: int = 0
    init: float = 0.3  # ‖θ_0 − θ*‖, along a fixed direction in the identifiable subspace
    eps: float = 1e-4  # grpo: A = (Z − Z̄)/(std + eps)
    ddof: int = 1  # grpo: std with ddof
    mc_groups: int = 2**19  # grpo theory: Monte Carlo groups per prompt (SE ≈ 0.1%)
    chunk: int = 4096


def validate_config(cfg: Chi2Config) -> None:
    """Plain-Python checks (ConfigError naming the field) before anything is traced."""
    if not cfg.estimators:
        raise validate.ConfigError(
            f"estimator: got an empty list; allowed: {', '.join(theory.CHI2_ESTIMATORS)} or all"
        )
    for name in cfg.estimators:
        validate.choice("estimator", name, theory.CHI2_ESTIMATORS)
        estimators.check_estimator(name, cfg.G, ddof=cfg.ddof, eps=cfg.eps)
    validate.integer("B", cfg.B, 1)
    validate.integer("G", cfg.G, 2)
    validate.real("beta", cfg.beta, low=0.0, open_low=True)
    validate.integer("seeds", cfg.seeds, 2)
    validate.integers("steps", cfg.steps, 1)
    if list(cfg.steps) != sorted(set(cfg.steps)):
        raise validate.ConfigError(f"steps: got {cfg.steps}; allowed: strictly increasing integers")
    validate.integer("prompts", cfg.prompts, 1)
    validate.integer("dim", cfg.dim, 1)
    if cfg.rank is not None:
        validate.integer("rank", cfg.rank, 1, cfg.dim)
    validate.integer("prompts", cfg.prompts, cfg.dim if cfg.rank is None else cfg.rank)
    validate.real("init", cfg.init, low=0.0)
    validate.integer("mc_groups", cfg.mc_groups, 1024)
    validate.integer("chunk", cfg.chunk, 1)


def make_env(cfg: Chi2Config) -> gaussian.GaussianParams:
    return gaussian.make(cfg.env_seed, prompts=cfg.prompts, dim=cfg.dim, rank=cfg.rank)


def initial_theta(params: gaussian.GaussianParams, init: float, seed: int = 0) -> np.ndarray:
    """θ_0 = θ* + init · u, u a fixed unit vector in the identifiable subspace (float64)."""
    theta_star = gaussian.optimum(params)
    phi = np.asarray(params.phi, np.float64)
    _, sv, vt = np.linalg.svd(phi, full_matrices=False)
    basis = vt[sv > 1e-8 * sv[0]]
    u = np.random.default_rng(seed).normal(size=basis.shape[0]) @ basis
    return theta_star + init * u / np.linalg.norm(u)


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


def sgd_step(cell: Chi2Cell, key: jax.Array, args: Chi2Args, theta: jax.Array, i) -> jax.Array:
    """θ + (β/i) ĝ, ĝ = (1/B) Σ_b (1/G) Σ_g A_bg W_bg with the shared estimator ``cell.estimator``.

    The oracle baseline is the exact V_x(θ) at the current θ.
    """
    k_prompt, k_resp = jax.random.split(key)
    prompts = gaussian.sample_prompts(k_prompt, args.params, cell.B)
    _, rewards, scores = gaussian.sample(k_resp, args.params, theta, prompts, cell.G)
    baseline = gaussian.value(args.params, theta)[prompts]
    adv = estimators.advantages(
        cell.estimator, rewards, baseline=baseline, scale="group", ddof=cell.ddof, eps=args.eps
    )
    grad = jnp.mean(estimators.policy_gradient(adv, scores), axis=0)
    return theta + (args.beta / i) * grad


def per_seed(cell: Chi2Cell, key: jax.Array, args: Chi2Args) -> dict:
    """One SGD trajectory: ``scaled_gap`` (len(steps),) = n·Δ(θ_n) at each checkpoint n.

    Step i draws with ``fold_in(key, i)``; each checkpoint segment is one ``lax.scan``.
    """

    def body(theta, i):
        return sgd_step(cell, jax.random.fold_in(key, i), args, theta, i.astype(theta.dtype)), None

    theta, start, out = args.theta0, 0, []
    for n in cell.steps:
        theta, _ = jax.lax.scan(body, theta, jnp.arange(start + 1, n + 1, dtype=jnp.uint32))
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
    parts = []
    for start in range(0, seeds, chunk):
        idx = np.arange(start, start + chunk, dtype=np.uint32)
        out = engine.per_seed(per_seed, cell, key, args, idx, mesh=mesh)
        parts.append(np.asarray(out["scaled_gap"], np.float64)[: seeds - start])
    return np.concatenate(parts)


def predict(key: jax.Array, cfg: Chi2Config, params, estimator: str) -> theory.LimitLaw:
    """Theorem 8's law for one estimator; ConfigError if β λ_min(Λ_M) ≤ 1/2."""
    return theory.estimator_law(
        key,
        params,
        estimator,
        cfg.B,
        cfg.G,
        cfg.beta,
        ddof=cfg.ddof,
        eps=cfg.eps,
        n_groups=cfg.mc_groups,
    )


@dataclasses.dataclass(frozen=True)
class Chi2Result:
    """Predicted vs empirical law of n·Δ(θ_n) for one estimator at one n."""

    estimator: str
    n: int
    B: int
    G: int
    beta: float
    seeds: int
    rank: int
    lambda_min: float  # of Λ_M (β·this > 1/2)
    weights: list[float]
    predicted_mean: float
    empirical_mean: float
    ci_low: float
    ci_high: float
    ks_stat: float
    ks_pvalue: float
    seconds: float

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def compare(samples: np.ndarray, law: theory.WeightedChi2) -> dict:
    """Mean with a normal 95% CI and the KS test of ``samples`` against ``law.cdf``."""
    from scipy import stats

    n = samples.size
    mean = float(np.mean(samples))
    half = engine.Z95 * float(np.std(samples, ddof=1)) / math.sqrt(n)
    ks = stats.kstest(samples, law.cdf)
    return dict(
        empirical_mean=mean,
        ci_low=mean - half,
        ci_high=mean + half,
        ks_stat=float(ks.statistic),
        ks_pvalue=float(ks.pvalue),
    )


def run(cfg: Chi2Config, key: jax.Array | None = None, mesh=None, on_result=None):
    """Predict and simulate every estimator of ``cfg`` (seeds sharded over ``mesh`` if given).

    Returns ``(results, samples, laws)``: a list of :class:`Chi2Result` (estimator-major, then n),
    ``samples[estimator]`` the (seeds, len(steps)) n·Δ array and ``laws[estimator]`` a
    ``(LimitLaw, WeightedChi2)`` pair.  ``on_result`` is called with each result as it is ready.
    Each estimator's runs use their own key (``fold_in`` of its index), so the KS tests of
    different estimators are independent.
    """
    validate_config(cfg)
    key = jax.random.key(cfg.seed) if key is None else key
    k_theory, k_sim = jax.random.split(key)
    params = make_env(cfg)
    theta0 = initial_theta(params, cfg.init, cfg.env_seed)
    # every closed-form law first: a bad β fails before any Monte Carlo or tracing
    laws = {}
    for name in sorted(cfg.estimators, key=lambda e: e == "grpo"):
        t0 = time.perf_counter()
        law = predict(jax.random.fold_in(k_theory, 0), cfg, params, name)
        laws[name] = (law, theory.WeightedChi2(law.weights), time.perf_counter() - t0)
    args = Chi2Args(
        params=params,
        theta0=jnp.asarray(theta0, params.phi.dtype),
        beta=jnp.asarray(cfg.beta, params.phi.dtype),
        eps=jnp.asarray(cfg.eps, params.phi.dtype),
    )
    results, samples = [], {}
    for name in cfg.estimators:
        law, dist, t_theory = laws[name]
        t0 = time.perf_counter()
        cell = Chi2Cell(name, cfg.B, cfg.G, tuple(cfg.steps), cfg.ddof)
        k_est = jax.random.fold_in(k_sim, theory.CHI2_ESTIMATORS.index(name))
        samples[name] = simulate(k_est, cell, args, cfg.seeds, cfg.chunk, mesh)
        seconds = time.perf_counter() - t0 + t_theory
        for j, n in enumerate(cfg.steps):
            res = Chi2Result(
                estimator=name,
                n=int(n),
                B=cfg.B,
                G=cfg.G,
                beta=float(cfg.beta),
                seeds=cfg.seeds,
                rank=law.rank,
                lambda_min=law.lambda_min,
                weights=[float(w) for w in law.weights],
                predicted_mean=law.mean,
                **compare(samples[name][:, j], dist),
                seconds=seconds,
            )
            results.append(res)
            if on_result is not None:
                on_result(res)
    return results, samples, {k: v[:2] for k, v in laws.items()}
