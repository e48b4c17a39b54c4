"""The estimator registry: every entry callable as REGISTRY[name](rewards, ...), finite on every
binary group, specs with options, a user's own estimator from Python and from the CLI."""

from __future__ import annotations

import numpy as np
import pytest

from gpolab import estimators
from gpolab.runner.cli import main
from gpolab.validate import ConfigError


def binary_groups(G: int) -> np.ndarray:
    """(G + 1, G): row c holds c successes then G − c failures (every count, both degenerate)."""
    return (np.arange(G)[None] < np.arange(G + 1)[:, None]).astype(np.float32)


def inputs_for(entry, rewards):
    given = {
        "lengths": np.full_like(rewards, 3.0),
        "greedy": np.full(rewards.shape[0], 0.0, np.float32),
        "baseline": np.full(rewards.shape[0], 0.5, np.float32),
    }
    return {k: v for k, v in given.items() if k in entry.needs}


@pytest.mark.parametrize("name", list(estimators.REGISTRY))
@pytest.mark.parametrize("G", [2, 4, 8, 16])
def test_every_entry_is_finite_and_zero_on_degenerate_groups(name, G):
    entry = estimators.REGISTRY[name]
    minimum = entry.options.get("k", entry.min_group)
    if G < minimum:
        with pytest.raises(ConfigError, match=f"G \\(for {name}\\)"):
            estimators.check_estimator(name, G)
        return
    r = binary_groups(G)
    adv = np.asarray(entry(r, **inputs_for(entry, r)))
    assert adv.shape == r.shape and np.isfinite(adv).all(), name
    if entry.scope == "group" and name not in ("vanilla", "oracle", "verl/remax"):
        # an all-equal group carries no signal: every group-scoped baseline estimator gives 0
        np.testing.assert_array_equal(adv[[0, -1]], 0.0)


def test_spec_options_and_errors():
    assert estimators.canonical("verl/grpo[norm_adv_by_std_in_grpo=False]") == (
        "verl/grpo[norm_adv_by_std_in_grpo=false]"
    )
    entry, opts = estimators.bind("trl/grpo[scale_rewards=batch]")
    assert opts == {"scale_rewards": "batch"} and entry.scope_of(opts) == "batch"
    assert entry.scope_of() == "group" and not entry.reward_only_for(opts)
    with pytest.raises(ConfigError, match="^estimator: got 'verl/nope'; allowed: vanilla, "):
        estimators.parse_spec("verl/nope")
    with pytest.raises(ConfigError, match="option 'eps=1' not understood; allowed: epsilon="):
        estimators.parse_spec("verl/grpo[eps=1]")
    with pytest.raises(ConfigError, match="verl/grpo\\[norm_adv_by_std_in_grpo\\]: got 'no'"):
        estimators.parse_spec("verl/grpo[norm_adv_by_std_in_grpo=no]")
    with pytest.raises(ConfigError, match="^lengths: the verl/opo estimator needs response"):
        estimators.REGISTRY["verl/opo"](binary_groups(4))
    with pytest.raises(ConfigError, match="^greedy: the verl/remax estimator needs"):
        estimators.REGISTRY["verl/remax"](binary_groups(4))
    with pytest.raises(ConfigError, match="^rewards: "):
        estimators.REGISTRY["nemo/grpo"](np.array([[1.0, np.nan]]))
    with pytest.raises(ConfigError, match="scale_rewards 'foo'"):
        estimators.check_callable("trl/grpo[scale_rewards=foo]", 4)


def clipped_z(rewards, *, clip: float = 1.5):
    """A user's estimator: z-scores clipped to ±clip."""
    import jax.numpy as jnp

    centred = rewards - rewards.mean(-1, keepdims=True)
    return jnp.clip(centred / (rewards.std(-1, keepdims=True) + 1e-3), -clip, clip)


def test_register_from_python():
    entry = estimators.register("test/clipped", clipped_z, source="tests")
    assert entry.options == {"clip": 1.5} and entry.reward_only and entry.user
    r = binary_groups(4)
    np.testing.assert_allclose(
        np.asarray(estimators.REGISTRY["test/clipped"](r, clip=0.5)),
        np.clip((r - r.mean(-1, keepdims=True)) / (r.std(-1, keepdims=True) + 1e-3), -0.5, 0.5),
        rtol=1e-6,
    )
    estimators.check_callable("test/clipped[clip=0.5]", 4)


def test_user_estimator_errors(tmp_path, monkeypatch):
    (tmp_path / "userest.py").write_text(
        "import numpy as np\n"
        "def wrong_shape(rewards):\n    return rewards.mean(-1)\n"
        "def nan_when_flat(rewards):\n"
        "    return (rewards - rewards.mean(-1, keepdims=True)) / rewards.std(-1, keepdims=True)\n"
        "def not_traceable(rewards):\n"
        "    return np.asarray(rewards) if float(rewards.sum()) else rewards\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for spec, match in [
        ("userest:wrong_shape", "returns shape \\(5,\\) for rewards \\(5, 4\\)"),
        ("userest:nan_when_flat", "non-finite advantages for the binary group \\[0, 0, 0, 0\\]"),
        ("userest:not_traceable", "fails on rewards of shape \\(5, 4\\) under jax"),
        ("userest:missing", "cannot import 'userest:missing'"),
    ]:
        with pytest.raises(ConfigError, match=match):
            estimators.check_estimator(spec, 4)
            estimators.check_callable(spec, 4)


def test_user_estimator_from_the_cli(tmp_path, monkeypatch, capsys):
    (tmp_path / "myest.py").write_text(
        "def half_loo(rewards):\n"
        "    G = rewards.shape[-1]\n"
        "    return 0.5 * (rewards - (rewards.sum(-1, keepdims=True) - rewards) / (G - 1))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "out"
    argv = [
        "sweep",
        "--estimators",
        "loo,myest:half_loo",
        "--G",
        "4",
        "--seeds",
        "2000",
        "--prompts",
        "4",
        "--actions",
        "8",
        "--out",
        str(out),
        "--json",
    ]
    assert main(argv) == 0
    import pandas as pd

    df = pd.read_parquet(out / "results.parquet").set_index("estimator")
    # ĝ of half_loo is exactly half of loo's on the same draws: MSE = ‖ĝ/2 − g‖², its bias
    # (−g/2) is exact, and its cosine to g equals loo's
    assert df.loc["myest:half_loo", "cos"] == pytest.approx(df.loc["loo", "cos"], rel=1e-5)
    assert np.isfinite(df.loc["myest:half_loo", "theory_mse"])
    capsys.readouterr()


def test_estimators_command_lists_the_registry(capsys):
    import json

    assert main(["estimators", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    by_name = {r["name"]: r for r in rows}
    assert set(estimators.FRAMEWORKS) <= set(by_name) and set(estimators.ESTIMATORS) <= set(by_name)
    assert by_name["verl/remax"]["needs"] == ["greedy"]
    assert by_name["verl/gpg"]["theory"] == "Monte Carlo only (batch-scoped)"
    assert by_name["nemo/grpo"]["theory"].startswith("exact: count table")
    assert by_name["trl/grpo"]["scope"] == "group; batch when scale_rewards=batch"
    assert all(r["source"] for r in rows)
    from gpolab.estimators import offpolicy

    assert {f"ratio/{n}" for n in offpolicy.RATIOS} | {f"kl/{n}" for n in offpolicy.KLS} <= set(
        by_name
    )
    assert by_name["ratio/token"]["clips"] == ["none", "ppo", "higher", "dual"]
    assert main(["estimators", "verl/nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpolab estimators: error: estimator: got 'verl/nope'; allowed: ")
    assert len(err.strip().splitlines()) == 1


def test_all_equal_groups_give_exactly_zero_under_jit():
    """XLA rewrites x / n as x * (1/n) under jit, so a constant group's mean can miss its value
    by an ulp; every baseline estimator must still give exactly 0 there (float32)."""
    import jax
    import jax.numpy as jnp

    names = [
        n for n, e in estimators.REGISTRY.items() if e.reward_only and not e.user and n != "vanilla"
    ]
    for name in names:
        fn = jax.jit(lambda r, name=name: estimators.REGISTRY[name](r))
        for G in (G for G in (2, 3, 6, 7, 12) if G >= estimators.minimum_G(name)):
            binary_only = name == "paper/passk-training"  # non-binary rewards pass through
            for v in (0.0, 1.0) if binary_only else (0.0, 0.1, 0.3, 0.7, 1.0):
                out = fn(jnp.full((2, G), v, jnp.float32))
                assert float(jnp.abs(out).max()) == 0.0, (name, G, v)
