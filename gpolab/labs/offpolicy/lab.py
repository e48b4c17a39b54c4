"""The off-policy lab (``gpolab offpolicy``): the practical GRPO update — minibatch reuse,
importance ratios, clipping, KL penalties and stale rollouts — against the exact gradient, on the
bandit and the arithmetic surrogate.  The Monte Carlo is the kernel
:mod:`gpolab.kernels.offpolicy` (what one seed computes, and the statistics of every update as
(η, staleness, update) arrays); this module holds the flags, the units and the tables built from
those arrays.  The rollout–training mismatch (the Markov env) is its own lab, ``gpolab mismatch``.

Tables: ``updates`` (one row per single update: rule, η, k, j), ``results`` (one row per
(rule, η, k, m): the m updates of an epoch averaged — what a run with m minibatches per rollout
batch does), ``scaling`` (Thm 12: the slope of bias² in η at the largest m and in the update's
lag k + j, with standard errors) and ``safe_reuse`` (the largest m and k whose MSE stays within
10% of on-policy), :mod:`gpolab.labs.offpolicy.analysis`.  Standard errors come from ``SPLITS``
independent batches of the seeds.  All rules of one policy share draws (common random numbers),
and all η, k and m of a rule share them too: differences between rows are paired.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from gpolab import configs, engine, envs, estimators, validate
from gpolab.configs import option
from gpolab.envs import arithmetic, bandit
from gpolab.estimators import offpolicy as rules
from gpolab.kernels import offpolicy as kernel
from gpolab.kernels import splits
from gpolab.kit.store import cell_key, resumed
from gpolab.kit.tables import table_text
from gpolab.labs.offpolicy import analysis, plots
from gpolab.labs.offpolicy.tables import UPDATE, columns, epoch_at, frame, kl_columns
from gpolab.theory import exact

NAME = "offpolicy"
TABLES = ("results", "updates", "scaling", "safe_reuse")
# the code names both envs (bandit.make, arithmetic.make and their Instance fields)
NEEDS = envs.Needs(("token_logp", "values"), only=("bandit", "arithmetic"))
INSTANCES = envs.instances(*envs.names(NEEDS))
# envs whose lab this was before: one line naming the command that measures them now
MOVED = {
    "markov": "the rollout–training mismatch lab is now `gpolab mismatch` (the same flags: "
    "gpolab mismatch --T ... --mismatch ... --correction ... --from-config ...)"
}
SPLITS = 8  # independent seed batches: the standard errors of bias² and of epoch averages
SAFE = analysis.SAFE
SCHEMA = 4  # 4: dual is ppo's symmetric clip plus the floor; KL columns in the lab's metric
# the rules that read their authors' own clip settings (``_eps``), not the lab's eps_low/eps_high
OWN_EPS = {"gspo": ("gspo_eps_low", "gspo_eps_high"), "cispo": ("cispo_eps_low", "cispo_eps_high")}
KL_ESTIMATORS = tuple(k for k in rules.KLS if k != "none")
JSON = (  # the --json columns
    *("env", "policy", "advantage", "ratio", "clip", "eps_low", "eps_high", "clip_c", "kl"),
    *("kappa", "G", "B", "m", "eta", "staleness", "bias_sq", "bias_sq_se", "variance", "mse"),
    *("mse_se", "mse_fresh", "excess_mse", "excess_mse_se", "scaled_mse", "excess_scaled"),
    *("excess_scaled_se", "best_scale", "cos", "snr", "target", "bias_sq_g", "mse_g"),
    *("bias_sq_dagger", "mse_dagger", "bias_sq_paired", "bias_sq_paired_se", "clip_frac"),
    *("kl_bias_sq", "kl_bias_sq_se", "kl_mse", "kl_grad_sq", "theory_mse_g", "theory", "n_seeds"),
)


def _own(rule: str, side: str, source: str):
    """The option of one of ``rule``'s own clip settings (``OWN_EPS``), its authors' default."""
    default = {"gspo": rules.GSPO_EPS, "cispo": rules.CISPO_EPS}[rule][side == "high"]
    return option(default, f"{rule}'s clip_ratio_{side} ({source})", when={"ratio": (rule,)})


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
        }
    }

    env: str = option(
        "bandit",
        "bandit (softmax bandit, one-token responses: token = sequence = sis) or arithmetic "
        "(token sequences: the ratio rules differ); the rollout-training mismatch on markov "
        "is `gpolab mismatch`",
    )
    advantages: tuple[str, ...] = option(
        ("loo",),
        "comma list of advantage estimators (reward-only registry names, e.g. loo, "
        "grpo, rloo): the weight c_g = A_g/G of each response",
    )
    ratio: tuple[str, ...] = option(
        tuple(rules.RATIOS), "comma list of ratio rules: " + ", ".join(rules.RATIOS)
    )
    clip: tuple[str, ...] = option(
        ("none", "ppo"),
        "comma list of clip modes for the token and sequence ratios: none, ppo (eps_low both "
        "sides), higher (eps_low, eps_high), dual (ppo, eps_low both sides, and the floor clip_c*A "
        "for A < 0: verl's vanilla loss at its defaults; sequence/dual is gpolab's extension)",
    )
    eps_low: float = option(
        0.2, "PPO clip epsilon (clip_ratio_low / epsilon; cispo-two-sided's lower)"
    )
    eps_high: float = option(
        0.28, "upper clip epsilon of clip-higher and cispo-two-sided (DAPO 0.28)"
    )
    gspo_eps_low: float = _own("gspo", "low", "verl's GSPO scripts and the GSPO paper: 3e-4")
    gspo_eps_high: float = _own("gspo", "high", "verl's GSPO scripts and the GSPO paper: 4e-4")
    cispo_eps_low: float = _own("cispo", "low", "verl's CISPO recipe: 10, no lower clamp")
    cispo_eps_high: float = _own(
        "cispo",
        "high",
        "verl's CISPO recipe: 0.2; TRL's recommended absolute cap epsilon_high 5.0 is 4.0 here",
    )
    clip_c: float = option(3.0, "dual-clip floor c > 1 (verl clip_ratio_c)")
    kl: tuple[str, ...] = option(
        ("none",),
        "comma list of KL estimators in the loss: none, k1, k2, k3, k3_ratio (TRL's default: k3 "
        "times the ratio) (needs an env with exact KL: bandit)",
    )
    kappa: tuple[float, ...] = option(
        (0.1,),
        "comma list of KL coefficients (rows with a KL estimator)",
        when={"kl": KL_ESTIMATORS},
    )
    ref_scale: float = option(
        0.5,
        "the reference policy: theta_ref = theta_old + ref_scale * z, z ~ N(0, I) (seed: seed + 1)",
    )
    G: int = option(8, "group size")
    eta: tuple[float, ...] = option(
        (16.0, 64.0, 256.0),
        "comma list of SGD step sizes (the default bandit's gradient is small: 16 moves a logit "
        "~0.1 per step)",
    )
    m: tuple[int, ...] = option((1, 2, 4, 8), "comma list of minibatch updates per rollout batch")
    staleness: tuple[int, ...] = option(
        (0, 2, 8), "comma list of policy versions the rollouts are behind (async trainers)"
    )
    seeds: int = option(4096, f"Monte Carlo seeds per cell ({SPLITS} independent batches)")
    chunk: int = option(
        0, "seeds per compiled chunk (0: automatic; results do not depend on it)", key=False
    )
    seed: int = option(0, "master PRNG seed")
    out: str = option(
        "results/offpolicy", "output folder (tables, config.toml, figures)", key=False
    )
    instance: bandit.Instance | arithmetic.Instance = option(
        None, "the env's settings (default: the env's defaults)"
    )

    def __init__(self, **kw) -> None:
        configs.init(self, kw)

    def validate(self) -> None:
        """Plain-Python checks before anything is traced (each names the field)."""
        if self.env in MOVED:
            raise validate.ConfigError(f"env: got {self.env!r}; {MOVED[self.env]}")
        validate.choice("env", self.env, tuple(INSTANCES))
        self.instance.validate()
        validate.integer("G", self.G, 2)
        validate.group_sizes("G", self.G)
        validate.run_sizes(self, 2 * SPLITS)
        _check_rules(self)
        validate.real("ref_scale", self.ref_scale, low=0.0)
        validate.nonempty("eta", self.eta)
        for e in self.eta:
            validate.real("eta", e, low=0.0, open_low=True)
        validate.integers("m", self.m, 1)
        validate.at_most("m", self.m, 256, "the updates of an epoch are unrolled per seed")
        validate.integers("staleness", self.staleness, 0)
        validate.at_most("staleness", self.staleness, 256, "stale steps are unrolled per seed")
        batch_size(self)  # B >= 1 where the env needs it


def _check_rules(cfg: Config) -> None:
    """The advantages, ratio rules, clip modes and KL terms of the grid, and their knobs."""
    if not cfg.advantages:
        raise validate.ConfigError("advantages: got an empty list; allowed: registry names")
    for spec in cfg.advantages:
        estimators.check_estimator(spec, cfg.G, field="G")
        entry = estimators.resolve(spec)
        if entry.needs or entry.scope_of(estimators.bind(spec)[1]) != "group":
            raise validate.ConfigError(
                f"advantages: got {spec!r}; allowed: group-scoped estimators of the rewards "
                "alone (loo, grpo, rloo, ...)"
            )
    for field, allowed in (("ratio", tuple(rules.RATIOS)), ("clip", rules.CLIPS)):
        validate.nonempty(field, getattr(cfg, field))
        for value in getattr(cfg, field):
            validate.choice(field, value, allowed)
    validate.real("eps_low", cfg.eps_low, low=0.0, high=1.0, open_low=True)
    if cfg.eps_low >= 1:
        raise validate.ConfigError(f"eps_low: got {cfg.eps_low!r}; allowed: (0, 1)")
    validate.real("eps_high", cfg.eps_high, low=0.0, open_low=True)
    for field in sum(OWN_EPS.values(), ()):
        validate.real(field, getattr(cfg, field), low=0.0, open_low=True)
    validate.real("clip_c", cfg.clip_c, low=1.0, open_low=True)
    validate.nonempty("kl", cfg.kl)
    for k in cfg.kl:
        validate.choice("kl", k, tuple(rules.KLS))
    if any(k != "none" for k in cfg.kl):
        if envs.get(cfg.env).kl is None:
            raise validate.ConfigError(
                f"kl: got {','.join(cfg.kl)}; the {cfg.env} env has no exact KL (its "
                "answers are not enumerated); allowed: none (or env = bandit)"
            )
        validate.nonempty("kappa", cfg.kappa)
        for k in cfg.kappa:
            validate.real("kappa", k, low=0.0)


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
    """One unit of work per (policy, rule): every η, k, m of it in one engine run)."""
    return [{"policy": p, **r} for p in contexts(cfg) for r in rule_ids(cfg)]


def cells(cfg: Config) -> int:
    return len(units(cfg))


def settings(cfg: Config) -> dict:
    """Every setting the numbers depend on besides the unit's own (its store key)."""
    unit_fields = ("advantages", "ratio", "clip", "kl", "kappa")
    return configs.key_settings(cfg, exclude=unit_fields + sum(OWN_EPS.values(), ()))


def cell_keys(cfg: Config) -> list[str]:
    """One store key per unit; a rule with its own clip settings (``OWN_EPS``) carries them in
    its unit, so changing them moves only its cells."""
    common = settings(cfg)
    return [
        cell_key(NAME, schema=SCHEMA, unit=_own_eps(cfg, u), settings=common) for u in units(cfg)
    ]


def _own_eps(cfg: Config, unit: dict) -> dict:
    """``unit`` with its rule's own clip settings (rules in ``OWN_EPS``), else as it is."""
    if unit.get("ratio") not in OWN_EPS:
        return unit
    return {**unit, "eps": list(_eps(unit, cfg))}


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
    """(cell, args) of the kernel's :func:`~gpolab.kernels.offpolicy.per_seed` for one unit
    (``etas``: the step sizes, default the grid's)."""
    params, theta_old, theta_ref, sigma = _setup(cfg, unit["policy"])
    rule = (unit[k] for k in ("advantage", "ratio", "clip", "kl"))
    shape = dict(
        G=cfg.G, B=batch_size(cfg), m=max(cfg.m), staleness=tuple(sorted(set(cfg.staleness)))
    )
    dagger = kernel.target(unit["advantage"]) == "g_dagger"
    cell = kernel.Cell(cfg.env, *rule, **shape, prompts=int(sigma.shape[0]), dagger=dagger)
    f32 = functools.partial(np.asarray, dtype=theta_old.dtype)
    own = _eps(unit, cfg)
    eps = (f32(getattr(cfg, k) if e is None else e) for k, e in zip(EPS, own, strict=True))
    etas = f32(cfg.eta if etas is None else etas)
    args = (params, theta_old, theta_ref, sigma, etas, *eps, f32(cfg.clip_c), f32(unit["kappa"]))
    return cell, args


def _moments(cfg: Config, unit: dict, key):
    """One engine run per split: the list of :class:`gpolab.engine.Moments`."""
    cell, args = inputs(cfg, unit)
    return cell, splits.run(kernel.per_seed, cell, args, key, cfg.seeds, SPLITS, cfg.chunk)


# ---------------------------------------------------------------- a unit: tables from arrays


BASE = "env policy advantage ratio clip eps_low eps_high clip_c kl kappa G B target n_seeds".split()


def _base(cfg: Config, unit: dict, cell: kernel.Cell, n: int) -> dict:
    """The columns every row of a unit shares (:data:`BASE`)."""
    rule = (unit[k] for k in ("advantage", "ratio", "clip"))
    clip_c = cfg.clip_c if unit["clip"] == "dual" else None
    target = kernel.target(unit["advantage"])
    values = (cfg.env, unit["policy"] or None, *rule, *_eps(unit, cfg), clip_c, unit["kl"])
    return dict(zip(BASE, (*values, unit["kappa"], cfg.G, cell.B, target, n), strict=True))


WHY_NAN = (
    "non-finite updates on some seeds (ratios overflowed: the policy left θ_old too far at this "
    "step size)"
)


def unit_rows(cfg: Config, unit: dict, key) -> list[dict]:
    """The ``updates`` and ``results`` rows of one unit (column ``table`` says which), in blocks
    of (η, k): the block's updates, then its epochs."""
    start = time.perf_counter()
    cell, parts = _moments(cfg, unit, key)
    s = kernel.summary(cell, parts)
    base, theory = _base(cfg, unit, cell, s.n), _theory(cfg, unit, cell)
    eta = np.asarray(cfg.eta, float)[:, None, None]
    k = np.asarray(cell.staleness)[None, :, None]
    j = np.arange(cell.m)[None, None, :]
    ms = tuple(sorted(set(cfg.m)))
    updates = frame(
        "updates",
        base,
        {"eta": eta, "staleness": k, "update": j, "lag": k + j},
        columns(s, UPDATE),
        theory,
        (k == 0) & (j == 0),
        kl_columns(s, UPDATE),
    )
    epoch = epoch_at(ms)
    last = np.asarray(ms) - 1
    results = frame(
        "results",
        base,
        {"eta": eta, "staleness": k, "m": np.asarray(ms)[None, None, :]},
        columns(s, epoch)
        | {
            "mse_last": s.main.pooled.mse[..., last],
            "bias_sq_last": s.main.pooled.bias_sq[..., last],
        },
        theory,
        (k == 0) & (np.asarray(ms) == 1),
        kl_columns(s, epoch),
    )
    blocks = len(cfg.eta) * len(cell.staleness)
    per_u, per_r = len(updates) // blocks, len(results) // blocks
    rows = [
        r
        for b in range(blocks)
        for r in updates[b * per_u : (b + 1) * per_u] + results[b * per_r : (b + 1) * per_r]
    ]
    wall = time.perf_counter() - start
    for r in rows:
        r["seconds"] = wall / len(rows)
        if not math.isfinite(r["mse"]):  # a number that cannot be computed says why
            r["why_nan"] = WHY_NAN
    return rows


@functools.cache
def _truth(cfg: Config, policy: str):
    params, theta_old, _, _ = _setup(cfg, policy)
    return envs.get(cfg.env).exact(params, theta_old)


def _theory(cfg: Config, unit: dict, cell: kernel.Cell) -> dict:
    """The on-policy update's exact MSE against g (:func:`gpolab.theory.exact.theory_columns`:
    closed form or count table) for the rows at θ_old (staleness 0, first update), with no KL
    term; ``theory`` names the formula or why there is none."""
    if unit["kl"] != "none":
        _, theta_old, theta_ref, _ = _setup(cfg, unit["policy"])
        params = _instance(cfg.instance)[unit["policy"]]
        kl = {"kl_theory_bias_sq": kernel.kl_theory(cell, params, theta_old, theta_ref)}
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


# ---------------------------------------------------------------- the lab


def run(cfg: Config, key=None, *, store=None, progress=None) -> dict:
    """``{results, updates, scaling, safe_reuse}``; each (policy, rule) is one unit of work,
    resumed from ``store``.  All units of a policy draw from the same key (paired rules)."""
    cfg.validate()
    key = jax.random.key(cfg.seed) if key is None else key
    todo = units(cfg)

    def compute(i: int) -> list[dict]:
        unit = todo[i]
        return unit_rows(cfg, unit, engine.cell_key(key, NAME, unit["policy"]))

    df = resumed(cfg, store, cell_keys(cfg), compute, progress=progress, label=label)
    results = df[df["table"] == "results"].drop(columns=["table", "update", "lag"])
    epoch_only = ["table", "m", "mse_last", "bias_sq_last", "excess_mse_se", "excess_scaled_se"]
    updates = df[df["table"] == "updates"].drop(columns=epoch_only)
    results, updates = (
        t.dropna(axis=1, how="all").reset_index(drop=True) for t in (results, updates)
    )
    results["m"] = results["m"].astype(int)  # the union of both row kinds made them float
    updates[["update", "lag"]] = updates[["update", "lag"]].astype(int)
    return {
        "results": results,
        "updates": updates,
        "scaling": analysis.scaling(updates, results),
        "safe_reuse": analysis.safe_reuse(results),
    }


def label(rows: list[dict]) -> str:
    """A unit's progress note: its rule."""
    row = rows[0]
    clip = f"/{row['clip']}" if row["clip"] != "none" else ""
    kl = f" {row['kl']}(kappa={row['kappa']:g})" if row["kl"] != "none" else ""
    return f"{row['advantage']} {row['ratio']}{clip}{kl}"


REPORT = (  # the printed table's columns
    *("policy", "advantage", "ratio", "clip", "kl", "kappa", "eta", "staleness", "m", "bias_sq"),
    *("variance", "mse", "excess_mse", "scaled_mse", "excess_scaled", "cos", "snr", "clip_frac"),
)


def report(cfg: Config, tables: dict) -> str:
    return table_text(tables["results"], REPORT)


SAFE_COLUMNS = ("policy", "advantage", "ratio", "clip", "kl", "kappa", "eta", "safe_m")
SAFE_COLUMNS += ("safe_m_scaled", "safe_staleness", "safe_staleness_scaled")
SCALING_COLUMNS = (*SAFE_COLUMNS[:6], "slope_eta_low", "slope_eta_low_se", "slope_eta_high")
SCALING_COLUMNS += ("slope_eta_high_se", "slope_lag", "slope_lag_se")


def notes(cfg: Config, tables: dict) -> str:
    """The safe-reuse table, Thm 12's slopes and which rule wins at each (η, m)."""
    lines = []
    for title, df, cols in (
        (
            f"Safe reuse (excess over a fresh on-policy update at most {SAFE - 1:.0%}; "
            "by MSE and by scale-free MSE):",
            tables["safe_reuse"],
            SAFE_COLUMNS,
        ),
        (
            "Thm 12 scaling of bias² (prediction: slope 2 in eta and in the lag):",
            tables["scaling"],
            SCALING_COLUMNS,
        ),
        (
            "Closest to a fresh on-policy update (scale-free) at each (eta, m), staleness 0:",
            win := analysis.winners(tables["results"]),
            tuple(win),
        ),
    ):
        if not df.empty:
            lines += ["", title, table_text(df, [c for c in cols if c in df])]
    return "\n".join(lines).strip()


def figures(tables: dict) -> dict:
    out = {"offpolicy_m.png": plots.reuse_figure}
    if tables["results"]["staleness"].nunique() > 1:
        out["offpolicy_staleness.png"] = plots.staleness_figure
    return out
