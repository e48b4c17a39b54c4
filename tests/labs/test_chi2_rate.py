"""The χ² lab over several group sizes (``--G 4,8,16``) and on paired draws (``--paired``): the
cells and their store keys, bad input, the tables' G column and the rate figure."""

import numpy as np
import pytest

from gpolab.kit import output, running
from gpolab.labs.chi2 import lab as chi2
from gpolab.runner.cli import main
from gpolab.validate import ConfigError

SMALL = dict(estimator=("loo", "oracle"), seeds=64, n=(20, 50))


def test_one_G_keeps_its_keys_and_several_G_add_cells():
    """A cell's key is its estimator and its own G: the G = 8 cells of a multi-G grid are the
    default run's cells (stored once), and an int G is the one-entry grid."""
    assert chi2.Config(G=8) == chi2.Config(G=(8,)) == chi2.Config()
    single = chi2.cell_keys(chi2.Config())
    grid = chi2.Config(G=(4, 8, 16))
    keys = chi2.cell_keys(grid)
    assert len(keys) == len(set(keys)) == 3 * len(chi2.DEFAULT) == chi2.cells(grid)
    assert chi2.cell_list(grid)[:3] == [("vanilla", 4), ("vanilla", 8), ("vanilla", 16)]
    assert keys[1::3] == single
    paired = chi2.cell_keys(grid.replace(paired=True))
    assert not set(paired) & set(keys)  # other draws, other cells
    assert chi2.row_settings(grid, "loo", 16)["G"] == 16


@pytest.mark.parametrize(
    "G, message",
    [
        ((1, 4), "^G: got 1; allowed"),
        ((8, 8), r"^G: got \[8, 8\]; allowed: distinct group sizes"),
        ((), "^G: got an empty list"),
    ],
)
def test_bad_group_sizes_are_one_config_error(G, message):
    with pytest.raises(ConfigError, match=message):
        chi2.Config(G=G).validate()


def test_cli_repeated_G_is_one_line(capsys, tmp_path):
    assert main(["chi2", "--G", "4,4", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpolab chi2: error: G: got '4,4', which lists 4")
    assert not (tmp_path / "o").exists()


def test_paired_grid_tables_and_rate_figure(tmp_path):
    """Paired: loo and the oracle draw the same noise per seed, so their n·Δ are strongly
    correlated across seeds (0.87 or more at G ≥ 4 in the full runs), unlike separate streams;
    a cell does not depend on the other G of its grid; the tables carry G; the rate figure is
    drawn from them."""
    out = tmp_path / "rate"
    assert (
        main(
            [
                "chi2",
                "--estimator",
                "loo,oracle",
                "--G",
                "4,16",
                "--paired",
                "--seeds",
                "64",
                "--n",
                "20,50",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    t = output.read_tables(out, chi2.TABLES)
    assert len(t["samples"]) == 2 * 2 * 2 * 64 and set(t["samples"]["G"]) == {4, 16}
    assert set(zip(t["law"]["estimator"], t["law"]["G"], strict=True)) == {
        (e, G) for e in ("loo", "oracle") for G in (4, 16)
    }
    assert t["results"]["paired"].all() and len(t["results"]) == 8

    def draws(tables, e, G):
        s = tables["samples"]
        sel = (s["estimator"] == e) & (s["G"] == G) & (s["n"] == 50)
        return s[sel].sort_values("seed")["scaled_gap"].to_numpy()

    for G in (4, 16):
        assert np.corrcoef(draws(t, "loo", G), draws(t, "oracle", G))[0, 1] > 0.6
    alone = chi2.run(chi2.Config(**SMALL, G=16, paired=True))
    np.testing.assert_array_equal(draws(alone, "loo", 16), draws(t, "loo", 16))
    apart = chi2.run(chi2.Config(**SMALL, G=4))
    assert abs(np.corrcoef(draws(apart, "loo", 4), draws(apart, "oracle", 4))[0, 1]) < 0.5
    paths = running.draw(chi2, out, into=tmp_path / "fig", names={"chi2_rate.png": "r.png"})
    assert paths[0].stat().st_size > 10_000
    assert "chi2_rate.png" not in chi2.figures(apart)  # one G: no rate figure
