"""Figures drawn from saved result tables only (plotting never recomputes anything).

One module per lab; every module uses :func:`pyplot` (the one matplotlib setup: Agg, no screen)
and :func:`save` (atomic: a reader never sees half a PNG).  A figure function has the signature
``draw(tables, path) -> Path`` with ``tables`` the lab's saved tables by name, and takes its
title from the data (the seeds actually run), never from a config default.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from gpolab.kit.output import atomic


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path) -> Path:
    plt = pyplot()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic(path) as tmp:
        fig.savefig(tmp, dpi=130, format="png")
    plt.close(fig)
    return path


def seeds_label(df) -> str:
    """ "20,000 seeds" from the table's ``n_seeds`` column (a range when cells differ)."""
    n = sorted({int(v) for v in df["n_seeds"]})
    return f"{n[0]:,} seeds" if len(n) == 1 else f"{n[0]:,}–{n[-1]:,} seeds"


def suptitle(fig, text: str) -> None:
    """``text`` as the figure's title, wrapped to the figure's width (a character of the 12 pt
    title is about 7 pt wide on average; 7.6 leaves a margin)."""
    fig.suptitle(textwrap.fill(text, int(fig.get_figwidth() * 72 / 7.6)))
