"""The off-policy lab's tables built from its kernel's arrays: every statistic of
:class:`gpolab.kernels.offpolicy.Summary` is an (E, K, m) array over (η, staleness, update);
the ``updates`` table reads them as they are, the ``results`` table as epoch averages over the
first m updates (:func:`epoch_at`), and :func:`frame` lays a table's columns over the product
index, one row per cell of it."""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
import pandas as pd

from gpolab.kernels import offpolicy as kernel
from gpolab.kernels.splits import split_se


class At(NamedTuple):
    """How a table reads the kernel's (E, K, m) arrays (:class:`gpolab.kernels.offpolicy.Summary`):
    ``of`` maps a pooled array to the table's, ``se`` per-split arrays (S, E, K, m) to their SE,
    and ``moments`` says whether an MSE's SE comes from the per-seed moments (one update) or
    from the splits (an epoch's average)."""

    of: object
    se: object
    moments: bool


def _same(x):
    return x


def _epochs(ms: tuple, x):
    """(..., m) → (..., len(ms)): the average of the first mm updates, for each mm of ``ms``."""
    return np.stack([x[..., :mm].mean(-1) for mm in ms], -1)


def _epoch_se(ms: tuple, x):
    return split_se(_epochs(ms, x))


UPDATE = At(_same, split_se, True)


def epoch_at(ms: tuple) -> At:
    return At(functools.partial(_epochs, ms), functools.partial(_epoch_se, ms), False)


def stats_columns(s, at: At, fields: str, prefix: str = "", suffix: str = "") -> dict:
    """Columns ``prefix + field + suffix`` (``_se`` last) of the split statistics ``s``
    (:class:`gpolab.kernels.splits.Splits`) for each of ``fields`` (bias_sq, variance, mse and
    their ``_se``) as table ``at`` reads them."""
    out = {}
    for field in fields.split():
        stat = field.removesuffix("_se")
        name = f"{prefix}{stat}{suffix}" + "_se" * (field != stat)
        if field == stat:
            out[name] = at.of(getattr(s.pooled, stat))
        elif stat == "mse" and at.moments:
            out[name] = at.of(s.mse_se)
        else:
            out[name] = at.se(getattr(s.split, stat))
    return out


def columns(s: kernel.Summary, at: At) -> dict:
    """Every statistic column of a table (``updates`` or ``results``) over its index."""
    cols = stats_columns(s.main, at, "bias_sq bias_sq_se variance mse mse_se")
    for name, stats in (("_g", s.g), ("_dagger", s.dagger)):
        cols |= stats_columns(stats, at, "bias_sq mse mse_se", suffix=name)
    cols |= stats_columns(s.paired, at, "bias_sq bias_sq_se", suffix="_paired")
    cols |= {"cos": at.of(s.cos), "snr": at.of(s.snr), "mse_fresh": at.of(s.fresh)}
    cols["excess_mse"] = cols["mse"] / cols["mse_fresh"] - 1
    sc = s.scaled
    rule, fresh = at.of(sc.rule), at.of(sc.fresh)
    if not at.moments:  # an epoch: the excess's SE from the splits' own averages (paired)
        cols["excess_mse_se"] = split_se(at.of(s.main.split.mse) / at.of(s.fresh_split))
    cols |= {"scaled_mse": rule, "scaled_mse_fresh": fresh, "excess_scaled": rule / fresh - 1}
    if not at.moments:
        cols["excess_scaled_se"] = split_se(at.of(sc.rule_split) / at.of(sc.fresh_split))
    cols["best_scale"] = at.of(sc.best_scale)
    return cols | {"clip_frac": at.of(s.clip_frac), "log_ratio": at.of(s.log_ratio)}


def kl_columns(s: kernel.Summary, at: At) -> dict:
    """The KL estimator's gradient against ∇KL (rows with a KL term)."""
    if s.kl is None:
        return {}
    cols = stats_columns(s.kl, at, "bias_sq bias_sq_se mse", prefix="kl_")
    return cols | {"kl_grad_sq": at.of(s.kl_grad_sq)}


def _flat(shape: tuple, x):
    return np.broadcast_to(x, shape).reshape(-1)


def frame(
    table: str, base: dict, index: dict, cols: dict, theory=None, first=False, kl=None
) -> list[dict]:
    """The rows of ``table`` over the product ``index`` (arrays broadcast to one shape, read in C
    order): ``cols``, then ``theory``'s columns on the rows where ``first`` holds, then ``kl``
    (the asynchronous lab's tables have neither)."""
    shape = np.broadcast_shapes(*(np.shape(v) for v in (*index.values(), *cols.values())))
    flat = functools.partial(_flat, shape)
    data = {k: flat(v) for k, v in (index | cols).items()}
    at = flat(first)
    if theory and at.any():
        blank = {k: None if isinstance(v, str) else np.nan for k, v in theory.items()}
        data |= {k: np.where(at, v, blank[k]) for k, v in theory.items()}
    data |= {k: flat(v) for k, v in (kl or {}).items()}
    return pd.DataFrame({"table": table, **base, **data}).to_dict("records")
