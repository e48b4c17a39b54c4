"""gpolab.integrations.rollouts: TRL / verl / table rollout logs, read and written.

The writers are checked byte for byte against the trainers' own code paths, copied here from
huggingface/trl f2cd5771 (``GRPOTrainer.log``) and volcengine/verl b178a3cd
(``RayPPOTrainer._dump_generations``). Group statistics are checked against hand arithmetic.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict, deque

import numpy as np
import pandas as pd
import pytest

from gpolab.integrations import rollouts
from gpolab.validate import ConfigError

# 3 prompts x G=4 at step 1, 2 prompts x G=4 at step 2 (rewards chosen for hand statistics)
REWARDS = [1, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 1, 0, 1, 1, 1, 0, 0, 0, 0]
PROMPTS = ["a"] * 4 + ["b"] * 4 + ["c é"] * 4 + ["a"] * 4 + ["d"] * 4
STEPS = [1] * 12 + [2] * 8


def _frame() -> pd.DataFrame:
    n = len(REWARDS)
    return pd.DataFrame(
        {
            "step": STEPS,
            "prompt": PROMPTS,
            "completion": [f"answer {i}" for i in range(n)],
            "correct": np.asarray(REWARDS, dtype=float),
            "proxy": np.arange(n, dtype=float),
        }
    )


def _check_groups(log: rollouts.Log) -> None:
    g = rollouts.groups(log)
    assert g["group"].tolist() == [0, 1, 2, 3, 4]
    assert g["step"].tolist() == [1, 1, 1, 2, 2]
    assert g["prompt"].tolist() == ["a", "b", "c é", "a", "d"]
    assert g["n"].tolist() == [4] * 5
    assert g["successes"].tolist() == [2.0, 4.0, 1.0, 3.0, 0.0]
    assert np.allclose(g["mean"], [0.5, 1.0, 0.25, 0.75, 0.0])
    # ddof 0: sqrt(p (1 - p)) for a 0/1 group with success rate p
    assert np.allclose(g["std"], [0.5, 0.0, np.sqrt(0.1875), np.sqrt(0.1875), 0.0])
    assert g["degenerate"].tolist() == [False, True, False, False, True]
    assert np.allclose(g["proxy_mean"], [1.5, 5.5, 9.5, 13.5, 17.5])
    assert rollouts.binary_levels(log) == (0.0, 1.0)


def _check_frame(log: rollouts.Log) -> None:
    f = log.frame
    assert list(f.columns) == list(rollouts.FRAME_COLUMNS)
    assert f["step"].dtype == np.int64 and f["group"].dtype == np.int64
    assert f["reward"].dtype == np.float64 and f["length"].dtype == np.float64
    assert f["prompt"].map(type).eq(str).all()


# ---------------------------------------------------------------------------------------------
# writers: byte for byte what the trainers write


def test_write_trl_matches_grpo_trainer_log_bytes(tmp_path):
    frame = _frame().assign(advantage=np.linspace(-1, 1, len(REWARDS)))
    paths = rollouts.write_trl(
        tmp_path / "run", frame, reward_columns=("correct",), extra_columns=("proxy",)
    )
    assert [p.name for p in paths] == ["completions_00001.parquet", "completions_00002.parquet"]
    # TRL's own path: deques of maxlen generation_batch_size, then pd.DataFrame(table).to_parquet
    rows = frame[frame["step"] == 2]
    logs = {
        "prompt": deque(maxlen=8),
        "completion": deque(maxlen=8),
        "rewards": defaultdict(lambda: deque(maxlen=8)),
        "advantages": deque(maxlen=8),
        "extra": defaultdict(lambda: deque(maxlen=8)),
    }
    logs["prompt"].extend(rows["prompt"].tolist())
    logs["completion"].extend(rows["completion"].tolist())
    logs["rewards"]["correct"].extend(rows["correct"].tolist())
    logs["advantages"].extend(rows["advantage"].tolist())
    logs["extra"]["proxy"].extend(rows["proxy"].tolist())
    table = {
        "step": [2] * len(logs["prompt"]),
        "prompt": logs["prompt"],
        "completion": logs["completion"],
        **logs["rewards"],
        **logs["extra"],
        "advantage": logs["advantages"],
    }
    pd.DataFrame(table).to_parquet(os.path.join(str(tmp_path), "ref.parquet"))
    assert paths[1].read_bytes() == (tmp_path / "ref.parquet").read_bytes()
    cols = list(pd.read_parquet(paths[0]).columns)
    assert cols == ["step", "prompt", "completion", "correct", "proxy", "advantage"]


def _verl_dump(global_steps, inputs, outputs, gts, scores, reward_extra_infos_dict, dump_path):
    """verl b178a3cd RayPPOTrainer._dump_generations, with self.global_steps as an argument."""
    os.makedirs(dump_path, exist_ok=True)
    filename = os.path.join(dump_path, f"{global_steps}.jsonl")
    n = len(inputs)
    base_data = {
        "input": inputs,
        "output": outputs,
        "gts": gts,
        "score": scores,
        "step": [global_steps] * n,
    }
    for k, v in reward_extra_infos_dict.items():
        if len(v) == n:
            base_data[k] = v
    lines = []
    for i in range(n):
        entry = {k: v[i] for k, v in base_data.items()}
        lines.append(json.dumps(entry, ensure_ascii=False))
    with open(filename, "w") as f:
        f.write("\n".join(lines) + "\n")
    return filename


def _verl_frame() -> pd.DataFrame:
    f = _frame()
    return f.assign(output=f["completion"], gts=["x", None] * 10, score=f["correct"])


def test_write_verl_matches_dump_generations_bytes(tmp_path):
    frame = _verl_frame()
    paths = rollouts.write_verl(tmp_path / "mine", frame, extra_columns=("proxy",))
    rows = frame[frame["step"] == 1]
    ref = _verl_dump(
        1,
        rows["prompt"].tolist(),
        rows["output"].tolist(),
        rows["gts"].tolist(),
        rows["score"].tolist(),
        {"proxy": rows["proxy"].tolist(), "short": [1]},
        str(tmp_path / "ref"),
    )
    assert [p.name for p in paths] == ["1.jsonl", "2.jsonl"]
    assert paths[0].read_bytes() == open(ref, "rb").read()
    assert "c é" in paths[0].read_text(encoding="utf-8")  # ensure_ascii=False


# ---------------------------------------------------------------------------------------------
# round trips


def test_round_trip_trl(tmp_path):
    rollouts.write_trl(tmp_path, _frame(), reward_columns=("correct",), extra_columns=("proxy",))
    for path in (tmp_path, tmp_path / "completions", tmp_path / "completions"):
        log = rollouts.read(path, proxy_column="proxy")
        assert log.format == "trl" and log.reward == "correct" and log.notes == ()
        assert len(log.files) == 2 and log.files[0].endswith("completions_00001.parquet")
        _check_frame(log)
        _check_groups(log)
        assert log.frame["length"].isna().all()


def test_round_trip_verl_groups_by_input_in_any_order(tmp_path):
    frame = _verl_frame()
    # verl's _balance_batch reorders the batch before the dump: shuffle within each step
    order = np.random.default_rng(0).permutation(12).tolist() + list(range(12, 20))
    rollouts.write_verl(tmp_path, frame.iloc[order], extra_columns=("proxy",))
    log = rollouts.read(tmp_path, proxy_column="proxy")
    assert log.format == "verl" and log.reward == "score"
    _check_frame(log)
    g = rollouts.groups(log)
    by_prompt = g[g["step"] == 1].set_index("prompt")
    assert by_prompt.loc[["a", "b", "c é"], "successes"].tolist() == [2.0, 4.0, 1.0]
    assert np.allclose(by_prompt.loc[["a", "b", "c é"], "proxy_mean"], [1.5, 5.5, 9.5])
    assert g["n"].tolist() == [4] * 5


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_round_trip_table(tmp_path, suffix):
    f = _frame()
    table = pd.DataFrame(
        {
            "step": f["step"],
            "prompt": f["prompt"],
            "reward": f["correct"],
            "length": 10.0 * np.arange(20),
            "proxy": f["proxy"],
        }
    )
    path = rollouts.write_table(tmp_path / f"log{suffix}", table)
    log = rollouts.read(path)
    assert log.format == "table" and log.reward == "reward"
    _check_frame(log)
    _check_groups(log)
    assert np.allclose(rollouts.groups(log)["length_mean"], [15.0, 55.0, 95.0, 135.0, 175.0])


def test_table_group_column_and_folder_of_tables(tmp_path):
    f = _frame()
    table = pd.DataFrame(
        {
            "step": f["step"],
            "prompt": "same",
            "reward": f["correct"],
            "group": np.repeat(np.arange(5), 4),
        }
    )
    rollouts.write_table(tmp_path / "part0.csv", table.iloc[:12])
    rollouts.write_table(tmp_path / "part1.csv", table.iloc[12:])
    log = rollouts.read(tmp_path)
    assert log.format == "table" and len(log.files) == 2
    assert rollouts.groups(log)["successes"].tolist() == [2.0, 4.0, 1.0, 3.0, 0.0]
    rollouts.write_table(tmp_path / "part2.csv", table.drop(columns="step"))
    with pytest.raises(ConfigError, match="part2.csv.*step column"):
        rollouts.read(tmp_path)


def test_table_without_step_is_step_zero(tmp_path):
    path = tmp_path / "t.csv"
    pd.DataFrame({"prompt": list("aabb"), "reward": [0.5, 0.25, 2.0, 2.0]}).to_csv(path)
    log = rollouts.read(path)
    assert log.frame["step"].tolist() == [0] * 4
    assert rollouts.binary_levels(log) is None
    g = rollouts.groups(log)
    assert g["successes"].isna().all() and g["degenerate"].tolist() == [False, True]
    assert np.allclose(g["std"], [0.125, 0.0])


# ---------------------------------------------------------------------------------------------
# TRL reward columns


def _multi(tmp_path, extra=("proxy",)):
    f = _frame()
    fmt = np.where(
        np.arange(20) % 2 == 0, 0.5, np.nan
    )  # a function that returns None half the time
    f = f.assign(format=fmt)
    cols = {"reward_columns": ("correct", "format"), "extra_columns": extra}
    return f, rollouts.write_trl(tmp_path, f, **cols)


def test_trl_sums_reward_functions_with_nansum(tmp_path):
    f, _ = _multi(tmp_path)
    log = rollouts.read(tmp_path, proxy_column="proxy")
    assert log.reward == "sum of correct, format (TRL nansum, unit weights)"
    expected = f["correct"] + f["format"].fillna(0.0)
    assert np.array_equal(log.frame["reward"].to_numpy(), expected.to_numpy())
    assert any("nansum of correct, format" in n for n in log.notes)
    assert rollouts.binary_levels(log) is None  # {0, 0.5, 1, 1.5}
    one = rollouts.read(tmp_path, reward_column="correct", proxy_column="proxy")
    assert one.reward == "correct" and one.frame["reward"].tolist() == [float(r) for r in REWARDS]
    with pytest.raises(ConfigError, match=r"completions_00001.parquet.*'acc'.*correct, format"):
        rollouts.read(tmp_path, reward_column="acc", proxy_column="proxy")


def test_trl_numeric_extra_column_is_summed_unless_named(tmp_path):
    f = _frame()
    g = f.groupby("step")["correct"]
    adv = (f["correct"] - g.transform("mean")) / (g.transform("std") + 1e-4)  # TRL, one function
    rollouts.write_trl(
        tmp_path,
        f.assign(advantage=adv.fillna(0.0)),
        reward_columns=("correct",),
        extra_columns=("proxy",),
    )
    summed = rollouts.read(tmp_path)  # proxy not named: it looks like a reward function
    assert summed.reward == "sum of correct, proxy (TRL nansum, unit weights)"
    assert any("not an increasing function" in n for n in summed.notes)
    log = rollouts.read(tmp_path, proxy_column="proxy")
    assert log.reward == "correct" and not any("increasing" in n for n in log.notes)


def test_trl_unscorable_row_is_an_error(tmp_path):
    f = _frame().assign(format=np.nan)
    f.loc[6, "correct"] = np.nan
    rollouts.write_trl(tmp_path, f, reward_columns=("correct", "format"))
    for column in (None, "correct"):
        with pytest.raises(ConfigError, match=r"completions_00001.parquet: row 6 is unscorable"):
            rollouts.read(tmp_path, reward_column=column)


# ---------------------------------------------------------------------------------------------
# groups of other sizes


def test_back_to_back_duplicate_prompts_are_split(tmp_path):
    f = _frame()
    f.loc[4:7, "prompt"] = "a"  # step 1: a run of 8 equal consecutive prompts
    rollouts.write_trl(tmp_path, f, reward_columns=("correct",), extra_columns=("proxy",))
    log = rollouts.read(tmp_path, proxy_column="proxy")
    g = rollouts.groups(log)
    assert g["n"].tolist() == [4] * 5 and g["prompt"].tolist()[:2] == ["a", "a"]
    assert g["successes"].tolist() == [2.0, 4.0, 1.0, 3.0, 0.0]
    assert log.notes == (
        "1 runs of 8 equal consecutive prompts split in order into groups of 4 "
        "(the most common size)",
    )


def test_unequal_group_sizes_are_kept(tmp_path):
    f = _verl_frame().drop(index=[9, 10])  # prompt "c é" keeps 2 responses
    rollouts.write_verl(tmp_path, f)
    log = rollouts.read(tmp_path)
    g = rollouts.groups(log)
    assert g["n"].tolist() == [4, 4, 2, 4, 4]
    assert g["successes"].tolist() == [2.0, 4.0, 1.0, 3.0, 0.0]
    assert log.notes == ("group sizes differ (kept): 1 of size 2, 4 of size 4",)


def test_binary_level_conventions(tmp_path):
    def levels(rewards):
        path = tmp_path / "t.csv"
        pd.DataFrame({"prompt": ["p"] * len(rewards), "reward": rewards}).to_csv(path)
        log = rollouts.read(path)
        return rollouts.binary_levels(log), rollouts.groups(log)["successes"].tolist()

    assert levels([0.0, 0.0]) == ((0.0, 1.0), [0.0])
    assert levels([1.0, 1.0]) == ((0.0, 1.0), [2.0])
    assert levels([-1.0, 1.0, 1.0]) == ((-1.0, 1.0), [2.0])
    assert levels([0.5, 0.5]) == ((0.5, 0.5), [2.0])
    assert levels([-0.5, -0.5]) == ((-0.5, -0.5), [0.0])
    lv, s = levels([0.0, 0.5, 1.0])
    assert lv is None and np.isnan(s[0])


# ---------------------------------------------------------------------------------------------
# detection


def test_detect(tmp_path):
    rollouts.write_trl(tmp_path / "trl", _frame(), reward_columns=("correct",))
    rollouts.write_verl(tmp_path / "verl", _verl_frame())
    table = rollouts.write_table(tmp_path / "t.csv", _frame().rename(columns={"correct": "reward"}))
    assert rollouts.detect(tmp_path / "trl") == "trl"
    assert rollouts.detect(tmp_path / "trl" / "completions") == "trl"
    assert rollouts.detect(tmp_path / "trl" / "completions" / "completions_00002.parquet") == "trl"
    assert rollouts.detect(tmp_path / "verl") == "verl"
    assert rollouts.detect(tmp_path / "verl" / "2.jsonl") == "verl"
    assert rollouts.detect(table) == "table"
    # a table parquet with a "reward" column is a table, not TRL (no completion, advantage)
    p = rollouts.write_table(tmp_path / "t.parquet", pd.read_csv(table))
    assert rollouts.detect(p) == "table"
    # forcing the format reads only its files
    (tmp_path / "verl" / "notes.csv").write_text("prompt,reward\na,1\n")
    with pytest.raises(ConfigError, match=r"verl: mixed formats \(verl: 2 files"):
        rollouts.detect(tmp_path / "verl")
    assert rollouts.read(tmp_path / "verl", format="verl").format == "verl"


# ---------------------------------------------------------------------------------------------
# malformed input: one-line ConfigError naming the file


def _raises(path, pattern, **kw):
    with pytest.raises(ConfigError) as e:
        rollouts.read(path, **kw)
    msg = str(e.value)
    assert "\n" not in msg and str(path).split("/")[-1] in msg, msg
    assert re.search(pattern, msg), msg


def test_empty_inputs(tmp_path):
    for name in ("e.csv", "e.jsonl", "e.parquet"):
        (tmp_path / name).write_text("")
        _raises(tmp_path / name, "empty file")
    (tmp_path / "h.csv").write_text("prompt,reward\n")
    _raises(tmp_path / "h.csv", "empty file")
    pd.DataFrame({"prompt": pd.Series([], dtype=str), "reward": []}).to_parquet(
        tmp_path / "z.parquet"
    )
    _raises(tmp_path / "z.parquet", "empty file")
    (tmp_path / "empty").mkdir()
    _raises(tmp_path / "empty", "no rollout files")
    _raises(tmp_path / "missing", "no such file")


def test_unreadable_files(tmp_path):
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    _raises(tmp_path / "bad.parquet", "not a readable parquet file")
    rollouts.write_verl(tmp_path / "v", _verl_frame())
    path = tmp_path / "v" / "2.jsonl"
    lines = path.read_text().splitlines()
    lines[4] = lines[4][:-3]
    path.write_text("\n".join(lines) + "\n")
    _raises(path, "line 5 is not valid JSON")
    (tmp_path / "x.txt").write_text("a")
    _raises(tmp_path / "x.txt", "unknown file type")


def test_missing_columns(tmp_path):
    pd.DataFrame({"prompt": ["a"], "score": [1.0]}).to_csv(tmp_path / "t.csv", index=False)
    _raises(tmp_path / "t.csv", r"missing columns reward; allowed: prompt, reward", format="table")
    _raises(tmp_path / "t.csv", r"columns prompt, score match no format")
    (tmp_path / "3.jsonl").write_text('{"prompt": "a", "score": 1}\n')
    _raises(tmp_path / "3.jsonl", r"lacks input")
    f = _frame().drop(columns="completion")
    f.to_parquet(tmp_path / "completions_00001.parquet")
    _raises(tmp_path / "completions_00001.parquet", "named like a TRL log")


def test_bad_rewards(tmp_path):
    t = pd.DataFrame({"prompt": list("aabb"), "reward": ["1", "0", "x", "1"]})
    t.to_csv(tmp_path / "t.csv", index=False)
    _raises(tmp_path / "t.csv", r"'reward' at line 4 is 'x'; allowed: a finite number")
    t.assign(reward=[1.0, np.inf, 0.0, 1.0]).to_parquet(tmp_path / "t.parquet")
    _raises(tmp_path / "t.parquet", r"'reward' at row 1 is inf")
    f = _verl_frame()
    f.loc[13, "score"] = np.nan
    rollouts.write_verl(tmp_path / "v", f)
    _raises(tmp_path / "v" / "2.jsonl", r"line 2: 'score' is nan; allowed: a finite number")
    f["score"] = f["score"].astype(object)
    f.loc[13, "score"] = "1"
    rollouts.write_verl(tmp_path / "w", f)
    _raises(tmp_path / "w" / "2.jsonl", r"line 2: 'score' is '1'")


def test_group_size_one_is_an_error(tmp_path):
    pd.DataFrame({"prompt": list("abc"), "reward": [1, 0, 1]}).to_csv(tmp_path / "t.csv")
    _raises(tmp_path / "t.csv", "one response per prompt: group size 1 .* log G >= 2")


def test_bad_options(tmp_path):
    rollouts.write_trl(tmp_path, _frame(), reward_columns=("correct",))
    with pytest.raises(ConfigError, match="format: got 'jsonl'; allowed: trl, verl, table"):
        rollouts.read(tmp_path, format="jsonl")
    _raises(
        tmp_path / "completions",
        r"00001.parquet: proxy column 'norm' is not a column",
        proxy_column="norm",
    )
    t = rollouts.write_table(tmp_path / "t.csv", _frame().rename(columns={"correct": "reward"}))
    _raises(t, r"length column 'len' is not a column; columns: step, prompt", length_column="len")
    with pytest.raises(ConfigError, match=r"t.txt.*allowed: .csv, .parquet"):
        rollouts.write_table(tmp_path / "t.txt", _frame())


def test_forced_format_and_encoding(tmp_path):
    table = _frame().rename(columns={"correct": "reward"}).drop(columns="completion")
    t = rollouts.write_table(tmp_path / "t.parquet", table)
    _raises(t, r"missing TRL columns completion, advantage; allowed: step, prompt", format="trl")
    _raises(t, r"no verl files \(.jsonl\)", format="verl")
    bad = b'{"input": "a", "score": 1}\n{"input": "\xff", "score": 0}\n'
    (tmp_path / "1.jsonl").write_bytes(bad)
    _raises(tmp_path / "1.jsonl", "line 2 is not UTF-8 text")


def test_csv_empty_cells(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("prompt,reward,proxy\n,1,\n,0,2.5\nb,1,1\nb,1,1\n")
    log = rollouts.read(path)
    assert log.frame["prompt"].tolist() == ["", "", "b", "b"]  # an empty prompt is a prompt
    assert np.allclose(rollouts.groups(log)["proxy_mean"], [2.5, 1.0])
    path.write_text("prompt,reward\na,1\na,\n")
    _raises(path, r"'reward' at line 3 is nan; allowed: a finite number")


def test_footprint_is_the_logs_text_size_times_the_factor(tmp_path):
    f = _frame().rename(columns={"correct": "reward"})
    f.to_csv(tmp_path / "t.csv", index=False)
    f.to_parquet(tmp_path / "t.parquet")
    size = (tmp_path / "t.csv").stat().st_size
    assert rollouts.footprint(tmp_path / "t.csv") == rollouts.READ_FACTOR * size
    small = rollouts.footprint(tmp_path / "t.parquet")
    f.assign(completion="x" * 1000).to_parquet(tmp_path / "t.parquet")  # not read: not counted
    assert 0 < small == rollouts.footprint(tmp_path / "t.parquet")
