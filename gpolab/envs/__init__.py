"""Surrogate environments: parameters as data, sampling as pure functions, exact truth beside it.

Every env a lab trains on or draws mini-batches from implements one contract, :class:`Env`, in
its own module (``gpolab/envs/<name>.py`` defines ``ENV``); :func:`get` returns it by name
(gymnax's ``make(name)``).  The labs take envs from here and write no adapters.

Not registered: ``tree`` (thoughts × continuations, no θ to train) and ``gaussian``, which the
χ² lab drives through its own functions: its estimate is the estimators library's
``policy_gradient`` (a mean over G of per-sample scores, then over B) on the closed-form scores
the χ² theory also uses; the contract's Σ w·W would round differently.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable

REGISTRY = ("arithmetic", "bandit", "loglinear")  # name → gpolab.envs.<name>.ENV


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
      enumeration), differentiable in θ.
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


def get(name: str) -> Env:
    """The registered env ``name`` (its module is imported on first use)."""
    from gpolab import validate

    validate.choice("env", name, REGISTRY)
    return importlib.import_module(f"gpolab.envs.{name}").ENV
