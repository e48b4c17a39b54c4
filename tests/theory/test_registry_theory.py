"""Every registry entry through the sweep, the code path users get: each row either reports no
exact theory (NaN, with the reason in its ``theory`` column) or its exact theory agrees with its
own Monte Carlo (|z| <= 5, Monte Carlo SE, 20,000 seeds).  The entries come from the registry
itself, so a new entry is covered without editing this file; each is also run at every option
value the registry records as coupling the batch (``batch_when``)."""

import numpy as np
import pytest

from gpolab import estimators
from gpolab.labs.sweep import lab as sweep

SEEDS = 20_000
SMALL = {"prompts": 4, "actions": 8}  # a small bandit: ~25 s a G on one core
Z_MAX = 5.0


def registry_specs(G: int) -> tuple[str, ...]:
    """Every built-in entry defined at G, at its defaults and at each batch-coupling option."""
    specs = []
    for name, entry in estimators.REGISTRY.items():
        if entry.user:  # a user's function registered by another test
            continue
        specs.append(name)
        specs += [
            estimators.canonical(f"{name}[{k}={v}]")
            for k, values in entry.batch_when.items()
            for v in values
        ]
    return tuple(s for s in specs if estimators.minimum_G(s) <= G)


def with_theory(spec: str) -> bool:
    """Whether the registry's record promises an exact theory (at a response length of 1)."""
    entry, options = estimators.bind(spec)
    return entry.scope_of(options) == "group" and set(entry.needs) <= {"lengths"}


def check_rows(df, mse="mse", se="mse_se", theory="theory_mse") -> None:
    """Each row: NaN theory with a reason, or |MC − theory| <= Z_MAX Monte Carlo SE."""
    assert len(df) and df["n_seeds"].min() >= SEEDS
    for _, row in df.iterrows():
        where = (row["estimator"], int(row["G"]), row["theory"])
        if np.isnan(row[theory]):
            assert row["theory"].startswith("none: ") and len(row["theory"]) > 8, where
        else:
            z = (row[mse] - row[theory]) / row[se]
            assert row[se] > 0 and abs(z) <= Z_MAX, (*where, theory, row[mse], row[theory], z)


@pytest.mark.slow
@pytest.mark.parametrize("G", [2, 4, 8])
def test_every_entry_has_no_theory_or_agrees_with_its_monte_carlo(G):
    names = registry_specs(G)
    df = sweep.run_sweep(sweep.Config(estimators=names, G=(G,), seeds=SEEDS, **SMALL))
    assert tuple(df["estimator"]) == names
    check_rows(df)
    # power: the theory exists where the registry's record promises it (no blanket NaN; oracle
    # has gpolab's closed form besides)
    for _, row in df.iterrows():
        assert np.isfinite(row["theory_mse"]) or not with_theory(row["estimator"]), row["estimator"]


@pytest.mark.slow
def test_every_entry_under_dynamic_sampling():
    """The same through dynamic sampling (gpolab.theory.dynamic's columns, mini-batches of B = 2)
    and its budget-matched plain sampling (``theory_plain_mse`` against ``plain_mse``)."""
    G = 4
    names = registry_specs(G)
    cfg = sweep.Config(estimators=names, G=(G,), B=2, dynamic_sampling=True, seeds=SEEDS, **SMALL)
    df = sweep.run_sweep(cfg)
    check_rows(df)
    check_rows(df, "plain_mse", "plain_mse_se", "theory_plain_mse")
    for _, row in df.iterrows():
        assert np.isfinite(row["theory_mse"]) == with_theory(row["estimator"]), row["estimator"]
