"""The rollout–training mismatch kernel (gpolab.kernels.rollout_mismatch) on the Markov env: with no
mismatch every correction is the plain leave-one-out gradient (unbiased); with a mismatch the
uncorrected gradient is biased and untruncated sequence-level importance sampling is not."""

import jax
import numpy as np
import pytest

from gpolab.envs import markov
from gpolab.estimators import mismatch as corrections
from gpolab.kernels import rollout_mismatch as kernel

PARAMS = markov.make(markov.Instance(prompts=4, length=8, instance_seed=3))
THETA = markov.init_theta(PARAMS)


def _measure(params, theta, kind, size, name, *, B=8, G=4, seeds=4096, splits=8, **kw):
    """One correction at (θ, mismatch) through the kernel's argument objects."""
    cell = kernel.Cell(name, B, G, tuple(sorted((kw.pop("options", None) or {}).items())))
    at = kernel.point(params, theta, kind, size)
    return kernel.measure(at, cell, kernel.Draws(seeds, splits), kw.pop("key", None))


@pytest.mark.parametrize(
    "name", ["none", "trl/sequence_mask", "trl/token_truncate", "verl/seq_tis", "verl/gspo"]
)
def test_without_mismatch_every_correction_is_unbiased(name):
    r = _measure(PARAMS, THETA, "noise", 0.0, name, seeds=1024, key=jax.random.key(1))
    assert abs(r["bias_sq"]) <= 3 * r["bias_sq_se"] + 1e-7
    assert r["truncated_share"] == 0.0 and abs(r["mismatch_kl_seq"]) < 1e-5
    assert r["mse"] == pytest.approx(r["bias_sq"] + r["variance"], rel=1e-6, abs=1e-9)
    assert r["scale"] == pytest.approx(1.0, abs=4 * np.sqrt(r["variance"] / 1024 / r["g_sq"]))


def test_with_mismatch_sequence_is_is_unbiased_and_no_correction_is_not():
    """Untruncated sequence-level IS (TRL's sequence_truncate with an unreachable cap) is
    unbiased under any μ; no correction is biased (the control), and the IS variance grows with
    the sequence χ²."""
    kw = dict(seeds=2048, key=jax.random.key(2))
    none = _measure(PARAMS, THETA, "noise", 0.4, "none", **kw)
    seq = _measure(
        PARAMS, THETA, "noise", 0.4, "trl/sequence_truncate", options={"clip_max": 1e9}, **kw
    )
    assert none["bias_sq"] > 5 * none["bias_sq_se"]
    assert abs(seq["bias_sq"]) <= 3 * seq["bias_sq_se"]
    assert seq["variance"] > none["variance"] and none["mismatch_chi2_seq"] > 0.5
    assert seq["cos"] > none["cos"]
    assert none["mismatch_kl_seq"] == pytest.approx(
        float(
            markov.mismatch(
                PARAMS, THETA, markov.behaviour_logits(PARAMS, THETA, "noise", 0.4)
            ).kl_seq
        )
    )


@pytest.mark.slow
def test_every_registry_entry_runs_and_reports_a_share_in_range():
    for name in corrections.REGISTRY:
        r = _measure(PARAMS, THETA, "temperature", 1.3, name, seeds=64, splits=2)
        assert 0.0 <= r["truncated_share"] <= 1.0 and np.isfinite(r["mse"]), name


def test_the_cosine_does_not_fall_with_fewer_seeds():
    """cos(E ĝ, g) takes ‖E ĝ‖² from the unbiased bias², not from the noisy mean (whose ‖ē‖²
    carries tr Cov/n): 256 seeds and 4,096 agree within their SEs."""
    kw = dict(key=jax.random.key(5), options={"clip_max": 1e9})
    few = _measure(PARAMS, THETA, "noise", 0.4, "trl/sequence_truncate", seeds=256, **kw)
    many = _measure(PARAMS, THETA, "noise", 0.4, "trl/sequence_truncate", seeds=4096, **kw)
    assert abs(few["cos"] - many["cos"]) <= 3 * np.hypot(few["cos_se"], many["cos_se"])
