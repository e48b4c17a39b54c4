"""Claims statistics on the group-size labs (``gpolab groupsize``, its training and budget modes,
``gpolab plancheck``): the best G against the prediction, the pool's shift and plan's recovery.
"""

from __future__ import annotations

import math

import numpy as np

from gpolab.labs.claims.stats import exact_statistic, ratio_and_se, statistic


def _frac_se(frac: float, n: int) -> float:
    """The binomial SE of a share of n settings (the settings a sample of those one could run),
    at the share (k + 1)/(n + 2) so that 0 or n of n is not taken as exact."""
    if not n:
        return math.nan
    p = (frac * n + 1) / (n + 2)
    return math.sqrt(p * (1 - p) / n)


def _separated(s):
    """Rows whose empirical best G is not tied with another G."""
    return s["tied_G"].astype(str).str.split(",").str.len() == 1


def groupsize_argmin(t: dict) -> dict:
    """Budgets whose best G is separated from every other G and equals the prediction (a tie
    never counts as a match); counts: SE 0."""
    s = t["summary"]
    matches = int(((s["empirical_best_G"] == s["predicted_best_G"]) & _separated(s)).sum())
    return exact_statistic(
        "empirical best G per N: "
        + ", ".join(
            f"N={r.N}: {r.empirical_best_G} (tied: {r.tied_G}; predicted {r.predicted_best_G})"
            for r in s.itertuples()
        ),
        argmin_matches_prediction=matches,
        n_budgets=len(s),
        distinct_argmins=int(s["empirical_best_G"].nunique()),
    )


def train_optimum(t: dict) -> dict:
    """Shares of the (env, N, schedule) settings: interior minimum (every setting: a count, SE 0),
    best G separated from every other G and equal to the prediction (a tie never matches), best G
    separated; the shares' SE binomial over the settings."""
    s = t["summary"]
    sep = _separated(s)
    match = float(((s["empirical_best_G"] == s["predicted_best_G"]) & sep).mean())
    n = len(s)
    return statistic(
        f"best G per (env, N, schedule), {n} settings: "
        + ", ".join(
            f"{r.env} N={r.N} {r.schedule}: {r.empirical_best_G} (tied {r.tied_G}, "
            f"predicted {r.predicted_best_G})"
            for r in s.itertuples()
        ),
        interior_frac=(float(s["interior_minimum"].mean()), 0.0),
        matches_prediction_frac=(match, _frac_se(match, n)),
        separated_frac=(float(sep.mean()), _frac_se(float(sep.mean()), n)),
    )


def plan_recovery(t: dict) -> dict:
    """Truth inside plan's 95% intervals on the simulated logs (a count: SE 0); a truth whose
    recovered value or interval is NaN is uncovered (a NaN is never a pass); the three formats
    read alike."""
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
    return exact_statistic(
        f"{len(checked) - len(missed)} of {len(checked)} truths inside the 95% "
        "interval with a recovered value (the curve's G share one fit: correlated); G* truth "
        "vs recovered: "
        + ", ".join(
            f"{r.env} {r.truth:.3g} vs {r.recovered:.3g} [{r.lo:.3g}, {r.hi:.3g}]"
            for r in gs.itertuples()
        )
        + f"; largest difference between formats {float(spread.max()):.2g}",
        uncovered=len(missed),
        format_spread=float(spread.max()),
    )


def pool_argmin(t: dict) -> dict:
    """The finite prompt pool: budgets whose best G on the pool's own target is separated from
    every other G and equals the pool law's best feasible divisor, and budgets where it differs
    from the infinite-pool law's best divisor (the pool moved G*); counts: SE 0."""
    s = t["summary"]
    if "empirical_best_G_pool" not in s:
        return exact_statistic(
            "no pool in this run",
            argmin_matches_prediction=math.nan,
            n_budgets=len(s),
            moved=math.nan,
        )
    sep = s["tied_G_pool"].astype(str) == s["empirical_best_G_pool"].astype(str)
    matches = int(((s["empirical_best_G_pool"] == s["predicted_best_G"]) & sep).sum())
    moved = int(((s["empirical_best_G_pool"] != s["infinite_pool_best_G"]) & sep).sum())
    return exact_statistic(
        f"P = {int(s['pool'].iloc[0])} prompts; best G per N (pool law, smallest "
        f"feasible G = N/P, infinite-pool law): "
        + "; ".join(
            f"N={r.N}: {r.empirical_best_G_pool} (tied: {r.tied_G_pool}; "
            f"{r.predicted_best_G}, {r.min_G}, {r.infinite_pool_best_G})"
            for r in s.itertuples()
        )
        + f"; the pool law's continuous minimiser {s['g_star_pool'].iloc[0]:.2f}, "
        f"the infinite pool's {s['g_star_exact'].iloc[0]:.2f}",
        argmin_matches_prediction=matches,
        n_budgets=len(s),
        moved=moved,
    )


# ------------------------------------------------------------------ groupsize_budget (issue 42)
# The budget check's summary: one row per (env, pool P, N) with the best G by rollouts to target
# and its 95%-CI ties, by J at compute total/d (``best_G_value_c{d}``, d = 8, 4, 2, 1) and the
# rule's G (gpolab/labs/groupsize/summary.py: budget_summary).


def _gs(text) -> set[int]:
    """The G of a tie list "2,4,8"."""
    return {int(g) for g in str(text).split(",") if g}


def _moves(s, before: str, after: str):
    """(up, down) boolean arrays over the rows: the best G of ``after`` above (below) the one of
    ``before``, with ``before``'s best outside ``after``'s ties (a move inside the CIs is none)."""
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
        return exact_statistic("no P = 0 rows", shared_best=math.nan)
    shared = {
        env: set.intersection(*(_gs(x) for x in rows["tied_G"])) for env, rows in s.groupby("env")
    }
    n = int(t["results"]["n_seeds"].min())
    reached = float(s["best_reached"].min())
    return statistic(
        "prompts drawn afresh; fewest rollouts to target per N: "
        + ", ".join(
            f"{r.env} N={r.N}: G={r.best_G} (tied {r.tied_G}; rule {r.rule_G})"
            for r in s.itertuples()
        )
        + "; G tied at every N: "
        + ", ".join(f"{env} {sorted(g) or 'none'}" for env, g in shared.items()),
        shared_best=(int(all(shared.values())), 0.0),
        distinct_best=(int(s.groupby("env")["best_G"].nunique().max()), 0.0),
        tie_share_max=(float(s["tie_share"].max()), 0.0),
        best_reached_min=(reached, math.sqrt(max(reached * (1 - reached), 1 / n) / n)),
    )


def budget_compute_rise(t: dict) -> dict:
    """IsoCompute's trend at a fixed per-step budget N: over the (P, N) settings, the best G by J
    rises clearly from compute total/8 to total (share, binomial SE over settings), then levels
    off (the best G at total tied with the one at total/2, among the rising settings); control:
    no setting's best G falls clearly (noise would move it both ways)."""
    s = t["summary"]
    up, down = _moves(s, "value_c8", "value_c1")
    last = [g in _gs(x) for g, x in zip(s["best_G_value_c1"], s["tied_G_value_c2"], strict=True)]
    n = len(s)
    rise_frac, level_frac = float(up.mean()), float((up & np.array(last)).mean())
    return statistic(
        "best G by J at compute total/8 → /4 → /2 → total, per (P, N): "
        + "; ".join(
            f"{r.env} P={r.pool} N={r.N}: {r.best_G_value_c8} → {r.best_G_value_c4} → "
            f"{r.best_G_value_c2} → {r.best_G_value_c1}"
            for r in s.itertuples()
        ),
        rise_frac=(rise_frac, _frac_se(rise_frac, n)),
        rise_then_level_frac=(level_frac, _frac_se(level_frac, n)),
        falls=(int(down.sum()), 0.0),
    )


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
    return statistic(
        "; ".join(parts), ratio_min=(worst[0], worst[1]), gain16_z_min=(float(min(gains)), 1.0)
    )


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
    return exact_statistic(
        "best G by rollouts to target, smallest → largest N: "
        + "; ".join(
            f"{env} P={P}: "
            + " → ".join(
                f"{r.best_G} (N={r.N})"
                for r in s[(s["env"] == env) & (s["pool"] == P)].sort_values("N").itertuples()
            )
            for env, P in rises
        ),
        rises=sum(rises[k] for k in finite),
        n_pools=len(finite),
        rises_infinite=sum(infinite) if infinite else math.nan,
    )


def budget_rule(t: dict) -> dict:
    """The rule (:func:`gpolab.theory.groupsize.training_rule`) against training: the share of
    (P, N) settings whose measured best G (fewest rollouts to target) is tied with the rule's G
    (binomial SE over settings); control: the mean tie share at most one half (a flat curve ties
    everything and the rule would pass vacuously)."""
    s = t["summary"]
    n = len(s)
    match = float(s["rule_in_ties"].mean())
    exact = int((s["rule_G"] == s["best_G"]).sum())
    return statistic(
        f"{exact} of {n} settings: the rule's G is the best; per (P, N) rule / best "
        "(ties): "
        + "; ".join(
            f"{r.env} P={r.pool} N={r.N}: {r.rule_G} / {r.best_G} ({r.tied_G})"
            for r in s.itertuples()
        ),
        rule_match_frac=(match, _frac_se(match, n)),
        tie_share_mean=(float(s["tie_share"].mean()), 0.0),
    )


STATISTICS = (
    groupsize_argmin,
    train_optimum,
    plan_recovery,
    pool_argmin,
    budget_universal,
    budget_compute_rise,
    two_vs_sixteen,
    budget_pool_shift,
    budget_rule,
)
