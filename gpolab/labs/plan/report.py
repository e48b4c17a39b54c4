"""The ``gpolab plan`` report: the markdown text and the JSON summary of its tables
(:mod:`gpolab.labs.plan.lab`; its ``report`` and ``summary_json`` are these).  ``cfg`` is the
lab's ``Config``."""

from __future__ import annotations

import json
import math

from gpolab.kit.tables import json_value, table_text
from gpolab.theory import difficulty, gstar

POOLED = "all"  # the window of the whole log
MAX_G = 256  # the curve's grid is 2..MAX_G; larger G: kappa's exact cost grows as G^2


def report_sizes(cfg, G: int) -> list[int]:
    """The G of the kappa table and the report: ``cfg.G`` and the log's G, within the curve's
    grid (a log whose G is above MAX_G is reported up to MAX_G)."""
    return sorted(g for g in {*cfg.G, int(G)} if g <= MAX_G)


def pooled(tables: dict) -> dict:
    s = tables["summary"]
    return _clean(s[s["window"] == POOLED].iloc[0].to_dict())


def _clean(d: dict) -> dict:
    return {k: json_value(v) for k, v in d.items()}


# plan.json's logged_degenerate_<key> from the pooled row's logged_<column>
_LOGGED = (("frac", "measured"), ("predicted", "predicted"), ("z", "z"))
_GSTAR_KEYS = ("gstar", "gstar_lo", "gstar_hi", "gstar_reason", "safe_G", "safe_regret")


def summary_json(cfg, tables: dict) -> dict:
    """The whole log as one JSON object (pooled), per-window detail nested under ``windows``."""
    p = pooled(tables)
    curve = tables["curve"]
    at = curve[(curve["window"] == POOLED) & curve["G"].isin(report_sizes(cfg, p["G"]))]

    def by_G(col):
        return {str(int(g)): json_value(v) for g, v in zip(at["G"], at[col], strict=True)}

    kappa = {}
    for rec in tables["kappa"].to_dict(orient="records"):
        kappa.setdefault(rec["estimator"], {})[str(int(rec["G"]))] = json_value(rec["kappa_mean"])
    s = tables["summary"]
    out = {k: p[k] for k in ("format", "reward", "rewards", "steps", "prompts", "groups", "G")}
    out |= {k: p.get(k) for k in ("a", "b", "a_se", "b_se")}
    out |= {f"logged_degenerate_{k}": p.get(f"logged_{v}") for k, v in _LOGGED}
    out |= {
        "predicted_degenerate_frac": by_G("predicted"),
        "dapo_draws_per_kept_group": by_G("dapo_draws"),
        "G_needed": p.get("G_needed"),
        "G_needed_text": need_text(p),
        "target": p["target"],
    }
    out |= {k: p.get(k) for k in ("G_needed_min", "fit_reason", "se_method")}
    out |= {"logged_degenerate_se": p.get("logged_measured_se"), "kappa": kappa}
    out |= {k: p.get(k) for k in _GSTAR_KEYS}
    out |= {k: p.get(k) for k in p if k.startswith(("estimator_", "loo_model_"))}
    out["notes"] = p.get("notes") or ""
    out["windows"] = [_clean(r) for r in s[s["window"] != POOLED].to_dict(orient="records")]
    # every other field of summary.csv's pooled row (the lead, the prices, the training rule):
    # plan.json and summary.csv carry the same fields
    out |= {k: v for k, v in p.items() if k not in out and k != "window"}
    if out.get("prices"):
        out["prices"] = json.loads(out["prices"])
    return out


def report(cfg, tables: dict) -> str:
    """The markdown report."""
    p = pooled(tables)
    lines = [
        f"# gpolab plan: {p.get('log_path') or cfg.log}",
        "",
        f"{p['format']} log, reward = {p['reward']}; {p['steps']} steps, {p['groups']:,} "
        f"groups ({p['prompts']:,} distinct prompts), G = {p['G']}"
        + (f" (sizes {p['G_min']}..{p['G_max']})" if p["G_min"] != p["G_max"] else ""),
    ]
    if p.get("notes"):
        lines.append(f"notes: {p['notes']}")
    if p.get("trainer"):
        lines.append(p["trainer"])
    lines += [
        "",
        "## Recommendation",
        *recommendation(p),
        "",
        *_difficulty_text(p),
        "",
        *_curve_text(cfg, tables, p),
        "",
        *_kappa_text(tables, p["G"]),
        "",
        "## G* (the MSE-optimal group size)",
        _gstar_text(p),
    ]
    s = tables["summary"]
    if (s["window"] != POOLED).any():
        cols = [
            "window",
            "groups",
            "G",
            "a",
            "b",
            "mean_p",
            "logged_measured",
            "logged_predicted",
            "logged_z",
            "G_needed",
        ]
        lines += ["", "## Per window", "```", table_text(s, cols), "```"]
    return "\n".join(lines)


def _difficulty_text(p: dict) -> list[str]:
    if p["rewards"] != "binary":
        se = p.get("logged_measured_se")
        return [
            "## Difficulty",
            f"graded rewards ({p.get('model')}); mean reward "
            f"{p['mean_reward']:.3g}; zero-std groups in the log: {p['logged_measured']:.3g}"
            + (f" ± {se:.2g}" if se is not None else ""),
            _se_text(p),
            "(pass/fail rewards logged with other values: --success-threshold T binarizes them)",
        ]
    head = f"rewards {p['low']:g}/{p['high']:g}; success rate {p['success_rate']:.3g}"
    if not _finite(p.get("a")):  # all-pass or all-fail: p-hat at the boundary, no fit
        n, passed = p["responses"], p["mean_p"] == 1
        bound = (
            f"at least {p['mean_p_lo']:.4g} (no failure in {n:,} responses: 0.05^(1/{n}))"
            if passed
            else f"at most {p['mean_p_hi']:.4g} (no success in {n:,} responses: 1 - 0.05^(1/{n}))"
        )
        return [
            "## Difficulty (no beta-binomial fit)",
            f"{head}; {p['fit_reason']}",
            f"mean success rate {bound} at 95% (gpolab's bound, valid however difficulty "
            "varies across prompts)",
            f"degenerate groups in the log: {p['logged_measured']:.4g} (every group all-equal)",
        ]
    no_se = p.get("se_method") or "no standard error"
    limit = no_se == difficulty.BINOMIAL_LIMIT
    if limit:  # said once, in the note
        no_se = "at the binomial limit"
    return [
        "## Difficulty (beta-binomial fit of per-prompt success rates)",
        *([f"note: {p['fit_reason']}"] if p.get("fit_reason") else []),
        *([f"note: no spread of difficulty beyond binomial noise: {_LIMIT_NOTE}"] if limit else []),
        f"{head}; p ~ Beta(a = {p['a']:.3g} ± {_num(p['a_se'], '.2g', no_se)}, "
        f"b = {p['b']:.3g} ± {_num(p['b_se'], '.2g', no_se)}), "
        f"mean {p['mean_p']:.3g}, 10/50/90%: {p['p10']:.3g} / {p['p50']:.3g} / {p['p90']:.3g}",
        f"degenerate groups in the log: {p['logged_measured']:.4g} ± {p['logged_measured_se']:.2g}"
        f", predicted by the fit at the logged sizes {p['logged_predicted']:.4g} ± "
        f"{p['logged_predicted_se']:.2g} (z = {p['logged_z']:.2f}; maximum likelihood nearly "
        "reproduces this fraction even when the model is wrong, so it checks little)",
        _fit_check_text(p),
        _se_text(p),
    ]


_LIMIT_NOTE = (
    "the likelihood is highest at a + b → ∞, every prompt at the mean success rate, so the "
    "fit stops at the cap max(a, b) = 1e6 (its predictions are the binomial ones to ~1e-6) "
    "and gives no standard errors or bands (an asymptotic normal does not hold at a boundary); "
    "the chi-square check counts the mean as the one fitted parameter"
)


def _se_text(p: dict) -> str:
    """How the standard errors and intervals treat prompts seen in more than one group."""
    method = p.get("se_method")
    if method is None:
        return (
            "standard errors: cluster-robust by prompt for the zero-std fraction (no model "
            "fit for these rewards)"
        )
    if method == difficulty.BINOMIAL_LIMIT:
        return "standard errors and intervals: none at the binomial limit (note above)"
    if method.startswith("cluster"):
        return (
            f"standard errors and intervals: {method}: a prompt drawn at several steps keeps "
            "its difficulty, so its groups are not independent (sandwich covariance "
            "clustered by prompt)"
        )
    return f"standard errors and intervals: {method}"


def _fit_check_text(p: dict) -> str:
    """The goodness of fit of the whole count histogram: the real check of the Beta model.
    The test: Pearson's chi-square of the groups' success counts against the beta-binomial
    (:func:`gpolab.theory.fit_checks.count_check`); read at the conventional 5% level."""
    if p.get("fit_p") is None:
        return (
            "goodness-of-fit test of the beta-binomial model: n/a (too few count cells for "
            "a chi-square test)"
        )
    q = p["fit_p"]
    if q >= 0.05:
        verdict = (
            "not rejected at the conventional 5% level (the log is consistent with the "
            "model; that does not prove the model right)"
        )
    elif q >= 1e-3:
        verdict = (
            "rejected at the conventional 5% level (not at 0.1%): the model misses some "
            "of the log's shape; read the curves below as an approximation"
        )
    else:
        verdict = (
            "rejected at the 0.1% level: the Beta model MISSES the log (e.g. a mass of "
            "impossible or trivial prompts): the curves below are a smooth "
            "approximation, read them with care"
        )
    caveat = (
        "; it counts every group as independent, so with prompts repeated across steps "
        "its p is too small"
        if str(p.get("se_method", "")).startswith("cluster")
        else ""
    )
    return (
        f"goodness-of-fit test of the beta-binomial model (Pearson chi-square of the groups' "
        f"success counts): X2 = {p['fit_chi2']:.1f} on {p['fit_df']} df, p = {q:.2g}; "
        f"{verdict}{caveat}"
    )


def _curve_text(cfg, tables: dict, p: dict) -> list[str]:
    curve = tables["curve"]
    at = curve[(curve["window"] == POOLED) & curve["G"].isin(report_sizes(cfg, p["G"]))]
    how = (
        "(estimated from the log's own groups)"
        if _empirical(p)
        else "(exact under the fit)"
        if p["rewards"] != "binary" or _finite(p.get("a"))
        else "(no fit: lo is a 95% lower bound, hi = 1)"
    )
    return [
        "## Degenerate groups and DAPO cost by G " + how,
        f"{need_text(p)}; split table at N = {p['budget']} responses per step (B = N/G "
        "prompts" + _split_note(at, p["budget"]) + ")" + power_text(curve, p),
        "```",
        table_text(at, ["G", "predicted", "lo", "hi", "dapo_draws", "B", "informative_groups"]),
        "```",
    ]


def _split_note(at, budget: int) -> str:
    """Why B and informative_groups are n/a where they are: G does not divide N."""
    off = [int(g) for g in at["G"] if budget % int(g)]
    if not off:
        return ""
    return (
        f"; B and informative_groups are n/a where G does not divide N = {budget}: "
        f"G = {', '.join(map(str, off))}"
    )


def power_text(curve, p: dict) -> str:
    """When the fit's 95% band leaves the headline G open (the smallest G whose upper band is
    under the target is more than twice the smallest whose lower band is, or none is), say so:
    the range of G the log allows and about how many groups would pin it (the band's width at
    the headline G falls like 1/√groups; asking for a half-width of half the target; gpolab's
    rule of thumb).  Else nothing."""
    c = curve[curve["window"] == POOLED].sort_values("G")
    t, need = p["target"], p.get("G_needed")
    if c.empty or need is None or not {"lo", "hi"} <= set(c):
        return ""
    low = c.loc[c["lo"] <= t, "G"]
    high = c.loc[c["hi"] <= t, "G"]
    g_lo = int(low.iloc[0]) if len(low) else None
    g_hi = int(high.iloc[0]) if len(high) else None
    if g_lo is None or (g_hi is not None and g_hi <= 2 * g_lo):
        return ""
    row = c[c["G"] == need]
    width = float(row["hi"].iloc[0] - row["lo"].iloc[0]) if len(row) else math.nan
    more = (
        f"; about {math.ceil(p['groups'] * (width / t) ** 2):,} groups (now "
        f"{p['groups']:,}) would narrow the band at G = {need} to about ±{t / 2:g}"
        if _finite(width)
        else ""
    )
    top = f"{g_hi}" if g_hi is not None else f"more than {int(c['G'].max())}"
    return f". The log cannot pin this G: its 95% band allows any G from {g_lo} to {top}" + more


def _empirical(p: dict) -> bool:
    return str(p.get("model", "")).startswith("empirical")


def need_text(p: dict) -> str:
    """The headline G: the smallest G under the target, said within the range of G where the
    curve has a number (a model-free estimate stops at the log's smallest group)."""
    need, t = p.get("G_needed"), p["target"]
    if p.get("rewards") == "binary" and not _finite(p.get("a")):  # all-pass or all-fail
        least = p.get("G_needed_min")
        return (
            f"G under the target: undefined (every group of the log is all-equal, so it "
            f"cannot say how fast the degenerate fraction falls with G); at 95% the fraction "
            f"is at least 0.05^(G/{p['responses']}) (the curve's lo), so "
            + (
                f"no G below {least} keeps it <= {t:g}"
                if least is not None
                else f"no G <= {MAX_G} keeps it <= {t:g}"
            )
        )
    if not _empirical(p):
        if need is not None:
            return f"smallest G with degenerate fraction <= {t:g}: {need}"
        return f"no G <= {MAX_G} keeps the degenerate fraction <= {t:g}"
    top = p["G_max_estimated"]
    scope = (
        f"estimated without a model from the log's groups, so only for G <= {top}; "
        f"beyond {top} the log cannot say"
    )
    if need is not None:
        return f"smallest G with degenerate fraction <= {t:g}: {need} ({scope})"
    return f"no G <= {top} keeps the degenerate fraction <= {t:g} ({scope})"


def _kappa_text(tables: dict, G: int) -> list[str]:
    """Mean κ by estimator × G, and κ at the fit's 10/50/90% difficulties at the log's G."""
    k = tables["kappa"]
    if k.empty:
        return [
            "## kappa",
            "kappa (count-table theory) needs binary rewards and a difficulty fit: not computed",
        ]
    wide = k.pivot(index="estimator", columns="G", values="kappa_mean")
    wide = wide.reindex(list(dict.fromkeys(k["estimator"])))
    wide.columns = [f"G={g}" for g in wide.columns]
    at = k[k["G"] == G]
    return [
        "## kappa: each estimator's weight at this run's difficulty mix",
        "E[g_hat | p] = kappa_G(p) g_x (loo = 1): mean over the fitted Beta by G",
        "```",
        table_text(wide.reset_index(), ["estimator", *wide.columns]),
        "```",
        f"at the log's G = {G}, at the fit's 10/50/90% difficulties:",
        "```",
        table_text(at, ["estimator", "kappa_p10", "kappa_p50", "kappa_p90"]),
        "```",
    ]


def _finite(x) -> bool:
    return x is not None and math.isfinite(float(x))


def _num(x, spec: str, why: str) -> str:
    """``x`` formatted, or "n/a (why)" where it is missing or not finite."""
    return format(float(x), spec) if _finite(x) else f"n/a ({why})"


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
    if not (lo and _finite(c1_max) and _finite(C3)) or c1_max <= 0:
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
    if g is not None and _finite(p.get("gstar_hi")):
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
    if p.get("gstar") is not None and _finite(p.get("gstar_hi")):
        return head
    if _finite(factor):
        n = p.get("prompts") or 0
        return (
            f"{head}: c1 = {c1:.3g} ± {se:.2g} (the prompts' gradient variance) is not "
            f"resolved above 0 (G* >= {lo:.3g}); about {factor:.1f}x this log's information "
            f"would resolve it: the interval resamples whole prompts, so more distinct "
            f"prompts (here {n:,}; ~{math.ceil(factor * n):,}) with score norms shrink it, "
            "while more steps over the same prompts help only until each prompt's gradient "
            "is known" + _model_said(p)
        )
    if _finite(c1):
        return (
            f"{head}: the prompt variance c1 = {c1:.3g} is not above 0 at all, so no "
            "amount of this log pins G* (a lower bound: "
            f"{_fmt(lo) if lo is not None else 'none'}); log more steps with score norms"
            + _model_said(p)
        )
    return f"{head}: {p.get('gstar_reason')}"


def _pct(x) -> str:
    return f"{100 * float(x):.0f}%" if _finite(x) else "n/a"


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
    decided = p.get("gstar") is not None and _finite(p.get("gstar_hi"))
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
    return f"{float(x):.3g}" if _finite(x) else "n/a"


def _c1_source(p: dict) -> str:
    """Where c1 came from (the hook's pair scores, or the gradient norms' 1/B slope)."""
    if p.get("gstar_c1_method") == "pairs":
        return (
            "c1 from the pair products of the responses' scores within each measured group "
            "(column pair_score: no within-group noise to subtract) and ‖g‖² from the "
            "gradient norms"
        )
    return "c1 from the gradient norms' 1/B slope less the proxy's within-group noise"


def _gstar_text(p: dict) -> str:
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
