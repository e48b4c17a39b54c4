"""Beta-binomial difficulty fit and the degenerate-group law (theory §10), against simulation
and exact enumeration."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, stats

from gpolab.theory import difficulty, fit_checks, graded, gstar
from gpolab.validate import ConfigError


@pytest.mark.parametrize("a, b", [(0.5, 1.0), (2.0, 3.0)])
def test_degenerate_fraction_matches_integration(a, b):
    for G in (1, 2, 8, 64):

        def flat(p, G=G):
            return (p**G + (1 - p) ** G) * stats.beta.pdf(p, a, b)

        want = integrate.quad(flat, 0, 1)[0]
        assert difficulty.degenerate_fraction(a, b, G) == pytest.approx(want, rel=1e-7)
    assert difficulty.degenerate_fraction(a, b, 1) == pytest.approx(1.0)  # one response: flat
    draws = difficulty.dapo_draws_per_kept_group(a, b, 8)
    assert draws == pytest.approx(1 / (1 - difficulty.degenerate_fraction(a, b, 8)))


def test_exact_special_cases_are_exact_for_any_a_b():
    """G = 1: every group is flat, exactly (no rounding path: the old p + (1 − p) through two
    exp(betaln) terms gave 1 − 2.2e-16 for 41% of these (a, b), so DAPO draws 4.5e15, not inf);
    G = 2: the informative fraction is 2ab/((a + b)(a + b + 1)) in closed form."""
    rng = np.random.default_rng(0)
    a, b = np.exp(rng.uniform(-10, np.log(1e6), (2, 2000)))
    assert np.all(difficulty.degenerate_fraction(a, b, 1) == 1.0)
    assert np.all(difficulty.informative_fraction(a, b, 1) == 0.0)
    assert np.all(np.isposinf(difficulty.dapo_draws_per_kept_group(a, b, 1)))
    two = 2 * a * b / ((a + b) * (a + b + 1))
    assert difficulty.informative_fraction(a, b, 2) == pytest.approx(two, rel=1e-13)
    # the informative fraction is a sum of positive terms: accurate when tiny (a -> 0)
    tiny = difficulty.informative_fraction(1e-9, 1.0, 2)
    assert tiny == pytest.approx(2e-9 / (1 + 1e-9) / (2 + 1e-9), rel=1e-12)
    G = np.array([1, 2, 8, 256])
    total = difficulty.degenerate_fraction(a[:, None], b[:, None], G)
    assert np.allclose(
        total + difficulty.informative_fraction(a[:, None], b[:, None], G), 1, rtol=0, atol=1e-15
    )
    assert graded.degenerate_fraction_graded([[0.3, 0.5, 2.0]], 1)[0] == 1.0
    assert graded.degenerate_unbiased([[0.1, 0.2, 0.3], [1.0, 0.7]], 1) == 1.0
    assert difficulty.degenerate_fraction_known([0.1, 0.7, 0.3], [0.3, 0.3, 0.4], 1) == 1.0
    with pytest.raises(ConfigError, match="integers >= 1"):
        difficulty.degenerate_fraction(1.0, 1.0, [0, 2])


def test_degenerate_fraction_matches_simulated_groups():
    rng = np.random.default_rng(0)
    a, b, G, n = 0.5, 1.0, 4, 200_000
    z = rng.random((n, G)) < rng.beta(a, b, n)[:, None]
    flat = np.mean(z.all(1) | (~z).all(1))
    exact = difficulty.degenerate_fraction(a, b, G)
    assert abs(flat - exact) < 4 * np.sqrt(exact * (1 - exact) / n)


def test_fit_recovers_beta_within_its_standard_error():
    rng = np.random.default_rng(1)
    a, b, prompts, G = 0.7, 1.6, 4000, 8
    c = rng.binomial(G, rng.beta(a, b, prompts))
    f = difficulty.fit(c, np.full(prompts, G))
    assert abs(f.a - a) < 4 * f.a_se and abs(f.b - b) < 4 * f.b_se
    assert f.a_se < 0.1 * a and f.prompts == prompts  # the fit is informative at this size


def test_cluster_robust_covariance_is_the_sandwich_of_the_scores():
    """Prompts repeated over groups: cov = V M V with V the inverse observed information and M
    the cluster sum of outer products of the scores (times C/(C − 1) (N − 1)/(N − 2)); the
    scores are the derivatives of the log-likelihood and sum to 0 at the maximum; distinct
    labels leave the observed information alone; one label gives no interval."""
    rng = np.random.default_rng(7)
    ids = np.repeat(np.arange(300), 4)
    c, n = rng.binomial(8, rng.beta(0.7, 1.6, 300)[ids]), np.full(ids.size, 8)
    plain, robust = difficulty.fit(c, n), difficulty.fit(c, n, clusters=ids)
    assert (robust.a, robust.b) == (plain.a, plain.b)
    s = difficulty.scores(plain.a, plain.b, c, n)
    h, x = 1e-6, np.log([plain.a, plain.b])
    for j, e in enumerate(np.eye(2) * h):
        num = (
            stats.betabinom.logpmf(c, n, *np.exp(x + e))
            - stats.betabinom.logpmf(c, n, *np.exp(x - e))
        ) / (2 * h)
        assert s[:, j] == pytest.approx(num, rel=1e-5, abs=1e-7)
    assert np.all(np.abs(s.sum(0)) < 1e-3 * np.abs(s).sum(0))  # the maximum: scores balance
    V = np.asarray(plain.cov)
    S = np.stack([s[ids == k].sum(0) for k in range(300)])
    M = 300 / 299 * (ids.size - 1) / (ids.size - 2) * S.T @ S
    assert np.asarray(robust.cov) == pytest.approx(V @ M @ V, rel=1e-10)
    assert robust.se_method.startswith("cluster-robust by prompt (300 prompts, 1200 groups")
    assert robust.a_se > 1.3 * plain.a_se  # 4 groups share each p here
    once = difficulty.fit(c, n, clusters=np.arange(ids.size))
    assert once.cov == plain.cov and "every prompt in one group" in once.se_method
    one = difficulty.fit(c, n, clusters=np.zeros(ids.size))
    assert not one.has_interval and one.se_method.startswith("none")
    flat = ((c == 0) | (c == n)).astype(float)
    want = np.sqrt(300 / 299 * np.sum(np.bincount(ids, flat - flat.mean()) ** 2)) / flat.size
    assert fit_checks.mean_se(flat, ids) == pytest.approx(want, rel=1e-12)
    assert fit_checks.mean_se(flat) == pytest.approx(
        np.sqrt(flat.mean() * (1 - flat.mean()) / flat.size)
    )
    g = graded.fit_graded(np.stack([c, n - c], 1), clusters=ids)  # same sandwich, analytic
    assert g.alpha_se == pytest.approx((robust.a_se, robust.b_se), rel=1e-3)
    with pytest.raises(ConfigError, match="clusters"):
        difficulty.fit(c, n, clusters=ids[:-1])


@pytest.mark.parametrize(
    "c, n, match",
    [
        ([1, 2], [2], "shapes"),
        ([1.5, 1], [2, 2], "non-integer"),
        ([3, 1], [2, 2], "0 <= "),
        ([1], [2], "at least 2 prompts"),
    ],
)
def test_bad_counts_are_one_line(c, n, match):
    with pytest.raises(ConfigError, match=match):
        difficulty.fit(c, n)


# ------------------------------------------------------------ uncertainty, curve, checks (issue 18)


def _beta_log(a, b, prompts, sizes, seed):
    rng = np.random.default_rng(seed)
    n = rng.choice(sizes, prompts)
    return rng.binomial(n, rng.beta(a, b, prompts)), n


@pytest.fixture(scope="module")
def fitted():
    c, n = _beta_log(0.7, 1.6, 3000, [4, 8, 16], 3)
    return c, n, difficulty.fit(c, n)


def test_fit_carries_its_covariance_and_quantiles(fitted):
    _, _, f = fitted
    cov = np.asarray(f.cov)
    assert cov.shape == (2, 2) and f.has_interval and not f.at_bound
    assert f.a_se == pytest.approx(f.a * np.sqrt(cov[0, 0]))  # delta method from log a
    assert f.quantile([0.1, 0.9]) == pytest.approx(stats.beta.ppf([0.1, 0.9], f.a, f.b))
    a, b = difficulty.draws(f, 20_000, seed=1)
    logs = np.log(np.stack([a, b]))
    assert np.cov(logs) == pytest.approx(cov, rel=0.05)  # 20k draws: ~1% sampling error
    assert np.all(np.abs(logs.mean(1) - np.log([f.a, f.b])) < 4 * np.sqrt(np.diag(cov) / 2e4))


def test_draws_repeat_the_point_without_a_covariance():
    f = difficulty.BetaFit(0.5, 2.0, np.nan, np.nan, 10, -3.0)  # default cov: NaN
    a, b = difficulty.draws(f, 5)
    assert not f.has_interval and np.all(a == 0.5) and np.all(b == 2.0)
    curve = difficulty.degenerate_curve(f, [2, 8])
    assert np.all(curve.lo == curve.predicted) and np.all(curve.hi == curve.predicted)


def test_degenerate_curve_interval_matches_the_delta_method(fitted):
    _, _, f = fitted
    G = np.array([1, 2, 8, 64])
    curve = difficulty.degenerate_curve(f, G, level=0.6827, draws=20_000)
    assert list(curve.columns) == ["G", "predicted", "lo", "hi", "dapo_draws", "dapo_lo", "dapo_hi"]
    assert curve.predicted.to_numpy() == pytest.approx(difficulty.degenerate_fraction(f.a, f.b, G))
    assert np.isinf(curve.dapo_draws[0])  # G = 1: every group is flat, DAPO never keeps one
    assert curve.dapo_draws[1:].to_numpy() == pytest.approx(1 / (1 - curve.predicted[1:]))
    h, x = 1e-6, np.log([f.a, f.b])
    for i, g in enumerate(G[1:], 1):  # ±1 SE band vs √(∇ᵀ cov ∇) in log a, log b
        grad = [
            (
                difficulty.degenerate_fraction(*np.exp(x + e), g)
                - difficulty.degenerate_fraction(*np.exp(x - e), g)
            )
            / (2 * h)
            for e in np.eye(2) * h
        ]
        se = np.sqrt(np.asarray(grad) @ np.asarray(f.cov) @ np.asarray(grad))
        assert (curve.hi[i] - curve.lo[i]) / 2 == pytest.approx(se, rel=0.05)
        assert curve.dapo_lo[i] <= curve.dapo_draws[i] <= curve.dapo_hi[i]


def test_logged_check_passes_on_beta_binomial_data_with_unequal_groups(fitted):
    c, n, f = fitted
    chk = fit_checks.logged_check(c, n, f)
    want = np.mean([difficulty.degenerate_fraction(f.a, f.b, k) for k in n])  # own sizes
    assert chk["predicted"] == pytest.approx(want)
    assert chk["measured"] == np.mean((c == 0) | (c == n)) and abs(chk["z"]) < 3
    assert 0 < chk["predicted_se"] < 0.02 and chk["groups"] == c.size
    assert fit_checks.count_check(c, n, f)["p_value"] > 1e-3


def test_checks_fail_when_the_fit_does_not_describe_the_log(fitted):
    _, _, f = fitted
    c, n = _beta_log(2.5, 2.5, 3000, [4, 8, 16], 4)  # a later step: fewer extreme prompts
    assert fit_checks.logged_check(c, n, f)["z"] < -6
    # a point mass of impossible prompts beside a peak of easy ones: the maximum-likelihood fit
    # nearly reproduces the flat fraction, the count histogram does not fit
    rng = np.random.default_rng(5)
    p = rng.beta(20, 8, 2000)
    p[:600] = 0
    n = np.full(2000, 8)
    c = rng.binomial(n, p)
    g = difficulty.fit(c, n)
    chk = fit_checks.count_check(c, n, g)
    assert chk["p_value"] < 1e-12 and chk["df"] == chk["cells"] - 3


@pytest.mark.parametrize("c", [0, 8, 4])
def test_all_equal_counts_stay_finite(c):
    n = np.full(50, 8)
    f = difficulty.fit(np.full(50, c), n)
    assert f.at_bound and np.isfinite([f.a, f.b]).all()
    curve = difficulty.degenerate_curve(f, [2, 8, 64])
    assert np.isfinite(curve[["predicted", "lo", "hi"]].to_numpy()).all()
    chk = fit_checks.logged_check(np.full(50, c), n, f)
    assert all(np.isfinite(v) for v in chk.values()) and abs(chk["z"]) < 3
    assert chk["measured"] == (c != 4)


def test_g_needed_is_the_smallest_g_under_the_target(fitted):
    _, _, f = fitted
    curve = difficulty.degenerate_fraction(f.a, f.b, np.arange(2, 257))
    g = difficulty.g_needed(f, 0.1)
    assert curve[g - 2] <= 0.1 < curve[g - 3]
    assert difficulty.g_needed(f, curve[0]) == 2
    assert difficulty.g_needed(f, 1e-9) is None
    with pytest.raises(ConfigError, match="target"):
        difficulty.g_needed(f, 1.5)


# ------------------------------------------------------------------------------ κ over the fit


@pytest.mark.parametrize(
    "spec", ["grpo", "loo", "mean", "verl/grpo[norm_adv_by_std_in_grpo=false]"]
)
def test_kappa_mix_is_the_exact_average_of_kappa(x64, spec):
    from gpolab.theory import exact

    a, b, G = 0.6, 1.4, 8
    got = difficulty.kappa_mix(spec, G, a, b)
    table = exact.registry_table(spec, G)

    def weight(p, extra=lambda p: 1.0):
        return exact.kappa(table, G, np.array([p]))[0] * extra(p) * stats.beta.pdf(p, a, b)

    want = integrate.quad(weight, 0, 1, limit=200)[0]
    assert got["kappa_mean"] == pytest.approx(want, rel=1e-7) and got["reason"] is None
    q = stats.beta.ppf([0.1, 0.5, 0.9], a, b)
    assert [got[k] for k in ("kappa_p10", "kappa_p50", "kappa_p90")] == pytest.approx(
        exact.kappa(table, G, q)
    )
    sigma = lambda p: np.sqrt(p * (1 - p))  # noqa: E731
    hard = integrate.quad(weight, 0, 0.2, args=(sigma,), limit=200)[0]
    total = integrate.quad(weight, 0, 1, args=(sigma,), limit=200)[0]
    assert got["share_hard"] == pytest.approx(hard / total, rel=1e-6)


def test_kappa_mix_without_a_count_table_is_nan_with_a_reason():
    got = difficulty.kappa_mix("oracle", 8, 1.0, 1.0)
    assert np.isnan(got["kappa_mean"]) and "baseline" in got["reason"]


# --------------------------------------------------------------------------------- graded rewards


def test_graded_fit_with_two_values_is_the_beta_binomial(fitted):
    c, n, f = fitted
    g = graded.fit_graded(np.stack([c, n - c], 1))
    assert g.alpha == pytest.approx((f.a, f.b), rel=1e-4)
    assert g.alpha_se == pytest.approx((f.a_se, f.b_se), rel=1e-3)  # analytic vs differences
    assert g.loglik == pytest.approx(f.loglik, abs=1e-6)
    G = np.array([1, 2, 8, 64])
    assert graded.degenerate_fraction_graded(g.alpha, G) == pytest.approx(
        difficulty.degenerate_fraction(*g.alpha, G), rel=1e-12
    )


def test_graded_fit_recovers_a_dirichlet_and_its_degenerate_law():
    rng = np.random.default_rng(6)
    alpha, groups = np.array([0.4, 0.9, 2.0]), 3000
    n = rng.choice([4, 6, 10], groups)
    p = rng.dirichlet(alpha, groups)
    x = np.array([rng.multinomial(k, row) for k, row in zip(n, p, strict=True)])
    g = graded.fit_graded(x)
    assert np.all(np.abs(np.array(g.alpha) - alpha) < 4 * np.array(g.alpha_se))
    chk = graded.logged_check_graded(x, g)
    assert abs(chk["z"]) < 3 and chk["measured"] == np.mean(x.max(1) == n)
    p = rng.dirichlet(alpha, 400_000)  # Σ_v E p_v^G by simulation
    want = np.mean(np.sum(p**5, 1))
    assert graded.degenerate_fraction_graded(alpha, 5) == pytest.approx(want, rel=0.01)


def test_degenerate_unbiased_matches_enumeration_of_subsets():
    from itertools import combinations

    groups = [[0.0, 0.0, 0.5, 1.0, 0.5, 0.0], [1.0, 1.0, 1.0], [0.2, 0.3, 0.2, 0.2]]
    got = graded.degenerate_unbiased(groups, [1, 2, 3, 4])
    for G, value in zip([1, 2, 3], got, strict=False):
        want = np.mean([np.mean([len(set(s)) == 1 for s in combinations(g, G)]) for g in groups])
        assert value == pytest.approx(want)
    assert np.isnan(got[3])  # G = 4 > the smallest group
    assert graded.degenerate_unbiased(groups, 2) == pytest.approx(got[1])


def test_bad_graded_counts_are_one_line():
    with pytest.raises(ConfigError, match="counts"):
        graded.fit_graded([[1, 2, 3]])
    with pytest.raises(ConfigError, match="counts"):
        graded.fit_graded([[1, 0], [0, 0]])


def test_fit_is_symmetric_under_mirroring(fitted):
    c, n, f = fitted
    g = difficulty.fit(n - c, n)  # more successes than failures: fitted mirrored
    assert (g.a, g.b) == pytest.approx((f.b, f.a), rel=1e-4)
    assert np.asarray(g.cov) == pytest.approx(np.asarray(f.cov)[::-1, ::-1], rel=1e-3)


# --------------------------------------------------------------------- G* from a proxy (gpolab's)


def _enumerate_groups(values, probs, n):
    """Every ordered group of n iid draws from a finite law of (reward, proxy), as flat
    (rewards, proxy, group) arrays and the probability of each group."""
    from itertools import product

    tuples = list(product(range(len(probs)), repeat=n))
    idx = np.array(tuples)
    weight = np.prod(np.asarray(probs)[idx], axis=1)
    z, q = np.asarray(values)[idx].transpose(2, 0, 1)
    return z.ravel(), q.ravel(), np.repeat(np.arange(len(tuples)), n), weight


@pytest.mark.parametrize("n", [3, 4, 5])
@pytest.mark.parametrize(
    "values, probs",
    [
        ([(0, 0.3), (1, 0.7), (1, 2.0), (0, 1.5)], [0.2, 0.3, 0.1, 0.4]),  # binary Z
        ([(0, 1.0), (0.5, 0.2), (1, 2.5)], [0.5, 0.3, 0.2]),
    ],  # graded Z
)
def test_proxy_moments_are_unbiased_by_enumeration(values, probs, n):
    z, q, group, weight = _enumerate_groups(values, probs, n)
    s_x, a_x = gstar.proxy_moments(z, q, group)
    Z, Q, P = (
        np.array([v[0] for v in values], float),
        np.array([v[1] for v in values]),
        np.asarray(probs),
    )
    V = P @ Z
    assert weight @ s_x == pytest.approx((P @ Q) * (P @ (Z - V) ** 2), rel=1e-12)
    assert weight @ a_x == pytest.approx(P @ (Q * (Z - V) ** 2), rel=1e-12)


def test_proxy_moments_drop_groups_under_three():
    s_x, a_x = gstar.proxy_moments([0, 1, 1, 0, 1], [1.0] * 5, ["x", "x", "y", "y", "y"])
    assert s_x.shape == (1,) and s_x[0] == pytest.approx(1 / 3)  # only y: mean of c(m−c)/(m(m−1))


@pytest.fixture(scope="module")
def bandit_truth():
    import jax

    from gpolab.envs import bandit
    from gpolab.theory import groupsize

    with jax.enable_x64(True):
        params = bandit.make(3, prompts=8, actions=6, success_a=0.6, success_b=0.9)
        truth = bandit.exact(params)
        pi = np.asarray(bandit.policy(params), np.float64)
    gsq_x = np.sum(np.asarray(truth.g_local, np.float64) ** 2, 1)
    f = np.asarray(truth.prompt_probs, np.float64)
    s = f @ (np.asarray(truth.S2) * np.asarray(truth.sigma2))
    a = f @ (np.asarray(truth.tr_sigma_oracle) + gsq_x)
    return dict(
        params=params,
        truth=truth,
        pi=pi,
        success=np.asarray(params.success, np.float64),
        f=f,
        s=s,
        a=a,
        g_sq=float(np.sum(np.asarray(truth.g, np.float64) ** 2)),
        consts=groupsize.constants(truth),
    )


@pytest.mark.parametrize("G", [2, 4, 9])
def test_constants_from_proxy_invert_the_exact_batch_spread(x64, bandit_truth, G):
    """T = Tr Cov of one prompt's loo estimate, from the count-table theory (B = 1: the MSE of
    the unbiased loo), gives back the exact c1, C2, C3."""
    from gpolab.theory import exact

    t = bandit_truth
    T = exact.mse(t["truth"], exact.registry_table("loo", G), G, B=1)
    c = t["consts"]
    assert T == pytest.approx(c.c1 + c.C2 / G + c.C3 / (G * (G - 1)), rel=1e-10)
    got = gstar.constants_from_proxy(t["s"], t["a"], t["g_sq"], T, G)
    assert (got["c1"], got["C2"], got["C3"]) == pytest.approx((c.c1, c.C2, c.C3), rel=1e-9)
    assert t["s"] <= c.C3 <= 2 * t["s"]  # the Cauchy-Schwarz bounds of gstar_bounds


def _simulate(t, B, G, steps, rng):
    """Tabular softmax bandit in numpy: per step B prompts from f, G actions each, loo ĝ in
    global coordinates (row x of a P x A table) and its squared norm; proxy q = ‖e_a − π_x‖²."""
    pi, succ = t["pi"], t["success"]
    P, A = pi.shape
    x = rng.choice(P, size=(steps, B), p=t["f"])
    u = rng.random((steps, B, G, 1))
    act = np.minimum((u > np.cumsum(pi, 1)[x][:, :, None, :]).sum(-1), A - 1)
    z = (rng.random(act.shape) < succ[x[..., None], act]).astype(float)
    adv = z - (z.sum(-1, keepdims=True) - z) / (G - 1)
    ghat = np.zeros((steps, P, A))
    step = np.broadcast_to(np.arange(steps)[:, None, None], act.shape)
    np.add.at(ghat, (step, np.broadcast_to(x[..., None], act.shape), act), adv)
    np.add.at(ghat, (step[..., 0], x), -adv.sum(-1)[..., None] * pi[x])
    q = 1 - 2 * pi[x[..., None], act] + np.sum(pi**2, 1)[x][..., None]
    return np.sum((ghat / (B * G)) ** 2, (1, 2)), z, q


def _bandit_log(t, G, seed, batches=((1, 20_000), (8, 20_000)), groups=20_000):
    import pandas as pd

    rng = np.random.default_rng(seed)
    norms = [_simulate(t, B, G, k, rng)[0] for B, k in batches]
    norms = pd.concat(
        [
            pd.DataFrame({"batch": B, "grad_norm": np.sqrt(sq)})
            for (B, _), sq in zip(batches, norms, strict=True)
        ]
    )
    _, z, q = _simulate(t, 1, G, groups, rng)
    return z.ravel(), q.ravel(), np.repeat(np.arange(groups), G), norms


@pytest.mark.parametrize("G", [3, 6])
def test_gstar_recovers_the_bandit_truth(bandit_truth, G):
    t, c = bandit_truth, bandit_truth["consts"]
    z, q, group, norms = _bandit_log(t, G, seed=G)
    got = gstar.gstar(z, q, group, norms, G, boot=500)
    assert got["reason"] is None
    assert abs(got["s"] - t["s"]) < 4 * 0.01 * t["s"]  # 20k groups: s to ~0.5%
    assert abs(got["c1"] - c.c1) < 4 * got["c1_se"] and got["c1_se"] < 0.15 * c.c1
    assert abs(got["C3"] - c.C3) < 4 * got["C3_se"]
    assert abs(got["g_sq"] - t["g_sq"]) < 0.2 * t["g_sq"]
    assert got["gstar_lo"] <= c.g_star_exact <= got["gstar_hi"]
    assert got["gstar"] == pytest.approx(1 + np.sqrt(got["C3"] / got["c1"]))


def test_gstar_says_why_not(bandit_truth):
    import pandas as pd

    t = bandit_truth
    z, q, group, norms = _bandit_log(t, 4, seed=1, batches=((1, 300), (8, 300)), groups=300)
    assert "proxy" in gstar.gstar(z, None, group, norms, 4)["reason"]
    one = gstar.gstar(z, q, group, norms[norms.batch == 8], 4)
    assert one["gstar"] is None and "2 batch sizes" in one["reason"] and one["s"] > 0
    bounds = gstar.gstar_bounds(z, q, group)
    assert bounds["gstar"] is None and bounds["C3_hi"] == 2 * bounds["C3_lo"] == 2 * one["s"]
    pairs = gstar.gstar(z, q, np.arange(z.size) // 2, norms, 4)  # groups of 2 responses
    assert pairs["gstar"] is None and ">= 3 responses" in pairs["reason"]
    with pytest.raises(ConfigError, match="norms"):
        gstar.gstar(z, q, group, pd.DataFrame({"B": [1, 2]}), 4)
    with pytest.raises(ConfigError, match="rewards/proxy/group"):
        gstar.gstar(z[:-1], q, group, norms, 4)


def test_gstar_is_none_when_prompts_do_not_differ():
    """One prompt: c1 = 0 exactly, so G* has no upper bound; the recovered c1 is noise around 0."""
    import jax

    from gpolab.envs import bandit

    with jax.enable_x64(True):
        params = bandit.make(5, prompts=1, actions=6)
        truth = bandit.exact(params)
        t = dict(
            pi=np.asarray(bandit.policy(params), np.float64),
            f=np.ones(1),
            success=np.asarray(params.success, np.float64),
        )
    assert float(truth.c1) == pytest.approx(0.0, abs=1e-12)  # one prompt: g_x = g
    z, q, group, norms = _bandit_log(t, 4, seed=2, batches=((1, 4000), (4, 4000)), groups=4000)
    got = gstar.gstar(z, q, group, norms, 4, boot=300)
    assert got["gstar"] is None and "not resolved" in got["reason"]
    assert got["gstar_hi"] == np.inf and np.isfinite(got["c1"])


def test_gstar_cluster_bootstrap_resamples_whole_prompts(bandit_truth):
    """Distinct labels: the cluster bootstrap is the group bootstrap (same draws); each label
    shared by 4 consecutive (independent) groups: the same point estimate and about the same
    SE; a label list of the wrong length is one line."""
    z, q, group, norms = _bandit_log(
        bandit_truth, 4, seed=5, batches=((1, 2000), (8, 2000)), groups=2000
    )
    plain = gstar.gstar(z, q, group, norms, 4, boot=200)
    same = gstar.gstar(z, q, group, norms, 4, boot=200, clusters=group)
    for k in ("gstar_lo", "gstar_hi", "c1_se", "C3_se"):
        assert same[k] == pytest.approx(plain[k], rel=1e-9)
    shared = gstar.gstar(z, q, group, norms, 4, boot=200, clusters=group // 4)
    assert shared["s"] == plain["s"] and shared["c1"] == plain["c1"]
    # the groups here are independent, so arbitrary clusters change the SE only by noise
    assert shared["C3_se"] == pytest.approx(plain["C3_se"], rel=0.25)
    with pytest.raises(ConfigError, match="clusters"):
        gstar.gstar(z, q, group, norms, 4, boot=20, clusters=group[:-1])


# ---------------------------------------------------- the maximum and the binomial limit (issue 55)


def _profile_max(c, n) -> float:
    """An independent search for sup ℓ: scipy's betabinom.logpmf over the distinct (c, n),
    maximized over the mean (bounded Brent) on a fine grid of log(a + b) from 10^-1 to 10^6
    (where its log-gamma differences are accurate to ~1e-4 nats over 250k groups; 1e-3 at
    3e6), refined by Brent around the grid's best point, and the binomial log-likelihood (the
    limit a + b → ∞) at its closed-form mean."""
    from scipy import optimize

    (uc, un), w = np.unique(np.stack([c, n]), axis=1, return_counts=True)

    def profile(log_s):
        s = np.exp(log_s)
        f = lambda m: -w @ stats.betabinom.logpmf(uc, un, m * s, (1 - m) * s)  # noqa: E731
        opts = {"xatol": 1e-12}
        return -optimize.minimize_scalar(
            f, bounds=(1e-6, 1 - 1e-6), method="bounded", options=opts
        ).fun

    grid = np.log(np.logspace(-1, 6, 141))
    i = int(np.argmax([profile(x) for x in grid]))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
    fine = -optimize.minimize_scalar(
        lambda x: -profile(x), bounds=(lo, hi), method="bounded", options={"xatol": 1e-10}
    ).fun
    m = c.sum() / n.sum()
    return max(w @ stats.binom.logpmf(uc, un, m), fine)


def test_fit_reaches_the_maximum_on_binomial_logs():
    """issue 55: 250k prompts x 8, every p = 0.3: the old search stopped 6.4 nats below the
    maximum at Beta(283, 662), predicted 0.05873 flat groups for 0.05772 and its count check
    rejected the binomial log.  The maximum is at a + b = ∞ (the binomial): the fit stops at the
    cap, within ~1e-3 nats of it (the cap's θ = 1/(a + b) ≈ 7e-7 times ∂ℓ/∂θ), flags it, gives
    no interval and predicts the binomial's flat fraction."""
    rng = np.random.default_rng(50)  # a log whose maximum is the binomial (about half are)
    n = np.full(250_000, 8)
    c = rng.binomial(n, 0.3)
    f = difficulty.fit(c, n)
    top, m = _profile_max(c, n), c.sum() / n.sum()
    assert top == pytest.approx(np.sum(stats.binom.logpmf(c, n, m)), abs=1e-9)  # the limit
    assert top - 0.01 < f.loglik <= top + 1e-6
    assert f.binomial_limit and f.at_bound and not f.has_interval
    assert f.se_method.startswith("none: the likelihood is highest at a + b → ∞")
    want = m**8 + (1 - m) ** 8
    assert difficulty.degenerate_fraction(f.a, f.b, 8) == pytest.approx(want, abs=1e-5)
    check = fit_checks.count_check(c, n, f)
    assert check["df"] == check["cells"] - 1 - 1  # only the mean was fitted
    assert check["p_value"] > 0.01


@pytest.mark.parametrize("a, b, prompts", [(30.0, 70.0, 250_000), (0.4, 0.3, 5_000)])
def test_fit_reaches_the_maximum_inside(a, b, prompts):
    """Inside the box (a spread beyond binomial noise, a near-binomial one included): the fit's
    log-likelihood is the independent search's maximum to 1e-6 nats, with an interval."""
    rng = np.random.default_rng(7)
    n = rng.choice([4, 8, 16], prompts)
    c = rng.binomial(n, rng.beta(a, b, prompts))
    f = difficulty.fit(c, n)
    assert not f.binomial_limit and f.has_interval
    assert f.loglik == pytest.approx(_profile_max(c, n), abs=1e-6)
    assert abs(f.a - a) < 4 * f.a_se and abs(f.b - b) < 4 * f.b_se


@pytest.mark.slow
def test_the_count_check_is_calibrated_on_binomial_logs():
    """Exactly binomial logs (1,000 prompts x 8 at p = 0.3, 2,000 of them): the count check
    rejects at its nominal 5% within 3 Monte Carlo SEs (about half the fits sit at the binomial
    limit, where df counts the mean only; with two parameters counted there it rejected 6.6%)."""
    rng = np.random.default_rng(2)
    R = 2000
    p = np.empty(R)
    limit = 0
    for r in range(R):
        n = np.full(1000, 8)
        c = rng.binomial(n, 0.3)
        f = difficulty.fit(c, n)
        p[r], limit = fit_checks.count_check(c, n, f)["p_value"], limit + f.binomial_limit
    assert 0.3 < limit / R < 0.7
    assert abs(np.mean(p < 0.05) - 0.05) < 3 * np.sqrt(0.05 * 0.95 / R)
    assert stats.kstest(p, "uniform").pvalue > 1e-3


def test_the_check_holds_bounded_memory_at_large_group_sizes():
    """issue 55: a log of groups of 65,536 made the check hold draws x G products (10 GB at
    4,000 draws); now chunks of at most CHECK_ELEMENTS, whatever the group size."""
    import tracemalloc

    rng = np.random.default_rng(0)
    n = np.full(4, 16_384)
    c = rng.binomial(n, rng.beta(2, 3, 4))
    f = difficulty.fit(c, n)
    tracemalloc.start()
    try:
        fit_checks.logged_check(c, n, f, draws=2000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    unbounded = 8 * 2000 * 16_385  # one float64 array of draws x G: the old path held several
    assert peak < 16 * 8 * fit_checks.CHECK_ELEMENTS < unbounded * 2
