"""The estimator zoo lab: rankings invariant to rescaling, κ against theory §8's numbers, exact
theory against Monte Carlo for the framework estimators (bandit and arithmetic surrogate)."""

from __future__ import annotations

import numpy as np
import pytest

from gpolab import estimators
from gpolab.labs.sweep.lab import Config as Sweep
from gpolab.labs.sweep.lab import run_sweep
from gpolab.labs.zoo import lab as zoo


def half_loo(rewards):
    """A user's estimator that only shrinks: 0.5 × leave-one-out."""
    return 0.5 * estimators.loo_advantages(rewards)


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    estimators.register("test/half_loo", half_loo, min_group=2, source="tests")
    cfg = zoo.Config(
        env=("bandit",),
        estimators=(
            "loo",
            "mean",
            "grpo",
            "nemo/grpo",
            "verl/gpg",
            "test/half_loo",
            "paper/passk-training",
        ),
        G=(2, 4),
        seeds=3000,
        kappa_G=(8,),
        kappa_points=10,
        out=str(tmp_path_factory.mktemp("zoo")),
    )
    return zoo.run(cfg)


def test_a_shrunk_estimator_wins_on_mse_but_not_on_the_ranking(tables):
    df = tables["results"].set_index(["estimator", "G"])
    for G in (2, 4):
        half, loo = df.loc[("test/half_loo", G)], df.loc[("loo", G)]
        assert half["mse"] < loo["mse"]  # shrinking toward 0 lowers the MSE here...
        # ...but not the scale-invariant score: ĝ/2 has exactly loo's direction on every seed
        assert half["snr_vs_loo"] == pytest.approx(1.0, rel=1e-5)
        assert half["cos"] == pytest.approx(loo["cos"], rel=1e-5)
        assert half["theory_snr_vs_loo"] == pytest.approx(1.0, rel=1e-9)
        # a user's reward-only function gets the exact theory automatically
        assert half["theory"] == "count table"
        assert abs(half["mse"] - half["theory_mse"]) < 4 * half["mse_se"]
    assert df.loc[("mean", 4), "snr_vs_loo"] == pytest.approx(1.0, rel=1e-5)
    assert df.loc[("verl/gpg", 4), "theory"].startswith("none: is batch-scoped")
    # pass@k training (k = 4) runs only where it is defined
    assert ("paper/passk-training", 2) not in df.index and ("paper/passk-training", 4) in df.index


def test_kappa_table_matches_design_numbers(tables):
    k = tables["kappa"]
    at = k[np.isclose(k["p"], 0.05)].set_index("estimator")["kappa"]
    # theory §8: at p = 0.05, G = 8: grpo (ddof 1, eps 1e-4) 2.31, NeMo's leave-one-out std
    # 1.47, loo exactly 1, mean 1 − 1/G
    assert at["grpo"] == pytest.approx(2.31, abs=0.005)
    assert at["nemo/grpo"] == pytest.approx(1.47, abs=0.005)
    assert at["loo"] == pytest.approx(1.0, abs=1e-12)
    assert at["mean"] == pytest.approx(7 / 8, abs=1e-12)
    assert at["test/half_loo"] == pytest.approx(0.5, abs=1e-12)
    assert "verl/gpg" not in at.index  # batch-scoped: no κ
    names = [n for n, _ in zoo.families(k)]
    assert ["loo"] in names and ["grpo"] in names


def _kappa_closed_form(adv, G, p):
    """κ_G(p) = E[A_1 | r_1 = 1] − E[A_1 | r_1 = 0] (binary rewards; the other G − 1 rewards
    Binomial(G − 1, p)): E[(1/G) Σ_i A_i ∇log π(y_i)] = κ ∇p, since E[A_1 | y_1] depends on y_1
    through r_1 only and Σ_y π ∇log π = 0.  ``adv``: numpy advantages of one group, independent
    of gpolab's code."""
    from scipy.stats import binom

    out = 0.0
    for k in range(G):
        others = [1.0] * k + [0.0] * (G - 1 - k)
        out += binom.pmf(k, G - 1, p) * (adv([1.0, *others])[0] - adv([0.0, *others])[0])
    return out


def _grpo(r, eps=1e-4):  # gpolab's grpo: TRL's defaults (ddof 1, eps 1e-4), all-equal -> 0
    r = np.asarray(r)
    return np.zeros_like(r) if np.ptp(r) == 0 else (r - r.mean()) / (r.std(ddof=1) + eps)


def _nemo(r):  # leave-one-out mean and ddof-1 std of the others; unnormalised where that is 0
    r = np.asarray(r)
    out = np.zeros_like(r)
    for i in range(len(r)):
        o = np.delete(r, i)
        s = o.std(ddof=1) if np.ptp(o) > 0 else 0.0
        out[i] = 0.0 if np.ptp(r) == 0 else (r[i] - o.mean()) / (s + 1e-6 if s > 0 else 1.0)
    return out


def _passk(r, k=4):  # arXiv 2508.10751's analytic advantages (binary rewards)
    from scipy.special import comb

    r = np.asarray(r)
    n, c = len(r), r.sum()
    rho = 1 - comb(n - c, k) / comb(n, k)
    sigma = np.sqrt(rho * (1 - rho))
    pos = (1 - rho) / (sigma + 1e-6)
    neg = (1 - rho - comb(n - c - 1, k - 1) / comb(n - 1, k - 1)) / (sigma + 1e-6)
    return np.where(r == 1, pos, neg)


KAPPA_FORMS = {
    "loo": lambda r: np.asarray(r) - (np.sum(r) - np.asarray(r)) / (len(r) - 1),
    "mean": lambda r: np.asarray(r) - np.mean(r),
    "grpo": _grpo,
    "nemo/grpo": _nemo,
    "paper/passk-training": _passk,
}
KAPPA_FORMS["test/half_loo"] = lambda r: 0.5 * KAPPA_FORMS["loo"](r)


def test_report_notes_and_figures(tables, tmp_path):
    """The report prints the table's numbers (4 digits) at G = 4 (nearest 8), best snr first; the
    notes' Monte Carlo line is the table's χ² and its κ lines the closed form."""
    from scipy.stats import chi2

    cfg = zoo.Config(env=("bandit",))
    df = tables["results"]
    at = df[df["G"] == 4].sort_values("snr", ascending=False).set_index("estimator")
    head, cols, *rows = zoo.report(cfg, tables).splitlines()
    assert head.startswith("bandit, G = 4, best direction first")
    assert cols.split() == zoo.COLUMNS
    assert [row.split()[0] for row in rows] == list(at.index)  # every G = 4 row, snr order
    for row in rows:
        name, *vals = row.split()
        want = [float(f"{at.loc[name, c]:.4g}") for c in zoo.COLUMNS[1:]]
        np.testing.assert_array_equal([float(v) for v in vals], want, err_msg=name)
    # closed forms in the printed table: loo is unbiased and its own reference; pass@k training
    # with k = G = 4 gives every binary group A = 0 (ρ = 1 once c >= 1), so ĝ = 0, MSE = |g|²
    assert at.loc["loo", "theory_bias_sq"] == 0 and at.loc["loo", "snr_vs_loo"] == 1
    pk = at.loc["paper/passk-training"]
    target = pytest.approx(pk["target_sq"], rel=1e-5)  # float32 sums
    assert pk["mse"] == target and pk["bias_sq"] == target and pk["theory_mse"] == target
    assert pk["cos"] == 0
    assert np.isnan(at.loc["verl/gpg", "theory_mse"])  # batch-scoped: no exact theory

    mc, kappa_head, *kappa_lines = zoo.notes(cfg, tables).splitlines()[1:]
    th = df[np.isfinite(df["theory_mse"])]
    z = (th["mse"] - th["theory_mse"]) / np.hypot(th["mse_se"], th["theory_mse_se"].fillna(0))
    per = (z**2).groupby(th["estimator"]).agg(["sum", "count"])
    p = chi2.sf(per["sum"], per["count"])
    assert len(th) == 11 and len(per) == 6  # G = 2: 5 (no gpg, no passk), G = 4: 6 (no gpg)
    assert mc.startswith(f"bandit: {len(th)} cells with exact theory")
    assert f"smallest p {p.min():.3g} ({per.index[np.argmin(p)]})" in mc
    assert f"Bonferroni over {len(per)}) = {min(1.0, len(per) * p.min()):.3g}" in mc
    assert mc.endswith(f"largest |z| {np.abs(z).max():.2f}")
    assert kappa_head.startswith("kappa_8(p)")
    # κ_8 at p = 0.05 and 0.95 (grid points) and p = 0.5, which the notes interpolate between
    # the grid's 0.45 and 0.55 (κ is symmetric there for these estimators but passk's)
    grid = np.sort(tables["kappa"]["p"].unique())
    assert np.allclose(grid, np.linspace(0.05, 0.95, 10))
    seen = set()
    for line in kappa_lines:
        vals, names = line.strip().rsplit("   ", 1)
        pairs = [v.split() for v in vals.split("  ")]
        assert [q for q, _ in pairs] == ["p=0.05", "p=0.5", "p=0.95"]
        for name in names.split(" = "):
            seen.add(name)
            form = KAPPA_FORMS[name]
            at_p = {q: _kappa_closed_form(form, 8, q) for q in (0.05, 0.45, 0.55, 0.95)}
            want = [at_p[0.05], (at_p[0.45] + at_p[0.55]) / 2, at_p[0.95]]
            got = [float(v) for _, v in pairs]
            np.testing.assert_allclose(got, want, rtol=5e-3, err_msg=name)  # printed: 3 digits
    assert seen == set(KAPPA_FORMS)  # every reward-only estimator, gpg (batch) left out
    for name, draw in zoo.figures(tables).items():
        assert draw(tables, tmp_path / name).stat().st_size > 10_000


@pytest.mark.slow
def test_framework_theory_matches_monte_carlo_on_the_arithmetic_surrogate(tmp_path):
    """Exact count-table theory of framework estimators vs Monte Carlo on the arithmetic
    surrogate, whose S2 is itself a Monte Carlo estimate: |MC − theory| < 4 combined SE."""
    specs = ("grpo", "nemo/grpo", "verl/grpo_passk", "paper/passk-training[k=2]", "verl/opo")
    cfg = Sweep(
        env="arithmetic",
        estimators=specs,
        G=(4,),
        seeds=600,
        policy=("instruct",),
        questions=60,
        truth_samples=128,
        out=str(tmp_path),
    )
    df = run_sweep(cfg).set_index("estimator")
    for spec in specs:
        row = df.loc[spec]
        se = np.hypot(row["mse_se"], row["theory_mse_se"])
        assert abs(row["mse"] - row["theory_mse"]) < 4 * se, (spec, row["mse"], row["theory_mse"])
    # the theory is not trivially wide: grpo and nemo differ by many standard errors
    gap = abs(df.loc["grpo", "theory_mse"] - df.loc["nemo/grpo", "theory_mse"])
    assert gap > 4 * df.loc["grpo", "mse_se"]
