"""A spec resolved once (:class:`gpolab.estimators.Bound`): every string API takes it and gives
what the string gives, without parsing it again; the sweep's rows are the same either way."""

from __future__ import annotations

import numpy as np
import pytest

from gpolab import estimators
from gpolab.estimators import registry
from gpolab.theory import exact

SPECS = ("loo", "grpo", "trl/grpo[scale_rewards=batch]", "grpo[eps=0.001, scale=none]", "verl/grpo")
SHARED = {"scale": "group", "ddof": 1, "eps": 1e-4}


@pytest.mark.parametrize("spec", SPECS)
def test_a_bound_spec_answers_as_its_string(spec):
    b = estimators.bound(spec)
    assert str(b) == spec and estimators.bound(b) is b
    assert hash(b) == hash(estimators.bound(spec)) and b == estimators.bound(spec)
    assert estimators.canonical(b) == estimators.canonical(spec)
    assert estimators.resolve(b) is estimators.resolve(spec)
    assert estimators.bind(b, SHARED) == estimators.bind(spec, SHARED)
    assert estimators.minimum_G(b) == estimators.minimum_G(spec)
    rewards = np.array([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 0.0]], np.float32)
    np.testing.assert_array_equal(
        estimators.advantages(b, rewards), estimators.advantages(spec, rewards)
    )
    tb = exact.registry_table(b, 4, strict=False, **SHARED)
    ts = exact.registry_table(spec, 4, strict=False, **SHARED)
    assert (tb.ok, tb.reason, tb.name) == (ts.ok, ts.reason, ts.name)
    np.testing.assert_array_equal(tb.a1, ts.a1)


def test_a_bound_spec_is_not_parsed_again(monkeypatch):
    b = estimators.bound("trl/grpo[scale_rewards=batch]")

    def no_parse(*args):
        raise AssertionError("parsed again")

    monkeypatch.setattr(registry.validate, "bracketed", no_parse)  # any parse fails now
    estimators.check_estimator(b, 4)
    assert estimators.bind(b, SHARED)[1] == {"scale_rewards": "batch"}
    assert exact.registry_table(b, 4, strict=False, **SHARED).reason


def test_sweep_units_carry_bound_specs_and_rows_name_them_as_given():
    from gpolab.labs.sweep import lab as sweep
    from gpolab.labs.sweep.units import ENVS

    cfg = sweep.Config(estimators=("loo", "grpo[scale=none]"), G=(2, 4))
    units = list(ENVS["bandit"].units(cfg, sweep._row_ids(cfg), set(range(4))))
    assert all(isinstance(b, estimators.Bound) for _, _, cell in units for b in cell.estimators)
    assert [str(b) for b in units[0][2].estimators] == ["loo", "grpo[scale=none]"]
