"""The token-baseline lab (``gpolab otb``): its config's refusals, the kernel on a tiny instance,
and the OT-N4 statistic on synthetic match tables."""

import math

import jax
import numpy as np
import pandas as pd
import pytest

from gpolab import validate
from gpolab.labs.claims import stats_otb
from gpolab.labs.otb import lab, training


@pytest.mark.parametrize(
    "kw, needle",
    [
        (dict(small=1), "small: got 1"),
        (dict(large=0.5), "large"),
        (dict(reference="nope/grpo"), "nope/grpo"),
        (dict(estimators=("verl/grpo", "verl/otb[zero_tail=true]")), "not understood"),
        (dict(estimators=("verl/grpo", "verl/otb[handle_zero_tail=maybe]")), "true, false"),
        (dict(estimators=("verl/otb", "trl/top_entropy[top_entropy_quantile=2]")), "quantile"),
        (dict(G=(1, 4, 32)), "G"),
        (dict(policy=("expert",)), "policy"),
        (dict(seeds=4), "seeds"),
    ],
)
def test_bad_settings_are_one_clear_error(kw, needle):
    with pytest.raises(validate.ConfigError, match=needle):
        lab.Config(**kw).validate()


def test_kernel_rows_on_a_tiny_instance():
    """Every estimator gives a finite row; RLOO's mean direction is the exact one (cos > 0) and
    OTB's shrinkage toward the group mean makes its raw MSE no larger than RLOO's at G = 4."""
    specs = ("verl/grpo", "loo", "verl/otb", "trl/grpo", "trl/top_entropy")
    cfg = lab.Config(
        policy=("instruct",),
        estimators=specs,
        G=(4,),
        small=4,
        large=4,
        seeds=16,
        questions=20,
        truth_samples=8,
    )
    df = lab.results(cfg, jax.random.key(0))
    assert set(df["estimator"]) == set(cfg.estimators)
    for col in ("mse", "rel_scaled_mse", "cos", "mse_se"):
        assert np.isfinite(df[col]).all(), col
    assert (df["rel_scaled_mse"].between(0, 1)).all()
    by = df.set_index("estimator")
    assert by.loc["verl/otb", "mse"] <= by.loc["loo", "mse"] * 1.05
    # rho = 1 (TRL's default) keeps every token: trl/top_entropy is trl/grpo on the same draws
    np.testing.assert_allclose(by.loc["trl/top_entropy", "mse"], by.loc["trl/grpo", "mse"], 1e-5)


def test_match_table_needs_its_four_cells():
    cfg = lab.Config(G=(4, 8))
    df = pd.DataFrame(
        [dict(policy="instruct", G=G, estimator=e) for G in (4, 8) for e in cfg.estimators]
    )
    assert lab.match_table(cfg, df).empty


def _match(otb, otb_se, ref, ref_se):
    return pd.DataFrame(
        dict(
            policy=["a", "b"],
            small=4,
            large=32,
            reference="verl/grpo",
            otb_small_vs_ref_large=otb,
            otb_small_vs_ref_large_se=otb_se,
            ref_small_vs_ref_large=ref,
            ref_small_vs_ref_large_se=ref_se,
            otb_vs_ref_small=[0.5, 0.6],
            otb_vs_ref_small_se=0.01,
            otb_vs_ref_large=[0.5, 0.6],
            otb_vs_ref_large_se=0.01,
        )
    )


def test_statistic_takes_otbs_best_policy_and_its_se():
    out = stats_otb.otb_group_size({"match": _match([1.05, 2.0], [0.02, 0.1], [3.0, 3.0], 0.1)})
    assert out["ratio_best"] == 1.05 and out["se"]["ratio_best"] == 0.02
    assert out["control_min"] == 3.0


def test_a_blind_control_makes_the_ratio_nan():
    """GRPO at 4 within 2 SE of 1.1 times GRPO at 32: the experiment cannot tell the sizes apart,
    so a ratio near 1 would mean nothing (NaN: inconclusive, never a pass)."""
    out = stats_otb.otb_group_size({"match": _match([1.0, 1.0], 0.01, [1.2, 3.0], 0.1)})
    assert math.isnan(out["ratio_best"])
    out = stats_otb.otb_group_size({"match": _match([np.nan, 1.0], 0.01, [3.0, 3.0], 0.1)})
    assert math.isnan(out["ratio_best"])


# ---- training at equal steps (tables train, train_match; claim OT-N4-train) ------------------


@pytest.mark.parametrize(
    "kw, needle",
    [
        (dict(train_steps=-1), "train_steps"),
        (dict(train_steps=5, train_runs=1), "train_runs"),
        (dict(train_steps=5, train_batch=0), "train_batch"),
        (dict(train_steps=5, lr=(0.01, 0.0)), "lr"),
        (dict(train_steps=5, lr=()), "lr"),
    ],
)
def test_bad_training_settings_are_one_clear_error(kw, needle):
    with pytest.raises(validate.ConfigError, match=needle):
        lab.Config(**kw).validate()


def test_training_options_leave_the_one_step_cells_stored():
    """The results' store keys do not read the training options (stored cells stay valid)."""
    a = lab.Config()
    b = lab.Config(train_steps=7, train_runs=3, train_batch=5, lr=(0.5,))
    assert lab.cell_keys(a) == lab.cell_keys(b)
    assert len(set(training.keys(b))) == len(training.units(b)) == 3 * 3  # policies x configs


def test_train_run_starts_at_the_exact_J_and_stands_still_at_lr_0():
    from gpolab.envs import arithmetic
    from gpolab.kernels import token_baseline as kernel

    cfg = lab.Config(policy=("instruct",), questions=20, truth_samples=8, filler=0)
    a = arithmetic.make(lab.instance(cfg))["instruct"]
    cell = kernel.TokenCell(("verl/otb",), 4, 3)
    eps = np.float32(1e-6)
    J0 = float(arithmetic.value(a, arithmetic.init_theta(a)))
    still = np.asarray(kernel.train_run(cell, jax.random.key(1), a, 0.0, 3, eps))
    assert still.shape == (4,)
    np.testing.assert_allclose(still, J0, rtol=1e-6)
    moved = np.asarray(kernel.train_run(cell, jax.random.key(1), a, 0.05, 3, eps))
    again = np.asarray(kernel.train_run(cell, jax.random.key(1), a, 0.05, 3, eps))
    np.testing.assert_array_equal(moved, again)  # one key, one run
    assert moved[0] == pytest.approx(J0, rel=1e-6) and np.all(np.isfinite(moved))
    assert not np.allclose(moved[1:], J0)


def _train_rows(gains: dict, se: float = 0.01) -> pd.DataFrame:
    """A train table: J_0 = 0.4 for every configuration, J_T = 0.4 + its gain."""
    rows = []
    for (spec, G), gain in gains.items():
        rows += [
            dict(policy="instruct", lr=0.01, estimator=spec, G=G, step=0, J=0.4, J_se=0.0),
            dict(policy="instruct", lr=0.01, estimator=spec, G=G, step=9, J=0.4 + gain, J_se=se),
        ]
    return pd.DataFrame(rows)


def test_train_match_gains_and_ratios_by_hand():
    cfg = lab.Config(train_steps=9)
    gains = {("verl/otb", 4): 0.1, ("verl/grpo", 4): 0.05, ("verl/grpo", 32): 0.2}
    m = training.match(cfg, _train_rows(gains)).iloc[0]
    assert m["steps"] == 9
    assert m["gain_otb_small"] == pytest.approx(0.1) and m["gain_ref_large"] == pytest.approx(0.2)
    assert m["ref_large_vs_otb_small"] == pytest.approx(2.0)
    assert m["ref_large_vs_otb_small_se"] == pytest.approx(2.0 * math.hypot(0.1, 0.05))
    assert m["ref_large_vs_ref_small"] == pytest.approx(4.0)
    out = stats_otb.otb_train({"train_match": training.match(cfg, _train_rows(gains))})
    assert out["ratio_best"] == pytest.approx(2.0)


def test_train_statistic_is_nan_when_the_sizes_are_not_separated_or_otb_does_not_learn():
    cfg = lab.Config(train_steps=9)
    blind = {("verl/otb", 4): 0.1, ("verl/grpo", 4): 0.19, ("verl/grpo", 32): 0.2}
    out = stats_otb.otb_train({"train_match": training.match(cfg, _train_rows(blind))})
    assert math.isnan(out["ratio_best"])
    stuck = {("verl/otb", 4): -0.01, ("verl/grpo", 4): 0.05, ("verl/grpo", 32): 0.2}
    m = training.match(cfg, _train_rows(stuck))
    assert math.isnan(m["ref_large_vs_otb_small"].iloc[0])  # a gain ≤ 0: no ratio, no pass
    assert math.isnan(stats_otb.otb_train({"train_match": m})["ratio_best"])
