"""Rollout logs simulated from gpolab's surrogates, with their truth (validation of ``gpolab plan``,
issue 18; theory §3, §10).

A simulated GRPO run at a fixed policy θ: ``steps`` steps of B prompts with G responses each,
one row per response (``Simulated.frame``), plus measured norms ‖ĝ‖ of the leave-one-out
gradient at a few batch sizes (``Simulated.norms``), plus the exact truth the log came from
(``Simulated.truth``), so that what ``gpolab plan`` recovers from the log can be compared with it.

* Prompts of the log come in a dataloader's order: each epoch is a seeded permutation of the
  prompts cut into steps of B distinct prompts, the remainder dropped (``drop_last``), so every
  (step, prompt) is one group of G responses, as in a trainer's log.  The envs' prompt
  distribution f is uniform, so each response's prompt still has law f.
* ``proxy`` q = ‖W‖², W = ∇_θ log π(y|x) over all of θ: the tabular bandit's W = e_a − π_x gives
  q = 1 − 2π(a|x) + ‖π_x‖² exactly; the arithmetic surrogate's is autodiff over every flax
  parameter.  E[q | x] = S2(x), the truth's ``S2``.
* ``norms``: ``norm_steps`` independent steps at each B of ``norm_batches``, B prompts iid from f
  (the theory's mini-batch), ĝ = (1/(BG)) Σ_b Σ_g A_bg W_bg with loo advantages
  A = G/(G − 1)(Z − Z̄), in the flat global parameter space.  Exactly (theory §3, gpolab's
  derivation in :mod:`gpolab.theory.mse`):  E‖ĝ‖² = ‖g‖² + [c1 + E_X MSE_loo(X; G)]/B
  (truth ``grad_sq_exact``).
* truth: ``V``, ``prompt_probs``, ``S2`` per prompt; ``degenerate`` {G: Σ_x f(x)[V^G + (1 − V)^G]}
  for G = 2 … 256; c1, C2, C3 (:func:`gpolab.theory.groupsize.constants`), ``gstar`` = 1 + √(C3/c1),
  ``g_sq`` = ‖g‖², ``mean_V`` = Σ_x f(x) V(x), with standard errors (0 where exact).
"""

from __future__ import annotations

import dataclasses
import typing
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from gpolab import configs, envs, estimators, validate
from gpolab.configs import borrow, option
from gpolab.envs import arithmetic, bandit
from gpolab.theory import difficulty, groupsize, mse

# bandit.make settings of simulate_bandit: peaked policies (logit_scale 4) over mostly-0/1 success
# probabilities (Beta(0.3, 0.5)) give V from ~0.001 to ~0.997 (mean 0.37, sd 0.25 at 512 prompts)
# and about 21% degenerate groups at G = 8.
BANDIT_SETTINGS = {"logit_scale": 4.0, "success_a": 0.3, "success_b": 0.5}
# bandit.make options besides the sizes
MAKE_OPTIONS = ("kind", "dim", "logit_scale", "success_a", "success_b")
# the arithmetic surrogate as ``gpolab sweep`` builds it (its defaults): GRU width, filler tokens,
# sampled sequences per question of the Monte Carlo S2
ARITHMETIC_SETTINGS = {"hidden": 32, "filler": 64, "truth_samples": 256}
DEGENERATE_G = tuple(range(2, 257))
ANSWER_TEXT = "0123456789-"  # answer token id → character (<eos> ends the text)


@dataclasses.dataclass(frozen=True)
class Simulated:
    """A simulated rollout log, its gradient norms and the truth it was drawn from."""

    frame: pd.DataFrame  # one row per response: step, prompt, prompt_id, reward, proxy, length,
    # completion
    norms: pd.DataFrame  # batch, grad_norm: one row per simulated step of ``norm_batches``
    truth: dict  # module docstring


def degenerate_truth(V, prompt_probs, Gs=DEGENERATE_G) -> dict[int, float]:
    """{G: P(a group of G is all-equal)} = Σ_x f(x) [V(x)^G + (1 − V(x))^G] (binary rewards)."""
    return {int(G): difficulty.degenerate_fraction_known(V, prompt_probs, G) for G in Gs}


def truth_summary(truth, G: int, batches, **extra) -> dict:
    """The truth dict of :class:`Simulated` from an env truth (bandit or arithmetic field names).

    ``grad_sq_exact`` {B: E‖ĝ_B‖² = ‖g‖² + MSE_loo(B, G)} and ``grad_sq_se`` {B: its standard
    error from a Monte Carlo S2} for each B of ``batches``."""
    c = groupsize.constants(truth)
    f = np.asarray(truth.prompt_probs, dtype=np.float64)
    V = np.asarray(truth.V, dtype=np.float64)
    g_sq = float(np.sum(np.asarray(truth.g, dtype=np.float64) ** 2))
    return {
        "V": V,
        "prompt_probs": f,
        "S2": np.asarray(truth.S2, dtype=np.float64),
        "G": G,
        "degenerate": degenerate_truth(V, f),
        "mean_V": float(f @ V),
        "c1": c.c1,
        "C2": c.C2,
        "C3": c.C3,
        "C2_se": c.C2_se,
        "C3_se": c.C3_se,
        "gstar": c.g_star_exact,
        "gstar_se": c.g_star_se,
        "g_sq": g_sq,
        "grad_sq_exact": {B: g_sq + mse.mse(truth, "loo", G, B) for B in batches},
        "grad_sq_se": {B: mse.mse_se(truth, "loo", G, B) for B in batches},
        "exact": truth,  # the env's truth (the trainer's estimator's exact G*: compare)
        **extra,
    }


def batch_order(key: jax.Array, prompts: int, steps: int, B: int) -> np.ndarray:
    """(steps, B) prompt ids in a dataloader's order: epochs of a permutation of ``prompts`` ids
    (epoch e from ``fold_in(key, e)``), each cut into ⌊prompts/B⌋ steps of B distinct ids."""
    per_epoch = prompts // B
    epochs = -(-steps // per_epoch)
    perms = [jax.random.permutation(jax.random.fold_in(key, e), prompts) for e in range(epochs)]
    order = np.stack([np.asarray(p)[: per_epoch * B] for p in perms]).reshape(-1, B)
    return order[:steps].astype(np.int64)


def rollout_frame(
    order, rewards, proxy, length, completion, logit_proxy, pair_score=None
) -> pd.DataFrame:
    """One row per response from (steps, B) prompt ids and (steps, B, G) per-response values
    (``logit_proxy``: verl's forward-only W(τ), :func:`gpolab.envs.arithmetic.logit_proxy`;
    ``pair_score``: :func:`gpolab.theory.gstar.pair_scores`, NaN when not given)."""
    steps, B, G = np.shape(rewards)
    ids = np.repeat(np.asarray(order, dtype=np.int64).reshape(-1), G)
    return pd.DataFrame(
        {
            "step": np.repeat(np.arange(steps, dtype=np.int64), B * G),
            "prompt": [f"q{i}" for i in ids],
            "prompt_id": ids,
            "reward": np.asarray(rewards, dtype=np.float64).reshape(-1),
            "proxy": np.asarray(proxy, dtype=np.float64).reshape(-1),
            "length": np.asarray(length, dtype=np.float64).reshape(-1),
            "completion": list(completion),
            "logit_proxy": np.asarray(logit_proxy, dtype=np.float64).reshape(-1),
            "pair_score": np.full(np.size(rewards), np.nan)
            if pair_score is None
            else np.asarray(pair_score, dtype=np.float64).reshape(-1),
        }
    )


@partial(jax.jit, static_argnums=(0, 3, 4, 5))
def _grad_norms(env, params, key: jax.Array, B: int, G: int, steps: int) -> jax.Array:
    """(steps,) ‖ĝ‖ of independent loo mini-batch steps at the env's θ₀ (module docstring)."""
    theta = env.init(params)

    def one(k):
        k_prompts, k_sample = jax.random.split(k)
        prompts = env.sample_prompts(k_prompts, params, B)
        responses, rewards = env.sample(k_sample, params, theta, prompts, G)
        weights = estimators.loo_advantages(rewards) / (B * G)
        return jnp.linalg.norm(env.gradient(params, theta, prompts, responses, weights))

    return jax.lax.map(one, jax.random.split(key, steps))


def grad_norms(env, params, key: jax.Array, G: int, batches, steps: int) -> pd.DataFrame:
    """Columns batch, grad_norm: ``steps`` rows for each B of ``batches``, drawn with key
    ``fold_in(key, B)``."""
    rows = [
        (B, np.asarray(_grad_norms(env, params, jax.random.fold_in(key, B), B, G, steps)))
        for B in batches
    ]
    return pd.DataFrame(
        {
            "batch": np.concatenate([np.full(len(n), B, np.int64) for B, n in rows]),
            "grad_norm": np.concatenate([n.astype(np.float64) for _, n in rows]),
        }
    )


def check_sizes(steps, B, G, norm_batches, norm_steps, seed, prompts, field="prompts") -> None:
    """Plain-Python checks shared by both simulations (one-line ConfigError); ``prompts`` is the
    number of prompts (field name ``field``), at least B."""
    validate.integer("steps", steps, 1)
    validate.integer("G", G, 2)
    validate.integer(field, prompts, 1)
    validate.integer("B", B, 1, prompts)
    validate.integers("norm_batches", tuple(norm_batches), 1)
    validate.integer("norm_steps", norm_steps, 1)
    validate.integer("seed", seed, 0)


# ---------------------------------------------------------------- bandit


def bandit_proxy(params: bandit.BanditParams, prompts, actions) -> np.ndarray:
    """q = ‖e_a − π_x‖² = 1 − 2π(a|x) + ‖π_x‖² (tabular W), float64, shape of ``actions``."""
    pi = np.asarray(bandit.policy(params), dtype=np.float64)[np.asarray(prompts)]  # (n, A)
    pa = np.take_along_axis(pi, np.asarray(actions), axis=-1)
    return 1 - 2 * pa + np.sum(pi**2, axis=-1, keepdims=True)


def bandit_pairs(params: bandit.BanditParams, prompts, actions, rewards) -> np.ndarray:
    """:func:`gpolab.theory.gstar.pair_scores` of each group (rows of ``actions``/``rewards``,
    (n, G)) from the tabular W's inner products (e_a − π)·(e_b − π) = [a = b] − π(a) − π(b) +
    ‖π‖², float64, shape of ``actions``."""
    from gpolab.theory import gstar

    pi = np.asarray(bandit.policy(params), dtype=np.float64)[np.asarray(prompts)]  # (n, A)
    a = np.asarray(actions)
    pa = np.take_along_axis(pi, a, axis=-1)
    gram = (a[:, :, None] == a[:, None, :]) - pa[:, :, None] - pa[:, None, :]
    gram = gram + np.sum(pi**2, axis=-1)[:, None, None]
    return gstar.pair_scores(np.asarray(rewards, np.float64), gram)


def simulate_bandit(
    *,
    steps=50,
    B=32,
    G=8,
    norm_batches=(8, 64),
    norm_steps=200,
    seed=0,
    prompts=512,
    actions=64,
    **make_kwargs,
) -> Simulated:
    """A rollout log of the tabular bandit ``bandit.make(seed, prompts, actions, ...)`` at its θ
    (:data:`BANDIT_SETTINGS` unless ``make_kwargs`` overrides them), exact truth by enumeration.
    Completions are the action as text ("a17"); length is 1 (one action, one token)."""
    check_sizes(steps, B, G, norm_batches, norm_steps, seed, prompts)
    for name in make_kwargs:
        validate.choice("make_kwargs", name, MAKE_OPTIONS)
    settings = {**BANDIT_SETTINGS, **make_kwargs, "prompts": prompts, "actions": actions}
    if settings.setdefault("kind", "tabular") != "tabular":
        raise validate.ConfigError(
            f"kind: got {settings['kind']!r}; allowed: tabular (the proxy q = ‖e_a − π‖²)"
        )
    params = bandit.make(seed, **settings)
    key = jax.random.key(seed)
    order = batch_order(jax.random.fold_in(key, 1), prompts, steps, B)
    actions_, rewards = jax.jit(bandit.sample, static_argnums=3)(
        jax.random.fold_in(key, 2),
        params,
        jnp.asarray(order.reshape(-1), jnp.int32),
        G,
        bandit.outcome_tables(params),
    )
    actions_ = np.asarray(actions_)
    proxy = bandit_proxy(params, order.reshape(-1), actions_)  # also verl's W (one token)
    frame = rollout_frame(
        order,
        np.asarray(rewards).reshape(steps, B, G),
        proxy,
        np.asarray(bandit.response_length(params, jnp.asarray(order.reshape(-1)), actions_)),
        (f"a{a}" for a in actions_.reshape(-1)),
        proxy,
        bandit_pairs(params, order.reshape(-1), actions_, np.asarray(rewards)),
    )
    norms = grad_norms(bandit.ENV, params, jax.random.fold_in(key, 3), G, norm_batches, norm_steps)
    truth = truth_summary(bandit.exact(params), G, norm_batches, settings=settings, V_exact=True)
    return Simulated(frame, norms, truth)


# ---------------------------------------------------------------- arithmetic


def answer_text(tokens) -> str:
    """The answer tokens (LENGTH,) as text, up to the first <eos>: [1, 2, <eos>, <eos>] → "12"."""
    out = []
    for t in np.asarray(tokens):
        if t == arithmetic.EOS:
            break
        out.append(ANSWER_TEXT[t])
    return "".join(out)


def arithmetic_instance(seed: int, policy: str, questions: int) -> arithmetic.ArithmeticInstance:
    """The questions and the pre-trained ``policy`` snapshot as ``gpolab sweep`` builds them
    (instance seed ``seed``, :data:`ARITHMETIC_SETTINGS`, truth key ``fold_in(key(seed), 1)``)."""
    validate.choice("policy", policy, arithmetic.POLICIES)
    validate.integer("questions", questions, 1)
    qs = arithmetic.make_questions(seed, questions)
    s = ARITHMETIC_SETTINGS
    target = {policy: arithmetic.POLICIES[policy]}
    pol = arithmetic.pretrain(qs, seed, s["hidden"], target, filler=s["filler"])[policy]
    truth_key = jax.random.fold_in(jax.random.key(seed), 1)
    return arithmetic.ArithmeticInstance(pol, qs, truth_key, s["truth_samples"])


@jax.jit
def _arithmetic_per_response(policy, features, tokens):
    """(n, G) proxy ‖∇_θ log π(y|x)‖², length (filler + answer tokens up to the first <eos>) and
    verl's forward-only W(τ) for tokens (n, G, T) of questions with ``features`` (n, F)."""
    proxy = jax.lax.map(lambda a: arithmetic.score_norms(policy, a[0], a[1]), (features, tokens))
    live = arithmetic.live_mask(arithmetic.answer_part(tokens))
    logit = jax.vmap(arithmetic.logit_proxy, in_axes=(None, 0, 0))(policy, features, tokens)
    return proxy, policy.filler + jnp.sum(live, axis=-1), logit


def simulate_arithmetic(
    *,
    steps=20,
    B=16,
    G=8,
    norm_batches=(4, 32),
    norm_steps=100,
    seed=0,
    policy="instruct",
    questions=500,
) -> Simulated:
    """A rollout log of the arithmetic LLM surrogate (``policy`` pre-trained as the sweep does).
    V is exact (teacher forcing); S2, hence C2, C3 and G*, carry the Monte Carlo error of
    ``truth_samples`` sequences per question (``C2_se``, ``C3_se``, ``gstar_se``).  Completions
    are the answer text; length counts the filler and the answer tokens up to the first <eos>."""
    check_sizes(steps, B, G, norm_batches, norm_steps, seed, questions, "questions")
    instance = arithmetic_instance(seed, policy, questions)
    env, key = arithmetic.ENV, jax.random.key(seed)
    order = batch_order(jax.random.fold_in(key, 1), questions, steps, B)
    prompts = jnp.asarray(order.reshape(-1), jnp.int32)
    theta = env.init(instance)
    tokens, rewards = jax.jit(env.sample, static_argnums=4)(
        jax.random.fold_in(key, 2), instance, theta, prompts, G
    )
    feats = instance.questions.features[prompts]
    proxy, length, logit = _arithmetic_per_response(instance.policy, feats, tokens)
    answers = np.asarray(arithmetic.answer_part(tokens)).reshape(-1, arithmetic.LENGTH)
    frame = rollout_frame(
        order,
        np.asarray(rewards).reshape(steps, B, G),
        proxy,
        length,
        (answer_text(a) for a in answers),
        logit,
    )
    norms = grad_norms(env, instance, jax.random.fold_in(key, 3), G, norm_batches, norm_steps)
    truth = jax.jit(env.exact)(instance, theta)
    settings = {**ARITHMETIC_SETTINGS, "policy": policy, "questions": questions}
    return Simulated(
        frame, norms, truth_summary(truth, G, norm_batches, settings=settings, V_exact=True)
    )


# ---------------------------------------------------------------- the lab: logs → plan → truth

NAME = "plancheck"
TABLES = ("results",)
# the envs whose truth carries the loo MSE law, named (the lab simulates each one's logs with
# its own functions), bandit first (the stored runs' order: flags, tables, cell keys)
NEEDS = envs.Needs(("mse_law",), only=("bandit", "arithmetic"))
ENVS = envs.names(NEEDS)
FORMATS = ("trl", "verl", "table")
REPORT_G = (2, 4, 8, 16, 32, 64, 128, 256)
PROXY = "score_norm"  # the proxy's column name in every written log (a TRL/verl extra column)
REWARD = "correctness"  # the TRL reward function's name


@dataclasses.dataclass(frozen=True)
class Config(configs.Config):
    """Logs simulated from the surrogates, written as TRL and verl write them and as a table,
    read back by ``gpolab plan``; what it recovers against the truth they were drawn from."""

    LAB: typing.ClassVar[str] = NAME
    QUICK: typing.ClassVar[dict] = {
        "steps": 15,
        "norm_steps": 60,
        "arithmetic_steps": 8,
        "arithmetic_norm_steps": 40,
        "draws": 500,
    }

    env: tuple[str, ...] = option(ENVS, "comma list of " + ", ".join(ENVS))
    formats: tuple[str, ...] = option(FORMATS, "log formats written and read: trl, verl, table")
    G: int = option(8, "the simulated run's group size")
    steps: int = option(50, "bandit: logged steps")
    B: int = option(32, "bandit: prompts per step")
    prompts: int = borrow(bandit.Instance, "prompts", default=512, prefix="bandit: ")
    norm_batches: tuple[int, ...] = option((8, 64), "bandit: batch sizes of the gradient norms")
    norm_steps: int = option(200, "bandit: gradient-norm steps per batch size")
    arithmetic_steps: int = option(20, "arithmetic: logged steps")
    arithmetic_B: int = option(16, "arithmetic: questions per step")
    arithmetic_norm_batches: tuple[int, ...] = option((4, 32), "arithmetic: norm batch sizes")
    arithmetic_norm_steps: int = option(100, "arithmetic: gradient-norm steps per batch size")
    estimator: str = option(
        "trl/grpo",
        "the trainer's estimator plan is told (--trainer-estimator): its G* against the exact one",
    )
    draws: int = option(4000, "plan's parametric draws for the intervals")
    seed: int = option(0, "seed of the instances, the logs and the intervals")
    out: str = option("results/plancheck", "output folder (logs/, tables, figure)", key=False)

    def validate(self) -> None:
        for env in self.env:
            validate.choice("env", env, ENVS)
        for fmt in self.formats:
            validate.choice("formats", fmt, FORMATS)
        if not self.env or not self.formats:
            raise validate.ConfigError("env/formats: got an empty list; allowed: one or more")
        check_sizes(
            self.steps, self.B, self.G, self.norm_batches, self.norm_steps, self.seed, self.prompts
        )
        check_sizes(
            self.arithmetic_steps,
            self.arithmetic_B,
            self.G,
            self.arithmetic_norm_batches,
            self.arithmetic_norm_steps,
            self.seed,
            500,
            "questions",
        )
        validate.integer("draws", self.draws, 10)
        estimators.check_reward_only("estimator", self.estimator, "plan reads their count tables")


def cells(cfg: Config) -> int:
    return len(cfg.env) * len(cfg.formats)


def simulate(cfg: Config, env: str) -> Simulated:
    if env == "bandit":
        return simulate_bandit(
            steps=cfg.steps,
            B=cfg.B,
            G=cfg.G,
            norm_batches=cfg.norm_batches,
            norm_steps=cfg.norm_steps,
            seed=cfg.seed,
            prompts=cfg.prompts,
        )
    return simulate_arithmetic(
        steps=cfg.arithmetic_steps,
        B=cfg.arithmetic_B,
        G=cfg.G,
        norm_batches=cfg.arithmetic_norm_batches,
        norm_steps=cfg.arithmetic_norm_steps,
        seed=cfg.seed,
    )


def write_logs(sim: Simulated, folder, formats) -> dict:
    """{format: path} of the log written as that framework writes it, plus ``norms.csv``."""
    from pathlib import Path

    from gpolab.labs.plan import rollouts

    folder = Path(folder)
    f = sim.frame.rename(columns={"proxy": PROXY})
    paths = {}
    if "trl" in formats:
        trl = f.rename(columns={"reward": REWARD}).assign(advantage=0.0)
        rollouts.write_trl(folder / "trl", trl, reward_columns=(REWARD,), extra_columns=(PROXY,))
        paths["trl"] = folder / "trl"
    if "verl" in formats:
        verl = f.rename(columns={"completion": "output", "reward": "score"})
        verl = verl.assign(gts=verl["prompt_id"].astype(str))
        rollouts.write_verl(folder / "verl", verl, extra_columns=(PROXY,))
        paths["verl"] = folder / "verl"
    if "table" in formats:
        paths["table"] = rollouts.write_table(
            folder / "table.csv", f[["step", "prompt", "reward", "length", PROXY]]
        )
    norms = folder / "norms.csv"
    sim.norms.to_csv(norms, index=False)
    paths["norms"] = norms
    return paths


def run(cfg: Config, key=None, *, store=None, progress=None) -> dict:
    """``{results}``: per env, format and quantity the truth, what ``plan`` recovered and its
    interval."""
    from gpolab.labs.plan import lab as plan

    cfg.validate()
    rows = []
    for env in cfg.env:
        sim = simulate(cfg, env)
        paths = write_logs(sim, f"{cfg.out}/logs/{env}", cfg.formats)
        for fmt in cfg.formats:
            pcfg = plan.Config(
                log=str(paths[fmt]),
                format=fmt,
                proxy_column=PROXY,
                grad_norms=str(paths["norms"]),
                trainer_estimator=cfg.estimator,
                G=REPORT_G,
                draws=cfg.draws,
                seed=cfg.seed,
                out=f"{cfg.out}/plan-{env}-{fmt}",
            )
            tables = plan.run(pcfg)
            rows += compare(sim.truth, tables, cfg, env=env, format=fmt)
            if progress is not None:
                progress.update(1, f"{env} {fmt}")
    return {"results": pd.DataFrame(rows)}


def _row(quantity, truth, recovered, lo=np.nan, hi=np.nan, G=np.nan, **ids) -> dict:
    covered = bool(lo <= truth <= hi) if np.isfinite(lo) and np.isfinite(hi) else None
    return {
        **ids,
        "quantity": quantity,
        "G": G,
        "truth": float(truth),
        "recovered": np.nan if recovered is None else float(recovered),
        "lo": lo,
        "hi": hi,
        "covered": covered,
    }


def compare(truth: dict, tables: dict, cfg: Config, **ids) -> list[dict]:
    """Truth against plan's answers: mean difficulty, the degenerate curve at REPORT_G (one fit:
    its intervals are correlated, not independent checks), the logged fraction, c1, C3, G*."""
    from gpolab.labs.plan import lab as plan

    p = plan.pooled(tables)
    rows = [
        _row("mean difficulty", truth["mean_V"], p["mean_p"], p["mean_p_lo"], p["mean_p_hi"], **ids)
    ]
    curve = tables["curve"]
    curve = curve[curve["window"] == plan.POOLED].set_index("G")
    for G in REPORT_G:
        c = curve.loc[G]
        rows.append(
            _row(
                "degenerate fraction",
                truth["degenerate"][G],
                c["predicted"],
                c["lo"],
                c["hi"],
                G=G,
                **ids,
            )
        )
    se = p["logged_measured_se"]
    rows.append(
        _row(
            "logged degenerate fraction",
            truth["degenerate"][p["G"]],
            p["logged_measured"],
            p["logged_measured"] - 1.96 * se,
            p["logged_measured"] + 1.96 * se,
            G=p["G"],
            **ids,
        )
    )
    for name in ("c1", "C3"):
        rows.append(_row(name, truth[name], p.get(f"gstar_{name}"), **ids))
    rows.append(
        _row(
            "G*",
            truth["gstar"],
            p.get("gstar"),
            _num(p.get("gstar_lo")),
            _num(p.get("gstar_hi")),
            **ids,
        )
    )
    return rows + safe_rows(truth, p, **ids) + estimator_rows(truth, p, cfg.estimator, **ids)


def safe_rows(truth: dict, p: dict, **ids) -> list[dict]:
    """plan's safe G for loo (:func:`gpolab.theory.gstar.safe_g`): that G against the exact best
    of the sizes it chooses among (the truth's c1, C2, C3 at the log's responses per step), and
    the exact noise excess at it over the best against the bound plan states (covered when
    within it)."""
    from gpolab.theory import gstar

    G, bound = p.get("safe_G"), p.get("safe_regret")
    grid = gstar.settable(p["budget"])  # the sizes plan chooses among
    c = groupsize.Constants(truth["c1"], truth["C2"], truth["C3"])
    noise = groupsize.fixed_n_mse(c, 1, np.asarray(grid, np.float64))
    best = grid[int(np.argmin(noise))]
    excess = np.nan if G is None else float(noise[grid.index(G)] / noise.min() - 1)
    lo, hi = (np.nan, np.nan) if G is None else (0.0, float(bound))
    return [
        _row("safe G (loo)", best, G, **ids),
        _row("noise excess at plan's safe G (loo)", excess, bound, lo, hi, **ids),
    ]


def estimator_rows(truth: dict, p: dict, spec: str, **ids) -> list[dict]:
    """G* of the trainer's estimator: the exact one (the env's per-prompt truth, the rescaled
    target of :func:`gpolab.theory.gstar_model.exact_criteria` at the log's responses per step,
    on the sizes plan chooses among)
    against plan's (the transfer model), and the exact noise-to-signal excess at plan's G* over
    the exact best (0: plan's G is the best; the cost of the model's error)."""
    from gpolab.theory import gstar, gstar_model

    ex = gstar_model.exact_criteria(truth["exact"], spec, p["budget"], gstar.settable(p["budget"]))
    best = int(ex["G"][np.argmin(ex["rescaled"])])
    got = p.get("estimator_gstar")
    excess = np.nan if got is None else gstar_model.noise_excess(ex, got)
    lo, hi = _num(p.get("estimator_gstar_lo")), _num(p.get("estimator_gstar_hi"))
    return [
        _row("G* of the trainer's estimator", best, got, lo, hi, **ids),
        _row("noise excess at plan's G*", 0.0, excess, **ids),
    ]


def _num(v) -> float:
    return np.nan if v is None else float(v)


def report(cfg: Config, tables: dict) -> str:
    from gpolab.kit.tables import table_text

    df = tables["results"]
    first = df[df["format"] == df["format"].iloc[0]]
    cols = ["env", "quantity", "G", "truth", "recovered", "lo", "hi", "covered"]
    return (
        f"gpolab plan on simulated logs ({df['format'].iloc[0]} format shown), truth vs "
        "recovered with its 95% interval:\n" + table_text(first, cols)
    )


def notes(cfg: Config, tables: dict) -> str:
    df = tables["results"]
    lines = []
    same = df.groupby(["env", "quantity", "G"], dropna=False)["recovered"].agg(
        lambda s: s.max() - s.min()
    )
    lines.append(
        f"formats read: {', '.join(dict.fromkeys(df['format']))}; largest difference "
        f"between formats of any recovered number: {float(same.abs().max()):.3g}"
    )
    for env, sub in df[df["format"] == df["format"].iloc[0]].groupby("env", sort=False):
        has = sub[sub["covered"].notna()]
        lines.append(
            f"{env}: truth inside the 95% interval for {int(has['covered'].sum())} of "
            f"{len(has)} quantities (the degenerate curve's G share one fit: correlated)"
        )
    return "\n".join(lines)


def figures(tables: dict) -> dict:
    from gpolab.labs.plan import plots

    return {"plancheck.png": plots.plancheck_figure}
