"""Loss aggregation (verl loss_agg_mode / TRL loss_type) and bandit response lengths."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpolab import estimators, validate
from gpolab.envs import bandit
from gpolab.kernels.grouped import BanditCell, bandit_error
from gpolab.labs.sweep import lab as sweep
from gpolab.theory import aggregation

MODES = estimators.LOSS_AGG_MODES
COVERED = ("vanilla", "oracle", "loo", "mean", "grpo")


def test_weights_hand_example():
    # lengths 2, 4 | 1, 3: N = 4 responses, 10 tokens, longest 4
    L = jnp.array([[2.0, 4.0], [1.0, 3.0]])
    w = {m: np.asarray(estimators.loss_weights(m, L)) for m in MODES}
    np.testing.assert_allclose(w["token-mean"], np.full((2, 2), 1 / 10))
    np.testing.assert_allclose(w["token-sum"], np.ones((2, 2)))
    np.testing.assert_allclose(estimators.relative_weights("token-sum", L), np.full((2, 2), 4))
    np.testing.assert_allclose(w["seq-mean-token-sum"], np.full((2, 2), 1 / 4))
    np.testing.assert_allclose(w["seq-mean-token-mean"], [[1 / 8, 1 / 16], [1 / 4, 1 / 12]])
    np.testing.assert_allclose(w["seq-mean-token-sum-norm"], np.full((2, 2), 1 / 16))  # 1/(4·4)
    const = estimators.loss_weights("seq-mean-token-sum-norm", L, norm_length=10)
    np.testing.assert_allclose(const, np.full((2, 2), 1 / 40))  # 1/(N·L_norm) = 1/(4·10)
    rel = estimators.relative_weights("seq-mean-token-mean", L)  # N c_i = 1/L_i
    np.testing.assert_allclose(rel, [[1 / 2, 1 / 4], [1, 1 / 3]], rtol=1e-6)


def test_modes_proportional_when_lengths_equal():
    L = jnp.full((3, 2), 5.0)  # N = 6, every response 5 tokens
    base = np.asarray(estimators.loss_weights("seq-mean-token-sum", L))
    factor = {"token-mean": 1 / 5, "token-sum": 6, "seq-mean-token-mean": 1 / 5}
    factor["seq-mean-token-sum-norm"] = 1 / 8
    for mode, k in factor.items():
        w = estimators.loss_weights(mode, L, norm_length=8)
        np.testing.assert_allclose(np.asarray(w), k * base, rtol=1e-6)


def _trl_loss(loss_type, per_token_loss, mask, max_completion_length):
    """TRL GRPOTrainer._compute_loss's reduction of the per-token loss, one process, one
    gradient-accumulation step, steps_per_generation 1 (the branches of trl/trainer/
    grpo_trainer.py at f2cd5771 and in the 1.16.0 release; dapo's num_items_in_batch is the
    generation batch's token count)."""
    x = per_token_loss * mask
    if loss_type == "grpo":
        return (x.sum(-1) / np.maximum(mask.sum(-1), 1.0)).mean()
    if loss_type == "bnpo":
        return x.sum() / max(mask.sum(), 1.0)
    if loss_type == "dr_grpo":
        return x.sum() / (per_token_loss.shape[0] * max_completion_length)
    if loss_type == "dapo":
        return x.sum() / max(mask.sum(), 1.0)  # num_items_in_batch / num_processes
    raise ValueError(loss_type)


def test_trl_mapping_and_bad_mode():
    """Each TRL loss_type's reduction, differentiated per token, gives the weights c_i of the mode
    TRL_LOSS_TYPES maps it to: d loss / d per_token_loss[i, t] = c_i on every token of response i
    (the loss is linear in the per-token loss), 0 on padding."""
    lengths = np.array([2.0, 5.0, 1.0, 3.0, 4.0, 4.0])  # N = 6 responses (rows of TRL's batch)
    T = 8  # max_completion_length: the padded width and dr_grpo's constant
    mask = (np.arange(T) < lengths[:, None]).astype(float)
    assert set(estimators.TRL_LOSS_TYPES) == {"grpo", "bnpo", "dapo", "dr_grpo"}
    for loss_type, mode in estimators.TRL_LOSS_TYPES.items():
        grad = np.zeros((len(lengths), T))
        for i, t in np.ndindex(mask.shape):  # padding included: its gradient must be 0
            e = np.zeros_like(mask)
            e[i, t] = 1.0
            grad[i, t] = _trl_loss(loss_type, e, mask, T)
        norm = T if mode == "seq-mean-token-sum-norm" else None
        c = np.asarray(estimators.loss_weights(mode, jnp.asarray(lengths), norm_length=norm))
        np.testing.assert_allclose(grad, c[:, None] * mask, rtol=1e-6, err_msg=loss_type)
    # the four closed forms, N = 6, Σ L = 19, L_norm = 8
    want = {
        "grpo": 1 / (6 * lengths),
        "bnpo": np.full(6, 1 / 19),
        "dapo": np.full(6, 1 / 19),
        "dr_grpo": np.full(6, 1 / 48),
    }
    for loss_type, mode in estimators.TRL_LOSS_TYPES.items():
        norm = T if mode == "seq-mean-token-sum-norm" else None
        got = estimators.loss_weights(mode, jnp.asarray(lengths), norm_length=norm)
        np.testing.assert_allclose(np.asarray(got), want[loss_type], rtol=1e-6)
    msg = (
        "mode: got 'sum'; allowed: token-mean, token-sum, seq-mean-token-sum, "
        "seq-mean-token-mean, seq-mean-token-sum-norm"
    )
    for fn in (estimators.loss_weights, estimators.relative_weights):
        with pytest.raises(validate.ConfigError) as err:
            fn("sum", jnp.ones((2, 2)))
        assert str(err.value) == msg


def test_length_models():
    params = bandit.make(
        0, prompts=3, actions=5, lengths="longer-when-wrong", length_min=10, length_max=110
    )
    p = np.asarray(params.success)
    np.testing.assert_array_equal(np.asarray(params.lengths), np.round(10 + 100 * (1 - p)))
    right = bandit.make(
        0, prompts=3, actions=5, lengths="longer-when-right", length_min=10, length_max=110
    )
    np.testing.assert_array_equal(np.asarray(right.lengths), np.round(10 + 100 * p))
    ind = np.asarray(bandit.make(0, prompts=30, actions=50, lengths="independent").lengths)
    assert ind.min() >= 50 and ind.max() <= 1000 and np.all(ind == np.round(ind))
    one = bandit.make(0, prompts=3, actions=5)
    np.testing.assert_array_equal(np.asarray(one.lengths), np.ones((3, 5)))
    np.testing.assert_array_equal(np.asarray(one.theta), np.asarray(params.theta))  # same draws
    with pytest.raises(validate.ConfigError, match="length_max"):
        bandit.make(0, lengths="independent", length_min=10, length_max=5)


def _tiny(lengths=(3.0, 7.0)):
    """One prompt, 2 actions with lengths 3 and 7 (a hand-made table)."""
    params = bandit.make(1, prompts=1, actions=2, success_a=1.0, success_b=1.0)
    return params.replace(lengths=jnp.asarray([lengths]))


@pytest.mark.parametrize("G", [2, 3])
@pytest.mark.parametrize("mode", aggregation.CLOSED)
def test_closed_form_matches_enumeration(x64, mode, G):
    params = _tiny()
    truth = bandit.exact(params)
    n = params.num_prompts * G  # token-sum's factor: the batch's responses
    h = aggregation.action_factors(mode, bandit.lengths_of(params), 10.0, n)
    for spec in COVERED:
        ef = aggregation.terms(spec, G, truth)
        closed = aggregation.expected_gradient(params, h, *ef)
        enum = aggregation.enumerate_expected(params, spec, G, mode, norm_length=10.0)
        np.testing.assert_allclose(closed, enum, rtol=1e-10, atol=1e-12, err_msg=spec)


def _monte_carlo(params, spec, G, mode, n=40_000, norm_length=10.0):
    """Mean and SE of ĝ_x (P, d) from the sweep's own cell (B = 0: one group per prompt)."""
    truth = bandit.exact(params)
    cell = BanditCell((spec,), G, loss_agg=mode, norm_length=norm_length)
    eps, tables = jnp.asarray(1e-4, jnp.float32), bandit.outcome_tables(params)
    keys = jax.random.split(jax.random.key(7), n)
    err = jax.jit(
        jax.vmap(lambda k: bandit_error(cell, k, (params, truth, tables, eps))[spec]["err"])
    )(keys)
    root_f = np.sqrt(np.asarray(truth.prompt_probs))[:, None]
    err = np.asarray(err, np.float64).reshape(n, *truth.g_local.shape) / root_f
    mean = err.mean(0) + np.asarray(truth.g_local)
    return mean, err.std(0, ddof=1) / np.sqrt(n)


@pytest.mark.slow
@pytest.mark.parametrize("G", [2, 3])
def test_token_mean_enumeration_vs_monte_carlo(G):
    params = _tiny()
    for spec in ("loo", "grpo"):
        exact = aggregation.enumerate_expected(params, spec, G, "token-mean")
        mean, se = _monte_carlo(params, spec, G, "token-mean")
        assert np.all(np.abs(mean - exact) < 4 * se + 1e-7), (spec, mean, exact, se)


@pytest.mark.slow
@pytest.mark.parametrize("mode", aggregation.CLOSED)
def test_closed_form_vs_monte_carlo(mode):
    params = bandit.make(
        3, prompts=3, actions=4, lengths="longer-when-wrong", length_min=2, length_max=20
    )
    truth, G = bandit.exact(params), 4
    h = aggregation.action_factors(mode, bandit.lengths_of(params), 10.0, params.num_prompts * G)
    for spec in ("oracle", "loo", "mean", "grpo"):
        exact = aggregation.expected_gradient(params, h, *aggregation.terms(spec, G, truth))
        mean, se = _monte_carlo(params, spec, G, mode, n=20_000)
        z = np.abs(mean - exact) / np.maximum(se, 1e-9)
        assert z.max() < 4.5, (spec, mode, z.max())


def test_token_mean_has_no_closed_form():
    params = _tiny()
    bias, how = aggregation.bias_sq(params, bandit.exact(params), "loo", 2, "token-mean")
    assert np.isnan(bias) and how.startswith("none")


def test_default_rows_unchanged():
    # pinned from the sweep before lengths and loss aggregation existed (commit 604f50f), re-pinned
    # when the engine packed its per-seed outputs before reducing them (float32 sums in another
    # order: 3 of these 6 numbers moved by <= 1e-7 relative, as float32 rounding does); re-pinned
    # when the bandit's responses came to be drawn by the alias method (same law, other draws).
    # The same draws on another jax/XLA (the second-Python job) sum float32 in another order:
    # compared to 1e-6 relative, far below what other draws move (several percent).
    cfg = sweep.Config(
        seeds=300, G=(4,), estimators=("loo", "grpo", "verl/opo"), prompts=4, actions=6
    )
    df = sweep.run_sweep(cfg)
    want_mse = [0.04090121269226074, 0.08401868184407552, 0.024087390899658202]
    assert df["mse"].tolist() == pytest.approx(want_mse, rel=1e-6)
    want_cos = [0.4489544677734375, 0.4524100748697917, 0.4552916971842448]
    assert df["cos"].tolist() == pytest.approx(want_cos, rel=1e-6)
    assert (df["loss_agg"] == "seq-mean-token-sum").all() and (df["lengths"] == "one").all()
    # a length model changes no reward-only number under the default mode (same draws)
    other = sweep.run_sweep(cfg.replace(lengths="independent", estimators=("loo", "grpo")))
    assert other["mse"].tolist() == df["mse"].tolist()[:2]


def test_sweep_modes_rows():
    cfg = sweep.Config(
        seeds=200,
        G=(4,),
        estimators=("loo", "verl/opo"),
        prompts=4,
        actions=6,
        loss_agg=MODES,
        lengths="longer-when-wrong",
    )
    df = sweep.run_sweep(cfg)
    assert len(df) == 2 * len(MODES) and set(df["loss_agg"]) == set(MODES)
    loo = df[df["estimator"] == "loo"].set_index("loss_agg")
    assert np.isfinite(loo.loc[list(aggregation.CLOSED), "theory_bias_sq"]).all()
    assert np.isnan(loo.loc["token-mean", "theory_bias_sq"])
    assert np.isfinite(df["mse"]).all() and np.isfinite(df["scaled_mse"]).all()
    # common random numbers: at lengths 50..1000 seq-mean-token-mean shrinks ĝ ~100x
    assert (
        loo.loc["seq-mean-token-mean", "best_scale"]
        > 10 * loo.loc["seq-mean-token-sum", "best_scale"]
    )


def test_sweep_validates_lengths():
    with pytest.raises(validate.ConfigError, match="lengths"):
        sweep.Config(lengths="generated").validate()
    with pytest.raises(validate.ConfigError, match="loss_agg"):
        sweep.Config(loss_agg=("sum",)).validate()
    sweep.Config(env="arithmetic", lengths="generated").validate()


@pytest.mark.slow
def test_arithmetic_loss_agg_with_generated_lengths():
    """On the arithmetic surrogate every mode runs with generated lengths (verl/opo reads them):
    finite rows, the default mode keeps its exact theory, token-mean shrinks the estimate
    (~1/L̄: a step size, so its MSE drops toward ‖g‖²)."""
    cfg = sweep.Config(
        env="arithmetic",
        estimators=("loo", "verl/opo"),
        G=(4,),
        seeds=32,
        policy=("instruct",),
        loss_agg=("seq-mean-token-sum", "token-mean", "seq-mean-token-mean"),
        lengths="generated",
        out="unused",
    )
    df = sweep.run(cfg)["results"]
    assert set(df["loss_agg"]) == set(cfg.loss_agg) and (df["lengths"] == "generated").all()
    assert np.isfinite(df["mse"]).all() and np.isfinite(df["cos"]).all()
    default = df[df["loss_agg"] == "seq-mean-token-sum"].set_index("estimator")
    assert np.isfinite(default.loc["loo", "theory_mse"])
    shrunk = df[df["loss_agg"] == "token-mean"].set_index("estimator")
    assert (shrunk["mse"] < default["mse"]).all()  # ~1/L̄ smaller estimate: a step size
