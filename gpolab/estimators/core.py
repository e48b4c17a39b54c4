"""GRPO-family advantage and gradient estimators: one small pure function each.

Every advantage function reduces over the group axis, the last axis ``[..., G]`` (``[..., K, M]``
for trees), and works for any leading batch shape, so a reward log ``[prompts, G]`` can be passed
directly. The gradient estimate from advantages is the one real trainers compute,

    ĝ(x) = ∇_θ (1/G) Σ_g stop_gradient(A_g) · log π_θ(Y_g | x) = (1/G) Σ_g A_g W_g,

see :func:`policy_gradient`. Papers: [U] arXiv 2603.01162 (GRPO gradient as a U-statistic; its
text was read, its equation numbers are not cited here), [T] arXiv 2509.24494 (tree branching)
and [N] arXiv 2601.23135 (std normalization), of which only the abstracts were available:
anything attributed to them beyond their abstracts is gpolab's reconstruction.

Trainer conventions (``grpo_advantages`` arguments that reproduce them):

=============== ================================ ========== ====== ===========================
trainer         option                           eps        ddof   all-equal group
=============== ================================ ========== ====== ===========================
TRL GRPOTrainer ``scale_rewards`` group/batch/none ``1e-4`` 1      advantages 0
verl (grpo)     ``norm_adv_by_std_in_grpo``      ``1e-6``   1      0 (singleton: mean 0, std 1)
OpenRLHF        group norm                       ``1e-9``   1      0
=============== ================================ ========== ====== ===========================

The defaults here are TRL's (``scale="group", ddof=1, eps=1e-4``); :data:`TRAINER_PRESETS` holds
all three. All-equal groups always give advantage exactly 0, also with ``eps=0``.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from gpolab import validate

__all__ = [
    "TREE_VARIANTS",
    "SCALES",
    "TRAINER_PRESETS",
    "vanilla_advantages",
    "oracle_advantages",
    "loo_advantages",
    "mean_advantages",
    "grpo_advantages",
    "ustat_gradient",
    "ustat_weights",
    "policy_gradient",
    "tree_advantages",
    "degenerate",
    "check_rewards",
]

SCALES = ("group", "batch", "none")
TREE_VARIANTS = ("thought-std", "leaf-std", "mean-only")
TRAINER_PRESETS = {
    "trl": dict(scale="group", ddof=1, eps=1e-4),
    "verl": dict(scale="group", ddof=1, eps=1e-6),
    "openrlhf": dict(scale="group", ddof=1, eps=1e-9),
}


def _group_mean(x: jax.Array) -> jax.Array:
    return jnp.mean(x, axis=-1, keepdims=True)


def as_rewards(rewards) -> jax.Array:
    """``rewards`` (array, tracer or nested Python lists) as a floating jax array.

    Floating inputs keep their dtype (float64 stays float64 under ``jax_enable_x64``); integer
    and bool inputs become the default float (float32, or float64 with x64 on)."""
    x = jnp.asarray(rewards)
    return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.result_type(float))


def _group_axis(x: jax.Array) -> None:
    """Trace-time check (static shapes) of a group axis: rank ≥ 1 and G = x.shape[-1] ≥ 1."""
    chex.assert_axis_dimension_gteq(x, -1, 1)


def _group_rewards(rewards) -> jax.Array:
    """:func:`as_rewards`, with its group axis checked (:func:`_group_axis`)."""
    rewards = as_rewards(rewards)
    _group_axis(rewards)
    return rewards


def _check_scores(weights: jax.Array, scores: jax.Array) -> None:
    """Trace-time check of per-sample weights ``[..., G]`` against scores ``[..., G, D]``."""
    _group_axis(weights)
    chex.assert_rank(scores, weights.ndim + 1)
    chex.assert_axis_dimension(scores, -2, weights.shape[-1])
    chex.assert_type([weights, scores], float)


def _need_pairs(G: int, name: str) -> None:
    """ConfigError (at trace time: G is static) for a leave-one-out rule at G < 2."""
    if G < 2:
        raise validate.ConfigError(
            f"G: got {G} for {name} (the leave-one-out mean of G - 1 = {G - 1} others is "
            "undefined); allowed: G >= 2"
        )


def check_rewards(rewards, field: str = "rewards") -> None:
    """Plain-Python check of a reward log before it is traced: finite, at least one group axis."""
    import numpy as np

    a = np.asarray(rewards)
    if a.ndim < 1 or a.shape[-1] < 1:
        raise validate.ConfigError(f"{field}: got shape {a.shape}; allowed: (..., G) with G >= 1")
    validate.finite_array(field, a)


def _std(x: jax.Array, ddof: int, axis: int | None) -> jax.Array:
    """Standard deviation over ``axis`` (None: every element), keeping dims."""
    n = x.shape[-1] if axis == -1 else x.size
    dev = x - jnp.mean(x, axis=axis, keepdims=True)
    return jnp.sqrt(jnp.sum(dev**2, axis=axis, keepdims=True) / (n - ddof))


def _standardize(centred: jax.Array, s: jax.Array, eps, flat_groups: jax.Array) -> jax.Array:
    """centred / (s + eps), exactly 0 for all-equal groups and wherever s + eps = 0."""
    flat = jnp.expand_dims(flat_groups, -1) | (s + eps == 0)
    return jnp.where(flat, 0.0, centred / jnp.where(flat, 1.0, s + eps))


def degenerate(rewards: jax.Array) -> jax.Array:
    """True for groups whose rewards are all equal (no signal).

    Args:
      rewards: [..., G] rewards (any dtype) of one group per leading index, G ≥ 1.

    Returns:
      [...] bool, True where the group's rewards are all equal.
    """
    rewards = jnp.asarray(rewards)
    _group_axis(rewards)
    return jnp.max(rewards, axis=-1) == jnp.min(rewards, axis=-1)


def vanilla_advantages(rewards: jax.Array) -> jax.Array:
    """REINFORCE without baseline: A_g = Z_g.  Unbiased for g_x.  [U]

    Args:
      rewards: [..., G] rewards of one group per leading index, G ≥ 1 (bool and integer
        rewards become the default float).

    Returns:
      [..., G] float advantages.
    """
    rewards = _group_rewards(rewards)
    return rewards


def oracle_advantages(rewards: jax.Array, baseline: jax.Array) -> jax.Array:
    """Oracle baseline: A_g = Z_g − V(x), with V(x) = E[Z | x] of shape ``rewards.shape[:-1]``.

    Unbiased; its MSE tr Σ_oracle / G is the first-order limit every estimator is compared with.
    [U] (its oracle policy gradient)

    Args:
      rewards: [..., G] rewards of one group per leading index, G ≥ 1.
      baseline: [...] V(x) of each group (cast to the rewards' dtype; broadcastable to
        ``rewards.shape[:-1]``, same rank).

    Returns:
      [..., G] float advantages.
    """
    rewards = as_rewards(rewards)
    baseline = jnp.asarray(baseline, rewards.dtype)
    _group_axis(rewards)
    chex.assert_rank(baseline, rewards.ndim - 1)
    chex.assert_is_broadcastable(baseline.shape, rewards.shape[:-1])
    return rewards - jnp.expand_dims(baseline, -1)


def loo_advantages(rewards: jax.Array) -> jax.Array:
    """Leave-one-out (RLOO, "GRPO-type" in [U]) advantages, G ≥ 2.

    A_g = Z_g − (Σ_{k≠g} Z_k)/(G − 1) = G/(G − 1) · (Z_g − Z̄).  Unbiased for g_x.  [U]
    G = 1 has no leave-one-out set: ``ConfigError`` (raised while tracing; G is static).

    Args:
      rewards: [..., G] rewards of one group per leading index, G ≥ 2.

    Returns:
      [..., G] float advantages, exactly 0 on all-equal groups.
    """
    rewards = _group_rewards(rewards)
    G = rewards.shape[-1]
    _need_pairs(G, "loo_advantages")
    total = jnp.sum(rewards, axis=-1, keepdims=True)
    return _zero_if_degenerate(rewards, rewards - (total - rewards) / (G - 1))


def _zero_if_degenerate(rewards: jax.Array, advantages: jax.Array) -> jax.Array:
    """Exactly 0 on all-equal groups: under ``jit`` XLA turns ``x / n`` into ``x * (1/n)``, so a
    constant group's mean can miss its value by an ulp (loo gave ~1e-7 in float32)."""
    return jnp.where(degenerate(rewards)[..., None], 0.0, advantages)


def mean_advantages(rewards: jax.Array) -> jax.Array:
    """Group mean including self (Dr.GRPO): A_g = Z_g − Z̄ = (G − 1)/G · A_g^loo.

    Biased: E ĝ = (1 − 1/G) g_x, i.e. bias −g_x/G.  [U, §3]

    Args:
      rewards: [..., G] rewards of one group per leading index, G ≥ 1.

    Returns:
      [..., G] float advantages, exactly 0 on all-equal groups.
    """
    rewards = _group_rewards(rewards)
    return _zero_if_degenerate(rewards, rewards - _group_mean(rewards))


def grpo_advantages(
    rewards: jax.Array, *, scale: str = "group", ddof: int = 1, eps: float | jax.Array = 1e-4
) -> jax.Array:
    """Std-normalized GRPO advantages: A_g = (Z_g − Z̄) / (s + eps).

    ``scale="group"``: s is the std over the group (last axis); ``"batch"``: one s over every
    reward in the array (TRL ``scale_rewards="batch"``); ``"none"``: no division (= Dr.GRPO).
    ``ddof`` 1 is torch's default (TRL, verl, OpenRLHF); 0 is the population std.
    Groups whose rewards are all equal get exactly 0.  For binary Z and G → ∞,
    E ĝ → g_x / √(V(1 − V)) = ∇ 2 arcsin √V(x) (gpolab's derivation).  [U]

    Args:
      rewards: [..., G] rewards of one group per leading index, G ≥ 1.
      scale: ``"group"``, ``"batch"`` or ``"none"`` (static).
      ddof: 0 or 1 (static).
      eps: [] the constant added to the std (a Python float or a traced scalar).

    Returns:
      [..., G] float advantages.
    """
    rewards = _group_rewards(rewards)
    chex.assert_rank(eps, 0)
    centred = rewards - _group_mean(rewards)
    if scale == "none":
        return centred
    if scale == "group":
        s = _std(rewards, ddof, axis=-1)
    elif scale == "batch":
        s = _std(rewards, ddof, axis=None)
    else:
        raise validate.ConfigError(f"scale: got {scale!r}; allowed: {', '.join(SCALES)}")
    return _standardize(centred, s, eps, degenerate(rewards))


def policy_gradient(adv: jax.Array, scores: jax.Array) -> jax.Array:
    """ĝ = (1/G) Σ_g A_g W_g from advantages ``[..., G]`` and scores W ``[..., G, D]``.

    Equal to ∇_θ (1/G) Σ_g stop_gradient(A_g) log π_θ(Y_g|x), the trainers' surrogate.  [U]

    Args:
      adv: [..., G] float advantages of one group per leading index.
      scores: [..., G, D] float scores W_g = ∇_θ log π_θ(Y_g | x).

    Returns:
      [..., D] the gradient estimate of each group.
    """
    adv, scores = jnp.asarray(adv), jnp.asarray(scores)
    _check_scores(adv, scores)
    return jnp.einsum("...g,...gd->...d", adv, scores) / adv.shape[-1]


def ustat_weights(rewards: jax.Array) -> jax.Array:
    """Per-sample weights c_g of the U-statistic, ĝ_U = Σ_g c_g W_g, from its pairwise kernel.

    U = C(G, 2)⁻¹ Σ_{i<j} h_ij with h_ij = ½ (W_i − W_j)(Z_i − Z_j), G ≥ 2.  [U]
    Summed pair by pair over the G × G upper triangle; by linearity in W,
    Σ_{i<j} (Z_i − Z_j)(W_i − W_j) = Σ_i W_i (Σ_{j>i} (Z_i − Z_j) − Σ_{j<i} (Z_j − Z_i)).
    The result equals the leave-one-out weights A^loo/G exactly, which the tests check.
    G = 1 has no pair: ``ConfigError`` (raised while tracing).

    Args:
      rewards: [..., G] rewards of one group per leading index, G ≥ 2.

    Returns:
      [..., G] float weights c_g.
    """
    rewards = _group_rewards(rewards)
    G = rewards.shape[-1]
    _need_pairs(G, "ustat_weights")
    dz = jnp.expand_dims(rewards, -1) - jnp.expand_dims(rewards, -2)  # [..., i, j] = Z_i − Z_j
    dz = jnp.where(jnp.triu(jnp.ones((G, G), dtype=bool), k=1), dz, 0.0)
    return 0.5 * (jnp.sum(dz, axis=-1) - jnp.sum(dz, axis=-2)) / (G * (G - 1) / 2)


def ustat_gradient(rewards: jax.Array, scores: jax.Array) -> jax.Array:
    """The U-statistic gradient ĝ_U = Σ_g c_g W_g (:func:`ustat_weights`).

    Args:
      rewards: [..., G] rewards of one group per leading index, G ≥ 2.
      scores: [..., G, D] float scores W_g.

    Returns:
      [..., D] the gradient estimate of each group.
    """
    weights, scores = ustat_weights(rewards), jnp.asarray(scores)
    _check_scores(weights, scores)
    return jnp.einsum("...g,...gd->...d", weights, scores)


def tree_advantages(
    rewards: jax.Array,
    *,
    variant: str = "thought-std",
    ddof: int = 1,
    eps: float | jax.Array = 1e-4,
) -> jax.Array:
    """Thought-level advantages for tree rewards ``[..., K, M]`` → ``[..., K]``.

    gpolab's reading of [T]'s abstract (its body was not available): the variants are our
    construction.

    V̂_k = (1/M) Σ_j Z_kj (value of thought k from its M continuations), then
      ``thought-std``: Â_k = (V̂_k − mean_i V̂_i) / (std_i V̂_i + eps)   (gpolab's default)
      ``leaf-std``:    Â_k = (V̂_k − mean_i V̂_i) / (std over all K·M leaves + eps)
      ``mean-only``:   Â_k = V̂_k − mean_i V̂_i
    With M = 1 and ``thought-std`` this is :func:`grpo_advantages` bit for bit.  Degenerate
    trees (all V̂ equal) give 0.

    Args:
      rewards: [..., K, M] rewards of one tree per leading index: K thoughts, M continuations
        each, K ≥ 1 and M ≥ 1.
      variant: ``"thought-std"``, ``"leaf-std"`` or ``"mean-only"`` (static).
      ddof: 0 or 1 (static).
      eps: [] the constant added to the std.

    Returns:
      [..., K] float thought-level advantages.
    """
    rewards = as_rewards(rewards)
    chex.assert_axis_dimension_gteq(rewards, -2, 1)
    _group_axis(rewards)
    chex.assert_rank(eps, 0)
    values = jnp.mean(rewards, axis=-1)
    if variant == "thought-std":
        return grpo_advantages(values, scale="group", ddof=ddof, eps=eps)
    centred = values - _group_mean(values)
    if variant == "mean-only":
        return centred
    if variant == "leaf-std":
        s = _std(rewards.reshape(*rewards.shape[:-2], -1), ddof, axis=-1)
        return _standardize(centred, s, eps, degenerate(values))
    raise validate.ConfigError(f"variant: got {variant!r}; allowed: {', '.join(TREE_VARIANTS)}")
