"""Two measurements of the mismatch lab that sampling from μ alone gets wrong (issue 55): the
mean of a sequence-level weight whose tail μ's draws cannot see (taken from draws of π with the
bounded weight ω·μ/π, checked against exact enumeration), and the large batch of entries whose
mean update depends on the batch (verl's rejection under token-mean: measured, not extrapolated).
"""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from gpolab.envs import markov
from gpolab.estimators import mismatch as corrections
from gpolab.kernels import rollout_mismatch as kernel
from gpolab.labs.mismatch import decision

PARAMS = markov.make(markov.Instance(prompts=3, vocab=3, length=5, instance_seed=4))
THETA = markov.init_theta(PARAMS)


def _measure(params, theta, kind, size, name, *, B=8, G=4, seeds=4096, splits=8, **kw):
    """One correction at (θ, mismatch) through the kernel's argument objects."""
    cell = kernel.Cell(name, B, G, tuple(sorted((kw.pop("options", None) or {}).items())))
    at = kernel.point(params, theta, kind, size)
    return kernel.measure(at, cell, kernel.Draws(seeds, splits), kw.pop("key", None))


def exact_mean(name, options, kind, size):
    """E ĝ under μ by enumerating all A^T responses of every prompt (ĝ = (1/(BG)) Σ A ω s with
    leave-one-out A: E = mean_x [E_μ(r ω s | x) − V_μ(x) E_μ(ω s | x)])."""
    P, A, T = PARAMS.num_prompts, PARAMS.vocab, PARAMS.T
    mu = markov.behaviour_logits(PARAMS, THETA, kind, size)
    ys = jnp.asarray(list(itertools.product(range(A), repeat=T)), jnp.int32)  # (A^T, T)
    prompts = jnp.arange(P)
    ys_all = jnp.broadcast_to(ys, (P,) + ys.shape)
    logp = markov.table_logp(PARAMS, markov.table(PARAMS, THETA), prompts, ys_all)
    logp_mu = markov.table_logp(PARAMS, mu, prompts, ys_all)
    r = (jnp.sum(ys_all == 0, -1) >= PARAMS.k[:, None]).astype(logp.dtype)
    p_mu = jnp.exp(jnp.sum(logp_mu, -1))
    v_mu = jnp.sum(p_mu * r, -1, keepdims=True)
    omega = corrections.correction(
        name, jnp.ones_like(r), logp, logp_mu, jnp.ones_like(logp), **options
    ).coef[..., 0]
    c = p_mu * omega * (r - v_mu) / P
    mean = markov.token_gradient(
        PARAMS, THETA, prompts, ys_all, jnp.broadcast_to(c[..., None], ys_all.shape)
    )
    g = markov.exact(PARAMS, THETA).g
    e = np.asarray(mean - g, np.float64)
    g = np.asarray(g, np.float64)
    return float(e @ e), 1.0 + float(e @ g / (g @ g))


@pytest.mark.parametrize(
    "name,options",
    [("verl/seq_tis", {"is_threshold": 1e9}), ("verl/seq_tis", {}), ("trl/sequence_mask", {})],
)
def test_the_mean_from_pi_equals_exact_enumeration(monkeypatch, name, options):
    """Forced onto the π sampler (every row unresolved), bias² and scale equal enumeration within
    4 SE; the μ sampler (resolved at this small T) agrees as well."""
    bias, scale = exact_mean(name, options, "noise", 0.6)
    kw = dict(seeds=4096, key=jax.random.key(7), options=options)
    mu_row = _measure(PARAMS, THETA, "noise", 0.6, name, **kw)
    assert mu_row["resolved"] == "yes"
    monkeypatch.setattr(kernel, "RESOLVE", 0.0)
    pi_row = _measure(PARAMS, THETA, "noise", 0.6, name, **kw)
    assert pi_row["resolved"].startswith("mean from pi")
    assert all(math.isnan(pi_row[k]) for k in ("variance", "mse", "rel_mse", "mse_se"))
    for row in (mu_row, pi_row):
        assert abs(row["bias_sq"] - bias) <= 4 * row["bias_sq_se"] + 1e-7, (row["bias_sq"], bias)
        assert abs(row["scale"] - scale) <= 4 * row["scale_se"] + 1e-6, (row["scale"], scale)
    assert abs(scale - 1.0) > 0.02 or options  # the clamp and the cap bias the mean: not 1


def test_an_unbounded_weight_beyond_the_draws_is_unresolved_and_a_bounded_one_is_not():
    n = 4096 * 32
    assert kernel.resolution("verl/seq_tis", {"is_threshold": 1e9}, 1e40, n)
    assert kernel.resolution("verl/seq_tis", {"is_threshold": 1e9}, 0.5, n) == ""
    assert kernel.resolution("verl/seq_tis", {}, 1e40, n) == ""  # capped at 2
    assert kernel.resolution("verl/token_tis", {}, 1e40, n) == ""  # token level: not concerned
    assert kernel.resolution("verl/rs_seq_mean_k3", {}, 1e40, n) == ""


@pytest.mark.slow
def test_untruncated_sequence_is_at_t256_is_not_reported_as_collapsed():
    """The collapse experiment's untruncated row at noise:0.4 (KL_seq 12.6): μ's draws gave scale
    0.028 ± 0.008 with a tight SE; π's draws see the weight's tail (the issue's independent value
    0.848 ± 0.005), and the row withholds its variance."""
    params = markov.make(markov.Instance(length=256))
    theta = markov.init_theta(params)
    r = _measure(
        params,
        theta,
        "noise",
        0.4,
        "verl/seq_tis",
        seeds=512,
        options={"is_threshold": 1e9},
        key=jax.random.key(3),
    )
    assert r["resolved"].startswith("mean from pi") and math.isnan(r["mse"])
    assert abs(r["scale"] - 0.848) <= 4 * math.hypot(r["scale_se"], 0.005)


def test_batch_dependent_entries_are_the_rejections_under_token_mean():
    dep = {n for n in corrections.REGISTRY if corrections.batch_dependent(n)}
    assert dep == {n for n, e in corrections.REGISTRY.items() if "reject" in e.kind}
    assert "verl/rs_seq_mean_k3" in dep and "verl/seq_tis" not in dep and "none" not in dep


def _row(name, large_from, mse_large=math.nan):
    return dict(
        correction=name,
        B=8,
        bias_sq=0.01,
        bias_sq_se=0.001,
        variance=1.0,
        variance_se=0.1,
        g_sq=1.0,
        large_from=large_from,
        mse_large=mse_large,
        mse_large_se=0.004,
    )


def test_the_large_batch_uses_the_measurement_where_the_mean_depends_on_the_batch():
    rows = pd.DataFrame([_row("none", "exact"), _row("verl/rs_seq_mean_k3", "measured", 0.473)])
    big = decision.at_batch(rows, decision.LARGE_B)
    assert big["mse"].iloc[0] == pytest.approx(0.01 + 8 / 512)  # exact: fixed denominator
    assert big["mse"].iloc[1] == 0.473 and big["mse_se"].iloc[1] == 0.004
    with pytest.raises(ValueError):
        decision.at_batch(rows, 256)


@pytest.mark.slow
def test_a_rejection_entrys_mean_moves_with_the_batch():
    """verl/rs_seq_mean_k3 at T = 64, noise:0.2 (80% of tokens rejected): the MSE measured at 512
    prompts is not the extrapolation bias²(8) + variance(8)·8/512 (0.051 against 0.068 when
    written), while with no correction the two agree (the control: a fixed denominator)."""
    params = markov.make(markov.Instance(length=64))
    theta = markov.init_theta(params)
    out = {}
    for name in ("verl/rs_seq_mean_k3", "none"):
        for B, seeds in ((8, 1024), (512, 64)):
            out[name, B] = _measure(
                params, theta, "noise", 0.2, name, B=B, seeds=seeds, key=jax.random.key(11)
            )

    def gap(name):  # (measured − extrapolated, its SE)
        small, large = out[name, 8], out[name, 512]
        pred = small["bias_sq"] + small["variance"] * 8 / 512
        se = math.hypot(large["mse_se"], small["bias_sq_se"], small["variance_se"] * 8 / 512)
        return large["mse"] - pred, se

    moved, se = gap("verl/rs_seq_mean_k3")
    assert abs(moved) > 5 * se, (moved, se)
    same, se = gap("none")
    assert abs(same) <= 4 * se, (same, se)


def test_a_withheld_mse_never_leads_and_has_no_rank():
    """An unresolved row (its MSE withheld, NaN) is never the least MSE, at either batch, and
    TRL's default in that state has no MSE rank (it was ranked first when NaN compared false)."""
    from tests.labs.test_mismatch import _row, _table

    rows = [
        _row("trl/sequence_mask", math.nan, 0.8),
        _row("verl/token_tis", 3.0, 0.99),
        _row("none", 4.0, 0.7, bias_sq=0.2),
    ]
    dec = decision.decision(_table(rows)).iloc[0]
    assert dec["least_mse"] == "verl/token_tis" and dec["least_mse_large"] == "verl/token_tis"
    assert math.isnan(dec["trl_mse_rank"]) and dec["verl_mse_rank"] == 2
