"""The files of a rollout log and their format (:mod:`gpolab.integrations.rollouts`): a TRL
completions folder, verl rollout jsonl, or a CSV/parquet table; their first lines read safely.
And the writers of logs in the layouts TRL and verl write (validation logs built from gpolab's
surrogates; :mod:`gpolab.integrations.rollouts` describes the layouts and reads them back)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from gpolab.validate import ConfigError, choice

FORMATS = ("trl", "verl", "table")
TRL_SIGNATURE = ("prompt", "completion", "advantage")
VERL_REQUIRED = ("input", "score")
TABLE_REQUIRED = ("prompt", "reward")
_SUFFIXES = {".parquet", ".csv", ".jsonl"}
_TRL_NAME = re.compile(r"completions_(\d+)\.parquet$")
ALLOWED = (
    "TRL completions/completions_*.parquet, verl {step}.jsonl, or a .csv/.parquet table "
    "with prompt, reward"
)


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:200] if text else type(exc).__name__


def parquet(f: Path, dictionary: tuple[str, ...] = ()) -> pq.ParquetFile:
    if f.stat().st_size == 0:
        raise ConfigError(f"{f}: empty file (no rows)")
    try:
        return pq.ParquetFile(f, read_dictionary=list(dictionary))
    except (pa.ArrowException, OSError) as e:
        raise ConfigError(f"{f}: not a readable parquet file ({one_line(e)})") from None


def csv_columns(f: Path) -> list[str]:
    try:
        return list(pd.read_csv(f, nrows=0).columns)
    except pd.errors.EmptyDataError:
        raise ConfigError(f"{f}: empty file (no rows)") from None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError) as e:
        raise ConfigError(f"{f}: not a readable CSV file ({one_line(e)})") from None


def lines(f: Path):
    """(line number, text) of the non-blank lines of a UTF-8 text file."""
    with open(f, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ConfigError(f"{f}: line {lineno} is not UTF-8 text") from None
            if line.strip():
                yield lineno, line


def first_json(f: Path) -> dict:
    for lineno, line in lines(f):
        return json_line(f, lineno, line)
    raise ConfigError(f"{f}: empty file (no rows)")


def json_line(f: Path, lineno: int, line: str) -> dict:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{f}: line {lineno} is not valid JSON ({e.msg})") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"{f}: line {lineno} is not a JSON object; allowed: one object a line")
    return obj


def _classify(f: Path) -> str:
    """The format of one file from its name and columns (ConfigError when it matches none)."""
    if f.suffix == ".jsonl":
        keys = set(first_json(f))
        if set(VERL_REQUIRED) <= keys:
            return "verl"
        missing = [k for k in VERL_REQUIRED if k not in keys]
        raise ConfigError(
            f"{f}: verl rollout jsonl lacks {', '.join(missing)}; has {', '.join(sorted(keys))}; "
            "allowed: input, output, gts, score, step (+ reward extra info)"
        )
    cols = set(csv_columns(f) if f.suffix == ".csv" else parquet(f).schema_arrow.names)
    if f.suffix == ".parquet" and set(TRL_SIGNATURE) <= cols:
        return "trl"
    if set(TABLE_REQUIRED) <= cols:
        return "table"
    hint = "TRL columns step, prompt, completion, <reward functions>, advantage or "
    if _TRL_NAME.search(f.name):
        hint = "named like a TRL log but TRL needs step, prompt, completion, advantage; or "
    raise ConfigError(
        f"{f}: columns {', '.join(sorted(cols))} match no format; allowed: {hint}"
        "a table with prompt, reward (+ step, length, group, proxy)"
    )


def _candidates(folder: Path) -> list[Path]:
    top = sorted(p for p in folder.iterdir() if p.suffix in _SUFFIXES and not p.name[0] == ".")
    sub = folder / "completions"
    if sub.is_dir():
        inner = sorted(p for p in sub.iterdir() if _TRL_NAME.search(p.name))
        if inner and top:
            raise ConfigError(
                f"{folder}: mixed formats: {len(inner)} TRL files under completions/ and "
                f"{len(top)} other files ({top[0].name}, ...); allowed: one format per folder"
            )
        top = top or inner
    if not top:
        raise ConfigError(f"{folder}: no rollout files; allowed: {ALLOWED}")
    return top


def scan(path, format: str | None) -> tuple[str, list[Path]]:
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{p}: no such file or folder; allowed: {ALLOWED}")
    if not (p.is_dir() or p.is_file()):  # a FIFO or a device: stat only, never opened
        raise ConfigError(f"{p}: not a regular file or a folder; allowed: {ALLOWED}")
    files = _candidates(p) if p.is_dir() else [p]
    if format is not None:
        choice("format", format, FORMATS)
        exts = {"trl": {".parquet"}, "verl": {".jsonl"}, "table": {".csv", ".parquet"}}[format]
        files = [f for f in files if f.suffix in exts]
        if not files:
            raise ConfigError(f"{p}: no {format} files ({', '.join(sorted(exts))})")
        return format, _order(format, files)
    if p.is_file() and p.suffix not in _SUFFIXES:
        raise ConfigError(f"{p}: unknown file type; allowed: .parquet, .jsonl, .csv")
    kinds: dict[str, list[Path]] = {}
    for f in files:
        kinds.setdefault(_classify(f), []).append(f)
    if len(kinds) > 1:
        listed = "; ".join(f"{k}: {len(v)} files ({v[0].name}, ...)" for k, v in kinds.items())
        raise ConfigError(f"{p}: mixed formats ({listed}); allowed: one format, or pass format=")
    fmt = next(iter(kinds))
    return fmt, _order(fmt, kinds[fmt])


def name_step(f: Path) -> int | None:
    m = _TRL_NAME.search(f.name) or re.fullmatch(r"(\d+)\.jsonl", f.name)
    return int(m.group(1)) if m else None


def _order(fmt: str, files: list[Path]) -> list[Path]:
    if fmt == "table":
        return sorted(files)
    return sorted(files, key=lambda f: (name_step(f) is None, name_step(f) or 0, f.name))


def detect(path) -> str:
    """The format ('trl', 'verl' or 'table') of a file or folder, from file names and columns."""
    return scan(path, None)[0]


# ---------------------------------------------------------------------------------------------
# writers


def _need(frame: pd.DataFrame, columns, what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ConfigError(
            f"{what}: frame lacks columns {', '.join(missing)}; needs {', '.join(columns)}"
        )


def write_trl(folder, frame, *, reward_columns=("reward",), extra_columns=()) -> list[Path]:
    """One ``completions/completions_{step:05d}.parquet`` per step, as ``GRPOTrainer.log`` does.

    Columns in TRL's order: step, prompt, completion, reward columns, extra columns, advantage
    (0.0 when the frame has none); written by ``pd.DataFrame(dict of lists).to_parquet``.
    """
    _need(frame, ("step", "prompt", "completion", *reward_columns, *extra_columns), "write_trl")
    out = Path(folder) / "completions"
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for step, rows in frame.groupby("step", sort=True):
        n = len(rows)
        table = {
            "step": [int(step)] * n,
            "prompt": rows["prompt"].tolist(),
            "completion": rows["completion"].tolist(),
            **{c: rows[c].tolist() for c in reward_columns},
            **{c: rows[c].tolist() for c in extra_columns},
            "advantage": rows["advantage"].tolist() if "advantage" in rows else [0.0] * n,
        }
        path = out / f"completions_{int(step):05d}.parquet"
        pd.DataFrame(table).to_parquet(path)
        paths.append(path)
    return paths


def write_verl(folder, frame, *, extra_columns=()) -> list[Path]:
    """One ``{step}.jsonl`` per step, as verl's ``_dump_generations`` does.

    Keys input (from ``prompt``), output, gts, score, step, then the extra columns; one
    ``json.dumps(ensure_ascii=False)`` a line, joined by "\\n" plus a final "\\n".
    """
    _need(frame, ("step", "prompt", "output", "gts", "score", *extra_columns), "write_verl")
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for step, rows in frame.groupby("step", sort=True):
        n = len(rows)
        base = {
            "input": rows["prompt"].tolist(),
            "output": rows["output"].tolist(),
            "gts": rows["gts"].tolist(),
            "score": rows["score"].tolist(),
            "step": [int(step)] * n,
        }
        for k in extra_columns:
            base[k] = rows[k].tolist()
        lines = [
            json.dumps({k: v[i] for k, v in base.items()}, ensure_ascii=False) for i in range(n)
        ]
        path = out / f"{int(step)}.jsonl"
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
        paths.append(path)
    return paths


def write_table(path, frame) -> Path:
    """The frame as a plain table, ``.csv`` or ``.parquet`` by the suffix (no index)."""
    path = Path(path)
    if path.suffix not in (".csv", ".parquet"):
        raise ConfigError(f"{path}: table suffix {path.suffix!r}; allowed: .csv, .parquet")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path, index=False)
    return path
