"""The estimator registry: name → advantage function, what it needs, its options and its source.

``REGISTRY[name](rewards, *, lengths=None, greedy=None, **options) -> advantages`` is the public,
stable call: ``rewards`` (P, G) (P prompts = the batch), ``lengths`` (P, G) response lengths in
tokens, ``greedy`` (P,) the reward of each prompt's greedy response, ``options`` the estimator's
own option names (a framework's, e.g. ``norm_adv_by_std_in_grpo=False``).  It returns (P, G)
per-response advantages.

A sweep names an estimator by a *spec*: a registry name, optionally with options in brackets
(``trl/grpo[scale_rewards=batch]``, ``verl/grpo[norm_adv_by_std_in_grpo=false,epsilon=1e-4]``),
or ``package.module:function`` for a user's own function (imported and registered on first use).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp

from gpolab import validate
from gpolab.estimators import core, frameworks

__all__ = [
    "Entry",
    "Bound",
    "REGISTRY",
    "register",
    "get",
    "parse_spec",
    "resolve",
    "bind",
    "check_reward_only",
    "bound",
    "advantages",
    "gradient_weights",
    "estimate_gradient",
    "check_estimator",
    "check_callable",
    "binary_groups",
    "minimum_G",
    "canonical",
    "NEEDS",
    "FRAMEWORKS",
    "ESTIMATORS",
    "LIMITS",
]

NEEDS = ("baseline", "lengths", "greedy")  # what an estimator may need besides the rewards
SCOPES = ("group", "batch")
LIMITS = ("gradient", "std", "pooled-std")  # the G → ∞ directions gpolab knows (Entry.limit)


@dataclasses.dataclass(frozen=True, eq=False)
class Entry:
    """A registered estimator.

    ``needs``: inputs besides the rewards it cannot run without (``baseline`` = V(x), ``lengths``,
    ``greedy``); ``options``: option name → default (only these enter a result's cache key);
    ``scope``: ``group`` when each response's advantage depends only on its own group, ``batch``
    when the batch is coupled (batch std, token whitening); ``reward_only``: group-scoped and a
    function of the group's rewards alone, so the exact finite-G theory of
    :mod:`gpolab.theory.exact` applies; ``weights``: per-sample gradient weights when they are
    not A/G (the U-statistic); ``limit``: the direction E ĝ tends to as G → ∞ when gpolab knows
    it (:data:`LIMITS`: ``gradient`` ∇J, ``std`` the per-prompt g_x/(σ_x + eps), ``pooled-std``
    ∇J/(σ_pool + eps)), or a function of the options giving one; ``""`` when unknown.
    """

    name: str
    fn: Callable
    needs: tuple[str, ...] = ()
    options: Mapping[str, object] = dataclasses.field(default_factory=dict)
    min_group: int = 1
    scope: str = "group"
    source: str = ""
    reward_only: bool = True
    weights: Callable | None = None
    batch_when: Mapping[str, tuple] = dataclasses.field(default_factory=dict)
    user: bool = True  # registered by the user (checked by :func:`check_callable` before a run)
    limit: str | Callable[[Mapping], str] = ""

    def scope_of(self, options: Mapping | None = None) -> str:
        """``batch`` when the entry, or these options of it, couple the prompts of a batch
        (``batch_when``: option → values that do, e.g. grpo's ``scale="batch"``)."""
        opts = {**self.options, **(options or {})}
        coupled = any(opts.get(k) in v for k, v in self.batch_when.items())
        return "batch" if coupled else self.scope

    def reward_only_for(self, options: Mapping | None = None) -> bool:
        """Whether the exact theory of :mod:`gpolab.theory.exact` applies with ``options``."""
        return self.reward_only and self.scope_of(options) == "group"

    def limit_for(self, options: Mapping | None = None) -> str:
        """The G → ∞ direction with ``options`` (:data:`LIMITS`), ``""`` when gpolab knows none."""
        opts = {**self.options, **(options or {})}
        return self.limit(opts) if callable(self.limit) else self.limit

    def __call__(self, rewards, *, lengths=None, greedy=None, **options):
        """Advantages (P, G) of ``rewards`` (P, G); see the module docstring."""
        if not isinstance(rewards, jax.core.Tracer):
            core.check_rewards(rewards)
        rewards = core.as_rewards(rewards)  # Python lists, ints; float64 stays float64
        given = {"lengths": lengths, "greedy": greedy, "baseline": options.pop("baseline", None)}
        for need in self.needs:
            if given[need] is None:
                raise validate.ConfigError(
                    f"{need}: the {self.name} estimator needs {_NEED_WORDS[need]}; got None"
                )
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            allowed = ", ".join(self.options) or "none"
            raise validate.ConfigError(
                f"{unknown[0]}: not an option of {self.name}; allowed: {allowed}"
            )
        kwargs = {k: v for k, v in given.items() if k in self.needs or k in _accepts(self.fn)}
        return self.fn(rewards, **{k: v for k, v in kwargs.items() if v is not None}, **options)


_NEED_WORDS = {
    "baseline": "V(x) (baseline=, shape (P,))",
    "lengths": "response lengths (lengths=, shape (P, G), tokens)",
    "greedy": "the greedy response's reward (greedy=, shape (P,))",
}


def _accepts(fn: Callable) -> tuple[str, ...]:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return ()
    return tuple(n for n in NEEDS if n in params)


REGISTRY: dict[str, Entry] = {}


def register(
    name: str,
    fn: Callable,
    *,
    needs: tuple[str, ...] | None = None,
    options: Mapping[str, object] | None = None,
    min_group: int = 1,
    scope: str = "group",
    source: str = "",
    reward_only: bool | None = None,
    weights: Callable | None = None,
    batch_when: Mapping[str, tuple] | None = None,
    user: bool = True,
    limit: str | Callable[[Mapping], str] = "",
) -> Entry:
    """Add ``fn(rewards (P, G), **options) -> advantages (P, G)`` to the registry as ``name``.

    ``needs`` defaults to the keyword parameters among ``lengths``/``greedy``/``baseline`` that
    ``fn`` takes without a default; ``options`` to its other keyword parameters with defaults;
    ``reward_only`` to "group-scoped and needs nothing"; ``limit`` (the G → ∞ direction, see
    :class:`Entry`) to unknown.  Returns the entry."""
    _check_entry(name, fn, scope, limit)
    params = _parameters(fn)
    if needs is None:
        needs = tuple(n for n in NEEDS if n in params and params[n] is inspect.Parameter.empty)
    for need in needs:
        validate.choice(f"needs (of {name})", need, NEEDS)
    if options is None:
        options = {
            k: d for k, d in params.items() if k not in NEEDS and d is not inspect.Parameter.empty
        }
    if reward_only is None:
        reward_only = scope == "group" and not needs
    entry = Entry(
        name,
        fn,
        tuple(needs),
        dict(options),
        min_group,
        scope,
        source,
        reward_only,
        weights,
        dict(batch_when or {}),
        user,
        limit,
    )
    REGISTRY[name] = entry
    return entry


def _check_entry(name, fn, scope: str, limit) -> None:
    """One line naming the field when a registration's name, function, scope or limit is bad."""
    if not isinstance(name, str) or not name or any(c in name for c in "[],= "):
        raise validate.ConfigError(
            f"estimator name: got {name!r}; allowed: a non-empty string without [ ] , = or spaces"
        )
    if not callable(fn):
        raise validate.ConfigError(f"estimator {name}: got {fn!r}; allowed: a callable")
    validate.choice(f"scope (of {name})", scope, SCOPES)
    if not callable(limit):
        validate.choice(f"limit (of {name})", limit, ("", *LIMITS))


def _parameters(fn: Callable) -> dict:
    """Keyword parameters of ``fn`` after the first (the rewards) → default (or ``empty``)."""
    try:
        params = list(inspect.signature(fn).parameters.values())[1:]
    except (TypeError, ValueError):
        return {}
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name: p.default for p in params if p.kind in kinds}


def get(name: str) -> Entry:
    """The registry entry ``name`` (a plain name, no options); one-line error listing the
    registered names."""
    if name not in REGISTRY:
        raise validate.ConfigError(
            f"estimator: got {name!r}; allowed: "
            f"{', '.join(n for n, e in REGISTRY.items() if not e.user)}, "
            "NAME[option=value,...] or package.module:function (`gpolab estimators` lists them)"
        )
    return REGISTRY[name]


@dataclasses.dataclass(frozen=True)
class Bound:
    """An estimator spec resolved once (:func:`bound`): its registry ``entry``, its bracket
    ``options`` (sorted (name, value) pairs, coerced), ``spec`` as given (a row's estimator
    name, ``str(bound)``) and its ``canonical`` spelling.  Frozen and hashable: cells, caches,
    the theory and the aggregation take it where they took the string, which is never parsed
    again; every function of this module that takes a spec takes a Bound too.  A lab's shared
    settings (``scale``, ``ddof``, ``eps``) are not in it: :func:`bind` adds those the entry
    reads (the spec's options win), so traced knobs stay traced."""

    entry: Entry = dataclasses.field(repr=False)
    options: tuple = ()
    spec: str = ""
    canonical: str = ""

    def __str__(self) -> str:
        return self.spec


def bound(spec: str | Bound) -> Bound:
    """``spec`` (``name``, ``name[opt=value,...]``, ``package.module:function``) resolved once
    (a :class:`Bound` is returned as it is)."""
    if isinstance(spec, Bound):
        return spec
    name, options = parse_spec(spec)
    return Bound(get(name), tuple(sorted(options.items())), spec, _canonical(name, options))


def parse_spec(spec: str | Bound) -> tuple[str, dict]:
    """``"name[opt=value,...]"`` → (name, options coerced to the types of the defaults).

    A ``module:function`` name is imported and registered on first use."""
    if isinstance(spec, Bound):
        return spec.entry.name, dict(spec.options)
    allowed = "NAME, NAME[option=value,...] or package.module:function"
    name, items = validate.bracketed("estimator", spec, allowed)
    entry = _import(name) if ":" in name and name not in REGISTRY else get(name)
    options = {}
    for key, sep, raw in items:
        if not sep or key not in entry.options:
            allowed = ", ".join(f"{k}={v!r}" for k, v in entry.options.items()) or "none"
            item = f"{key}{sep}{raw}"
            raise validate.ConfigError(
                f"estimator {name}: option {item!r} not understood; allowed: {allowed}"
            )
        options[key] = _coerce_option(name, key, raw, entry.options[key])
    return name, options


def _coerce_option(name: str, key: str, raw: str, default):
    where = f"{name}[{key}]"
    if isinstance(default, bool):
        if raw.lower() not in ("true", "false"):
            raise validate.ConfigError(f"{where}: got {raw!r}; allowed: true, false")
        return raw.lower() == "true"
    for kind in (int, float):
        if isinstance(default, kind):
            try:
                return kind(raw)
            except ValueError:
                raise validate.ConfigError(
                    f"{where}: got {raw!r}; allowed: {kind.__name__}"
                ) from None
    return raw


def canonical(spec: str | Bound) -> str:
    """The spec with its options sorted and spelled one way (a stable row name and cache key)."""
    if isinstance(spec, Bound):
        return spec.canonical
    return _canonical(*parse_spec(spec))


def _canonical(name: str, options: dict) -> str:
    if not options:
        return name
    text = ",".join(
        f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in sorted(options.items())
    )
    return f"{name}[{text}]"


def _import(path: str) -> Entry:
    """Import ``package.module:function`` and register it under that name."""
    module, _, attr = path.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise validate.ConfigError(
            f"estimator: cannot import {path!r} ({type(e).__name__}: {e}); allowed: a registered "
            "name or package.module:function importable from the current environment"
        ) from None
    return register(path, fn, source=f"{path} (user function)")


def resolve(spec: str | Bound) -> Entry:
    """The entry a spec names (importing a user function if needed)."""
    return spec.entry if isinstance(spec, Bound) else get(parse_spec(spec)[0])


def bind(spec: str | Bound, defaults: Mapping | None = None) -> tuple[Entry, dict]:
    """(entry, options) of ``spec``: the spec's bracket options over ``defaults`` (a lab's shared
    settings such as ``scale/ddof/eps``), keeping only the options the entry reads."""
    b = bound(spec)
    entry, options = b.entry, dict(b.options)
    shared = {k: v for k, v in (defaults or {}).items() if k in entry.options}
    return entry, {**shared, **options}


def minimum_G(spec: str) -> int:
    """The smallest group size ``spec`` is defined for (``k`` for a pass@k option)."""
    entry, options = bind(spec)
    return options.get("k", entry.options["k"]) if "k" in entry.options else entry.min_group


def check_estimator(
    name: str, G: int, *, scale: str = "group", ddof: int = 1, eps: float = 1e-4, field: str = "G"
) -> None:
    """Plain-Python validation of an estimator spec at group size G (raises ``ConfigError``)."""
    validate.integer(f"{field} (for {canonical(name)})", G, minimum=minimum_G(name))
    validate.choice("scale", scale, core.SCALES)
    validate.choice("ddof", ddof, (0, 1))
    validate.real("eps", eps, low=0.0)


def check_reward_only(field: str, spec: str, reads: str) -> None:
    """A group-scoped registry entry of the rewards alone (one with count tables, theory §8),
    checked before a run; ``reads``: what the caller does with its tables (the error says it)."""
    check_estimator(spec, 2, field=field)
    entry = resolve(spec)
    if entry.needs or entry.scope_of(bind(spec)[1]) != "group":
        raise validate.ConfigError(
            f"{field}: got {spec!r}; allowed: group-scoped estimators of the rewards alone "
            f"(loo, grpo, rloo, ...): {reads}"
        )


def binary_groups(G: int, dtype=None):
    """(G + 1, G) numpy binary groups, row c holding c ones then G − c zeros: every success
    count once (the estimator checks here and the count tables of :mod:`gpolab.theory.exact`)."""
    import numpy as np

    return (np.arange(G)[None, :] < np.arange(G + 1)[:, None]).astype(dtype or np.float64)


def check_callable(spec: str, G: int) -> None:
    """Plain-Python check of an estimator spec at group size G before any run: it traces under
    jax with its options and returns (P, G) for rewards (P, G); a user's function must also be
    finite on every binary group (degenerate ones included; built-in entries are tested)."""
    import numpy as np

    entry, options = bind(spec)
    canon = binary_groups(G, np.float32)
    inputs = {
        "lengths": np.ones_like(canon),
        "greedy": np.zeros(G + 1, np.float32),
        "baseline": np.full(G + 1, 0.5, np.float32),
    }
    given = {k: v for k, v in inputs.items() if k in entry.needs}
    call = lambda r: entry(r, **given, **options)  # noqa: E731
    try:
        shape = jax.eval_shape(call, jax.ShapeDtypeStruct(canon.shape, jnp.float32)).shape
        out = np.asarray(call(jnp.asarray(canon))) if entry.user else None
    except validate.ConfigError as e:
        raise validate.ConfigError(f"estimator {canonical(spec)}: {e}") from None
    except Exception as e:  # a user's function may fail in any way: one line, no traceback
        first = (str(e).strip().splitlines() or [""])[0]
        raise validate.ConfigError(
            f"estimator {entry.name}: fails on rewards of shape {canon.shape} under jax "
            f"({type(e).__name__}: {first[:200]}); allowed: a jax-traceable function "
            "rewards (P, G) -> advantages (P, G)"
        ) from None
    if tuple(shape) != canon.shape:
        raise validate.ConfigError(
            f"estimator {entry.name}: returns shape {tuple(shape)} for rewards {canon.shape}; "
            "allowed: advantages of the rewards' shape (P, G)"
        )
    bad = np.zeros(0, bool) if out is None else ~np.isfinite(out).all(axis=-1)
    if bad.any():
        row = canon[int(np.argmax(bad))]
        raise validate.ConfigError(
            f"estimator {entry.name}: non-finite advantages for the binary group "
            f"{row.astype(int).tolist()}; allowed: finite advantages for every group "
            "(degenerate groups included)"
        )


def advantages(
    name: str,
    rewards: jax.Array,
    *,
    baseline: jax.Array | None = None,
    lengths: jax.Array | None = None,
    greedy: jax.Array | None = None,
    scale: str = "group",
    ddof: int = 1,
    eps: float | jax.Array = 1e-4,
) -> jax.Array:
    """Advantages of the estimator spec ``name``; ``scale/ddof/eps`` reach the estimators that
    read them (gpolab's grpo), a spec's bracket options win over them."""
    entry, options = bind(name, {"scale": scale, "ddof": ddof, "eps": eps})
    if baseline is not None and "baseline" in entry.needs:
        options["baseline"] = baseline
    return entry(rewards, lengths=lengths, greedy=greedy, **options)


def gradient_weights(name: str, rewards: jax.Array, **kw) -> jax.Array:
    """Weights c ``[..., G]`` with ĝ = Σ_g c_g W_g: A_g/G for advantage estimators, kernel weights
    for ``ustat``.  Lets an environment form ĝ without materialising per-sample scores.
    Keywords as :func:`advantages`."""
    entry = resolve(name)
    if entry.weights is not None:
        return entry.weights(rewards)
    return advantages(name, rewards, **kw) / rewards.shape[-1]


def estimate_gradient(name: str, rewards: jax.Array, scores: jax.Array, **kw) -> jax.Array:
    """Gradient estimate ``[..., D]`` of ``name``: rewards ``[..., G]``, scores ``[..., G, D]``."""
    return jnp.einsum("...g,...gd->...d", gradient_weights(name, rewards, **kw), scores)


def _grpo_limit(options: Mapping) -> str:
    """grpo's G → ∞ direction: per-group std → std, one batch std → pooled-std, none → ∇J."""
    return {"group": "std", "batch": "pooled-std"}.get(options["scale"], "gradient")


_OWN = "gpolab/estimators/core.py::"
for _name, _fn, _kw in (
    ("vanilla", core.vanilla_advantages, dict(source="vanilla_advantages (REINFORCE) [U]")),
    ("oracle", core.oracle_advantages, dict(source="oracle_advantages, V(x) known [U]")),
    ("loo", core.loo_advantages, dict(min_group=2, source="loo_advantages (RLOO) [U]")),
    ("mean", core.mean_advantages, dict(source="mean_advantages (group mean incl. self)")),
    (
        "grpo",
        core.grpo_advantages,
        dict(
            min_group=2,
            batch_when={"scale": ("batch",)},
            limit=_grpo_limit,
            source="grpo_advantages (std-normalized; TRL defaults)",
        ),
    ),
    (
        "ustat",
        core.loo_advantages,
        dict(
            min_group=2,
            weights=core.ustat_weights,
            source="ustat_weights (pairwise U-statistic kernel) [U]",
        ),
    ),
):
    _kw = {"limit": "gradient", **_kw}  # unbiased, or (mean) a bias that vanishes as G → ∞
    register(_name, _fn, **{**_kw, "source": _OWN + _kw["source"]}, user=False)
ESTIMATORS = tuple(REGISTRY)  # gpolab's own entries, in registration order

for _s in frameworks.SPECS:  # verl, TRL, OpenRLHF, NeMo-RL, papers (semantics read from code)
    register(**{f.name: getattr(_s, f.name) for f in dataclasses.fields(_s)}, user=False)
FRAMEWORKS = tuple(s.name for s in frameworks.SPECS)
