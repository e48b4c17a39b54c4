"""OTB in training, at equal steps (``gpolab otb --train-steps T``): the paper's own measure of
"matches the performance of N = 32 with N = 4" is training, which the ``results`` table's one-step
gradient does not see.  Per policy and learning rate, three configurations train from the same θ₀
(:func:`gpolab.kernels.token_baseline.train_run`: Adam, fresh draws each step, the exact J):
OTB at G = ``small``, ``reference`` at ``small`` and ``reference`` at ``large``.

Table ``train``: per (policy, lr, estimator, G, step) the mean J over ``train_runs`` independent
runs and its SE.  Table ``train_match``: per (policy, lr) the gains J_T − J_0 and the ratio
``ref_large_vs_otb_small`` = gain(reference at large) / gain(OTB at small) (1: OTB matches; the
delta-method SE, the configurations' runs independent), and the control
``ref_large_vs_ref_small`` (the reference's own gain from small to large: a run that cannot tell
the sizes apart cannot test a match).
"""

from __future__ import annotations

import math
import time

import numpy as np

from gpolab import configs
from gpolab.kit.store import cell_key, resumed

# the three configurations: (who, size) → the estimator and G of cfg
CONFIGS = (("otb", "small"), ("ref", "small"), ("ref", "large"))
TRAIN_TAG = 0x7A1  # fold_in tag of the training runs' keys (the results' draws unchanged)
TRAIN_COLUMNS = "policy lr estimator G step J J_se runs seconds".split()
MATCH_COLUMNS = [
    "policy",
    "lr",
    "small",
    "large",
    "reference",
    "steps",
    *(f"gain_{w}_{s}{se}" for w, s in CONFIGS for se in ("", "_se")),
    "ref_large_vs_otb_small",
    "ref_large_vs_otb_small_se",
    "ref_large_vs_ref_small",
    "ref_large_vs_ref_small_se",
]


def _spec(cfg, who: str, size: str) -> tuple[str, int]:
    from gpolab.labs.otb.lab import OTB

    return (OTB if who == "otb" else cfg.reference), (cfg.small if size == "small" else cfg.large)


def units(cfg) -> list[tuple[str, float, str, int]]:
    """(policy, lr, estimator, G) of every training configuration, in table order."""
    return [(p, lr, *_spec(cfg, w, s)) for p in cfg.policy for lr in cfg.lr for w, s in CONFIGS]


def keys(cfg) -> list[str]:
    """A unit's store key: the settings its runs depend on, not the one-step grid."""
    drop = ("policy", "G", "small", "large", "reference", "lr", "estimators", "seeds", "per_seed")
    common = {k: v for k, v in configs.key_settings(cfg).items() if k not in drop}
    return [
        cell_key("otb-train", **common, policy=p, lr=lr, estimator=e, G=G)
        for p, lr, e, G in units(cfg)
    ]


def table(cfg, policies, key=None, store=None, progress=None):
    """The ``train`` table (empty without ``train_steps``); each unit resumes from ``store``."""
    import jax
    import pandas as pd

    from gpolab.kernels import token_baseline as kernel

    if not cfg.train_steps:
        return pd.DataFrame(columns=TRAIN_COLUMNS)
    base = jax.random.fold_in(jax.random.key(cfg.seed) if key is None else key, TRAIN_TAG)
    todo, eps = units(cfg), np.float32(cfg.eps)

    def compute(i: int) -> list[dict]:
        policy, lr, spec, G = todo[i]
        cell = kernel.TokenCell((spec,), G, cfg.train_batch)
        a = policies()[policy]

        def one(k):
            return kernel.train_run(cell, k, a, lr, cfg.train_steps, eps)

        start = time.perf_counter()
        k = jax.random.fold_in(base, i)  # every unit its own runs (independent configurations)
        J = np.asarray(jax.jit(jax.vmap(one))(jax.random.split(k, cfg.train_runs)), np.float64)
        wall = (time.perf_counter() - start) / J.shape[1]
        se = J.std(0, ddof=1) / math.sqrt(J.shape[0])
        return [
            dict(
                policy=policy,
                lr=lr,
                estimator=spec,
                G=G,
                step=t,
                J=float(m),
                J_se=float(s),
                runs=J.shape[0],
                seconds=wall,
            )
            for t, (m, s) in enumerate(zip(J.mean(0), se, strict=True))
        ]

    return resumed(
        cfg,
        store,
        keys(cfg),
        compute,
        progress=progress,
        label=lambda r: (
            f"train {r[0]['policy']} lr={r[0]['lr']:g} {r[0]['estimator']} "
            f"G={r[0]['G']}: J {r[0]['J']:.3f} -> {r[-1]['J']:.3f}"
        ),
    )


def _gain_ratio(a: tuple, b: tuple) -> tuple[float, float]:
    """a/b of two gains (value, SE) and the delta-method SE; NaN unless b > 0."""
    (x, sx), (y, sy) = a, b
    if not (y > 0) or not np.isfinite(x):
        return math.nan, math.nan
    r = x / y
    return r, abs(r) * math.hypot(sx / x if x else math.inf, sy / y)


def match(cfg, df):
    """The ``train_match`` table from ``train`` (one row per policy and lr)."""
    import pandas as pd

    rows = []
    if df.empty:
        return pd.DataFrame(columns=MATCH_COLUMNS)
    for (policy, lr), at in df.groupby(["policy", "lr"], sort=False):
        row = dict(
            policy=policy,
            lr=lr,
            small=cfg.small,
            large=cfg.large,
            reference=cfg.reference,
            steps=int(at["step"].max()),
        )
        gain = {}
        for w, s in CONFIGS:
            spec, G = _spec(cfg, w, s)
            run = at[(at["estimator"] == spec) & (at["G"] == G)].sort_values("step")
            first, last = run.iloc[0], run.iloc[-1]
            gain[w, s] = (float(last["J"] - first["J"]), float(last["J_se"]))
            row[f"gain_{w}_{s}"], row[f"gain_{w}_{s}_se"] = gain[w, s]
        r = _gain_ratio(gain["ref", "large"], gain["otb", "small"])
        row["ref_large_vs_otb_small"], row["ref_large_vs_otb_small_se"] = r
        c = _gain_ratio(gain["ref", "large"], gain["ref", "small"])
        row["ref_large_vs_ref_small"], row["ref_large_vs_ref_small_se"] = c
        rows.append(row)
    return pd.DataFrame(rows, columns=MATCH_COLUMNS)
