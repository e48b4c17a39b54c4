"""gpolab: measure GRPO-family policy-gradient estimators against exact gradients.

The public API is re-exported here lazily (importing ``gpolab`` does not import jax)::

    from gpolab import estimators, engine, theory, run_sweep
    from gpolab.labs.sweep.lab import Config  # the sweep's settings: run_sweep(Config(G=(4,)))
    from gpolab.estimators import grpo_advantages, loo_advantages
    from gpolab import REGISTRY, register      # REGISTRY["verl/grpo"](rewards, ...)
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_MODULES = (
    "estimators",
    "engine",
    "envs",
    "theory",
    "validate",
    "configs",
    "kit",
    "labs",
    "runner",
)
_NAMES = {
    "run_sweep": "gpolab.labs.sweep.lab",
    "ConfigError": "gpolab.validate",
    "advantages": "gpolab.estimators",
    "estimate_gradient": "gpolab.estimators",
    "grpo_advantages": "gpolab.estimators",
    "loo_advantages": "gpolab.estimators",
    "mean_advantages": "gpolab.estimators",
    "oracle_advantages": "gpolab.estimators",
    "vanilla_advantages": "gpolab.estimators",
    "ustat_gradient": "gpolab.estimators",
    "tree_advantages": "gpolab.estimators",
    "REGISTRY": "gpolab.estimators",
    "register": "gpolab.estimators",
}
__all__ = ["__version__", *_MODULES, *_NAMES]


def __getattr__(name: str):
    if name in _MODULES:
        return importlib.import_module(f"gpolab.{name}")
    if name in _NAMES:
        return getattr(importlib.import_module(_NAMES[name]), name)
    raise AttributeError(f"module 'gpolab' has no attribute {name!r}")
