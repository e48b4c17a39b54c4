"""``gpolab plan``'s report on the group size (:mod:`gpolab.labs.plan.report`): the lead
recommendation, the prices of the lead and the run's G, the sizes the batch allows, loo's and
the run's estimator's G* (the columns of :mod:`gpolab.labs.plan.gstar_rows`)."""

from __future__ import annotations

import json
import math

from gpolab.theory import gstar


def finite(x) -> bool:
    return x is not None and math.isfinite(float(x))


def num(x, spec: str, why: str) -> str:
    """``x`` formatted, or "n/a (why)" where it is missing or not finite."""
    return format(float(x), spec) if finite(x) else f"n/a ({why})"


OPTIMUM = (
    "which optimum: G* and the G above are per-step optima at the logged policy (the G whose "
    "one step of N responses has the least gradient noise).  In gpolab's training experiments "
    "(docs/groupsize.md) the per-step optimum is also the training optimum while prompts are "
    "drawn afresh (claim U4-train); a finite pool raises the fastest G with N "
    "(gpolab-pool-train), and late in long bandit runs the best G moves to N (B = 1): re-run "
    "plan on the latest steps (--window) as training goes on"
)


def recommendation(p: dict) -> list[str]:
    """The one G the report leads with (:func:`gpolab.labs.plan.lab.price_row`) and its price,
    the price of the run's own G and of the sizes next to the lead, why any other G in the
    report differs, and which optimum they are."""
    lines = [_lead_text(p)]
    if p.get("lead_G") is not None:
        lines += [_prices_text(p), *_boundary_text(p), *_others_text(p)]
    return [*lines, OPTIMUM]


def _lead_text(p: dict) -> str:
    """ "use G = …" with its price; else why the log gives no G, and what would."""
    G, who = p.get("lead_G"), p.get("lead_for")
    if G is None:
        return _undecided_text(p, "the log gives no G to use")
    N = p.get("budget")
    where = f"among the sizes this run can set at N = {N} responses per step (B = N/G prompts)"
    if not _divides(N, G):
        where = (
            f"(no divisor of N = {N} in 2..{gstar.MAX_SIZE}: change the batch so that G divides it)"
        )
    model = (
        ""
        if who == "loo"
        else f" ({who}, the estimator this run trains with, under gpolab's transfer model)"
    )
    hi = _pct(p.get("lead_excess_hi"))
    caveat = (
        ""
        if who == "loo"
        else " (under the model: its own error is not in this bound; loo's law alone bounds "
        f"G = {p.get('safe_G')} at {_pct(p.get('safe_regret'))})"
    )
    if str(p.get("lead_rule", "")).startswith("decided"):
        return (
            f"use G = {G}{model}: the least gradient noise at the log's constants {where}; "
            f"over the log's joint 95% region it costs at most {hi} more noise than the best "
            f"G{caveat}"
        )
    return (
        f"use G = {G}{model}: {where}, the one whose worst excess noise over the best G is "
        f"least: at most {hi}, whatever the log's constants are within their joint 95% region"
        f"{caveat}.  " + _undecided_text(p, "G* itself is not decided")
    )


def _divides(N, G) -> bool:
    return bool(N) and float(N) % G == 0


def _prices_text(p: dict) -> str:
    """The run's own G and the settable sizes next to the lead, each "x% (lo .. hi)"."""
    rows = json.loads(p["prices"]) if p.get("prices") else []
    cur = p.get("current_G")
    said = ", ".join(
        f"G = {r['G']}{' (yours)' if r['G'] == cur else ''}: {_pct(r['point'])} "
        f"({_pct(r['lo'])} .. {_pct(r['hi'])})"
        for r in rows
    )
    own = (
        f"your G = {cur} is the one above"
        if cur == p.get("lead_G")
        else f"your G = {cur}: n/a (not a size this run can set at N = {p.get('budget')})"
        if p.get("current_excess_hi") is None
        else f"your G = {cur} costs {_pct(p.get('current_excess'))} more noise than the best G at "
        f"the log's constants ({_pct(p.get('current_excess_lo'))} .. "
        f"{_pct(p.get('current_excess_hi'))} over the region)"
    )
    return (
        f"{own}; excess noise over the best G at the log's constants (least .. largest over "
        f"the region) for {p.get('lead_for')}: {said}"
    )


def _boundary_text(p: dict) -> list[str]:
    """Where the region of c1 reaches 0: what the log does and does not say about large G."""
    c1_max, C3 = p.get("safe_c1_max"), p.get("gstar_C3")
    lo = p.get("gstar_c1") is not None and (p.get("gstar") is None)
    if not (lo and finite(c1_max) and finite(C3)) or c1_max <= 0:
        return []
    turn = 1 + math.sqrt(max(float(C3), 0.0) / c1_max)
    return [
        f"c1's region reaches 0: the log does not tell the noise curve from flat for large G; "
        f"with c1 as large as the region allows ({c1_max:.3g}) loo's noise is least at "
        f"G = {turn:.3g} and rises past it, which is why the bounds above are not 0 at large G"
    ]


def _others_text(p: dict) -> list[str]:
    """Every other G the report names, and why it differs from the lead."""
    lead, out = p.get("lead_G"), []
    modelled = p.get("lead_for") not in (None, "loo")
    g = p.get("gstar")
    if g is not None and finite(p.get("gstar_hi")):
        why = (
            "the lead is for the run's estimator"
            if modelled
            else "the lead is the settable size with the least noise at the same constants"
        )
        out.append(
            f"loo's G* = {g:.3g} (95% {p['gstar_lo']:.3g} .. {p['gstar_hi']:.3g}; "
            f"{_gstar_data(p)}): {why}"
        )
    if p.get("safe_G") is not None and p.get("safe_G") != lead:
        out.append(
            f"loo's safe G = {p['safe_G']} (at most {_pct(p.get('safe_regret'))} more noise "
            "than loo's best over the region; the law alone, no model): the lead "
            + ("is for the run's estimator" if modelled else "uses the log's constants, decided")
        )
    if p.get("rule_G") is not None and p.get("rule_G") != lead:
        out.append(
            f"gpolab's training rule gives G = {p['rule_G']} for loo: {p.get('rule_reason')}"
        )
    return out


def _gstar_data(p: dict) -> str:
    return (
        f"from {p.get('gstar_proxy_groups', 0):,} groups with score norms and "
        f"{p.get('gstar_norm_rows', 0):,} gradient-norm rows"
    )


def _undecided_text(p: dict, head: str) -> str:
    """Why the log does not decide G*, and how much more log would (the cluster bootstrap's SE
    of c1 falls like 1/√(information), so resolving c1 above 0 at 95% takes (1.96/z)² times
    this log's, z = c1/SE: gpolab's rule of thumb; with few prompts the information is the
    number of prompts, not of steps)."""
    c1, se, lo = p.get("gstar_c1"), p.get("gstar_c1_se"), p.get("gstar_lo")
    factor = gstar.information_factor(c1, se)
    if p.get("gstar") is not None and finite(p.get("gstar_hi")):
        return head
    if finite(factor):
        n = p.get("prompts") or 0
        return (
            f"{head}: c1 = {c1:.3g} ± {se:.2g} (the prompts' gradient variance) is not "
            f"resolved above 0 (G* >= {lo:.3g}); about {factor:.1f}x this log's information "
            f"would resolve it: the interval resamples whole prompts, so more distinct "
            f"prompts (here {n:,}; ~{math.ceil(factor * n):,}) with score norms shrink it, "
            "while more steps over the same prompts help only until each prompt's gradient "
            "is known" + _model_said(p)
        )
    if finite(c1):
        return (
            f"{head}: the prompt variance c1 = {c1:.3g} is not above 0 at all, so no "
            "amount of this log pins G* (a lower bound: "
            f"{_fmt(lo) if lo is not None else 'none'}); log more steps with score norms"
            + _model_said(p)
        )
    return f"{head}: {p.get('gstar_reason')}"


def _pct(x) -> str:
    return f"{100 * float(x):.0f}%" if finite(x) else "n/a"


def _model_said(p: dict) -> str:
    """What gpolab's transfer model says where the data do not decide: it ties each prompt's
    gradient size to its difficulty, so the prompts differ at least that much (c1's floor)."""
    g, spec = p.get("estimator_gstar"), p.get("estimator_spec")
    if g is None:
        return ""
    return (
        f"; an assumption, not the data: gpolab's transfer model, in which a prompt's gradient "
        f"size follows its difficulty (so c1 has a floor above 0), puts G* at {g} for {spec} "
        f"({_interval(p, 'estimator_')}; loo's {p.get('loo_model_gstar')})"
    )


def _interval(p: dict, prefix: str) -> str:
    """ "95% lo .. hi" of a grid G* (hi at the grid's top: "lo or more")."""
    lo, hi = p.get(f"{prefix}gstar_lo"), p.get(f"{prefix}gstar_hi")
    if lo is None or hi is None:
        return "no interval"
    top = p.get("estimator_grid_max")
    return f"95% {lo} or more" if hi == top else f"95% {lo} .. {hi}"


def estimator_text(p: dict) -> str:
    """The run's estimator and its G* under the transfer model, or why not."""
    spec = p.get("estimator_spec")
    if spec is None:
        return f"The run's estimator: not modelled ({p.get('estimator_reason')}); loo only."
    how = "; ".join(t for t in (p.get("estimator_source"), p.get("estimator_aggregation")) if t)
    said = f"The run's estimator: {spec} ({how})."
    if p.get("estimator_gstar") is None:
        return f"{said} Its G*: not estimated: {p.get('estimator_reason')}"
    decided = p.get("gstar") is not None and finite(p.get("gstar_hi"))
    lines = [
        said,
        f"Its G* = {p['estimator_gstar']} ({_interval(p, 'estimator_')}); loo's on the same "
        f"grid {p['loo_model_gstar']} ({_interval(p, 'loo_model_')}); gpolab's transfer model "
        "(theory.gstar_model: prompt difficulty from the fit, ‖g_x‖² ∝ p(1 − p), the score "
        "norm's mean per reward value the same for every prompt) set by the log's c1, ‖g‖², s "
        "and a.",
        f"Target: the MSE after the best step-size rescaling (noise against the estimator's own "
        f"mean), which a tuned step size sees and which does not depend on the budget.  Against "
        f"g itself (MSE, no rescaling) the best G would be "
        f"{p.get('estimator_gstar_mse') or 'undefined (‖g‖² not resolved above 0)'}: "
        f"the estimator's mean is {_fmt(p.get('estimator_scale'))} x g at G*, a scale bias "
        "that no G removes (std normalization's 1/sigma weighting) and that a step size absorbs.",
    ]
    if p.get("estimator_notes"):
        lines.append(f"Model notes: {p['estimator_notes']}.")
    if not decided:
        lines.append(
            "The log alone does not decide loo's G* (above); the model's value leans on its "
            "assumption that prompts of different difficulty differ in gradient size."
        )
    return "\n".join(lines)


def _fmt(x) -> str:
    return f"{float(x):.3g}" if finite(x) else "n/a"


def _c1_source(p: dict) -> str:
    """Where c1 came from (the hook's pair scores, or the gradient norms' 1/B slope)."""
    if p.get("gstar_c1_method") == "pairs":
        return (
            "c1 from the pair products of the responses' scores within each measured group "
            "(column pair_score: no within-group noise to subtract) and ‖g‖² from the "
            "gradient norms"
        )
    return "c1 from the gradient norms' 1/B slope less the proxy's within-group noise"


def gstar_section(p: dict) -> str:
    if p.get("gstar") is None:
        how = f" ({_c1_source(p)})" if p.get("gstar_c1_method") else ""
        return f"not estimated: {p.get('gstar_reason')}{how}\n\n{estimator_text(p)}"
    terms = ", ".join(
        f"{k[6:]} = {p[k]:.4g}"
        for k in ("gstar_c1", "gstar_C2", "gstar_C3")
        if p.get(k) is not None
    )
    return (
        f"G* = 1 + sqrt(C3/c1) = {p['gstar']:.3g} (95% {p['gstar_lo']:.3g} .. "
        f"{p['gstar_hi']:.3g}; {terms}; gpolab's estimate from the proxy column and the "
        f"gradient norms, assuming the loo estimator's MSE law; {_c1_source(p)})\n\n"
        + estimator_text(p)
    )
