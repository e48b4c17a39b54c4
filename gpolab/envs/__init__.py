"""Surrogate environments: parameters as data, sampling as pure functions, exact truth beside it.

One registry, found by listing this package (no hand-kept list): a module of ``gpolab/envs/``
that defines an ``Instance`` (the env's settings, a :class:`gpolab.configs.Config`) is an env.
:func:`make` returns ``(env, instance)`` as gymnax's ``make(name)`` returns (env, params);
:func:`names` lists the envs, those with given capabilities when asked (a lab states what it
needs, e.g. ``names("token_logp")``, instead of listing envs); :func:`instances` gives the
``Instance`` classes a lab config's ``INSTANCES`` holds.

Every env a lab trains on or draws mini-batches from implements one contract, :class:`Env`, as
its module's ``ENV``; :func:`get` returns it by name.  The labs take envs from here and write no
adapters.  Two envs have no ``ENV``: ``tree`` (thoughts × continuations, no θ to train) and
``gaussian``, which the χ² lab drives through its own functions: its estimate is the estimators
library's ``policy_gradient`` (a mean over G of per-sample scores, then over B) on the
closed-form scores the χ² theory also uses; the contract's Σ w·W would round differently.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
from collections.abc import Callable
from types import ModuleType


@dataclasses.dataclass(frozen=True)
class Env:
    """One environment as pure functions of its instance ``params`` (a pytree, traced) and a flat
    parameter vector θ (D,).  Static and hashable (a jit static argument).

    * ``init(params) -> θ₀`` (D,): the instance's starting policy;
    * ``value(params, θ) -> J(θ)`` = Σ_x f_x V_x(θ);
    * ``exact(params, θ) -> truth``, exact per-prompt quantities under the shared names
      ``prompt_probs`` f (P,), ``V`` = E[Z|x] (P,), ``sigma2`` = Var(Z|x) (P,), ``g_local``
      (P, d) g_x = ∇V_x in the coordinates prompt x moves (d = A for the tabular bandit, the
      block size k for loglinear, D where every prompt moves all of θ) and ``g`` = ∇J =
      Σ_x f_x g_x (D,); each env's truth adds its own fields (the bandit's and the arithmetic
      surrogate's S2, c1, ...; loglinear's per-prompt ``g_global`` (P, D) and ``one_minus_V``,
      which the std-normalization trainer reads);
    * ``sample_prompts(key, params, n) -> (n,)`` int32 iid prompts from f;
    * ``sample(key, params, θ, prompts, G, truth=None) -> (responses, rewards)``: G responses
      from π_θ for each prompt of ``prompts`` (n,), responses (n, G, ...) and rewards (n, G);
    * ``gradient(params, θ, prompts, responses, weights, truth=None) -> (D,)`` =
      Σ_i Σ_g w_ig ∇_θ log π_θ(y_ig|x_i) for weights (n, G) (no normalization: callers put 1/n
      in the weights or divide);
    * ``truth``: ``exact(params, θ)`` when the caller has it (the std-normalization trainer
      computes it every step), from which an env may read its policy instead of recomputing it
      (loglinear: π and E_π u); the numbers are the same either way;
    * ``optimum(params) -> J*`` (a Python float, for the suboptimality gap J* − J);
    * ``curvature(params, truth) -> s(θ)`` (optional): ∇²J ≼ cB²·s(θ)/N from the curvature law
      ‖H_x‖ ≤ cB²σ_x (the trainer's default: max_x σ_x, exact for orthogonal prompts);
    * ``token_logp(params, θ, prompts, responses) -> (logp, mask)`` (optional, the off-policy
      lab): per-token log π_θ(y_t | x, y_<t) of the sampled responses, (n, G, T), and the mask
      of the tokens log π counts (a one-token response has T = 1);
    * ``values(params, θ) -> (f, V)`` (optional): the prompt distribution f (P,) and V_x(θ) =
      E_θ[Z | x] (P,), differentiable in θ (so ∇_θ Σ_x w_x V_x is exact for any weights w);
    * ``kl(params, θ, θ_ref) -> KL`` (optional): Σ_x f_x KL(π_θ(·|x) ‖ π_θref(·|x)) exactly (by
      enumeration), differentiable in θ;
    * ``behaviour(params, θ, kind, size) -> logits`` (optional, the off-policy lab's mismatch
      mode): the sampler's policy μ, a rollout engine's version of π_θ, whose distance from π_θ
      the env knows exactly (the Markov env: :func:`gpolab.envs.markov.mismatch`).
    """

    name: str
    init: Callable
    value: Callable
    exact: Callable
    sample_prompts: Callable
    sample: Callable
    gradient: Callable
    optimum: Callable
    curvature: Callable | None = None
    token_logp: Callable | None = None
    values: Callable | None = None
    kl: Callable | None = None
    behaviour: Callable | None = None
    mse_law: bool = False  # ``exact`` carries the loo MSE law's per-prompt constants (S2, c1, ...)


@functools.cache
def _modules() -> dict[str, ModuleType]:
    """Every env module of this package by name: those that define ``Instance``."""
    found = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        if isinstance(getattr(module, "Instance", None), type):
            found[info.name] = module
    return found


def names(*needs: str, first: str | None = None) -> tuple[str, ...]:
    """Every env's name, sorted; with ``needs`` (:class:`Env` field names, e.g. "token_logp",
    "values", "kl", "curvature", "mse_law") only the envs whose ``ENV`` has each of them (an env
    without an ``ENV`` has none).  ``first``: that env leads, the others stay sorted (a lab's
    order of tables, flags and choices, e.g. ``first="bandit"``)."""
    found = tuple(
        name
        for name, module in sorted(_modules().items())
        if all(getattr(getattr(module, "ENV", None), need, None) for need in needs)
    )
    return tuple(sorted(found, key=lambda name: name != first))  # stable: the rest stay sorted


def make(name: str, **overrides) -> tuple[Env | None, object]:
    """``(env, instance)``: env ``name``'s :class:`Env` (None for ``tree`` and ``gaussian``, which
    have none) and its ``Instance`` with ``overrides`` (its defaults otherwise), as gymnax's
    ``make``.  One error naming the choices for an unknown env or setting."""
    from gpolab import validate

    validate.choice("env", name, names())
    module = _modules()[name]
    fields = tuple(f.name for f in dataclasses.fields(module.Instance))
    for key in overrides:
        validate.choice(f"{name} setting", key, fields)
    return getattr(module, "ENV", None), module.Instance(**overrides)


def instances(*chosen: str) -> dict[str, type]:
    """``{name: Instance class}`` of the envs ``chosen`` (in that order), e.g. a lab config's
    ``INSTANCES = ("env", envs.instances(*envs.names("token_logp")))``."""
    from gpolab import validate

    for name in chosen:
        validate.choice("env", name, names())
    return {name: _modules()[name].Instance for name in chosen}


def get(name: str) -> Env:
    """The :class:`Env` of env ``name`` (one error naming the envs that have one)."""
    from gpolab import validate

    validate.choice("env", name, names("init"))
    return _modules()[name].ENV
