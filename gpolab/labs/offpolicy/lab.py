"""The off-policy lab (``gpolab offpolicy``): the practical GRPO update — minibatch reuse,
importance ratios, clipping, KL penalties and stale rollouts — against the exact gradient.

Theory §13 and [U] arXiv 2603.01162 Appendix A (Algorithm 2, Thm 12).  One seed:

1. a rollout batch of ``m`` minibatches (B prompts × G responses each) is drawn at θ_old;
2. staleness k: the trainer has moved on k updates since (k SGD steps of size η at θ_old with
   fresh on-policy minibatches of the same size and rule);
3. the m minibatches are used in turn (Algorithm 2, lines 8–10): update j is the rule's gradient
   at the current θ (after k + j steps) with ratios against θ_old, then θ ← θ + η ĝ_j.

Every update j is compared with the exact gradient at the θ where it is applied: g(θ) = ∇J(θ)
(the plain objective) and g†(θ) = Σ_x f_x ∇V_x(θ)/σ_x(θ_old) ([U]'s target with the population
std; with a KL term both subtract κ ∇KL(π_θ‖π_ref), gpolab's reading, see docs/papers.md
note 17), exactly from the env.  The update's error e = ĝ − target over seeds gives bias²
(‖E e‖², unbiased), variance (tr Cov ĝ), MSE, cos and a scale-free snr = ‖E ĝ‖²/tr Cov ĝ.
Standard errors come from ``SPLITS`` independent batches of the seeds.

Tables: ``updates`` (one row per single update: rule, η, k, j), ``results`` (one row per
(rule, η, k, m): the m updates of an epoch averaged — what a run with m minibatches per rollout
batch does), ``scaling`` (Thm 12: the slope of bias² in η at the largest m and in the update's
lag k + j, with standard errors) and ``safe_reuse`` (the largest m and k whose MSE stays within
10% of on-policy).  All rules of one policy share draws (common random numbers), and all η, k
and m of a rule share them too: differences between rows are paired.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
import time
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from flax import struct

from gpolab import configs, engine, envs, estimators, validate
from gpolab.configs import option
from gpolab.envs import arithmetic, bandit, markov
from gpolab.estimators import mismatch as corrections
from gpolab.estimators import offpolicy as rules
from gpolab.labs.offpolicy import mismatch, plots
from gpolab.runner.labs import table_text
from gpolab.runner.store import PROVENANCE, cell_key, config_hash, resume
from gpolab.theory import exact

NAME = "offpolicy"
TABLES = ("results", "updates", "scaling", "safe_reuse", "decision")
# the envs with per-token log-probs, bandit first (its flags and choices lead); those whose env
# also has a sampler's version of π_θ (``behaviour``) measure the rollout–training mismatch
# (:mod:`gpolab.labs.offpolicy.mismatch`), the others minibatch reuse and staleness
INSTANCES = envs.instances(*envs.names("token_logp", first="bandit"))
MISMATCH_ENVS = envs.names("token_logp", "behaviour")
REUSE_ENVS = tuple(e for e in INSTANCES if e not in MISMATCH_ENVS)
REUSE = {"env": REUSE_ENVS}  # ``when`` of the reuse grid's fields
MISMATCH = {"env": MISMATCH_ENVS}
SPLITS = 8  # independent seed batches: the standard errors of bias² and of epoch averages
SAFE = 1.10  # "safe reuse": MSE within 10% of the on-policy update's
SCHEMA = 4  # 4: dual is ppo's symmetric clip plus the floor; KL columns in the lab's metric
# the rules that read their authors' own clip settings (``_eps``), not the lab's eps_low/eps_high
OWN_EPS = {"gspo": ("gspo_eps_low", "gspo_eps_high"), "cispo": ("cispo_eps_low", "cispo_eps_high")}
KL_ESTIMATORS = tuple(k for k in rules.KLS if k != "none")
JSON = tuple(
    dict.fromkeys(
        (
            "env",
            "policy",
            "advantage",
            "ratio",
            "clip",
            "eps_low",
            "eps_high",
            "clip_c",
            "kl",
            "kappa",
            "G",
            "B",
            "m",
            "eta",
            "staleness",
            "bias_sq",
            "bias_sq_se",
            "variance",
            "mse",
            "mse_se",
            "mse_fresh",
            "excess_mse",
            "excess_mse_se",
            "scaled_mse",
            "excess_scaled",
            "excess_scaled_se",
            "best_scale",
            "cos",
            "snr",
            "target",
            "bias_sq_g",
            "mse_g",
            "bias_sq_dagger",
            "mse_dagger",
            "bias_sq_paired",
            "bias_sq_paired_se",
            "clip_frac",
            "kl_bias_sq",
            "kl_bias_sq_se",
            "kl_mse",
            "kl_grad_sq",
            "theory_mse_g",
            "theory",
            "n_seeds",
            *mismatch.JSON,
        )
    )
)


@dataclasses.dataclass(frozen=True, init=False)
class Config(configs.Config):
    """The off-policy grid and ``instance``, the env's own settings (flags name its fields flat:
    ``--prompts 8``; in a file its subtable ``[offpolicy.bandit]``).  Tuples are grids."""

    LAB: ClassVar[str] = NAME
    QUICK: ClassVar[dict] = {"seeds": 1024, "eta": (16.0, 64.0), "staleness": (0, 2)}
    INSTANCES: ClassVar[tuple] = ("env", INSTANCES)
    # the arithmetic surrogate's gradient is larger (its θ are network weights): smaller steps
    MODES: ClassVar[dict] = {
        ("env", "arithmetic"): {
            "defaults": {"eta": (0.125, 0.25, 0.5, 1.0), "seeds": 1024},
            "quick": {"seeds": 128, "eta": (0.25, 1.0), "staleness": (0,), "m": (1, 2, 4)},
        },
        **{("env", e): {"defaults": {"G": 4}, "quick": {"seeds": 512}} for e in MISMATCH_ENVS},
    }

    env: str = option(
        "bandit",
        "bandit (softmax bandit, one-token responses: token = sequence "
        "= sis), arithmetic (token sequences: the ratio rules differ) or markov (responses of T "
        "tokens from a rollout engine whose policy differs from the trainer's: the "
        "rollout-training mismatch and each framework's correction)",
    )
    advantages: tuple[str, ...] = option(
        ("loo",),
        "comma list of advantage estimators (reward-only registry names, e.g. loo, "
        "grpo, rloo): the weight c_g = A_g/G of each response",
        when=REUSE,
    )
    ratio: tuple[str, ...] = option(
        tuple(rules.RATIOS), "comma list of ratio rules: " + ", ".join(rules.RATIOS), when=REUSE
    )
    clip: tuple[str, ...] = option(
        ("none", "ppo"),
        "comma list of clip modes for the token and "
        "sequence ratios: none, ppo (eps_low both sides), higher "
        "(eps_low, eps_high), dual (ppo, eps_low both sides, and the "
        "floor clip_c*A for A < 0: verl's vanilla loss at its "
        "defaults; sequence/dual is gpolab's extension)",
        when=REUSE,
    )
    eps_low: float = option(
        0.2, "PPO clip epsilon (clip_ratio_low / epsilon; cispo-two-sided's lower)", when=REUSE
    )
    eps_high: float = option(
        0.28, "upper clip epsilon of clip-higher and cispo-two-sided (DAPO 0.28)", when=REUSE
    )
    gspo_eps_low: float = option(
        rules.GSPO_EPS[0],
        "gspo's clip_ratio_low (verl's GSPO scripts and the GSPO paper: 3e-4)",
        when={**REUSE, "ratio": ("gspo",)},
    )
    gspo_eps_high: float = option(
        rules.GSPO_EPS[1],
        "gspo's clip_ratio_high (verl's GSPO scripts and the GSPO paper: 4e-4)",
        when={**REUSE, "ratio": ("gspo",)},
    )
    cispo_eps_low: float = option(
        rules.CISPO_EPS[0],
        "cispo's clip_ratio_low (verl's CISPO recipe: 10, no lower clamp)",
        when={**REUSE, "ratio": ("cispo",)},
    )
    cispo_eps_high: float = option(
        rules.CISPO_EPS[1],
        "cispo's clip_ratio_high (verl's CISPO recipe: 0.2; TRL's recommended absolute cap "
        "epsilon_high 5.0 is 4.0 here)",
        when={**REUSE, "ratio": ("cispo",)},
    )
    clip_c: float = option(3.0, "dual-clip floor c > 1 (verl clip_ratio_c)", when=REUSE)
    kl: tuple[str, ...] = option(
        ("none",),
        "comma list of KL estimators in the loss: none, k1, "
        "k2, k3 (needs an env with exact KL: bandit)",
        when=REUSE,
    )
    kappa: tuple[float, ...] = option(
        (0.1,),
        "comma list of KL coefficients (rows with a KL estimator)",
        when={"kl": KL_ESTIMATORS},
    )
    ref_scale: float = option(
        0.5,
        "the reference policy: theta_ref = theta_old + ref_scale * z, z ~ N(0, I) (seed: seed + 1)",
        when=REUSE,
    )
    G: int = option(8, "group size")
    eta: tuple[float, ...] = option(
        (16.0, 64.0, 256.0),
        "comma list of SGD step sizes (the "
        "default bandit's gradient is small: 16 moves a logit ~0.1 "
        "per step)",
        when=REUSE,
    )
    m: tuple[int, ...] = option(
        (1, 2, 4, 8), "comma list of minibatch updates per rollout batch", when=REUSE
    )
    staleness: tuple[int, ...] = option(
        (0, 2, 8),
        "comma list of policy versions the rollouts are behind (async trainers)",
        when=REUSE,
    )
    T: tuple[int, ...] = option(
        (16, 64, 256),
        "comma list of response lengths (markov: one instance per T, its length replaced)",
        when=MISMATCH,
    )
    mismatch: tuple[str, ...] = option(
        ("noise:0.05", "noise:0.2"),
        "comma list of the rollout engine's mismatch as KIND:SIZE: noise:S (fixed log-prob "
        "noise of scale S), temperature:TAU, bf16:OFFSET (logits rounded to bfloat16)",
        when=MISMATCH,
    )
    correction: tuple[str, ...] = option(
        tuple(corrections.REGISTRY),
        "comma list of mismatch corrections (registry names, NAME[key=value,...] for other "
        "thresholds): " + ", ".join(corrections.REGISTRY),
        when=MISMATCH,
    )
    from_config: str = option(
        "",
        "a TRL GRPOConfig (JSON/YAML) or verl config (YAML): adds the correction it runs, "
        "with its thresholds, as the rows marked yours",
        when=MISMATCH,
        key=False,
    )
    seeds: int = option(4096, f"Monte Carlo seeds per cell ({SPLITS} independent batches)")
    chunk: int = option(
        0, "seeds per compiled chunk (0: automatic; results do not depend on it)", key=False
    )
    seed: int = option(0, "master PRNG seed")
    out: str = option(
        "results/offpolicy", "output folder (tables, config.toml, figures)", key=False
    )
    instance: bandit.Instance | arithmetic.Instance | markov.Instance = option(
        None, "the env's settings (default: the env's defaults)"
    )

    def __init__(self, **kw) -> None:
        configs.init(self, kw)

    def validate(self) -> None:
        """Plain-Python checks before anything is traced (each names the field)."""
        validate.choice("env", self.env, tuple(INSTANCES))
        self.instance.validate()
        env = envs.get(self.env)
        validate.integer("G", self.G, 2)
        validate.group_sizes("G", self.G)
        validate.seeds("seeds", self.seeds, 2 * SPLITS)
        validate.integer("chunk", self.chunk, 0)
        validate.integer("seed", self.seed, 0)
        if self.env in MISMATCH_ENVS:
            mismatch.check(self)
            return
        if not self.advantages:
            raise validate.ConfigError("advantages: got an empty list; allowed: registry names")
        for spec in self.advantages:
            estimators.check_estimator(spec, self.G, field="G")
            entry = estimators.resolve(spec)
            if entry.needs or entry.scope_of(estimators.bind(spec)[1]) != "group":
                raise validate.ConfigError(
                    f"advantages: got {spec!r}; allowed: group-scoped estimators of the rewards "
                    "alone (loo, grpo, rloo, ...)"
                )
        _nonempty("ratio", self.ratio)
        for r in self.ratio:
            validate.choice("ratio", r, tuple(rules.RATIOS))
        _nonempty("clip", self.clip)
        for c in self.clip:
            validate.choice("clip", c, rules.CLIPS)
        validate.real("eps_low", self.eps_low, low=0.0, high=1.0, open_low=True)
        if self.eps_low >= 1:
            raise validate.ConfigError(f"eps_low: got {self.eps_low!r}; allowed: (0, 1)")
        validate.real("eps_high", self.eps_high, low=0.0, open_low=True)
        for field in sum(OWN_EPS.values(), ()):
            validate.real(field, getattr(self, field), low=0.0, open_low=True)
        validate.real("clip_c", self.clip_c, low=1.0, open_low=True)
        _nonempty("kl", self.kl)
        for k in self.kl:
            validate.choice("kl", k, tuple(rules.KLS))
        if any(k != "none" for k in self.kl):
            if env.kl is None:
                raise validate.ConfigError(
                    f"kl: got {','.join(self.kl)}; the {self.env} env has no exact KL (its "
                    "answers are not enumerated); allowed: none (or env = bandit)"
                )
            _nonempty("kappa", self.kappa)
            for k in self.kappa:
                validate.real("kappa", k, low=0.0)
        validate.real("ref_scale", self.ref_scale, low=0.0)
        _nonempty("eta", self.eta)
        for e in self.eta:
            validate.real("eta", e, low=0.0, open_low=True)
        validate.integers("m", self.m, 1)
        validate.at_most("m", self.m, 256, "the updates of an epoch are unrolled per seed")
        validate.integers("staleness", self.staleness, 0)
        validate.at_most("staleness", self.staleness, 256, "stale steps are unrolled per seed")
        batch_size(self)  # B >= 1 where the env needs it


def _nonempty(field: str, values) -> None:
    if len(values) == 0:
        raise validate.ConfigError(f"{field}: got an empty list; allowed: one or more values")


def batch_size(cfg: Config) -> int:
    """Prompts per minibatch: the bandit's ``B`` (0: every prompt once, weighted by f, as the
    sweep's B = 0; tabular only) or the arithmetic surrogate's ``per_seed``."""
    inst = cfg.instance
    if cfg.env == "arithmetic":
        return inst.per_seed
    if inst.B == 0 and inst.kind != "tabular":
        raise validate.ConfigError(
            "B: got 0; allowed with kind = loglinear: B >= 1 (iid prompts per minibatch)"
        )
    if inst.lengths != "one" or inst.dynamic_sampling:
        raise validate.ConfigError(
            "lengths/dynamic_sampling: allowed in offpolicy: lengths = one, no dynamic sampling"
        )
    return inst.B


def contexts(cfg: Config) -> tuple:
    """The policies measured: the arithmetic surrogate's ``policy`` list, or the one bandit."""
    return tuple(cfg.instance.policy) if cfg.env == "arithmetic" else ("",)


def rule_ids(cfg: Config) -> list[dict]:
    """Every (advantage, ratio, clip, kl, kappa) of the grid, clip only where the ratio takes it
    (others get their one mode) and kappa only with a KL estimator (0 without)."""
    out = []
    for adv in cfg.advantages:
        for ratio in cfg.ratio:
            takes = rules.rule_clips(ratio)
            clips = [c for c in cfg.clip if c in takes] if len(takes) > 1 else list(takes)
            for clip in dict.fromkeys(clips):
                for kl in cfg.kl:
                    for kappa in cfg.kappa if kl != "none" else (0.0,):
                        out.append(
                            dict(advantage=adv, ratio=ratio, clip=clip, kl=kl, kappa=float(kappa))
                        )
    return out


def units(cfg: Config) -> list[dict]:
    """One unit of work per (policy, rule): every η, k, m of it in one engine run (the mismatch
    mode: per (T, mismatch, correction))."""
    if cfg.env in MISMATCH_ENVS:
        return mismatch.units(cfg)
    return [{"policy": p, **r} for p in contexts(cfg) for r in rule_ids(cfg)]


def cells(cfg: Config) -> int:
    return len(units(cfg))


def settings(cfg: Config) -> dict:
    """Every setting the numbers depend on besides the unit's own (its store key)."""
    unit_fields = ("advantages", "ratio", "clip", "kl", "kappa", "T", "mismatch", "correction")
    return configs.key_settings(cfg, exclude=unit_fields + sum(OWN_EPS.values(), ()))


def cell_keys(cfg: Config) -> list[str]:
    """One store key per unit; a rule with its own clip settings (``OWN_EPS``) carries them in
    its unit, so changing them moves only its cells."""
    common = settings(cfg)
    schema = f"mismatch-{mismatch.SCHEMA}" if cfg.env in MISMATCH_ENVS else SCHEMA
    return [
        cell_key(NAME, schema=schema, unit=_own_eps(cfg, u), settings=common) for u in units(cfg)
    ]


def _own_eps(cfg: Config, unit: dict) -> dict:
    """``unit`` with its rule's own clip settings (rules in ``OWN_EPS``), else as it is."""
    if unit.get("ratio") not in OWN_EPS:
        return unit
    return {**unit, "eps": list(_eps(unit, cfg))}


# ---------------------------------------------------------------- one seed
#
# How a knob reaches the numbers: the grid's η, eps_low, eps_high, clip_c and κ become the traced
# ``args`` of :func:`inputs`; :func:`per_seed` maps :func:`at_step_size` over the η of ``args``
# (stale steps :func:`stale_thetas` and the epoch's updates :func:`update` both move θ by η ĝ)
# and hands the clip knobs and κ to :func:`surrogate` in :class:`Knobs`; :func:`unit_rows` turns
# the (E, K, m) outputs into rows.  Shapes and the rule are the static :class:`Cell`.


@dataclasses.dataclass(frozen=True)
class Cell:
    """Static settings of one engine run (shapes and the rule; continuous knobs are traced)."""

    env: str
    advantage: str
    ratio: str
    clip: str
    kl: str
    G: int
    B: int  # 0: every prompt once (bandit)
    m: int  # the most minibatches of any row (rows with fewer use the first updates)
    staleness: tuple[int, ...]
    prompts: int  # P (B = 0 draws every prompt)
    dagger: bool = False  # the main target is g† (std-normalized advantages), else g


@struct.dataclass
class Knobs:
    """A rule's continuous knobs, traced scalars (sweeping them does not recompile)."""

    eps_low: jax.Array  # PPO clip epsilon (both sides for ppo and dual)
    eps_high: jax.Array  # upper clip epsilon of clip-higher and cispo
    clip_c: jax.Array  # dual-clip floor c
    kappa: jax.Array  # KL coefficient κ


@struct.dataclass
class Start:
    """What every update of one seed reads and none changes: the env (static), its params, θ_old
    (D,) where the rollouts are drawn, θ_ref (D,), the prompt weights f (P,) and reward std σ_old
    (P,) at θ_old, the lab's metric ((D,), or 1.0 with iid prompts; :func:`_metric`) and the
    rule's :class:`Knobs`."""

    env: Any = struct.field(pytree_node=False)
    params: Any
    theta_old: jax.Array
    theta_ref: jax.Array
    f: jax.Array
    sigma_old: jax.Array
    metric: Any
    knobs: Knobs


def per_seed(cell: Cell, key: jax.Array, args: tuple) -> dict:
    """Errors of every update (η, k, j) of one seed; see the module docstring.  The engine's
    kernel (``fn(cell, key, args)``): ``jit(vmap)`` over seeds, ``cell`` static.

    Args:
      cell: static shapes and rule.
      key: this seed's PRNG key, split once into the rollout batch's, the stale steps' and the
        fresh comparators' keys.
      args: (params, θ_old (D,), θ_ref (D,), σ_old (P,), etas (E,), eps_low, eps_high, clip_c, κ),
        every continuous knob traced (:func:`inputs`).

    Returns:
      dict of (E, K, m, ...) arrays, K = ``len(cell.staleness)``: per update the errors
      ``e_*`` (D,) and their squared norms, ĝ, the fresh comparator's and the scale-free sums,
      the clipped fraction and mean |log ratio| (see :func:`update`).
    """
    params, theta_old, theta_ref, sigma_old, etas, eps_low, eps_high, clip_c, kappa = args
    knobs = Knobs(eps_low, eps_high, clip_c, kappa)
    env = envs.get(cell.env)
    k_roll, k_stale, k_fresh = jax.random.split(key, 3)
    f, _ = env.values(params, theta_old)
    s = Start(env, params, theta_old, theta_ref, f, sigma_old, _metric(cell, f, theta_old), knobs)
    draw_old = functools.partial(draw, cell=cell, s=s, theta=theta_old)
    rollout = jax.vmap(draw_old)(jax.random.split(k_roll, cell.m))  # the m minibatches at θ_old
    per_eta = functools.partial(at_step_size, k_stale, k_fresh, cell, s, rollout)
    return jax.vmap(per_eta)(etas)  # every output (E, K, m, ...)


def at_step_size(k_stale, k_fresh, cell: Cell, s: Start, rollout: tuple, eta) -> dict:
    """Every update of step size η: the epoch from each stale θ_k; outputs (K, m, ...)."""
    epoch_from = functools.partial(epoch, k_fresh, cell, s, rollout, eta)
    return jax.vmap(epoch_from)(stale_thetas(k_stale, cell, s, eta))


def stale_thetas(key, cell: Cell, s: Start, eta) -> jax.Array:
    """(K, D) θ after k on-policy steps of size η from θ_old, for every k of the staleness grid
    (step i draws its fresh minibatch with ``fold_in(key, i)``)."""
    kmax = max(cell.staleness)
    if kmax == 0:
        return jnp.broadcast_to(s.theta_old, (len(cell.staleness),) + s.theta_old.shape)
    step = functools.partial(_stale_step, key, cell, s, eta)
    _, path = jax.lax.scan(step, s.theta_old, jnp.arange(kmax))
    path = jnp.concatenate([s.theta_old[None], path])
    return path[jnp.asarray(cell.staleness)]


def _stale_step(key, cell: Cell, s: Start, eta, theta, i):
    """One on-policy SGD step θ + η ĝ on a fresh minibatch at θ (scan body: (carry, path))."""
    ghat, _ = rule_grad(cell, s, theta, draw(jax.random.fold_in(key, i), cell, s, theta))
    return theta + eta * ghat, theta + eta * ghat


def epoch(key, cell: Cell, s: Start, rollout: tuple, eta, theta) -> dict:
    """The m minibatches of ``rollout`` used in turn from θ (Algorithm 2, lines 8–10): outputs
    (m, ...) of :func:`update` (update j's comparator draws with ``fold_in(key, j)``)."""
    step = functools.partial(update, key, cell, s, rollout, eta)
    return jax.lax.scan(step, theta, jnp.arange(cell.m))[1]


def update(key, cell: Cell, s: Start, rollout: tuple, eta, theta, j) -> tuple:
    """Update j at θ: (θ + η ĝ_j, its errors).  ĝ_j is the rule's gradient on minibatch j of
    ``rollout`` with ratios against θ_old; it is compared with the exact targets at θ (g, g†),
    with the SIS update on the same minibatch (paired bias) and with a fresh on-policy update at
    θ (drawn with ``fold_in(key, j)``); every error in the lab's metric."""
    b = jax.tree.map(operator.itemgetter(j), rollout)
    ghat, (_, frac, log_ratio) = rule_grad(cell, s, theta, b)
    g, g_dag, g_kl = targets(cell, s, theta)
    metric = s.metric
    e_g, e_d = metric * (ghat - g), metric * (ghat - g_dag)
    # the comparator: an on-policy update at the same θ from a fresh minibatch
    g_fresh, _ = rule_grad(cell, s, theta, draw(jax.random.fold_in(key, j), cell, s, theta))
    pg, out = ghat, {}
    if cell.kl != "none":
        pg, out = _kl_errors(cell, s, theta, b, ghat, g_kl)
    # paired bias: the policy-gradient part minus the SIS update on the same minibatch
    # (SIS is unbiased for g with a baseline independent of the response, e.g. loo)
    g_sis = jax.grad(sis_objective, argnums=2)(cell, s, theta, b)
    e_p = metric * (pg - g_sis)
    # the scale-free comparison (best rescaling of the update) against the main target
    t = g_dag if cell.dagger else g
    mt, mg, mf = (metric * x for x in (t, ghat, g_fresh))
    out |= {
        "e_g": e_g,
        "e_d": e_d,
        "ghat": ghat,
        "e_p": e_p,
        "sq_g": jnp.sum(e_g**2),
        "sq_d": jnp.sum(e_d**2),
        "sq_p": jnp.sum(e_p**2),
        "sq_g2": jnp.sum(e_g**2) ** 2,
        "sq_d2": jnp.sum(e_d**2) ** 2,
        "sq_p2": jnp.sum(e_p**2) ** 2,
        "sq_sis": jnp.sum((metric * g_sis) ** 2),
        "norm2": jnp.sum(ghat**2),
        "fresh": jnp.sum((mf - mt) ** 2),
        "cos": _cos(ghat, t),
        "dot": mg @ mt,
        "n2": mg @ mg,
        "t2": mt @ mt,
        "dot_f": mf @ mt,
        "n2_f": mf @ mf,
        "clip_frac": frac,
        "log_ratio": log_ratio,
    }
    return theta + eta * ghat, out


def _kl_errors(cell: Cell, s: Start, theta, b: tuple, ghat, g_kl) -> tuple:
    """The KL estimator's own gradient on minibatch b against the exact ∇KL: (the update's
    policy-gradient part ĝ + κ ∇k, the KL columns' per-seed terms)."""
    est = jax.grad(kl_term, argnums=2)(cell, s, theta, b)
    e_kl = s.metric * (est - g_kl)  # the metric of bias_sq and mse
    pg = ghat + s.knobs.kappa * est
    return pg, {
        "e_kl": e_kl,
        "sq_kl": jnp.sum(e_kl**2),
        "sq_kl2": jnp.sum(e_kl**2) ** 2,
        "kl_grad_sq": jnp.sum((s.metric * g_kl) ** 2),
    }


def draw(key, cell: Cell, s: Start, theta) -> tuple:
    """One minibatch drawn at θ, with what the rules read of it.

    Args:
      key: PRNG key, split into the prompts' and the responses' keys.
      cell: static G, B (0: every prompt once), advantage estimator and KL estimator.
      s: the seed's fixed inputs.
      theta: (D,) the sampling policy (the ratios' θ_old of this minibatch).

    Returns:
      (prompts (n,), responses (n, G, ...), weights c (n, G), θ's token log-probs (n, G, T),
      θ_ref's (θ's again without a KL term), mask (n, G, T), prompt weights w (n,)).
    """
    k_p, k_y = jax.random.split(key)
    if cell.B == 0:
        prompts = jnp.arange(cell.prompts, dtype=jnp.int32)
    else:
        prompts = s.env.sample_prompts(k_p, s.params, cell.B)
    responses, rewards = s.env.sample(k_y, s.params, theta, prompts, cell.G)
    c = estimators.gradient_weights(cell.advantage, rewards)
    old, mask = s.env.token_logp(s.params, theta, prompts, responses)
    if cell.kl != "none":
        ref = s.env.token_logp(s.params, s.theta_ref, prompts, responses)[0]
    else:
        ref = old
    return (prompts, responses, c, old, ref, mask, _prompt_weights(cell, s.f, prompts))


def _prompt_weights(cell: Cell, f, prompts):
    """(n,) the weight of each minibatch prompt in ĝ: 1/B for iid prompts, f_x for B = 0."""
    return f[prompts] if cell.B == 0 else jnp.full(prompts.shape, 1.0 / cell.B, f.dtype)


def surrogate(cell: Cell, s: Start, theta, batch: tuple) -> tuple:
    """(objective, (KL term, clipped fraction, mean log ratio)): the rule's objective of one
    minibatch at θ, whose gradient is the update (Σ_x w_x [Σ_g Σ_t rule weight · s_t] − κ ∇(KL
    estimate)).  ``batch``: a :func:`draw`."""
    prompts, responses, c, old, ref, mask, w = batch
    k = s.knobs
    logp, _ = s.env.token_logp(s.params, theta, prompts, responses)
    obj, cut = rules.objective(
        cell.ratio, cell.clip, logp, old, c, mask, k.eps_low, k.eps_high, k.clip_c
    )
    pg = jnp.sum(w[:, None, None] * obj)
    kl = jnp.sum(w[:, None, None] * rules.kl_terms(cell.kl, logp, ref, mask)) / cell.G
    frac = jnp.sum(cut) / jnp.maximum(jnp.sum(mask), 1.0)
    log_ratio = jnp.sum(jnp.abs(logp - old) * mask) / jnp.maximum(jnp.sum(mask), 1.0)
    return pg - k.kappa * kl, (kl, frac, log_ratio)


def rule_grad(cell: Cell, s: Start, theta, batch: tuple) -> tuple:
    """(ĝ (D,), (KL term, clipped fraction, mean log ratio)): the rule's update direction."""
    return jax.grad(surrogate, argnums=2, has_aux=True)(cell, s, theta, batch)


def kl_term(cell: Cell, s: Start, theta, batch: tuple):
    """The KL estimate of the minibatch (its gradient is the KL estimator's own)."""
    return surrogate(cell, s, theta, batch)[1][0]


def sis_objective(cell: Cell, s: Start, theta, batch: tuple):
    """The sequential-IS policy-gradient objective of a minibatch (the unbiased control)."""
    prompts, responses, c, old, _, mask, w = batch
    k = s.knobs
    logp, _ = s.env.token_logp(s.params, theta, prompts, responses)
    obj, _ = rules.objective("sis", "none", logp, old, c, mask, k.eps_low, k.eps_high, k.clip_c)
    return jnp.sum(w[:, None, None] * obj)


def targets(cell: Cell, s: Start, theta) -> tuple:
    """(g, g†, ∇KL) at θ, exact, each (D,): g = Σ_x f_x ∇V_x, g† = Σ_x f_x ∇V_x / σ_x(θ_old),
    both minus κ ∇KL(π_θ‖π_ref) with a KL term (∇KL = 0 without)."""
    _, vjp = jax.vjp(functools.partial(_values, s), theta)
    (both,) = jax.vmap(vjp)(jnp.stack([s.f, s.f / s.sigma_old]))
    g, g_dag = both
    if cell.kl == "none":
        return g, g_dag, jnp.zeros_like(g)
    g_kl = jax.grad(s.env.kl, argnums=1)(s.params, theta, s.theta_ref)
    kappa = s.knobs.kappa
    return g - kappa * g_kl, g_dag - kappa * g_kl, g_kl


def _values(s: Start, theta):
    """(P,) the prompts' values V_x(θ)."""
    return s.env.values(s.params, theta)[1]


def _metric(cell: Cell, f, theta):
    """The lab's metric on gradients (every column: bias², MSE, the KL columns): with B = 0 the
    sweep's, prompt x's error weighted √f_x (block x of ĝ − g is f_x (ĝ_x − g_x), so each
    coordinate of x is divided by √f_x); with iid prompts the plain Euclidean norm."""
    if cell.B != 0:
        return 1.0
    return jnp.repeat(1 / jnp.sqrt(f), theta.shape[0] // f.shape[0])


def target(advantage: str) -> str:
    """``g_dagger`` for advantages whose G → ∞ direction is the per-prompt std-normalized one
    ([U]'s g†), else ``g``."""
    entry, options = estimators.bind(advantage)
    return "g_dagger" if entry.limit_for(options) == "std" else "g"


def _cos(a, b):
    n = jnp.linalg.norm(a) * jnp.linalg.norm(b)
    return jnp.where(n > 0, jnp.dot(a, b) / jnp.where(n > 0, n, 1.0), 0.0)


# ---------------------------------------------------------------- a unit: rows


@functools.cache
def _instance(inst):
    """The env's params of every policy of ``inst`` (arithmetic: pre-trained once)."""
    if isinstance(inst, arithmetic.Instance):
        return arithmetic.make(inst)
    return {"": bandit.make(inst)}


@functools.cache
def _setup(cfg: Config, policy: str):
    """(params, θ_old, θ_ref, σ_old) of one policy (built once per run)."""
    env = envs.get(cfg.env)
    params = _instance(cfg.instance)[policy]
    theta_old = env.init(params)
    z = jax.random.normal(jax.random.key(cfg.seed + 1), theta_old.shape, theta_old.dtype)
    theta_ref = theta_old + cfg.ref_scale * z
    _, V = env.values(params, theta_old)
    sigma = jnp.sqrt(V * (1 - V))  # binary rewards
    return params, theta_old, theta_ref, sigma


def inputs(cfg: Config, unit: dict, etas=None) -> tuple:
    """(cell, args) of :func:`per_seed` for one unit (``etas``: the step sizes, default the
    grid's)."""
    params, theta_old, theta_ref, sigma = _setup(cfg, unit["policy"])
    cell = Cell(
        cfg.env,
        unit["advantage"],
        unit["ratio"],
        unit["clip"],
        unit["kl"],
        cfg.G,
        batch_size(cfg),
        max(cfg.m),
        tuple(sorted(set(cfg.staleness))),
        int(sigma.shape[0]),
        target(unit["advantage"]) == "g_dagger",
    )
    dtype = theta_old.dtype
    f32 = lambda x: np.asarray(x, dtype)  # noqa: E731
    args = (
        params,
        theta_old,
        theta_ref,
        sigma,
        f32(cfg.eta if etas is None else etas),
        *(
            f32(getattr(cfg, k) if e is None else e)
            for k, e in zip(EPS, _eps(unit, cfg), strict=True)
        ),
        f32(cfg.clip_c),
        f32(unit["kappa"]),
    )
    return cell, args


def _moments(cfg: Config, unit: dict, key):
    """One engine run per split: the list of :class:`gpolab.engine.Moments`."""
    cell, args = inputs(cfg, unit)
    sizes = np.diff(np.linspace(0, cfg.seeds, SPLITS + 1).round().astype(int))
    return cell, [
        engine.run(per_seed, cell, args, jax.random.fold_in(key, s), int(n), cfg.chunk)
        for s, n in enumerate(sizes)
    ]


def _bias_var(e_sum, sq_sum, n):
    """(mse, tr Cov, unbiased bias²) from the sums of e and ‖e‖² over n seeds."""
    mse = sq_sum / n
    variance = (mse - np.sum((e_sum / n) ** 2, -1)) * n / (n - 1)
    return mse, variance, mse - variance


def _stats(parts: list, name: str, sq: str, sq2: str):
    """Per (E, K, m) update: pooled mse, variance, bias² (unbiased) and the SEs of mse and bias²
    from the splits' own estimates."""
    N = sum(p.n for p in parts)
    mse, variance, bias = _bias_var(
        sum(p.sums[name] for p in parts), sum(p.sums[sq] for p in parts), N
    )
    split = [_bias_var(p.sums[name], p.sums[sq], p.n) for p in parts]
    sm, sb = np.stack([s[0] for s in split]), np.stack([s[2] for s in split])
    ex2 = sum(p.sums[sq2] for p in parts) / N
    return dict(
        mse=mse,
        variance=variance,
        bias=bias,
        mse_se=np.sqrt(np.maximum(ex2 - mse**2, 0) / N),
        bias_se=sb.std(0, ddof=1) / math.sqrt(len(parts)),
        split_bias=sb,
        split_mse=sm,
    )


PAIRED_ROUNDING = 1e-5  # an RMS paired difference below this share of the SIS update's: rounding


def _paired(sp: dict, sq_p, sq_sis) -> dict:
    """The paired statistics with exact zeros where the rule's update is the SIS update up to
    float rounding: where the paired difference's RMS over the seeds is at most
    ``PAIRED_ROUNDING`` times the SIS update's (float32 rounds each operation to ~1e-7; a rule
    that differs from SIS differs by far more: the token ratio after one step at the smallest η
    of the lab's experiments by ~1e-3), bias², its SE and the splits' bias² are 0."""
    zero = sq_p <= PAIRED_ROUNDING**2 * sq_sis
    out = dict(sp)
    for k in ("bias", "bias_se", "mse", "variance", "split_bias"):
        out[k] = np.where(zero, 0.0, sp[k])
    return out


def unit_rows(cfg: Config, unit: dict, key) -> list[dict]:
    """The ``updates`` and ``results`` rows of one unit (column ``table`` says which)."""
    start = time.perf_counter()
    cell, parts = _moments(cfg, unit, key)
    N = sum(p.n for p in parts)
    mean = lambda k: sum(p.sums[k] for p in parts) / N  # noqa: E731
    sg, sd = _stats(parts, "e_g", "sq_g", "sq_g2"), _stats(parts, "e_d", "sq_d", "sq_d2")
    sp = _paired(_stats(parts, "e_p", "sq_p", "sq_p2"), mean("sq_p"), mean("sq_sis"))
    ghat = mean("ghat")
    signal = np.sum(ghat**2, -1)
    noise = (mean("norm2") - signal) * N / (N - 1)
    snr = np.where(noise > 0, signal / np.where(noise > 0, noise, 1), np.inf)
    cos = mean("cos")  # against the main target
    clip_frac, log_ratio = mean("clip_frac"), mean("log_ratio")
    kls = None
    if cell.kl != "none":
        kls = _stats_kl(parts, N)
    tgt = target(unit["advantage"])
    main = sd if tgt == "g_dagger" else sg
    scaled = _scaled(parts)
    fresh = mean("fresh")  # (E, K, m): MSE of a fresh on-policy update at the same θ
    split_fresh = np.stack([p.sums["fresh"] / p.n for p in parts])
    base = {
        "env": cfg.env,
        "policy": unit["policy"] or None,
        "advantage": unit["advantage"],
        "ratio": unit["ratio"],
        "clip": unit["clip"],
        "eps_low": _eps(unit, cfg)[0],
        "eps_high": _eps(unit, cfg)[1],
        "clip_c": cfg.clip_c if unit["clip"] == "dual" else None,
        "kl": unit["kl"],
        "kappa": unit["kappa"],
        "G": cfg.G,
        "B": cell.B,
        "target": tgt,
        "n_seeds": N,
    }
    stale = cell.staleness
    theory = _theory(cfg, unit, cell)
    rows = []
    for e, eta in enumerate(cfg.eta):
        for ki, k in enumerate(stale):
            for j in range(cell.m):
                idx = (e, ki, j)
                rows.append(
                    {
                        "table": "updates",
                        **base,
                        "eta": float(eta),
                        "staleness": k,
                        "update": j,
                        "lag": k + j,
                        **_one(main, idx),
                        **_named(sg, sd, sp, idx),
                        "cos": float(cos[idx]),
                        "snr": float(snr[idx]),
                        "mse_fresh": float(fresh[idx]),
                        "excess_mse": float(main["mse"][idx] / fresh[idx] - 1),
                        **_scaled_row(scaled, idx),
                        "clip_frac": float(clip_frac[idx]),
                        "log_ratio": float(log_ratio[idx]),
                        **(theory if k == 0 and j == 0 else {}),
                        **(_kl_row(kls, idx) if kls else {}),
                    }
                )
            for mm in sorted(set(cfg.m)):
                sl = (e, ki, slice(0, mm))
                rows.append(
                    {
                        "table": "results",
                        **base,
                        "eta": float(eta),
                        "staleness": k,
                        "m": mm,
                        **_epoch(main, sl),
                        **_epoch_named(sg, sd, sp, sl),
                        "cos": float(np.mean(cos[sl])),
                        "snr": float(np.mean(snr[sl])),
                        **_excess(main, fresh, split_fresh, sl),
                        **_scaled_epoch(scaled, sl),
                        "clip_frac": float(np.mean(clip_frac[sl])),
                        "log_ratio": float(np.mean(log_ratio[sl])),
                        "mse_last": float(main["mse"][(e, ki, mm - 1)]),
                        "bias_sq_last": float(main["bias"][(e, ki, mm - 1)]),
                        **(theory if k == 0 and mm == 1 else {}),
                        **(_kl_epoch(kls, sl) if kls else {}),
                    }
                )
    wall = time.perf_counter() - start
    for r in rows:
        r["seconds"] = wall / len(rows)
        if not math.isfinite(r["mse"]):  # a number that cannot be computed says why
            r["why_nan"] = (
                "non-finite updates on some seeds (ratios overflowed: the policy "
                "left θ_old too far at this step size)"
            )
    return rows


@functools.cache
def _truth(cfg: Config, policy: str):
    params, theta_old, _, _ = _setup(cfg, policy)
    return envs.get(cfg.env).exact(params, theta_old)


def _theory(cfg: Config, unit: dict, cell: Cell) -> dict:
    """The on-policy update's exact MSE against g (:func:`gpolab.theory.exact.theory_columns`:
    closed form or count table) for the rows at θ_old (staleness 0, first update), with no KL
    term; ``theory`` names the formula or why there is none."""
    if unit["kl"] != "none":
        kl = {"kl_theory_bias_sq": _kl_theory(cfg, unit)}
        if unit["kappa"] > 0:
            return {"theory": "none: the KL term is outside the reward-only theory", **kl}
    else:
        kl = {}
    cols = exact.theory_columns(
        _truth(cfg, unit["policy"]),
        unit["advantage"],
        cfg.G,
        cell.B or None,
        1.0 if cfg.env == "bandit" else None,
    )
    return {
        "theory_mse_g": cols["theory_mse"],
        "theory_mse_g_se": cols["theory_mse_se"],
        "theory_bias_sq_g": cols["theory_bias_sq"],
        "theory": cols["theory"],
        **kl,
    }


def _kl_theory(cfg: Config, unit: dict) -> float:
    """The KL estimator's exact on-policy bias² ‖E ∇k − ∇KL(π_θ‖π_ref)‖² at θ_old in the lab's
    metric (:func:`_metric`): theory §13's E∇k1 = 0 and E∇k2 = ∇KL(π_θ‖π_ref) (closed forms);
    E∇k3 (∇KL(π_ref‖π_θ) where verl's clamps do not bind) by enumerating every (prompt, action)
    of the bandit (the one env with an exact KL) with weights f_x π(a|x)."""
    env = envs.get(cfg.env)
    params, theta_old, theta_ref, _ = _setup(cfg, unit["policy"])
    f, _ = env.values(params, theta_old)
    forward = jax.grad(env.kl, argnums=1)(params, theta_old, theta_ref)
    if unit["kl"] in ("k1", "k2"):
        mean = 0.0 * forward if unit["kl"] == "k1" else forward
    else:
        P, A = params.success.shape
        prompts, actions = jnp.repeat(jnp.arange(P), A), jnp.tile(jnp.arange(A), P)[:, None]
        weight = f[prompts] * jnp.exp(
            env.token_logp(params, theta_old, prompts, actions)[0][:, 0, 0]
        )  # constants: the expectation of the gradient, not the gradient of one
        ref = env.token_logp(params, theta_ref, prompts, actions)[0]
        expected = functools.partial(_expected_kl, unit["kl"], env, params, prompts, actions)
        mean = jax.grad(expected)(theta_old, weight, ref)
    cell = Cell(cfg.env, "", "", "", "", cfg.G, batch_size(cfg), 1, (0,), int(f.shape[0]))
    err = _metric(cell, f, theta_old) * (mean - forward)
    return float(np.sum(np.asarray(err, np.float64) ** 2))


def _expected_kl(kl: str, env, params, prompts, actions, theta, weight, ref):
    """Σ weight · k(θ) over the enumerated (prompt, action) pairs: with the weights f_x π(a|x)
    held constant, its gradient is E ∇k."""
    logp, mask = env.token_logp(params, theta, prompts, actions)
    return jnp.sum(weight * rules.kl_terms(kl, logp, ref, mask)[:, 0, 0])


def _excess(main: dict, fresh, split_fresh, sl) -> dict:
    """The epoch's MSE against a fresh on-policy update's at the same θ: ``mse_fresh``,
    ``excess_mse`` = MSE/MSE_fresh − 1 and its SE from the splits (paired: same θ path)."""
    split = main["split_mse"][(slice(None), *sl)].mean(-1) / split_fresh[(slice(None), *sl)].mean(
        -1
    )
    mse, base = float(main["mse"][sl].mean()), float(fresh[sl].mean())
    return {
        "mse_fresh": base,
        "excess_mse": mse / base - 1,
        "excess_mse_se": float(split.std(ddof=1) / math.sqrt(split.shape[0])),
    }


def _scaled(parts: list) -> dict:
    """The relative MSE at the best rescaling of the update, 1 − (E ĝ·t)²/(E‖ĝ‖² E‖t‖²), for
    the rule and for the fresh on-policy update at the same θ: pooled and per split."""
    out = {}
    for name, (dot, n2) in (("rule", ("dot", "n2")), ("fresh", ("dot_f", "n2_f"))):
        N = sum(p.n for p in parts)
        pooled = {k: sum(p.sums[k] for p in parts) for k in (dot, n2, "t2")}
        out[name] = _relative_mse(pooled, N, dot, n2)
        out[name + "_split"] = np.stack([_relative_mse(p.sums, p.n, dot, n2) for p in parts])
    out["best_scale"] = sum(p.sums["dot"] for p in parts) / sum(p.sums["n2"] for p in parts)
    return out


def _relative_mse(sums: dict, n: int, dot: str, n2: str):
    """1 − (E ĝ·t)²/(E‖ĝ‖² E‖t‖²) from the sums over n seeds (``dot``, ``n2``: ĝ's columns)."""
    d, a, t = (sums[k] / n for k in (dot, n2, "t2"))
    return 1 - d**2 / (a * t)


def _scaled_row(s: dict, idx) -> dict:
    return {
        "scaled_mse": float(s["rule"][idx]),
        "scaled_mse_fresh": float(s["fresh"][idx]),
        "excess_scaled": float(s["rule"][idx] / s["fresh"][idx] - 1),
        "best_scale": float(s["best_scale"][idx]),
    }


def _scaled_epoch(s: dict, sl) -> dict:
    """Epoch averages; the excess's SE from the splits' own epoch averages (paired)."""
    split = s["rule_split"][(slice(None), *sl)].mean(-1) / s["fresh_split"][
        (slice(None), *sl)
    ].mean(-1)
    rule, fresh = float(s["rule"][sl].mean()), float(s["fresh"][sl].mean())
    return {
        "scaled_mse": rule,
        "scaled_mse_fresh": fresh,
        "excess_scaled": rule / fresh - 1,
        "excess_scaled_se": float(split.std(ddof=1) / math.sqrt(len(split))),
        "best_scale": float(s["best_scale"][sl].mean()),
    }


EPS = ("eps_low", "eps_high")


def _eps(unit: dict, cfg: Config) -> tuple:
    """The (eps_low, eps_high) a rule reads (None where it reads none): gspo's and cispo's own
    (``OWN_EPS``, their authors' settings by default), else the lab's for its clip mode."""
    if unit["ratio"] in OWN_EPS:
        return tuple(getattr(cfg, k) for k in OWN_EPS[unit["ratio"]])
    clip = unit["clip"]
    if clip in ("ppo", "dual"):
        return cfg.eps_low, cfg.eps_low
    if clip in ("higher", "weight"):
        return cfg.eps_low, cfg.eps_high
    return None, None


def _one(s: dict, idx) -> dict:
    return {
        "bias_sq": float(s["bias"][idx]),
        "bias_sq_se": float(s["bias_se"][idx]),
        "variance": float(s["variance"][idx]),
        "mse": float(s["mse"][idx]),
        "mse_se": float(s["mse_se"][idx]),
    }


def _named(sg: dict, sd: dict, sp: dict, idx) -> dict:
    return {
        "bias_sq_g": float(sg["bias"][idx]),
        "mse_g": float(sg["mse"][idx]),
        "mse_g_se": float(sg["mse_se"][idx]),
        "bias_sq_dagger": float(sd["bias"][idx]),
        "mse_dagger": float(sd["mse"][idx]),
        "mse_dagger_se": float(sd["mse_se"][idx]),
        "bias_sq_paired": float(sp["bias"][idx]),
        "bias_sq_paired_se": float(sp["bias_se"][idx]),
    }


def _epoch(s: dict, sl) -> dict:
    """Averages over the epoch's updates; SEs from the splits' own epoch averages."""
    split_b = s["split_bias"][(slice(None), *sl)].mean(-1)
    split_m = s["split_mse"][(slice(None), *sl)].mean(-1)
    k = math.sqrt(split_b.shape[0])
    return {
        "bias_sq": float(s["bias"][sl].mean()),
        "bias_sq_se": float(split_b.std(ddof=1) / k),
        "variance": float(s["variance"][sl].mean()),
        "mse": float(s["mse"][sl].mean()),
        "mse_se": float(split_m.std(ddof=1) / k),
    }


def _epoch_named(sg: dict, sd: dict, sp: dict, sl) -> dict:
    split_p = sp["split_bias"][(slice(None), *sl)].mean(-1)
    se = {
        n: float(x["split_mse"][(slice(None), *sl)].mean(-1).std(ddof=1) / math.sqrt(len(split_p)))
        for n, x in (("g", sg), ("dagger", sd))
    }
    return {
        "bias_sq_g": float(sg["bias"][sl].mean()),
        "mse_g": float(sg["mse"][sl].mean()),
        "mse_g_se": se["g"],
        "bias_sq_dagger": float(sd["bias"][sl].mean()),
        "mse_dagger": float(sd["mse"][sl].mean()),
        "mse_dagger_se": se["dagger"],
        "bias_sq_paired": float(sp["bias"][sl].mean()),
        "bias_sq_paired_se": float(split_p.std(ddof=1) / math.sqrt(len(split_p))),
    }


def _stats_kl(parts: list, N: int) -> dict:
    """The KL estimator's gradient against ∇KL: bias² (with its SE from the splits), MSE and
    ‖∇KL‖² per update."""
    s = _stats(parts, "e_kl", "sq_kl", "sq_kl2")
    return {**s, "norm": sum(p.sums["kl_grad_sq"] for p in parts) / N}


def _kl_row(k: dict, idx) -> dict:
    return {
        "kl_bias_sq": float(k["bias"][idx]),
        "kl_bias_sq_se": float(k["bias_se"][idx]),
        "kl_mse": float(k["mse"][idx]),
        "kl_grad_sq": float(k["norm"][idx]),
    }


def _kl_epoch(k: dict, sl) -> dict:
    split_b = k["split_bias"][(slice(None), *sl)].mean(-1)
    return {
        "kl_bias_sq": float(k["bias"][sl].mean()),
        "kl_bias_sq_se": float(split_b.std(ddof=1) / math.sqrt(split_b.shape[0])),
        "kl_mse": float(k["mse"][sl].mean()),
        "kl_grad_sq": float(k["norm"][sl].mean()),
    }


# ---------------------------------------------------------------- the lab


def run(cfg: Config, key=None, *, store=None, progress=None) -> dict:
    """``{results, updates, scaling, safe_reuse}``; each (policy, rule) is one unit of work,
    resumed from ``store``.  All units of a policy draw from the same key (paired rules)."""
    cfg.validate()
    key = jax.random.key(cfg.seed) if key is None else key
    todo = units(cfg)
    if cfg.env in MISMATCH_ENVS:
        return _run_mismatch(cfg, key, todo, store, progress)

    def compute(i: int) -> list[dict]:
        unit = todo[i]
        return unit_rows(cfg, unit, engine.cell_key(key, NAME, unit["policy"]))

    df = _resumed(cfg, compute, store, progress)
    results = (
        df[df["table"] == "results"].drop(columns=["table", "update", "lag"]).reset_index(drop=True)
    )
    epoch_only = ["table", "m", "mse_last", "bias_sq_last", "excess_mse_se", "excess_scaled_se"]
    updates = df[df["table"] == "updates"].drop(columns=epoch_only).reset_index(drop=True)
    results, updates = (t.dropna(axis=1, how="all") for t in (results, updates))
    results["m"] = results["m"].astype(int)  # the union of both row kinds made them float
    updates[["update", "lag"]] = updates[["update", "lag"]].astype(int)
    return {
        "results": results,
        "updates": updates,
        "scaling": scaling(updates, results),
        "safe_reuse": safe_reuse(results),
        "decision": pd.DataFrame(),
    }


def _resumed(cfg: Config, compute, store, progress):
    """Every unit's rows, finished ones read from ``store``, provenance columns dropped."""
    df = resume(
        store,
        cell_keys(cfg),
        compute,
        config_hash=config_hash(cfg),
        on_skip=None if progress is None else progress.skip,
        on_unit=None if progress is None else lambda rows: progress.update(1, label(rows[0])),
    )
    return df.drop(columns=[c for c in PROVENANCE if c in df])


def _run_mismatch(cfg: Config, key, todo: list, store, progress) -> dict:
    """The mismatch mode's tables: ``results`` (one row per (T, mismatch, correction)) and
    ``decision`` (:func:`gpolab.labs.offpolicy.mismatch.decision`); the reuse tables are empty."""

    def compute(i: int) -> list[dict]:
        unit = todo[i]
        return mismatch.unit_rows(cfg, unit, engine.cell_key(key, NAME, "mismatch", unit["T"]))

    results = _resumed(cfg, compute, store, progress).reset_index(drop=True)
    empty = pd.DataFrame()
    return {
        "results": results,
        "updates": empty,
        "scaling": empty,
        "safe_reuse": empty,
        "decision": mismatch.decision(results),
    }


def label(row: dict) -> str:
    if "correction" in row:
        return f"T={row['T']} {row['mismatch']} {row['correction']}"
    clip = f"/{row['clip']}" if row["clip"] != "none" else ""
    kl = f" {row['kl']}(kappa={row['kappa']:g})" if row["kl"] != "none" else ""
    return f"{row['advantage']} {row['ratio']}{clip}{kl}"


RULE = ["env", "policy", "advantage", "ratio", "clip", "kl", "kappa"]


def _groups(df, keys):
    keys = [k for k in keys if k in df]
    return df.groupby(keys, dropna=False, sort=False)


def fit_slope(x, y, se):
    """Weighted least squares of log y on log x (weights from se/y); (slope, its SE, points).
    Points with y ≤ 3·se (bias within noise) are left out; fewer than 2 points: NaN."""
    x, y, se = _resolved(x, y, se)
    x, y, se = x[x > 0], y[x > 0], se[x > 0]
    if len(x) < 2:
        return math.nan, math.nan, len(x)
    lx, ly, w = np.log(x), np.log(y), (y / se) ** 2
    X = np.stack([np.ones_like(lx), lx], 1)
    cov = np.linalg.inv(X.T @ (w[:, None] * X))
    beta = cov @ X.T @ (w * ly)
    resid = ly - X @ beta
    dof = len(x) - 2
    scale = max(1.0, float(np.sum(w * resid**2) / dof)) if dof > 0 else 1.0  # overdispersion
    return float(beta[1]), float(math.sqrt(cov[1, 1] * scale)), len(x)


BIAS = "bias_sq_paired"  # the scaling fits read the paired bias (the precise one)


ROUNDING = 1e-8  # a paired bias² below this share of the MSE is float rounding (rules that agree)


def _resolved(x, y, se, mse=None):
    """The points of (x, y, se) with y more than 3 SE above 0 (and above ``ROUNDING``·mse), in x
    order."""
    x, y, se = (np.asarray(a, float) for a in (x, y, se))
    floor = 0.0 if mse is None else ROUNDING * np.asarray(mse, float)
    ok = (y > 3 * se) & (y > floor) & (se > 0) & np.isfinite(y)
    order = np.argsort(x[ok])
    return x[ok][order], y[ok][order], se[ok][order]


def scaling(updates, results):
    """Thm 12's order per rule, from the paired bias² (the policy-gradient part minus the SIS
    update on the same draws, unbiased for loo-type advantages), each slope with its SE and
    z = (slope − 2)/SE:

    * ``slope_eta``: in η over every resolved step size (epoch average, largest m, staleness 0);
      ``slope_eta_low`` over the three smallest resolved (the order as η → 0) and
      ``slope_eta_high`` over the two largest (the growth at the largest steps);
    * ``slope_lag``: one update's bias² in its lag k + j (lag ≥ 1) at the smallest η whose lags
      resolve at least three points (``lag_eta``)."""
    rows = []
    for key, g in _groups(results, RULE):
        rec = dict(
            zip(
                [k for k in RULE if k in results],
                key if isinstance(key, tuple) else (key,),
                strict=True,
            )
        )
        at = g[(g["staleness"] == g["staleness"].min()) & (g["m"] == g["m"].max())]
        x, y, se = _resolved(at["eta"], at[BIAS], at[BIAS + "_se"], at["mse"])
        s_eta, se_eta, n_eta = fit_slope(x, y, se)
        low, high = fit_slope(x[:3], y[:3], se[:3]), fit_slope(x[-2:], y[-2:], se[-2:])
        u = updates
        for k in rec:
            u = u[(u[k] == rec[k]) | (u[k].isna() & pd.isna(rec[k]))]
        s_lag = se_lag = lag_eta = math.nan
        for eta, ge in sorted(u[u["lag"] >= 1].groupby("eta"), key=lambda kv: kv[0]):
            ge = ge.groupby("lag", as_index=False)[[BIAS, BIAS + "_se", "mse"]].mean()
            s, se_s, n = fit_slope(*_resolved(ge["lag"], ge[BIAS], ge[BIAS + "_se"], ge["mse"]))
            if np.isfinite(s) and n >= 3:
                s_lag, se_lag, lag_eta = s, se_s, float(eta)
                break
        z = lambda s, e: (s - 2) / e if e > 0 else math.nan  # noqa: E731
        rows.append(
            {
                **rec,
                "m": int(at["m"].max()) if len(at) else None,
                "slope_eta": s_eta,
                "slope_eta_se": se_eta,
                "points_eta": n_eta,
                "z_eta": z(s_eta, se_eta),
                "slope_eta_low": low[0],
                "slope_eta_low_se": low[1],
                "slope_eta_high": high[0],
                "slope_eta_high_se": high[1],
                "slope_lag": s_lag,
                "slope_lag_se": se_lag,
                "z_lag": z(s_lag, se_lag),
                "lag_eta": lag_eta,
                "why_nan": ""
                if np.isfinite(s_eta)
                else "the SIS update is the control"
                if rec["ratio"] == "sis"
                else "bias² within 3 SE (or float rounding) of 0 "
                "at all but < 2 step sizes (unbiased, or too few seeds)",
            }
        )
    return pd.DataFrame(rows)


def safe_reuse(results):
    """Per rule and η: the largest m (staleness 0) and the largest staleness k (smallest m) whose
    excess over a fresh on-policy update at the same θ — and every smaller one's — is at most
    ``SAFE`` − 1 (10%), by MSE (``safe_m``, ``safe_staleness``) and by the scale-free MSE at the
    best rescaling (``*_scaled``: a clipped update shrinks, which lowers its MSE without making
    its direction better).  ``*_status``: "inconclusive" when a deciding margin is inside one SE
    (from the seed splits; the rows are paired)."""
    keys = [k for k in RULE + ["eta"] if k in results]
    rows = []
    for key, g in _groups(results, keys):
        rec = dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True))
        out = dict(rec)
        for col, sel in (
            ("m", g[g["staleness"] == g["staleness"].min()]),
            ("staleness", g[g["m"] == g["m"].min()]),
        ):
            out[f"tested_{col}"] = int(sel[col].max()) if len(sel) else None
            for suffix, excess in (("", "excess_mse"), ("_scaled", "excess_scaled")):
                best, status = None, "ok"
                for _, r in sel.sort_values(col).iterrows():
                    margin = (SAFE - 1) - r[excess]
                    if not np.isfinite(margin) or abs(margin) < r[excess + "_se"]:
                        status = "inconclusive"
                    if not margin >= 0:
                        break
                    best = int(r[col])
                out[f"safe_{col}{suffix}"] = best
                out[f"safe_{col}{suffix}_status"] = status
        rows.append(out)
    return pd.DataFrame(rows)


REPORT = [
    "policy",
    "advantage",
    "ratio",
    "clip",
    "kl",
    "kappa",
    "eta",
    "staleness",
    "m",
    "bias_sq",
    "variance",
    "mse",
    "excess_mse",
    "scaled_mse",
    "excess_scaled",
    "cos",
    "snr",
    "clip_frac",
]


def report(cfg: Config, tables: dict) -> str:
    df = tables["results"]
    return table_text(df, mismatch.REPORT if cfg.env in MISMATCH_ENVS else REPORT)


def notes(cfg: Config, tables: dict) -> str:
    """The safe-reuse table, Thm 12's slopes and which rule wins at each (η, m) (the mismatch
    mode: its decision table)."""
    if cfg.env in MISMATCH_ENVS:
        return "\n".join(mismatch.notes(cfg, tables)).strip()
    lines = []
    safe = tables["safe_reuse"]
    if not safe.empty:
        lines += [
            "",
            f"Safe reuse (excess over a fresh on-policy update at most {SAFE - 1:.0%}; "
            "by MSE and by scale-free MSE):",
            table_text(
                safe,
                [
                    c
                    for c in (
                        "policy",
                        "advantage",
                        "ratio",
                        "clip",
                        "kl",
                        "kappa",
                        "eta",
                        "safe_m",
                        "safe_m_scaled",
                        "safe_staleness",
                        "safe_staleness_scaled",
                    )
                    if c in safe
                ],
            ),
        ]
    sc = tables["scaling"]
    if not sc.empty:
        lines += [
            "",
            "Thm 12 scaling of bias² (prediction: slope 2 in eta and in the lag):",
            table_text(
                sc,
                [
                    c
                    for c in (
                        "policy",
                        "advantage",
                        "ratio",
                        "clip",
                        "kl",
                        "kappa",
                        "slope_eta_low",
                        "slope_eta_low_se",
                        "slope_eta_high",
                        "slope_eta_high_se",
                        "slope_lag",
                        "slope_lag_se",
                    )
                    if c in sc
                ],
            ),
        ]
    win = winners(tables["results"])
    if not win.empty:
        lines += [
            "",
            "Closest to a fresh on-policy update (scale-free) at each (eta, m), staleness 0:",
            table_text(win, list(win)),
        ]
    return "\n".join(lines).strip()


def winners(results):
    """Per (policy, advantage, kl, kappa, η, m) at staleness 0: the rule whose updates come
    closest, scale-free, to a fresh on-policy update at the same θ (lowest ``excess_scaled``;
    the MSEs of different rules sit at different θ, their excesses do not, and a clipped update's
    smaller MSE is partly its smaller step), and whether its lead over the runner-up exceeds one
    SE; its excess by plain MSE beside it."""
    df = results[results["staleness"] == results["staleness"].min()]
    keys = [k for k in ("policy", "advantage", "kl", "kappa", "eta", "m") if k in df]
    rows = []
    for key, g in _groups(df, keys):
        g = g.sort_values("excess_scaled")
        best = g.iloc[0]
        rec = dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True))
        # rules giving the same updates (token = sequence = sis on one-token responses) tie
        same = np.isclose(g["excess_scaled"], best["excess_scaled"], rtol=1e-5, atol=1e-9)
        names = (
            " = ".join(rule_name(r) for _, r in g[same].iterrows())
            if not same.all()
            else ("every rule (the same update)")
        )
        lead = ""
        if (~same).any():
            second = g[~same].iloc[0]
            gap = second["excess_scaled"] - best["excess_scaled"]
            se = max(best["excess_scaled_se"], second["excess_scaled_se"])
            lead = (
                f"clear of {rule_name(second)}"
                if gap > se
                else (f"within 1 SE of {rule_name(second)}")
            )
        rows.append(
            {
                **{k: v for k, v in rec.items() if k in ("eta", "m") or (isinstance(v, str) and v)},
                "best": names,
                "excess_scaled": float(best["excess_scaled"]),
                "excess_mse": float(best["excess_mse"]),
                "lead": lead,
            }
        )
    return pd.DataFrame(rows)


rule_name = rules.rule_name


def figures(tables: dict) -> dict:
    if "correction" in tables["results"]:
        return {"offpolicy_mismatch.png": plots.mismatch_figure}
    out = {"offpolicy_m.png": plots.reuse_figure}
    if tables["results"]["staleness"].nunique() > 1:
        out["offpolicy_staleness.png"] = plots.staleness_figure
    return out
