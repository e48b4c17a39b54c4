"""``gpolab plan``'s G* columns of the pooled summary row: loo's G* from the log's constants,
the safe G over their joint region, the run's own estimator's G* under the transfer model, the
prices of the lead and the run's G, and the training rule (:mod:`gpolab.labs.plan.lab`)."""

from __future__ import annotations

import json
import math

import numpy as np

from gpolab import validate
from gpolab.labs.plan.config import Config
from gpolab.theory import gstar


def gstar_row(cfg: Config, log, levels, norms) -> dict:
    """G* and its terms when the proxy column and gradient norms allow; else the reason."""
    none = {"gstar": None, "gstar_lo": None, "gstar_hi": None}
    f = log.frame
    if levels is None:
        return {**none, "gstar_reason": "G* needs binary rewards (the loo MSE law per prompt)"}
    if f["reward"].nunique() < 2:
        return {
            **none,
            "gstar_reason": "undefined: every group is all-equal, so no group of "
            "this log carries a gradient signal (loo's gradient is 0 on each) and the "
            "prompts' gradient variance c1 has nothing to be estimated from",
        }
    if not f["proxy"].notna().any():
        return {
            **none,
            "gstar_reason": "rewards alone cannot give ||g_x||^2, tr Sigma_oracle or "
            "the prompt variance c1, hence not G* = 1 + sqrt(C3/c1): give --proxy-column "
            "(per-response ||grad log pi||^2) and --grad-norms (||g_hat|| at two batch sizes)",
        }
    f, G = gstar.measured(f)  # the groups whose every response carries the proxy
    z = (f["reward"].to_numpy() == levels[1]).astype(float)
    args = (z, f["proxy"].to_numpy(float), f["group"].to_numpy())
    if norms is None:
        out = gstar.gstar_bounds(*args)
    else:
        out = gstar.gstar(
            *args,
            norms,
            G,
            seed=cfg.seed,
            clusters=f["prompt"].to_numpy(),
            keep_replicates=True,
            pairs=gstar.pairs_of(f),
        )
    reason, replicates = out.pop("reason", None), out.pop("replicates", None)
    out["proxy_groups"] = int(f["group"].nunique())
    out["norm_rows"] = 0 if norms is None else len(norms)
    return {
        **none,
        **{k: out.get(k) for k in ("gstar", "gstar_lo", "gstar_hi")},
        **{f"gstar_{k}": v for k, v in out.items() if k not in none},
        "gstar_reason": reason,
        "replicates": replicates,
    }


def safe_row(p: dict, replicates) -> dict:
    """loo's G with the least worst-case noise excess over the best G over the joint 95% region
    the log's bootstrap replicates allow (:func:`gpolab.theory.gstar.safe_g`), among the sizes
    the run can set at its responses per step: given whether or not the log decides G*; with
    ``safe_c1_max``, the largest c1 of that region, and ``excess`` (popped by :func:`run`)."""
    out = {"safe_G": None, "safe_regret": None, "safe_c1_max": None}
    if replicates is None or not p.get("budget"):
        return out
    safe = gstar.safe_g(replicates, float(p["budget"]), df=_df(p))
    if safe["G"] is None:
        return out
    return {
        "safe_G": safe["G"],
        "safe_regret": safe["regret"],
        "safe_c1_max": safe["c1_max"],
        "excess": safe["excess"],
    }


def price_row(p: dict, loo: dict | None, est: dict | None) -> dict:
    """The one G the report leads with, and the price of the run's own G and of the settable
    sizes next to the lead (gpolab's rule; issue 56).  ``loo``/``est``: the excess tables
    (:func:`gpolab.theory.gstar.excess`) of loo and of the run's estimator over the joint
    region, on the sizes the run can set.  The lead: for the run's estimator when it is
    modelled, else loo; when the log decides loo's G*, the settable G with the least noise at
    the region's centre (the log's constants), else the one with the least worst-case excess
    (the safe G).  Each price: the excess at the centre and its least and largest over the
    region ("costs 0% .. 12% more noise than the best G")."""
    out = {
        "lead_G": None,
        "lead_for": None,
        "lead_rule": None,
        **{f"{w}_excess{k}": None for w in ("lead", "current") for k in ("", "_lo", "_hi")},
        "current_G": p.get("G"),
        "prices": None,
    }
    ex, who = (est, p.get("estimator_spec")) if est and est.get("used") else (loo, "loo")
    if not ex or not ex.get("used"):
        out["lead_rule"] = "no G: needs loo's constants from score norms and gradient norms"
        return out
    decided = p.get("gstar") is not None and _finite_all(p.get("gstar_hi"))
    by = ex["point"] if decided and np.isfinite(ex["point"]).any() else ex["hi"]
    i = int(np.nanargmin(by))
    sizes = [int(g) for g in ex["G"]]

    def price(j: int) -> dict:
        return {"G": sizes[j], **{k: _float(ex[k][j]) for k in ("point", "lo", "hi")}}

    def fields(who: str, r: dict) -> dict:  # lead_excess, lead_excess_lo, lead_excess_hi
        return {f"{who}_excess{k}": r[c] for k, c in (("", "point"), ("_lo", "lo"), ("_hi", "hi"))}

    rows = [price(j) for j in sorted({max(i - 1, 0), i, min(i + 1, len(sizes) - 1)})]
    if p.get("G") in sizes:
        cur = price(sizes.index(p["G"]))
        out |= fields("current", cur)
        rows = [r for r in rows if r["G"] != cur["G"]] + [cur]
    lead = price(i)
    out |= fields("lead", lead)
    out |= {
        "lead_G": lead["G"],
        "lead_for": who,
        "lead_rule": "decided: the least noise at the log's constants"
        if by is ex["point"]
        else "not decided: the least worst-case excess over the joint 95% region",
        "prices": json.dumps(sorted(rows, key=lambda r: r["G"])),
    }
    return out


def _df(p: dict) -> float:
    """The bootstrap's degrees of freedom (:func:`gpolab.theory.gstar.radius`), inf if unknown."""
    df = p.get("gstar_boot_df")
    return float(df) if _finite_all(df) else math.inf


def _float(x) -> float | None:
    return float(x) if np.isfinite(x) else None


ESTIMATOR_KEYS = "gstar gstar_lo gstar_hi gstar_mse scale safe_G safe_regret notes reason".split()


def estimator_row(cfg: Config, run: dict, p: dict, replicates) -> dict:
    """G* of the estimator the run trains with (:mod:`gpolab.labs.plan.trainer` reads it from
    the hook's run.json, or ``--trainer-estimator``) and loo's on the same grid, both under the
    transfer model (:mod:`gpolab.theory.gstar_model`) set by the log's constants, at the log's
    responses per step; the interval from the bootstrap replicates of loo's constants.  ``p``:
    the pooled summary row with :func:`gstar_row`'s columns."""
    from gpolab.labs.plan import trainer
    from gpolab.theory import gstar_model

    which = trainer.modelled(run, cfg.trainer_estimator)
    out = {
        "estimator_spec": which["spec"],
        "estimator_source": which["source"],
        "estimator_aggregation": "; ".join(
            t for t in (which["aggregation"], which.get("batch", "")) if t
        ),
        **{f"estimator_{k}": None for k in ESTIMATOR_KEYS},
        **{f"loo_model_{k}": None for k in ("gstar", "gstar_lo", "gstar_hi")},
        "estimator_reason": which["reason"],
    }
    consts = [p.get(f"gstar_{k}") for k in ("c1", "g_sq", "s", "a")]
    if which["spec"] is None:
        return out
    if p.get("rewards") != "binary" or not _finite_all(p.get("a"), p.get("b"), *consts):
        out["estimator_reason"] = (
            "needs loo's constants (c1, ‖g‖², s, a: score norms and gradient norms at two batch "
            "sizes) and a beta-binomial difficulty fit: " + str(p.get("gstar_reason") or "no fit")
        )
        return out
    args = (*consts, p["a"], p["b"], p["budget"], replicates)
    grid = gstar.settable(float(p["budget"]))
    try:
        est = gstar_model.gstar(which["spec"], *args, grid=grid, df=_df(p))
        loo = gstar_model.gstar("loo", *args, grid=grid, df=_df(p))
    except validate.ConfigError as err:  # e.g. an option value run.json gave that TRL has not
        out["estimator_reason"] = f"{which['spec']}: {err}"
        return out
    out.update({f"estimator_{k}": est.get(k) for k in ESTIMATOR_KEYS})
    out.update({f"loo_model_{k}": loo.get(k) for k in ("gstar", "gstar_lo", "gstar_hi")})
    out["estimator_grid_max"] = est.get("grid_max")
    out["excess"] = est.get("excess")  # popped by run()
    return out


def rule_row(cfg: Config, p: dict) -> dict:
    """gpolab's training rule (:func:`gpolab.theory.groupsize.training_rule`) at the log's
    responses per step N and pool P, from loo's constants when the log decides them: the G to
    use in training and why (a finite pool moves it only through B = N/G <= P).  ``p``: the
    pooled summary row with :func:`gstar_row`'s columns."""
    from gpolab.theory import groupsize

    prompts, groups, N = p.get("prompts") or 0, p.get("groups") or 0, int(p.get("budget") or 0)
    P = cfg.pool if cfg.pool >= 0 else (prompts if groups >= 1.5 * prompts else 0)
    out = {"rule_G": None, "rule_reason": None, "rule_pool": P}
    if p.get("gstar") is None or not _finite_all(p.get("gstar_c1"), p.get("gstar_C3")):
        out["rule_reason"] = "needs loo's G* decided by the log (## G*)"
        return out
    if N < 2:
        out["rule_reason"] = f"needs at least 2 responses per step (the log's N = {N})"
        return out
    c = groupsize.Constants(float(p["gstar_c1"]), float(p["gstar_C2"]), float(p["gstar_C3"]))
    rule = groupsize.training_rule(c, N, P)
    return {**out, "rule_G": rule["G"], "rule_reason": rule["reason"]}


def _finite_all(*xs) -> bool:
    return all(x is not None and math.isfinite(float(x)) for x in xs)
