"""Surrogate environments: parameters as data, sampling as pure functions, exact truth beside it.

One registry, found by listing this package (no hand-kept list): a module of ``gpolab/envs/``
that defines an ``Instance`` (the env's settings, a :class:`gpolab.configs.Config`) is an env.
:func:`make` returns ``(env, instance)`` as gymnax's ``make(name)`` returns (env, params);
:func:`names` lists the envs, those a lab's :class:`Needs` admits when asked (a lab states what
it reads of an env instead of listing envs); :func:`instances` gives the ``Instance`` classes a
lab config's ``INSTANCES`` holds.

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


@dataclasses.dataclass(frozen=True)
class Needs:
    """What a lab reads of an env, as plain data (its ``lab.py`` holds one as ``NEEDS`` and takes
    its envs from ``names(NEEDS)``), so that a new env is either offered and works, or not offered.

    * ``capabilities``: the :class:`Env` fields the lab calls (``"token_logp"``, ``"values"``,
      ``"kl"``, ``"mse_law"``, ...); an env without an ``ENV`` has none;
    * ``fields``: the ``Instance`` fields the lab reads (``"B"``, ``"kind"``, ...);
    * ``only``: the envs the lab's code names (it calls their modules' own functions, e.g.
      ``bandit.make``), in the lab's order; ``None``: every env with the capabilities and fields
      (the lab reads nothing else of an env);
    * ``first``: with ``only=None``, the env that leads (flags, choices and tables); the others
      stay sorted.

    An env that ``only`` names must have the capabilities and fields (:func:`names` raises
    ``TypeError`` otherwise: the lab would fail on it)."""

    capabilities: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()
    only: tuple[str, ...] | None = None
    first: str | None = None


def missing(name: str, needs: Needs) -> tuple[str, ...]:
    """The capabilities and ``Instance`` fields of ``needs`` that env ``name`` lacks."""
    module = _modules()[name]
    env = getattr(module, "ENV", None)
    fields = {f.name for f in dataclasses.fields(module.Instance)}
    return tuple(c for c in needs.capabilities if not getattr(env, c, None)) + tuple(
        f"Instance.{f}" for f in needs.fields if f not in fields
    )


@functools.cache
def _modules() -> dict[str, ModuleType]:
    """Every env module of this package by name: those that define ``Instance``."""
    found = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        if isinstance(getattr(module, "Instance", None), type):
            found[info.name] = module
    return found


def names(*needs: str | Needs, first: str | None = None) -> tuple[str, ...]:
    """The envs a lab may offer.  ``names(NEEDS)``: those its :class:`Needs` admits (the envs
    ``only`` names, in that order, each checked; else every env with its capabilities and
    ``Instance`` fields, sorted, ``first`` leading).  ``names(*capabilities, first=...)`` is
    ``names(Needs(capabilities, first=first))``; ``names()`` is every env, sorted."""
    spec = needs[0] if needs and isinstance(needs[0], Needs) else Needs(needs, first=first)
    if spec.only is not None:
        from gpolab import validate

        for name in spec.only:
            validate.choice("env", name, tuple(sorted(_modules())))
            if missing(name, spec):
                raise TypeError(f"env {name} lacks {', '.join(missing(name, spec))} (a lab needs)")
        return tuple(spec.only)
    found = tuple(name for name in sorted(_modules()) if not missing(name, spec))
    return tuple(sorted(found, key=lambda name: name != spec.first))  # stable: the rest sorted


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


def axis(field: str, i: int) -> property:
    """A params dataclass's size as a read-only property: axis ``i`` of its array ``field`` (a
    Python int, static under jit), e.g. ``num_prompts = axis("success", 0)``."""
    return property(lambda params: getattr(params, field).shape[i])


def resolve(cls: type, inst, settings: dict) -> tuple:
    """``(key or seed, instance)`` of an env's ``make(inst, **settings)``: ``inst`` an
    ``Instance`` of class ``cls`` and its ``instance_seed``, or (the older form) a key or seed
    and the ``Instance`` of the keywords ``settings`` (its defaults otherwise); validated, so a
    bad setting is one error line before any draw.  The settings are declared once, in ``cls``."""
    if isinstance(inst, cls) and settings:  # an Instance already holds every setting
        raise TypeError(
            f"make: got an Instance and the settings {', '.join(settings)}; pass one or the other "
            "(dataclasses.replace(inst, ...) changes an Instance)"
        )
    key, inst = (inst.instance_seed, inst) if isinstance(inst, cls) else (inst, cls(**settings))
    inst.validate()
    return key, inst


def get(name: str) -> Env:
    """The :class:`Env` of env ``name`` (one error naming the envs that have one)."""
    from gpolab import validate

    validate.choice("env", name, names("init"))
    return _modules()[name].ENV
