"""The files a training run leaves for ``gpolab plan`` (framework-free: numpy, pandas).

Under ``<output_dir>/gpolab/``:

* ``rollouts.parquet``: one row per response of every group of every training step: ``step``,
  ``prompt``, ``group`` (unique per group in the run), ``reward`` and ``proxy`` = ‖∇θ log πθ(y|x)‖²
  of the whole response (NaN where it was not measured: only the sampled groups carry it);
  ``exact_proxy`` and ``logit_proxy`` (verl's forward-only W, where a hook measured it): then
  ``proxy`` is the exact norm where there is one, else W times k = Σq/ΣW over the responses
  with both (``run.json``: ``proxy_scale``, ``proxy_scale_responses``); ``pair_score`` on the
  exactly measured groups (:func:`gpolab.theory.gstar.pair_scores`, from the inner products of
  the responses' scores: c1 with less variance);
* ``grad_norms.csv``: ``step``, ``batch`` (prompts B), ``grad_norm`` = ‖ĝ_B‖ of the plain
  leave-one-out estimate (1/(B·G)) Σ A_loo ∇ log π over B of the step's sampled groups (one row
  per disjoint run of B groups: :func:`batch_norms`);
* ``run.json``: the trainer's settings that decide which gradient it follows (loss type, reward
  scaling, group size, batch sizes, KL weight), the framework's version and the hook's own
  seconds against the training's (its overhead).

``gpolab plan OUTPUT_DIR`` reads them (:func:`find`).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import numpy as np

from gpolab.validate import ConfigError

FOLDER = "gpolab"
ROLLOUTS, NORMS, RUN = "rollouts.parquet", "grad_norms.csv", "run.json"


def batch_sizes(n: int) -> list[int]:
    """The batch sizes 1, 2, 4, … up to ``n`` groups (the gradient-norm rows' B)."""
    return [2**k for k in range(n.bit_length()) if 2**k <= n]


def batch_norms(group_grads: np.ndarray, sizes) -> list[tuple[int, float]]:
    """(B, ‖mean of B per-group vectors‖) for each B in ``sizes``, one row per disjoint run of B
    consecutive groups of the step's ``group_grads`` (n_groups, D): B = 1 gives a row per group.
    A per-group vector is (1/G) Σ_g A_g ∇ log π(y_g), so a row is ‖ĝ_B‖ of the plain
    leave-one-out estimate over B groups, E‖ĝ_B‖² = ‖g‖² + T/B."""
    n = len(group_grads)
    return [
        (int(B), float(np.linalg.norm(group_grads[i : i + B].mean(0))))
        for B in sizes
        for i in range(0, n - B + 1, B)
    ]


class Writer:
    """Accumulates rows in memory and rewrites the three files (small: one row per response)."""

    def __init__(self, output_dir, settings: dict):
        self.dir = Path(output_dir) / FOLDER
        self.dir.mkdir(parents=True, exist_ok=True)
        self.rows: list[dict] = []
        self.norms: list[dict] = []
        self.settings = dict(settings)
        self.seconds = {"hook": 0.0, "train": 0.0}
        self._groups = 0

    def add_groups(
        self, step: int, prompts, rewards: np.ndarray, proxy: np.ndarray, logit=None, pairs=None
    ) -> None:
        """One step's groups: ``prompts`` (n,), ``rewards``, ``proxy`` (exact score norms),
        ``logit`` (verl's forward-only W, optional) and ``pairs`` (the exact groups'
        :func:`gpolab.theory.gstar.pair_scores`, optional) (n, G) (NaN: not measured)."""
        nan = np.full(np.shape(proxy), np.nan)
        logit = nan if logit is None else logit
        pairs = nan if pairs is None else pairs
        for x, z, q, w, u in zip(prompts, rewards, proxy, logit, pairs, strict=True):
            self.rows += [
                {
                    "step": int(step),
                    "prompt": str(x),
                    "group": self._groups,
                    "reward": float(r),
                    "exact_proxy": float(p),
                    "logit_proxy": float(v),
                    "pair_score": float(c),
                }
                for r, p, v, c in zip(z, q, w, u, strict=True)
            ]
            self._groups += 1

    def proxy_scale(self) -> tuple[float, int]:
        """(k, responses): k = Σq/ΣW over the responses with both an exact score norm q and
        verl's W (NaN, 0 without any): the scale that puts W in the gradient's coordinates."""
        both = [(r["exact_proxy"], r["logit_proxy"]) for r in self.rows]
        both = [(q, w) for q, w in both if np.isfinite(q) and np.isfinite(w)]
        if not both:
            return float("nan"), 0
        q, w = np.array(both).T
        return float(q.sum() / w.sum()) if w.sum() > 0 else float("nan"), len(both)

    def add_norms(self, step: int, pairs) -> None:
        self.norms += [{"step": int(step), "batch": B, "grad_norm": v} for B, v in pairs]

    def flush(self) -> None:
        """Rewrite all three files."""
        self.write_rows()
        self.write_run()

    def frame(self):
        """The rollouts as ``rollouts.parquet`` holds them (``proxy`` filled: q where measured,
        k·W elsewhere, k from the responses with both)."""
        import pandas as pd

        cols = ["step", "prompt", "group", "reward", "exact_proxy", "logit_proxy", "pair_score"]
        rows = pd.DataFrame(self.rows, columns=cols)
        k, n = self.proxy_scale()
        if n:
            self.settings |= {"proxy_scale": k, "proxy_scale_responses": n}
        q, w = rows["exact_proxy"], rows["logit_proxy"]
        rows.insert(4, "proxy", q.where(q.notna(), k * w if n else np.nan))
        return rows

    def write_rows(self) -> None:
        """The rollouts and gradient norms (the files that grow with the run), and in
        ``settings["decision"]`` whether they decide G* yet (:func:`decision`)."""
        import pandas as pd

        rows = self.frame()
        replace(self.dir / ROLLOUTS, lambda tmp: rows.to_parquet(tmp, index=False))
        norms = pd.DataFrame(self.norms, columns=["step", "batch", "grad_norm"])
        replace(self.dir / NORMS, lambda tmp: norms.to_csv(tmp, index=False))
        self.settings["decision"] = decision(rows, norms)

    def write_run(self) -> None:
        """``run.json``: the settings and the seconds so far (small)."""
        run = {
            **self.settings,
            "seconds": self.seconds,
            "overhead": self.seconds["hook"] / max(self.seconds["train"], 1e-9),
        }
        text = json.dumps(run, indent=1, default=str)
        replace(self.dir / RUN, lambda tmp: tmp.write_text(text))


def replace(path: Path, write) -> None:
    """``write(tmp)`` to a temporary name beside ``path``, then rename it onto ``path``: a
    trainer killed mid-write leaves the previous whole file, never a cut-off one (the name
    follows gpolab.kit.output.atomic's, whose stale-file sweep knows it; the integrations
    sit below the runner, so they cannot import it)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def decision(rows, norms, boot: int = 200) -> dict:
    """Whether the run's files so far decide loo's G* as ``gpolab plan`` estimates it
    (:func:`gpolab.theory.gstar.gstar`, clustered by prompt, ``boot`` replicates), and if not,
    about how many measured groups would: the bootstrap SE of c1 falls like 1/√groups, so
    resolving c1 = z·SE above 0 at 95% takes (1.96/z)² times the groups measured so far
    (gpolab's rule of thumb, as plan's recommendation; ``None`` when c1 is not above 0 at all),
    and at this run's measuring rate that many more steps.  Decided or not, ``safe_G`` and
    ``safe_regret``: loo's G with the least worst-case noise excess over the best G at the run's
    responses per step, over the joint 95% region of the constants
    (:func:`gpolab.theory.gstar.safe_g`)."""
    from gpolab.theory import gstar

    f, G = gstar.measured(rows)
    out = {"decided": False, "gstar": None, "groups_measured": int(f["group"].nunique())}
    steps = int(rows["step"].nunique()) if len(rows) else 0
    if out["groups_measured"] < 2 or norms["batch"].nunique() < 2:
        return {**out, "reason": "fewer than 2 measured groups or gradient norms at < 2 sizes"}
    res = gstar.gstar(
        f["reward"].to_numpy(float),
        f["proxy"].to_numpy(float),
        f["group"].to_numpy(),
        norms,
        G,
        boot=boot,
        clusters=f["prompt"].to_numpy(),
        keep_replicates=True,
        pairs=gstar.pairs_of(f),
    )
    c1, se = res.get("c1"), res.get("c1_se")
    out |= {"c1": c1, "c1_se": se, "gstar_lo": res.get("gstar_lo"), "reason": res["reason"]}
    out["c1_method"] = res.get("c1_method")
    if res.get("replicates") is not None:  # a G to use meanwhile, at the run's responses per step
        N = float(rows.groupby("step").size().median())
        safe = gstar.safe_g(res["replicates"], N, df=res.get("boot_df", np.inf))
        if safe["G"] is not None:
            out |= {"safe_G": safe["G"], "safe_regret": safe["regret"]}
    if res["gstar"] is not None:
        return {**out, "decided": True, "gstar": res["gstar"], "gstar_hi": res["gstar_hi"]}
    factor = gstar.information_factor(c1, se)
    if np.isfinite(factor):
        need = int(np.ceil(out["groups_measured"] * factor))
        rate = out["groups_measured"] / max(steps, 1)
        out |= {
            "groups_needed": need,
            "more_steps": int(np.ceil(max(need - out["groups_measured"], 0) / rate)),
        }
    return out


def decision_text(d: dict) -> str:
    """One line for the end of training."""
    if d.get("decided"):
        return (
            f"gpolab: loo's G* = {d['gstar']:.3g} (95% {d['gstar_lo']:.3g} .. "
            f"{d['gstar_hi']:.3g}) from {d['groups_measured']:,} measured groups; "
            "`gpolab plan OUTPUT_DIR` for the run's own estimator"
        )
    head = f"gpolab: G* not decided by {d.get('groups_measured', 0):,} measured groups"
    if d.get("groups_needed"):
        head = (
            f"{head} (c1 = {d['c1']:.3g} ± {d['c1_se']:.2g}); about {d['groups_needed']:,} "
            f"would decide it: ~{d['more_steps']:,} more steps at this run's measuring rate "
            "(raise groups_per_step, lower every, or cheap=True to measure more per step)"
        )
    else:
        head = f"{head}: {d.get('reason')}"
    if d.get("safe_G") is None:
        return head
    return (
        f"{head}.  Meanwhile use G = {d['safe_G']}: for loo it costs at most "
        f"{100 * d['safe_regret']:.0f}% more gradient noise than the best G at this run's "
        "responses per step, whatever the constants are within their joint 95% region"
    )


def find(path) -> dict | None:
    """The hook's files under ``path`` (a run's output folder, its ``gpolab/`` subfolder or the
    ``rollouts.parquet`` file): {"log", "norms" (None when it has no row), "run"}; None when
    absent."""
    path = Path(path)
    if path.is_file():
        if path.name != ROLLOUTS:
            return None
        path = path.parent
    folder = path if (path / ROLLOUTS).is_file() else path / FOLDER
    if not (folder / ROLLOUTS).is_file():
        return None
    norms = folder / NORMS
    has_norms = norms.is_file() and len(norms.read_text().strip().splitlines()) > 1
    run = read_run(folder / RUN) if (folder / RUN).is_file() else {}
    return {"log": folder / ROLLOUTS, "norms": norms if has_norms else None, "run": run}


def read_run(path: Path) -> dict:
    """The hook's ``run.json``; a file that is not one JSON object (cut off by a trainer killed
    while a hook older than the atomic write wrote it, or edited) is one error naming it."""
    try:
        run = json.loads(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        why = getattr(err, "msg", None) or "not UTF-8 text"
        raise ConfigError(
            f"log: {str(path)!r} is not valid JSON ({why}; cut off, e.g. by a trainer killed "
            "while writing it?); allowed: the hook's run.json whole: rerun the hook's flush, "
            "or delete the file to plan without the trainer's settings"
        ) from None
    if not isinstance(run, dict):
        raise ConfigError(
            f"log: {str(path)!r} holds a JSON {type(run).__name__}; allowed: one JSON object "
            "(the trainer's settings), or no run.json"
        )
    return run
