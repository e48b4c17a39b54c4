"""The token-baseline lab (``gpolab otb``): its config's refusals, the kernel on a tiny instance,
and the OT-N4 statistic on synthetic match tables."""

import math

import jax
import numpy as np
import pandas as pd
import pytest

from gpolab import validate
from gpolab.labs.claims import stats_otb
from gpolab.labs.otb import lab


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
