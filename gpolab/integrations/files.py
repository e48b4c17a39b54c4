"""The files a training run leaves for ``gpolab plan`` (framework-free: numpy, pandas).

Under ``<output_dir>/gpolab/``:

* ``rollouts.parquet``: one row per response of every group of every training step: ``step``,
  ``prompt``, ``group`` (unique per group in the run), ``reward`` and ``proxy`` = ‖∇θ log πθ(y|x)‖²
  of the whole response (NaN where it was not measured: only the sampled groups carry it);
  ``exact_proxy`` and ``logit_proxy`` (verl's forward-only W, where a hook measured it): then
  ``proxy`` is the exact norm where there is one, else W times k = Σq/ΣW over the responses
  with both (``run.json``: ``proxy_scale``, ``proxy_scale_responses``);
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
from pathlib import Path

import numpy as np

FOLDER = "gpolab"
ROLLOUTS, NORMS, RUN = "rollouts.parquet", "grad_norms.csv", "run.json"


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
        self, step: int, prompts, rewards: np.ndarray, proxy: np.ndarray, logit=None
    ) -> None:
        """One step's groups: ``prompts`` (n,), ``rewards``, ``proxy`` (exact score norms) and
        ``logit`` (verl's forward-only W, optional) (n, G) (NaN: not measured)."""
        logit = np.full(np.shape(proxy), np.nan) if logit is None else logit
        for x, z, q, w in zip(prompts, rewards, proxy, logit, strict=True):
            self.rows += [
                {
                    "step": int(step),
                    "prompt": str(x),
                    "group": self._groups,
                    "reward": float(r),
                    "exact_proxy": float(p),
                    "logit_proxy": float(v),
                }
                for r, p, v in zip(z, q, w, strict=True)
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

    def write_rows(self) -> None:
        """The rollouts and gradient norms (the files that grow with the run)."""
        import pandas as pd

        cols = ["step", "prompt", "group", "reward", "exact_proxy", "logit_proxy"]
        rows = pd.DataFrame(self.rows, columns=cols)
        k, n = self.proxy_scale()
        if n:  # q where measured, k·W elsewhere (k from the responses with both)
            self.settings |= {"proxy_scale": k, "proxy_scale_responses": n}
        q, w = rows["exact_proxy"], rows["logit_proxy"]
        rows.insert(4, "proxy", q.where(q.notna(), k * w if n else np.nan))
        rows.to_parquet(self.dir / ROLLOUTS, index=False)
        pd.DataFrame(self.norms, columns=["step", "batch", "grad_norm"]).to_csv(
            self.dir / NORMS, index=False
        )

    def write_run(self) -> None:
        """``run.json``: the settings and the seconds so far (small)."""
        run = {
            **self.settings,
            "seconds": self.seconds,
            "overhead": self.seconds["hook"] / max(self.seconds["train"], 1e-9),
        }
        (self.dir / RUN).write_text(json.dumps(run, indent=1, default=str))


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
    run = json.loads((folder / RUN).read_text()) if (folder / RUN).is_file() else {}
    return {"log": folder / ROLLOUTS, "norms": norms if has_norms else None, "run": run}
