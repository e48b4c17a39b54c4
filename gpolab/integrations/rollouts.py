"""Read and write GRPO rollout logs: TRL completions parquet, verl rollout jsonl, plain tables.

What each trainer writes (read in its code; the writers below reproduce it byte for byte):

* **TRL** ``GRPOTrainer.log`` (huggingface/trl f2cd5771, ``trl/trainer/grpo_trainer.py``), with
  ``log_completions=True``: ``output_dir/completions/completions_{global_step:05d}.parquet``,
  ``pd.DataFrame({"step", "prompt", "completion", **rewards, **extra, "advantage"}).to_parquet``.
  One column per reward function (named by ``reward_func_names``), then the ``log_extra``
  columns. The buffers are deques of ``maxlen=generation_batch_size``, so a file holds the last
  generation batch; the G completions of a prompt are consecutive rows (``RepeatSampler``). A
  reward function may return None (NaN); TRL's reward is
  ``(rewards_per_func * reward_weights).nansum(dim=1)`` and a row where every function is NaN is
  "unscorable" (its advantage is forced to 0). A file is written at each logging step only, so
  the log is one generation batch per ``logging_steps``. Evaluation also extends the same deques
  and ``log`` in eval mode writes the same file name, so with evaluation on, the file of an eval
  step can hold evaluation completions (nothing in the file tells them apart).
* **verl** ``RayPPOTrainer._dump_generations`` / ``_log_rollout_data`` (volcengine/verl
  b178a3cd, ``verl/trainer/ppo/ray_trainer.py``), with ``trainer.rollout_data_dir``:
  ``{rollout_data_dir}/{global_steps}.jsonl``, one ``json.dumps(ensure_ascii=False)`` object per
  response with keys ``input, output, gts, score, step`` plus every ``reward_extra_info`` key
  whose list has one entry per response; lines joined by ``"\\n"`` plus a final ``"\\n"``.
  ``score`` is ``token_level_scores.sum(-1)``. There is no group id and ``_balance_batch``
  reorders the batch before the dump, so a group is the rows of equal ``input`` within a step.
* **table**: a CSV or parquet file with ``prompt, reward`` and optional ``step, length, group,
  proxy`` columns (a folder of them needs a ``step`` column).

Groups (gpolab's rules): TRL runs of consecutive equal prompts in a file; verl rows of equal
``input`` in a step; table ``(step, group)`` or ``(step, prompt)``. A group whose size is an
integer multiple k > 1 of the most common size is split in order into k groups (the same prompt
drawn twice in one batch); other sizes are kept and counted in the notes.

TRL's reward by default is the nansum of every numeric column that is not ``step, prompt,
completion, advantage`` or the named proxy/length column. A numeric ``log_extra`` column cannot
be told from a reward function by the file alone: pass ``reward_column`` (or write a table). A
note is added when the logged ``advantage`` is not an increasing function of that sum within a
group, which is what TRL's ``sum_then_normalize`` (unit weights) produces.

The per-group summaries (one row per group, :func:`groups`) are at the end of this module;
finding a log's files and their format, and the writers (importable from here):
:mod:`gpolab.integrations.rollout_files`.
"""

from __future__ import annotations

import dataclasses
import io
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.json as pa_json

from gpolab.integrations.rollout_files import (
    FORMATS,
    TRL_SIGNATURE,
    csv_columns,
    detect,
    first_json,
    json_line,
    lines,
    name_step,
    one_line,
    parquet,
    scan,
    write_table,
    write_trl,
    write_verl,
)
from gpolab.validate import ConfigError

__all__ = [
    "FORMATS",
    "Log",
    "detect",
    "read",
    "write_trl",
    "write_verl",
    "write_table",
    "groups",
    "binary_levels",
]


FRAME_COLUMNS = ("step", "group", "prompt", "reward", "length", "proxy", "pair_score")
TRL_FIXED = ("step", "prompt", "completion", "advantage")
TABLE_OPTIONAL = ("step", "length", "group", "proxy", "pair_score")


@dataclasses.dataclass(frozen=True)
class Log:
    """A rollout log read into one row per response.

    ``frame`` columns: step (int64), group (int64, 0..n-1 in step/file order, unique over the
    log), prompt (str), reward (float64), length, proxy and pair_score (float64, NaN if absent;
    pair_score: :func:`gpolab.theory.gstar.pair_scores`, written by the training hook).
    """

    format: str
    source: str
    files: tuple[str, ...]
    reward: str
    frame: pd.DataFrame
    notes: tuple[str, ...]


# ---------------------------------------------------------------------------------------------
# checks shared by the readers


def _numeric(f: Path, name: str, values, where, *, finite: bool) -> np.ndarray:
    """``values`` as float64; ConfigError naming the first non-numeric (or non-finite) entry."""
    s = pd.Series(values)
    x = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float)
    bad = np.isnan(x) & s.notna().to_numpy()
    if finite:
        bad |= ~np.isfinite(x)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        v = s.iloc[i].item() if isinstance(s.iloc[i], np.generic) else s.iloc[i]
        allowed = "a finite number" if finite else "a number"
        raise ConfigError(f"{f}: {name} at {where(i)} is {v!r}; allowed: {allowed}")
    return x


def _check_named(f: Path, cols, proxy_column, length_column) -> None:
    """The proxy and length columns the user named are columns of ``f``."""
    for what, name in (("proxy column", proxy_column), ("length column", length_column)):
        if name is not None and name not in cols:
            raise ConfigError(f"{f}: {what} {name!r} is not a column; columns: {', '.join(cols)}")


def _runs(codes: np.ndarray) -> np.ndarray:
    """Run index of each row: a new run starts where the prompt differs from the row before."""
    change = np.ones(len(codes), dtype=bool)
    change[1:] = codes[1:] != codes[:-1]
    return np.cumsum(change) - 1


def _extra(df: pd.DataFrame, f: Path, name: str | None, what: str, where) -> np.ndarray:
    """An optional per-response column: empty or NaN means not measured; ±inf is an error
    naming the column, its count and the first row (one inf among 1,024 pair scores dropped
    the whole column and flipped plan's G from 256 to 2, issue 55)."""
    if name is None:
        return np.full(len(df), np.nan)
    x = _numeric(f, f"{what} {name!r}", df[name], where, finite=False)
    inf = np.isinf(x)
    if inf.any():
        raise ConfigError(
            f"{f}: {what} {name!r} is {x[inf][0]} at {where(int(np.flatnonzero(inf)[0]))} "
            f"({int(inf.sum()):,} of {x.size:,} rows are infinite); allowed: a finite number, "
            "or empty/NaN where not measured"
        )
    return x


# ---------------------------------------------------------------------------------------------
# one reader per format: a file -> (frame with step, key, prompt, reward, length, proxy, reward)


def _trl_reward_columns(f, schema: pa.Schema, reward_column, skip) -> list[str]:
    names = schema.names
    numeric = [
        n
        for n in names
        if n not in TRL_FIXED
        and n not in skip
        and (
            pa.types.is_floating(schema.field(n).type) or pa.types.is_integer(schema.field(n).type)
        )
    ]
    if reward_column is not None:
        if reward_column not in names:
            listed = ", ".join(numeric) or "none"
            raise ConfigError(
                f"{f}: reward column {reward_column!r} is not a column; reward columns: {listed}"
            )
        return [reward_column]
    if not numeric:
        raise ConfigError(
            f"{f}: no numeric reward-function column; columns: {', '.join(names)}; allowed: one "
            "column per reward function between completion and advantage"
        )
    return numeric


def _read_trl(f: Path, reward_column, proxy_column, length_column):
    pf = parquet(f, ("prompt",))
    schema = pf.schema_arrow
    missing = [c for c in TRL_SIGNATURE if c not in schema.names]
    if missing:
        raise ConfigError(
            f"{f}: missing TRL columns {', '.join(missing)}; allowed: {', '.join(TRL_FIXED)}"
        )
    _check_named(f, schema.names, proxy_column, length_column)
    rcols = _trl_reward_columns(f, schema, reward_column, {proxy_column, length_column})
    extra = [c for c in (proxy_column, length_column) if c is not None]
    use = [c for c in ("step", "prompt", *rcols, "advantage", *extra) if c in schema.names]
    try:
        df = pf.read(columns=list(dict.fromkeys(use))).to_pandas()
    except (pa.ArrowException, OSError) as e:
        raise ConfigError(f"{f}: not a readable parquet file ({one_line(e)})") from None
    if len(df) == 0:
        raise ConfigError(f"{f}: empty file (no rows)")
    where = lambda i: f"row {i}"  # noqa: E731
    per_func = np.column_stack([_numeric(f, repr(c), df[c], where, finite=False) for c in rcols])
    unscorable = np.isnan(per_func).all(axis=1) | np.isinf(per_func).any(axis=1)
    if unscorable.any():
        i = int(np.flatnonzero(unscorable)[0])
        raise ConfigError(
            f"{f}: row {i} is unscorable: reward {', '.join(rcols)} = "
            f"{per_func[i].tolist()}; allowed: a finite reward from at least one function"
        )
    prompt = df["prompt"].astype("category")
    step = df["step"].to_numpy() if "step" in df else np.full(len(df), name_step(f) or 0)
    out = pd.DataFrame(
        {
            "step": np.asarray(step, dtype=np.int64),
            "key": _runs(prompt.cat.codes.to_numpy()),
            "prompt": prompt.astype(object).astype(str).to_numpy(),
            "reward": np.nansum(per_func, axis=1),
            "length": _extra(df, f, length_column, "length column", where),
            "proxy": _extra(df, f, proxy_column, "proxy column", where),
        }
    )
    out["advantage"] = df["advantage"].to_numpy(dtype=float)
    return out, rcols


def _verl_slow(f: Path, keys: dict[str, bool]) -> None:
    """Find the first bad line of a verl jsonl (the fast reader only says that one is bad)."""
    for lineno, line in lines(f):
        obj = json_line(f, lineno, line)
        for key, finite in keys.items():
            if key not in obj:
                raise ConfigError(f"{f}: line {lineno} has no {key!r}; keys: {', '.join(obj)}")
            v = obj[key]
            ok = isinstance(v, (int, float)) and not isinstance(v, bool)
            if key == "input":
                ok = isinstance(v, str)
            elif ok and finite:
                ok = math.isfinite(v)
            if not ok and not (v is None and not finite):
                want = "a string" if key == "input" else "a finite number"
                raise ConfigError(f"{f}: line {lineno}: {key!r} is {v!r}; allowed: {want}")


def _read_verl(f: Path, reward_column, proxy_column, length_column):
    first = first_json(f)
    score = reward_column or "score"
    for what, name in (
        ("input key", "input"),
        ("reward key", score),
        ("proxy key", proxy_column),
        ("length key", length_column),
    ):
        if name is not None and name not in first:
            raise ConfigError(f"{f}: {what} {name!r} is absent (line 1); keys: {', '.join(first)}")
    fields = [("input", pa.string()), (score, pa.float64())]
    fields += [(c, pa.float64()) for c in (proxy_column, length_column) if c is not None]
    fields += [("step", pa.int64())] if "step" in first and score != "step" else []
    fields = list(dict(fields).items())
    opts = pa_json.ParseOptions(
        explicit_schema=pa.schema(fields), unexpected_field_behavior="ignore"
    )
    checks = {"input": True, score: True} | {c: False for c in (proxy_column, length_column) if c}
    with open(f, "rb") as fh:
        data = fh.read()
    try:
        data.decode("utf-8")  # arrow does not check strings for UTF-8 until they are used
        df = pa_json.read_json(io.BytesIO(data), parse_options=opts).to_pandas()
    except (pa.ArrowException, UnicodeDecodeError):
        _verl_slow(f, checks)
        raise ConfigError(f"{f}: not a readable verl jsonl file") from None
    r = df[score].to_numpy(dtype=float)
    if df["input"].isna().any() or not np.isfinite(r).all():
        _verl_slow(f, checks)
    file_step = name_step(f) or 0
    step = df["step"].fillna(file_step) if "step" in df else np.full(len(df), file_step)
    where = lambda i: f"row {i}"  # noqa: E731
    out = pd.DataFrame(
        {
            "step": np.asarray(step, dtype=np.int64),
            "key": pd.factorize(df["input"])[0].astype(np.int64),
            "prompt": df["input"].to_numpy(dtype=object),
            "reward": r,
            "length": _extra(df, f, length_column, "length key", where),
            "proxy": _extra(df, f, proxy_column, "proxy key", where),
        }
    )
    return out, [score]


def _read_table(f: Path, reward_column, proxy_column, length_column):
    if f.suffix == ".csv":
        cols = csv_columns(f)
        try:
            nan = {c: ["", "nan", "NaN"] for c in cols if c != "prompt"}
            df = pd.read_csv(f, dtype={"prompt": str}, keep_default_na=False, na_values=nan)
        except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as e:
            raise ConfigError(f"{f}: not a readable CSV file ({one_line(e)})") from None
        where = lambda i: f"line {i + 2}"  # noqa: E731
    else:
        cols = parquet(f).schema_arrow.names
        try:
            df = pd.read_parquet(f)
        except (pa.ArrowException, OSError) as e:
            raise ConfigError(f"{f}: not a readable parquet file ({one_line(e)})") from None
        where = lambda i: f"row {i}"  # noqa: E731
    reward = reward_column or "reward"
    missing = [c for c in ("prompt", reward) if c not in cols]
    if missing:
        raise ConfigError(
            f"{f}: missing columns {', '.join(missing)}; allowed: prompt, {reward} "
            f"(+ {', '.join(TABLE_OPTIONAL)}); columns: {', '.join(map(str, cols))}"
        )
    _check_named(f, cols, proxy_column, length_column)
    if len(df) == 0:
        raise ConfigError(f"{f}: empty file (no rows)")
    length = length_column or ("length" if "length" in cols else None)
    proxy = proxy_column or ("proxy" if "proxy" in cols else None)
    step = _numeric(f, "'step'", df["step"], where, finite=True) if "step" in cols else 0
    out = pd.DataFrame(
        {
            "step": np.asarray(np.broadcast_to(step, len(df)), dtype=np.int64),
            "key": df["group"].to_numpy() if "group" in cols else df["prompt"].to_numpy(),
            "prompt": df["prompt"].astype(str).to_numpy(dtype=object),
            "reward": _numeric(f, repr(reward), df[reward], where, finite=True),
            "length": _extra(df, f, length, "length column", where),
            "proxy": _extra(df, f, proxy, "proxy column", where),
            "pair_score": _extra(
                df, f, "pair_score" if "pair_score" in cols else None, "column", where
            ),
        }
    )
    return out, [reward]


_READERS = {"trl": _read_trl, "verl": _read_verl, "table": _read_table}


# ---------------------------------------------------------------------------------------------
# from files to one log


def _numbered(fmt: str, parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate the files' rows and number the groups in step/file order, rows grouped."""
    if fmt == "table":
        frame = pd.concat(parts, ignore_index=True)
        frame = frame.iloc[np.argsort(frame["step"].to_numpy(), kind="stable")]
        group = frame.groupby(["step", "key"], sort=False, dropna=False).ngroup().to_numpy()
    else:
        offsets = np.cumsum([0] + [int(p["key"].max()) + 1 for p in parts[:-1]])
        frame = pd.concat(parts, ignore_index=True)
        group = frame["key"].to_numpy() + np.repeat(offsets, [len(p) for p in parts])
    frame = frame.assign(group=np.asarray(group, dtype=np.int64)).drop(columns="key")
    return frame.iloc[np.argsort(frame["group"].to_numpy(), kind="stable")].reset_index(drop=True)


_UNIT = {
    "trl": "runs of {s} equal consecutive prompts",
    "verl": "sets of {s} rows with equal input in one step",
    "table": "groups of {s} rows",
}


def _split(fmt: str, group: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Split each group whose size is k > 1 times the most common size into k groups, in order.

    ``group`` is sorted and numbered 0..n-1. Ties for the most common size pick the smallest.
    """
    sizes = np.bincount(group)
    values, counts = np.unique(sizes, return_counts=True)
    m = int(values[np.argmax(counts)])
    split = (sizes % m == 0) & (sizes > m)
    notes = []
    if split.any():
        start = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        sub = np.where(split[group], (np.arange(len(group)) - start[group]) // m, 0)
        new = np.ones(len(group), dtype=bool)
        new[1:] = (group[1:] != group[:-1]) | (sub[1:] != sub[:-1])
        group = np.cumsum(new) - 1
        for s, c in zip(*np.unique(sizes[split], return_counts=True), strict=True):
            unit = _UNIT[fmt].format(s=s)
            notes.append(f"{c} {unit} split in order into groups of {m} (the most common size)")
    values, counts = np.unique(np.bincount(group), return_counts=True)
    if len(values) > 1:
        listed = ", ".join(f"{c} of size {v}" for v, c in zip(values, counts, strict=True))
        notes.append(f"group sizes differ (kept): {listed}")
    return group.astype(np.int64), notes


def _advantage_note(frame: pd.DataFrame, advantage: np.ndarray, rcols: list[str]) -> list[str]:
    """TRL (sum_then_normalize, unit weights): within a group the advantage increases with the
    nansum of the reward functions. Groups where it does not hint at a wrong reward column set."""
    g, r = frame["group"].to_numpy(), frame["reward"].to_numpy()
    order = np.lexsort((r, g))
    g, r, a = g[order], r[order], advantage[order]
    same, dr, da = g[1:] == g[:-1], np.diff(r), np.diff(a)
    tol = 1e-4 * (1.0 + np.abs(a[1:]))
    bad = same & (((dr == 0) & (np.abs(da) > tol)) | ((dr > 0) & (da < -tol)))
    if not bad.any():
        return []
    k, n = len(np.unique(g[1:][bad])), int(g[-1]) + 1
    return [
        f"the logged advantage is not an increasing function of the reward (sum of "
        f"{', '.join(rcols)}) in {k} of {n} groups: a summed column may be a log_extra column, "
        "or the run used reward_weights or normalize_then_sum; pass reward_column to pick one"
    ]


def _reward_text(fmt: str, rcols: list[str]) -> str:
    if fmt == "trl" and len(rcols) > 1:
        return f"sum of {', '.join(rcols)} (TRL nansum, unit weights)"
    return rcols[0]


def _read_parts(fmt, files, reward_column, proxy_column, length_column):
    parts, rcols = [], None
    for f in files:
        part, cols = _READERS[fmt](f, reward_column, proxy_column, length_column)
        if rcols is not None and cols != rcols:
            raise ConfigError(
                f"{f}: reward columns {', '.join(cols)} differ from {files[0].name}'s "
                f"{', '.join(rcols)}; pass reward_column to pick one"
            )
        parts.append(part)
        rcols = cols
    if fmt == "table" and len(files) > 1:
        for f in files:
            cols = csv_columns(f) if f.suffix == ".csv" else parquet(f).schema_arrow.names
            if "step" not in cols:
                raise ConfigError(f"{f}: a folder of tables needs a step column in every file")
    return parts, rcols


READ_FACTOR = 16  # peak bytes held per byte of log (gpolab plan: 2M rows, 35 MB CSV: +0.26 GB
# over a 250k-row log's peak, ~8.5x; twice that for longer prompt texts)


def footprint(path, format=None) -> int:
    """Bytes a read of the log (and plan's analysis of it) holds at its peak, estimated before
    reading: READ_FACTOR times its text size (CSV/jsonl on disk; parquet: the uncompressed
    columns but a TRL log's completions, which no reader loads)."""
    total = 0
    for f in scan(path, format)[1]:
        if f.suffix == ".parquet":  # the columns read: a TRL log's completion text is not
            md = parquet(f).metadata
            total += sum(
                c.total_uncompressed_size
                for i in range(md.num_row_groups)
                for c in map(md.row_group(i).column, range(md.num_columns))
                if c.path_in_schema != "completion"
            )
        else:
            total += f.stat().st_size
    return READ_FACTOR * total


def read(path, *, format=None, reward_column=None, proxy_column=None, length_column=None) -> Log:
    """Read a TRL / verl / table rollout log (a file or a folder) into one row per response."""
    fmt, files = scan(path, format)
    parts, rcols = _read_parts(fmt, files, reward_column, proxy_column, length_column)
    frame = _numbered(fmt, parts)
    group, notes = _split(fmt, frame["group"].to_numpy())
    frame["group"] = group
    if np.bincount(group).max() == 1:
        raise ConfigError(
            f"{path}: one response per prompt: group size 1 gives no within-prompt information; "
            "log G >= 2"
        )
    if fmt == "trl" and reward_column is None and len(rcols) > 1:
        notes.append(
            f"reward = nansum of {', '.join(rcols)} per row (TRL, unit weights); a numeric "
            "log_extra column is summed too: pass reward_column, or write a table"
        )
    if fmt == "trl" and reward_column is None:
        notes += _advantage_note(frame, frame["advantage"].to_numpy(), rcols)
    if "pair_score" not in frame:  # only a table carries it (the training hook's files)
        frame["pair_score"] = np.nan
    frame = frame[list(FRAME_COLUMNS)].astype({"prompt": str})
    return Log(
        fmt, str(path), tuple(map(str, files)), _reward_text(fmt, rcols), frame, tuple(notes)
    )


# ---------------------------------------------------------------------------------------------
# per-group summaries of a log


def binary_levels(log) -> tuple[float, float] | None:
    """(low, high) when the rewards take at most two distinct values, None when graded.

    Rewards within {0, 1} give (0.0, 1.0), also when only one of them occurs. Two other values
    give (low, high). One other value v gives (v, v): then it counts as a success when v > 0.
    """
    values = np.unique(log.frame["reward"].to_numpy(dtype=float))
    if len(values) > 2:
        return None
    if set(values.tolist()) <= {0.0, 1.0}:
        return (0.0, 1.0)
    return (float(values[0]), float(values[-1]))


def _group_mean(x: np.ndarray, starts: np.ndarray) -> np.ndarray:
    ok = ~np.isnan(x)
    count = np.add.reduceat(ok.astype(float), starts)
    total = np.add.reduceat(np.where(ok, x, 0.0), starts)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def groups(log) -> pd.DataFrame:
    """One row per group: step, group, prompt, n, successes, mean, std (ddof 0), degenerate,
    length_mean, proxy_mean. successes = number of rewards at the high binary level (see
    :func:`binary_levels`; NaN when graded); degenerate = all rewards of the group equal."""
    f = log.frame
    order = np.argsort(f["group"].to_numpy(), kind="stable")
    g, r = f["group"].to_numpy()[order], f["reward"].to_numpy(dtype=float)[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]]) if len(g) else np.zeros(0, int)
    n = np.diff(np.r_[starts, len(g)])
    if len(g) == 0:
        cols = "step group prompt n successes mean std degenerate length_mean proxy_mean"
        return pd.DataFrame(columns=cols.split())
    mean = np.add.reduceat(r, starts) / n
    std = np.sqrt(np.add.reduceat((r - np.repeat(mean, n)) ** 2, starts) / n)
    degenerate = np.minimum.reduceat(r, starts) == np.maximum.reduceat(r, starts)
    std[degenerate] = 0.0
    levels = binary_levels(log)
    if levels is None:
        successes = np.full(len(n), np.nan)
    elif levels[0] < levels[1]:
        successes = np.add.reduceat((r == levels[1]).astype(float), starts)
    else:
        successes = n * float(levels[0] > 0)
    first = order[starts]
    return pd.DataFrame(
        {
            "step": f["step"].to_numpy()[first],
            "group": g[starts],
            "prompt": f["prompt"].to_numpy()[first],
            "n": n.astype(np.int64),
            "successes": successes.astype(float),
            "mean": mean,
            "std": std,
            "degenerate": degenerate,
            "length_mean": _group_mean(f["length"].to_numpy(dtype=float)[order], starts),
            "proxy_mean": _group_mean(f["proxy"].to_numpy(dtype=float)[order], starts),
        }
    )
