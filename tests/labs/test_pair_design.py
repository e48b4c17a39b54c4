"""c1 from pair scores against the gradient norms' 1/B slope, in the TRL hook's own design (issue
56, item 5): on known truth (plancheck's bandit logs, exact pair scores), the gradient norms built

* ``separate``: from independent steps at B = 8, 64 (plancheck's design, :func:`grad_norms`);
* ``same k``: from the log's own groups, k per measured step, as ``PlanCallback`` does (each
  group's (1/G) Σ A_loo W, then :func:`gpolab.integrations.files.batch_norms` at B = 1, 2, 4, …
  up to k over those k groups).

Per design and path: the spread of c1 − truth, the mean bootstrap SE (gstar's; for the hook's
design also one that resamples whole measured steps) and the coverage of c1 ± 1.96 SE, with
their standard errors over the logs.  ``python tests/labs/test_pair_design.py [logs [G [k,…]]]``
prints the table at a larger size."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest

from gpolab.envs import bandit
from gpolab.estimators import loo_advantages
from gpolab.integrations.files import batch_norms, batch_sizes
from gpolab.labs.plancheck import simulate as simulated
from gpolab.theory import gstar


def callback_norms(sim, seed: int, k: int):
    """grad_norms.csv (step, batch, grad_norm) as the hook writes it from the log's own groups:
    every k consecutive groups
    (distinct prompts of one step) are one measured step; a group's vector is
    (1/G) Σ_g A_loo,g (e_a − π_x) in row x of the flat (P·A) tabular θ, kept here in the k rows
    of the step's prompts (the other rows are 0, so the norms are the same)."""
    f, s = sim.frame, sim.truth["settings"]
    params = bandit.make(seed, **{n: v for n, v in s.items() if n != "kind"})
    pi = np.asarray(bandit.policy(params), np.float64)
    A, G = pi.shape[1], sim.truth["G"]
    x = f["prompt_id"].to_numpy().reshape(-1, G)[:, 0]
    a = f["completion"].str[1:].astype(int).to_numpy().reshape(-1, G)
    z = f["reward"].to_numpy(np.float64).reshape(-1, G)
    adv = np.asarray(loo_advantages(z), np.float64)
    local = (adv[:, :, None] * (np.eye(A)[a] - pi[x][:, None, :])).sum(1) / G  # (groups, A)
    rows = []
    for step, start in enumerate(range(0, len(x) - k + 1, k)):  # the k prompts' rows of θ
        assert len(set(x[start : start + k])) == k
        h = np.zeros((k, k, A))
        h[np.arange(k), np.arange(k)] = local[start : start + k]
        rows += [(step, B, v) for B, v in batch_norms(h.reshape(k, k * A), batch_sizes(k))]
    return pd.DataFrame(rows, columns=["step", "batch", "grad_norm"])


def step_bootstrap_se(f, norms, G: int, k: int, boot: int, seed: int) -> dict:
    """{path: SD of c1 over ``boot`` replicates that resample whole measured steps (k groups
    with their own norm rows)}: the bootstrap of the hook's design, where a step's norm rows are
    functions of its groups (gstar's resamples them apart).  The estimate is gstar's: the
    proxy's s, a and the pairs' γ over the drawn groups, ‖g‖² and T from the drawn norm rows."""
    z, q = f["reward"].to_numpy(np.float64), f["proxy"].to_numpy(np.float64)
    group = np.arange(z.size) // G
    s_x, a_x = gstar.proxy_moments(z, q, group)
    u_x = gstar.pair_moments(z, f["pair_score"].to_numpy(), group)
    steps = len(s_x) // k
    sq = norms["grad_norm"].to_numpy() ** 2
    sizes = np.unique(norms["batch"])
    per_step = [sq[norms["batch"].to_numpy() == B].reshape(steps, -1) for B in sizes]
    rng = np.random.default_rng(seed)
    reps = {"norms": [], "pairs": []}
    for _ in range(boot):
        pick = rng.integers(0, steps, steps)
        g = (pick[:, None] * k + np.arange(k)).ravel()
        rows = [m[pick].ravel() for m in per_step]
        var = np.array([max(r.var(ddof=1), 1e-300) / r.size for r in rows])
        g_sq, T = gstar._line(np.array([r.mean() for r in rows]), var, sizes.astype(float))
        s, a = s_x[g].mean(), a_x[g].mean()
        reps["norms"].append(gstar.constants_from_proxy(s, a, g_sq, T, G)["c1"])
        reps["pairs"].append(gstar.constants_from_pairs(s, a, g_sq, u_x[g].mean())["c1"])
    return {path: float(np.std(r)) for path, r in reps.items()}


def one_log(seed: int, G: int, ks, boot: int) -> dict:
    """{(design, path): (c1 − truth, c1_se)} on one simulated log (15 steps × 32 prompts × G)."""
    sim = simulated.simulate_bandit(seed=seed, steps=15, G=G, norm_steps=60)
    f, truth = sim.frame, sim.truth["c1"]
    group = (f["step"].astype(str) + "/" + f["prompt"]).to_numpy()
    designs = {"separate": sim.norms} | {f"same {k}": callback_norms(sim, seed, k) for k in ks}
    out = {}
    for design, norms in designs.items():
        for path, pairs in (("norms", None), ("pairs", f["pair_score"].to_numpy())):
            o = gstar.gstar(
                f["reward"].to_numpy(),
                f["proxy"].to_numpy(),
                group,
                norms,
                G,
                clusters=f["prompt"].to_numpy(),
                boot=boot,
                seed=seed,
                pairs=pairs,
            )
            out[design, path] = (o["c1"] - truth, o["c1_se"])
        if design != "separate":  # the same estimates, their SE from whole steps
            se = step_bootstrap_se(f, norms, G, int(design.split()[1]), boot, seed)
            for path, v in se.items():
                out[f"{design}, steps resampled", path] = (out[design, path][0], v)
    return out


def measure(logs: int, G: int, ks=(4,), boot: int = 200, first: int = 0) -> dict:
    """Per (design, path): err (logs,), se (logs,), and summary statistics with standard errors:
    sd, sd_se, cover, cover_se; per design: ratio = sd(pairs)/sd(norms) with its delta-method
    SE (the two paths' errors on the same logs are correlated, so the SE is of the paired log
    ratio, from the bootstrap over logs)."""
    runs = [one_log(first + i, G, ks, boot) for i in range(logs)]
    res = {}
    for key in runs[0]:
        err = np.array([r[key][0] for r in runs])
        se = np.array([r[key][1] for r in runs])
        hit = np.abs(err) <= 1.96 * se
        res[key] = {
            "err": err,
            "se": se,
            "sd": err.std(ddof=1),
            "sd_se": err.std(ddof=1) / np.sqrt(2 * (logs - 1)),
            "mean_se": se.mean(),
            "cover": hit.mean(),
            "cover_se": np.sqrt(hit.mean() * (1 - hit.mean()) / logs),
            "bias": err.mean(),
        }
    rng = np.random.default_rng(0)
    for design in {d for d, path in res if path == "pairs"}:
        e_n, e_p = res[design, "norms"]["err"], res[design, "pairs"]["err"]
        boots = rng.integers(0, logs, (2000, logs))
        ratio = e_p[boots].std(1, ddof=1) / e_n[boots].std(1, ddof=1)
        se_ratio = res[design, "pairs"]["se"] / res[design, "norms"]["se"]
        res[design] = {
            "ratio": e_p.std(ddof=1) / e_n.std(ddof=1),
            "ratio_se": ratio.std(),
            "se_var_ratio": float(np.median(se_ratio**2)),
        }
    return res


def table(res) -> str:
    lines = ["design | path | SD(c1 − truth) | mean SE | coverage | bias"]
    for key, r in res.items():
        if isinstance(key, tuple):
            lines.append(
                f"{key[0]} | {key[1]} | {r['sd']:.3g} ± {r['sd_se']:.2g} | {r['mean_se']:.3g} | "
                f"{r['cover']:.3f} ± {r['cover_se']:.3f} | {r['bias']:.2g}"
            )
    for key, r in res.items():
        if not isinstance(key, tuple):
            lines.append(
                f"{key}: SD ratio pairs/norms {r['ratio']:.3f} ± {r['ratio_se']:.3f}; "
                f"median (SE pairs / SE norms)² {r['se_var_ratio']:.3f}"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    G = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    ks = tuple(int(k) for k in sys.argv[3].split(",")) if len(sys.argv) > 3 else (4,)
    print(f"G = {G}, {n} logs", flush=True)
    print(table(measure(n, G, ks)), flush=True)


@pytest.mark.slow
def test_pair_scores_gain_in_plancheck_design_but_not_in_the_hooks():
    """On the same 80 bandit logs (15 steps × 32 prompts × G = 4, the TRL scenario's group size),
    c1's error spread, pairs against norms: in plancheck's design (norms from independent steps)
    the pairs' is well below the norms'; in the hook's (norms from the same groups, 2 per
    measured step) it is above (the norms path then reads the same groups' ‖ĝ_B‖², whose
    diagonal its s, a cancel on the same responses).  Each path's c1 ± 1.96 SE covers the truth
    at 95% within 3 SE, but gstar's bootstrap, which resamples the norm rows apart from the
    groups, states the norms path's SE far above its spread in the hook's design, so the stated
    SEs favour the pairs (as on the TRL runs: their SE² 0.34–0.42× the norms') while the errors
    do not; resampling whole measured steps brings the norms path's SE to its spread.
    Tolerances: 3 SE of each statistic over the logs (the SD ratio's from a bootstrap over the
    logs, the SD's from its normal-theory SE)."""
    res = measure(80, 4, ks=(2,), boot=200)
    sep, same = res["separate"], res["same 2"]
    assert sep["ratio"] + 3 * sep["ratio_se"] < 1
    assert same["ratio"] - 3 * same["ratio_se"] > 1
    for key in [(d, p) for d in ("separate", "same 2") for p in ("norms", "pairs")]:
        assert res[key]["cover"] >= 0.95 - 3 * max(res[key]["cover_se"], 0.01)
    norms = res["same 2", "norms"]
    assert norms["mean_se"] > 2 * (norms["sd"] + 3 * norms["sd_se"])
    steps = res["same 2, steps resampled", "norms"]
    assert (
        steps["sd"] - 3 * steps["sd_se"]
        < steps["mean_se"]
        < 1.5 * (steps["sd"] + 3 * steps["sd_se"])
    )
    assert same["se_var_ratio"] < 0.7
