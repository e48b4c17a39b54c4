"""Statistics of the claims ledger on the experiments' saved tables (``statistic = "name"`` in
``claims_ledger.toml``).  Each takes one experiment's tables and returns the values its rules read,
``se`` (one standard error per ruled quantity: 0 when exact or count-valued) and a one-line
``detail``.  The statistics that test exact theory against Monte Carlo jointly live in
:mod:`gpolab.labs.claims.lab` beside the joint test they call;
:data:`gpolab.labs.claims.lab.STATISTICS`
is the one name list.
"""

from __future__ import annotations

import math

from gpolab.engine import stats


def _bonferroni(p) -> float:
    """min(1, n · min p) over n p-values; NaN if any is NaN (Python's min(1.0, nan) is 1.0: a
    NaN would pass)."""
    import numpy as np

    p = np.asarray(p, float)
    return math.nan if p.size == 0 or np.isnan(p).any() else float(min(1.0, p.size * p.min()))


def ratio_and_se(a, sa, b, sb) -> tuple[float, float]:
    """a/b and its delta-method SE (a, b taken independent: conservative when they share draws
    and are positively correlated, as estimators of one cell do)."""
    r = float(a / b)
    return r, abs(r) * math.hypot(sa / a, sb / b)


def _gap(a, sa, b, sb) -> tuple[float, float]:
    """a − b and its SE (independent)."""
    return float(a - b), math.hypot(sa, sb)


def _ci_se(lo, hi) -> float:
    """The SE behind a two-sided 95% normal interval."""
    return float((hi - lo) / (2 * 1.959963984540054))


def _frac_se(frac: float, n: int) -> float:
    """The binomial SE of a share of n settings (the settings a sample of those one could run),
    at the share (k + 1)/(n + 2) so that 0 or n of n is not taken as exact."""
    if not n:
        return math.nan
    p = (frac * n + 1) / (n + 2)
    return math.sqrt(p * (1 - p) / n)


def _order_gaps(df, estimator: str, G: int) -> list[tuple[float, float]]:
    """(base − instruct, instruct − icl) MSE gaps of one estimator at G, each with its SE."""
    v = df[(df["estimator"] == estimator) & (df["G"] == G)].set_index("policy")
    return [
        _gap(v.loc[a, "mse"], v.loc[a, "mse_se"], v.loc[b, "mse"], v.loc[b, "mse_se"])
        for a, b in (("base", "instruct"), ("instruct", "icl"))
    ]


def strength_order(t: dict) -> dict:
    df = t["results"]
    G = 16 if 16 in set(df["G"]) else int(df["G"].max())
    v = df[(df["estimator"] == "vanilla") & (df["G"] == G)].set_index("policy")
    ratio = ratio_and_se(
        v.loc["base", "mse"], v.loc["base", "mse_se"], v.loc["icl", "mse"], v.loc["icl", "mse_se"]
    )
    gap = min(_order_gaps(df, "vanilla", G))
    return {
        "base_over_icl": ratio[0],
        "smallest_gap": gap[0],
        "se": {"base_over_icl": ratio[1], "smallest_gap": gap[1]},
        "detail": f"vanilla MSE at G = {G}: base {v.loc['base', 'mse']:.3g}, instruct "
        f"{v.loc['instruct', 'mse']:.3g}, icl {v.loc['icl', 'mse']:.3g} (mean V "
        "0.15 / 0.40 / 0.65): grows with strength (why, and a family that reverses "
        "it: docs/arithmetic.md)",
    }


def strength_family(t: dict) -> dict:
    df = t["results"]
    G = int(df["G"].max())
    gaps, parts = [], []
    for e in ("vanilla", "loo", "oracle"):
        v = df[(df["estimator"] == e) & (df["G"] == G)].set_index("policy")["mse"]
        gaps += _order_gaps(df, e, G)
        parts.append(f"{e} {v['base']:.3g} > {v['instruct']:.3g} > {v['icl']:.3g}")
    gap = min(gaps, key=lambda g: g[0] / g[1] if g[1] > 0 else g[0] * math.inf)
    return {
        "smallest_gap_z": gap[0] / gap[1],
        "se": {"smallest_gap_z": 1.0},
        "detail": f"G = {G}, base > instruct > icl: "
        + "; ".join(parts)
        + f"; least clear gap {gap[0]:.3g} ± {gap[1]:.3g}",
    }


THINK_RATIOS = (0.0, 0.25, 1.0, 4.0)  # L_think / L_answer at which tree_branching ranks splits


def tree_branching(t: dict) -> dict:
    """Over every leaf budget whose splits K·M (K >= 2) the grid holds in full (at least three)
    and over L_think/L_answer in :data:`THINK_RATIOS`: the best split by tokens per effective
    thought (:func:`gpolab.labs.tree.lab.rank`).  A setting is a tree win when the best split has
    M > 1 and no flat split (M = 1) ties with it, a flat win in the mirror case (counts: SE 0).
    ``tree_wins_think_ge_answer`` counts the settings with L_think >= L_answer and at least 16
    leaves, ``flat_wins_no_think`` those with L_think = 0 (every budget)."""
    import numpy as np

    from gpolab.labs.tree import lab as tree  # defers jax

    df = t["results"].assign(leaves=lambda d: d["K"] * d["M"])
    budgets = []
    for n, rows in df.groupby("leaves"):
        want = {(k, n // k) for k in range(2, n + 1) if n % k == 0}
        if len(want) >= 3 and want <= set(zip(rows["K"], rows["M"], strict=True)):
            budgets.append(int(n))
    tree_wins, flat_wins, parts, pays = 0, 0, [], {}
    for r in THINK_RATIOS:
        sub = df[df["leaves"].isin(budgets)].assign(
            budget=lambda d: d["leaves"], think_len=r, answer_len=1.0
        )
        ranked = tree.rank(sub.assign(cost=tree.cost(sub["K"], sub["M"], r, 1.0)))
        for _, rows in ranked.groupby("budget"):
            best = rows[rows["recommended"]].iloc[0]
            tied = rows[rows["tie"]]
            tree_won = best["M"] > 1 and not (tied["M"] == 1).any()
            flat_won = best["M"] == 1 and not (tied["M"] > 1).any()
            tree_wins += tree_won
            flat_wins += flat_won
            pays.setdefault(r, []).append("tree" if tree_won else "flat" if flat_won else "tie")
        parts.append(
            f"L_think/L_answer = {r:g}: "
            + ", ".join(f"{n} leaves {w}" for n, w in zip(budgets, pays[r], strict=True))
        )
    n = len(budgets) * len(THINK_RATIOS)
    return {
        "tree_wins": int(tree_wins),
        "flat_wins": int(flat_wins),
        "n_settings": n,
        "tree_wins_think_ge_answer": sum(
            w == "tree"
            for r in THINK_RATIOS
            if r >= 1
            for n, w in zip(budgets, pays[r], strict=True)
            if n >= 16
        ),
        "n_think_ge_answer": sum(n >= 16 for r in THINK_RATIOS if r >= 1 for n in budgets),
        "flat_wins_no_think": int(sum(w == "flat" for w in pays[0.0])),
        "n_no_think": len(pays[0.0]),
        "se": dict.fromkeys(
            (
                "tree_wins",
                "flat_wins",
                "n_settings",
                "tree_wins_think_ge_answer",
                "n_think_ge_answer",
                "flat_wins_no_think",
                "n_no_think",
            ),
            0.0,
        ),
        "detail": "winner per (leaf budget, L_think/L_answer), a 95% tie with the other kind "
        f"counted as a tie (counts of settings: SE 0): {'; '.join(parts)}; "
        f"{int(np.sum(df['theory_exact'].astype(bool)))} of {len(df)} cells ranked "
        "on exact corr",
    }


def mean_baseline(t: dict) -> dict:
    """At the smallest G: the mean baseline's bias² against ‖g_x‖²/G² and against 0, each as a z
    (SE 1) with the SE of the bias² estimate, and its MSE margin below the next-lowest estimator.

    SE of the unbiased bias² estimate ‖ē‖² − tr Σ/n (ē the mean error of n seeds, Σ its per-seed
    covariance): Var ≈ 4 bᵀΣb/n + 2 tr(Σ²)/n² ≤ 4 ‖b‖² tr Σ/n + 2 (tr Σ)²/n² (b the bias; an
    upper bound, as the table has tr Σ only), with ‖b‖² the larger of the estimate and the
    theory."""
    df = t["results"]
    G = int(df["G"].min())
    at = df[df["G"] == G].set_index("estimator")
    m = at.loc["mean"]
    n, V = float(m["n_seeds"]), float(m["variance"])
    b2 = max(float(m["bias_sq"]), float(m["theory_bias_sq"]), 0.0)
    bias_se = math.sqrt(4 * b2 * V / n + 2 * V**2 / n**2)
    z = float((m["bias_sq"] - m["theory_bias_sq"]) / bias_se)
    others = at.drop(index="mean")
    nxt = others.loc[others["mse"].idxmin()]
    gap = _gap(nxt["mse"], nxt["mse_se"], m["mse"], m["mse_se"])
    return {
        "bias_theory_abs_z": abs(z),
        "bias_z": float(m["bias_sq"] / bias_se),
        "lowest_mse_gap": gap[0],
        "se": {"bias_theory_abs_z": 1.0, "bias_z": 1.0, "lowest_mse_gap": gap[1]},
        "detail": f"G = {G}: mean's bias² {m['bias_sq']:.3g} ± {bias_se:.2g} vs exact "
        f"‖g_x‖²/G² {m['theory_bias_sq']:.3g} (z = {z:.2f}); MSE {m['mse']:.4g} vs "
        f"the next-lowest ({nxt.name}) {nxt['mse']:.4g} (oracle "
        f"{at.loc['oracle', 'mse']:.4g})",
    }


def _gain_se(row) -> float:
    """A gain's SE from its 95% interval (0 where the interval is a point: exact gradients)."""
    if "gain_ci_low" not in row or not math.isfinite(row["gain_ci_low"]):
        return 0.0
    return _ci_se(row["gain_ci_low"], row["gain_ci_high"])


def gain_fades(t: dict) -> dict:
    """ "Fades": the excess gain (gain − 1) at the highest ρ is at most half of that at ρ = 0 —
    a decrease that matters, not any decrease.  Exact gradients: the gains are deterministic."""
    import numpy as np

    g = t["gain"]
    exact = g[~np.isfinite(g["G"]) & ~g["control"].astype(bool)]
    adm = exact[exact["comparison"].str.startswith("admissible")].set_index("setting")
    orc = exact[exact["comparison"].str.startswith("oracle")].set_index("setting")
    hi = max(k for k in adm.index if k.startswith("rho=") and k != "rho=0")
    g0, gh, go = adm.loc["rho=0"], adm.loc[hi], orc.loc[hi]
    kept, kept_se = ratio_and_se(gh["gain"] - 1, _gain_se(gh), g0["gain"] - 1, _gain_se(g0))
    return {
        "gain_rho0": float(g0["gain"]),
        "excess_kept": kept,
        "oracle_gain_rho_high": float(go["gain"]),
        "se": {
            "gain_rho0": _gain_se(g0),
            "excess_kept": kept_se,
            "oracle_gain_rho_high": _gain_se(go),
        },
        "detail": f"exact gradients, admissible steps: gain {g0['gain']:.3g} at ρ = 0, "
        f"{gh['gain']:.3g} at {hi.replace('rho=', 'ρ = ')} ({100 * kept:.0f}% of "
        f"the excess over 1 kept); against the interference-aware oracle step "
        f"{go['gain']:.3g}",
    }


def group_size_gain(t: dict) -> dict:
    """The sampled-group gain at the smallest and the largest G (SE from their 95% intervals);
    NaN, not testable at these sizes, when one G was sampled."""
    import numpy as np

    g = t["gain"]
    adm = g[g["comparison"].str.startswith("admissible") & (g["setting"] == "rho=0")]
    sampled = adm[np.isfinite(adm["G"])].set_index("G")
    small, large = sampled.index.min(), sampled.index.max()
    one = small == large
    lo, hi = sampled.loc[small], sampled.loc[large]
    nan = math.nan
    return {
        "gain_small_G": nan if one else float(lo["gain"]),
        "gain_large_G": nan if one else float(hi["gain"]),
        "se": {
            "gain_small_G": nan if one else _gain_se(lo),
            "gain_large_G": nan if one else _gain_se(hi),
        },
        "detail": ("one sampled G: not testable at these sizes; " if one else "")
        + ", ".join(
            f"G = {int(k)}: {r.gain:.3g} ({r.gain_ci_low:.3g}–{r.gain_ci_high:.3g})"
            for k, r in sampled.iterrows()
        ),
    }


def normalization_direction(t: dict) -> dict:
    """At G = 8: grpo/loo MSE (Monte Carlo, delta-method SE) and snr/loo from exact theory (count
    tables: SE 0, checked against Monte Carlo by gpolab-1); the Monte Carlo snr/loo has no SE in
    the table and is reported only."""
    import numpy as np

    df = t["results"]
    at = df[(df["G"] == 8)].set_index(["env", "estimator"])
    out, se, parts = {}, {}, []
    for env in sorted(set(df["env"])):
        g, lo = at.loc[(env, "grpo")], at.loc[(env, "loo")]
        ratio = ratio_and_se(g["mse"], g["mse_se"], lo["mse"], lo["mse_se"])
        snr = float(g["theory_snr_vs_loo"])
        out[f"mse_ratio_{env}"], se[f"mse_ratio_{env}"] = ratio
        out[f"snr_{env}"], se[f"snr_{env}"] = snr, 0.0 if np.isfinite(snr) else math.nan
        parts.append(
            f"{env}: grpo/loo MSE {ratio[0]:.2f} ± {ratio[1]:.2f}, snr/loo "
            f"{snr:.4f} exact ({float(g['snr_vs_loo']):.4f} Monte Carlo)"
        )
    return {**out, "se": se, "detail": "G = 8: " + "; ".join(parts)}


def _separated(s):
    """Rows whose empirical best G is not tied with another G."""
    return s["tied_G"].astype(str).str.split(",").str.len() == 1


def groupsize_argmin(t: dict) -> dict:
    """Budgets whose best G is separated from every other G and equals the prediction (a tie
    never counts as a match); counts: SE 0."""
    s = t["summary"]
    matches = int(((s["empirical_best_G"] == s["predicted_best_G"]) & _separated(s)).sum())
    return {
        "argmin_matches_prediction": matches,
        "n_budgets": len(s),
        "distinct_argmins": int(s["empirical_best_G"].nunique()),
        "se": {"argmin_matches_prediction": 0.0, "n_budgets": 0.0, "distinct_argmins": 0.0},
        "detail": "empirical best G per N: "
        + ", ".join(
            f"N={r.N}: {r.empirical_best_G} (tied: {r.tied_G}; predicted {r.predicted_best_G})"
            for r in s.itertuples()
        ),
    }


def not_measured(t: dict) -> dict:
    """For a claim that cannot be tested here: it reads nothing (its reason says why)."""
    return {"se": {}}


def train_optimum(t: dict) -> dict:
    """Shares of the (env, N, schedule) settings: interior minimum (every setting: a count, SE 0),
    best G separated from every other G and equal to the prediction (a tie never matches), best G
    separated; the shares' SE binomial over the settings."""
    s = t["summary"]
    sep = _separated(s)
    match = float(((s["empirical_best_G"] == s["predicted_best_G"]) & sep).mean())
    n = len(s)
    return {
        "interior_frac": float(s["interior_minimum"].mean()),
        "matches_prediction_frac": match,
        "separated_frac": float(sep.mean()),
        "se": {
            "interior_frac": 0.0,
            "matches_prediction_frac": _frac_se(match, n),
            "separated_frac": _frac_se(float(sep.mean()), n),
        },
        "detail": f"best G per (env, N, schedule), {n} settings: "
        + ", ".join(
            f"{r.env} N={r.N} {r.schedule}: {r.empirical_best_G} (tied {r.tied_G}, "
            f"predicted {r.predicted_best_G})"
            for r in s.itertuples()
        ),
    }


def chi2_law(t: dict) -> dict:
    """At the largest n: z of each estimator's empirical mean of n·gap against the predicted
    Σ w_k (SE from its 95% CI) and the KS p-value against the predicted law, each combined over
    the estimators by Bonferroni (valid however the estimators' runs are related).  p-values are
    their own tests: SE 0."""
    import numpy as np
    from scipy.stats import norm

    df = t["results"]
    last = df[df["n"] == df["n"].max()]
    se = (last["ci_high"] - last["ci_low"]) / (2 * 1.959964)
    z = ((last["empirical_mean"] - last["predicted_mean"]) / se).to_numpy(float)
    mean_p = _bonferroni(2 * norm.sf(np.abs(z)))
    ks = _bonferroni(last["ks_pvalue"].to_numpy(float))
    return {
        "mean_p_bonferroni": mean_p,
        "ks_p_bonferroni": ks,
        "se": {"mean_p_bonferroni": 0.0, "ks_p_bonferroni": 0.0},
        "detail": f"n = {int(last['n'].iloc[0]):,}, {len(last)} estimators, "
        f"{int(last['n_seeds'].iloc[0]):,} seeds: mean of n·gap vs Σ w_k, z = "
        + ", ".join(f"{v:.2f}" for v in z)
        + f" (Bonferroni p = {mean_p:.2g}); KS p (Bonferroni) = "
        f"{ks:.2g}",
    }


def tree_floor(t: dict) -> dict:
    import numpy as np

    df = t["results"]
    K = int(df["K"].max())
    row = df[df["K"] == K].sort_values("M").iloc[0]
    exact = row["theory_variance"] if np.isfinite(row["theory_variance"]) else row["theory_floor"]
    z = float((row["variance"] - exact) / row["variance_se"])
    gap = float(abs(row["variance"] - row["theory_floor"]) / row["theory_floor"])
    return {
        "floor_abs_z": abs(z),
        "rel_gap_to_floor": gap,
        "se": {
            "floor_abs_z": 1.0,
            "rel_gap_to_floor": float(row["variance_se"] / row["theory_floor"]),
        },
        "detail": f"K = {K}, M = {int(row['M'])}: variance {row['variance']:.4g} vs exact "
        f"{exact:.4g} (z = {z:.2f}); the K → ∞ floor is {row['theory_floor']:.4g} "
        f"({100 * gap:.1f}% away)",
    }


def tree_decay(t: dict) -> dict:
    """At the largest K: steps in M where the variance does not fall 2 SE clear (a count: SE 0)
    and the last-over-first ratio (delta-method SE)."""
    import numpy as np

    df = t["results"]
    K = int(df["K"].max())
    sub = df[df["K"] == K].sort_values("M")
    v, s = sub["variance"].to_numpy(), sub["variance_se"].to_numpy()
    flat = int(np.sum(v[:-1] - v[1:] <= 2 * np.hypot(s[:-1], s[1:])))
    ratio = ratio_and_se(v[-1], s[-1], v[0], s[0])
    return {
        "non_decreasing_steps": flat,
        "last_over_first": ratio[0],
        "se": {"non_decreasing_steps": 0.0, "last_over_first": ratio[1]},
        "detail": f"K = {K}: variance {v[0]:.3g} at M = {int(sub['M'].iloc[0])} → "
        f"{v[-1]:.3g} at M = {int(sub['M'].iloc[-1])}; {flat} of {len(v) - 1} steps "
        "not 2 SE clear",
    }


def curvature_bounds(t: dict) -> dict:
    f = t["fits"].set_index("quantity")
    return {
        "se": {},
        "detail": f"tightest constants {f.loc['grad_norm', 'max_ratio']:.3f} (bound 2) and "
        f"{f.loc['hess_norm', 'max_ratio']:.3f} (bound 4)",
    }


def stdnorm_gain(t: dict) -> dict:
    """Exact-gradient gains and norm ratios (deterministic: SE 0) and the best tuned sampled gain
    (SE from its 95% interval)."""
    import numpy as np

    g = t["gain"]
    adm = g[g["comparison"].str.startswith("admissible") & (g["setting"] == "rho=0")]
    base = adm[~np.isfinite(adm["G"])].iloc[0]
    tuned = g[(g["comparison"] == "tuned") & ~g["control"] & np.isfinite(g["G"])]
    if len(tuned):
        best = tuned.loc[tuned["gain_ci_low"].idxmax()]
        tuned_gain, tuned_se = float(best["gain"]), _gain_se(best)
    else:
        tuned_gain, tuned_se = math.nan, math.nan
    sampled = adm[np.isfinite(adm["G"])]
    sampled_txt = ", ".join(f"G = {int(r.G)}: {r.gain:.3g}" for r in sampled.itertuples())
    return {
        "gain_over_predicted": float(base["gain"] / base["pred_gain"]),
        "gnorm_ratio_over_predicted": float(base["gnorm_ratio"] / base["pred_gnorm_ratio"]),
        "tuned_gain": tuned_gain,
        "se": {
            "gain_over_predicted": 0.0,
            "gnorm_ratio_over_predicted": 0.0,
            "tuned_gain": tuned_se,
        },
        "detail": f"admissible steps, ρ = 0, exact gradients: iterations gain "
        f"{base['gain']:.3g} vs predicted {base['pred_gain']:.3g} (a ratio of upper "
        f"bounds); gradient-norm ratio {base['gnorm_ratio']:.3g} vs predicted "
        f"{base['pred_gnorm_ratio']:.3g} (the quantity the reconstructed bound "
        f"covers); sampled groups {sampled_txt}; tuned steps: best gain "
        f"{tuned_gain:.3g} ± {tuned_se:.2g}",
    }


def kappa_values(t: dict) -> dict:
    """κ_8(0.05) from the exact κ table (SE 0)."""
    import numpy as np

    k = t["kappa"]
    k = k[k["G"] == 8]
    want = {"grpo": 2.31, "nemo/grpo": 1.47, "loo": 1.0}
    got = {}
    for name in want:
        c = k[k["estimator"] == name]
        got[name] = float(np.interp(0.05, c["p"], c["kappa"])) if len(c) else float("nan")
    err = max(abs(got[n] - want[n]) for n in want)
    return {
        "max_abs_error": err,
        "se": {"max_abs_error": 0.0},
        "detail": "κ_8(0.05): " + ", ".join(f"{n} {got[n]:.3f} (theory {want[n]})" for n in want),
    }


def plan_recovery(t: dict) -> dict:
    """Truth inside plan's 95% intervals on the simulated logs (a count: SE 0); a truth whose
    recovered value or interval is NaN is uncovered (a NaN is never a pass); the three formats
    read alike."""
    import numpy as np

    df = t["results"]
    spread = df.groupby(["env", "quantity", "G"], dropna=False)["recovered"].agg(np.ptp)
    first = df[df["format"] == df["format"].iloc[0]]
    checked = first[first["covered"].notna() | first["recovered"].isna()]
    ok = (
        checked["covered"].fillna(False).astype(bool)
        & checked["recovered"].notna()
        & checked["lo"].notna()
        & checked["hi"].notna()
    )
    missed = checked[~ok]
    gs = first[first["quantity"] == "G*"]
    return {
        "uncovered": len(missed),
        "format_spread": float(spread.max()),
        "se": {"uncovered": 0.0, "format_spread": 0.0},
        "detail": f"{len(checked) - len(missed)} of {len(checked)} truths inside the 95% "
        "interval with a recovered value (the curve's G share one fit: correlated); G* truth "
        "vs recovered: "
        + ", ".join(
            f"{r.env} {r.truth:.3g} vs {r.recovered:.3g} [{r.lo:.3g}, {r.hi:.3g}]"
            for r in gs.itertuples()
        )
        + f"; largest difference between formats {float(spread.max()):.2g}",
    }


def _worst_ratio(df, hi: str, lo: str, G: int) -> tuple[float, float, str]:
    """The largest MSE ratio hi/lo over the policies (or envs) at G, its SE and where."""
    worst = (math.nan, math.nan, "")
    by = "policy" if "policy" in df and df["policy"].notna().any() else "env"
    for name, sub in df[df["G"] == G].groupby(by):
        m = sub.set_index("estimator")
        r = ratio_and_se(
            m.loc[hi, "mse"], m.loc[hi, "mse_se"], m.loc[lo, "mse"], m.loc[lo, "mse_se"]
        )
        if math.isnan(worst[0]) or r[0] > worst[0]:
            worst = (*r, str(name))
    return worst


def oracle_close(t: dict) -> dict:
    """Fig. 4's observation 2 in numbers: the worst policy's loo/oracle MSE ratio at G = 8
    ("already close") and at G = 32 and 64 ("nearly indistinguishable"), each with its
    delta-method SE; NaN where the table lacks that G (the quick sizes)."""
    df = t["results"]
    out, se, parts = {}, {}, []
    for G in (8, 32, 64):
        r, s, where = (
            _worst_ratio(df, "loo", "oracle", G) if G in set(df["G"]) else (math.nan, math.nan, "")
        )
        out[f"loo_over_oracle_G{G}"], se[f"loo_over_oracle_G{G}"] = r, s
        parts.append(f"G = {G}: {r:.3f} ± {s:.3f}" + (f" ({where})" if where else " (not run)"))
    return {
        **out,
        "se": se,
        "detail": "worst loo/oracle MSE over the policies: " + "; ".join(parts),
    }


def no_filler_flip(t: dict) -> dict:
    """Every (policy, G) cell: a violation unless vanilla's MSE is below both the oracle's and
    loo's by 2 SE of the difference (a count: SE 0); and the exact theory's joint test (a p-value
    is its own test: SE 0)."""
    import numpy as np

    df = t["results"]
    bad, cells, worst = 0, 0, (math.inf, "")
    for (policy, G), sub in df.groupby(["policy", "G"]):
        m = sub.set_index("estimator")
        cells += 1
        for other in ("oracle", "loo"):
            gap = m.loc[other, "mse"] - m.loc["vanilla", "mse"]
            s = float(np.hypot(m.loc[other, "mse_se"], m.loc["vanilla", "mse_se"]))
            bad += gap <= 2 * s
            if gap / s < worst[0]:
                worst = (gap / s, f"{policy}, G = {int(G)}, {other}")
    joint = stats.joint_test(df, ("policy", "estimator"))
    p = math.nan if joint is None else joint["joint_p"]
    return {
        "flip_violations": int(bad),
        "joint_p": p,
        "se": {"flip_violations": 0.0, "joint_p": 0.0},
        "detail": f"vanilla below the oracle and loo, 2 SE clear, in {2 * cells - int(bad)} of "
        f"{2 * cells} comparisons (policy × G × baseline); least clear: "
        f"{worst[1]} ({worst[0]:.1f} SE); exact theory joint p = "
        f"{p:.2g}",
    }


def ustat_identity(t: dict) -> dict:
    """Lemma 1 on the zoo's cells: ustat (the pairwise U-statistic) and loo evaluated on the same
    draws; the largest difference of their MSE, squared bias and variance over every (env, G),
    relative to loo's MSE (a bias² near 0 would make its own relative difference float32 noise;
    float rounding only when the identity holds: exact, SE 0).  A quantity measured for one form
    and not the other counts as infinite; one measured for neither (NaN both) is skipped."""
    worst, n = 0.0, 0
    for _, sub in t["results"].groupby(["env", "G"]):
        m = sub.set_index("estimator")
        if not {"ustat", "loo"} <= set(m.index):
            continue
        n += 1
        scale = abs(float(m.loc["loo", "mse"]))
        for col in ("mse", "bias_sq", "variance"):
            a, b = float(m.loc["ustat", col]), float(m.loc["loo", col])
            if math.isnan(a) and math.isnan(b):
                continue
            gap = abs(a - b) / max(scale, 1e-30)
            worst = math.inf if math.isnan(gap) else max(worst, gap)
    worst = worst if n else math.nan
    return {
        "max_rel_diff": worst,
        "cells": n,
        "se": {"max_rel_diff": 0.0, "cells": 0.0},
        "detail": f"ustat vs loo on the same draws, {n} (env, G) cells: largest difference of "
        f"MSE, bias² and variance over loo's MSE {worst:.2g}",
    }


def _log_slope(G, y, se) -> tuple[float, float]:
    """Weighted least-squares slope of log y on log G (weights (y/se)², the delta method) and
    its SE; NaN unless every y is positive and every se finite and positive."""
    import numpy as np

    G, y, se = (np.asarray(a, np.float64) for a in (G, y, se))
    if len(G) < 2 or not (np.all(y > 0) and np.all(np.isfinite(se)) and np.all(se > 0)):
        return math.nan, math.nan
    x, w = np.log(G), (y / se) ** 2
    xm = np.sum(w * x) / np.sum(w)
    sxx = np.sum(w * (x - xm) ** 2)
    slope = float(np.sum(w * (x - xm) * (np.log(y) - np.sum(w * np.log(y)) / np.sum(w))) / sxx)
    return slope, float(1 / math.sqrt(sxx))


def _rate_table(t: dict) -> dict:
    """Per estimator besides the oracle: (G, predicted Σw − Σw_oracle, mean paired n·Δ
    difference at the largest n, its SE) (:func:`gpolab.labs.chi2.plots.differences`)."""
    from gpolab.labs.chi2.plots import differences

    names = [e for e in dict.fromkeys(t["results"]["estimator"]) if e != "oracle"]
    return {name: differences(t, name) for name in names}


def _rate_joint(rates: dict) -> tuple[float, float]:
    """Σ z² of the measured differences against the predicted ones (every G, χ² per estimator,
    Bonferroni over estimators) and the largest |z|."""
    import numpy as np
    from scipy.stats import chi2

    ps, zmax = [], 0.0
    for d in rates.values():
        z = (d[:, 2] - d[:, 1]) / d[:, 3]
        if not np.all(np.isfinite(z)):
            return math.nan, math.nan
        ps.append(float(chi2.sf(np.sum(z**2), len(z))))
        zmax = max(zmax, float(np.max(np.abs(z))))
    return min(1.0, len(ps) * min(ps)), zmax


def chi2_rate(t: dict) -> dict:
    """Corollary 9: Σw_loo − Σw_oracle against G on a log-log scale.  ``loo_slope`` is the
    weighted least-squares slope of the measured paired differences of n·Δ at the largest n (its
    SE by the delta method; expected −2), ``loo_slope_exact`` that of the predicted weights' sums
    (Lyapunov, exact: SE 0), ``joint_p`` the measured differences against the predicted ones."""
    rates = _rate_table(t)
    if "loo" not in rates:
        return {
            "loo_slope": math.nan,
            "loo_slope_exact": math.nan,
            "joint_p": math.nan,
            "se": {"loo_slope": math.nan, "loo_slope_exact": 0.0, "joint_p": 0.0},
            "detail": "no loo cells",
        }
    G, pred, mean, se = rates["loo"].T
    slope, slope_se = _log_slope(G, mean, se)
    exact = _log_slope(G, pred, pred * 1e-3)[0] if (pred > 0).all() else math.nan
    joint, zmax = _rate_joint(rates)
    return {
        "loo_slope": slope,
        "loo_slope_exact": exact,
        "joint_p": joint,
        "se": {"loo_slope": slope_se, "loo_slope_exact": 0.0, "joint_p": 0.0},
        "detail": f"log-log slope of Σw_loo − Σw_oracle over G = "
        f"{', '.join(str(int(g)) for g in G)}: measured {slope:.2f} ± {slope_se:.2f}"
        f", predicted {exact:.2f}; G² × measured difference: "
        + ", ".join(f"{g**2 * m:.3g}" for g, m in zip(G, mean, strict=True))
        + f"; measured vs predicted differences joint p = {joint:.2g}, largest |z| "
        f"{zmax:.2f}",
    }


def chi2_prompt_only(t: dict) -> dict:
    """Corollary 10 for the prompt-only baseline 0 (vanilla): the G where its predicted Σw is not
    above the oracle's (exact: SE 0), the log-log slope of its measured excess (SE: delta
    method) and the measured differences against the predicted ones (``joint_p``)."""
    rates = _rate_table(t)
    if "vanilla" not in rates:
        return {
            "excess_violations": math.nan,
            "vanilla_slope": math.nan,
            "joint_p": math.nan,
            "se": {"excess_violations": 0.0, "vanilla_slope": math.nan, "joint_p": 0.0},
            "detail": "no vanilla cells",
        }
    G, pred, mean, se = rates["vanilla"].T
    bad = int((pred <= 0).sum())
    res = t["results"]
    last = res[res["n"] == res["n"].max()].set_index(["estimator", "G"])["weights"]
    low = [float(min(last["vanilla", g]) / min(last["oracle", g]) - 1) for g in G]
    slope, slope_se = _log_slope(G, mean, se)
    joint, zmax = _rate_joint(rates)
    return {
        "excess_violations": bad,
        "vanilla_slope": slope,
        "joint_p": joint,
        "se": {"excess_violations": 0.0, "vanilla_slope": slope_se, "joint_p": 0.0},
        "detail": f"Σw_vanilla − Σw_oracle, predicted at G = "
        f"{', '.join(str(int(g)) for g in G)}: "
        + ", ".join(f"{p:.3g}" for p in pred)
        + f" ({bad} not above 0); smallest weight, vanilla against the oracle: "
        + ", ".join(f"{100 * x:+.1f}%" for x in low)
        + f"; measured log-log slope {slope:.2f} ± "
        f"{slope_se:.2f}; joint p = {joint:.2g}, largest |z| {zmax:.2f}",
    }


def pool_argmin(t: dict) -> dict:
    """The finite prompt pool: budgets whose best G on the pool's own target is separated from
    every other G and equals the pool law's best feasible divisor, and budgets where it differs
    from the infinite-pool law's best divisor (the pool moved G*); counts: SE 0."""
    s = t["summary"]
    if "empirical_best_G_pool" not in s:
        return {
            "argmin_matches_prediction": math.nan,
            "n_budgets": len(s),
            "moved": math.nan,
            "se": {"argmin_matches_prediction": 0.0, "n_budgets": 0.0, "moved": 0.0},
            "detail": "no pool in this run",
        }
    sep = s["tied_G_pool"].astype(str) == s["empirical_best_G_pool"].astype(str)
    matches = int(((s["empirical_best_G_pool"] == s["predicted_best_G"]) & sep).sum())
    moved = int(((s["empirical_best_G_pool"] != s["infinite_pool_best_G"]) & sep).sum())
    return {
        "argmin_matches_prediction": matches,
        "n_budgets": len(s),
        "moved": moved,
        "se": {"argmin_matches_prediction": 0.0, "n_budgets": 0.0, "moved": 0.0},
        "detail": f"P = {int(s['pool'].iloc[0])} prompts; best G per N (pool law, smallest "
        f"feasible G = N/P, infinite-pool law): "
        + "; ".join(
            f"N={r.N}: {r.empirical_best_G_pool} (tied: {r.tied_G_pool}; "
            f"{r.predicted_best_G}, {r.min_G}, {r.infinite_pool_best_G})"
            for r in s.itertuples()
        )
        + f"; the pool law's continuous minimiser {s['g_star_pool'].iloc[0]:.2f}, "
        f"the infinite pool's {s['g_star_exact'].iloc[0]:.2f}",
    }


def tree_overlap_boundary(t: dict) -> dict:
    """Thoughts that share features (the loglinear model at one leaf budget): where the best split
    of the whole budget has M > 1, over the overlap ρ and L_think/L_answer grids of
    :func:`gpolab.theory.tree_overlap.winners`.  ``violations``: grid points above a ratio's
    boundary where branching does not pay; ``moving_ratios``: think ratios whose boundary lies
    strictly inside (0, 1) (the overlap decides); ``flat_when_free``: overlaps at which flat
    sampling wins when thinking is free; counts (SE 0).  ``joint_p``: the six Monte Carlo
    moments against the exact ones (per moment Σ z² over the cells against χ², Bonferroni over
    the moments, which share draws; a p-value: SE 0)."""
    import numpy as np
    from scipy.stats import chi2

    from gpolab.theory import tree_overlap as ov

    df = t["results"]
    tt, c = float(df["ov_target_sq"].iloc[0]), float(df["ov_strategy_dot"].iloc[0])
    wins = ov.winners(df, tt, c)
    b = ov.boundary(wins)
    inside = [r for r, rho in b["rho_star"].items() if 0 < rho < 1]
    free = wins[wins["ratio"] == 0]
    ps = []  # per moment: Σ z² over the cells (independent streams) ~ χ²; Bonferroni over moments
    for m in ov.MOMENTS:
        z = ((df[f"ov_{m}"] - df[f"theory_ov_{m}"]) / df[f"ov_{m}_se"]).to_numpy(np.float64)
        z = z[np.isfinite(df[f"theory_ov_{m}"].to_numpy(np.float64))]
        ps.append(float(chi2.sf(np.sum(z**2), len(z))) if np.all(np.isfinite(z)) else math.nan)
    p = min(1.0, len(ps) * min(ps)) if not any(map(math.isnan, ps)) else math.nan
    stars = ", ".join(
        f"{r:.3g}: {'never' if math.isnan(v) else f'ρ ≥ {v:g}'}" for r, v in b["rho_star"].items()
    )
    return {
        "violations": b["violations"],
        "moving_ratios": len(inside),
        "flat_when_free": int((free["pays"] == "flat").sum()),
        "n_overlaps": len(free),
        "joint_p": p,
        "se": {
            "violations": 0.0,
            "moving_ratios": 0.0,
            "flat_when_free": 0.0,
            "n_overlaps": 0.0,
            "joint_p": 0.0,
        },
        "detail": f"{int(df['K'].iloc[0] * df['M'].iloc[0])} leaves; branching (M > 1) pays, "
        f"by L_think/L_answer: {stars}; {b['violations']} grid points above a "
        f"boundary where it stops paying; source {wins['source'].iloc[0]}; the six "
        f"moments against exact theory: joint p = {p:.2g}",
    }


def _arcsin_rows(t: dict):
    return t["arcsin_direction"].sort_values("G")


def arcsin_direction(t: dict) -> dict:
    """Proposition 13 on the exact mean direction (count tables, SE 0): its relative error to
    ∇E[2 arcsin √V] at the largest G and at G = 8 (NaN without that G), the steps in G where that
    error does not fall, and how much closer it is to ∇𝒥 than to ∇E V at the largest G (cos
    difference)."""
    import numpy as np

    d = _arcsin_rows(t)
    err = d["rel_err"].to_numpy(np.float64)
    last = d.iloc[-1]
    closer = float(last["cos_arcsin"] - last["cos_plain"])
    at8 = d.loc[d["G"] == 8, "rel_err"]
    return {
        "rel_err_at_max_G": float(err[-1]),
        "non_decreasing_steps": int(np.sum(np.diff(err) >= 0)),
        "closer_to_arcsin": closer,
        "rel_err_at_G8": float(at8.iloc[0]) if len(at8) else math.nan,
        "se": {
            "rel_err_at_max_G": 0.0,
            "non_decreasing_steps": 0.0,
            "closer_to_arcsin": 0.0,
            "rel_err_at_G8": 0.0,
        },
        "detail": "‖E ĝ − ∇𝒥‖/‖∇𝒥‖ by G: "
        + ", ".join(f"{int(r.G)}: {r.rel_err:.3g}" for r in d.itertuples())
        + f"; at G = {int(last['G'])} cos(E ĝ, ∇𝒥) = {last['cos_arcsin']:.5f}, cos(E ĝ, ∇E V) "
        f"= {last['cos_plain']:.4f} (cos(∇𝒥, ∇E V) = {last['cos_target_plain']:.4f})",
    }


def lemma11_ratio(t: dict) -> dict:
    """Lemma 11: E‖ĝ − U_std‖²/E‖U_std‖² exactly (SE 0) at the largest G and the steps where it
    does not fall; the measured ratios against the exact ones (Σ z², χ² over G: a p-value)."""
    import numpy as np
    from scipy.stats import chi2

    d = _arcsin_rows(t)
    exact = d["u_ratio_exact"].to_numpy(np.float64)
    z = ((d["u_ratio"] - d["u_ratio_exact"]) / d["u_ratio_se"]).to_numpy(np.float64)
    p = float(chi2.sf(np.sum(z**2), len(z))) if np.all(np.isfinite(z)) else math.nan
    return {
        "ratio_at_max_G": float(exact[-1]),
        "non_decreasing_steps": int(np.sum(np.diff(exact) >= 0)),
        "joint_p": p,
        "se": {"ratio_at_max_G": 0.0, "non_decreasing_steps": 0.0, "joint_p": 0.0},
        "detail": "exact E‖ĝ − U‖²/E‖U‖² by G: "
        + ", ".join(
            f"{int(r.G)}: {r.u_ratio_exact:.3g} (measured {r.u_ratio:.3g} ± {r.u_ratio_se:.2g})"
            for r in d.itertuples()
        )
        + f"; measured vs exact p = {p:.2g}",
    }


def offpolicy_order(t: dict) -> dict:
    """Thm 12's order on the token rule (theory §13): the slopes of its paired bias² in η (at the
    largest m; the smallest three and the largest two step sizes) and in the lag k + j,
    recomputed from the results and updates tables, each with its SE, and their distances from 2;
    the token rule's paired bias at the largest η and m in SEs (the detail: the fits only use
    points resolved 3 SE above 0) and the largest |bias²|/SE of the SIS rule's own rows at m > 1
    (unbiased)."""
    import numpy as np

    from gpolab.labs.offpolicy import lab as offpolicy

    res, upd = t["results"], t["updates"]
    sc = offpolicy.scaling(upd, res).set_index("ratio").loc["token"]
    tok = res[res["ratio"] == "token"]
    top = tok[
        (tok["m"] == tok["m"].max())
        & (tok["eta"] == tok["eta"].max())
        & (tok["staleness"] == tok["staleness"].min())
    ].iloc[0]
    sis = res[(res["ratio"] == "sis") & (res["m"] > 1)]
    z = np.abs(sis["bias_sq"] / sis["bias_sq_se"]).to_numpy(np.float64)
    sis_z = float(np.max(z)) if len(z) and np.all(np.isfinite(z)) else math.nan
    names = ("slope_eta_low", "slope_eta_high", "slope_lag")
    out = {n: float(sc[n]) for n in names}
    out |= {
        "slope_eta_low_dev": abs(out["slope_eta_low"] - 2),
        "slope_lag_dev": abs(out["slope_lag"] - 2),
        "token_bias_z": float(top["bias_sq_paired"] / top["bias_sq_paired_se"]),
        "sis_max_z": sis_z,
    }
    se = {**{n: float(sc[n + "_se"]) for n in names}, "token_bias_z": 1.0, "sis_max_z": 0.0}
    se |= {"slope_eta_low_dev": se["slope_eta_low"], "slope_lag_dev": se["slope_lag"]}
    etas = sorted(tok["eta"].unique())
    return {
        **out,
        "se": se,
        "detail": f"token at m = {int(tok['m'].max())}: bias² ∝ η^{out['slope_eta_low']:.2f} "
        f"± {se['slope_eta_low']:.2f} over the smallest step sizes (η from {etas[0]:g}), "
        f"η^{out['slope_eta_high']:.2f} ± {se['slope_eta_high']:.2f} over the largest (up to "
        f"{etas[-1]:g}), η^{float(sc['slope_eta']):.2f} ± {float(sc['slope_eta_se']):.2f} "
        f"over all; ∝ lag^{out['slope_lag']:.2f} ± {se['slope_lag']:.2f} at η = "
        f"{float(sc['lag_eta']):g}; "
        f"paired bias² at η = {top['eta']:g}, m = {int(top['m'])}: "
        f"{top['bias_sq_paired']:.3g} ± {top['bias_sq_paired_se']:.2g} "
        f"(MSE {top['mse']:.3g}); SIS: largest |bias²|/SE {sis_z:.2f} over {len(z)} rows",
    }


# ------------------------------------------------------------------ groupsize_budget (issue 42)
# The budget check's summary: one row per (env, pool P, N) with the best G by rollouts to target
# and its 95%-CI ties, by J at compute total/d (``best_G_value_c{d}``, d = 8, 4, 2, 1) and the
# rule's G (gpolab/labs/groupsize/budget.py).


def _gs(text) -> set[int]:
    """The G of a tie list "2,4,8"."""
    return {int(g) for g in str(text).split(",") if g}


def _moves(s, before: str, after: str):
    """(up, down) boolean arrays over the rows: the best G of ``after`` above (below) the one of
    ``before``, with ``before``'s best outside ``after``'s ties (a move inside the CIs is none)."""
    import numpy as np

    b, a = s[f"best_G_{before}"].to_numpy(), s[f"best_G_{after}"].to_numpy()
    clear = np.array([g not in _gs(t) for g, t in zip(b, s[f"tied_G_{after}"], strict=True)])
    return (a > b) & clear, (a < b) & clear


def budget_universal(t: dict) -> dict:
    """[U] Thm 7 in training, prompts drawn afresh (P = 0): one G tied with the best (fewest
    rollouts to target) at every N (a count: SE 0); controls: every N's tie set holds at most
    half its divisors (else a flat curve passes) and the best G reaches the target in at least
    half its runs at every N (else every run is censored and all G tie)."""
    s = t["summary"][t["summary"]["pool"] == 0]
    if s.empty:
        return {"shared_best": math.nan, "se": {"shared_best": 0.0}, "detail": "no P = 0 rows"}
    shared = {
        env: set.intersection(*(_gs(x) for x in rows["tied_G"])) for env, rows in s.groupby("env")
    }
    n = int(t["results"]["n_seeds"].min())
    reached = float(s["best_reached"].min())
    return {
        "shared_best": int(all(shared.values())),
        "distinct_best": int(s.groupby("env")["best_G"].nunique().max()),
        "tie_share_max": float(s["tie_share"].max()),
        "best_reached_min": reached,
        "se": {
            "shared_best": 0.0,
            "distinct_best": 0.0,
            "tie_share_max": 0.0,
            "best_reached_min": math.sqrt(max(reached * (1 - reached), 1 / n) / n),
        },
        "detail": "prompts drawn afresh; fewest rollouts to target per N: "
        + ", ".join(
            f"{r.env} N={r.N}: G={r.best_G} (tied {r.tied_G}; rule {r.rule_G})"
            for r in s.itertuples()
        )
        + "; G tied at every N: "
        + ", ".join(f"{env} {sorted(g) or 'none'}" for env, g in shared.items()),
    }


def budget_compute_rise(t: dict) -> dict:
    """IsoCompute's trend at a fixed per-step budget N: over the (P, N) settings, the best G by J
    rises clearly from compute total/8 to total (share, binomial SE over settings), then levels
    off (the best G at total tied with the one at total/2, among the rising settings); control:
    no setting's best G falls clearly (noise would move it both ways)."""
    import numpy as np

    s = t["summary"]
    up, down = _moves(s, "value_c8", "value_c1")
    last = [g in _gs(x) for g, x in zip(s["best_G_value_c1"], s["tied_G_value_c2"], strict=True)]
    n = len(s)
    rise_frac, level_frac = float(up.mean()), float((up & np.array(last)).mean())
    return {
        "rise_frac": rise_frac,
        "rise_then_level_frac": level_frac,
        "falls": int(down.sum()),
        "se": {
            "rise_frac": _frac_se(rise_frac, n),
            "rise_then_level_frac": _frac_se(level_frac, n),
            "falls": 0.0,
        },
        "detail": "best G by J at compute total/8 → /4 → /2 → total, per (P, N): "
        + "; ".join(
            f"{r.env} P={r.pool} N={r.N}: {r.best_G_value_c8} → {r.best_G_value_c4} → "
            f"{r.best_G_value_c2} → {r.best_G_value_c1}"
            for r in s.itertuples()
        ),
    }


def two_vs_sixteen(t: dict) -> dict:
    """2-GRPO's comparison at its rollout ratio: G = 2 and G = 16 with the same prompts per step B
    and the same number of steps (G = 2 at N = 2B uses 1/8 of G = 16's rollouts at N = 16B):
    J of G = 2 after total/(16B) steps over J of G = 16 after as many, the smallest over (P, B)
    (delta-method SE); control: G = 16's gain over J(θ0) at least 3 SE everywhere (else nothing
    trained and any ratio is near 1)."""
    r = t["results"].set_index(["env", "pool", "N", "G"])
    ratios, gains, parts = [], [], []
    for env, P, N, G in r.index:
        if G != 2 or (env, P, 8 * N, 16) not in r.index:
            continue
        two, big = r.loc[(env, P, N, 2)], r.loc[(env, P, 8 * N, 16)]
        ratio = ratio_and_se(two["value_c8"], two["value_c8_se"], big["pass1"], big["pass1_se"])
        ratios.append(ratio)
        gains.append((big["pass1"] - big["j0"]) / big["pass1_se"])
        parts.append(
            f"{env} P={P} B={N // 2}: J {two['value_c8']:.4f} (G=2, N={N}) vs {big['pass1']:.4f} "
            f"(G=16, N={8 * N}), ratio {ratio[0]:.4f} ± {ratio[1]:.4f}"
        )
    if not ratios:
        nan = {"ratio_min": math.nan, "gain16_z_min": math.nan}
        return {**nan, "se": {"ratio_min": 0.0, "gain16_z_min": 0.0}, "detail": "no pair"}
    worst = min(ratios)
    return {
        "ratio_min": worst[0],
        "gain16_z_min": float(min(gains)),
        "se": {"ratio_min": worst[1], "gain16_z_min": 1.0},
        "detail": "; ".join(parts),
    }


def budget_pool_shift(t: dict) -> dict:
    """gpolab's finite-pool mechanism in training: per pool P ≥ 1 the best G (fewest rollouts to
    target) at the largest N lies clearly above the one at the smallest N (counts: SE 0);
    negative control: with prompts drawn afresh (P = 0) it does not."""
    s = t["summary"]
    rises = {}
    for (env, P), sub in s.groupby(["env", "pool"], sort=False):
        sub = sub.sort_values("N")
        lo, hi = sub.iloc[0], sub.iloc[-1]
        rises[env, int(P)] = int(
            hi["best_G"] > lo["best_G"] and lo["best_G"] not in _gs(hi["tied_G"])
        )
    finite = [k for k in rises if k[1]]
    infinite = [rises[k] for k in rises if not k[1]]
    return {
        "rises": sum(rises[k] for k in finite),
        "n_pools": len(finite),
        "rises_infinite": sum(infinite) if infinite else math.nan,
        "se": {"rises": 0.0, "n_pools": 0.0, "rises_infinite": 0.0},
        "detail": "best G by rollouts to target, smallest → largest N: "
        + "; ".join(
            f"{env} P={P}: "
            + " → ".join(
                f"{r.best_G} (N={r.N})"
                for r in s[(s["env"] == env) & (s["pool"] == P)].sort_values("N").itertuples()
            )
            for env, P in rises
        ),
    }


def budget_rule(t: dict) -> dict:
    """The rule (:func:`gpolab.theory.groupsize.training_rule`) against training: the share of
    (P, N) settings whose measured best G (fewest rollouts to target) is tied with the rule's G
    (binomial SE over settings); control: the mean tie share at most one half (a flat curve ties
    everything and the rule would pass vacuously)."""
    s = t["summary"]
    n = len(s)
    match = float(s["rule_in_ties"].mean())
    exact = int((s["rule_G"] == s["best_G"]).sum())
    return {
        "rule_match_frac": match,
        "tie_share_mean": float(s["tie_share"].mean()),
        "se": {"rule_match_frac": _frac_se(match, n), "tie_share_mean": 0.0},
        "detail": f"{exact} of {n} settings: the rule's G is the best; per (P, N) rule / best "
        "(ties): "
        + "; ".join(
            f"{r.env} P={r.pool} N={r.N}: {r.rule_G} / {r.best_G} ({r.tied_G})"
            for r in s.itertuples()
        ),
    }


# ------------------------------------------------------------------ rollout–training mismatch
# (issue 43) The off-policy lab's mismatch mode (gpolab/labs/offpolicy/mismatch.py): one row per
# (T, mismatch, correction) with bias_sq, variance and scale (each ± SE from 8 seed batches) and
# the mismatch's exact size (mismatch_kl per token, mismatch_kl_seq, mismatch_tv_max,
# mismatch_chi2_seq).

UNTRUNCATED = 1e6  # an IS threshold at least this large: no weight of these experiments reaches it


def _untruncated(df, name: str):
    """The rows of correction ``name`` run with a threshold no weight reaches (verl's TIS with
    is_threshold ≥ :data:`UNTRUNCATED`: plain importance sampling up to the ±20 log clamp)."""
    from gpolab.estimators import mismatch

    def plain(spec) -> bool:
        n, options = mismatch.parse(spec)
        t = options.get("is_threshold")
        return n == name and isinstance(t, float) and t >= UNTRUNCATED

    return df[df["correction"].map(plain).to_numpy(bool)]


def _log_fit(xs, y, se) -> tuple[list[float], list[float]]:
    """Weighted least squares of log y on 1 and log x for each x in ``xs`` (weights (y/se)², the
    delta method): the slopes and their SEs, inflated by √(χ²/dof) when the points scatter more
    than their SEs allow (a curved relation is not read as a precise slope).  NaN unless every y
    is positive, every se finite and positive and the design has full rank."""
    import numpy as np

    y, se = np.asarray(y, np.float64), np.asarray(se, np.float64)
    nan = [math.nan] * len(xs)
    if not (len(y) > len(xs) and np.all(y > 0) and np.all(np.isfinite(se)) and np.all(se > 0)):
        return nan, nan
    X = np.column_stack([np.ones(len(y)), *(np.log(np.asarray(x, np.float64)) for x in xs)])
    w = (y / se) ** 2
    A = X.T @ (w[:, None] * X)
    if np.linalg.matrix_rank(A) < X.shape[1]:
        return nan, nan
    cov = np.linalg.inv(A)
    beta = cov @ (X.T @ (w * np.log(y)))
    dof = len(y) - X.shape[1]
    chi2 = float(np.sum(w * (np.log(y) - X @ beta) ** 2))
    cov *= max(1.0, chi2 / dof) if dof > 0 else 1.0
    return [float(b) for b in beta[1:]], [float(math.sqrt(cov[i, i])) for i in range(1, len(beta))]


def _unbiased_p(rows) -> tuple[float, float]:
    """(p, largest |z|): is every row's bias² zero?  Per row z = bias_sq/bias_sq_se, a t with
    splits − 1 degrees of freedom (the SE comes from the lab's seed batches), two-sided, combined
    by Bonferroni (valid for rows that share draws); NaN without rows or with a NaN."""
    import inspect

    import numpy as np
    from scipy.stats import t as student

    from gpolab.labs.offpolicy import mismatch as lab

    splits = inspect.signature(lab.measure).parameters["splits"].default
    z = (rows["bias_sq"] / rows["bias_sq_se"]).to_numpy(np.float64)
    if not len(z) or not np.all(np.isfinite(z)):
        return math.nan, math.nan
    return _bonferroni(2 * student.sf(np.abs(z), splits - 1)), float(np.max(np.abs(z)))


def mismatch_token_bias(t: dict) -> dict:
    """[LL] token-level IS's O(T² Δ_max) bias, as the order of an upper bound, on untruncated
    token IS (verl's token TIS, threshold out of reach): ‖bias‖ = √bias² of the rows with a
    mismatch whose bias² is resolved (≥ 3 SE), fitted as log ‖bias‖ = a + s_T log T + s_Δ log Δ
    with Δ = ``mismatch_tv_max``, the largest per-token total variation ½Σ|μ − π| over the
    states μ visits (gpolab's reading: the blog's Δ_max is not defined in the text read; it
    measures bias with TV, and verl's docs gloss Δ_max as the maximum per-token policy
    divergence).  ``slope_T`` (≤ 2 for the bound's order in T) and ``slope_delta`` (≥ 1: a
    bound C·T²·Δ on Δ ≤ 1 needs the bias to vanish no slower than linearly as Δ → 0; a larger
    power is inside it) with their SEs; NaN unless the row at the largest T and mismatch
    is resolved (≥ 3 SE: else no order is seen).  Control ``control_p``: the rows without
    mismatch (weights 1: unbiased) have bias² 0 (:func:`_unbiased_p`, a p-value: SE 0)."""
    import numpy as np

    df = _untruncated(t["results"], "verl/token_tis")
    on = df[df["mismatch_size"] > 0].sort_values(["mismatch_size", "T"])
    z = (on["bias_sq"] / on["bias_sq_se"]).to_numpy(np.float64)
    fit = on[z >= 3]
    top = on.iloc[-1]  # the largest mismatch at its largest T
    top_z = float(top["bias_sq"] / top["bias_sq_se"])
    norm = np.sqrt(fit["bias_sq"].clip(lower=0))
    norm_se = fit["bias_sq_se"] / (2 * norm)
    (s_T, s_D), (se_T, se_D) = _log_fit([fit["T"], fit["mismatch_tv_max"]], norm, norm_se)
    (_, s_n), (_, se_n) = _log_fit([fit["T"], fit["mismatch_size"]], norm, norm_se)
    if not top_z >= 3:
        s_T = s_D = se_T = se_D = math.nan
    per = []
    for size, rows in fit.groupby("mismatch_size"):
        b = np.sqrt(rows["bias_sq"])
        (s,), (s_se,) = _log_fit([rows["T"]], b, rows["bias_sq_se"] / (2 * b))
        per.append(f"noise {size:g}: T^{s:.2f} ± {s_se:.2f} ({len(rows)} T)")
    p, zmax = _unbiased_p(df[df["mismatch_size"] == 0])
    return {
        "slope_T": s_T,
        "slope_delta": s_D,
        "control_p": p,
        "se": {"slope_T": se_T, "slope_delta": se_D, "control_p": 0.0},
        "detail": f"untruncated token IS, {len(fit)} of {len(on)} rows with a mismatch resolved "
        f"(bias² ≥ 3 SE): ‖bias‖ ∝ T^{s_T:.2f} ± {se_T:.2f} · Δ^{s_D:.2f} ± {se_D:.2f}, Δ = "
        f"the largest per-token TV(μ, π) (gpolab's reading of Δ_max); in the noise size ∝ "
        f"s^{s_n:.2f} ± {se_n:.2f}; per noise: {'; '.join(per)}; at T = "
        f"{int(top['T'])}, noise {top['mismatch_size']:g}: bias² {top['bias_sq']:.3g} ± "
        f"{top['bias_sq_se']:.2g} ({top_z:.1f} SE); no mismatch: largest |bias²|/SE {zmax:.2f}",
    }


SEQ_CHI2_RESOLVED = 10.0  # 1 + χ²_seq up to which the seeds see the weights' tail (variance fit)


def mismatch_seq_variance(t: dict) -> dict:
    """[LL] sequence-level IS: zero bias, variance growing like (1 + χ²)^T, on untruncated
    sequence IS (verl's seq TIS, threshold out of reach; the ±20 log clamp not reached).
    ``unbiased_p``: every row with a mismatch (every T and size) has bias² 0 (:func:`_unbiased_p`;
    a p-value: SE 0).  ``slope_dev``: |s − 1|, s the slope of log(variance / the uncorrected
    variance) against log(1 + χ²_seq), χ²_seq = E_μ[(π/μ)²] − 1 of whole sequences (exact;
    ≤ (1 + χ²_tok,max)^T − 1), fitted where 1 + χ²_seq ≤ :data:`SEQ_CHI2_RESOLVED` (beyond, the
    seeds miss the weights' tail and the measured variance falls short); the ratio's SE by the
    delta method.  Control ``token_slope``: the same slope for untruncated token IS, whose
    weights do not multiply along the sequence (it stays near 0: the growth is the sequence
    weights', not the mismatch's)."""
    import numpy as np

    res = t["results"]
    base = res[res["correction"] == "none"].set_index(["T", "mismatch"])

    def ratios(rows):  # variance over the uncorrected one (delta-method SE) and 1 + χ²_seq
        rows = rows[rows["mismatch_size"] > 0]
        b = base.loc[list(zip(rows["T"], rows["mismatch"], strict=True))]
        a, sa = rows["variance"].to_numpy(np.float64), rows["variance_se"].to_numpy(np.float64)
        c, sc = b["variance"].to_numpy(np.float64), b["variance_se"].to_numpy(np.float64)
        r, x = a / c, 1 + rows["mismatch_chi2_seq"].to_numpy(np.float64)
        return rows, r, np.abs(r) * np.hypot(sa / a, sc / c), x

    seq, r, r_se, x = ratios(_untruncated(res, "verl/seq_tis"))
    keep = x <= SEQ_CHI2_RESOLVED
    (s,), (s_se,) = _log_fit([x[keep]], r[keep], r_se[keep])
    tok, tr, tr_se, tx = ratios(_untruncated(res, "verl/token_tis"))
    tkeep = tx <= SEQ_CHI2_RESOLVED
    (ts,), (ts_se,) = _log_fit([tx[tkeep]], tr[tkeep], tr_se[tkeep])
    p, zmax = _unbiased_p(seq)
    pts = ", ".join(
        f"T = {int(T)} {m}: {a:.3g} ± {b:.2g} vs {c:.3g}"
        for T, m, a, b, c in zip(seq["T"], seq["mismatch"], r, r_se, x, strict=True)
    )
    return {
        "unbiased_p": p,
        "slope_dev": abs(s - 1),
        "token_slope": ts,
        "se": {"unbiased_p": 0.0, "slope_dev": s_se, "token_slope": ts_se},
        "detail": f"untruncated sequence IS: variance over the uncorrected one against 1 + χ²_seq "
        f"(exact): {pts}; fit over the {int(keep.sum())} rows with 1 + χ²_seq ≤ "
        f"{SEQ_CHI2_RESOLVED:g}: ∝ (1 + χ²_seq)^{s:.2f} ± {s_se:.2f} (token IS: "
        f"^{ts:.2f} ± {ts_se:.2f}); bias² over {len(seq)} rows with a mismatch: largest "
        f"|bias²|/SE {zmax:.2f}, joint p = {p:.2g}",
    }


CLAMP = 20.0  # verl's clamp on the summed log-ratio of sequence-level weights (±20)
COLLAPSED, ALIVE = 0.1, 0.5  # scale = E ĝ·g/‖g‖² of a collapsed estimate, of a working one
BEFORE_CLAMP = 5.0  # sequence KL at most this: well before the clamp


def mismatch_seq_collapse(t: dict) -> dict:
    """[FK] "sequence-level IS collapses when [T·KL reaches] verl's clamp of 20, and often earlier",
    on the scale E ĝ·g/‖g‖² (1: no shrinkage; 0: the weights zero the estimate) of every
    sequence-level correction of the experiment (``level == "sequence"``) against the sequence KL
    T·KL = ``mismatch_kl_seq``: ``collapsed_max``, the largest scale past the clamp (KL_seq > 20;
    collapse: ≤ 0.1).  A row the sampler cannot resolve (``resolved`` ≠ "yes") carries the scale
    of draws from π (:func:`gpolab.labs.offpolicy.mismatch.per_seed_pi`), which sees the weight's
    tail.  "Often earlier" bounds nothing, so the smallest scale short of the clamp is reported
    (``before_min``, KL_seq ≤ 5), not ruled.  Control ``control_min``: the smallest scale of the
    token-level rows (no correction, token TIS) past the clamp, which the sequence weights'
    collapse does not touch (> 0.1).  Each with its row's jackknife SE."""
    import numpy as np

    res = t["results"]
    seq = (res["level"] == "sequence").to_numpy()
    past = (res["mismatch_kl_seq"] > CLAMP).to_numpy()
    before = (res["mismatch_kl_seq"] <= BEFORE_CLAMP).to_numpy()

    def extreme(rows, pick):  # (value, SE) of the row with the largest or smallest scale
        if rows.empty or not np.all(np.isfinite(rows["scale"])):
            return math.nan, math.nan
        r = rows.loc[getattr(rows["scale"], pick)()]
        return float(r["scale"]), float(r["scale_se"])

    hi, hi_se = extreme(res[seq & past], "idxmax")
    lo, lo_se = extreme(res[seq & before], "idxmin")
    ctl, ctl_se = extreme(res[~seq & past], "idxmin")
    mid = res[seq & ~past & ~before]  # past 5, short of the clamp
    early = (
        f"; short of the clamp ({BEFORE_CLAMP:g} < KL_seq ≤ {CLAMP:g}) the largest sequence-level "
        f"scale is already {mid['scale'].max():.3g}"
        if len(mid)
        else ""
    )
    parts = [
        f"{c}: "
        + ", ".join(f"{r.scale:.3g}" for r in rows.sort_values("mismatch_kl_seq").itertuples())
        for c, rows in res.groupby("correction", sort=False)
    ]
    kls = ", ".join(f"{k:.3g}" for k in sorted(res["mismatch_kl_seq"].unique()))
    return {
        "collapsed_max": hi,
        "before_min": lo,
        "control_min": ctl,
        "se": {"collapsed_max": hi_se, "before_min": lo_se, "control_min": ctl_se},
        "detail": f"T = {int(res['T'].max())}, scale E ĝ·g/‖g‖² at KL_seq = {kls}: "
        + "; ".join(parts)
        + f"; past the clamp (KL_seq > {CLAMP:g}) the largest sequence-level scale "
        f"{hi:.3g} ± {hi_se:.2g}; at KL_seq ≤ {BEFORE_CLAMP:g} the smallest {lo:.3g} ± "
        f"{lo_se:.2g}{early}; token-level past the clamp: smallest {ctl:.3g} ± {ctl_se:.2g}",
    }
