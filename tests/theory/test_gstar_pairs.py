"""c1 from the pair products of a group's scores (gpolab's :func:`gpolab.theory.gstar.pair_scores`):
unbiased for ‖g_x‖² by exact enumeration, its control, and its place in :func:`gstar.gstar`.
Coverage and variance on known truth: tests/labs/test_plancheck.py."""

import itertools

import numpy as np
import pytest

from gpolab.theory import gstar
from gpolab.validate import ConfigError

PI = np.array([0.5, 0.3, 0.2])  # one prompt's policy over 3 actions
R = np.array([1.0, 0.0, 0.5])  # graded rewards


def _enumerate(n: int, diagonal: bool = False) -> float:
    """E[mean_i r_i] over all 3^n groups of the tabular policy (W = e_a − π), exactly."""
    eye = np.eye(3)
    total = 0.0
    for acts in itertools.product(range(3), repeat=n):
        a = np.array(acts)
        W = eye[a] - PI
        z = R[a]
        r = gstar.pair_scores(z, W @ W.T)
        if diagonal:  # the control: the i = j terms with the same baseline construction
            b = (z.sum() - 2 * z) / (n - 2)
            r = r + ((z - b) ** 2 * np.sum(W * W, 1)) / (n - 1)
        total += np.prod(PI[a]) * r.mean()
    return total


@pytest.mark.parametrize("n", [3, 4, 5])
def test_pair_scores_are_unbiased_for_the_prompts_squared_gradient(n):
    g = (PI * R) @ (np.eye(3) - PI)  # g_x = E[Z (e_a − π)]
    assert _enumerate(n) == pytest.approx(g @ g, rel=1e-12, abs=1e-15)
    # control: keeping the diagonal terms adds the within-group noise, a bias
    assert _enumerate(n, diagonal=True) > 1.5 * (g @ g)


def test_pair_scores_take_several_groups_and_refuse_bad_shapes():
    rng = np.random.default_rng(0)
    z = rng.random((4, 5))
    W = rng.normal(size=(4, 5, 7))
    gram = W @ W.transpose(0, 2, 1)
    batched = gstar.pair_scores(z, gram)
    one = np.stack([gstar.pair_scores(z[k], gram[k]) for k in range(4)])
    assert batched == pytest.approx(one, rel=1e-12)
    with pytest.raises(ConfigError, match="^pair_scores: got rewards of shape"):
        gstar.pair_scores(z[0, :2], gram[0, :2, :2])
    with pytest.raises(ConfigError, match="^pair_scores: got rewards of shape"):
        gstar.pair_scores(z[0], gram[0, :4])


def test_pair_moments_are_group_means_over_groups_of_three_or_more():
    group = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2])
    pairs = np.arange(9, dtype=float)
    z = np.zeros(9)
    assert gstar.pair_moments(z, pairs, group) == pytest.approx([1.0, 6.5])
    with pytest.raises(ConfigError, match="^pairs: got 8 values for 9 responses"):
        gstar.pair_moments(z, pairs[:8], group)


def test_gstar_with_pairs_takes_gamma_from_them():
    """c1 = mean u_x − ‖g‖², C3 = s + mean u_x (constants_from_pairs), with ‖g‖² from the norms;
    c1_method says which path ran."""
    import pandas as pd

    rng = np.random.default_rng(1)
    z = (rng.random(60) < 0.5).astype(float)
    q = rng.random(60) + 1
    group = np.repeat(np.arange(15), 4)
    pairs = rng.random(60)
    norms = pd.DataFrame({"batch": [1, 1, 1, 4, 4, 4], "grad_norm": [2.0, 2.1, 1.9, 1.1, 1.0, 1.2]})
    o = gstar.gstar(z, q, group, norms, 4, pairs=pairs, boot=50)
    gamma = pairs.reshape(15, 4).mean(1).mean()
    assert o["c1_method"] == "pairs"
    assert o["c1"] == pytest.approx(gamma - o["g_sq"]) and o["C3"] == pytest.approx(o["s"] + gamma)
    assert gstar.gstar(z, q, group, norms, 4, boot=50)["c1_method"] == "norms"
