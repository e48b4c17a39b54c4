"""Exact finite-G bias and MSE of ANY group-scoped, reward-only estimator with binary rewards
(theory §8; the derivation below is gpolab's).

Per prompt x: G responses, rewards Z_i ~ Bernoulli(p), scores W_i with E W = 0, and

    ĝ_x = (1/G) Σ_i A_i W_i,   A_i = f(Z_i, S_−i),   S_−i = #successes among the other G − 1.

Any permutation-invariant rule of the other rewards reduces to such an f for binary Z, so the
whole estimator is the count table a1[s] = f(1, s), a0[s] = f(0, s), s = 0..G−1
(:func:`count_table` reads it off the estimator's own code).  With S ~ Bin(G−1, p),
S′ ~ Bin(G−2, p), ‖g‖² = ‖g_x‖², S2 = E‖W‖², e_wz2 = E[‖W‖² Z]:

    κ      = E f(1,S) − E f(0,S)                                   (E ĝ_x = κ g_x)
    E‖ĝ‖²  = (1/G) [e_wz2 E f(1,S)² + (S2 − e_wz2) E f(0,S)²]
             + ((G−1)/G) ‖g‖² (E f(1,1+S′)² + E f(0,S′)² − 2 E[f(1,S′) f(0,1+S′)])
    MSE    = E‖ĝ‖² − 2κ‖g‖² + ‖g‖²,     bias² = (1 − κ)² ‖g‖².

Derivation: the diagonal terms E[A_i² ‖W_i‖²] split on Z_i, whose peers' count S is independent
of (Z_i, W_i); E[‖W‖² 1{Z=1}] = e_wz2, E[‖W‖² 1{Z=0}] = S2 − e_wz2.  A pair i ≠ j with
(Z_i, Z_j) = (z, z′) has A_i = f(z, z′ + S′), A_j = f(z′, z + S′) and, given the rewards,
independent scores, so E[A_i A_j W_i·W_j] = Σ_{z,z′} E[f(z, z′+S′) f(z′, z+S′)] h_z·h_z′ with
h_z = E[W 1{Z=z}]: h_1 = g_x, h_0 = E W − g_x = −g_x.  This is §8's formula with
P(z) μ_z = h_z, written without dividing by p, so p = 0 and p = 1 prompts are finite.

A mini-batch of B iid prompts (gpolab's derivation): ĝ_B = (1/B) Σ_b ĝ_{X_b} in global
coordinates, m = E ĝ_B = Σ_x f_x κ_x g_X, and Tr Cov ĝ_X = Σ_x f_x E‖ĝ_x‖² − ‖m‖², so

    MSE_B = (Σ_x f_x [MSE_x − (1−κ_x)² ‖g_x‖²] + Σ_x f_x κ_x² ‖g_X‖² − ‖m‖²) / B + ‖m − g‖²,

which is :mod:`gpolab.theory.mse`'s form (κ² c1 for the middle terms) when κ does not depend on x.

Batch-scoped estimators (batch std, whitening, GPG's batch factor) couple prompts and have no
count table; :func:`count_table` detects them.  Graded rewards would need E[W 1{Z=v}]·E[W 1{Z=v′}]
for every pair of reward values, which g_x does not determine beyond two values: not covered.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable

import numpy as np
from scipy.stats import binom

from gpolab import spans, validate
from gpolab.theory import count_cache
from gpolab.theory import mse as closed
from gpolab.theory.mse import target_sq

__all__ = [
    "Table",
    "Moments",
    "canonical_groups",
    "count_table",
    "registry_table",
    "kappa",
    "moments",
    "global_gradients",
    "mse",
    "bias_sq",
    "mse_se",
]


@dataclasses.dataclass(frozen=True)
class Table:
    """Count table of a reward-only estimator at group size G: ``a1[..., s]`` = advantage of a
    success whose G − 1 peers hold s successes, ``a0[..., s]`` the same for a failure (shape
    (..., G); a leading prompt axis is allowed, e.g. an oracle baseline).  ``ok`` is False (and
    ``reason`` says why, the arrays NaN) when the estimator has no table (batch-scoped, ...).
    ``dtype``: the precision the estimator was evaluated in."""

    a1: np.ndarray
    a0: np.ndarray
    G: int
    name: str = "estimator"
    ok: bool = True
    reason: str = ""
    dtype: str = "float64"


@dataclasses.dataclass(frozen=True)
class Moments:
    """Per-prompt exact quantities, each of shape (P,)."""

    kappa: np.ndarray
    second_moment: np.ndarray  # E‖ĝ_x‖²
    mse: np.ndarray  # E‖ĝ_x − g_x‖²
    bias_sq: np.ndarray  # (1 − κ_x)² ‖g_x‖²


def canonical_groups(G: int) -> np.ndarray:
    """(G + 1, G) float64 binary groups: row c holds c ones, then G − c zeros."""
    from gpolab.estimators import binary_groups  # deferred: jax (this module needs numpy, scipy)

    return binary_groups(G, np.float64)


@contextlib.contextmanager
def _precision():
    """JAX's x64 mode while inside (yields "float64"); "float32" where this JAX has no x64
    context manager."""
    import jax

    if not hasattr(jax, "enable_x64"):
        yield "float32"
        return
    with jax.enable_x64(True):
        yield "float64"


def _runner(fn: Callable, dtype: str) -> Callable:
    """``x (numpy) → fn(x)`` as float64 numpy, through one ``jit(fn)``: every batch of one shape
    shares one compilation (a count table and all its checks: one); a function JAX cannot trace
    (numpy inside) is called eagerly."""
    import jax
    import jax.numpy as jnp

    jitted, eager = jax.jit(fn), False

    def run(x):
        nonlocal eager
        x = jnp.asarray(x, dtype)
        if not eager:
            try:
                return np.asarray(jitted(x), np.float64)
            except (TypeError, jax.errors.ConcretizationTypeError):
                eager = True
        return np.asarray(fn(x), np.float64)

    return run


def _same(a: np.ndarray, b: np.ndarray, dtype: str) -> bool:
    tol = (1e-9 if dtype == "float64" else 1e-4) * max(1.0, float(np.max(np.abs(a))))
    return a.shape == b.shape and bool(np.all(np.abs(a - b) <= tol))


def _copies(n: int, G: int) -> int:
    """How many copies of one group :func:`_defect` evaluates: the canonical shape's n rows while
    cheap (no new compilation), else 1."""
    return n if n * n * G <= 2**22 else 1


def _defect(run: Callable, rewards: np.ndarray, out: np.ndarray, dtype: str) -> str:
    """Why ``out`` = run(rewards) admits no count table ('' when it does).  Every check runs for
    every function, gpolab's own entries included: they decide whether a table exists (callers
    cache the result, never skip a check).  Group scope: for every group c, a batch of copies
    of c (of the canonical groups' shape, no new compilation; c alone at large G, one) gives c
    the advantages it has in the whole batch; permutation invariance: the columns permuted."""
    if out.shape != rewards.shape:
        return f"returned shape {out.shape} for rewards of shape {rewards.shape}"
    if not np.all(np.isfinite(out)):
        return "returned non-finite advantages on a binary group"
    n, G = rewards.shape
    coupled = "is batch-scoped (a group's advantages change with the other groups in the batch)"
    rows = _copies(n, G)
    for c in range(n):
        alone = run(np.repeat(rewards[c : c + 1], rows, axis=0))
        if not _same(alone, np.broadcast_to(out[c], alone.shape), dtype):
            return coupled
    perm = np.roll(np.arange(G)[::-1], 1)  # successes no longer first
    if not _same(run(rewards[:, perm]), out[:, perm], dtype):
        return "is not permutation-invariant within a group"
    ones = rewards.astype(bool)
    spread = [
        np.ptp(out[c][ones[c] == z]) for c in range(G + 1) for z in (0, 1) if (ones[c] == z).any()
    ]
    if max(spread) > (1e-9 if dtype == "float64" else 1e-4) * max(1.0, float(np.max(np.abs(out)))):
        return "gives equal rewards of one group different advantages"
    return ""


def count_table(fn: Callable, G: int, *, name: str = "estimator", strict: bool = True) -> Table:
    """The count table of the advantage function ``fn(rewards (P, G)) -> (P, G)``.

    ``fn`` is called on :func:`canonical_groups`, a1[s] = out[s + 1, 0] and
    a0[s] = out[s, G − 1], then checked: output shape, finite values, group scope (a batch of
    copies of one group gives that group the advantages it has in the whole batch), permutation
    invariance (columns permuted) and equal advantages for equal rewards of one group.  Every
    check evaluates a batch of the same shape: one compilation (two at G > 160).  A failure raises
    :class:`~gpolab.validate.ConfigError` naming ``name``; with ``strict=False`` it returns a
    NaN table with ``ok=False`` and the reason instead.  A table that passes is kept on disk,
    keyed by ``fn``'s traced computation and loaded, verified, instead of compiled again in
    later processes (:mod:`gpolab.theory.count_cache`; ``GPOLAB_COUNT_CACHE=""`` turns it off).
    """
    validate.integer("G", G, 1)
    with spans.span("count tables"):
        return _count_table(fn, G, name, strict)


def _count_table(fn: Callable, G: int, name: str, strict: bool) -> Table:
    rewards = canonical_groups(G)
    with _precision() as dtype:  # one input per shape fn is evaluated on (_defect's copies)
        inputs = [rewards] if _copies(G + 1, G) > 1 else [rewards, rewards[:1]]
        key = count_cache.key(fn, inputs, dtype, __file__)
    cached = count_cache.load(key, G)
    if cached is not None:
        return Table(*cached, G, name, dtype=dtype)
    try:
        with _precision() as dtype:
            run = _runner(fn, dtype)
            out = run(rewards)
            reason = _defect(run, rewards, out, dtype)
    except validate.ConfigError:
        raise
    except Exception as e:  # the estimator's own failure, reported under its name
        out, dtype, reason = None, "float64", f"raised {type(e).__name__}: {e}"
    if reason:
        if strict:
            raise validate.ConfigError(f"estimator {name!r}: {reason}; no exact count theory")
        nan = np.full(G, np.nan)
        return Table(nan, nan, G, name, ok=False, reason=reason, dtype=dtype)
    table = Table(out[1:, 0].copy(), out[:G, G - 1].copy(), G, name, dtype=dtype)
    count_cache.store(key, table.a1, table.a0)
    return table


def registry_table(
    spec: str, G: int, *, strict: bool = True, length: float | None = None, **shared
) -> Table:
    """:func:`count_table` of the estimator spec ``spec`` (a registry name, ``name[opt=value]``,
    ``package.module:function`` or a :class:`gpolab.estimators.Bound`); ``shared`` are a lab's
    common options (``scale``, ``ddof``, ``eps``) for the entries that read them, e.g.
    ``registry_table("grpo", 8, eps=1e-4)``.  Entries with their own gradient weights c
    (``ustat``) are tabulated as A = G·c.  An entry that needs more than the rewards (V(x),
    lengths, a greedy reward) or couples the batch with these options has no table: it raises,
    or with ``strict=False`` returns a NaN table whose ``reason`` says why.  ``length``: the
    env's response length when every response has the same one (then an estimator that needs
    only lengths is reward-only, if group-scoped).  Every check runs for every entry; the result
    (table or reason) of a built-in entry is cached per process (a user's function may be
    re-registered: never cached), a table on disk as :func:`count_table` says (keyed by the
    traced computation: a re-registered function with other code misses)."""
    from gpolab import estimators  # deferred: jax, as in canonical_groups

    entry, _ = estimators.bind(spec, shared)
    if entry.user:
        return _registry_table(spec, G, strict, length, tuple(sorted(shared.items())))
    return _builtin_table(spec, G, strict, length, tuple(sorted(shared.items())))


def _registry_table(spec: str, G: int, strict: bool, length, shared: tuple) -> Table:
    from gpolab import estimators  # deferred: jax, as in canonical_groups

    entry, options = estimators.bind(spec, dict(shared))
    label = estimators.canonical(spec)
    reason = _scope_defect(entry, options, length)
    if reason:
        if strict:
            raise validate.ConfigError(f"estimator {label}: {reason}: no count table")
        nan = np.full(G, np.nan)
        return Table(nan, nan, G, name=label, ok=False, reason=reason)
    given = {"lengths": lambda r: np.full(r.shape, length, r.dtype)} if entry.needs else {}
    return count_table(advantage_fn(entry, options, given), G, name=label, strict=strict)


def _scope_defect(entry, options: dict, length) -> str:
    """Why the registry's own record rules a count table out ('' when it does not): an input
    besides the rewards (lengths only when they vary), or a batch scope.  Both are checked for
    every entry, whatever it needs; :func:`count_table` then checks the function itself."""
    missing = [n for n in entry.needs if n != "lengths" or length is None]
    if missing:
        return f"needs {', '.join(missing)} besides the rewards"
    if entry.scope_of(options) != "group":
        return "is batch-scoped (its normalization couples the prompts of a batch)"
    return ""


def advantage_fn(entry, options: dict, given: dict | None = None) -> Callable:
    """``rewards → advantages`` of a bound registry entry, as :func:`count_table` tabulates it:
    entries with their own gradient weights c (``ustat``) as A = G·c; ``given``: name → function
    of the rewards for the inputs the entry needs (e.g. constant lengths)."""
    if entry.weights is not None:  # ĝ = Σ_g c_g W_g: the table holds A_g = G c_g
        return lambda r: r.shape[-1] * entry.weights(r)
    given = given or {}
    return lambda r: entry(r, **{k: v(r) for k, v in given.items()}, **options)


@functools.lru_cache(maxsize=512)
def _builtin_table(spec: str, G: int, strict: bool, length, shared: tuple) -> Table:
    return _registry_table(spec, G, strict, length, shared)


def _pmf(n: int, p: np.ndarray) -> np.ndarray:
    """(..., n + 1) Bin(n, p) probabilities; exact at p = 0 and p = 1."""
    return binom.pmf(np.arange(n + 1), n, np.asarray(p, np.float64)[..., None])


def _expect(table_row: np.ndarray, pmf: np.ndarray) -> np.ndarray:
    return np.sum(table_row * pmf, axis=-1)


def kappa(table: Table, G: int, p) -> np.ndarray:
    """κ_G(p) = E f(1, S) − E f(0, S), S ~ Bin(G − 1, p), for an array of p."""
    _check_G(table, G)
    pmf = _pmf(G - 1, p)
    return _expect(table.a1, pmf) - _expect(table.a0, pmf)


def _cross(table: Table, G: int, p: np.ndarray) -> np.ndarray:
    """E f(1,1+S′)² + E f(0,S′)² − 2 E[f(1,S′) f(0,1+S′)], S′ ~ Bin(G − 2, p); 0 for G = 1."""
    if G == 1:
        return np.zeros(np.shape(p))
    pmf = _pmf(G - 2, p)
    a1, a0 = table.a1, table.a0
    both = a1[..., 1:] ** 2 + a0[..., :-1] ** 2 - 2 * a1[..., :-1] * a0[..., 1:]
    return _expect(both, pmf)


def moments(table: Table, G: int, p, gsq, S2, e_wz2) -> Moments:
    """κ, E‖ĝ_x‖², MSE and bias² per prompt (module docstring) from p = V(x), ‖g_x‖², S2 and
    e_wz2 = E[‖W‖² Z], each of shape (P,) (or broadcastable)."""
    _check_G(table, G)
    p, gsq, S2, e_wz2 = (np.asarray(v, np.float64) for v in (p, gsq, S2, e_wz2))
    pmf = _pmf(G - 1, p)
    k = _expect(table.a1, pmf) - _expect(table.a0, pmf)
    diag = e_wz2 * _expect(table.a1**2, pmf) + (S2 - e_wz2) * _expect(table.a0**2, pmf)
    second = diag / G + (G - 1) / G * gsq * _cross(table, G, p)
    return Moments(k, second, second - 2 * k * gsq + gsq, (1 - k) ** 2 * gsq)


def _check_G(table: Table, G: int) -> None:
    if table.G != G:
        raise validate.ConfigError(f"G: got {G}; the table of {table.name!r} is for G = {table.G}")


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _truth_moments(truth, table: Table, G: int) -> Moments:
    gsq = np.sum(_f64(truth.g_local) ** 2, axis=-1)
    return moments(table, G, truth.V, gsq, truth.S2, truth.e_wz2)


def global_gradients(truth) -> np.ndarray:
    """(P, D) per-prompt gradients g_X in global coordinates, inferred from the truth's shapes:
    every prompt moves all of θ (g_local (P, D): log-linear bandit, arithmetic) or only its own
    block (D = P·d: tabular bandit, as :func:`gpolab.envs.bandit.to_global` places it)."""
    local = _f64(truth.g_local)
    P, d = local.shape
    D = np.shape(truth.g)[-1]
    if D == d:
        return local
    if D == P * d:
        return (np.eye(P)[:, :, None] * local[None, :, :]).reshape(P, D)
    raise validate.ConfigError(f"g_each: cannot place g_local {local.shape} into D = {D}; pass it")


def mse(truth, table: Table, G: int, B: int | None = None, g_each=None) -> float:
    """Exact MSE with :func:`gpolab.theory.mse.mse`'s conventions: ``B=None`` (or 0) the
    prompt-weighted Σ_x f(x) MSE(x); ``B=b`` a mini-batch of b iid prompts (module docstring),
    with ``g_each`` (P, D) the per-prompt gradients in global coordinates (default
    :func:`global_gradients`).  NaN when the table is not ``ok``."""
    if not table.ok:
        return float("nan")
    mo, f = _truth_moments(truth, table, G), _f64(truth.prompt_probs)
    if not B:
        return float(f @ mo.mse)
    validate.integer("B", B, 1)
    m, spread = _batch(truth, mo, f, g_each)
    return float(spread / B + np.sum((m - _f64(truth.g)) ** 2))


def _batch(truth, mo: Moments, f, g_each) -> tuple[np.ndarray, float]:
    """A mini-batch's mean m = Σ_x f_x κ_x g_X (global coordinates) and the spread of one
    prompt's estimate around it, Σ_x f_x [MSE_x − (1−κ_x)²‖g_x‖²] + Σ_x f_x κ_x² ‖g_X‖² − ‖m‖²
    (Tr Cov ĝ_X; the batch of B divides it by B)."""
    ge = global_gradients(truth) if g_each is None else _f64(g_each)
    m = (f * mo.kappa) @ ge
    return m, f @ (mo.mse - mo.bias_sq) + (f * mo.kappa**2) @ np.sum(ge**2, -1) - m @ m


def bias_sq(truth, table: Table, G: int, B: int | None = None, g_each=None) -> float:
    """Exact squared bias matching :func:`mse`: Σ_x f(x) (1 − κ_x)² ‖g_x‖² (``B=None``) or
    ‖Σ_x f_x κ_x g_X − g‖² (``B=b``, independent of b)."""
    if not table.ok:
        return float("nan")
    mo, f = _truth_moments(truth, table, G), _f64(truth.prompt_probs)
    if not B:
        return float(f @ mo.bias_sq)
    m, _ = _batch(truth, mo, f, g_each)
    return float(np.sum((m - _f64(truth.g)) ** 2))


def mse_se(truth, table: Table, G: int, B: int | None = None) -> float:
    """Standard error :func:`mse` inherits from a Monte Carlo S2 (``truth.S2_se``, independent
    across prompts; 0 when absent).  MSE(x) is linear in S2 with slope E f(0, S)²/G; e_wz2,
    g_x and V are exact in every env here (the arithmetic surrogate enumerates its successful
    sequences), so S2 is the only Monte Carlo input."""
    if not table.ok:
        return float("nan")
    se = getattr(truth, "S2_se", None)
    if se is None:
        return 0.0
    slope = _expect(table.a0**2, _pmf(G - 1, truth.V)) / G
    per_prompt = _f64(truth.prompt_probs) * slope * _f64(se)
    return float(np.sqrt(np.sum(per_prompt**2))) / (B or 1)


def best_scale(truth, table: Table, G: int, B: int | None = None, g_each=None) -> dict:
    """Exact ``best_scale`` c* = E[ĝ·g]/E‖ĝ‖² and ``scaled_mse`` = ‖g‖² − E[ĝ·g]²/E‖ĝ‖², the MSE
    after the best single rescaling (same averaging as :func:`mse`; gpolab's score, invariant to
    rescaling the advantages)."""
    if not table.ok:
        return {"best_scale": float("nan"), "scaled_mse": float("nan")}
    mo, f = _truth_moments(truth, table, G), _f64(truth.prompt_probs)
    target = target_sq(truth, B or None)
    if not B:
        dot = f @ (mo.kappa * np.sum(_f64(truth.g_local) ** 2, -1))
        norm2 = f @ mo.second_moment
    else:
        m, spread = _batch(truth, mo, f, g_each)
        dot, norm2 = m @ _f64(truth.g), spread / B + m @ m
    if norm2 <= 0:
        return {"best_scale": float("nan"), "scaled_mse": float(target)}
    return {"best_scale": float(dot / norm2), "scaled_mse": float(target - dot**2 / norm2)}


def theory_columns(
    truth, spec: str, G: int, B: int | None = None, length: float | None = None, **shared
) -> dict:
    """The exact-theory columns of a result row for estimator ``spec``: ``theory_mse``,
    ``theory_mse_se``, ``theory_bias_sq``, ``theory_best_scale``, ``theory_scaled_mse`` and
    ``theory`` (which formula: ``closed form`` for gpolab's own unbiased/mean estimators,
    ``count table`` (this module) for every other reward-only one, else ``none: <why>``)."""
    table = registry_table(spec, G, strict=False, length=length, **shared)
    scaled = best_scale(truth, table, G, B)
    out = {"theory_best_scale": scaled["best_scale"], "theory_scaled_mse": scaled["scaled_mse"]}
    name = str(spec)  # a bound spec's name as given
    if name in closed.PER_PROMPT:
        return {
            **out,
            "theory": "closed form",
            "theory_mse": closed.mse(truth, name, G, B),
            "theory_mse_se": closed.mse_se(truth, name, G, B),
            "theory_bias_sq": closed.bias_sq(truth, name, G, B),
        }
    return {
        **out,
        "theory": "count table" if table.ok else f"none: {table.reason}",
        "theory_mse": mse(truth, table, G, B),
        "theory_mse_se": mse_se(truth, table, G, B),
        "theory_bias_sq": bias_sq(truth, table, G, B),
    }
