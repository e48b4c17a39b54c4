"""``gpolab plan --allocate``: a group size per prompt for the next steps (theory §12)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpolab import validate
from gpolab.labs.plan.config import Config
from gpolab.labs.plan.report import pooled

ALLOCATION_CAP = 8  # the largest group the allocation gives: this many times the log's G


def allocation_table(cfg: Config, tables: dict):
    """``plan --allocate``: a group size per prompt for the next steps (theory §12).

    Each prompt's p gets the Beta posterior of its logged rewards under the pooled beta-binomial
    fit as prior (a + successes, b + failures: empirical Bayes); gpolab's reward-only rule (the
    ``gpolab`` entry of :mod:`gpolab.labs.allocate.rules`) then spreads the log's own budget —
    its modal G per prompt, over the prompts seen — to minimize the posterior-expected MSE,
    keeping every prompt (G ≥ 2, at most ALLOCATION_CAP × G).  Beside each G: the prompt's
    predicted share of the step's MSE and of zero-signal groups, at the log's G and at its own.
    Returns (table, summary dict); binary rewards only."""
    from gpolab.theory import allocation as theory

    p = _fitted(pooled(tables))
    g = tables["groups"]
    per = g.groupby("prompt", sort=True).agg(
        groups=("n", "size"), responses=("n", "sum"), successes=("successes", "sum")
    )
    a, b, G0 = float(p["a"]), float(p["b"]), int(p["G"])
    alpha = a + per["successes"].to_numpy(float)
    beta = b + (per["responses"] - per["successes"]).to_numpy(float)
    cap = max(ALLOCATION_CAP * G0, 4)
    a1, a0, reasons = theory.tables(cfg.allocate_estimator, cap)
    curve = theory.posterior_curves(a1, a0, alpha, beta, cfg.allocate_rho)
    P = len(per)
    G = theory.greedy(curve, np.ones(P), G0 * P) if G0 >= 2 else np.full(P, G0)
    uniform = np.full(P, G0)
    mse_u, mse_a = (np.take_along_axis(curve, x[:, None], -1)[:, 0] for x in (uniform, G))
    zs_u, zs_a = _zero_signal(alpha, beta, uniform), _zero_signal(alpha, beta, G)
    table = pd.DataFrame(
        {
            "prompt": per.index.astype(str),
            **{k: per[k].to_numpy() for k in ("groups", "responses", "successes")},
            "p_mean": alpha / (alpha + beta),
            "G": G.astype(int),
            "G_log": uniform,
            "mse_share_log": mse_u / mse_u.sum(),
            "mse_share": mse_a / mse_u.sum(),
            "zero_signal_log": zs_u,
            "zero_signal": zs_a,
        }
    )
    return table, _summary(cfg, curve, G, uniform, (a, b, cap), (mse_u, mse_a), (zs_u, zs_a))


def _fitted(p: dict) -> dict:
    """The pooled row ``p`` when it has a binary difficulty fit; else one line saying why not."""
    if p.get("rewards") != "binary":
        raise validate.ConfigError(
            "allocate: needs binary rewards and a difficulty fit (give --success-threshold for "
            "a graded log)"
        )
    if p.get("a") is None:
        raise validate.ConfigError(f"allocate: needs a difficulty fit, and {p['fit_reason']}")
    return p


def _summary(cfg: Config, curve, G, uniform, prior, mse, zs) -> dict:
    """The allocation's JSON summary (``prior``: the pooled fit's a, b and the largest G): sizes,
    the predicted MSE ratio and the zero-signal groups and rollouts per pass, at the log's G
    (``uniform``) and allocated (``G``)."""
    from gpolab.theory import allocation as theory

    (a, b, cap), (mse_u, mse_a), (zs_u, zs_a) = prior, mse, zs
    return {
        "estimator": cfg.allocate_estimator,
        "rho": cfg.allocate_rho,
        "prompts": len(G),
        "G_log": int(uniform[0]),
        "budget_per_pass": int(G.sum()),
        "prior_a": a,
        "prior_b": b,
        "G_min": int(G.min()),
        "G_max": int(G.max()),
        "cap": cap,
        "convex": theory.is_convex(curve),
        "predicted_mse_ratio": float(mse_a.sum() / mse_u.sum()),
        "zero_signal_groups_log": float(zs_u.sum()),
        "zero_signal_groups": float(zs_a.sum()),
        "zero_signal_rollouts_log": float(zs_u @ uniform),
        "zero_signal_rollouts": float(zs_a @ G),
        "model": MODEL,
    }


MODEL = (
    "reward-only: E||W||^2 the same for every response, ||g_x||^2 = rho p(1-p); "
    "posterior Beta(a + successes, b + failures) per prompt, the pooled fit as prior"
)


def _zero_signal(alpha, beta, size):
    """E[p^G + (1 − p)^G] under each prompt's posterior Beta(alpha, beta)."""
    from scipy.special import betaln

    return np.exp(betaln(alpha + size, beta) - betaln(alpha, beta)) + np.exp(
        betaln(alpha, beta + size) - betaln(alpha, beta)
    )


def allocation_text(summary: dict) -> str:
    s = summary
    return "\n".join(
        [
            "## Allocation (--allocate)",
            f"Per-prompt group sizes for {s['prompts']} prompts at the log's budget "
            f"({s['G_log']} per prompt, {s['budget_per_pass']} per pass over them): G from "
            f"{s['G_min']} to {s['G_max']} ({s['estimator']}, rho = {s['rho']:g}).",
            f"Predicted MSE against G = {s['G_log']} for every prompt: "
            f"x{s['predicted_mse_ratio']:.3f} (under the reward-only model: " + s["model"] + ").",
            f"Zero-signal groups per pass: {s['zero_signal_groups_log']:.1f} at the log's G, "
            f"{s['zero_signal_groups']:.1f} allocated ({s['zero_signal_rollouts_log']:.0f} and "
            f"{s['zero_signal_rollouts']:.0f} rollouts).",
            "allocation.csv (prompt, G, ...) is the table a script applies: give prompt x "
            "G responses when it is next drawn.",
        ]
    )
