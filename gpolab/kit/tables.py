"""What a lab prints: a table as text (:func:`table_text`) and its rows as strict JSON
(:func:`records`, :func:`json_value`)."""

from __future__ import annotations

import math


def json_value(v):
    """One table value as strict JSON: NaN/None/NA → None, ±inf → "inf"/"-inf" (strict JSON has
    no Infinity), numpy scalars → Python."""
    import pandas as pd

    v = v.item() if hasattr(v, "item") else v
    if not isinstance(v, (list, tuple, dict, str)) and pd.isna(v):
        return None
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def records(lab, tables) -> list[dict]:
    """The main table's rows as strict-JSON dicts (:func:`json_value`).  A lab whose answer
    spans tables names them in ``JSON_TABLES`` ({table: columns or None for all}); each row
    then says its ``table``."""
    spec = getattr(lab, "JSON_TABLES", {lab.TABLES[0]: getattr(lab, "JSON", None)})
    out = []
    for name, columns in spec.items():
        df = tables[name]
        cols = [c for c in (columns or df.columns) if c in df.columns]
        tag = {"table": name} if len(spec) > 1 else {}
        out += [
            {**tag, **{k: json_value(v) for k, v in rec.items()}}
            for rec in df[cols].to_dict(orient="records")
        ]
    return out


def table_text(df, columns) -> str:
    import pandas as pd

    cols = [c for c in columns if c in df.columns]
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        return df[cols].to_string(index=False, float_format="%.4g")
