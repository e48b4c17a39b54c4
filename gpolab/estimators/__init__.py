"""GRPO-family advantage and gradient estimators and their registry.

- :mod:`gpolab.estimators.core`: gpolab's own estimators (vanilla, oracle, loo, mean, grpo,
  ustat, tree advantages), one small pure function each.
- :mod:`gpolab.estimators.frameworks`: the estimators practitioners run, with the semantics of
  verl, TRL, OpenRLHF and NeMo-RL read from their code.
- :mod:`gpolab.estimators.aggregation`: loss aggregation modes (verl ``loss_agg_mode``, TRL
  ``loss_type``) as per-response gradient weights.
- :mod:`gpolab.estimators.registry`: ``REGISTRY[name](rewards, *, lengths=None, greedy=None,
  **options)``, ``register`` for a user's own estimator, spec parsing (``name[opt=value]``,
  ``package.module:function``).
"""

from gpolab.estimators.aggregation import *  # noqa: F403
from gpolab.estimators.aggregation import __all__ as _aggregation_all
from gpolab.estimators.core import *  # noqa: F403
from gpolab.estimators.core import __all__ as _core_all
from gpolab.estimators.core import _standardize, _std  # noqa: F401  (used by frameworks, tests)
from gpolab.estimators.registry import *  # noqa: F403
from gpolab.estimators.registry import __all__ as _registry_all

__all__ = [*_core_all, *_registry_all, *_aggregation_all]
