"""The mismatch figure (gpolab.labs.mismatch.plots) from a hand-made table with the columns it
reads: its title fits the figure however few panels it has, and a value ≤ 0 on a log panel is
drawn (a symlog axis) and said, never dropped (issue 55)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpolab.labs.mismatch import plots


def _table(bias_sq: float) -> pd.DataFrame:
    """Two corrections at T = 16, 64 under one mismatch (the narrowest figure: one column);
    ``bias_sq`` the first row's bias² estimate (unbiased, so it may be below 0)."""
    rows = []
    for i, (name, level) in enumerate((("none", "token"), ("verl/seq_tis", "sequence"))):
        for T in (16, 64):
            rows.append(
                dict(
                    env="markov", correction=name, level=level, yours=False, mismatch="noise:0.2",
                    T=T, mismatch_kl_seq=0.1 * T, B=8, G=4, n_seeds=4096, g_sq=2.0,
                    rel_mse=1.5 + i, rel_mse_se=0.1, cos=0.9, cos_se=0.01, scale=0.9,
                    scale_se=0.01, truncated_share=0.1 * i, bias_sq=0.2, bias_sq_se=0.1,
                    variance=2.0, variance_se=0.1,
                )
            )  # fmt: skip
    df = pd.DataFrame(rows)
    df.loc[0, "bias_sq"] = bias_sq
    return df


@pytest.fixture
def figure(monkeypatch, tmp_path):
    """Draw the mismatch figure of a table; returns the matplotlib figure (rendered)."""
    drawn = []
    monkeypatch.setattr(plots, "save", lambda fig, path: drawn.append(fig) or path)

    def draw(df):
        plots.mismatch_figure({"results": df}, tmp_path / "m.png")
        fig = drawn.pop()
        fig.canvas.draw()
        return fig

    yield draw
    plots.pyplot().close("all")


def test_the_title_fits_a_one_column_figure(figure):
    fig = figure(_table(0.2))
    box = fig._suptitle.get_window_extent()
    assert box.x0 >= 0 and box.x1 <= fig.bbox.x1, (box, fig.bbox)  # was 1.5 times as wide


def test_a_negative_extrapolated_mse_is_drawn_and_said_not_dropped(figure):
    """bias² = −0.1 + variance 2·8/512: an MSE of −0.069 at 512 prompts (÷ ‖g‖² = 2: −0.034),
    which a log axis dropped without a word."""
    fig = figure(_table(-0.1))
    large = fig.axes[1]  # the 512-prompt panel
    assert large.get_yscale() == "symlog"
    notes = [t.get_text() for t in large.texts]
    assert notes and notes[0].startswith("1 value ≤ 0: symlog axis")
    low, high = large.get_ylim()
    drawn = np.concatenate([bars.lines[0].get_ydata() for bars in large.containers])
    assert drawn.min() == pytest.approx((-0.1 + 2.0 * 8 / 512) / 2.0) and low <= drawn.min()
    assert fig.axes[0].get_yscale() == "log"  # nothing ≤ 0 there: log as before
    assert figure(_table(0.2)).axes[1].get_yscale() == "log"


def test_a_withheld_mse_is_said_not_dropped_silently(figure):
    """An unresolved row (its variance and MSE withheld, NaN) draws no point on the MSE panels;
    each panel says how many it withholds."""
    df = _table(0.2)
    df.loc[3, ["rel_mse", "rel_mse_se", "variance", "variance_se"]] = np.nan
    fig = figure(df)
    for ax in fig.axes[:2]:
        assert any("1 withheld" in t.get_text() for t in ax.texts), [t.get_text() for t in ax.texts]
    assert not any("withheld" in t.get_text() for t in figure(_table(0.2)).axes[0].texts)
