"""Per-seed measurement functions: one env, one estimator, one seed → error vector and diagnostics.

Each ``*_cell`` dataclass is the static part of a measurement (it sets shapes and code paths and
is hashed by the engine's jit cache); the traced part travels in ``args``.  Functions follow the
engine's signature ``fn(cell, key, args) -> dict``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from gpolab import estimators
from gpolab.envs import arithmetic, bandit, tree

GREEDY = 0x9E3  # fold_in tag of the greedy response's reward draw (other draws stay the same)


def cell_weights(cell, rewards: jax.Array, inputs: dict, eps) -> jax.Array:
    """(E, P, G) gradient weights of every estimator spec of ``cell`` on rewards (P, G), on the
    same draws.  ``inputs``: name → thunk for baseline / lengths / greedy; each input some
    estimator needs is built once, the others never.  The cell's ``scale``/``ddof`` and the
    traced ``eps`` reach the estimators that read them."""
    shared = {"scale": cell.scale, "ddof": cell.ddof, "eps": eps}
    needs = [estimators.resolve(spec).needs for spec in cell.estimators]
    built = {name: inputs[name]() for name in set().union(*needs)}
    return jnp.stack(
        [
            estimators.gradient_weights(spec, rewards, **{n: built[n] for n in need}, **shared)
            for spec, need in zip(cell.estimators, needs, strict=True)
        ]
    )


@dataclasses.dataclass(frozen=True)
class BanditCell:
    """Every estimator in ``estimators`` is applied to the same draws (common random numbers).

    ``B=0``: every prompt gets one group (reports Σ_x f(x) MSE(x));
    ``B=b``: a mini-batch of b iid prompts (reports the mini-batch MSE).
    ``mean_error=False`` keeps only ‖e‖² per seed (MSE and its CI; no bias/variance split, no
    cosine or best-scale statistics).
    """

    estimators: tuple  # specs (str) or bound specs (estimators.Bound), rows named as given
    G: int
    B: int = 0
    scale: str = "group"
    ddof: int = 1
    mean_error: bool = True
    loss_agg: str = estimators.DEFAULT_LOSS_AGG  # verl loss_agg_mode (estimators.aggregation)
    norm_length: float | None = None  # L_norm of seq-mean-token-sum-norm (None: batch max)


def bandit_inputs(key, params, truth, prompts, actions, lengths_dtype=None) -> dict:
    """The bandit's thunks for :func:`cell_weights` (built only for the estimators that need
    them): the oracle baseline V(x), the responses' lengths (cast to ``lengths_dtype`` when
    given) and the greedy response's reward (its own ``fold_in`` stream)."""

    def lengths():
        out = bandit.response_length(params, prompts, actions)
        return out if lengths_dtype is None else out.astype(lengths_dtype)

    return {
        "baseline": lambda: truth.V[prompts],
        "lengths": lengths,
        "greedy": lambda: bandit.greedy_rewards(jax.random.fold_in(key, GREEDY), params, prompts),
    }


def bandit_error(cell: BanditCell, key: jax.Array, args) -> dict:
    """Errors of gradient estimates against the exact gradient.  ``args = (params, truth, tables,
    eps)``: the instance, its exact truth and its alias tables
    (:func:`gpolab.envs.bandit.outcome_tables`).

    Returns ``{name: {"err": e, "sq": ‖e‖²}}`` per estimator plus the degenerate-group fraction.
    """
    params, truth, tables, eps = args
    if cell.B == 0:
        prompts, k_group = jnp.arange(params.num_prompts, dtype=jnp.int32), key
    else:
        k_prompts, k_group = jax.random.split(key)
        prompts = bandit.sample_prompts(k_prompts, params, cell.B)
    actions, rewards = bandit.sample(k_group, params, prompts, cell.G, tables)
    out = {"degenerate": jnp.mean(estimators.degenerate(rewards).astype(rewards.dtype))}
    inputs = bandit_inputs(key, params, truth, prompts, actions)
    weights = cell_weights(cell, rewards, inputs, eps)  # (E, B, G)
    weights = aggregate(cell, weights, inputs["lengths"])
    ghat = jax.vmap(bandit.weighted_scores, in_axes=(None, None, None, 0))(
        params, prompts, actions, weights
    )  # (E, B, d), one batched scatter
    if cell.B == 0:
        err = jnp.sqrt(truth.prompt_probs)[None, :, None] * (ghat - truth.g_local[None])
        err = err.reshape(len(cell.estimators), -1)
        total = jax.vmap(bandit.prompt_average, in_axes=(None, 0))(params, ghat)
    else:
        total = jax.vmap(bandit.to_global, in_axes=(None, None, 0))(params, prompts, ghat)
        err = total - truth.g[None]
    sq = jnp.sum(err**2, axis=-1)
    if not cell.mean_error:  # ‖e‖² only: the statistic of gpolab bench's W1 and its references
        return {**out, **{str(name): {"sq": sq[i]} for i, name in enumerate(cell.estimators)}}
    cos = cosine(total, truth.g)
    if cell.B == 0:  # per-prompt weighting, as the MSE: Σ_x f(x) ĝ_x·g_x and Σ_x f(x) ‖ĝ_x‖²
        f = truth.prompt_probs
        dot = jnp.einsum("p,epd,pd->e", f, ghat, truth.g_local)
        norm2 = jnp.einsum("p,epd->e", f, ghat**2)
    else:
        dot, norm2 = total @ truth.g, jnp.sum(total**2, axis=-1)
    for i, name in enumerate(cell.estimators):  # a spec or a bound one: its name as given
        out[str(name)] = {
            "err": err[i],
            "sq": sq[i],
            "cos": cos[i],
            "dot": dot[i],
            "norm2": norm2[i],
        }
    return out


def cosine(estimates: jax.Array, target: jax.Array) -> jax.Array:
    """(E,) cosine of each row of ``estimates`` (E, D) with ``target`` (D,); 0 for a zero row."""
    norms = jnp.linalg.norm(estimates, axis=-1) * jnp.linalg.norm(target)
    dots = estimates @ target
    return jnp.where(norms > 0, dots / jnp.where(norms > 0, norms, 1.0), 0.0)


@dataclasses.dataclass(frozen=True)
class ArithmeticCell:
    """``Q`` questions drawn uniformly per seed, one group of G answers each; every estimator on
    the same draws.  The per-seed mean of ‖ĝ_x − g_x‖² over the Q questions is unbiased for the
    average per-question MSE Σ_x f(x) MSE(x)."""

    estimators: tuple  # specs (str) or bound specs (estimators.Bound), rows named as given
    G: int
    Q: int = 8
    scale: str = "group"
    ddof: int = 1
    loss_agg: str = estimators.DEFAULT_LOSS_AGG  # verl loss_agg_mode (estimators.aggregation)
    norm_length: float | None = None  # L_norm of seq-mean-token-sum-norm (None: batch max)
    lengths: str = "one"  # one: filler + thoughts + answer for all; generated: up to <eos>


def arithmetic_error(cell: ArithmeticCell, key: jax.Array, args) -> dict:
    """``args = (params, truth, questions, eps)``: the Q groups of a seed are one batch (what a
    batch-scoped estimator normalizes over); one forward pass per group and one backward pass per
    estimator (a vjp with E cotangents).  ``cos``: cosine between the batch's gradient estimate
    (1/Q) Σ ĝ_x and its exact gradient (1/Q) Σ g_x."""
    params, truth, questions, eps = args
    k_q, k_g = jax.random.split(key)
    idx = jax.random.randint(k_q, (cell.Q,), 0, questions.features.shape[0])
    feats, answers = questions.features[idx], questions.answers[idx]
    tokens = jax.lax.map(
        lambda a: arithmetic.sample(a[0], params, a[1], cell.G),
        (jax.random.split(k_g, cell.Q), feats),
    )  # (Q, G, length)
    rewards = jax.vmap(arithmetic.rewards)(tokens, answers)  # (Q, G)
    inputs = {  # built only for the estimators that need them
        "baseline": lambda: truth.V[idx],
        "lengths": lambda: arithmetic_lengths(cell, params, tokens, rewards),
        "greedy": lambda: jax.lax.map(
            lambda a: arithmetic.greedy_reward(params, *a), (feats, answers)
        ),
    }
    weights = cell_weights(cell, rewards, inputs, eps)  # (E, Q, G)
    weights = aggregate(cell, weights, inputs["lengths"])
    g_x = truth.g_local[idx]

    def add(carry, a):
        feat, tok, w, g = a
        ghat = arithmetic.gradient_estimates(params, feat, tok, w)  # (E, D)
        sq, dot, norm2 = jnp.sum((ghat - g[None]) ** 2, -1), ghat @ g, jnp.sum(ghat**2, -1)
        return (carry[0] + ghat, carry[1] + jnp.stack([sq, dot, norm2])), None

    E = len(cell.estimators)
    zero = (jnp.zeros((E, g_x.shape[-1]), g_x.dtype), jnp.zeros((3, E), g_x.dtype))
    (total, sums), _ = jax.lax.scan(add, zero, (feats, tokens, jnp.swapaxes(weights, 0, 1), g_x))
    cos = cosine(total, jnp.sum(g_x, axis=0))
    sq, dot, norm2 = sums / cell.Q  # per-question means
    out = {"degenerate": jnp.mean(estimators.degenerate(rewards).astype(sq.dtype))}
    for i, name in enumerate(cell.estimators):
        out[str(name)] = {"sq": sq[i], "cos": cos[i], "dot": dot[i], "norm2": norm2[i]}
    return out


@dataclasses.dataclass(frozen=True)
class TreeCell:
    """Static settings of one tree cell (the sweep's env=tree and ``gpolab tree`` both use it).
    ``beta_ints`` = (a, b) for the fast exact integer-Beta thought sampler (see
    :func:`tree_cell`), else None; ``grad``: also the thought-policy gradient (finite model)."""

    K: int
    M: int
    variant: str = "thought-std"
    ddof: int = 1
    beta_ints: tuple[int, int] | None = None
    grad: bool = False


def tree_cell(
    K: int,
    M: int,
    variant: str = "thought-std",
    ddof: int = 1,
    *,
    model: str = "beta",
    a: float = 2.0,
    b: float = 3.0,
    grad: bool = False,
) -> TreeCell:
    """The cell of a (K, M) tree with the fastest exact samplers for this thought model."""
    return TreeCell(K, M, variant, ddof, tree.integer_beta(model, a, b), grad)


def tree_error(cell: TreeCell, key: jax.Array, args) -> dict:
    """One tree: thought advantages Â (K,) against the standardized true values.

    ``args = (params, truth, eps)``, plus ``grad_target`` (T,) with ``cell.grad``: the thought
    gradient the variant estimates (``grad_err``, ``grad_sq``).  Two independent sets of M
    continuations per thought give an unbiased estimate of the conditional variance
    E[Var(Â_k | thoughts)] = E[½ (Â¹_k − Â²_k)²] (``cond_var``).  ``corr_v``/``corr_vv``: the
    per-tree moments (a, t, aa, tt, at) of the correlation and their outer product.
    """
    params, truth, eps, *grad_target = args
    k_thoughts, k_c1, k_c2 = jax.random.split(key, 3)
    if cell.beta_ints is not None:
        p, ids = tree.sample_beta_int(k_thoughts, *cell.beta_ints, (cell.K,)), None
    else:
        p, ids = tree.sample_thoughts(k_thoughts, params, cell.K)

    def adv(k):
        counts = tree.sample_counts(k, p, cell.M)
        # only leaf-std looks past V̂_k = S_k/M; for the others one "leaf" V̂_k gives the same Â
        leaf_std = cell.variant == "leaf-std"
        z = tree.leaves(counts, cell.M) if leaf_std else (counts / cell.M)[:, None]
        a = estimators.tree_advantages(z, variant=cell.variant, ddof=cell.ddof, eps=eps)
        return a, counts

    (a1, c1), (a2, _) = adv(k_c1), adv(k_c2)
    target = tree.population_target(truth, p)
    out = {
        "sq": jnp.mean((a1 - target) ** 2),
        "sq_group": jnp.mean((a1 - tree.group_target(p, cell.ddof)) ** 2),
        "cond_var": 0.5 * jnp.mean((a1 - a2) ** 2),
        "degenerate": estimators.degenerate(c1).astype(p.dtype),
        "a": jnp.mean(a1),
        "t": jnp.mean(target),
        "aa": jnp.mean(a1 * a1),
        "tt": jnp.mean(target * target),
        "at": jnp.mean(a1 * target),
    }
    # (a, t, aa, tt, at) and its outer product: the covariance of these per-seed means gives the
    # delta-method standard error of the pooled correlation (gpolab.labs.tree.lab.corr_stats)
    v = jnp.stack([out["a"], out["t"], out["aa"], out["tt"], out["at"]])
    out["corr_v"], out["corr_vv"] = v, jnp.outer(v, v)
    if cell.grad:
        err = tree.thought_gradient(a1, ids, jax.nn.softmax(params.logits)) - grad_target[0]
        out["grad_err"], out["grad_sq"] = err, jnp.sum(err**2)
    return out


def tree_overlap_error(cell: TreeCell, key: jax.Array, args) -> dict:
    """:func:`tree_error` (finite thoughts, ``cell.grad``) plus the six per-seed moments ``ov_w``
    of :data:`gpolab.theory.tree_overlap.MOMENTS` and their outer product ``ov_ww``, from this
    tree's ĝ₀ and a second, independent tree's (key ``fold_in(key, 1)``): ĝ¹·ĝ² and h¹h² are
    unbiased for ‖E ĝ₀‖² and (E h)², h = ψ·ĝ₀.
    ``args = (params, truth, eps, grad_target, psi)``."""
    *base, psi = args
    out = tree_error(cell, key, base)
    other = tree_error(cell, jax.random.fold_in(key, 1), base)
    t0 = base[3]
    g1, g2 = out["grad_err"] + t0, other["grad_err"] + t0
    h1, h2 = g1 @ psi, g2 @ psi
    w = jnp.stack(
        [
            0.5 * (g1 + g2) @ t0,
            0.5 * (h1 + h2),
            g1 @ g2,
            h1 * h2,
            0.5 * (g1 @ g1 + g2 @ g2),
            0.5 * (h1 * h1 + h2 * h2),
        ]
    )
    out["ov_w"], out["ov_ww"] = w, jnp.outer(w, w)
    return out


# ------------------------------------------------------- response lengths, loss aggregation


def aggregate(cell, weights: jax.Array, lengths) -> jax.Array:
    """(E, B, G) weights of ``cell.loss_agg`` (verl loss_agg_mode) from the seq-mean-token-sum
    weights: each response's weight times N·c_i (:func:`gpolab.estimators.relative_weights`),
    the batch being the cell's B·G responses.  The default mode returns ``weights`` untouched
    (bit-identical) and never builds the lengths (``lengths``: a thunk)."""
    if cell.loss_agg == estimators.DEFAULT_LOSS_AGG:
        return weights
    factor = estimators.relative_weights(cell.loss_agg, lengths(), norm_length=cell.norm_length)
    return weights * factor[None].astype(weights.dtype)


def arithmetic_lengths(cell, params, tokens: jax.Array, rewards: jax.Array) -> jax.Array:
    """(Q, G) response lengths: the constant filler + thoughts + answer (``lengths="one"``) or
    what each response generated up to its first <eos> (``"generated"``)."""
    if cell.lengths == "generated":
        return arithmetic.generated_lengths(params, tokens).astype(rewards.dtype)
    return jnp.full_like(rewards, arithmetic.response_length(params))


@dataclasses.dataclass(frozen=True)
class DynamicBanditCell:
    """DAPO dynamic sampling on the bandit (verl ``filter_groups``, :mod:`gpolab.theory.dynamic`):
    ``max_draws`` generation batches of B iid prompts are drawn per seed (static shapes); the
    first B non-degenerate groups in draw order are kept and every estimator is applied to them
    only, mean over the kept groups.  ``plain_B``: the first ``plain_B`` drawn groups, all kept,
    are plain sampling at about the same responses per step (common random numbers)."""

    estimators: tuple  # specs (str) or bound specs (estimators.Bound), rows named as given
    G: int
    B: int
    max_draws: int = 8
    plain_B: int = 1
    scale: str = "group"
    ddof: int = 1


def _batch_estimates(cell, key, params, truth, eps, prompts, actions, rewards, keep):
    """(E, D) (1/k) Σ_{kept} ĝ_x per estimator, k = Σ keep (0 when nothing is kept)."""
    inputs = bandit_inputs(key, params, truth, prompts, actions, rewards.dtype)
    weights = cell_weights(cell, rewards, inputs, eps) * keep[None, :, None]
    ghat = jax.vmap(bandit.weighted_scores, in_axes=(None, None, None, 0))(
        params, prompts, actions, weights
    )
    total = jax.vmap(bandit.to_global, in_axes=(None, None, 0))(params, prompts, ghat)
    k = jnp.sum(keep)
    return total * (prompts.shape[0] / jnp.maximum(k, 1))


def dynamic_bandit_error(cell: DynamicBanditCell, key: jax.Array, args) -> dict:
    """``args = (params, truth, tables, eps)``.  Per estimator: ``{sq, err, cos, dot, norm2}`` of
    the kept-groups estimate and the same of plain sampling with ``plain_B`` groups (``plain/…``);
    per seed: groups drawn (whole batches until B are kept, at most ``max_draws``), groups kept
    and whether the cap was reached with fewer than B kept (verl raises there; we keep what we
    have).  Batch-scoped estimators see the non-kept padding rows only in capped seeds."""
    params, truth, tables, eps = args
    B, n = cell.B, cell.B * cell.max_draws
    k_prompts, k_group = jax.random.split(key)
    prompts = bandit.sample_prompts(k_prompts, params, n)
    actions, rewards = bandit.sample(k_group, params, prompts, cell.G, tables)
    ok = jnp.logical_or(~estimators.degenerate(rewards), cell.G == 1)
    rank = jnp.cumsum(ok)  # kept groups so far, in draw order
    filled = rank[B - 1 :: B] >= B  # after each batch: are B kept?
    batches = jnp.where(jnp.any(filled), jnp.argmax(filled) + 1, cell.max_draws)
    keep = ok & (rank <= B)
    order = jnp.argsort(~keep, stable=True)[:B]  # kept groups first, in draw order
    k = jnp.sum(keep)
    slot = jnp.arange(B) < k
    dyn = _batch_estimates(
        cell,
        key,
        params,
        truth,
        eps,
        prompts[order],
        actions[order],
        rewards[order],
        slot.astype(rewards.dtype),
    )
    p = slice(0, cell.plain_B)
    plain = _batch_estimates(
        cell,
        key,
        params,
        truth,
        eps,
        prompts[p],
        actions[p],
        rewards[p],
        jnp.ones(cell.plain_B, rewards.dtype),
    )
    out = {
        "drawn": (batches * B).astype(rewards.dtype),
        "kept": k.astype(rewards.dtype),
        "drawn_kept": (batches * B * k).astype(rewards.dtype),  # for the ratio's standard error
        "capped": (k < B).astype(rewards.dtype),
        "degenerate": 1.0 - jnp.mean(ok.astype(rewards.dtype)),
    }
    for tag, total in (("", dyn), ("plain/", plain)):
        err = total - truth.g[None]
        sq, cos = jnp.sum(err**2, axis=-1), cosine(total, truth.g)
        dot, norm2 = total @ truth.g, jnp.sum(total**2, axis=-1)
        for i, name in enumerate(cell.estimators):
            out[f"{tag}{name}"] = {
                "err": err[i],
                "sq": sq[i],
                "cos": cos[i],
                "dot": dot[i],
                "norm2": norm2[i],
            }
    return out
