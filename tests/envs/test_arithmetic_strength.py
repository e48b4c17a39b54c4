"""Policy strength on the arithmetic surrogate: the filler-sharpening knob of pre-training, the
sweep's strength options and the filler / decoded split of the exact MSE (docs/arithmetic.md)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpolab import validate
from gpolab.envs import arithmetic as ar
from gpolab.envs import arithmetic_model as am
from gpolab.labs.sweep import lab as sweep
from gpolab.theory import arithmetic_terms as terms_mod

TARGETS = {"weak": 0.1, "strong": 0.3}


def _pretrain(q, sharpen=None):
    kw = {} if sharpen is None else {"filler_sharpen": sharpen}
    return ar.pretrain(q, 2, 8, TARGETS, 1e-2, filler=6, filler_vocab=5, **kw)


def _filler_entropy(params, q):
    p = am.filler_probs(params, q.features)
    return float(jnp.mean(-jnp.sum(p * jnp.log(p), -1)))


@pytest.fixture(scope="module")
def trained():
    q = ar.make_questions(0, 40)
    return q, _pretrain(q), _pretrain(q, 0.0), _pretrain(q, 1.0)


def test_sharpen_zero_leaves_the_default_policies_bitwise(trained):
    _, default, zero, _ = trained
    for name in TARGETS:
        a, b = jax.tree.leaves(default[name].weights), jax.tree.leaves(zero[name].weights)
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_sharpen_moves_only_the_filler_head_and_lowers_its_entropy(trained):
    """The entropy term reaches only the filler head: the decoder (hence V and g_x) follows the
    default trajectory, while the filler entropy falls from the weak to the strong snapshot and
    below the default's (which pre-training never changes: its entropy is the same in both)."""
    q, default, _, sharp = trained
    for name in TARGETS:
        d, s = default[name].weights["params"], sharp[name].weights["params"]
        for layer in d:
            same = jax.tree.leaves(d[layer]), jax.tree.leaves(s[layer])
            close = all(np.allclose(x, y, rtol=1e-4, atol=1e-6) for x, y in zip(*same, strict=True))
            assert close == (layer != "filler_head"), layer
        np.testing.assert_allclose(
            ar.success_prob(sharp[name], q), ar.success_prob(default[name], q), rtol=1e-4
        )
    h_default = [_filler_entropy(default[n], q) for n in TARGETS]
    h_sharp = [_filler_entropy(sharp[n], q) for n in TARGETS]
    assert h_default[0] == pytest.approx(h_default[1], rel=1e-6)
    assert h_sharp[1] < h_sharp[0] < h_default[0]


def test_sharpened_policy_exact_V_and_filler_norm_against_monte_carlo(trained):
    """At the sharpened setting: V(x) = π(y*|x) against the sampled success frequency, and the
    exact E‖W_f‖² against sampled filler score norms, each within 4 standard errors."""
    q, _, _, sharp = trained
    params = sharp["strong"]
    feat, answer = q.features[3], q.answers[3]
    toks = ar.sample(jax.random.key(5), params, feat, 4000)
    z = np.asarray(ar.rewards(toks, answer))
    V = float(ar.success_prob(params, q)[3])
    assert abs(z.mean() - V) < 4 * np.sqrt(V * (1 - V) / z.size)
    total = ar.score_norms(params, feat, toks)
    filler = np.asarray(total - ar.score_norms(params, feat, toks[:, 6:], am.core_log_prob))
    se = filler.std(ddof=1) / np.sqrt(filler.size)
    assert abs(filler.mean() - float(am.filler_score_norm(params, feat))) < 4 * se
    assert float(am.filler_score_norm(params, feat)) < float(
        am.filler_score_norm(trained[1]["strong"], feat)
    )


def test_split_reproduces_the_exact_truth(trained):
    """The filler / decoded split sums to the truth of :func:`arithmetic.exact` (same key, same
    draws): G·MSE_vanilla = E‖WZ‖² − ‖g_x‖², G·MSE_oracle = trΣ_or, S2 = E‖W_f‖² + S2_c."""
    q, _, _, sharp = trained
    params, key = sharp["strong"], jax.random.key(7)
    t = terms_mod.terms(key, params, q, samples=32)
    truth = ar.exact(key, params, q, samples=32)
    gsq = np.sum(np.asarray(truth.g_local, np.float64) ** 2, -1)
    np.testing.assert_allclose(t["filler"] + t["s2_core"], truth.S2, rtol=1e-5)
    s = terms_mod.split(t)
    assert s["vanilla"] == pytest.approx(float(np.mean(np.asarray(truth.e_wz2) - gsq)), rel=1e-5)
    assert s["oracle"] == pytest.approx(float(np.mean(np.asarray(truth.tr_sigma_oracle))), rel=1e-4)
    assert s["V"] == pytest.approx(float(np.mean(truth.V)), rel=1e-6)
    assert s["oracle_core_z0_se"] > 0 and "|" in terms_mod.markdown({"strong": s})


def test_sweep_strength_options_default_keys_and_validation():
    assert sweep.STRENGTH == tuple(ar.POLICIES.values())
    default = sweep.Config(env="arithmetic", G=(4,), estimators=("vanilla",))
    rid = {"policy": "base", "estimator": "vanilla", "G": 4}
    settings = sweep.row_settings(default, rid)
    assert "strength" not in settings and "filler_sharpen" not in settings
    changed = default.replace(strength=(0.7, 0.85, 0.95), filler_sharpen=1.0)
    settings = sweep.row_settings(changed, rid)
    assert settings["strength"] == (0.7, 0.85, 0.95) and settings["filler_sharpen"] == 1.0
    assert sweep.cell_keys(changed) != sweep.cell_keys(default)
    for bad in (
        {"strength": (0.5, 0.4, 0.9)},
        {"strength": (0.2, 0.5)},
        {"strength": (0.2, 0.5, 1.2)},
        {"filler_sharpen": -1.0},
    ):
        with pytest.raises(validate.ConfigError):
            default.replace(**bad).validate()
