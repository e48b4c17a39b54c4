"""Exact count-table theory (gpolab.theory.exact) against the closed forms of gpolab.theory.mse,
hand derivations, theory §8's numbers and Monte Carlo on the bandit (fixed seeds, 4 SE)."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import binom

from gpolab import engine, estimators, validate
from gpolab.envs import bandit
from gpolab.kernels import grouped
from gpolab.theory import exact as ex
from gpolab.theory import mse as th

RTOL = 1e-12


def truth64(seed=3, kind="tabular", prompts=6, actions=9):
    """Exact truth of a float64 bandit (call under the ``x64`` fixture)."""
    params = bandit.make(seed, prompts=prompts, actions=actions, kind=kind, dim=5)
    params = jax.tree.map(lambda x: np.asarray(x, np.float64), params)
    return params, bandit.exact(params)


def gsq(truth):
    return np.sum(np.asarray(truth.g_local, np.float64) ** 2, -1)


# ------------------------------------------------------------------ closed forms, exactly


@pytest.mark.parametrize("kind", ["tabular", "loglinear"])
@pytest.mark.parametrize("G", [2, 3, 8])
def test_matches_mse_closed_forms(x64, kind, G):
    _, truth = truth64(kind=kind)
    for name in ("vanilla", "loo", "mean"):
        table = ex.registry_table(name, G)
        assert table.ok and table.dtype == "float64"
        for B in (None, 3):
            np.testing.assert_allclose(
                ex.mse(truth, table, G, B), th.mse(truth, name, G, B), rtol=RTOL
            )
            b2, want = ex.bias_sq(truth, table, G, B), th.bias_sq(truth, name, G, B)
            np.testing.assert_allclose(b2, want, rtol=RTOL, atol=1e-25)


@pytest.mark.parametrize("G", [2, 4, 8])
def test_mathforge_dgae_count_table_by_hand(x64, G):
    """DGPO's MAD advantage (MathForge): c = s + 1 successes for a success, c = s for a failure,
    Σ|d| = 2c(G − c)/G, so A = G(1 − c/G)/(Σ|d| + 1e-4) on a success and −c/(Σ|d| + 1e-4) on a
    failure; all-equal groups (a success among G − 1 successes, a failure among none) 0.  Its
    batch reweighting (``mathforge/dgpo``) has no table."""
    s = np.arange(G, dtype=float)
    c1, c0 = s + 1, s
    ext1, ext0 = 2 * c1 * (G - c1) / G, 2 * c0 * (G - c0) / G
    table = ex.registry_table("mathforge/dgae", G)
    assert table.ok and table.dtype == "float64"
    np.testing.assert_allclose(table.a1, (G - c1) / (ext1 + 1e-4), rtol=RTOL, atol=1e-15)
    np.testing.assert_allclose(table.a0, -c0 / (ext0 + 1e-4), rtol=RTOL, atol=1e-15)
    assert table.a1[-1] == 0 and table.a0[0] == 0  # the two all-equal groups
    if G > 2:  # away from the all-equal groups: G/(2c) and −G/(2(G − c)), the 1e-4 aside
        np.testing.assert_allclose(table.a1[1:-1], G / (2 * c1[1:-1]), rtol=1e-3)
        np.testing.assert_allclose(table.a0[1:-1], -G / (2 * (G - c0[1:-1])), rtol=1e-3)
    assert "batch-scoped" in ex.registry_table("mathforge/dgpo", G, strict=False).reason


def test_ustat_is_loo_and_oracle_is_refused():
    G = 6
    u, loo = ex.registry_table("ustat", G), ex.registry_table("loo", G)
    np.testing.assert_allclose(u.a1, loo.a1, rtol=RTOL, atol=1e-15)
    np.testing.assert_allclose(u.a0, loo.a0, rtol=RTOL, atol=1e-15)
    with pytest.raises(validate.ConfigError, match="oracle: needs baseline besides the rewards"):
        ex.registry_table("oracle", G)
    assert "batch-scoped" in ex.registry_table("grpo", G, strict=False, scale="batch").reason
    # needs lengths: reward-only when every response has the same length (opo = mean then)
    assert not ex.registry_table("verl/opo", G, strict=False).ok
    opo, mean = ex.registry_table("verl/opo", G, length=7.0), ex.registry_table("mean", G)
    np.testing.assert_allclose(opo.a1, mean.a1, rtol=RTOL)
    np.testing.assert_allclose(opo.a0, mean.a0, rtol=RTOL, atol=1e-15)


@pytest.mark.parametrize("kind", ["tabular", "loglinear"])
def test_global_gradients_place_each_prompt_like_to_global(x64, kind):
    params, truth = truth64(kind=kind)
    ge = ex.global_gradients(truth)
    for x in range(params.num_prompts):
        one = bandit.to_global(params, jnp.array([x]), jnp.asarray(truth.g_local)[x : x + 1])
        np.testing.assert_allclose(ge[x], np.asarray(one), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(np.asarray(truth.prompt_probs) @ ge, truth.g, rtol=1e-12)


def test_constant_and_oracle_baselines_match_closed_forms(x64):
    _, truth = truth64(seed=4)
    G, b = 5, 0.3
    table = ex.count_table(lambda r: r - b, G, name="constant")
    mo = ex.moments(table, G, truth.V, gsq(truth), truth.S2, truth.e_wz2)
    np.testing.assert_allclose(mo.mse, th.mse_constant(truth, G, b), rtol=RTOL)
    np.testing.assert_allclose(mo.kappa, 1.0, rtol=RTOL)
    # oracle: a per-prompt table a1 = 1 − V(x), a0 = −V(x)
    V = np.asarray(truth.V, np.float64)[:, None]
    oracle = ex.Table(np.broadcast_to(1 - V, (V.size, G)), np.broadcast_to(-V, (V.size, G)), G)
    np.testing.assert_allclose(ex.mse(truth, oracle, G), th.mse(truth, "oracle", G), rtol=RTOL)
    np.testing.assert_allclose(
        ex.mse(truth, oracle, G, B=4), th.mse(truth, "oracle", G, 4), rtol=RTOL
    )


def test_vanilla_by_hand():
    """f = z: E‖ĝ‖² = e_wz2/G + (G − 1)/G ‖g‖², κ = 1, MSE = (e_wz2 − ‖g‖²)/G."""
    G, p, g2, S2, A = 7, np.array([0.0, 0.2, 1.0]), np.array([0.0, 0.3, 0.0]), 2.0, 0.9
    mo = ex.moments(ex.registry_table("vanilla", G), G, p, g2, S2, A)
    np.testing.assert_allclose(mo.mse, (A - g2) / G, rtol=RTOL)
    np.testing.assert_allclose(mo.kappa, 1.0, rtol=RTOL)


def test_table_reads_loo_and_grpo_by_hand():
    G = 4
    loo = ex.registry_table("loo", G)
    s = np.arange(G)
    np.testing.assert_allclose(loo.a1, 1 - s / (G - 1), rtol=RTOL, atol=1e-15)
    np.testing.assert_allclose(loo.a0, -s / (G - 1), rtol=RTOL, atol=1e-15)
    # grpo ddof 0, eps 0, G = 2: mixed group ±1, degenerate groups 0
    t = ex.registry_table("grpo", 2, ddof=0, eps=0.0)
    np.testing.assert_array_equal(t.a1, [1.0, 0.0])
    np.testing.assert_array_equal(t.a0, [0.0, -1.0])


# ------------------------------------------------------------------ κ: theory §8's numbers


def test_kappa_design_numbers():
    G, p = 8, 0.05
    grpo = float(ex.kappa(ex.registry_table("grpo", G, ddof=1, eps=1e-4), G, p))
    assert abs(grpo - 2.31) < 0.005, grpo  # theory §8: 2.31 (two decimals)
    np.testing.assert_allclose(ex.kappa(ex.registry_table("loo", G), G, p), 1.0, rtol=RTOL)
    np.testing.assert_allclose(ex.kappa(ex.registry_table("mean", G), G, p), 1 - 1 / G, rtol=RTOL)


@pytest.mark.parametrize("ddof", [0, 1])
@pytest.mark.parametrize("G", [2, 5, 16])
def test_grpo_kappa_identity(G, ddof):
    """gpolab's identity: p q κ = E[(Z_1 − p) A_1] = E[Σ_i (Z_i − Z̄)²/(s + eps)]/G, so
    κ = E_T[(G − ddof) s_T² / (s_T + eps)] / (G p q), T ~ Bin(G, p) the group's successes."""
    eps = 1e-4
    p = np.array([0.03, 0.3, 0.5, 0.9])
    k = ex.kappa(ex.registry_table("grpo", G, ddof=ddof, eps=eps), G, p)
    T = np.arange(G + 1)
    s2 = T * (G - T) / (G * (G - ddof))
    term = np.where(s2 > 0, (G - ddof) * s2 / (np.sqrt(s2) + eps), 0.0)
    want = binom.pmf(T, G, p[:, None]) @ term / (G * p * (1 - p))
    np.testing.assert_allclose(k, want, rtol=1e-12)


@pytest.mark.parametrize("eps", [0.0, 1e-4])
def test_grpo_kappa_asymptotics(eps):
    """κ → 1/σ, σ = √(p(1−p)).  From the identity above (ddof 1) and the delta method,
    E s = σ (1 − (1 − 4σ²)/(8 G σ²) + O(G⁻²)) and E[s²/(s+eps)] = E s − eps + O(eps/G), so
    1 − σκ = eps/σ + c/G + O(G⁻²), c = 1 + (1 − 4σ²)/(8σ²).  The O(G⁻²) coefficient is ≈ 20–23
    at p = 0.05 (measured at G = 256..16384): tolerance 30/G²."""
    p = 0.05
    sigma = np.sqrt(p * (1 - p))
    c = 1 + (1 - 4 * sigma**2) / (8 * sigma**2)
    for G in (256, 1024):
        k = float(ex.kappa(ex.registry_table("grpo", G, ddof=1, eps=eps), G, p))
        assert abs(1 - sigma * k - eps / sigma - c / G) < 30 / G**2, (G, k)


def grpo_kappa_by_counts(G, p, ddof, eps):
    """κ of gpolab's grpo by enumeration over the group's success count, in numpy alone: a
    success among T successes gets (1 − T/G)/(s_T + eps), a failure (−T/G)/(s_T + eps),
    s_T² = T(G − T)/(G(G − ddof)) (0 for an all-equal group); κ = E[A | success] −
    E[A | failure], the other G − 1 rewards holding S ~ Bin(G − 1, p) successes."""
    from math import comb

    def adv(z, T):
        s = np.sqrt(T * (G - T) / (G * (G - ddof)))
        return 0.0 if T in (0, G) else (z - T / G) / (s + eps)

    def pmf(S, q):
        return comb(G - 1, S) * q**S * (1 - q) ** (G - 1 - S)  # 0.0**0 == 1.0: exact at p = 0, 1

    return np.array(
        [sum(pmf(S, q) * (adv(1, S + 1) - adv(0, S)) for S in range(G)) for q in np.ravel(p)]
    ).reshape(np.shape(p))


@pytest.mark.parametrize("G, ddof, eps", [(4, 0, 0.0), (5, 1, 1e-4), (8, 1, 1e-6), (8, 0, 1e-2)])
def test_kappa_vectorised_over_p(G, ddof, eps):
    """κ over an array of p (any shape, p = 0 and 1 included) against a numpy enumeration over
    binomial counts of grpo's own definition (no table, no scipy)."""
    t = ex.registry_table("grpo", G, ddof=ddof, eps=eps)
    p = np.concatenate([[0.0, 1e-3], np.linspace(0.05, 0.95, 8), [1 - 1e-3, 1.0]]).reshape(3, 4)
    k = ex.kappa(t, G, p)
    assert k.shape == (3, 4)
    np.testing.assert_allclose(k, grpo_kappa_by_counts(G, p, ddof, eps), rtol=1e-12)
    assert np.ptp(k) > 0.01  # κ varies with p: the comparison has power


# ------------------------------------------------------------------ count_table's checks


@pytest.mark.parametrize(
    "fn, words",
    [
        (lambda r: r[..., :-1], "shape"),
        (lambda r: (r - r.mean(-1, keepdims=True)) / r.std(-1, keepdims=True), "non-finite"),
        (lambda r: r * jnp.arange(r.shape[-1])[None], "permutation"),
        (lambda r: estimators.grpo_advantages(r, scale="batch"), "batch-scoped"),
        (lambda r: (r - r.mean(-1, keepdims=True)) * r.size / jnp.sum(r != 0), "batch-scoped"),
    ],
    ids=["shape", "nan", "order", "batch-std", "gpg-factor"],
)
def test_count_table_rejects(fn, words):
    with pytest.raises(validate.ConfigError, match=f"'mine'.*{words}"):
        ex.count_table(fn, 4, name="mine")
    t = ex.count_table(fn, 4, name="mine", strict=False)
    assert not t.ok and words in t.reason and np.all(np.isnan(t.a1))
    truth = types.SimpleNamespace(
        prompt_probs=[1.0], V=[0.5], g_local=[[0.1]], g=[0.1], S2=[1.0], e_wz2=[0.5]
    )
    assert np.isnan(ex.mse(truth, t, 4)) and np.isnan(ex.bias_sq(truth, t, 4))


@pytest.mark.parametrize("G", [4, 200])  # copies of a group fill the batch; at G = 200, alone
def test_count_table_sees_batch_coupling_at_every_G(G):
    mean = lambda r: r - r.mean(-1, keepdims=True)  # noqa: E731
    assert ex.count_table(mean, G, strict=False).ok
    for fn in (
        lambda r: estimators.grpo_advantages(r, scale="batch"),
        lambda r: mean(r) / jnp.sqrt(jnp.mean(mean(r) ** 2) + 1e-8),
    ):
        assert "batch-scoped" in ex.count_table(fn, G, strict=False).reason


def test_registry_batch_scale_not_ok():
    t = ex.registry_table("grpo", 8, scale="batch", strict=False)
    assert not t.ok and "batch-scoped" in t.reason
    assert ex.registry_table("grpo", 8, scale="group").ok


def test_count_table_accepts_numpy_functions_and_checks_G():
    G = 5
    t = ex.count_table(lambda r: np.asarray(r) - np.mean(np.asarray(r), -1, keepdims=True), G)
    ref = ex.registry_table("mean", G)
    np.testing.assert_allclose(t.a1, ref.a1, rtol=RTOL)
    np.testing.assert_allclose(t.a0, ref.a0, rtol=RTOL)
    with pytest.raises(validate.ConfigError, match="G = 5"):
        ex.kappa(t, 6, 0.5)
    with pytest.raises(validate.ConfigError, match="raised"):
        ex.count_table(lambda r: r.undefined, G, name="broken")


# ------------------------------------------------------------------ p = 0 and p = 1


def test_p_zero_and_one_are_the_direct_limits():
    G, g2, S2 = 6, 0.2, 1.5
    t = ex.registry_table("grpo", G, ddof=1, eps=1e-6)
    c = ex.count_table(lambda r: r - 0.3, G)
    for table in (t, c):
        a1, a0 = table.a1, table.a0
        for p, A, s in ((0.0, 0.0, 0), (1.0, S2, G - 1)):
            mo = ex.moments(table, G, p, g2, S2, A)
            cross = (
                (a1[1] ** 2 + a0[0] ** 2 - 2 * a1[0] * a0[1])
                if p == 0
                else (a1[G - 1] ** 2 + a0[G - 2] ** 2 - 2 * a1[G - 2] * a0[G - 1])
            )
            second = (A * a1[s] ** 2 + (S2 - A) * a0[s] ** 2) / G + (G - 1) / G * g2 * cross
            np.testing.assert_allclose(mo.second_moment, second, rtol=RTOL)
            np.testing.assert_allclose(mo.kappa, a1[s] - a0[s], rtol=RTOL, atol=1e-300)
            near = ex.moments(table, G, abs(p - 1e-12), g2, S2, A)  # continuity
            np.testing.assert_allclose(near.mse, mo.mse, rtol=1e-9)


def test_bandit_prompts_with_p_zero_and_one(x64):
    params, _ = truth64(seed=5, prompts=4, actions=7)
    success = np.asarray(params.success).copy()
    success[0], success[1] = 0.0, 1.0
    truth = bandit.exact(params.replace(success=success))
    G = 4
    for b in (None, 0.3):
        table = ex.registry_table("grpo", G) if b is None else ex.count_table(lambda r: r - 0.3, G)
        mo = ex.moments(table, G, truth.V, gsq(truth), truth.S2, truth.e_wz2)
        assert np.all(np.isfinite(mo.mse))
        if b is None:  # every group degenerate: ĝ = 0 exactly and g_x = 0
            np.testing.assert_allclose(mo.mse[:2], 0.0, atol=1e-15)
        else:
            np.testing.assert_allclose(mo.mse[:2], th.mse_constant(truth, G, b)[:2], rtol=RTOL)


# ------------------------------------------------------------------ Monte Carlo S2


def test_mse_se_from_monte_carlo_S2(x64):
    _, truth = truth64(seed=6)
    G = 6
    se = np.linspace(0.01, 0.05, 6)
    noisy = types.SimpleNamespace(
        **{k: getattr(truth, k) for k in truth.__dataclass_fields__}, S2_se=se
    )
    for name in ("loo", "mean", "vanilla"):
        for B in (None, 3):
            got = ex.mse_se(noisy, ex.registry_table(name, G), G, B)
            np.testing.assert_allclose(got, th.mse_se(noisy, name, G, B), rtol=RTOL, atol=1e-300)
    assert ex.mse_se(truth, ex.registry_table("grpo", G), G) == 0.0
    # the slope is dMSE/dS2, by a finite difference (MSE is linear in S2)
    t = ex.registry_table("grpo", G)
    unit = np.where(np.arange(6) == 2, 1.0, 0.0)  # prompt 2 only
    shifted = types.SimpleNamespace(**{**vars(noisy), "S2": np.asarray(truth.S2) + 1e-3 * unit})
    one = types.SimpleNamespace(**{**vars(noisy), "S2_se": unit})
    fd = (ex.mse(shifted, t, G) - ex.mse(noisy, t, G)) / 1e-3  # = f_2 dMSE_2/dS2_2
    np.testing.assert_allclose(ex.mse_se(one, t, G), fd, rtol=1e-6)


# ------------------------------------------------------------------ Monte Carlo agreement

SEEDS = 20_000


def measure(params, G, B, ddof, eps, names=("grpo", "loo"), seeds=SEEDS, key=0):
    """Engine MSE statistics of ``names`` on one bandit cell (float32, common random numbers)."""
    truth = bandit.exact(params)
    cell = grouped.BanditCell(tuple(names), G=G, B=B, ddof=ddof)
    m = engine.run(
        grouped.bandit_error,
        cell,
        (params, truth, bandit.outcome_tables(params), np.float32(eps)),
        jax.random.key(key),
        seeds,
        chunk=5000,
    )
    return truth, {n: engine.error_stats(m, f"{n}/err", f"{n}/sq") for n in names}


def z_scores(params, G, B, ddof, eps, **kw):
    """Per estimator: (MC − exact)/SE of its MSE, bias² (MC, exact), the SE, and the exact MSE."""
    truth, res = measure(params, G, B, ddof, eps, **kw)
    out = {}
    for name, s in res.items():
        table = ex.registry_table(name, G, ddof=ddof, eps=eps)
        exact, b2 = ex.mse(truth, table, G, B or None), ex.bias_sq(truth, table, G, B or None)
        out[name] = ((s.mse - exact) / s.mse_se, s.bias_sq, b2, s.mse_se, exact)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("ddof", [0, 1])
@pytest.mark.parametrize("G", [2, 4, 8])
def test_mc_grpo_matches_exact(G, ddof):
    params = bandit.make(11, prompts=8, actions=16)
    for key, eps in enumerate((1e-4, 1e-6, 1e-9)):
        res = z_scores(params, G, 0, ddof, eps, key=key)
        for name, (z, *_) in res.items():
            assert abs(z) < 4, (name, G, ddof, eps, z)
        se, grpo, loo = res["grpo"][3], res["grpo"][4], res["loo"][4]
        assert abs(grpo - loo) > 8 * se or (G, ddof) == (2, 0)  # power (G = 2, ddof 0: grpo = loo)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["tabular", "loglinear"])
@pytest.mark.parametrize("B", [0, 3])
def test_mc_grpo_minibatch_and_loglinear(kind, B):
    params = bandit.make(12, prompts=8, actions=16, kind=kind, dim=5)
    seeds = 50_000 if B == 0 else SEEDS  # enough for the bias check's power at B = 0
    res = z_scores(params, 4, B, 1, 1e-4, names=("grpo", "loo", "mean"), seeds=seeds)
    for name, (z, *_) in res.items():
        assert abs(z) < 4, (name, kind, B, z)
    _, b_mc, b_exact, se, exact = res["grpo"]
    assert abs(b_mc - b_exact) < 4 * se  # grpo's bias, measured (bias² = MSE − tr Cov)
    if B == 0:
        assert b_exact > 4 * se  # the bias check has power
    else:  # power: the prompt variance and bias terms are many SE away from Σ_x f_x MSE_x / B
        table = ex.registry_table("grpo", 4, ddof=1, eps=1e-4)
        assert abs(exact - ex.mse(bandit.exact(params), table, 4) / B) > 8 * se


# the built-in entries the registry records as not reward-only: the speed-up of 0c5ffe0 let their
# tables skip the group-scope check (two of them got invented tables); each must be refused,
# except verl/opo, reward-only when every response has the same length
NOT_REWARD_ONLY = {
    "oracle": "needs baseline",
    "verl/remax": "needs greedy",
    "verl/gpg": "batch-scoped",
    "verl/reinforce_plus_plus_baseline": "batch-scoped",
    "openrlhf/reinforce_baseline": "batch-scoped",
    "verl/opo": "",
    "areal/liteppo": "batch-scoped",
    "jspo/jspo": "batch-scoped",
    "jspo/jspo_plus_plus": "batch-scoped",
    "spo/spo": "needs baseline",
    "mathforge/dgpo": "batch-scoped",
}


@pytest.mark.parametrize("G", [3, 6])
def test_builtin_tables_pass_the_checks_they_are_trusted_to_skip(G):
    """Every built-in entry, the ones the registry records as not reward-only included: a table
    exactly for the reward-only ones (verl/opo at a constant length), a reason for the others.
    The batch-scoped entries are refused by the record and by count_table's group-scope check
    on their own function alone (a wrong record is caught too)."""
    builtins = {n: e for n, e in estimators.REGISTRY.items() if not e.user}
    assert {n for n, e in builtins.items() if not e.reward_only_for()} == set(NOT_REWARD_ONLY)
    const = {"lengths": lambda r: np.full(r.shape, 7.0, r.dtype)}
    for name, entry in builtins.items():
        if G < estimators.minimum_G(name):
            continue
        table = ex.registry_table(name, G, strict=False, length=7.0)
        words = NOT_REWARD_ONLY.get(name, "")
        assert table.ok == (not words) and words in table.reason, (name, table.reason)
        if entry.scope == "batch" and set(entry.needs) <= {"lengths"}:  # without the record
            fn = ex.advantage_fn(*estimators.bind(name, {}), const if entry.needs else {})
            full = ex.count_table(fn, G, name=name, strict=False)
            assert not full.ok and "batch-scoped" in full.reason, (name, full.reason)
        if entry.needs:  # without a constant length nothing but the rewards is known
            assert "needs" in ex.registry_table(name, G, strict=False).reason
