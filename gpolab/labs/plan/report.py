"""The ``gpolab plan`` report: the markdown text and the JSON summary of its tables
(:mod:`gpolab.labs.plan.lab`; its ``report`` and ``summary_json`` are these).  ``cfg`` is the
lab's ``Config``."""

from __future__ import annotations

import json
import math

from gpolab.kit.tables import json_value, table_text
from gpolab.labs.plan.gstar_text import finite, gstar_section, num, recommendation
from gpolab.theory import difficulty

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


WINDOW_COLUMNS = (
    "window groups G a b mean_p logged_measured logged_predicted logged_z G_needed".split()
)


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
        gstar_section(p),
    ]
    s = tables["summary"]
    if (s["window"] != POOLED).any():
        lines += ["", "## Per window", "```", table_text(s, WINDOW_COLUMNS), "```"]
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
    if not finite(p.get("a")):  # all-pass or all-fail: p-hat at the boundary, no fit
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
        f"{head}; p ~ Beta(a = {p['a']:.3g} ± {num(p['a_se'], '.2g', no_se)}, "
        f"b = {p['b']:.3g} ± {num(p['b_se'], '.2g', no_se)}), "
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
        if p["rewards"] != "binary" or finite(p.get("a"))
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
        if finite(width)
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
    if p.get("rewards") == "binary" and not finite(p.get("a")):  # all-pass or all-fail
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
