"""The shaped-reward lab and its kernel (gpolab/kernels/shaped.py): verl's filter_groups on a hand
case, acc and score identical at λ = 0, the phantom update of an all-fail group, bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpolab import configs, validate
from gpolab.envs import bandit, shaped
from gpolab.kernels import shaped as kernel
from gpolab.labs.shaped import lab

SMALL = dict(prompts=3, actions=5, instance_seed=2)


def test_hand_case_all_fail_group_kept_by_score_dropped_by_acc():
    """Group 0: all wrong, shaping 0.1, 0.2, 0.1, 0.3 (score std > 0); group 1: mixed; group 2:
    all wrong, equal shaping (score std 0); group 3: all right.  B = 4: no cap binds."""
    correct = jnp.array([[0, 0, 0, 0], [1, 0, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1]], jnp.float32)
    s = jnp.array([[0.1, 0.2, 0.1, 0.3], [0.5, 0.5, 0.2, 0.1], [0.4] * 4, [0.2, 0.1, 0.1, 0.1]])
    score = shaped.score(correct, s, 0.3)
    keep_acc, capped_acc = kernel.keep_groups(kernel.metric_values("acc", correct, score), 4)
    keep_score, _ = kernel.keep_groups(kernel.metric_values("score", correct, score), 4)
    assert keep_acc.tolist() == [False, True, False, False] and bool(capped_acc)
    assert keep_score.tolist() == [True, True, False, True]
    # λ = 0: the score is the correctness, both metrics keep the same groups
    zero = shaped.score(correct, s, 0.0)
    same = [
        kernel.keep_groups(kernel.metric_values(m, correct, zero), 4)[0] for m in ("acc", "score")
    ]
    assert same[0].tolist() == same[1].tolist() == [False, True, False, False]


def test_verl_keeps_the_first_B_in_draw_order():
    values = jnp.array([[0, 1], [1, 1], [1, 0], [0, 1], [0, 0]], jnp.float32)
    keep, capped = kernel.keep_groups(values, 2)
    assert keep.tolist() == [True, False, True, False, False] and not bool(capped)


def test_the_phantom_update_of_an_all_fail_group():
    """An all-fail group kept under score: GRPO on the shaped score gives each response
    (s_g − s̄)/(std(s) + eps) (λ cancels up to eps), a full-size update toward its highest-shaping
    action; dropped under acc it gives none."""
    params = shaped.make(shaping="independent", shaping_weight=0.01, **SMALL)
    theta = bandit.init_theta(params.bandit)
    prompts, actions = jnp.array([1], jnp.int32), jnp.array([[0, 1, 2, 3]], jnp.int32)
    correct = jnp.zeros((1, 4))
    s = params.shaping[prompts[:, None], actions]
    score = shaped.score(correct, s, params.lam)
    keep = kernel.keep_groups(kernel.metric_values("score", correct, score), 1)[0]
    g, _ = kernel.kept_update(params, theta, prompts, actions, score, keep, 0.0)
    adv = (s - s.mean()) / jnp.std(s, ddof=1)
    want = bandit.gradient(params.bandit, theta, prompts, actions, adv / 4)
    np.testing.assert_allclose(g, want, rtol=2e-4, atol=1e-6)
    assert float(jnp.linalg.norm(g)) > 0.1  # not shrunk by λ = 0.01
    drop = kernel.keep_groups(kernel.metric_values("acc", correct, score), 1)[0]
    g_acc, _ = kernel.kept_update(params, theta, prompts, actions, score, drop, 0.0)
    assert float(jnp.abs(g_acc).max()) == 0.0


def test_at_lambda_zero_both_metrics_are_identical():
    params = shaped.make(shaping="wrong", shaping_weight=0.0, **SMALL)
    truth = shaped.exact(params, bandit.init_theta(params.bandit))
    cell = kernel.ShapedCell(G=4, B=3, max_draws=2)
    for i in range(5):
        out = kernel.shaped_error(cell, jax.random.key(i), (params, truth, 1e-6))
        for name in ("cos_acc", "sq_acc", "kept", "allfail", "allfail_share"):
            assert float(out[f"acc/{name}"]) == float(out[f"score/{name}"]), name
    runs = [
        kernel.train_run(cell, m, jax.random.key(7), params, 1.0, 5, 1e-6) for m in ("acc", "score")
    ]
    np.testing.assert_array_equal(runs[0]["J_acc"], runs[1]["J_acc"])


def test_the_lab_measures_the_phantom_and_its_control():
    cfg = configs.resolve(
        lab.Config,
        typed=dict(
            shaping_weight=(0.0, 0.5), seeds=400, train_seeds=8, steps=20, every=10, **SMALL
        ),
    )
    tables = lab.run(cfg)
    g = tables["gradient"].set_index(["shaping_weight", "metric"])
    t = tables["training"].set_index(["shaping_weight", "metric", "step"])
    assert g.loc[(0.0, "acc"), "cos_acc"] == g.loc[(0.0, "score"), "cos_acc"]
    assert t.loc[(0.0, "acc", 20), "J_acc"] == t.loc[(0.0, "score", 20), "J_acc"]
    assert g.loc[(0.5, "acc"), "allfail_share"] == 0.0
    phantom = g.loc[(0.5, "score")]
    assert phantom["allfail_share"] > 5 * phantom["allfail_share_se"]
    assert "lambda metric" in lab.report(cfg, tables)


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(shaping_weight=(0.0, 1.5)), "shaping_weight: got 1.5"),
        (dict(metrics=("acc", "seq_score")), "metric: got 'seq_score'; allowed: acc, score"),
        (dict(shaping="length"), "shaping: got 'length'"),
        (dict(G=1), "G: got 1"),
    ],
)
def test_bad_input_is_one_error_line_before_any_computation(settings, message, monkeypatch):
    monkeypatch.setattr(lab, "gradient_rows", lambda *a: pytest.fail("computed"))
    with pytest.raises(validate.ConfigError, match=message):  # resolving validates
        configs.resolve(lab.Config, typed=settings)
    with pytest.raises(validate.ConfigError, match=message):  # so does run, first
        lab.run(lab.Config(**settings))


def test_the_kernel_refuses_an_unknown_metric():
    with pytest.raises(validate.ConfigError, match="metric: got 'reward'"):
        kernel.metric_values("reward", jnp.zeros((1, 2)), jnp.zeros((1, 2)))
    with pytest.raises(validate.ConfigError, match="metric: got 'reward'"):
        kernel.ShapedCell(G=4, B=2, metrics=("reward",)).validate()
