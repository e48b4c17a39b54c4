"""The curvature lab: the protocol (typed flags beat --quick, output checked first, the stored
unit reused only for the same settings) and the fitted constants against the closed bounds."""

import pandas as pd
import pytest

from gpolab import configs
from gpolab.kit.store import Store
from gpolab.labs.curvature import lab as curvature
from gpolab.runner.cli import main


def test_quick_keeps_a_typed_thetas_and_fits_respect_the_bounds(tmp_path, capsys):
    out = tmp_path / "o"
    assert (
        main(["curvature", "--quick", "--thetas", "70", "--prompts", "3", "--out", str(out)]) == 0
    )
    assert "tightest C" in capsys.readouterr().out
    _, table, _ = configs.split_file(out / "config.toml", "curvature")
    assert table["thetas"] == 70 and table["prompts"] == 3  # quick is 60 thetas
    points = pd.read_parquet(out / "curvature.parquet")
    assert len(points) == 70 * 3 and points.theta.nunique() == 70
    fits = pd.read_parquet(out / "fits.parquet").set_index("quantity")
    assert fits.holds.all() and (fits.max_ratio <= fits.bound_const).all()
    assert set(fits.thetas) == {70} and (out / "curvature.png").stat().st_size > 1000


def test_bad_out_is_one_line_before_any_computation(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(curvature, "measure", lambda *a, **k: pytest.fail("computed"))
    out = tmp_path / "file"
    out.write_text("")
    assert main(["curvature", "--quick", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpolab curvature: error: out: ")


def test_stored_points_are_reused_for_the_same_settings_only(tmp_path, monkeypatch):
    cfg = configs.resolve(curvature.Config, typed=dict(thetas=5, prompts=2, out=str(tmp_path)))
    first = curvature.run(cfg, store=Store(tmp_path))
    real = curvature.measure
    monkeypatch.setattr(curvature, "measure", lambda *a, **k: pytest.fail("computed"))
    again = curvature.run(cfg, store=Store(tmp_path))
    pd.testing.assert_frame_equal(again["curvature"], first["curvature"])
    pd.testing.assert_frame_equal(again["fits"], first["fits"])
    calls = []
    monkeypatch.setattr(curvature, "measure", lambda *a, **k: calls.append(1) or real(*a, **k))
    curvature.run(cfg.replace(rho=0.1), store=Store(tmp_path))
    assert calls == [1]
