"""A finite prompt pool (gpolab's derivation, gpolab/theory/groupsize.py): the finite-population
correction by enumeration, the pool law's minimiser, the average over iid pools, bad input, and
the lab's Monte Carlo against the closed form."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpolab import engine, validate
from gpolab.envs import bandit
from gpolab.labs.groupsize import lab as groupsize
from gpolab.labs.groupsize import pool as groupsize_pool
from gpolab.labs.groupsize import runs
from gpolab.theory import groupsize as theory


@pytest.fixture(scope="module")
def small():
    """A 4-prompt, 8-action tabular bandit and its exact truth."""
    params = bandit.make(3, prompts=4, actions=8)
    return params, bandit.exact(params)


def test_subset_mean_variance_is_the_finite_population_correction():
    """Every B-subset of P vectors, enumerated: E‖mean − ḡ‖² = c1·(P − B)/(B·(P − 1))."""
    rng = np.random.default_rng(0)
    P = 7
    g = rng.normal(size=(P, 3))
    c1 = float(np.mean(np.sum((g - g.mean(0)) ** 2, -1)))
    for B in range(1, P + 1):
        errs = [
            np.sum((g[list(s)].mean(0) - g.mean(0)) ** 2)
            for s in itertools.combinations(range(P), B)
        ]
        c = theory.Constants(c1=c1, C2=0.0, C3=0.0)
        # pool_mse with no response noise (C2 = C3 = 0) is the prompt term alone; G = N/B
        assert float(np.mean(errs)) == pytest.approx(theory.pool_mse(c, B * 4, 4, P), rel=1e-12)


def test_pool_minimiser_does_not_depend_on_n_and_feasibility_is_the_only_coupling():
    rng = np.random.default_rng(1)
    Ns = (64, 256, 1024, 4096)
    for _ in range(100):
        c = theory.Constants(*np.exp(rng.uniform(-4, 2, 3)))
        P = int(rng.integers(2, 300))
        g = theory.g_star_pool(c, P)
        slope = theory.pool_mse(c, 1024, g + 1e-4, P) - theory.pool_mse(c, 1024, g - 1e-4, P)
        assert slope / 2e-4 == pytest.approx(0, abs=1e-8)  # stationary
        for N in Ns:
            feasible = theory.pool_divisors(N, P)
            assert all(N // G <= P for G in feasible)
            best = theory.pool_best_divisor(c, N, P)
            assert best == min(feasible, key=lambda G: theory.pool_mse(c, N, G, P))
            # the same best divisor as the N-free law c1·P/(P − 1)·G + C3/(G − 1) over the
            # feasible divisors: N enters only through G ≥ N/P
            scaled = theory.Constants(c.c1 * P / (P - 1), c.C2, c.C3)
            assert best == min(feasible, key=lambda G: theory.fixed_n_mse(scaled, N, G))


def test_pool_law_tends_to_the_infinite_pool_law():
    c = theory.Constants(c1=0.3, C2=2.0, C3=7.5)
    assert theory.g_star_pool(c, 10**9) == pytest.approx(c.g_star_exact, rel=1e-8)
    for G in (2, 4, 8):
        assert theory.pool_mse(c, 64, G, 10**9) == pytest.approx(
            theory.fixed_n_mse(c, 64, G), rel=1e-6
        )
    assert theory.g_star_pool(c, 1) == math.inf
    assert theory.pool_mse(c, 8, 8, 1) == pytest.approx((c.C2 + c.C3 / 7) / 8)  # B = 1 = P


def test_averaged_over_iid_pools_the_population_target_mse_is_the_infinite_pool_mse(small):
    """Every ordered pool of P = 3 draws from the 4 prompts, weighted by its probability: the
    mean of pool_mse + ‖ḡ_pool − g‖² is [c1·G + C2 + C3/(G − 1)]/N exactly (B ≤ P)."""
    params, truth = small
    c = theory.constants(truth)
    g = np.asarray(truth.g, np.float64)
    f = np.asarray(params.prompt_probs, np.float64)
    P, N = 3, 12
    total = {G: 0.0 for G in theory.pool_divisors(N, P)}
    for pool in itertools.product(range(4), repeat=P):
        sub_truth = bandit.exact(groupsize_pool.restrict(bandit.ENV, params, jnp.asarray(pool)))
        pc = theory.constants(sub_truth)
        bias = float(np.sum((np.asarray(sub_truth.g, np.float64) - g) ** 2))
        prob = float(np.prod(f[list(pool)]))
        for G in total:
            total[G] += prob * (theory.pool_mse(pc, N, G, P) + bias)
    for G, value in total.items():
        assert value == pytest.approx(theory.fixed_n_mse(c, N, G), rel=1e-5)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: theory.check_pool(64, 8, G=4), "G"),  # B = 16 > 8
        (lambda: theory.check_pool(64, 0), "pool"),
        (lambda: theory.check_pool(64, 8, G=3), "G"),  # not a divisor
        (lambda: groupsize.Config(pool=-1).validate(), "pool"),
    ],
)
def test_bad_pool_input_names_the_field(call, field):
    with pytest.raises(validate.ConfigError, match=rf"^{field}: "):
        call()


def test_check_pool_lists_the_feasible_group_sizes():
    with pytest.raises(validate.ConfigError, match=r"allowed: .*\(8, 16, 32, 64\)"):
        theory.check_pool(64, 8, G=4)
    theory.check_pool(64, 8, G=8)  # B = 8 = P: the whole pool every step


@pytest.mark.slow
def test_monte_carlo_pool_mse_matches_the_closed_form_for_both_targets(small):
    """The lab's sampler (B distinct pool items per step) against pool_mse (pool target) and
    pool_mse + ‖ḡ_pool − g‖² (population target), tolerance 4 SE, every feasible G."""
    params, truth = small
    theta = params.theta.reshape(-1)
    P, N = 6, 12
    ps = groupsize_pool.make_pool_setup(bandit.ENV, params, theta, truth.g, P, 5)
    cell = runs.FixedCell(bandit.ENV, N)
    for G in theory.pool_divisors(N, P):
        args = (params, theta, truth.g, jnp.int32(G), (ps.pool, ps.g))
        m = engine.run(runs.fixed_error, cell, args, jax.random.key(G), 20_000, 4096)
        pool = engine.error_stats(m, "err_pool", "sq_pool")
        exact = theory.pool_mse(ps.constants, N, G, P)
        assert abs(pool.mse - exact) < 4 * pool.mse_se
        population = engine.error_stats(m)
        assert abs(population.mse - exact - ps.bias_sq) < 4 * population.mse_se
