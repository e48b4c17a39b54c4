"""TRL's own per-step gradient noise at several group sizes, against the curve ``gpolab plan``
predicts at the same policy: a repository tool, run in the TRL venv
(``.venv-trl/bin/python -m tools.trl_pergrad``; torch, transformers and trl are imported only to
run TRL).

**The checkpoint.**  TRL's ``GRPOTrainer`` with its defaults (``loss_type = dapo``,
``scale_rewards = group``, one update per generation, dropout on, bf16 autocast on CPU) trains
gpolab's small task (:mod:`gpolab.integrations.trl_task`: a 2-layer GPT-2 from a config, 62
prompts with single-token answers, binary reward) for ``train_steps`` steps at G = ``train_G``,
seed 0, a constant learning rate; its weights are then frozen.

**TRL's gradient, measured.**  At every G of ``gs``, with the same rollouts per step
N = B·G: a trainer on the frozen weights with learning rate 0 (AdamW moves nothing; checked) and
gradient clipping off runs ``draws`` steps, each generating, rewarding and scoring a fresh batch
with TRL's own code and calling its ``training_step`` (``compute_loss``'s backward); the
parameter gradient is read before the optimizer step (:func:`grads`).  From the R draws ĝ_r:
the **noise** V = E‖ĝ − E ĝ‖² (unbiased: Σ‖ĝ_r − ḡ‖²/(R − 1)), the **signal** ‖E ĝ‖²
(unbiased: Σ_{r≠s} ĝ_r·ĝ_s/(R(R − 1))) and the **noise-to-signal ratio** nsr = V/‖E ĝ‖², the
quantity plan's G* minimises (a step size absorbs the estimator's scale, which std scaling
moves with G); 95% percentile-bootstrap intervals over the draws (:func:`draw_stats`).

**plan's curve.**  A trainer at G = ``plan_G`` on the same frozen weights (learning rate 0)
carries ``PlanCallback`` on every group of every step for ``plan_steps`` steps; ``gpolab plan``
on its folder gives G* of the run's estimator with its interval, and its constants (c1, ‖g‖²,
s, a, the Beta difficulty fit) set the transfer model (:mod:`gpolab.theory.gstar_model`), whose
V and nsr per G at N are the predicted curves, for the run's estimator and for loo; the
intervals come from plan's own bootstrap replicates of the constants (:func:`predicted`).

**Comparison** (:func:`compare`): both curves relative to their value at G = ``ref``; the
measured best G (least nsr) and the G not told apart from it (the 95% interval of their nsr
over the best's reaches 1); agree when plan's G* interval holds all of those G, disagree when
it holds none, inconclusive otherwise.  The draws resolve V far better than ‖E ĝ‖² (the
signal is a small difference of large numbers at a few batches' precision), so the measured
nsr may tell few G apart; the task allows an exact answer too (:func:`compare_exact`): its
completion is one token, so the policy at each of the 62 prompts is one softmax and the
estimator's exact V, ‖E ĝ‖² and nsr per G follow from the per-token scores
(:func:`exact_prompts`, :func:`exact_curve`; the model in eval mode, float32: TRL's dropout
and bf16 autocast are not in it, and V/V_exact says how much they add).  Output:
``--csv`` (one row per G) and ``--summary-csv`` (one row: settings, plan's answer, verdict).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from gpolab import validate

COMMAND = "python -m tools.trl_pergrad"
FULL = {
    "gs": (2, 3, 4, 6, 8, 12, 16, 24),
    "rollouts": 48,
    "train_G": 8,
    "train_steps": 100,
    "lr": 3e-3,
    "draws": 250,
    "plan_G": 8,
    "plan_steps": 100,
    "ref": 8,
    "boot": 2000,
}
QUICK = {
    **FULL,
    "gs": (2, 4),
    "rollouts": 8,
    "train_G": 4,
    "train_steps": 4,
    "draws": 10,
    "plan_G": 4,
    "plan_steps": 12,
    "ref": 4,
    "boot": 200,
}
LEVEL = 0.95
SPEC = "trl/grpo[scale_rewards=group]"  # TRL's defaults: loss_type dapo, scale_rewards group
COLUMNS = [
    "G",
    "B",
    "rollouts_per_step",
    "draws",
    "noise",
    "noise_lo",
    "noise_hi",
    "signal",
    "signal_lo",
    "signal_hi",
    "nsr",
    "nsr_lo",
    "nsr_hi",
    "noise_rel",
    "noise_rel_lo",
    "noise_rel_hi",
    "nsr_rel",
    "nsr_rel_lo",
    "nsr_rel_hi",
    "to_best_lo",
    "to_best_hi",
    "pred_noise",
    "pred_noise_rel",
    "pred_noise_rel_lo",
    "pred_noise_rel_hi",
    "pred_nsr_rel",
    "pred_nsr_rel_lo",
    "pred_nsr_rel_hi",
    "loo_nsr_rel",
    "loo_nsr_rel_lo",
    "loo_nsr_rel_hi",
    "exact_noise",
    "exact_signal",
    "exact_nsr",
    "exact_noise_rel",
    "exact_nsr_rel",
]
SUMMARY_COLUMNS = [
    "rollouts_per_step",
    "train_G",
    "train_steps",
    "lr",
    "draws",
    "plan_G",
    "plan_steps",
    "ref",
    "spec",
    "plan_gstar",
    "plan_lo",
    "plan_hi",
    "safe_G",
    "safe_regret",
    "loo_gstar",
    "best",
    "tied",
    "verdict",
    "text",
    "exact_best",
    "exact_plan_excess",
    "exact_safe_excess",
    "exact_verdict",
    "exact_text",
    "trl_version",
]


# ---- statistics (numpy only) --------------------------------------------------------------------
def _moments(K: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(noise, signal) of draws with Gram matrix ``K`` (R, R) counted ``w`` times ((n, R)
    counts summing to R per row: a bootstrap resample; all ones: the draws themselves): the
    signal ‖E ĝ‖² the mean of ĝ·ĝ' over pairs of distinct draws (a resample's repeats of one
    draw left out, which would add its ‖ĝ‖²), the noise the mean ‖ĝ‖² minus it (with all
    ones: Σ‖ĝ_r − ḡ‖²/(R − 1))."""
    R, k = K.shape[0], np.diag(K)
    S = np.einsum("br,rs,bs->b", w, K, w)  # ‖Σ w ĝ‖²
    M = (S - (w * w) @ k) / (R * R - (w * w).sum(1))  # ĝ·ĝ' over pairs of distinct draws
    return w @ k / R - M, M


def draw_stats(grads, *, boot: int = 2000, seed: int = 0) -> dict:
    """Noise V = E‖ĝ − E ĝ‖², signal ‖E ĝ‖² and nsr = V/‖E ĝ‖² of R independent draws ``grads``
    (R, D), unbiased (the R/(R − 1) correction; the signal a U-statistic over pairs), with
    ``reps``: (boot, 3) bootstrap replicates of (noise, signal, nsr) over the draws."""
    g = np.asarray(grads, np.float64)
    R = len(g)
    if R < 3:
        raise validate.ConfigError(f"draws: got {R}; allowed: at least 3")
    K = g @ g.T
    V, M = (float(x[0]) for x in _moments(K, np.ones((1, R))))
    w = np.zeros((boot, R))
    idx = np.random.default_rng(seed).integers(0, R, (boot, R))
    np.add.at(w, (np.arange(boot)[:, None], idx), 1.0)
    v, m = _moments(K, w)
    with np.errstate(divide="ignore", invalid="ignore"):
        reps = np.column_stack([v, m, np.where(m > 0, v / m, np.inf)])
    return {"noise": V, "signal": M, "nsr": V / M if M > 0 else math.inf, "reps": reps}


def _band(x) -> tuple[float, float]:
    """The 95% percentile interval of replicates ``x``; ∞ kept (a replicate whose signal is not
    above 0 has nsr ∞), ∞/∞ (NaN: no order) left out."""
    a, x = (1 - LEVEL) / 2, np.asarray(x, np.float64)
    lo, hi = np.quantile(x[~np.isnan(x)], [a, 1 - a], method="inverted_cdf")
    return float(lo), float(hi)


def summarize(
    stats: dict, s: dict, pred: dict | None = None, exact: dict | None = None
) -> pd.DataFrame:
    """One row per G from :func:`draw_stats` of each G (``stats``: G → its dict): the values,
    their intervals, both relative to G = ``s["ref"]`` (replicates paired by index: the draws
    at two G are independent, so any pairing is), ``to_best_*`` the interval of nsr over the
    measured best G's, plan's predicted columns (``pred``: :func:`predicted`) and the exact
    ones (``exact``: :func:`exact_curve`; NaN without either)."""
    ref, Gs = stats[s["ref"]], sorted(stats)
    best = min(Gs, key=lambda G: (stats[G]["nsr"], G))
    rows = []
    for G in Gs:
        d, r = stats[G], stats[G]["reps"]
        row = {"G": G, "B": s["rollouts"] // G, "rollouts_per_step": s["rollouts"]}
        row["draws"] = s["draws"]
        for j, k in enumerate(("noise", "signal", "nsr")):
            row[k] = d[k]
            row[f"{k}_lo"], row[f"{k}_hi"] = _band(r[:, j])
        for j, k in ((0, "noise"), (2, "nsr")):
            row[f"{k}_rel"] = d[k] / ref[k]
            row[f"{k}_rel_lo"], row[f"{k}_rel_hi"] = _band(_ratio(r[:, j], ref["reps"][:, j]))
        row["to_best_lo"], row["to_best_hi"] = _band(_ratio(r[:, 2], stats[best]["reps"][:, 2]))
        rows.append(row | _predicted_row(pred, G) | _exact_row(exact, G, s["ref"]))
    return pd.DataFrame(rows, columns=COLUMNS)


def _exact_row(exact: dict | None, G: int, ref: int) -> dict:
    keys = [c for c in COLUMNS if c.startswith("exact_")]
    if exact is None:
        return dict.fromkeys(keys, math.nan)
    i, j = list(exact["G"]).index(G), list(exact["G"]).index(ref)
    out = {f"exact_{k}": float(exact[k][i]) for k in ("noise", "signal", "nsr")}
    out |= {f"exact_{k}_rel": float(exact[k][i] / exact[k][j]) for k in ("noise", "nsr")}
    return out


def _ratio(x, y) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # ∞/∞ of two replicates: NaN, left out by _band
        return np.asarray(x, np.float64) / np.asarray(y, np.float64)


def _predicted_row(pred: dict | None, G: int) -> dict:
    keys = [c for c in COLUMNS if c.startswith(("pred_", "loo_"))]
    if pred is None or G not in pred["G"]:
        return dict.fromkeys(keys, math.nan)
    i = list(pred["G"]).index(G)
    return {k: float(pred[k][i]) for k in keys}


def compare(rows, plan: dict) -> dict:
    """The verdict from the per-G rows (dicts or a DataFrame with G, nsr, to_best_lo,
    to_best_hi) and plan's answer (``gstar``, ``lo``, ``hi``: G* of the run's estimator and its
    95% interval; NaN: none): ``best`` (least measured nsr), ``tied`` (the G whose nsr over the
    best's has an interval reaching 1, the best included), ``inside`` (those of ``tied`` in
    plan's interval), ``verdict`` and ``text``, one line: agree when plan's interval holds
    every G of ``tied``, disagree when it holds none, inconclusive when it holds some (the
    draws do not tell plan's G from others outside it), when the draws tell no G apart, or
    when plan gives no interval."""
    rows = rows.to_dict("records") if isinstance(rows, pd.DataFrame) else list(rows)
    best = min(rows, key=lambda r: (r["nsr"], r["G"]))
    tied = [int(r["G"]) for r in rows if r["to_best_lo"] <= 1.0]
    measured = f"measured best G = {int(best['G'])} (least noise-to-signal)"
    if len(tied) > 1:
        others = ", ".join(str(G) for G in tied if G != best["G"])
        measured += f", not told apart from G = {others}"
    out = {"best": int(best["G"]), "tied": tied, "inside": []}
    lo, hi, gstar = (float(plan.get(k, math.nan)) for k in ("lo", "hi", "gstar"))
    if math.isnan(lo) or math.isnan(hi):
        return {**out, "verdict": "inconclusive", "text": f"{measured}; plan gave no interval"}
    where = f"plan's G* = {gstar:.3g} (95% interval {lo:.3g} .. {_end(hi)})"
    if math.isnan(gstar):
        where = f"plan's bound G* >= {lo:.3g} (no estimate)"
    inside = [G for G in tied if lo <= G <= hi]
    out["inside"] = inside
    if len(tied) == len(rows):
        return {
            **out,
            "verdict": "inconclusive",
            "text": f"inconclusive: {measured} (the draws tell no G apart); {where}",
        }
    if not inside:
        return {**out, "verdict": "disagree", "text": f"disagree: {measured}; {where} holds none"}
    held = ", ".join(map(str, inside))
    if len(inside) < len(tied):
        text = f"inconclusive: {measured}; {where} holds G = {held} of them"
        return {**out, "verdict": "inconclusive", "text": text}
    return {**out, "verdict": "agree", "text": f"agree: {measured}; {where} holds G = {held}"}


def compare_exact(rows, plan: dict) -> dict:
    """Plan's answer against the exact per-step curve of the estimator at the checkpoint (rows
    with G and exact_nsr; no sampling error): ``best`` (least exact nsr among the rows' G),
    ``plan_excess``/``safe_excess`` (exact nsr at plan's G* and safe G over the best's, minus 1;
    NaN when that G is not among the rows), ``verdict`` (agree: plan's G* interval holds the
    exact best; disagree: it does not; inconclusive: no interval) and ``text``."""
    rows = rows.to_dict("records") if isinstance(rows, pd.DataFrame) else list(rows)
    nsr = {int(r["G"]): float(r["exact_nsr"]) for r in rows}
    best = min(nsr, key=lambda G: (nsr[G], G))
    lo, hi, gstar, safe = (float(plan.get(k, math.nan)) for k in ("lo", "hi", "gstar", "safe_G"))

    def excess(G: float) -> float:
        return nsr[int(G)] / nsr[best] - 1 if not math.isnan(G) and int(G) in nsr else math.nan

    out = {"best": best, "plan_excess": excess(gstar), "safe_excess": excess(safe)}
    said = f"exact best G = {best} of the G measured"
    if math.isnan(lo) or math.isnan(hi):
        return {**out, "verdict": "inconclusive", "text": f"{said}; plan gave no interval"}
    where = f"plan's G* interval {lo:.3g} .. {_end(hi)}"
    cost = (
        ""
        if math.isnan(out["plan_excess"])
        else (f"; plan's G* = {gstar:.3g} has {100 * out['plan_excess']:.1f}% more noise-to-signal")
    )
    if lo <= best <= hi:
        return {**out, "verdict": "agree", "text": f"agree: {said}; {where} holds it{cost}"}
    return {
        **out,
        "verdict": "disagree",
        "text": f"disagree: {said}; {where} does not hold it{cost}",
    }


def _end(x: float) -> str:
    return "∞" if math.isinf(x) else f"{x:.3g}"


# ---- plan's curve (gpolab, numpy) ---------------------------------------------------------------
def curve(spec, consts, alpha: float, beta: float, N: float, Gs) -> dict:
    """The transfer model's V (absolute, the gradient's units) and nsr per G of ``Gs`` for
    estimator ``spec`` at N responses per step, from loo's constants ``consts`` = (c1, ‖g‖², s,
    a); None when the model cannot be set from them."""
    from gpolab.theory import gstar_model

    m = gstar_model.fit(*consts, alpha, beta)
    if isinstance(m, str):
        return None
    t = gstar_model.estimator_terms(spec, alpha, beta, grid=tuple(Gs))
    nsr = gstar_model.criteria(t, m, N)["nsr"]
    return {"G": t.G, "noise": nsr * t.K1**2, "nsr": nsr}


def predicted(spec, consts, replicates, alpha, beta, N, Gs, ref: int) -> dict:
    """Plan's predicted columns per G: ``pred_noise`` (V), ``pred_noise_rel`` and
    ``pred_nsr_rel`` (relative to G = ``ref``) for ``spec`` and ``loo_nsr_rel`` for loo, each
    with a 95% percentile interval over the replicates of the constants (replicates the model
    cannot be set from are left out)."""
    out = {}
    for name, which in ((spec, "pred"), ("loo", "loo")):
        point = curve(name, consts, alpha, beta, N, Gs)
        out["G"] = point["G"]
        i = list(point["G"]).index(ref)
        reps = [c for r in replicates if (c := curve(name, r, alpha, beta, N, Gs)) is not None]
        keys = ("noise", "nsr") if which == "pred" else ("nsr",)
        if which == "pred":
            out["pred_noise"] = point["noise"]
        for k in keys:
            out[f"{which}_{k}_rel"] = point[k] / point[k][i]
            rel = np.array([c[k] / c[k][i] for c in reps])
            a = (1 - LEVEL) / 2
            lo, hi = np.quantile(rel, [a, 1 - a], axis=0, method="inverted_cdf")
            out[f"{which}_{k}_rel_lo"], out[f"{which}_{k}_rel_hi"] = lo, hi
    return out


def plan_inputs(run_folder) -> dict:
    """What ``gpolab plan`` reads from a PlanCallback folder, through the plan lab's own steps:
    loo's constants (c1, ‖g‖², s, a), their bootstrap replicates, the Beta fit (α, β) and the
    log's responses per step (plan's defaults: its seed, its bootstrap)."""
    from gpolab import configs
    from gpolab.integrations import rollouts
    from gpolab.labs.plan import gstar_rows, lab

    cfg, _ = lab.with_callback_files(configs.resolve(lab.Config, table={"log": str(run_folder)}))
    log = lab.binarized(cfg, lab.load(cfg))
    levels = rollouts.binary_levels(log)
    gs = gstar_rows.gstar_row(cfg, log, levels, lab.read_norms(cfg.grad_norms))
    return {"consts": [gs[f"gstar_{k}"] for k in ("c1", "g_sq", "s", "a")], **gs}


def plan_answer(summary: dict) -> dict:
    """From plan.json: the run's estimator's G* and interval (loo's where plan gives none), its
    safe G, loo's G*, and the constants the predicted curve needs."""
    key = "estimator_gstar" if summary.get("estimator_spec") else "gstar"

    def num(k):
        x = summary.get(k)
        return math.nan if x is None else float(x)

    return {
        "spec": summary.get("estimator_spec") or "loo",
        "gstar": num(key),
        "lo": num(f"{key}_lo"),
        "hi": num(f"{key}_hi"),
        "safe_G": num("estimator_safe_G" if key == "estimator_gstar" else "safe_G"),
        "safe_regret": num("estimator_safe_regret" if key == "estimator_gstar" else "safe_regret"),
        "loo_gstar": num("gstar"),
    }


def exact_curve(spec, prompts: dict, N: float, Gs) -> dict:
    """The estimator's exact per-step V and nsr per G at N responses per step (B = N/G prompts
    drawn uniformly, iid) from each prompt's exact quantities (``prompts``: arrays over prompts
    of V (success probability), g (P, D) = E[∇ log π · Z], S2 = E‖∇ log π‖² and
    e_wz2 = E[‖∇ log π‖² Z]; :func:`exact_prompts`), through the estimator's count tables
    (:func:`gpolab.theory.exact.moments`): E ĝ = E_x κ_G(x) g_x, V = (E_x E‖ĝ_x‖² − ‖E ĝ‖²)/B."""
    from gpolab.theory import exact

    g = np.asarray(prompts["g"], np.float64)
    gsq, f = (g * g).sum(1), np.full(len(g), 1 / len(g))
    out = {"G": np.array(Gs), "noise": [], "signal": []}
    for G in Gs:
        mo = exact.moments(
            exact.registry_table(spec, G), G, prompts["V"], gsq, prompts["S2"], prompts["e_wz2"]
        )
        m = (f * mo.kappa) @ g
        out["noise"].append(max(float(f @ mo.second_moment - m @ m), 0.0) * G / N)
        out["signal"].append(float(m @ m))
    noise, signal = np.array(out["noise"]), np.array(out["signal"])
    return {**out, "noise": noise, "signal": signal, "nsr": noise / signal}


# ---- TRL (torch, transformers, trl) ------------------------------------------------------------
def grads(trainer, keep_inputs: bool = False):
    """A trainer callback keeping TRL's parameter gradient of every step (``.rows``), read
    before the optimizer step (after ``training_step``'s backward; clipping is off in
    :func:`trainer`); ``keep_inputs``: also the last batch ``compute_loss`` received
    (``.inputs``)."""
    from transformers import TrainerCallback

    from gpolab.integrations.trl import _flat

    params = [p for p in trainer.model.parameters() if p.requires_grad]

    class Grads(TrainerCallback):
        rows, inputs = [], None

        def on_pre_optimizer_step(self, args, state, control, **kw):
            self.rows.append(_flat([p.grad for p in params], params).double().cpu().numpy())

    out = Grads()
    out.rows = []
    if keep_inputs:
        loss = trainer.compute_loss

        def kept(model, inputs, *a, **kw):
            out.inputs = inputs
            return loss(model, inputs, *a, **kw)

        trainer.compute_loss = kept
    return out


def trainer(out, G: int, steps: int, s: dict, *, lr: float, state=None, **config):
    """TRL's trainer on the task at G (B = N/G prompts per step), its weights ``state`` (a state
    dict; None: seed 0's initial weights), clipping off, a constant learning rate."""
    import torch
    from transformers import PrinterCallback

    from gpolab.integrations.trl_task import build

    torch.set_num_threads(1)
    t = build(
        out,
        G=G,
        groups=s["rollouts"] // G,
        steps=steps,
        lr=lr,
        seed=s.get("seed", 0),
        lr_scheduler_type="constant",
        log_completions=False,
        max_grad_norm=0.0,
        **config,
    )
    t.remove_callback(PrinterCallback)
    if state is not None:
        t.model.load_state_dict(state)
    return t


def checkpoint(out: Path, s: dict) -> dict:
    """The frozen weights: ``train_steps`` steps of TRL at G = ``train_G`` (a state dict)."""
    t = trainer(out / "train", s["train_G"], s["train_steps"], s, lr=s["lr"])
    t.train()
    return {k: v.detach().clone() for k, v in t.model.state_dict().items()}


def frozen(t, state) -> None:
    """Learning rate 0 moved nothing: the trainer's weights are still ``state``."""
    for k, v in t.model.state_dict().items():
        if not bool((v == state[k]).all()):
            raise RuntimeError(f"the frozen weights moved: {k}")


def measure(out: Path, G: int, state: dict, s: dict, **config) -> np.ndarray:
    """(draws, D) TRL's gradients at G on the frozen weights, one per fresh batch."""
    t = trainer(out / f"G{G}", G, s["draws"], s, lr=0.0, state=state, **config)
    kept = grads(t)
    t.add_callback(kept)
    t.train()
    frozen(t, state)
    return np.stack(kept.rows)


def plan_log(out: Path, state: dict, s: dict) -> Path:
    """PlanCallback's folder at G = ``plan_G`` on the frozen weights (every group measured) and
    `gpolab plan`'s output on it (``out/plan``)."""
    from gpolab.integrations.trl import PlanCallback
    from gpolab.runner.cli import main as gpolab

    folder = out / "plan-log"
    t = trainer(folder, s["plan_G"], s["plan_steps"], s, lr=0.0, state=state)
    B = s["rollouts"] // s["plan_G"]
    t.add_callback(PlanCallback(t, groups_per_step=B, every=1))
    t.train()
    frozen(t, state)
    args = ["plan", str(folder), "--out", str(out / "plan")] + (["--quick"] if s["quick"] else [])
    if gpolab(args) != 0:
        raise RuntimeError(f"gpolab {' '.join(args)} failed")
    return folder


def exact_prompts(state: dict, first: int | None = None) -> dict:
    """Each prompt's exact quantities at the frozen weights (:func:`exact_curve`): the task's
    completion is one token, so the policy at a prompt is one softmax over the vocabulary; the
    per-token scores ∇ log π(y | x) by autograd, one backward pass per token (the model in eval
    mode, float32: no dropout, no autocast); ``first``: only the task's first prompts."""
    import torch

    from gpolab.integrations.trl import _flat
    from gpolab.integrations.trl_task import VOCAB, model, task

    net = model(0)
    net.load_state_dict(state)
    net.eval()
    params = [p for p in net.parameters() if p.requires_grad]
    prompts, targets = task()
    prompts = prompts[:first]
    tokens = sorted(VOCAB, key=VOCAB.get)
    out = {"V": [], "g": [], "S2": [], "e_wz2": []}
    for x in prompts:
        logp = net(input_ids=torch.tensor([[VOCAB[c] for c in x]])).logits[0, -1].log_softmax(-1)
        S = np.stack(
            [
                _flat(torch.autograd.grad(logp[y], params, retain_graph=True), params).numpy()
                for y in range(len(tokens))
            ]
        ).astype(np.float64)
        pi = logp.detach().exp().double().numpy()
        z = np.array([float(tok in targets[x]) for tok in tokens])
        q = (S * S).sum(1)
        out["V"].append(pi @ z)
        out["g"].append((pi * z) @ S)
        out["S2"].append(pi @ q)
        out["e_wz2"].append((pi * z) @ q)
    return {k: np.array(v) for k, v in out.items()}


def _version(package: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return ""


def settings(args) -> dict:
    """The run's settings from the flags (quick or full defaults, each overridable), checked."""
    s = dict(QUICK if args.quick else FULL)
    for k in ("rollouts", "train_G", "train_steps", "lr", "draws", "plan_G", "plan_steps", "ref"):
        if getattr(args, k) is not None:
            s[k] = getattr(args, k)
    if args.gs:
        s["gs"] = tuple(sorted(set(args.gs)))
    validate.integer("draws", s["draws"], 3)
    validate.integer("train_steps", s["train_steps"], 1)
    validate.integer("plan_steps", s["plan_steps"], 2)
    validate.integer("plan_G", s["plan_G"], 3)  # plan's U-statistics need groups of >= 3
    if s["ref"] not in s["gs"]:
        raise validate.ConfigError(f"--ref {s['ref']}: allowed: one of --gs {s['gs']}")
    for G in (*s["gs"], s["train_G"], s["plan_G"]):
        validate.integer("G", G, 2)
        if s["rollouts"] % G or s["rollouts"] // G < 1:
            raise validate.ConfigError(
                f"--rollouts {s['rollouts']} is not a multiple of G = {G} "
                "(the same rollouts per step at every G)"
            )
    if s["rollouts"] // s["plan_G"] < 2:
        raise validate.ConfigError(
            f"--plan-G {s['plan_G']}: plan needs >= 2 groups per step (--rollouts {s['rollouts']})"
        )
    if not 0 < s["lr"] < 1:
        raise validate.ConfigError(f"--lr {s['lr']}: allowed: 0 < lr < 1")
    return {**s, "quick": bool(args.quick)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="CI size: G 2, 4; 8 rollouts; 10 draws")
    p.add_argument("--gs", type=int, nargs="+", help=f"group sizes (default {FULL['gs']})")
    p.add_argument("--rollouts", type=int, help=f"rollouts per step B·G ({FULL['rollouts']})")
    p.add_argument("--train-G", type=int, help=f"G of the training ({FULL['train_G']})")
    p.add_argument("--train-steps", type=int, help=f"training steps ({FULL['train_steps']})")
    p.add_argument("--lr", type=float, help=f"training learning rate ({FULL['lr']})")
    p.add_argument("--draws", type=int, help=f"batches per G ({FULL['draws']})")
    p.add_argument("--plan-G", type=int, help=f"G of plan's log ({FULL['plan_G']})")
    p.add_argument("--plan-steps", type=int, help=f"steps of plan's log ({FULL['plan_steps']})")
    p.add_argument("--ref", type=int, help=f"G the curves are relative to ({FULL['ref']})")
    p.add_argument("--out", default="results/trl_pergrad", help="the runs' folders")
    p.add_argument("--csv", default="docs/data/trl_pergrad.csv", help="per-G table")
    p.add_argument("--summary-csv", default="docs/data/trl_pergrad_summary.csv", help="summary")
    args = p.parse_args(argv)
    try:
        s = settings(args)
    except validate.ConfigError as e:
        print(f"{COMMAND}: {e}", file=sys.stderr)
        return 2
    out, say = Path(args.out), lambda m: print(m, file=sys.stderr)
    state = checkpoint(out, s)
    say(f"checkpoint: {s['train_steps']} steps at G = {s['train_G']}")
    exact = exact_curve(SPEC, exact_prompts(state), s["rollouts"], s["gs"])
    folder = plan_log(out, state, s)
    plan = plan_answer(json.loads((out / "plan" / "plan.json").read_text()))
    inputs = plan_inputs(folder)
    pred = predicted(
        plan["spec"],
        inputs["consts"],
        inputs["replicates"],
        *_beta(out / "plan"),
        s["rollouts"],
        s["gs"],
        s["ref"],
    )
    say(f"plan: {plan}")
    stats = {}
    for G in s["gs"]:
        stats[G] = draw_stats(measure(out, G, state, s), boot=s["boot"], seed=G)
        say(f"G = {G}: noise {stats[G]['noise']:.4g}, nsr {stats[G]['nsr']:.4g}")
    rows = summarize(stats, s, pred, exact)
    c, e = compare(rows, plan), compare_exact(rows, plan)
    summary = {
        **{k: s[k] for k in ("train_G", "train_steps", "lr", "draws", "plan_G", "plan_steps")},
        "rollouts_per_step": s["rollouts"],
        "ref": s["ref"],
        "spec": plan["spec"],
        **{f"plan_{k}": plan[k] for k in ("gstar", "lo", "hi")},
        **{k: plan[k] for k in ("safe_G", "safe_regret", "loo_gstar")},
        "best": c["best"],
        "tied": " ".join(map(str, c["tied"])),
        "verdict": c["verdict"],
        "text": c["text"],
        "exact_best": e["best"],
        "exact_plan_excess": e["plan_excess"],
        "exact_safe_excess": e["safe_excess"],
        "exact_verdict": e["verdict"],
        "exact_text": e["text"],
        "trl_version": _version("trl"),
    }
    for path, df in (
        (args.csv, rows),
        (args.summary_csv, pd.DataFrame([summary], columns=SUMMARY_COLUMNS)),
    ):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        df.to_csv(path, index=False)
    print(rows.to_string(index=False))
    print(c["text"])
    print(e["text"])
    return 0


def _beta(plan_out: Path) -> tuple[float, float]:
    """The Beta difficulty fit (α, β) of plan's pooled summary row."""
    row = pd.read_csv(plan_out / "summary.csv").iloc[-1]
    return float(row["a"]), float(row["b"])


if __name__ == "__main__":
    sys.exit(main())
