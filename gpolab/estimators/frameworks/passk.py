"""Pass@k training's advantage (arXiv 2508.10751; see :mod:`gpolab.estimators.frameworks`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from gpolab import validate
from gpolab.estimators.frameworks._common import _need_group_axis


def _comb_ratio(top: jax.Array, bottom: int, k: int) -> jax.Array:
    """C(top, k)/C(bottom, k) for integer-valued ``top`` ≤ ``bottom``, k ≤ bottom; 0 if top < 0
    (scipy.special.comb returns 0 for a negative N)."""
    out = jnp.ones_like(top)
    for i in range(k):
        out = out * (top - i) / (bottom - i)
    return jnp.where(top < 0, 0.0, out)


def passk_training(rewards, *, lengths=None, greedy=None, k: int = 4):
    """Pass@k training with analytical advantages (arXiv 2508.10751; authors' ``calc_adv``).

    Binary rewards, n = G, c = #{r = 1}:  ρ = 1 − C(n − c, k)/C(n, k),  σ = √(ρ(1 − ρ)),
        A⁺ = (1 − ρ)/(σ + 1e-6),   A⁻ = (1 − ρ − C(n − c − 1, k − 1)/C(n − 1, k − 1))/(σ + 1e-6).
    The README formulas have no eps; the code adds 1e-6 to σ (the code is followed here).
    Mirrors ``np.where(val == 1, A⁺, val)`` then ``np.where(new == 0, A⁻, new)``: rewards that
    are neither 0 nor 1 pass through unchanged (the method assumes binary rewards), and a
    positive whose A⁺ is 0 is re-assigned A⁻ (also 0 in that case).  All-equal groups: 0
    (c = 0 ⇒ A⁻ = 0; c = n ⇒ A⁺ = 0).  Needs 1 ≤ k ≤ G (else the C(n, k) = 0 division); k = 1 is
    GRPO with the population std + 1e-6.  The code has no default k; 4 is gpolab's (so the
    spec's ``min_group`` is 4: in general it is k).
    Source: ``RUCAIBox/Passk_Training code/passk_adv.py::calc_adv`` @ 00474d78.

    Args:
      rewards: [..., G] float rewards (binary: 0 or 1) of one group per leading index.
      k: the k of pass@k, 1 ≤ k ≤ G (static).

    Returns:
      [..., G] advantages.
    """
    _need_group_axis(rewards, "paper/passk-training")
    n = rewards.shape[-1]
    if not (isinstance(k, int) and 1 <= k <= n):
        raise validate.ConfigError(f"paper/passk-training: k {k!r}; allowed 1 <= k <= G = {n}")
    c = jnp.sum((rewards == 1).astype(rewards.dtype), -1, keepdims=True)
    rho = 1.0 - _comb_ratio(n - c, n, k)
    sigma = jnp.sqrt(jnp.maximum(rho * (1.0 - rho), 0.0))  # float32 ρ = 1 − 1 can be −1e-8
    adv_p = (1.0 - rho) / (sigma + 1e-6)
    adv_n = (1.0 - rho - _comb_ratio(n - c - 1, n - 1, k - 1)) / (sigma + 1e-6)
    new = jnp.where(rewards == 1, adv_p, rewards)
    return jnp.where(new == 0, adv_n, new)
