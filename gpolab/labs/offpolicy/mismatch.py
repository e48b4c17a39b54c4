"""The rollout–training mismatch against the exact gradient (issue 43; the off-policy lab's).

A batch of B prompts × G responses of T tokens is drawn from the sampler's policy μ
(:func:`gpolab.envs.markov.behaviour_logits`), while the trainer's π_θ is the policy whose exact
gradient g = ∇J(θ) the env gives (:mod:`gpolab.envs.markov`).  Advantages are leave-one-out
(unbiased on-policy), and a correction of :mod:`gpolab.estimators.mismatch` turns them into
per-token weights with its framework's denominator; the estimate is

    ĝ = T · Σ_batch Σ_t w_t ∇ log π_θ(y_t | x, y_{t−1}),

T times the per-token aggregation, so that with no mismatch every correction's estimate is the
plain leave-one-out gradient, unbiased for g (responses have exactly T tokens).  Over seeds:
bias² = ‖E ĝ − g‖² (the unbiased estimate, with its standard error from ``splits`` independent
seed batches), variance = tr Cov ĝ, MSE, cos(E ĝ, g), scale = E ĝ·g/‖g‖² (1: no shrinkage; a
correction that zeroes most sequences drives it to 0) and the share of tokens the correction
truncated, masked or rejected.  gpolab's measurement; the corrections are ported from their
frameworks' code (each registry entry names its source).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from gpolab import engine, estimators, validate
from gpolab.envs import markov
from gpolab.estimators import mismatch

# the frameworks' defaults, as the decision table names them: TRL's vLLM IS mode (GRPOConfig
# vllm_importance_sampling_mode = sequence_mask, cap 3) and verl's (rollout_is off: none)
DEFAULTS = {"trl": "trl/sequence_mask", "verl": "none"}
SCHEMA = 3  # the mismatch rows' store schema (2: the total-variation columns; 3: the large
# batch measured for batch-dependent entries, the π-sampled mean of unresolved sequence weights)
LARGE_B = 512  # the decision's large batch: prompts per step of a production run
JSON = (
    "T",
    "mismatch",
    "mismatch_kl",
    "mismatch_kl_seq",
    "mismatch_chi2_seq",
    "correction",
    "yours",
    "truncated_share",
    "truncated_share_se",
    "bias_sq_se",
    "variance_se",
    "rel_mse",
    "rel_mse_se",
    "cos_se",
    "scale",
    "scale_se",
    "resolved",
    "large_from",
    "mse_large",
    "mse_large_se",
)


@dataclasses.dataclass(frozen=True)
class Cell:
    """One measurement's static shape: the correction, B prompts, G responses, and the
    correction's overridden options as (name, value) pairs."""

    correction: str
    B: int
    G: int
    options: tuple = ()


def _batch(key, cell: Cell, params, theta, mu, sampler) -> tuple:
    """B prompts × G responses drawn from the logit table ``sampler`` (μ's or π_θ's), with their
    rewards and per-token log-probabilities under π_θ and under μ."""
    k_prompts, k_responses = jax.random.split(key)
    prompts = markov.sample_prompts(k_prompts, params, cell.B)
    ys, rewards = markov.sample_table(k_responses, params, sampler, prompts, cell.G)
    logp = markov.table_logp(params, markov.table(params, theta), prompts, ys)
    return prompts, ys, rewards, logp, markov.table_logp(params, mu, prompts, ys)


def per_seed(cell: Cell, key: jax.Array, args: tuple) -> dict:
    """One batch from μ: the error e = ĝ − g, ‖e‖² and the flagged share."""
    params, theta, mu, g = args
    prompts, ys, rewards, logp, logp_mu = _batch(key, cell, params, theta, mu, mu)
    A = estimators.loo_advantages(rewards)
    est = mismatch.estimate_weights(
        cell.correction, A, logp, logp_mu, jnp.ones_like(logp), **dict(cell.options)
    )
    ghat = params.T * markov.token_gradient(params, theta, prompts, ys, est.w)
    e = ghat - g
    return {"err": e, "sq": e @ e, "flagged": est.flagged_share}


def truth(params: markov.MarkovParams, theta, kind: str, size: float) -> tuple:
    """(μ's logit table, the exact g at θ, the mismatch's exact size as floats) of one cell."""
    mu = markov.behaviour_logits(params, theta, kind, size)
    sizes = {k: float(v) for k, v in markov.mismatch(params, theta, mu).items()}
    return mu, markov.exact(params, theta).g, sizes


def per_seed_pi(cell: Cell, key: jax.Array, args: tuple) -> dict:
    """One batch from π_θ for the mean of a sequence-weighted correction (coefficient A·ω(y)):
    m = T·Σ_batch u·(r − V_μ(x))·Σ_t ∇log π_θ / (B·G·T) with u = ω·μ/π ≤ 1 where ω ≤ π/μ, whose
    mean is E ĝ under μ (iid group members: E_μ[A ω s | x] = E_μ[r ω s | x] − V_μ(x) E_μ[ω s | x];
    gpolab's identity).  The error e = m − g; ``sq`` is this sampler's, not ĝ's."""
    params, theta, mu, g, v_mu = args
    pi = markov.table(params, theta)
    prompts, ys, rewards, logp, logp_mu = _batch(key, cell, params, theta, mu, pi)
    ones = jnp.ones_like(rewards)
    omega = mismatch.correction(cell.correction, ones, logp, logp_mu, jnp.ones_like(logp),
                                **dict(cell.options)).coef[..., 0]  # fmt: skip
    log_ratio = jnp.sum(logp - logp_mu, axis=-1)
    u = jnp.where(omega > 0, jnp.exp(jnp.log(jnp.where(omega > 0, omega, 1.0)) - log_ratio), 0.0)
    c = u * (rewards - v_mu[prompts][:, None]) / rewards.size
    e = markov.token_gradient(params, theta, prompts, ys, jnp.broadcast_to(c[..., None], ys.shape))
    e = e - g
    return {"err": e, "sq": e @ e, "flagged": jnp.zeros((), e.dtype)}


def _moments(parts: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the mean error per split (S, D), mean ‖e‖² per split, mean flagged share per split)."""
    mean_e = np.stack([m.mean("err") for m in parts]).astype(np.float64)
    sq = np.array([m.mean("sq") for m in parts], np.float64)
    return mean_e, sq, np.array([m.mean("flagged") for m in parts], np.float64)


def _summary(mean_e, sq, n: int, g) -> dict:
    """bias², variance, MSE (and relative to ‖g‖²) with SEs over the S splits of ``n`` seeds
    each, and cos, scale of the mean estimate with jackknife SEs over the splits."""
    S = len(sq)
    # per split: bias² = ‖ē‖² − tr Cov/n (unbiased), variance = n/(n − 1)(mean ‖e‖² − ‖ē‖²)
    var = n / (n - 1) * (sq - np.sum(mean_e**2, axis=1))
    bias = np.sum(mean_e**2, axis=1) - var / n
    g_np = np.asarray(g, np.float64)
    g_sq = float(g_np @ g_np)

    def cos_scale(e, b):  # of the mean estimate E ĝ = g + e, given the unbiased bias² b
        scale = 1.0 + e @ g_np / g_sq
        norm_sq = 2.0 * scale - 1.0 + b / g_sq  # ‖E ĝ‖²/‖g‖², the Monte Carlo noise removed
        return (scale / math.sqrt(norm_sq) if norm_sq > 0 else math.nan), scale

    full = np.array(cos_scale(mean_e.mean(0), bias.mean()))
    loo = np.array(
        [
            cos_scale((mean_e.sum(0) - mean_e[i]) / (S - 1), (bias.sum() - bias[i]) / (S - 1))
            for i in range(S)
        ]
    )
    jack = np.sqrt((S - 1) / S * np.sum((loo - loo.mean(0)) ** 2, axis=0))
    out = {}
    for name, x in (("bias_sq", bias), ("variance", var), ("mse", sq), ("rel_mse", sq / g_sq)):
        out[name], out[f"{name}_se"] = _mean_se(x)
    out["cos"], out["scale"] = (float(v) for v in full)  # scale: 1 unbiased, 0 collapsed
    out["cos_se"], out["scale_se"] = (float(v) for v in jack)
    out["g_sq"] = g_sq
    return out


def _mean_se(x) -> tuple[float, float]:
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(len(x)))


MEAN_ONLY = ("variance", "mse", "rel_mse")  # withheld where μ's draws cannot see the weight's tail
RESOLVE = 0.01  # resolved: the weight's variance bound at most RESOLVE × the sequences drawn


def resolution(name: str, options: dict, chi2_seq: float, n_sequences: int) -> str:
    """Whether sampling from μ resolves a sequence-weighted correction's row (gpolab's rule): its
    weight ω ≤ W has Var_μ ω ≤ min(1 + χ²_seq, W²) (χ²_seq = χ²(π‖μ) over whole responses, exact);
    the row is resolved when that bound is at most ``RESOLVE`` × the responses drawn (the weight's
    own mean then known to ±0.1 at one SE).  Else its mean comes from :func:`per_seed_pi`, which
    sees the tail (u = ω·μ/π ≤ 1), and its variance and MSE are withheld.  "" for the rows it
    does not concern (bounded weights: token level, masks, rejections)."""
    bound = mismatch.sequence_weight_bound(name, options)
    if bound is None:
        return ""
    var = min(1.0 + chi2_seq, bound**2)
    if var <= RESOLVE * n_sequences:
        return ""
    return (
        f"mean from pi: Var_mu(w) <= {var:.3g} > {RESOLVE:g} x {n_sequences} responses drawn; "
        "variance and MSE withheld"
    )


def measure(
    params: markov.MarkovParams,
    theta,
    kind: str,
    size: float,
    correction: str,
    *,
    B: int = 8,
    G: int = 4,
    seeds: int = 4096,
    splits: int = 8,
    key=None,
    options: dict | None = None,
    exact: tuple | None = None,
    chunk: int = 0,
) -> dict:
    """bias², variance, MSE (and relative to ‖g‖²), cos, scale and the truncated share of
    ``correction`` under the mismatch (``kind``, ``size``) at θ, with standard errors from
    ``splits`` seed batches of ``seeds // splits`` each (cos: the jackknife over the batches),
    and the mismatch's exact size (:func:`gpolab.envs.markov.mismatch`).  ``exact``: the cell's
    :func:`truth` when the caller has it.  All corrections measured with the same ``key`` see
    the same draws (paired).  A sequence weight that μ's draws cannot resolve
    (:func:`resolution`) takes its bias², cos and scale from draws of π (:func:`per_seed_pi`,
    on the key folded with 1) and withholds its variance and MSE (NaN); ``resolved`` says so."""
    key = jax.random.key(0) if key is None else key
    mu, g, size_of = truth(params, theta, kind, size) if exact is None else exact
    cell = Cell(correction, B, G, tuple(sorted((options or {}).items())))
    n = seeds // splits
    parts = [
        engine.run(per_seed, cell, (params, theta, mu, g), jax.random.fold_in(key, s), n, chunk)
        for s in range(splits)
    ]
    mean_e, sq, flagged = _moments(parts)
    out = {"T": params.T, "kind": kind, "size": size, "correction": correction, "B": B, "G": G}
    out.update(_summary(mean_e, sq, n, g))
    out["truncated_share"], out["truncated_share_se"] = _mean_se(flagged)
    why = resolution(correction, options or {}, size_of["chi2_seq"], n * splits * B * G)
    if why:
        v_mu = markov.values(params, mu.reshape(-1))[1]
        pi_key = jax.random.fold_in(key, 1)
        args = (params, theta, mu, g, v_mu)
        pi = [
            engine.run(per_seed_pi, cell, args, jax.random.fold_in(pi_key, s), n, chunk)
            for s in range(splits)
        ]
        pi_e, pi_sq, _ = _moments(pi)
        mean = _summary(pi_e, pi_sq, n, g)
        out.update({k: v for k, v in mean.items() if not k.startswith(MEAN_ONLY)})
        out.update({k: math.nan for k in out if k.startswith(MEAN_ONLY)})
    out["resolved"] = why or "yes"
    return {**out, **{f"mismatch_{k}": v for k, v in size_of.items()}}


# ---------------------------------------------------------------- the lab's mismatch mode
# ``gpolab offpolicy --env markov``: one unit per (T, mismatch, correction); the corrections of
# one (T, mismatch) share their draws, and so do the mismatches of one T (common random numbers).


def check(cfg) -> None:
    """The mismatch grid's checks (plain Python, before anything is traced); the user's own
    correction (``from_config``) is read here, so a bad file is one error before any run."""
    for field in ("T", "mismatch", "correction"):
        if len(getattr(cfg, field)) == 0:
            raise validate.ConfigError(f"{field}: got an empty list; allowed: one or more values")
    validate.integers("T", cfg.T, 1)
    validate.at_most("T", cfg.T, 4096, "the exact gradient's dynamic program is O(T²A²)")
    for spec in cfg.mismatch:
        markov.parse_mismatch(spec)
    for spec in cfg.correction:
        mismatch.parse(spec)
    yours(cfg)


@functools.cache
def _yours(path: str, stamp) -> tuple[str, str]:
    """:func:`yours` of the file at ``path`` as it was at ``stamp`` (its mtime, or None when it
    cannot be read: the reader then gives the one error naming it)."""
    from gpolab.labs.offpolicy import from_config

    found = from_config.correction_of(from_config.read(path))
    if found["name"] is None:
        raise validate.ConfigError(f"from_config: {path}: {found['text']}")
    text = found["text"] + "".join(f"\n  - {note}" for note in found["notes"])
    return mismatch.spec(found["name"], found["overrides"]), text


def yours(cfg) -> tuple[str, str] | None:
    """(the correction spec, one sentence naming it) of ``cfg.from_config``, or None."""
    if not cfg.from_config:
        return None
    path = str(cfg.from_config)
    try:  # read once per run, but again when the file changes (a long-lived session)
        stamp = os.stat(path).st_mtime_ns
    except OSError:
        stamp = None
    return _yours(path, stamp)


def specs(cfg) -> list[str]:
    """The corrections measured, each spelled once (:func:`gpolab.estimators.mismatch.spec`),
    the user's own (``from_config``) last unless the grid has it."""
    out = [mismatch.spec(*mismatch.parse(c)) for c in cfg.correction]
    mine = yours(cfg)
    return list(dict.fromkeys(out + ([mine[0]] if mine else [])))


def units(cfg) -> list[dict]:
    return [
        {"T": int(T), "mismatch": m, "correction": c}
        for T in cfg.T
        for m in cfg.mismatch
        for c in specs(cfg)
    ]


@functools.lru_cache(maxsize=8)
def _cell_truth(instance, T: int, spec: str) -> tuple:
    params = markov.make(dataclasses.replace(instance, length=T))
    theta = markov.init_theta(params)
    return params, theta, truth(params, theta, *markov.parse_mismatch(spec))


def large_seeds(cfg) -> int:
    """Seeds for a batch-dependent entry's measurement at ``LARGE_B`` prompts: the measured
    batch's prompt draws (seeds × B / LARGE_B), at least two per split."""
    return max(cfg.seeds * cfg.instance.batch // LARGE_B, 2 * SPLITS) // SPLITS * SPLITS


SPLITS = 8  # measure's default splits: the seed batches behind every SE


def unit_rows(cfg, unit: dict, key) -> list[dict]:
    """The one row of a (T, mismatch, correction) unit (``key``: its T's draws).  An entry whose
    mean depends on the batch (:func:`gpolab.estimators.mismatch.batch_dependent`) is measured
    again at ``LARGE_B`` prompts (its ``*_large`` columns, ``large_from`` = "measured"); for every
    other entry the large batch's MSE is exact from the measured one (``large_from`` = "exact")."""
    params, theta, exact = _cell_truth(cfg.instance, unit["T"], unit["mismatch"])
    kind, size = markov.parse_mismatch(unit["mismatch"])
    name, options = mismatch.parse(unit["correction"])
    at = functools.partial(
        measure, params, theta, kind, size, name, G=cfg.G, key=key, options=options,
        exact=exact, chunk=cfg.chunk, splits=SPLITS,
    )  # fmt: skip
    r = at(B=cfg.instance.batch, seeds=cfg.seeds)
    entry = mismatch.REGISTRY[name]
    row = {
        "env": cfg.env,
        "T": unit["T"],
        "mismatch": unit["mismatch"],
        "mismatch_kind": kind,
        "mismatch_size": size,
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
    measured = mismatch.batch_dependent(name) and cfg.instance.batch != LARGE_B
    row["large_from"] = "measured" if measured else "exact"
    big = (
        at(B=LARGE_B, seeds=large_seeds(cfg), key=jax.random.fold_in(key, LARGE_B))
        if measured
        else {}
    )
    for col in ("bias_sq", "variance", "mse"):
        for suffix in ("", "_se"):
            row[f"{col}_large{suffix}"] = big.get(f"{col}{suffix}", math.nan)
    row["n_seeds_large"] = large_seeds(cfg) if measured else 0
    return [row]


def at_batch(results: pd.DataFrame, prompts: int) -> pd.DataFrame:
    """The rows' MSE at a batch of ``prompts`` prompts (G responses each), with its SE: where the
    mean update does not depend on the batch (``large_from`` "exact": a fixed denominator) the
    batch is iid prompt groups, so bias² stays and the variance falls as B/``prompts`` exactly;
    where it does (verl's rejection under token-mean), the measurement at ``LARGE_B`` prompts
    (``prompts`` must then be ``LARGE_B``)."""
    f = results["B"] / prompts
    out = results.copy()
    out["mse"] = results["bias_sq"] + f * results["variance"]
    out["mse_se"] = np.hypot(results["bias_sq_se"], f * results["variance_se"])
    if "large_from" in results:
        measured = (results["large_from"] == "measured").to_numpy()
        if measured.any() and prompts != LARGE_B:
            raise ValueError(f"batch-dependent rows are measured at {LARGE_B} prompts only")
        out.loc[measured, "mse"] = results.loc[measured, "mse_large"]
        out.loc[measured, "mse_se"] = results.loc[measured, "mse_large_se"]
    out["rel_mse"] = out["mse"] / results["g_sq"]
    return out


def decide(small: pd.DataFrame, large: pd.DataFrame) -> dict:
    """One cell's choices from its rows at the measured batch (``small``) and at the large one
    (``large``, :func:`at_batch`), each with ``correction``, ``mse``, ``mse_se``, ``rel_mse``,
    ``cos``, ``cos_se``, ``scale``, ``scale_se``: the least MSE at each batch and the best
    direction (largest cos among means resolved along g: scale > 2 SE).  Every registry entry is
    a configuration its framework runs (verl's ratio losses against μ: its default v1 trainer in
    bypass mode), so every row is a candidate."""
    resolved = (small["scale"] > 2 * small["scale_se"]) & np.isfinite(small["cos"])
    least = leader(small, "mse", "mse_se", lower=True)
    big = leader(large, "mse", "mse_se", lower=True)
    best = leader(small[resolved.to_numpy()], "cos", "cos_se", lower=False)
    return {
        "least_mse": least["names"],
        "least_mse_rel": least["rel_mse"],
        "least_mse_cos": least["cos"],
        "least_mse_lead": least["lead"],
        "least_mse_large": big["names"],
        "least_mse_large_rel": big["rel_mse"],
        "least_mse_large_lead": big["lead"],
        "best_cos": best["names"],
        "best_cos_value": best["cos"],
        "best_cos_se": best["cos_se"],
        "best_cos_rel_mse": best["rel_mse"],
        "best_cos_lead": best["lead"],
    }


def decision(results: pd.DataFrame, large: int = LARGE_B) -> pd.DataFrame:
    """Per (T, mismatch): :func:`decide` at the measured batch and at ``large`` prompts (and
    whether each choice leads the runner-up by more than one SE of either), what TRL's and
    verl's defaults give there and, where a run's own config was given, its place in the MSE
    order."""
    if results.empty:
        return pd.DataFrame()
    rows = []
    for (T, spec), g in results.groupby(["T", "mismatch"], sort=False):
        row = {
            "T": int(T),
            "mismatch": spec,
            "mismatch_kl_seq": float(g["mismatch_kl_seq"].iloc[0]),
            "mismatch_chi2_seq": float(g["mismatch_chi2_seq"].iloc[0]),
            "large_B": large,
            **decide(g, at_batch(g, large)),
        }
        for who, name in (*DEFAULTS.items(), *((("yours", None),) if g["yours"].any() else ())):
            at = g[g["yours"]] if who == "yours" else g[g["correction"] == name]
            if at.empty:
                continue
            r = at.iloc[0]
            if who == "yours":
                row["yours"] = r["correction"]
            row[f"{who}_rel_mse"] = float(r["rel_mse"])
            row[f"{who}_rel_mse_large"] = float(at_batch(at.iloc[:1], large)["rel_mse"].iloc[0])
            row[f"{who}_cos"] = float(r["cos"])
            row[f"{who}_scale"] = float(r["scale"])
            withheld = not np.isfinite(r["mse"])  # an unresolved row has no MSE to rank
            row[f"{who}_mse_rank"] = math.nan if withheld else int((g["mse"] < r["mse"]).sum()) + 1
        rows.append(row)
    return pd.DataFrame(rows)


def leader(g: pd.DataFrame, col: str, se: str, *, lower: bool) -> dict:
    """The best row of ``g`` by ``col``: its name (ties, the same numbers, joined by " = "), its
    rel_mse, cos and cos SE, and whether it leads the next different row by more than one SE of
    either ("clear") or not ("within 1 SE of ...")."""
    if g.empty:
        nan = math.nan
        return {"names": "none resolved", "rel_mse": nan, "cos": nan, "cos_se": nan, "lead": ""}
    g = g.sort_values(col, ascending=lower)
    top = g.iloc[0]
    same = np.isclose(g[col], top[col], rtol=1e-9, atol=0.0)
    lead = "—"
    if (~same).any():
        nxt = g[~same].iloc[0]
        clear = abs(nxt[col] - top[col]) > max(top[se], nxt[se])
        lead = "clear" if clear else f"within 1 SE of {nxt['correction']}"
    return {
        "names": " = ".join(g[same]["correction"]),
        "rel_mse": float(top["rel_mse"]),
        "cos": float(top["cos"]),
        "cos_se": float(top["cos_se"]),
        "lead": lead,
    }


REPORT = [
    "T",
    "mismatch",
    "mismatch_kl_seq",
    "correction",
    "truncated_share",
    "bias_sq",
    "variance",
    "rel_mse",
    "cos",
    "scale",
]
DECISION = [
    "T",
    "mismatch",
    "mismatch_kl_seq",
    "least_mse",
    "least_mse_rel",
    "least_mse_cos",
    "least_mse_lead",
    "least_mse_large",
    "least_mse_large_rel",
    "best_cos",
    "best_cos_value",
    "best_cos_lead",
    "trl_rel_mse",
    "trl_rel_mse_large",
    "trl_cos",
    "verl_rel_mse",
    "verl_rel_mse_large",
    "verl_cos",
    "yours_rel_mse",
    "yours_rel_mse_large",
    "yours_cos",
    "yours_mse_rank",
]


def notes(cfg, tables: dict) -> list[str]:
    """The decision table, and where the user's own setting lands."""
    from gpolab.kit.tables import table_text

    dec = tables["decision"]
    lines = [
        "",
        "Which correction (rel_mse = MSE/|g|^2 at the measured batch; _large: at "
        f"{LARGE_B} prompts, bias^2 + variance*B/{LARGE_B} (exact where the mean update does not "
        f"depend on the batch), measured at {LARGE_B} prompts for verl's rejections (their "
        "token-mean counts the batch's kept tokens); cos of the mean estimate with g; "
        f"trl: TRL's default {DEFAULTS['trl']}, verl: verl's default {DEFAULTS['verl']}):",
        table_text(dec, [c for c in DECISION if c in dec]),
    ]
    res = tables.get("results", pd.DataFrame())
    if "resolved" in res and (res["resolved"] != "yes").any():
        lines += [
            "",
            "Unresolved by draws from the sampler (bias^2, cos and scale from draws of pi with "
            "the bounded weight w*mu/pi; variance and MSE withheld):",
            table_text(res[res["resolved"] != "yes"], ["T", "mismatch", "correction", "resolved"]),
        ]
    mine = yours(cfg)
    if mine is not None:
        lines += ["", f"Your config ({cfg.from_config}): {mine[1]}"]
    return lines
