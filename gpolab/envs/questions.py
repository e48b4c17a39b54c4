"""The arithmetic surrogate's questions (:mod:`gpolab.envs.arithmetic`): a seeded generator over
5 categories and the canonical answer tokens."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from gpolab import validate

VOCAB = 12  # 0-9, '-', <eos>
MINUS, EOS, START = 10, 11, 12
LENGTH = 4
CATEGORIES = ("a+b-c", "a+b-c+d", "a*b", "a/b", "a-(b-c)")
OPERAND_MAX = 20  # operands are one-hot over 0..OPERAND_MAX
FEATURES = len(CATEGORIES) + 4 * (OPERAND_MAX + 1)


@struct.dataclass
class Questions:
    features: jax.Array  # (n, FEATURES) float one-hot encoding of category and operands
    answers: jax.Array  # (n, LENGTH) int32 canonical answer tokens y*
    category: jax.Array  # (n,) int32
    values: jax.Array  # (n,) int32 the integer answers


def make_questions(seed: int = 0, n: int = 500) -> Questions:
    """``n`` questions, uniform over the 5 categories, from a seeded numpy generator."""
    validate.integer("questions", n, 1)
    validate.integer("seed", seed, 0)
    rng = np.random.default_rng(seed)
    cats = rng.integers(0, len(CATEGORIES), n)
    feats = np.zeros((n, FEATURES), np.float32)
    values = np.zeros(n, np.int64)
    for i, c in enumerate(cats):
        if c == 0:
            ops = rng.integers(0, 21, 3)
            val = ops[0] + ops[1] - ops[2]
        elif c == 1:
            ops = rng.integers(0, 16, 4)
            val = ops[0] + ops[1] - ops[2] + ops[3]
        elif c == 2:
            ops = rng.integers(0, 10, 2)
            val = ops[0] * ops[1]
        elif c == 3:
            b, q = rng.integers(1, 10), rng.integers(0, 10)
            ops = np.array([b * q, b]) if b * q <= OPERAND_MAX else np.array([b * (q % 3), b])
            val = ops[0] // ops[1]
        else:
            ops = rng.integers(0, 21, 3)
            val = ops[0] - (ops[1] - ops[2])
        feats[i, c] = 1.0
        for j, o in enumerate(ops):
            feats[i, len(CATEGORIES) + j * (OPERAND_MAX + 1) + int(o)] = 1.0
        values[i] = val
    answers = np.stack([encode(int(v)) for v in values])
    return Questions(
        jnp.asarray(feats),
        jnp.asarray(answers, jnp.int32),
        jnp.asarray(cats, jnp.int32),
        jnp.asarray(values, jnp.int32),
    )


def encode(value: int) -> np.ndarray:
    """Canonical tokens of an integer answer, e.g. −7 → [-, 7, <eos>, <eos>]."""
    digits = [int(d) for d in str(abs(value))]
    tokens = ([MINUS] if value < 0 else []) + digits + [EOS]
    if len(tokens) > LENGTH:
        raise ValueError(f"answer {value} needs {len(tokens)} tokens; LENGTH is {LENGTH}")
    return np.array(tokens + [EOS] * (LENGTH - len(tokens)), np.int32)
