"""Which mismatch correction: the mismatch lab's ``decision`` table from its ``results``
(:mod:`gpolab.labs.mismatch.lab`): per (T, mismatch), the least MSE at the measured batch and at
``LARGE_B`` prompts, the best direction, and where TRL's and verl's defaults and the user's own
config land."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from gpolab.kit.tables import table_text

# the frameworks' defaults, as the decision table names them: TRL's vLLM IS mode (GRPOConfig
# vllm_importance_sampling_mode = sequence_mask, cap 3) and verl's (rollout_is off: none)
DEFAULTS = {"trl": "trl/sequence_mask", "verl": "none"}
LARGE_B = 512  # the decision's large batch: prompts per step of a production run


def at_batch(results: pd.DataFrame, prompts: int) -> pd.DataFrame:
    """The rows' MSE at a batch of ``prompts`` prompts (G responses each), with its SE: where the
    mean update does not depend on the batch (``large_from`` "exact": a fixed denominator) the
    batch is iid prompt groups, so bias² stays and the variance falls as B/``prompts`` exactly;
    where it does (verl's rejection under token-mean), the measurement at ``LARGE_B`` prompts
    (``prompts`` must then be ``LARGE_B``)."""
    f = results["B"] / prompts
    out = results.copy()
    out["mse"] = results["bias_sq"] + f * results["variance"]
    out["mse_se"] = np.hypot(results["bias_sq_se"], f * results["variance_se"])
    if "large_from" in results:
        measured = (results["large_from"] == "measured").to_numpy()
        if measured.any() and prompts != LARGE_B:
            raise ValueError(f"batch-dependent rows are measured at {LARGE_B} prompts only")
        out.loc[measured, "mse"] = results.loc[measured, "mse_large"]
        out.loc[measured, "mse_se"] = results.loc[measured, "mse_large_se"]
    out["rel_mse"] = out["mse"] / results["g_sq"]
    return out


def decide(small: pd.DataFrame, large: pd.DataFrame) -> dict:
    """One cell's choices from its rows at the measured batch (``small``) and at the large one
    (``large``, :func:`at_batch`), each with ``correction``, ``mse``, ``mse_se``, ``rel_mse``,
    ``cos``, ``cos_se``, ``scale``, ``scale_se``: the least MSE at each batch and the best
    direction (largest cos among means resolved along g: scale > 2 SE).  Every registry entry is
    a configuration its framework runs (verl's ratio losses against μ: its default v1 trainer in
    bypass mode), so every row is a candidate."""
    resolved = (small["scale"] > 2 * small["scale_se"]) & np.isfinite(small["cos"])
    least = leader(small, "mse", "mse_se", lower=True)
    big = leader(large, "mse", "mse_se", lower=True)
    best = leader(small[resolved.to_numpy()], "cos", "cos_se", lower=False)
    return {
        "least_mse": least["names"],
        "least_mse_rel": least["rel_mse"],
        "least_mse_cos": least["cos"],
        "least_mse_lead": least["lead"],
        "least_mse_large": big["names"],
        "least_mse_large_rel": big["rel_mse"],
        "least_mse_large_lead": big["lead"],
        "best_cos": best["names"],
        "best_cos_value": best["cos"],
        "best_cos_se": best["cos_se"],
        "best_cos_rel_mse": best["rel_mse"],
        "best_cos_lead": best["lead"],
    }


def decision(results: pd.DataFrame, large: int = LARGE_B) -> pd.DataFrame:
    """Per (T, mismatch): :func:`decide` at the measured batch and at ``large`` prompts (and
    whether each choice leads the runner-up by more than one SE of either), what TRL's and
    verl's defaults give there and, where a run's own config was given, its place in the MSE
    order."""
    if results.empty:
        return pd.DataFrame()
    rows = []
    for (T, spec), g in results.groupby(["T", "mismatch"], sort=False):
        row = {
            "T": int(T),
            "mismatch": spec,
            "mismatch_kl_seq": float(g["mismatch_kl_seq"].iloc[0]),
            "mismatch_chi2_seq": float(g["mismatch_chi2_seq"].iloc[0]),
            "large_B": large,
            **decide(g, at_batch(g, large)),
        }
        for who, name in (*DEFAULTS.items(), *((("yours", None),) if g["yours"].any() else ())):
            at = g[g["yours"]] if who == "yours" else g[g["correction"] == name]
            if at.empty:
                continue
            r = at.iloc[0]
            if who == "yours":
                row["yours"] = r["correction"]
            row[f"{who}_rel_mse"] = float(r["rel_mse"])
            row[f"{who}_rel_mse_large"] = float(at_batch(at.iloc[:1], large)["rel_mse"].iloc[0])
            row[f"{who}_cos"] = float(r["cos"])
            row[f"{who}_scale"] = float(r["scale"])
            withheld = not np.isfinite(r["mse"])  # an unresolved row has no MSE to rank
            row[f"{who}_mse_rank"] = math.nan if withheld else int((g["mse"] < r["mse"]).sum()) + 1
        rows.append(row)
    return pd.DataFrame(rows)


def leader(g: pd.DataFrame, col: str, se: str, *, lower: bool) -> dict:
    """The best row of ``g`` by ``col``: its name (ties, the same numbers, joined by " = "), its
    rel_mse, cos and cos SE, and whether it leads the next different row by more than one SE of
    either ("clear") or not ("within 1 SE of ...")."""
    if g.empty:
        nan = math.nan
        return {"names": "none resolved", "rel_mse": nan, "cos": nan, "cos_se": nan, "lead": ""}
    g = g.sort_values(col, ascending=lower)
    top = g.iloc[0]
    same = np.isclose(g[col], top[col], rtol=1e-9, atol=0.0)
    lead = "—"
    if (~same).any():
        nxt = g[~same].iloc[0]
        clear = abs(nxt[col] - top[col]) > max(top[se], nxt[se])
        lead = "clear" if clear else f"within 1 SE of {nxt['correction']}"
    return {
        "names": " = ".join(g[same]["correction"]),
        "rel_mse": float(top["rel_mse"]),
        "cos": float(top["cos"]),
        "cos_se": float(top["cos_se"]),
        "lead": lead,
    }


DECISION = (  # the decision table's printed columns
    "T mismatch mismatch_kl_seq least_mse least_mse_rel least_mse_cos least_mse_lead "
    "least_mse_large least_mse_large_rel best_cos best_cos_value best_cos_lead trl_rel_mse "
    "trl_rel_mse_large trl_cos verl_rel_mse verl_rel_mse_large verl_cos yours_rel_mse "
    "yours_rel_mse_large yours_cos yours_mse_rank"
).split()


def notes(tables: dict) -> list[str]:
    """The decision table's lines, and the rows μ's draws cannot resolve."""
    dec = tables["decision"]
    lines = [
        "",
        "Which correction (rel_mse = MSE/|g|^2 at the measured batch; _large: at "
        f"{LARGE_B} prompts, bias^2 + variance*B/{LARGE_B} (exact where the mean update does not "
        f"depend on the batch), measured at {LARGE_B} prompts for verl's rejections (their "
        "token-mean counts the batch's kept tokens); cos of the mean estimate with g; "
        f"trl: TRL's default {DEFAULTS['trl']}, verl: verl's default {DEFAULTS['verl']}):",
        table_text(dec, [c for c in DECISION if c in dec]),
    ]
    res = tables.get("results", pd.DataFrame())
    if "resolved" in res and (res["resolved"] != "yes").any():
        lines += [
            "",
            "Unresolved by draws from the sampler (bias^2, cos and scale from draws of pi with "
            "the bounded weight w*mu/pi; variance and MSE withheld):",
            table_text(res[res["resolved"] != "yes"], ["T", "mismatch", "correction", "resolved"]),
        ]
    return lines
