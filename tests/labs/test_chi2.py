"""Weighted-χ² limit of the SGD gap (theory §5, arXiv 2603.01162 Thm 8): the Gaussian testbed's
closed forms, Imhof's CDF, the Lyapunov solution, hand-derived weights, Γ and the Jacobian of
each estimator's expected update, and the CLI end to end."""

import functools
import json
import math
import types

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from scipy import stats

from gpolab import configs, engine
from gpolab.engine import train
from gpolab.envs import gaussian
from gpolab.kit import output, running
from gpolab.kit.store import Store
from gpolab.labs.chi2 import lab as chi2
from gpolab.labs.chi2 import plots
from gpolab.runner.cli import main
from gpolab.theory import chi2 as theory
from gpolab.validate import ConfigError

# DKW: P(sup_x |ECDF_N(x) − F(x)| > t) ≤ 2 exp(−2 N t²); t for a 1e-6 false-alarm rate
DKW_ALPHA = 1e-6


def dkw(n: int) -> float:
    return math.sqrt(math.log(2 / DKW_ALPHA) / (2 * n))


# --------------------------------------------------------------------------------- the testbed
@pytest.mark.parametrize("rank", [None, 2])
def test_closed_form_gradient_and_hessian_match_autodiff(rank):
    params = gaussian.make(1, prompts=5, dim=3, rank=rank)
    theta = 0.7 * jax.random.normal(jax.random.key(3), (3,))
    np.testing.assert_allclose(
        gaussian.gradient(params, theta),
        jax.grad(lambda t: gaussian.expected_return(params, t))(theta),
        rtol=1e-5,
        atol=1e-7,
    )
    np.testing.assert_allclose(
        gaussian.hessian(params, theta),
        jax.hessian(lambda t: gaussian.expected_return(params, t))(theta),
        rtol=1e-4,
        atol=1e-6,
    )


def test_closed_form_J_matches_finite_differences(x64):
    params = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), gaussian.make(2, prompts=4))
    theta = np.array([0.3, -0.8, 0.5])
    J = lambda t: float(gaussian.expected_return(params, jnp.asarray(t)))  # noqa: E731
    g = np.asarray(gaussian.gradient(params, jnp.asarray(theta)))
    H = np.asarray(gaussian.hessian(params, jnp.asarray(theta)))
    h = 1e-4
    for i in range(3):
        e = np.eye(3)[i] * h
        np.testing.assert_allclose((J(theta + e) - J(theta - e)) / (2 * h), g[i], atol=1e-8)
        grad = lambda t: np.asarray(gaussian.gradient(params, jnp.asarray(t)))  # noqa: E731
        np.testing.assert_allclose((grad(theta + e) - grad(theta - e)) / (2 * h), H[i], atol=1e-8)
    # the gap is J* − J on a realizable instance
    theta_star = gaussian.optimum(params)
    gap = float(gaussian.gap(params, jnp.asarray(theta)))
    np.testing.assert_allclose(gap, J(theta_star) - J(theta), rtol=1e-12)
    assert float(gaussian.gap(params, jnp.asarray(theta_star))) < 1e-14  # μ was float32


def test_value_matches_sampled_rewards():
    params = gaussian.make(0)
    theta = jnp.array([0.2, -0.4, 0.1])
    prompts = jnp.arange(params.num_prompts)
    _, z, w = gaussian.sample(jax.random.key(5), params, theta, prompts, 200_000)
    se = np.asarray(jnp.std(z, axis=1)) / math.sqrt(z.shape[1])
    assert np.all(np.abs(np.asarray(jnp.mean(z, axis=1) - gaussian.value(params, theta))) < 5 * se)
    # per-prompt gradient g_x = E[W Z | x]: f-weighted sum = ∇J
    gx = jnp.mean(w * z[..., None], axis=1)  # (P, d)
    se_g = np.asarray(jnp.std(w * z[..., None], axis=1)) / math.sqrt(z.shape[1])
    exact = gaussian.gradient(params, theta)
    np.testing.assert_array_less(
        np.abs(np.asarray(params.prompt_probs @ gx - exact)), 5 * np.sqrt(np.mean(se_g**2, 0))
    )


def test_rank_deficient_instance_only_sees_theta1_plus_theta2():
    params = gaussian.make(0, prompts=4, dim=3, rank=2)
    theta_star = jnp.asarray(gaussian.optimum(params), jnp.float32)
    null = jnp.array([1.0, -1.0, 0.0])
    assert float(gaussian.gap(params, theta_star + 0.7 * null)) < 1e-6
    np.testing.assert_allclose(gaussian.gradient(params, theta_star + 0.7 * null), 0, atol=1e-6)
    assert float(gaussian.gap(params, theta_star + 0.2 * jnp.array([1.0, 1.0, 0.0]))) > 1e-3


# ----------------------------------------------------------------------------- Imhof's CDF
def test_imhof_equal_weights_is_scaled_chi2():
    # Σ_{k≤r} c χ²₁ = c χ²_r exactly
    for r, c in [(1, 1.0), (2, 0.3), (3, 2.0), (5, 0.01)]:
        for q in [1e-4, 0.05, 0.5, 0.95, 0.9999]:
            x = c * stats.chi2.ppf(q, r)
            assert abs(theory.imhof_cdf(x, [c] * r) - q) < 1e-8


def test_imhof_cdf_matches_sampling():
    w = np.array([0.5, 0.2, 0.05])
    n = 400_000
    x = np.sort(theory.sample_weighted_chi2(jax.random.key(11), w, n))
    grid = np.quantile(x, np.linspace(0.01, 0.99, 25))
    F = np.array([theory.imhof_cdf(g, w) for g in grid])
    ecdf = np.searchsorted(x, grid, side="right") / n
    # pointwise binomial SE and the uniform DKW band
    se = np.sqrt(F * (1 - F) / n)
    np.testing.assert_array_less(np.abs(ecdf - F), 5 * se)
    assert np.max(np.abs(ecdf - F)) < dkw(n)
    assert abs(x.mean() - w.sum()) < 5 * math.sqrt(2 * np.sum(w**2) / n)


def test_weighted_chi2_interpolant_matches_quad():
    law = theory.WeightedChi2([0.02, 0.011, 0.004])
    x = np.random.default_rng(0).uniform(0, law.ppf(0.999), 40)
    np.testing.assert_allclose(law.cdf(x), law.exact_cdf(x), atol=1e-5)
    p = np.array([0.1, 0.5, 0.9])
    np.testing.assert_allclose(law.exact_cdf(law.ppf(p)), p, atol=1e-4)


# ------------------------------------------------------------------------ Lyapunov and weights
def test_one_dimensional_weight_by_hand():
    # d = 1: (βλ − ½)Σ·2 = β²ω ⇒ Σ = β²ω/(2βλ − 1); w = ½λΣ.
    # λ = 0.5, ω = 0.2, β = 2: Σ = 4·0.2/(2·2·0.5 − 1) = 0.8, w = ½·0.5·0.8 = 0.2.
    law = theory.limit_law([[-0.5]], [[-0.5]], [[0.2]], beta=2.0)
    np.testing.assert_allclose(law.sigma, [[0.8]], rtol=1e-12)
    np.testing.assert_allclose(law.weights, [0.2], rtol=1e-12)
    # a Jacobian (1 − 1/G)H, as for Dr.GRPO's mean with G = 4: λ_M = 0.375,
    # Σ = 4·0.2/(2·2·0.375 − 1) = 1.6, w = ½·0.5·1.6 = 0.4 (the gap still uses λ = 0.5)
    law = theory.limit_law([[-0.5]], [[-0.375]], [[0.2]], beta=2.0)
    np.testing.assert_allclose(law.weights, [0.4], rtol=1e-12)


def test_diagonal_weights_by_hand():
    # Λ = diag(1, 0.5), Ω = diag(0.3, 0.1), β = 1.5: coordinates decouple,
    # Σ_11 = 2.25·0.3/(2·1.5·1 − 1) = 0.3375,  w_1 = ½·1·0.3375 = 0.16875
    # Σ_22 = 2.25·0.1/(2·1.5·0.5 − 1) = 0.45,  w_2 = ½·0.5·0.45 = 0.1125
    H = -np.diag([1.0, 0.5])
    law = theory.limit_law(H, H, np.diag([0.3, 0.1]), beta=1.5)
    np.testing.assert_allclose(np.diag(law.sigma)[np.argsort(np.diag(law.lam))], [0.45, 0.3375])
    np.testing.assert_allclose(law.weights, [0.16875, 0.1125], rtol=1e-12)
    # eigenbasis formula with a non-diagonal Ω: Σ_kl = β²Ω_kl/(β(λ_k + λ_l) − 1)
    omega = np.array([[0.3, 0.05], [0.05, 0.1]])
    lam = np.array([1.0, 0.5])
    sigma = theory.lyapunov(lam, omega, 1.5)
    expect = 2.25 * omega / (1.5 * (lam[:, None] + lam[None, :]) - 1)
    np.testing.assert_allclose(sigma, expect, rtol=1e-12)


def _linearised_run(key, lam_m, omega_root, beta, n):
    """e_{i+1} = e_i − (β/i) Λ_M e_i + (β/i) ξ_i, ξ ~ N(0, Ω), e_0 = 0; returns √n e_n."""

    def body(e, i):
        xi = omega_root @ jax.random.normal(jax.random.fold_in(key, i), (lam_m.shape[0],))
        step = beta / i.astype(jnp.float32)
        return e - step * (lam_m @ e) + step * xi, None

    e, _ = jax.lax.scan(body, jnp.zeros(lam_m.shape[0]), jnp.arange(1, n + 1, dtype=jnp.uint32))
    return math.sqrt(n) * e


def test_lyapunov_matches_simulated_linearised_recursion():
    lam_m = np.array([[0.8, 0.2], [0.1, 0.5]])  # non-symmetric Λ_M, β λ_min(Λ_M) > 1/2
    omega = np.array([[0.4, 0.15], [0.15, 0.2]])
    beta, n, seeds = 1.6, 2000, 20_000
    sigma = theory.lyapunov(lam_m, omega, beta)
    a = beta * lam_m - 0.5 * np.eye(2)
    np.testing.assert_allclose(a @ sigma + sigma @ a.T, beta**2 * omega, atol=1e-12)
    run = jax.jit(jax.vmap(_linearised_run, in_axes=(0, None, None, None, None)), static_argnums=4)
    keys = engine.seed_keys(jax.random.key(4), jnp.arange(seeds, dtype=jnp.uint32))
    u = np.asarray(
        run(
            keys,
            jnp.asarray(lam_m, jnp.float32),
            jnp.asarray(np.linalg.cholesky(omega), jnp.float32),
            beta,
            n,
        ),
        np.float64,
    )
    cov = u.T @ u / seeds  # E u = 0
    # SE of the entries of an empirical covariance of Gaussians: √((Σ_kk Σ_ll + Σ_kl²)/N)
    se = np.sqrt((np.outer(np.diag(sigma), np.diag(sigma)) + sigma**2) / seeds)
    np.testing.assert_array_less(np.abs(cov - sigma), 5 * se + 2 * np.abs(sigma) / n)


# ------------------------------------------------------------- estimator laws on the testbed
@pytest.mark.parametrize("name", theory.CLOSED_FORM)
def test_scalar_moments_closed_form_vs_monte_carlo(name):
    """τ² and ψ'(0) closed forms against the shared estimators by Monte Carlo (h ≠ s)."""
    h, s, G = 0.8, 1.2, 4
    mc = theory.mc_scalar_moments(
        jax.random.key(10 + theory.CLOSED_FORM.index(name)),
        name,
        h,
        s,
        G,
        n_groups=2**18,
        n_batches=16,
    )
    assert abs(mc["psi"]) < 5 * mc["psi_se"]  # θ* is the fixed point of every estimator
    assert abs(mc["tau2"] - theory.scalar_variance(name, h, s, G)) < 5 * mc["tau2_se"]
    assert abs(mc["slope"] - theory.scalar_slope(name, h, s, G)) < 5 * mc["slope_se"]


def test_grpo_jacobian_autodiff_vs_likelihood_ratio():
    """ψ'(0) of grpo: pathwise autodiff (the library) vs an independent float64 numpy
    likelihood-ratio estimate.  d/dm E[ζ] = E[∂_m ζ] + E[ζ Σ_k w_k] and ∂_m ζ = −Σ_g c_g/s² = 0
    because std-normalized advantages sum to 0 over the group."""
    h, s, G, eps = 1.0, 1.0, 6, 1e-4
    mc = theory.mc_scalar_moments(jax.random.key(8), "grpo", h, s, G, eps=eps, n_groups=2**19)
    rng = np.random.default_rng(0)
    est_lr = []
    for _ in range(8):
        xi = rng.normal(size=(2**17, G))
        z = np.exp(-((s * xi) ** 2) / (2 * h**2))
        centred = z - z.mean(1, keepdims=True)
        adv = centred / (z.std(1, ddof=1, keepdims=True) + eps)
        w = xi / s
        zeta = (adv * w).mean(1)
        est_lr.append(np.mean(zeta * w.sum(1)))
    lr, lr_se = np.mean(est_lr), np.std(est_lr, ddof=1) / math.sqrt(len(est_lr))
    assert abs(mc["slope"] - lr) < 5 * math.hypot(mc["slope_se"], lr_se)
    # std normalization steepens the update ~1/σ(Z) (σ(Z) ≈ 0.28 here; 2.7× at G = 6)
    assert mc["slope"] < 2 * theory.scalar_slope("loo", h, s, G)


@pytest.mark.parametrize("name", ["loo", "grpo"])
def test_gamma_matches_minibatch_covariance(name):
    """Γ of the law vs the covariance of the mini-batch estimate at θ* built exactly as SGD does."""
    cfg = chi2.Config(B=3, G=4, mc_groups=2**18)
    params = chi2.make_env(cfg)
    law = chi2.predict(jax.random.key(1), cfg, params, name)
    theta_star = jnp.asarray(gaussian.optimum(params), jnp.float32)
    cell = chi2.Chi2Cell(name, cfg.B, cfg.G[0], (1,))
    args = chi2.Chi2Args(params, theta_star, jnp.float32(1.0), jnp.float32(cfg.eps))
    keys = engine.seed_keys(jax.random.key(2), jnp.arange(200_000, dtype=jnp.uint32))
    step = jax.jit(jax.vmap(lambda k: chi2.sgd_direction(cell, args, k, theta_star, 1)[0]))
    g = np.asarray(step(keys), np.float64)
    n = g.shape[0]
    np.testing.assert_array_less(np.abs(g.mean(0)), 5 * g.std(0) / math.sqrt(n))
    cov = g.T @ g / n
    se = np.sqrt((np.outer(np.diag(law.gamma), np.diag(law.gamma)) + law.gamma**2) / n)
    np.testing.assert_array_less(np.abs(cov - law.gamma), 5 * se)


def test_rank_deficient_law_has_exactly_r_weights():
    cfg = chi2.Config(rank=2)
    params = chi2.make_env(cfg)
    law = chi2.predict(None, cfg, params, "loo")
    assert law.rank == 2 and law.weights.shape == (2,) and np.all(law.weights > 0)
    # the same law built in all d = 3 coordinates: S = QΣQᵀ, weights = eig(½ S^{1/2}(−H)S^{1/2})
    S = law.basis @ law.sigma @ law.basis.T
    lam, vec = np.linalg.eigh(S)
    root = (vec * np.sqrt(np.clip(lam, 0, None))) @ vec.T
    full = np.sort(np.linalg.eigvalsh(0.5 * root @ -law.hessian @ root))[::-1]
    assert np.sum(full > 1e-10 * full[0]) == 2
    np.testing.assert_allclose(full[:2], law.weights, rtol=1e-8)


def test_loo_and_oracle_weights_differ_by_order_one_over_G_squared():
    """[U] Cor 9 (§4.2): GRPO-type (loo) weights = oracle weights + O(1/G²).  Here Γ_loo − Γ_or =
    (1/B) Σ f S2σ²/(G(G − 1)) φφᵀ, so G²·|Δw| ≈ G/(G − 1)·const: bounded and decreasing."""
    params = gaussian.make(0)
    scaled = []
    for G in [2, 4, 8, 16, 32, 64]:
        w = {
            e: theory.estimator_law(None, params, e, 4, G, beta=3.0).weights
            for e in ("loo", "oracle")
        }
        diff = np.max(np.abs(w["loo"] - w["oracle"]))
        assert np.all(w["loo"] >= w["oracle"])  # the oracle baseline is never worse here
        scaled.append(G**2 * diff)
    scaled = np.array(scaled)
    assert np.all(scaled <= scaled[0] * (1 + 1e-9))  # |Δw| ≤ C/G² with C = 4|Δw(G=2)|
    assert scaled[-1] > 0.5 * scaled[0]  # and not o(1/G²): the constant is real


# --------------------------------------------------------------------------- configuration
def test_bad_beta_raises_config_error():
    with pytest.raises(ConfigError, match="^beta: got 0.5; allowed: beta >"):
        chi2.run(chi2.Config(beta=0.5, estimator=("loo",), seeds=8, n=(2,)))
    # mean's Jacobian is (1 − 1/G)H: a β that is fine for loo can fail for mean at G = 2
    lam_min = chi2.predict(None, chi2.Config(), chi2.make_env(chi2.Config()), "loo")
    beta = 0.5 / lam_min.lambda_min * 1.5  # β λ_min = 0.75 for loo, 0.375 for mean with G = 2
    chi2.predict(None, chi2.Config(beta=beta, G=2), chi2.make_env(chi2.Config()), "loo")
    with pytest.raises(ConfigError, match="^beta: .* for mean"):
        chi2.predict(None, chi2.Config(beta=beta, G=2), chi2.make_env(chi2.Config()), "mean")


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(B=0), "B"),
        (dict(G=1), "G"),
        (dict(seeds=1), "seeds"),
        (dict(estimator=("verl/remax",)), "estimator"),  # needs greedy responses
        (dict(estimator=("verl/gpg",)), "estimator"),  # batch-scoped
        (dict(estimator=("ppo",)), "estimator"),
        (dict(n=(100, 10)), "n"),
        (dict(rank=4), "rank"),
    ],
)
def test_bad_config_raises_config_error(kw, field):
    with pytest.raises(ConfigError, match=f"^{field}"):
        chi2.Config(**kw).validate()


def test_cli_bad_beta_exits_2(capsys, tmp_path):
    argv = ["chi2", "--beta", "0.5", "--estimator", "loo", "--seeds", "8"]
    assert main([*argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpolab chi2: error: beta: got 0.5")
    assert main(["chi2", "--estimator", "loo,foo"]) == 2
    assert "estimator: got 'foo'" in capsys.readouterr().err


# ----------------------------------------------------------------------------- simulation
def test_simulation_does_not_depend_on_chunking():
    cfg = chi2.Config()
    params = chi2.make_env(cfg)
    theta0 = jnp.asarray(chi2.initial_theta(params, 0.3), jnp.float32)
    args = chi2.Chi2Args(params, theta0, jnp.float32(3.0), jnp.float32(1e-4))
    cell = chi2.Chi2Cell("grpo", 2, 4, (5, 12))
    a = chi2.simulate(jax.random.key(0), cell, args, 12, 12)
    b = chi2.simulate(jax.random.key(0), cell, args, 12, 5)
    np.testing.assert_allclose(a, b, rtol=1e-5)  # same draws; only float rounding may differ
    assert a.shape == (12, 2) and np.all(a > 0)


def z_scores(df) -> np.ndarray:
    """(empirical − predicted mean) / its standard error, the SE read off the 95% CI."""
    se = (df["ci_high"] - df["ci_low"]) / (2 * engine.Z95)
    return ((df["empirical_mean"] - df["predicted_mean"]) / se).to_numpy()


def _identifiable_and_null_moves(cfg, seeds, checkpoints):
    """θ_n − θ_0 projected on (1, −1, 0)/√2 (unidentifiable: J sees θ1 + θ2 and θ3) and its norm
    in the identifiable plane, per seed and checkpoint, from the lab's own SGD step and keys."""
    params = chi2.make_env(cfg)
    theta0 = jnp.asarray(chi2.initial_theta(params, cfg.init, cfg.instance_seed), jnp.float32)
    args = chi2.Chi2Args(params, theta0, jnp.float32(cfg.beta), jnp.float32(cfg.eps))
    cell = chi2.Chi2Cell(cfg.estimator[0], cfg.B, cfg.G[0], tuple(checkpoints))
    direction = lambda k: functools.partial(chi2.sgd_direction, cell, args)  # noqa: E731
    lr = functools.partial(chi2.harmonic_step, args.beta)

    def one(key):
        theta, start, out = theta0, 0, []
        for n in checkpoints:
            steps = jnp.arange(start + 1, n + 1, dtype=jnp.uint32)
            theta, _, _ = train.ascend(direction(key), theta, key, steps, lr=lr)
            out.append(theta - theta0)
            start = n
        return jnp.stack(out)

    keys = engine.seed_keys(jax.random.key(9), jnp.arange(seeds, dtype=jnp.uint32))
    moves = np.asarray(jax.jit(jax.vmap(one))(keys), np.float64)  # (seeds, checkpoints, 3)
    null = np.array([1.0, -1.0, 0.0]) / math.sqrt(2)
    along_null = moves @ null
    identifiable = np.linalg.norm(moves - along_null[..., None] * null, axis=-1)
    return along_null, identifiable


@pytest.mark.slow
def test_rank_deficient_sgd_matches_its_chi2_law():
    """SGD on the rank-2 instance: n·Δ at n = 2000 against the 2-weight law (mean within 3.5 SE
    of its own standard error, KS p > 1e-3), and the unidentifiable direction θ1 − θ2 never
    moves (float32 rounding only) while the identifiable ones move by O(0.1)."""
    cfg = chi2.Config(estimator=("loo",), rank=2, seeds=2048, n=(2000,))
    df = chi2.run(cfg)["results"]
    (res,) = df.itertuples()
    assert len(res.weights) == 2
    assert res.ks_pvalue > 1e-3
    assert abs(z_scores(df)[0]) < 3.5, (res.empirical_mean, res.predicted_mean)
    along_null, identifiable = _identifiable_and_null_moves(cfg, 32, (1, 10, 100, 2000))
    assert np.max(np.abs(along_null)) < 1e-6, np.max(np.abs(along_null))
    assert np.min(identifiable[:, -1]) > 0.05  # θ0 is 0.3 from θ*, SGD gets there


@pytest.mark.slow
def test_five_estimators_full_rank_fit_their_chi2_laws():
    """The README's χ² result at test scale (1,024 seeds, n = 2000 instead of 4,096 and 10⁴):
    for vanilla, loo, oracle, mean and grpo, each on its own seeds, the empirical mean of n·Δ
    lies within 3.5 standard errors of Σ w_k, the five z-scores pass jointly (Σ z² against χ²₅,
    p > 1e-3), and the five KS tests against the Imhof CDF pass jointly (Fisher's −2 Σ log p
    against χ²₁₀, p > 1e-3).  A 10% error in a law's mean is ≈ 3.7 SE here."""
    cfg = chi2.Config(seeds=1024, n=(2000,), mc_groups=2**17)
    df = chi2.run(cfg)["results"]
    assert list(df["estimator"]) == list(chi2.DEFAULT) and (df["rank"] == 3).all()
    z = z_scores(df)
    assert np.all(np.abs(z) < 3.5), dict(zip(df["estimator"], z, strict=True))
    assert stats.chi2.sf(np.sum(z**2), len(z)) > 1e-3
    fisher = -2 * np.sum(np.log(df["ks_pvalue"].to_numpy()))
    assert stats.chi2.sf(fisher, 2 * len(df)) > 1e-3, df["ks_pvalue"].tolist()
    # the README's qualitative facts: std normalization doubles the limit mean at the same β;
    # the oracle baseline has the smallest weights of the unbiased estimators
    pred = df.set_index("estimator")["predicted_mean"]
    assert pred["grpo"] > 1.8 * pred["loo"]
    assert pred["oracle"] < min(pred["loo"], pred["vanilla"])


def test_cli_end_to_end_json(tmp_path, capsys):
    """The CLI's JSON rows agree with its saved tables, and at n = 300 (past the transient at
    β = 3) each estimator's mean of n·Δ is within 4 SE of its law's Σ w_k and KS p > 1e-3."""
    out = tmp_path / "chi2"
    argv = [
        "chi2",
        "--estimator",
        "loo,grpo",
        "--seeds",
        "256",
        "--n",
        "10,300",
        "--mc-groups",
        "16384",
        "--out",
        str(out),
        "--json",
    ]
    assert main(argv) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    keys = {"estimator", "n", "weights", "predicted_mean", "empirical_mean", "ci_low", "ci_high"}
    assert len(rows) == 4 and all(keys | {"ks_stat", "ks_pvalue"} <= set(r) for r in rows)
    assert [(r["estimator"], r["n"]) for r in rows] == [
        ("loo", 10),
        ("loo", 300),
        ("grpo", 10),
        ("grpo", 300),
    ]
    samples = pd.read_parquet(out / "samples.parquet")
    for r in rows:
        x = samples.query(f"estimator == '{r['estimator']}' and n == {r['n']}")["scaled_gap"]
        assert len(x) == 256
        m, half = x.mean(), engine.Z95 * x.std(ddof=1) / math.sqrt(len(x))
        got = [r["empirical_mean"], r["ci_low"], r["ci_high"]]
        np.testing.assert_allclose(got, [m, m - half, m + half], rtol=1e-9)
        assert len(r["weights"]) == 3 and abs(r["predicted_mean"] - sum(r["weights"])) < 1e-12
        law = theory.WeightedChi2(r["weights"])
        ks = stats.kstest(x.to_numpy(), law.cdf)
        np.testing.assert_allclose([r["ks_stat"], r["ks_pvalue"]], [ks.statistic, ks.pvalue])
    late = pd.DataFrame([r for r in rows if r["n"] == 300])
    assert np.all(np.abs(z_scores(late)) < 4), late
    assert (late["ks_pvalue"] > 1e-3).all()
    # loo's law is the closed form the library computes independently of the CLI
    loo = chi2.predict(None, chi2.Config(), chi2.make_env(chi2.Config()), "loo")
    np.testing.assert_allclose(rows[0]["weights"], loo.weights, rtol=1e-9)
    assert (out / "chi2_qq.png").stat().st_size > 10_000
    assert (out / "chi2_ecdf.png").stat().st_size > 10_000
    assert len(pd.read_parquet(out / "results.parquet")) == 4


# ------------------------------------------------------------------------- the lab protocol
SMALL = ["--estimator", "loo,grpo", "--seeds", "32", "--n", "5,10", "--mc-groups", "16384"]


def _no_compute(monkeypatch):
    monkeypatch.setattr(chi2, "prepare", lambda *a, **k: pytest.fail("computed"))
    monkeypatch.setattr(chi2, "simulate", lambda *a, **k: pytest.fail("computed"))


def test_bad_out_is_one_line_before_any_computation(tmp_path, capsys, monkeypatch):
    _no_compute(monkeypatch)
    out = tmp_path / "file"
    out.write_text("")
    assert main(["chi2", *SMALL, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpolab chi2: error: out: ")


def test_quick_keeps_typed_flags_end_to_end(tmp_path):
    out = tmp_path / "q"
    (out / "mine.toml").parent.mkdir()
    (out / "mine.toml").write_text('lab = "chi2"\n[chi2]\nseeds = 8\n[quick]\nn = [50, 100]\n')
    argv = [
        "chi2",
        "--quick",
        "--config",
        str(out / "mine.toml"),
        "--estimator",
        "loo",
        "--n",
        "20,40",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    df = pd.read_parquet(out / "results.parquet")
    assert df["n_seeds"].eq(chi2.Config.QUICK["seeds"]).all()  # untyped: quick beats the file
    assert df["n"].tolist() == [20, 40]  # typed beats the file's [quick]
    samples = pd.read_parquet(out / "samples.parquet")
    assert len(samples) == chi2.Config.QUICK["seeds"] * 2
    table = configs.split_file(out / "config.toml", "chi2")[1]
    assert table["n"] == [20, 40] and table["estimator"] == ["loo"]


def test_only_cells_whose_settings_changed_are_recomputed(tmp_path):
    cfg = chi2.Config(estimator=("loo", "grpo"), seeds=32, n=(5, 10), mc_groups=16384)
    store = Store(tmp_path)
    first = chi2.run(cfg, store=store)
    done = []
    progress = types.SimpleNamespace(skip=lambda n: None, update=lambda n, note: done.append(note))
    again = chi2.run(cfg.replace(chunk=7), store=store, progress=progress)  # key=False
    assert done == []
    pd.testing.assert_frame_equal(again["samples"], first["samples"])
    for change in ({"eps": 1e-6}, {"ddof": 0}, {"mc_groups": 8192}):  # only grpo reads them
        chi2.run(cfg.replace(**change), store=store, progress=progress)
        assert len(done) == 1 and done.pop().startswith("grpo")
    chi2.run(cfg.replace(beta=2.5), store=store, progress=progress)  # both read beta
    assert len(done) == 2
    df = first["results"]
    assert df.loc[df["estimator"] == "loo", ["eps", "ddof", "mc_groups"]].isna().all().all()
    assert df.loc[df["estimator"] == "grpo", "mc_groups"].eq(16384).all()


def test_figures_redraw_from_saved_tables_only(tmp_path, monkeypatch):
    out = tmp_path / "c"
    assert main(["chi2", *SMALL, "--out", str(out)]) == 0
    for png in ("chi2_qq.png", "chi2_ecdf.png"):
        (out / png).unlink()
    _no_compute(monkeypatch)
    monkeypatch.setattr(theory, "WeightedChi2", lambda *a: pytest.fail("law recomputed"))
    paths = running.draw(chi2, out)
    assert sorted(p.name for p in paths) == ["chi2_ecdf.png", "chi2_qq.png"]
    assert all(p.stat().st_size > 10_000 for p in paths)
    # the saved law gives the predicted quantiles and CDF the figures draw
    monkeypatch.undo()
    tables = output.read_tables(out, chi2.TABLES)
    w = tables["results"].query("estimator == 'loo'")["weights"].iloc[0]
    law = theory.WeightedChi2(w)
    p = np.array([0.01, 0.25, 0.5, 0.9, 0.995, 0.9999])
    np.testing.assert_allclose(plots.ppf(tables, "loo", p), law.ppf(p), rtol=2e-3)
    x = law.ppf(np.linspace(0.05, 0.95, 7))
    np.testing.assert_allclose(plots.cdf(tables, "loo", x), law.cdf(x), atol=1e-4)
    s = tables["samples"]
    assert len(s) == 2 * 2 * 32 and set(s["seed"]) == set(range(32))


def test_grpo_only_settings_without_grpo_are_an_error(tmp_path, capsys):
    argv = ["chi2", "--estimator", "loo,oracle", "--eps", "1e-6", "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "gpolab chi2: error: --eps: not used with estimator = loo,oracle; it applies only when "
        "estimator includes grpo"
    ]
    assert not (tmp_path / "o").exists()


def test_env_seed_is_gone_and_instance_seed_keeps_the_stored_keys():
    """--env-seed (removed; CHANGELOG) is one error naming it; --instance-seed, the name every
    other lab uses, keeps the stored keys (written under env_seed); the column is instance_seed."""
    with pytest.raises(configs.ConfigError, match="^env_seed: unknown field; allowed: "):
        configs.resolve(chi2.Config, typed={"env_seed": 2})
    cfg = configs.resolve(chi2.Config, typed={"instance_seed": 2})
    assert cfg.instance_seed == 2
    assert chi2.cell_keys(cfg) != chi2.cell_keys(chi2.Config())
    assert "instance_seed" in chi2.row_settings(cfg, "loo")
