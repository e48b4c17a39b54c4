"""gpolab.labs.tree.plots and the sweep's tree heatmap, drawn from a tree table built from the exact
theory (hand-made: the Monte Carlo columns set to their closed forms, no engine run)."""

from __future__ import annotations

import pandas as pd

from gpolab.labs.sweep import plots as sweep_plots
from gpolab.labs.tree import lab, plots


def exact_tables(cfg: lab.Config) -> dict:
    """The tree lab's tables with each Monte Carlo column at its exact value."""
    params, _, law, _ = lab.setup(cfg)
    rows = []
    for K, M in cfg.splits():
        th = lab._theory(cfg, params, law, K, M)
        rows.append(
            {
                "K": K,
                "M": M,
                "variance": th["theory_variance"],
                "variance_se": 1e-3,
                "mse": th["theory_mse"],
                "mse_group": th["theory_mse"],
                "corr": th["theory_corr"],
                "corr_se": 1e-3,
                "degenerate_frac": th["theory_degenerate_frac"],
                **th,
                **lab.settings(cfg),
                "n_seeds": cfg.seeds,
            }
        )
    df = lab.with_score(cfg, pd.DataFrame(rows))
    return {"results": df, "floor": lab.floor_table(cfg, df, law)}


def test_grid_figures_are_drawn(draw_all):
    tables = exact_tables(lab.Config(K=(2, 4), M=(1, 2), seeds=64))
    figures = {**lab.figures(tables), "mse_heatmap.png": sweep_plots.tree_heatmap_figure}
    names = ["tree_floor.png", "tree_variance_vs_M.png", "tree_lab_heatmap.png", "mse_heatmap.png"]
    assert draw_all(figures, tables) == names


def test_budget_figure_is_drawn(draw_all):
    tables = exact_tables(lab.Config(leaves=8, seeds=64))
    assert draw_all(lab.figures(tables), tables) == ["tree_budget.png"]
    assert draw_all({"b.png": plots.budget}, tables) == ["b.png"]


def test_the_heatmap_names_its_dashed_lines(monkeypatch, tmp_path):
    """The equal-budget lines are dashed on the heatmap; a legend says what they are (issue 55:
    the tree lab's heatmap, titled by its data, left them unexplained)."""
    drawn = []
    monkeypatch.setattr(sweep_plots, "save", lambda fig, path: drawn.append(fig) or path)
    tables = exact_tables(lab.Config(K=(2, 4), M=(1, 2, 4), seeds=64))
    plots.heatmap(tables, tmp_path / "h.png")
    (fig,) = drawn
    texts = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    sweep_plots.pyplot().close(fig)
    assert texts == ["white dashed: equal leaf budget K·M = 2, 8"]  # log2 K·M from 1 to 4
