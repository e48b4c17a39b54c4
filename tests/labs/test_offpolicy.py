"""The off-policy lab: bad input refused before computing; on-policy rows equal every rule and the
exact theory (and the sweep); SIS unbiased at every m; Thm 12's slope; KL estimators' gradients
against ∇KL; the safe-reuse rule with its negative control.  Tolerances are the runs' own SEs."""

import json
import math
import types

import numpy as np
import pandas as pd
import pytest

from gpolab import configs
from gpolab.estimators import offpolicy as rules
from gpolab.kernels import offpolicy as kernel
from gpolab.labs.offpolicy import analysis
from gpolab.labs.offpolicy import lab as offpolicy
from gpolab.labs.sweep import lab as sweep
from gpolab.runner.cli import main
from gpolab.validate import ConfigError

SMALL = dict(prompts=4, actions=8, G=8, seeds=4096, m=(1,), staleness=(0,), eta=(1.0,))


def _cfg(**kw):
    small = {
        k: v
        for k, v in SMALL.items()
        if kw.get("env") != "arithmetic" or k not in ("prompts", "actions")
    }
    return offpolicy.Config(**{**small, **kw})


@pytest.mark.parametrize(
    "kw,field",
    [
        (dict(env="arithmetic", kl=("k3",)), "kl"),
        (dict(clip=("clip",)), "clip"),
        (dict(ratio=("gpso",)), "ratio"),
        (dict(eps_low=1.5), "eps_low"),
        (dict(gspo_eps_low=0.0), "gspo_eps_low"),
        (dict(cispo_eps_high=-0.2), "cispo_eps_high"),
        (dict(clip_c=0.5), "clip_c"),
        (dict(m=(0,)), "m"),
        (dict(m=(100_000,)), "m"),
        (dict(staleness=(-1,)), "staleness"),
        (dict(seeds=8), "seeds"),
        (dict(G=1), "G"),
        (dict(advantages=("oracle",)), "advantages"),
        (dict(advantages=("grpo[scale=batch]",)), "advantages"),
        (dict(kind="loglinear"), "B"),
        (dict(lengths="independent"), "lengths"),
        (dict(eta=()), "eta"),
        (dict(eta=(0.0,)), "eta"),
    ],
)
def test_bad_settings_are_one_error_naming_the_field(kw, field):
    with pytest.raises(ConfigError, match=f"^{field}"):
        _cfg(**kw).validate()


def test_rule_grid_clips_only_what_takes_a_clip_and_kappa_only_with_kl():
    cfg = _cfg(
        ratio=("none", "token", "cispo"),
        clip=("none", "ppo", "dual"),
        kl=("none", "k2"),
        kappa=(0.1, 0.2),
    )
    ids = {(r["ratio"], r["clip"], r["kl"], r["kappa"]) for r in offpolicy.rule_ids(cfg)}
    assert ("none", "none", "none", 0.0) in ids and ("none", "ppo", "none", 0.0) not in ids
    assert {("token", c, "none", 0.0) for c in ("none", "ppo", "dual")} <= ids
    assert ("cispo", "weight", "k2", 0.2) in ids and ("cispo", "none", "none", 0.0) not in ids
    assert len(ids) == (1 + 3 + 1) * (1 + 2)


def test_gspo_and_cispo_read_their_authors_settings_by_default():
    """Issue 55: gspo runs verl's GSPO scripts' clip (3e-4, 4e-4) and cispo verl's CISPO recipe's
    (10, 0.2: no lower clamp) unless told otherwise; cispo-two-sided keeps the lab's (0.2, 0.28).
    Before, cispo read the lab's (0.2, 0.28), a lower clamp at 0.8, and the GSPO rows were
    sequence/ppo at 0.2: this test fails there."""
    cfg = offpolicy.Config()
    units = {u["ratio"]: u for u in offpolicy.units(cfg)}
    want = {"gspo": (3e-4, 4e-4), "cispo": (10.0, 0.2), "cispo-two-sided": (0.2, 0.28)}
    for ratio, eps in want.items():
        assert offpolicy._eps(units[ratio], cfg) == eps, ratio
        args = offpolicy.inputs(cfg, units[ratio])[1]
        np.testing.assert_allclose(args[5:7], eps, rtol=1e-6, err_msg=ratio)
    assert units["gspo"]["clip"] == "higher" and units["cispo"]["clip"] == "weight"


def test_a_rules_own_settings_move_only_its_cells_and_need_the_rule():
    """A changed cispo_eps_high (TRL's recommended cap 5.0 is 4.0 here) gives cispo a new store
    key and leaves every other unit's key as it was; the flag without cispo in the grid is one
    error naming it."""
    base, trl = offpolicy.Config(), offpolicy.Config(cispo_eps_high=4.0)
    moved = [
        u["ratio"]
        for u, a, b in zip(
            offpolicy.units(base), offpolicy.cell_keys(base), offpolicy.cell_keys(trl), strict=True
        )
        if a != b
    ]
    assert moved == ["cispo"]
    with pytest.raises(ConfigError, match="^--cispo-eps-high: not used"):
        configs.resolve(offpolicy.Config, typed={"cispo_eps_high": 4.0, "ratio": ("token",)})


def test_gspo_clips_far_more_than_the_old_gspo_rows_and_cispo_moves():
    """After one step of η = 64 (m = 4) the shipped GSPO band [1 − 3e-4, 1 + 4e-4] cuts a larger
    share of tokens than sequence/ppo's [0.8, 1.2] (the rule gpolab ran as GSPO before issue 55);
    cispo (no lower clamp, cap 1.2) gives other updates than cispo-two-sided; each row carries
    the ε it ran with."""
    cfg = _cfg(
        ratio=("sequence", "gspo", "cispo", "cispo-two-sided"),
        clip=("ppo",),
        eta=(4.0,),
        m=(1, 4),
        seeds=64,
    )
    res = offpolicy.run(cfg)["results"].set_index(["ratio", "m"])
    gspo, seq = res.loc[("gspo", 4)], res.loc[("sequence", 4)]
    assert gspo["clip_frac"] > seq["clip_frac"] + 0.1
    assert (gspo["eps_low"], gspo["eps_high"]) == (3e-4, 4e-4)
    assert (seq["eps_low"], seq["eps_high"]) == (0.2, 0.2)
    cispo, two = res.loc[("cispo", 4)], res.loc[("cispo-two-sided", 4)]
    assert (cispo["eps_low"], cispo["eps_high"]) == (10.0, 0.2)
    assert (two["eps_low"], two["eps_high"]) == (0.2, 0.28)
    assert cispo["mse"] != two["mse"]


@pytest.fixture(scope="module")
def on_policy():
    """m = 1, k = 0: every rule on the same draws, and the sweep's loo row of the same bandit."""
    cfg = _cfg(advantages=("loo", "grpo"))
    res = offpolicy.run(cfg)["results"]
    sw = sweep.run_sweep(
        sweep.Config(estimators=("loo", "grpo"), G=(8,), seeds=4096, prompts=4, actions=8, seed=5)
    )
    return res, sw.set_index("estimator")


# the tests of one module-scoped run on one pytest-xdist worker: it runs once, not once per worker
ON_POLICY_RUN = pytest.mark.xdist_group("offpolicy-on-policy")


@ON_POLICY_RUN
def test_on_policy_every_rule_is_the_same_update(on_policy):
    res, _ = on_policy
    assert set(res["ratio"]) == set(rules.RATIOS)
    for _, g in res.groupby("advantage"):
        mse = g["mse"].to_numpy()
        np.testing.assert_allclose(mse, mse[0], rtol=1e-4)  # same estimate, float rounding


@ON_POLICY_RUN
@pytest.mark.parametrize("advantage,formula", [("loo", "closed form"), ("grpo", "count table")])
def test_on_policy_rows_match_the_exact_theory_and_the_sweep(on_policy, advantage, formula):
    """MSE against g: the offpolicy row (every rule) against the exact theory and against the
    sweep's row of the same estimator (independent draws); the theory is the sweep's."""
    res, sw = on_policy
    row = res[res["advantage"] == advantage].iloc[0]
    assert row["theory"] == formula
    se = row["mse_g_se"]
    assert abs(row["mse_g"] - row["theory_mse_g"]) < 4 * math.hypot(se, row["theory_mse_g_se"])
    ref = sw.loc[advantage]
    assert ref["theory_mse"] == pytest.approx(row["theory_mse_g"], rel=1e-5)  # one formula
    assert abs(row["mse_g"] - ref["mse"]) < 4 * math.hypot(se, ref["mse_se"])
    # the fresh on-policy comparator is the same update on other draws: no excess
    assert abs(row["excess_mse"]) < 4 * row["excess_mse_se"]
    assert row["target"] == ("g_dagger" if advantage == "grpo" else "g")


@pytest.mark.slow
def test_sis_is_unbiased_at_every_m_and_no_correction_is_not():
    """Negative control: the uncorrected rule's bias at m = 8 is many SEs above 0."""
    cfg = _cfg(ratio=("none", "sis"), eta=(48.0,), m=(1, 4, 8), seeds=8192)
    res = offpolicy.run(cfg)["results"]
    sis = res[res["ratio"] == "sis"]
    assert (sis["bias_sq"].abs() < 4 * sis["bias_sq_se"]).all()
    none = res[(res["ratio"] == "none") & (res["m"] == 8)].iloc[0]
    assert none["bias_sq"] > 6 * none["bias_sq_se"]


@pytest.mark.slow
def test_thm12_bias_grows_like_eta_squared_for_the_uncorrected_update():
    """bias² ∝ (mη)² at small η (Thm 12's order): slope in η and in the lag within 3 SE of 2."""
    cfg = _cfg(ratio=("none",), eta=(3.0, 6.0, 12.0), m=(1, 4, 8), seeds=8192)
    sc = offpolicy.run(cfg)["scaling"].iloc[0]
    assert abs(sc["z_eta"]) < 3 and abs(sc["z_lag"]) < 3
    assert sc["slope_eta_se"] < 0.3 and sc["slope_lag_se"] < 0.3


def test_slope_fit_rejects_a_wrong_power_and_skips_noise():
    """Negative control: y = x (slope 1) is far from 2; points within 3 SE of 0 are left out."""
    x = np.array([1.0, 2.0, 4.0, 8.0])
    s, se, n = analysis.fit_slope(x, x, 0.01 * x)
    assert s == pytest.approx(1.0) and abs(s - 2) / se > 10 and n == 4
    s, se, n = analysis.fit_slope(x, np.array([1e-9, 2.0, 8.0, 32.0]), np.full(4, 0.01))
    assert n == 3 and s == pytest.approx(2.0)
    assert math.isnan(analysis.fit_slope(x, np.zeros(4), np.ones(4))[0])


def test_safe_reuse_reads_the_excess_and_says_when_a_margin_is_inside_one_se():
    """By MSE: m = 4 exceeds 10%, so 8 is not safe though its own excess is small; by the
    scale-free MSE every m is safe.  Negative control: a margin inside one SE is inconclusive."""
    rows = [
        dict(
            ratio="token",
            clip="none",
            kl="none",
            kappa=0.0,
            eta=1.0,
            staleness=0,
            m=m,
            excess_mse=e,
            excess_mse_se=0.01,
            excess_scaled=0.01,
            excess_scaled_se=0.01,
        )
        for m, e in ((1, 0.0), (2, 0.05), (4, 0.2), (8, 0.05))
    ]
    safe = analysis.safe_reuse(pd.DataFrame(rows)).iloc[0]
    assert safe["safe_m"] == 2 and safe["safe_m_status"] == "ok"
    assert safe["safe_m_scaled"] == 8 and safe["tested_m"] == 8
    rows[2]["excess_mse"], rows[2]["excess_mse_se"] = 0.105, 0.02
    safe = analysis.safe_reuse(pd.DataFrame(rows)).iloc[0]
    assert safe["safe_m"] == 2 and safe["safe_m_status"] == "inconclusive"
    rows[0]["excess_mse"] = float("nan")  # a NaN is never a pass
    safe = analysis.safe_reuse(pd.DataFrame(rows)).iloc[0]
    assert safe["safe_m"] is None and safe["safe_m_status"] == "inconclusive"


@pytest.mark.slow
def test_kl_estimators_gradients_against_the_exact_kl_gradient():
    """On-policy (m = 1): ∇k1 averages to 0 (bias = ∇KL, relative bias² 1), ∇k2 to ∇KL (bias
    within its SE), ∇k3 to ∇KL(π_ref‖π) (relative bias² well above 0), TRL's ratio-corrected k3
    to ∇KL (its exact bias² 0 up to rounding, the Monte Carlo's within its SE)."""
    kls = ("k1", "k2", "k3", "k3_ratio")
    cfg = _cfg(ratio=("none",), kl=kls, kappa=(0.1,), seeds=8192, ref_scale=1.0)
    res = offpolicy.run(cfg)["results"].set_index("kl")
    for kl in kls:  # Monte Carlo against the exact on-policy bias²
        r = res.loc[kl]
        assert abs(r["kl_bias_sq"] - r["kl_theory_bias_sq"]) < 4 * r["kl_bias_sq_se"], kl
    k1, k2, k3 = (res.loc[k] for k in ("k1", "k2", "k3"))
    assert k1["kl_theory_bias_sq"] == pytest.approx(k1["kl_grad_sq"], rel=1e-5)
    assert k2["kl_theory_bias_sq"] == 0.0
    assert k3["kl_bias_sq"] > 6 * k3["kl_bias_sq_se"]  # negative control: k3 is biased
    k3r = res.loc["k3_ratio"]
    assert k3r["kl_theory_bias_sq"] < 1e-6 * k3["kl_theory_bias_sq"]


def test_json_rows_carry_the_issue_columns(tmp_path, capsys):
    argv = [
        "offpolicy",
        "--prompts",
        "3",
        "--actions",
        "4",
        "--seeds",
        "64",
        "--eta",
        "4",
        "--m",
        "1,2",
        "--staleness",
        "0,1",
        "--ratio",
        "token,sis",
        "--clip",
        "none",
        "--out",
        str(tmp_path / "o"),
        "--json",
    ]
    assert main(argv) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    need = {
        "ratio",
        "clip",
        "m",
        "eta",
        "staleness",
        "kl",
        "kappa",
        "bias_sq",
        "variance",
        "mse",
        "cos",
        "snr",
    }
    assert rows and all(need <= set(r) for r in rows)
    assert {(r["m"], r["staleness"]) for r in rows} == {(1, 0), (2, 0), (1, 1), (2, 1)}
    for name in ("results", "updates", "scaling", "safe_reuse"):
        assert (tmp_path / "o" / f"{name}.parquet").exists()
    assert (tmp_path / "o" / "offpolicy_m.png").stat().st_size > 1000
    _, table, _ = configs.split_file(tmp_path / "o" / "config.toml", "offpolicy")
    assert table["ratio"] == ["token", "sis"]


def test_dual_is_ppo_plus_the_floor_and_its_row_says_so():
    """Issue 40 defect 1: with the floor out of reach (clip_c = 1e6) dual is ppo exactly (the old
    dual clipped at 1 + ε_high and gave clip-higher's rows); the row's eps_high is ε_low."""
    cfg = _cfg(
        ratio=("token",),
        clip=("ppo", "higher", "dual"),
        clip_c=1e6,
        eta=(256.0,),
        m=(1, 4),
        seeds=64,
    )
    res = offpolicy.run(cfg)["results"].set_index(["clip", "m"])
    np.testing.assert_array_equal(res.loc[("dual", 4), "mse"], res.loc[("ppo", 4), "mse"])
    assert res.loc[("dual", 4), "mse"] != res.loc[("higher", 4), "mse"]
    assert res.loc[("dual", 4), "eps_high"] == cfg.eps_low
    assert res.loc[("higher", 4), "eps_high"] == cfg.eps_high


def test_kl_columns_are_in_the_metric_of_bias_sq_and_mse():
    """Issue 40 defect 5: with B = 0 bias_sq and mse weight prompt x's coordinates by 1/√f_x
    (the sweep's metric); the KL columns now use it too.  By hand at θ_old (m = 1, k = 0):
    ‖∇KL‖² = Σ_i (∂KL/∂θ_i)²/f_x(i), and k1's exact bias² (E∇k1 = 0) is the same number."""
    import jax

    from gpolab import envs

    cfg = _cfg(ratio=("none",), kl=("k1",), seeds=64)
    row = offpolicy.run(cfg)["results"].iloc[0]
    params, theta, theta_ref, _ = offpolicy._setup(cfg, "")
    env = envs.get("bandit")
    grad = np.asarray(jax.grad(lambda th: env.kl(params, th, theta_ref))(theta), np.float64)
    f = np.asarray(env.values(params, theta)[0], np.float64)
    per_prompt = np.repeat(f, grad.size // f.size)  # f = 1/4 on each of the 4 prompts
    hand = float(np.sum(grad**2 / per_prompt))
    assert row["kl_grad_sq"] == pytest.approx(hand, rel=1e-4)
    assert row["kl_theory_bias_sq"] == pytest.approx(hand, rel=1e-4)
    assert hand == pytest.approx(4 * float(np.sum(grad**2)), rel=1e-6)  # the old, plain norm: 1/4


def test_rules_equal_to_sis_have_an_exact_zero_paired_bias():
    """Issue 40 defect 6: at θ_old (m = 1, k = 0) every rule's update is the SIS update; the
    uncorrected rule's paired bias² read 2.3e-17 ± 5e-19 (float rounding of ρ = 1); it is 0 with
    SE 0.  Negative control: after one step (update 1) the uncorrected rule differs from SIS."""
    cfg = _cfg(ratio=("none", "token"), eta=(64.0,), m=(1, 2), seeds=256)
    tables = offpolicy.run(cfg)
    first = tables["results"][tables["results"]["m"] == 1]
    assert (first["bias_sq_paired"] == 0.0).all() and (first["bias_sq_paired_se"] == 0.0).all()
    upd = tables["updates"].set_index(["ratio", "update"])
    assert upd.loc[("none", 1), "bias_sq_paired"] > 6 * upd.loc[("none", 1), "bias_sq_paired_se"]


def test_kappa_without_a_kl_estimator_is_one_error_before_anything_runs(tmp_path, capsys):
    """docs/usage.md: a flag that does nothing is an error.  --kappa with kl = none is refused
    in one line naming the flag, and no output folder is made."""
    out = tmp_path / "o"
    assert main(["offpolicy", "--kappa", "0.2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--kappa: not used with kl = none" in err and "Traceback" not in err
    assert not out.exists()
    with pytest.raises(ConfigError, match="^--kappa"):
        configs.resolve(offpolicy.Config, typed={"kappa": (0.2,), "kl": ("none",)})
    configs.resolve(offpolicy.Config, typed={"kappa": (0.2,), "kl": ("k2",)})  # used: fine


def test_the_kernel_is_named_top_level_functions_whose_knobs_do_not_recompile():
    """Issue 41 (habits): ``per_seed`` was 108 lines with 6 nested closures; the kernel is named
    module-level functions (no nested def or lambda; comprehensions aside).  Every continuous
    knob (η, eps_low, eps_high, clip_c, κ) is traced: a run with other values of all of them,
    same shapes, traces nothing new."""
    from gpolab import engine

    functions = (
        "per_seed",
        "at_step_size",
        "stale_thetas",
        "epoch",
        "update",
        "draw",
        "targets",
        "surrogate",
        "kl_theory",
        "_scaled",
        "summary",
    )
    for name in functions:  # per_seed first: the old one fails here, naming its closures
        code = getattr(kernel, name).__code__
        nested = [
            c.co_name
            for c in code.co_consts
            if isinstance(c, types.CodeType)
            and (c.co_name == "<lambda>" or not c.co_name.startswith("<"))
        ]
        assert not nested, (name, nested)
    kw = dict(ratio=("token",), clip=("dual",), kl=("k3",), m=(2,), staleness=(0, 1), seeds=64)
    cfg = _cfg(**kw, eta=(1.0, 2.0), kappa=(0.1,))
    other = _cfg(**kw, eta=(3.0, 5.0), kappa=(0.2,), eps_low=0.1, eps_high=0.3, clip_c=2.0)
    cell = offpolicy.inputs(cfg, offpolicy.units(cfg)[0])[0]
    assert offpolicy.inputs(other, offpolicy.units(other)[0])[0] == cell
    first = offpolicy.run(cfg)["results"]
    traced = engine.TRACES[("per_seed", cell)]
    second = offpolicy.run(other)["results"]
    assert engine.TRACES[("per_seed", cell)] == traced >= 1
    assert not np.array_equal(first["mse"], second["mse"])  # the new values were used
