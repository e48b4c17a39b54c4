"""The allocation lab's analysis of its saved tables: the rollouts each rule needs to match
uniform G (exactly for gpolab's designs), what the run can say about each rule's bias, and the
notes (:mod:`gpolab.labs.allocate.lab`)."""

from __future__ import annotations

import functools
import math

import numpy as np

from gpolab.labs.allocate.config import Config
from gpolab.labs.allocate.static import SPLITS
from gpolab.labs.allocate.steps import Bandit, _tables, oracle_curves
from gpolab.theory import allocation as theory

EXACT_RULES = ("uniform-gstar", "gpolab-oracle", "gpolab-sample")


@functools.lru_cache(maxsize=4)
def _instance_curves(cfg: Config) -> tuple[dict, np.ndarray]:
    env = Bandit.of(cfg.instance)
    t = env.truth(env.policy(env.theta))
    return oracle_curves(t, *_tables(cfg.estimator, cfg.cap)[:2]), env.f


def exact_mse_at(cfg: Config, rule: str, budget: float) -> float:
    """The exact MSE of a deterministic design at any budget (theory §12): the keep-all greedy
    (budget ≥ 2 per prompt), the sampled design or uniform G* (any budget ≥ 2)."""
    o, f = _instance_curves(cfg)
    P = len(f)
    if rule == "gpolab-sample":
        return float(theory.sampled_design(o["second_moment"], o["kappa"], o["gsq"], f, budget).mse)
    if rule == "uniform-gstar":
        return theory.uniform_design(o["second_moment"], o["kappa"], o["gsq"], f, int(budget))[2]
    if budget < 2 * P:
        return math.inf
    G = theory.greedy(o["mse"], f**2, int(budget))
    return float(theory.step_mse(o["mse"], f**2, G))


def exact_match(cfg: Config, rule: str, target: float, top: int) -> float:
    """The smallest budget (to one rollout) at which ``rule``'s exact MSE reaches ``target``,
    by bisection over 2..``top`` (the MSE falls with the budget); NaN if it never does."""
    target = target * (1 + 1e-9)  # equal designs (uniform itself) match at the same budget
    lo, hi = 2, top
    if exact_mse_at(cfg, rule, hi) > target:
        return math.nan
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if exact_mse_at(cfg, rule, mid) > target else (lo, mid)
    return float(hi)


def match_table(results, cfg: Config | None = None):
    """Per rule and budget: the rollouts the rule needs to reach uniform's MSE at that budget
    (exact conditional MSE where the rule has it, else the Monte Carlo MSE; log-log
    interpolation along the rule's own curve) and the ratio to uniform's rollouts.  With
    ``cfg``, the designs of :data:`EXACT_RULES` also get the exact answer at any budget
    (``rollouts_to_match_exact``, ``ratio_exact``), below the smallest budget measured too, and
    against uniform G*'s exact MSE at that budget (``gstar_mse``, ``rollouts_to_match_gstar``,
    ``ratio_gstar``)."""
    import pandas as pd

    if "uniform" not in set(results["rule"]):
        return pd.DataFrame(
            columns=["rule", "budget", "uniform_mse", "rollouts_to_match", "ratio", "basis"]
        )
    score = results["theory_mse"].where(results["theory_mse"].notna(), results["mse"])
    df = results.assign(score=score)
    uni = df[df["rule"] == "uniform"].sort_values("budget")
    rows = []
    for rule, cur in df.groupby("rule", sort=False):
        cur = cur.sort_values("rollouts")
        basis = "theory_mse" if cur["theory_mse"].notna().all() else "mse"
        for _, u in uni.iterrows():
            need = theory.matching_budget(cur["rollouts"], cur["score"], u["score"])
            row = {
                "rule": rule,
                "budget": int(u["budget"]),
                "uniform_mse": u["score"],
                "rollouts_to_match": need,
                "ratio": need / u["rollouts"],
                "basis": basis,
            }
            if cfg is not None and rule in EXACT_RULES:
                exact = exact_match(cfg, rule, float(u["score"]), int(u["budget"]))
                star = exact_mse_at(cfg, "uniform-gstar", int(u["budget"]))
                vs = exact_match(cfg, rule, star, int(u["budget"]))
                row |= {
                    "rollouts_to_match_exact": exact,
                    "ratio_exact": exact / u["budget"],
                    "gstar_mse": star,
                    "rollouts_to_match_gstar": vs,
                    "ratio_gstar": vs / u["budget"],
                }
            rows.append(row)
    return pd.DataFrame(rows)


BIAS_SHARE = 0.001  # "unbiased": bias² below this share of its own MSE (95% bound)
BIAS_CONTROL = "gpolab-drop"  # the negative control: biased by construction (drops prompts)


def bias_verdicts(res):
    """Per row, what the run can say about bias² = ‖E ĝ − g‖² (``bias_sq``: pairs of
    :data:`SPLITS` independent seed batches, jackknife SE): ``biased`` where bias² exceeds t·SE
    (t the two-sided 95% point of Student's t with SPLITS − 1 degrees of freedom, 2.36: the SE is
    estimated from SPLITS batches); ``unbiased`` where the upper bound max(bias², 0) + t·SE (the
    largest bias² this run could have missed) is below :data:`BIAS_SHARE` of the row's MSE (0.1%:
    below the MSE's own standard error, 0.3–1% of the MSE at the default 2000 seeds, so no bias
    that small can decide a ranking of MSEs);
    ``cannot tell`` otherwise (the run is too small to see a bias that would matter), and for
    every row of a budget where the negative control :data:`BIAS_CONTROL` (when run) is not
    found biased.  NaN is never a pass."""
    import pandas as pd
    from scipy import stats

    t = float(stats.t.ppf(0.975, SPLITS - 1))
    b, se, mse = (res[c].to_numpy(float) for c in ("bias_sq", "bias_sq_se", "mse"))
    with np.errstate(invalid="ignore"):
        biased = b > t * se
        bound = np.maximum(b, 0) + t * se
        clear = bound <= BIAS_SHARE * mse
    out = np.where(biased, "biased", np.where(clear, "unbiased", "cannot tell"))
    out = pd.Series(out, index=res.index)
    ctrl = res["rule"] == BIAS_CONTROL
    for budget in res.loc[ctrl, "budget"]:
        if out[ctrl & (res["budget"] == budget)].iloc[0] != "biased":
            out[(res["budget"] == budget) & (out == "unbiased")] = "cannot tell"
    return out


def unbiased(res):
    """Rows found unbiased by :func:`bias_verdicts` (bias² significantly below
    :data:`BIAS_SHARE` of their MSE, with the negative control found biased)."""
    return res[bias_verdicts(res) == "unbiased"]


def _verdict_text(cur, v=None) -> str:
    """The bias verdicts of one budget's rows (``v``: :func:`bias_verdicts` of ``cur``, computed
    here when not given), grouped: 'biased: a, b; cannot tell: c'."""
    v = bias_verdicts(cur) if v is None else v
    parts = [
        f"{k}: {', '.join(cur.loc[v == k, 'rule'])}"
        for k in ("biased", "cannot tell")
        if (v == k).any()
    ]
    ctrl = cur["rule"] == BIAS_CONTROL
    if not ctrl.any():
        parts.append(f"no negative control ({BIAS_CONTROL} not run)")
    elif v[ctrl].iloc[0] != "biased":
        parts.append(f"the negative control {BIAS_CONTROL} was not found biased")
    return "; ".join(parts)


def _winner(cur) -> str:
    cur = cur.sort_values("mse")
    if len(cur) < 2:
        return f"{cur.iloc[0]['rule']}" if len(cur) else "—"
    best, second = cur.iloc[0], cur.iloc[1]
    se = math.hypot(best["mse_se"], second["mse_se"])
    how = "by more than 2 SE" if second["mse"] - best["mse"] > 2 * se else "tied within 2 SE"
    return (
        f"{best['rule']} (MSE {best['mse']:.4g}; next {second['rule']} {second['mse']:.4g}, {how})"
    )


def notes(cfg: Config, tables: dict) -> str:
    """Who has the lowest MSE at each budget, among every rule and among the ones found unbiased
    (a biased rule buys its MSE by leaving prompts out; :func:`bias_verdicts`), with the rules
    found biased and those the run cannot tell; the exact rollouts the gpolab designs
    need to match uniform G; the fastest training."""
    res, match, trained = tables["results"], tables["match"], tables["trained"]
    lines = []
    for budget, cur in res.groupby("budget"):
        verdicts = bias_verdicts(cur)
        fair = cur[verdicts == "unbiased"]
        best = _winner(fair) if len(fair) else "none (too few seeds to tell: raise --seeds)"
        lines.append(
            f"N = {budget}: lowest MSE {_winner(cur)}; among rules found unbiased "
            f"(bias² below {BIAS_SHARE:.1%} of their MSE, 95% bound) {best}; "
            f"{_verdict_text(cur, verdicts)}"
        )
    col = "ratio_exact" if "ratio_exact" in match else "ratio"
    for rule in ("gpolab-sample", "gpolab-oracle", "gpolab"):
        m = match[match["rule"] == rule]
        if len(m):
            c = col if m[col].notna().any() else "ratio"
            ratios = ", ".join(f"{r.budget}: {getattr(r, c):.3f}" for r in m.itertuples())
            lines.append(f"{rule}: rollouts to match uniform G, as a fraction ({c}): {ratios}")
    done = trained.dropna(subset=["rollouts_to_half_gap"]).sort_values("rollouts_to_half_gap")
    if len(done):
        b, uni = done.iloc[0], done[done["rule"] == "uniform"]
        text = f"{uni['rollouts_to_half_gap'].iloc[0]:.0f}" if len(uni) else "did not get there"
        lines.append(
            f"training: fastest to half the gap {b['rule']} "
            f"({b['rollouts_to_half_gap']:.0f} rollouts); uniform {text}"
        )
    return "\n".join(lines)
