"""Statistics of the claims ledger on the experiments' saved tables (``statistic = "name"`` in
``claims_ledger.toml``).  Each takes one experiment's tables and returns the values its rules read,
``se`` (one standard error per ruled quantity: 0 when exact or count-valued) and a one-line
``detail``.  The statistics that test exact theory against Monte Carlo jointly live in
:mod:`gpolab.labs.claims` beside the joint test they call; :data:`gpolab.labs.claims.STATISTICS`
is the one name list.
"""

from __future__ import annotations

import math


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
    return [_gap(v.loc[a, "mse"], v.loc[a, "mse_se"], v.loc[b, "mse"], v.loc[b, "mse_se"])
            for a, b in (("base", "instruct"), ("instruct", "icl"))]  # fmt: skip


def strength_order(t: dict) -> dict:
    df = t["results"]
    G = 16 if 16 in set(df["G"]) else int(df["G"].max())
    v = df[(df["estimator"] == "vanilla") & (df["G"] == G)].set_index("policy")
    ratio = ratio_and_se(v.loc["base", "mse"], v.loc["base", "mse_se"], v.loc["icl", "mse"],
                   v.loc["icl", "mse_se"])  # fmt: skip
    gap = min(_order_gaps(df, "vanilla", G))
    return {"base_over_icl": ratio[0], "smallest_gap": gap[0],
            "se": {"base_over_icl": ratio[1], "smallest_gap": gap[1]},
            "detail": f"vanilla MSE at G = {G}: base {v.loc['base', 'mse']:.3g}, instruct "
                      f"{v.loc['instruct', 'mse']:.3g}, icl {v.loc['icl', 'mse']:.3g} (mean V "
                      "0.15 / 0.40 / 0.65): grows with strength (why, and a family that reverses "
                      "it: docs/arithmetic.md)"}  # fmt: skip


def strength_family(t: dict) -> dict:
    df = t["results"]
    G = int(df["G"].max())
    gaps, parts = [], []
    for e in ("vanilla", "loo", "oracle"):
        v = df[(df["estimator"] == e) & (df["G"] == G)].set_index("policy")["mse"]
        gaps += _order_gaps(df, e, G)
        parts.append(f"{e} {v['base']:.3g} > {v['instruct']:.3g} > {v['icl']:.3g}")
    gap = min(gaps, key=lambda g: g[0] / g[1] if g[1] > 0 else g[0] * math.inf)
    return {"smallest_gap_z": gap[0] / gap[1], "se": {"smallest_gap_z": 1.0},
            "detail": f"G = {G}, base > instruct > icl: " + "; ".join(parts)
            + f"; least clear gap {gap[0]:.3g} ± {gap[1]:.3g}"}  # fmt: skip


THINK_RATIOS = (0.0, 0.25, 1.0, 4.0)  # L_think / L_answer at which tree_branching ranks splits


def tree_branching(t: dict) -> dict:
    """Over every leaf budget whose splits K·M (K >= 2) the grid holds in full (at least three)
    and over L_think/L_answer in :data:`THINK_RATIOS`: the best split by tokens per effective
    thought (:func:`gpolab.labs.tree.rank`).  A setting is a tree win when the best split has
    M > 1 and no flat split (M = 1) ties with it, a flat win in the mirror case (counts: SE 0).
    ``tree_wins_think_ge_answer`` counts the settings with L_think >= L_answer and at least 16
    leaves, ``flat_wins_no_think`` those with L_think = 0 (every budget)."""
    import numpy as np

    from gpolab.labs import tree  # defers jax

    df = t["results"].assign(leaves=lambda d: d["K"] * d["M"])
    budgets = []
    for n, rows in df.groupby("leaves"):
        want = {(k, n // k) for k in range(2, n + 1) if n % k == 0}
        if len(want) >= 3 and want <= set(zip(rows["K"], rows["M"], strict=True)):
            budgets.append(int(n))
    tree_wins, flat_wins, parts, pays = 0, 0, [], {}
    for r in THINK_RATIOS:
        sub = df[df["leaves"].isin(budgets)].assign(budget=lambda d: d["leaves"], think_len=r,
                                                    answer_len=1.0)  # fmt: skip
        ranked = tree.rank(sub.assign(cost=tree.cost(sub["K"], sub["M"], r, 1.0)))
        for _, rows in ranked.groupby("budget"):
            best = rows[rows["recommended"]].iloc[0]
            tied = rows[rows["tie"]]
            tree_won = best["M"] > 1 and not (tied["M"] == 1).any()
            flat_won = best["M"] == 1 and not (tied["M"] > 1).any()
            tree_wins += tree_won
            flat_wins += flat_won
            pays.setdefault(r, []).append("tree" if tree_won else "flat" if flat_won else "tie")
        parts.append(f"L_think/L_answer = {r:g}: " + ", ".join(
            f"{n} leaves {w}" for n, w in zip(budgets, pays[r], strict=True)))  # fmt: skip
    n = len(budgets) * len(THINK_RATIOS)
    return {"tree_wins": int(tree_wins), "flat_wins": int(flat_wins), "n_settings": n,
            "tree_wins_think_ge_answer": sum(w == "tree" for r in THINK_RATIOS if r >= 1
                                             for n, w in zip(budgets, pays[r], strict=True)
                                             if n >= 16),
            "n_think_ge_answer": sum(n >= 16 for r in THINK_RATIOS if r >= 1 for n in budgets),
            "flat_wins_no_think": int(sum(w == "flat" for w in pays[0.0])),
            "n_no_think": len(pays[0.0]),
            "se": dict.fromkeys(("tree_wins", "flat_wins", "n_settings",
                                 "tree_wins_think_ge_answer", "n_think_ge_answer",
                                 "flat_wins_no_think", "n_no_think"), 0.0),
            "detail": "winner per (leaf budget, L_think/L_answer), a 95% tie with the other kind "
                      f"counted as a tie (counts of settings: SE 0): {'; '.join(parts)}; "
                      f"{int(np.sum(df['theory_exact'].astype(bool)))} of {len(df)} cells ranked "
                      "on exact corr"}  # fmt: skip


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
    return {"bias_theory_abs_z": abs(z), "bias_z": float(m["bias_sq"] / bias_se),
            "lowest_mse_gap": gap[0],
            "se": {"bias_theory_abs_z": 1.0, "bias_z": 1.0, "lowest_mse_gap": gap[1]},
            "detail": f"G = {G}: mean's bias² {m['bias_sq']:.3g} ± {bias_se:.2g} vs exact "
                      f"‖g_x‖²/G² {m['theory_bias_sq']:.3g} (z = {z:.2f}); MSE {m['mse']:.4g} vs "
                      f"the next-lowest ({nxt.name}) {nxt['mse']:.4g} (oracle "
                      f"{at.loc['oracle', 'mse']:.4g})"}  # fmt: skip


def chi2_oracle_weights(t: dict) -> dict:
    df = t["results"]
    last = df[df["n"] == df["n"].max()].set_index("estimator")
    rel = float(abs(last.loc["loo", "predicted_mean"] / last.loc["oracle", "predicted_mean"] - 1))
    G = int(last["G"].iloc[0])
    return {"rel_diff": rel, "bound": 4.0 / G**2, "se": {"rel_diff": 0.0, "bound": 0.0},
            "detail": f"G = {G}: predicted mean of n·gap, loo "
                      f"{last.loc['loo', 'predicted_mean']:.4g} vs oracle "
                      f"{last.loc['oracle', 'predicted_mean']:.4g} ({100 * rel:.1f}% "
                      f"apart; 4/G² = {100 * 4 / G**2:.1f}%)"}  # fmt: skip


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
    return {"gain_rho0": float(g0["gain"]), "excess_kept": kept,
            "oracle_gain_rho_high": float(go["gain"]),
            "se": {"gain_rho0": _gain_se(g0), "excess_kept": kept_se,
                   "oracle_gain_rho_high": _gain_se(go)},
            "detail": f"exact gradients, admissible steps: gain {g0['gain']:.3g} at ρ = 0, "
                      f"{gh['gain']:.3g} at {hi.replace('rho=', 'ρ = ')} ({100 * kept:.0f}% of "
                      f"the excess over 1 kept); against the interference-aware oracle step "
                      f"{go['gain']:.3g}"}  # fmt: skip


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
    return {"gain_small_G": nan if one else float(lo["gain"]),
            "gain_large_G": nan if one else float(hi["gain"]),
            "se": {"gain_small_G": nan if one else _gain_se(lo),
                   "gain_large_G": nan if one else _gain_se(hi)},
            "detail": ("one sampled G: not testable at these sizes; " if one else "")
            + ", ".join(f"G = {int(k)}: {r.gain:.3g} ({r.gain_ci_low:.3g}–{r.gain_ci_high:.3g})"
                        for k, r in sampled.iterrows())}  # fmt: skip


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
        parts.append(f"{env}: grpo/loo MSE {ratio[0]:.2f} ± {ratio[1]:.2f}, snr/loo "
                     f"{snr:.4f} exact ({float(g['snr_vs_loo']):.4f} Monte Carlo)")  # fmt: skip
    return {**out, "se": se, "detail": "G = 8: " + "; ".join(parts)}


def _separated(s):
    """Rows whose empirical best G is not tied with another G."""
    return s["tied_G"].astype(str).str.split(",").str.len() == 1


def groupsize_argmin(t: dict) -> dict:
    """Budgets whose best G is separated from every other G and equals the prediction (a tie
    never counts as a match); counts: SE 0."""
    s = t["summary"]
    matches = int(((s["empirical_best_G"] == s["predicted_best_G"]) & _separated(s)).sum())
    return {"argmin_matches_prediction": matches, "n_budgets": len(s),
            "distinct_argmins": int(s["empirical_best_G"].nunique()),
            "se": {"argmin_matches_prediction": 0.0, "n_budgets": 0.0, "distinct_argmins": 0.0},
            "detail": "empirical best G per N: " + ", ".join(
                f"N={r.N}: {r.empirical_best_G} (tied: {r.tied_G}; predicted {r.predicted_best_G})"
                for r in s.itertuples())}  # fmt: skip


def groupsize_value(t: dict) -> dict:
    return {"se": {}}


def train_optimum(t: dict) -> dict:
    """Shares of the (env, N, schedule) settings: interior minimum (every setting: a count, SE 0),
    best G separated from every other G and equal to the prediction (a tie never matches), best G
    separated; the shares' SE binomial over the settings."""
    s = t["summary"]
    sep = _separated(s)
    match = float(((s["empirical_best_G"] == s["predicted_best_G"]) & sep).mean())
    n = len(s)
    return {"interior_frac": float(s["interior_minimum"].mean()),
            "matches_prediction_frac": match, "separated_frac": float(sep.mean()),
            "se": {"interior_frac": 0.0, "matches_prediction_frac": _frac_se(match, n),
                   "separated_frac": _frac_se(float(sep.mean()), n)},
            "detail": f"best G per (env, N, schedule), {n} settings: " + ", ".join(
                f"{r.env} N={r.N} {r.schedule}: {r.empirical_best_G} (tied {r.tied_G}, "
                f"predicted {r.predicted_best_G})" for r in s.itertuples())}  # fmt: skip


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
    return {"mean_p_bonferroni": mean_p, "ks_p_bonferroni": ks,
            "se": {"mean_p_bonferroni": 0.0, "ks_p_bonferroni": 0.0},
            "detail": f"n = {int(last['n'].iloc[0]):,}, {len(last)} estimators, "
                      f"{int(last['n_seeds'].iloc[0]):,} seeds: mean of n·gap vs Σ w_k, z = "
                      + ", ".join(f"{v:.2f}" for v in z)
                      + f" (Bonferroni p = {mean_p:.2g}); KS p (Bonferroni) = "
                      f"{ks:.2g}"}  # fmt: skip


def tree_floor(t: dict) -> dict:
    import numpy as np

    df = t["results"]
    K = int(df["K"].max())
    row = df[df["K"] == K].sort_values("M").iloc[0]
    exact = row["theory_variance"] if np.isfinite(row["theory_variance"]) else row["theory_floor"]
    z = float((row["variance"] - exact) / row["variance_se"])
    gap = float(abs(row["variance"] - row["theory_floor"]) / row["theory_floor"])
    return {"floor_abs_z": abs(z), "rel_gap_to_floor": gap,
            "se": {"floor_abs_z": 1.0, "rel_gap_to_floor": float(row["variance_se"]
                                                                 / row["theory_floor"])},
            "detail": f"K = {K}, M = {int(row['M'])}: variance {row['variance']:.4g} vs exact "
                      f"{exact:.4g} (z = {z:.2f}); the K → ∞ floor is {row['theory_floor']:.4g} "
                      f"({100 * gap:.1f}% away)"}  # fmt: skip


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
    return {"non_decreasing_steps": flat, "last_over_first": ratio[0],
            "se": {"non_decreasing_steps": 0.0, "last_over_first": ratio[1]},
            "detail": f"K = {K}: variance {v[0]:.3g} at M = {int(sub['M'].iloc[0])} → "
                      f"{v[-1]:.3g} at M = {int(sub['M'].iloc[-1])}; {flat} of {len(v) - 1} steps "
                      "not 2 SE clear"}  # fmt: skip


def curvature_bounds(t: dict) -> dict:
    f = t["fits"].set_index("quantity")
    return {"se": {},
            "detail": f"tightest constants {f.loc['grad_norm', 'max_ratio']:.3f} (bound 2) and "
                      f"{f.loc['hess_norm', 'max_ratio']:.3f} (bound 4)"}  # fmt: skip


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
    return {"gain_over_predicted": float(base["gain"] / base["pred_gain"]),
            "gnorm_ratio_over_predicted": float(base["gnorm_ratio"] / base["pred_gnorm_ratio"]),
            "tuned_gain": tuned_gain,
            "se": {"gain_over_predicted": 0.0, "gnorm_ratio_over_predicted": 0.0,
                   "tuned_gain": tuned_se},
            "detail": f"admissible steps, ρ = 0, exact gradients: iterations gain "
                      f"{base['gain']:.3g} vs predicted {base['pred_gain']:.3g} (a ratio of upper "
                      f"bounds); gradient-norm ratio {base['gnorm_ratio']:.3g} vs predicted "
                      f"{base['pred_gnorm_ratio']:.3g} (the quantity the reconstructed bound "
                      f"covers); sampled groups {sampled_txt}; tuned steps: best gain "
                      f"{tuned_gain:.3g} ± {tuned_se:.2g}"}  # fmt: skip


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
    return {"max_abs_error": err, "se": {"max_abs_error": 0.0}, "detail": "κ_8(0.05): " + ", ".join(
        f"{n} {got[n]:.3f} (theory {want[n]})" for n in want)}  # fmt: skip


def plan_recovery(t: dict) -> dict:
    """Truth inside plan's 95% intervals on the simulated logs (a count: SE 0); a truth whose
    recovered value or interval is NaN is uncovered (a NaN is never a pass); the three formats
    read alike."""
    import numpy as np

    df = t["results"]
    spread = df.groupby(["env", "quantity", "G"], dropna=False)["recovered"].agg(np.ptp)
    first = df[df["format"] == df["format"].iloc[0]]
    checked = first[first["covered"].notna() | first["recovered"].isna()]
    ok = (checked["covered"].fillna(False).astype(bool) & checked["recovered"].notna()
          & checked["lo"].notna() & checked["hi"].notna())  # fmt: skip
    missed = checked[~ok]
    gs = first[first["quantity"] == "G*"]
    return {"uncovered": len(missed), "format_spread": float(spread.max()),
            "se": {"uncovered": 0.0, "format_spread": 0.0},
            "detail": f"{len(checked) - len(missed)} of {len(checked)} truths inside the 95% "
            "interval with a recovered value (the curve's G share one fit: correlated); G* truth "
            "vs recovered: "
            + ", ".join(f"{r.env} {r.truth:.3g} vs {r.recovered:.3g} [{r.lo:.3g}, {r.hi:.3g}]"
                        for r in gs.itertuples())
            + f"; largest difference between formats {float(spread.max()):.2g}"}  # fmt: skip
