"""gpolab.labs.chi2.plots, curvature, zoo, groupsize, stdnorm and plan: every figure a lab lists
(``figures(tables)``) drawn from the saved tables of its tiniest run, and the figures no tiny
run reaches (groupsize's training figure, plancheck's) from hand-made tables with the columns
they read."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpolab.labs.chi2 import lab as chi2
from gpolab.labs.curvature import lab as curvature
from gpolab.labs.groupsize import lab as groupsize
from gpolab.labs.groupsize import plots as groupsize_plots
from gpolab.labs.plan import lab as plan
from gpolab.labs.plan import plots as plan_plots
from gpolab.labs.stdnorm import lab as stdnorm
from gpolab.labs.zoo import lab as zoo

RUNS = {
    "chi2": (
        chi2,
        dict(estimator=("loo",), seeds=16, n=(10,), chunk=16),
        ["chi2_qq.png", "chi2_ecdf.png"],
    ),
    "curvature": (curvature, dict(thetas=4, prompts=4, block=2), ["curvature.png"]),
    "zoo": (
        zoo,
        dict(
            env=("bandit",),
            estimators=("loo", "grpo"),
            G=(2,),
            seeds=100,
            kappa_G=(4,),
            kappa_points=3,
        ),
        ["zoo.png", "kappa.png"],
    ),
    "groupsize": (groupsize, dict(N=(8,), seeds=200), ["groupsize_mse.png"]),
    "stdnorm": (
        stdnorm,
        dict(
            regimes=("admissible",),
            adm_steps=3,
            adm_seeds=2,
            gain_G=(2,),
            G=(2,),
            rho=(0.0,),
            control=False,
            bias_seeds=4,
            prompts=2,
        ),
        ["train_curves.png", "train_gain.png", "train_phases.png"],
    ),
}


@pytest.mark.parametrize("name", RUNS)
def test_figures_of_a_tiny_run(name, draw_all):
    lab, settings, names = RUNS[name]
    tables = lab.run(lab.Config(**settings))
    assert draw_all(lab.figures(tables), tables) == names


def test_plan_figure_from_a_small_log(tmp_path, draw_all):
    rng = np.random.default_rng(0)
    p = rng.beta(1.0, 1.5, 12)
    rows = [
        {"step": s, "prompt": f"q{x}", "reward": float(rng.random() < p[x])}
        for s in range(4)
        for x in range(12)
        for _ in range(4)
    ]
    pd.DataFrame(rows).to_csv(tmp_path / "log.csv", index=False)
    cfg = plan.Config(
        log=str(tmp_path / "log.csv"),
        format="table",
        window=2,
        G=(2, 4),
        draws=10,
        estimators=("loo", "grpo"),
    )
    tables = plan.run(cfg)
    assert draw_all(plan.figures(tables), tables) == ["plan.png"]


def test_groupsize_train_figure_from_a_hand_made_table(draw_all):
    rows = [
        {
            "env": "bandit",
            "N": N,
            "schedule": schedule,
            "G": G,
            "eta0": 0.5,
            "tau": 10.0,
            "gap": 0.1 + 0.01 * G,
            "gap_ci_low": 0.09 + 0.01 * G,
            "gap_ci_high": 0.11 + 0.01 * G,
            "steps": 20,
            "n_seeds": 8,
            "gap0": 0.4,
        }
        for N in (16, 32)
        for schedule in ("constant", "decay")
        for G in (2, 4, 8)
    ]
    summary = pd.DataFrame([{"env": "bandit", "g_star_exact": 3.2, "g_star_paper": 4.0}])
    tables = {"results": pd.DataFrame(rows), "summary": summary}
    figures = {"groupsize_train.png": groupsize_plots.train_figure}
    assert draw_all(figures, tables) == ["groupsize_train.png"]


def test_plancheck_figure_from_a_hand_made_table(draw_all):
    G = np.array([2, 4, 8, 16])
    truth = 0.5**G
    rows = [
        {
            "format": "table",
            "env": "bandit",
            "quantity": "degenerate fraction",
            "G": g,
            "truth": t,
            "recovered": 1.1 * t,
            "lo": 0.9 * t,
            "hi": 1.3 * t,
        }
        for g, t in zip(G, truth, strict=True)
    ]
    rows += [
        {
            "format": "table",
            "env": "bandit",
            "quantity": "logged degenerate fraction",
            "G": 4,
            "truth": 0.06,
            "recovered": 0.07,
            "lo": 0.05,
            "hi": 0.09,
        },
        {
            "format": "table",
            "env": "bandit",
            "quantity": "G*",
            "G": np.nan,
            "truth": 6.0,
            "recovered": 5.5,
            "lo": 4.0,
            "hi": 7.5,
        },
    ]
    tables = {"results": pd.DataFrame(rows)}
    figures = {"plancheck.png": plan_plots.plancheck_figure}
    assert draw_all(figures, tables) == ["plancheck.png"]
