"""Write rollout logs in the layouts TRL and verl write (validation logs built from gpolab's
surrogates; :mod:`gpolab.labs.plan.rollouts` reads them back).  The layouts are described there."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from gpolab.validate import ConfigError

__all__ = ["write_trl", "write_verl", "write_table"]


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
