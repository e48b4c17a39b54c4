"""gpolab.labs.sweep.plots, lengths and dynamic: the sweep's figures from its saved tables (a tiny
dynamic-sampling run; the loss-aggregation table hand-made with the columns the figure reads)."""

from __future__ import annotations

import pandas as pd

from gpolab.labs.sweep import lab as sweep
from gpolab.labs.sweep import plots_dynamic as dynamic
from gpolab.labs.sweep import plots_lengths as lengths


def test_mse_vs_G_and_dynamic_figures_from_a_tiny_run(draw_all):
    cfg = sweep.Config(estimators=("loo",), G=(4,), B=2, seeds=100, dynamic_sampling=True)
    tables = {"results": sweep.run_sweep(cfg)}
    assert dynamic.has_dynamic(tables["results"])
    assert draw_all(sweep.figures(tables), tables) == ["mse_vs_G.png", "dynamic.png"]


def test_loss_agg_figure_from_a_hand_made_table(draw_all):
    rows = [
        {
            "env": "bandit",
            "lengths": "independent",
            "prompts": 4,
            "actions": 6,
            "n_seeds": 100,
            "loss_agg": mode,
            "estimator": name,
            "G": G,
            "bias_sq": 0.1 / G,
            "mse": 1.0 / G,
            "scaled_mse": 0.5 / G,
            "cos": 1 - 1 / G,
            "theory_bias_sq": 0.1 / G,
        }
        for mode in ("token-mean", "seq-mean-token-sum")
        for name in ("loo", "grpo")
        for G in (2, 4, 8)
    ]
    tables = {"results": pd.DataFrame(rows)}
    assert draw_all({"loss_agg.png": lengths.loss_agg_figure}, tables) == ["loss_agg.png"]
