"""The training hooks' files and `gpolab plan` on a run's output folder, without any framework:
the per-group gradient rows, the leave-one-out advantages, and plan reading a folder whose hook
measured only some groups (G* from those; the recommendation line first)."""

import json

import numpy as np
import pandas as pd
import pytest

from gpolab.estimators import loo_advantages
from gpolab.integrations import files
from gpolab.labs.plan import lab as plan
from gpolab.runner.cli import main


def test_loo_advantages_and_batch_rows():
    z = np.array([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    A = np.asarray(loo_advantages(z))  # what the TRL callback weights the scores with
    np.testing.assert_allclose(A[0], [2 / 3, -2 / 3, -2 / 3, 2 / 3])
    np.testing.assert_allclose(A[1], 0.0)
    h = np.arange(12, dtype=float).reshape(4, 3)
    rows = files.batch_norms(h, [1, 2, 4])
    assert [B for B, _ in rows] == [1, 1, 1, 1, 2, 2, 4]  # disjoint runs of B groups
    assert rows[4][1] == pytest.approx(np.linalg.norm(h[:2].mean(0)))
    assert rows[-1][1] == pytest.approx(np.linalg.norm(h.mean(0)))
    assert files.batch_norms(h[:1], [1, 2]) == [(1, pytest.approx(np.linalg.norm(h[0])))]


def _hooked_run(root, steps=30, groups=8, G=4, measured=3, seed=0):
    """A run folder as a hook writes it: every group's rewards, the proxy on ``measured`` groups
    per step (NaN elsewhere), gradient norms at B = 1, 2 and the trainer's settings."""
    rng = np.random.default_rng(seed)
    w = files.Writer(
        root,
        {
            "loss_type": "dapo",
            "scale_rewards": "group",
            "num_generations": G,
            "beta": 0.0,
            "trl_version": "test",
        },
    )
    p = rng.beta(1.0, 1.5, groups)
    for s in range(1, steps + 1):
        z = (rng.random((groups, G)) < p[:, None]).astype(float)
        q = np.full((groups, G), np.nan)
        q[:measured] = rng.gamma(2.0, size=(measured, G))
        w.add_groups(s, [f"q{x}" for x in range(groups)], z, q)
        w.add_norms(s, [(1, 1.0 + rng.random()), (1, 1.1), (2, 0.8 + 0.1 * rng.random())])
    w.seconds.update(hook=1.0, train=20.0)
    w.flush()
    return root


def test_plan_reads_a_hooked_run_folder_and_says_what_the_trainer_followed(tmp_path, capsys):
    run = _hooked_run(tmp_path / "run")
    found = files.find(run)
    assert found["log"].name == files.ROLLOUTS and found["norms"] is not None
    assert json.loads((run / files.FOLDER / files.RUN).read_text())["overhead"] == 0.05
    cfg, trainer = plan.with_callback_files(plan.Config(log=str(run)))
    assert (cfg.format, cfg.proxy_column, cfg.grad_norms) == ("table", "proxy", str(found["norms"]))
    assert trainer["loss_type"] == "dapo"
    assert main(["plan", str(run), "--out", str(tmp_path / "out"), "--quick"]) == 0
    text = (tmp_path / "out" / "report.md").read_text()
    lines = text.splitlines()
    assert "trainer: TRL test (loss_type = dapo" in text
    head = lines[lines.index("## Recommendation") + 1]
    assert head.startswith(("use G = ", "the log cannot decide G*"))
    s = pd.read_parquet(tmp_path / "out" / "summary.parquet").iloc[-1]
    assert s["gstar_proxy_groups"] == 30 * 3  # only the groups whose every response has a proxy


def test_a_folder_without_hook_files_is_read_as_before(tmp_path):
    cfg = plan.Config(log=str(tmp_path))
    assert plan.with_callback_files(cfg) == (cfg, {})
    assert files.find(tmp_path) is None


def test_verl_logger_on_a_verl_dump_gives_what_plan_reads_from_the_dump(tmp_path):
    """A verl rollout dump (``{step}.jsonl`` as verl's ``_dump_generations`` writes it) fed row by
    row through ``PlanLogger.log_generations`` (uids as verl's GRPO groups them): the same groups
    and rewards as ``gpolab plan`` reads from the dump itself, and the same pooled fit."""
    import json as js

    from gpolab.integrations import rollouts
    from gpolab.integrations.rollouts import write_verl
    from gpolab.integrations.verl import PlanLogger
    from gpolab.validate import ConfigError

    rng = np.random.default_rng(1)
    p = rng.beta(1.0, 1.5, 6)
    rows = [
        {
            "step": s,
            "prompt": f"q{x}",
            "output": "o",
            "gts": "g",
            "score": float(rng.random() < p[x]),
        }
        for s in (1, 2, 3)
        for x in range(6)
        for _ in range(4)
    ]
    dump = tmp_path / "dump"
    write_verl(dump, pd.DataFrame(rows))
    logger = PlanLogger(tmp_path / "run", {"adv_estimator": "grpo"})
    for f in sorted(dump.glob("*.jsonl")):
        recs = [js.loads(line) for line in f.read_text().splitlines()]
        uids = [f"{r['step']}-{r['input']}" for r in recs]
        logger.log_generations(
            recs[0]["step"], [r["input"] for r in recs], [r["score"] for r in recs], uids=uids
        )
    logger.log_group_gradients(3, rng.normal(size=(6, 5)))
    logger.flush()
    a = rollouts.read(dump).frame
    b = rollouts.read(tmp_path / "run" / "gpolab" / "rollouts.parquet").frame
    key = ["step", "prompt"]
    pd.testing.assert_series_equal(a.groupby(key)["reward"].sum(), b.groupby(key)["reward"].sum())
    assert a["group"].nunique() == b["group"].nunique() == 18
    out = {}
    for name, log in (("dump", dump), ("hook", tmp_path / "run")):
        report = tmp_path / f"plan-{name}"  # not the dump's own folder (issue 55: refused)
        assert main(["plan", str(log), "--out", str(report), "--quick"]) == 0
        out[name] = pd.read_parquet(report / "summary.parquet").iloc[-1]
    for col in ("a", "b", "mean_p", "groups"):
        assert out["dump"][col] == pytest.approx(out["hook"][col], rel=1e-9)
    text = (tmp_path / "plan-hook" / "report.md").read_text()
    assert "trainer: verl (adv_estimator = grpo)" in text
    with pytest.raises(ConfigError, match="^log_generations: got 2 inputs, 1 scores"):
        logger.log_generations(4, ["a", "b"], [1.0])


def test_run_json_says_whether_the_files_decide_gstar_yet(tmp_path):
    """At every flush run.json carries ``decision``: plan's loo G* on the files so far (the
    same point estimate), or how many measured groups would decide it; one line says which."""
    run = _hooked_run(tmp_path / "run", steps=30, measured=8)
    d = json.loads((run / files.FOLDER / files.RUN).read_text())["decision"]
    assert d["groups_measured"] == 30 * 8
    s = plan.pooled(plan.run(plan.with_callback_files(plan.Config(log=str(run)))[0]))
    assert d["decided"] == (s["gstar"] is not None)
    assert d["c1"] == pytest.approx(s["gstar_c1"])
    line = files.decision_text(d)
    assert line.startswith("gpolab: ") and "\n" not in line
    undecided = {"decided": False, "groups_measured": 100, "c1": 0.5, "c1_se": 0.5}
    undecided |= {"groups_needed": 385, "more_steps": 50}
    assert "about 385 would decide it: ~50 more steps" in files.decision_text(undecided)
    assert "Meanwhile" not in files.decision_text(undecided)
    safe = files.decision_text({**undecided, "safe_G": 6, "safe_regret": 0.1})
    assert safe.endswith(
        "Meanwhile use G = 6: for loo it costs at most 10% more gradient noise "
        "than the best G at this run's responses per step, whatever the constants "
        "are within their joint 95% region"
    )
    # the hook's run and plan both give a safe G on the grid, with a bound (their bootstraps
    # differ in size, so not always the same G)
    from gpolab.theory.gstar import GRID

    assert d["safe_G"] in GRID and s["safe_G"] in GRID
    assert d["safe_regret"] >= 0 and s["safe_regret"] >= 0
    decided = {"decided": True, "gstar": 4.2, "gstar_lo": 3.8, "gstar_hi": 5.0}
    assert "G* = 4.2 (95% 3.8 .. 5)" in files.decision_text({**decided, "groups_measured": 9})


def test_run_json_is_written_whole_when_the_writer_is_killed(tmp_path, monkeypatch):
    """issue 55: the hook wrote run.json in place, so a trainer killed mid-write left it cut
    off.  Now a temporary name renamed into place: a write stopped half way (here: the text
    half written, then an interrupt) leaves the previous whole file and no temporary one."""
    run = _hooked_run(tmp_path / "run", steps=2)
    path = run / files.FOLDER / files.RUN
    before = path.read_text()
    w = files.Writer(run, {"loss_type": "grpo"})
    real = type(path).write_text

    def killed(self, text, *args, **kwargs):
        real(self, text[: len(text) // 2])
        raise KeyboardInterrupt

    monkeypatch.setattr(type(path), "write_text", killed)
    with pytest.raises(KeyboardInterrupt):
        w.write_run()
    monkeypatch.undo()
    assert path.read_text() == before and json.loads(before)["loss_type"] == "dapo"
    assert sorted(p.name for p in path.parent.iterdir()) == [files.NORMS, files.ROLLOUTS, files.RUN]


@pytest.mark.parametrize(
    "text, words",
    [
        ('{"loss_type": "dapo", "num_gen', "is not valid JSON (Unterminated string"),
        ("", "is not valid JSON (Expecting value"),
        (b"\xff\xfe{", "is not valid JSON (not UTF-8 text"),
        ("[1, 2]", "holds a JSON list; allowed: one JSON object"),
    ],
)
def test_plan_on_a_cut_off_run_json_is_one_line(tmp_path, capsys, text, words):
    """issue 55: a run.json cut off (as a killed trainer left it) ended plan in a
    JSONDecodeError traceback; now one line naming the file, and nothing written."""
    run = _hooked_run(tmp_path / "run", steps=2)
    path = run / files.FOLDER / files.RUN
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert main(["plan", str(run), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and words in err[0], err
    assert not (tmp_path / "out").exists()
