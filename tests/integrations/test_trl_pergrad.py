"""The per-step real-trainer check (``tools/trl_pergrad.py``): its statistics against closed
forms and its comparison on hand-computed cases (any venv), and the harness at CI size in the
TRL venv (slow: TRL's GRPOTrainer at G = 2 and 4 with 8 rollouts per step, 10 draws each, plan's
log and ``gpolab plan --quick`` on it; TRL's gradient as the tool reads it against a direct
backward of TRL's loss on the same batch and against the estimator's formula).  The harness test
checks the harness, not the verdict (docs/plan.md, "Checked against a real trainer", holds the
full-size run)."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from tools import trl_pergrad as tp


# ---- statistics ---------------------------------------------------------------------------------
def test_draw_stats_are_the_unbiased_sample_formulas():
    g = np.random.default_rng(0).normal(size=(7, 5)) + 1.0
    d = tp.draw_stats(g, boot=50)
    mean = g.mean(0)
    assert d["noise"] == pytest.approx(((g - mean) ** 2).sum() / 6, rel=1e-12)
    pairs = sum(g[i] @ g[j] for i in range(7) for j in range(7) if i != j) / 42
    assert d["signal"] == pytest.approx(pairs, rel=1e-12)
    assert d["nsr"] == pytest.approx(d["noise"] / d["signal"], rel=1e-12)
    # a resample that repeats one draw counts no pair of the draw with itself
    K, w = g @ g.T, np.zeros((1, 7))
    w[0, [0, 1, 2]] = [3, 2, 2]
    idx = [0, 0, 0, 1, 1, 2, 2]
    rep = g[idx]
    pairs = [rep[i] @ rep[j] for i in range(7) for j in range(7) if idx[i] != idx[j]]
    noise, signal = tp._moments(K, w)
    assert signal[0] == pytest.approx(np.mean(pairs), rel=1e-12)
    assert noise[0] == pytest.approx((rep * rep).sum(1).mean() - np.mean(pairs), rel=1e-12)


def test_draw_stats_recover_the_closed_form_noise_and_signal():
    """Draws μ + σ z (z standard normal in D dimensions): noise σ²D and signal ‖μ‖², within the
    Monte Carlo standard error over 400 replications of 20 draws; the 95% bootstrap interval
    holds the truth in most replications (a percentile bootstrap of 20 draws: >= 85%)."""
    rng = np.random.default_rng(1)
    D, R, sigma = 30, 20, 0.5
    mu = np.full(D, 0.3)
    out = [
        tp.draw_stats(mu + sigma * rng.normal(size=(R, D)), boot=300, seed=i) for i in range(400)
    ]
    noise, signal = np.array([o["noise"] for o in out]), np.array([o["signal"] for o in out])
    for x, truth in ((noise, sigma**2 * D), (signal, mu @ mu)):
        assert abs(x.mean() - truth) < 4 * x.std(ddof=1) / math.sqrt(len(x))
    held = np.mean(
        [tp._band(o["reps"][:, 0])[0] <= sigma**2 * D <= tp._band(o["reps"][:, 0])[1] for o in out]
    )
    assert held >= 0.85


def test_draw_stats_refuse_fewer_than_three_draws():
    from gpolab.validate import ConfigError

    with pytest.raises(ConfigError, match="draws: got 2"):
        tp.draw_stats(np.ones((2, 3)))


def stats_for(nsr: dict, spread: float = 0.05) -> dict:
    """Per G: a draw_stats-like dict with nsr replicates spread ± ``spread`` around it."""
    rng = np.random.default_rng(0)
    out = {}
    for G, x in nsr.items():
        reps = x * (1 + spread * rng.uniform(-1, 1, 400))
        out[G] = {
            "noise": x,
            "signal": 1.0,
            "nsr": x,
            "reps": np.column_stack([reps, np.ones(400), reps]),
        }
    return out


def test_summarize_relative_columns_and_the_interval_to_the_best():
    s = {"rollouts": 48, "draws": 400, "ref": 8}
    rows = tp.summarize(stats_for({2: 3.0, 4: 1.0, 8: 2.0}), s)
    assert list(rows.columns) == tp.COLUMNS and list(rows["B"]) == [24, 12, 6]
    assert (rows["B"] * rows["G"] == 48).all()
    at_ref = rows[rows["G"] == 8].iloc[0]
    assert at_ref["nsr_rel"] == at_ref["noise_rel"] == 1.0
    assert list(rows["nsr_rel"]) == pytest.approx([1.5, 0.5, 1.0])
    assert rows["to_best_lo"].iloc[1] <= 1 <= rows["to_best_hi"].iloc[1]  # the best itself
    assert rows["to_best_lo"].iloc[0] > 2.5 and rows["pred_nsr_rel"].isna().all()


# ---- the comparison -----------------------------------------------------------------------------
def rows(nsr: dict, spread: float = 0.05) -> pd.DataFrame:
    return tp.summarize(stats_for(nsr, spread), {"rollouts": 48, "draws": 400, "ref": 2})


def test_compare_agrees_when_the_told_apart_best_lies_in_plans_interval():
    c = tp.compare(rows({2: 3.0, 4: 1.0, 8: 2.0}), {"gstar": 4, "lo": 3, "hi": 6})
    assert (c["verdict"], c["best"], c["tied"], c["inside"]) == ("agree", 4, [4], [4])
    assert c["text"] == (
        "agree: measured best G = 4 (least noise-to-signal); plan's G* = 4 (95% interval 3 .. 6) "
        "holds G = 4"
    )


def test_compare_disagrees_when_it_lies_outside_negative_control():
    c = tp.compare(rows({2: 3.0, 4: 1.0, 8: 2.0}), {"gstar": 12, "lo": 8, "hi": 16})
    assert (c["verdict"], c["inside"]) == ("disagree", [])
    assert c["text"].endswith("holds none")


def test_compare_with_ties_and_without_a_separation_or_an_interval():
    tied = rows({2: 1.02, 4: 1.0, 8: 2.0})  # G = 2 within the spread of the best
    c = tp.compare(tied, {"gstar": 3, "lo": 2, "hi": 4})
    assert (c["verdict"], c["tied"], c["inside"]) == ("agree", [2, 4], [2, 4])
    assert "not told apart from G = 2" in c["text"]
    c = tp.compare(tied, {"gstar": 2, "lo": 2, "hi": 3})  # plan's interval holds one of them
    assert (c["verdict"], c["inside"]) == ("inconclusive", [2])
    assert c["text"].endswith("holds G = 2 of them")
    flat = rows({2: 1.02, 4: 1.0, 8: 1.01})  # no G told apart
    c = tp.compare(flat, {"gstar": 16, "lo": 12, "hi": 24})
    assert c["verdict"] == "inconclusive" and "the draws tell no G apart" in c["text"]
    c = tp.compare(rows({2: 3.0, 4: 1.0}), {"gstar": math.nan, "lo": math.nan, "hi": math.nan})
    assert c["verdict"] == "inconclusive" and c["text"].endswith("plan gave no interval")
    c = tp.compare(rows({2: 3.0, 4: 1.0}), {"gstar": math.nan, "lo": 3, "hi": math.inf})
    assert c["verdict"] == "agree" and "bound G* >= 3" in c["text"]


def test_compare_exact_prices_plans_G_against_the_exact_best():
    r = [{"G": 2, "exact_nsr": 5.0}, {"G": 4, "exact_nsr": 4.0}, {"G": 8, "exact_nsr": 4.4}]
    c = tp.compare_exact(r, {"gstar": 8, "lo": 6, "hi": 12, "safe_G": 4})
    assert (c["verdict"], c["best"], c["safe_excess"]) == ("disagree", 4, 0.0)
    assert c["plan_excess"] == pytest.approx(0.1)
    assert c["text"] == (
        "disagree: exact best G = 4 of the G measured; plan's G* interval 6 .. 12 does not hold "
        "it; plan's G* = 8 has 10.0% more noise-to-signal"
    )
    c = tp.compare_exact(r, {"gstar": 5, "lo": 3, "hi": 6, "safe_G": math.nan})
    assert c["verdict"] == "agree" and math.isnan(c["plan_excess"]) and math.isnan(c["safe_excess"])
    assert (
        c["text"] == "agree: exact best G = 4 of the G measured; plan's G* interval 3 .. 6 holds it"
    )
    c = tp.compare_exact(r, {"gstar": math.nan, "lo": math.nan, "hi": math.nan})
    assert c["verdict"] == "inconclusive"


def test_exact_curve_is_gpolabs_exact_criteria_on_a_bandit():
    """On a bandit with uniform prompts, the exact V and ‖E ĝ‖² per G give exact_criteria's
    scale and rescaled MSE (E ĝ·g = scale ‖g‖², V + ‖E ĝ‖² = (E ĝ·g)²/(‖g‖²(1 − rescaled)));
    for loo E ĝ = g, so ‖E ĝ‖² = ‖g‖² and V = mse·‖g‖²."""
    from gpolab.envs import bandit
    from gpolab.theory import exact, gstar_model

    truth = bandit.exact(bandit.make(0, prompts=16, actions=8))
    f = np.asarray(truth.prompt_probs, np.float64)
    np.testing.assert_allclose(f, 1 / 16)
    g_x = exact.global_gradients(truth)
    prompts = {"V": truth.V, "g": g_x, "S2": truth.S2, "e_wz2": truth.e_wz2}
    g_sq = float(np.sum((f @ g_x) ** 2))
    for spec in ("loo", tp.SPEC):
        want = gstar_model.exact_criteria(truth, spec, 48, grid=(2, 3, 4, 6, 8))
        c = tp.exact_curve(spec, prompts, 48, (2, 3, 4, 6, 8))
        total = (want["scale"] * g_sq) ** 2 / (g_sq * (1 - want["rescaled"]))
        np.testing.assert_allclose(c["noise"] + c["signal"], total, rtol=1e-6)
        np.testing.assert_allclose(c["nsr"], c["noise"] / c["signal"])
    c = tp.exact_curve("loo", prompts, 48, (2, 3, 4, 6, 8))
    np.testing.assert_allclose(c["signal"], g_sq, rtol=1e-9)
    loo = gstar_model.exact_criteria(truth, "loo", 48, grid=(2, 3, 4, 6, 8))
    np.testing.assert_allclose(c["noise"], loo["mse"] * g_sq, rtol=1e-6)


# ---- plan's curve ------------------------------------------------------------------------------
CONSTS = (0.4, 0.2, 3.0, 2.5)  # c1, ‖g‖², s, a
BETA = (1.5, 2.0)


def test_the_predicted_curve_is_the_transfer_models():
    """nsr per G is gstar_model.criteria's, V = nsr·K1² its noise times ‖g‖², its argmin the
    model's G*; relative columns are 1 at the reference, and the replicates' interval holds the
    point when the replicates are the point."""
    from gpolab.theory import gstar_model

    Gs = (2, 3, 4, 6, 8, 12, 16, 24)
    spec = "trl/grpo[scale_rewards=group]"
    c = tp.curve(spec, CONSTS, *BETA, 48, Gs)
    m = gstar_model.fit(*CONSTS, *BETA)
    t = gstar_model.estimator_terms(spec, *BETA, grid=Gs)
    crit = gstar_model.criteria(t, m, 48)
    np.testing.assert_allclose(c["nsr"], crit["nsr"])
    np.testing.assert_allclose(c["noise"], crit["noise"] * m.K0**2 * m.mu_sq, rtol=1e-10)
    assert int(c["G"][np.argmin(c["nsr"])]) == gstar_model.best(t, m, 48)
    p = tp.predicted(spec, CONSTS, [CONSTS] * 5, *BETA, 48, Gs, ref=8)
    i = Gs.index(8)
    assert p["pred_nsr_rel"][i] == p["pred_noise_rel"][i] == p["loo_nsr_rel"][i] == 1.0
    for k in ("pred_nsr_rel", "pred_noise_rel", "loo_nsr_rel"):
        np.testing.assert_allclose(p[f"{k}_lo"], p[k])
        np.testing.assert_allclose(p[f"{k}_hi"], p[k])


def test_plan_answer_reads_the_runs_estimator_and_missing_values_as_nan():
    s = {
        "estimator_spec": "trl/grpo[scale_rewards=group]",
        "estimator_gstar": 4,
        "estimator_gstar_lo": 3,
        "estimator_gstar_hi": 6,
        "estimator_safe_G": 4,
        "estimator_safe_regret": 0.1,
        "gstar": None,
    }
    a = tp.plan_answer(s)
    assert (a["spec"], a["gstar"], a["lo"], a["hi"], a["safe_G"]) == (
        s["estimator_spec"],
        4,
        3,
        6,
        4,
    )
    assert math.isnan(a["loo_gstar"])
    loo = tp.plan_answer({"gstar": 5, "gstar_lo": 4, "gstar_hi": 7, "safe_G": 5})
    assert (loo["spec"], loo["gstar"], loo["hi"], loo["safe_G"]) == ("loo", 5, 7, 5)


def test_bad_settings_are_one_line_before_any_run(tmp_path, capsys):
    csv = tmp_path / "g.csv"
    args = ["--quick", "--rollouts", "12", "--gs", "8", "--ref", "8", "--out", str(tmp_path / "o")]
    assert tp.main([*args, "--csv", str(csv)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--rollouts 12 is not a multiple of G = 8" in err
    assert tp.main(["--quick", "--ref", "3", "--out", str(tmp_path / "o")]) == 2
    assert "--ref 3: allowed: one of --gs" in capsys.readouterr().err
    assert not csv.exists() and not (tmp_path / "o").exists()


# ---- the harness, TRL venv ---------------------------------------------------------------------
@pytest.mark.slow
def test_the_harness_at_ci_size(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("trl")
    csv, summary = tmp_path / "g.csv", tmp_path / "s.csv"
    argv = ["--quick", "--out", str(tmp_path / "o"), "--csv", str(csv), "--summary-csv"]
    assert tp.main([*argv, str(summary)]) == 0
    printed = capsys.readouterr().out
    g, s, q = pd.read_csv(csv), pd.read_csv(summary).iloc[0], tp.QUICK
    assert list(g.columns) == tp.COLUMNS and list(g["G"]) == list(q["gs"])
    assert (g["B"] * g["G"] == q["rollouts"]).all() and (g["draws"] == q["draws"]).all()
    for k in ("noise", "signal"):
        assert ((g[f"{k}_lo"] <= g[k]) & (g[k] <= g[f"{k}_hi"])).all()
    at_ref = g[g["G"] == q["ref"]].iloc[0]
    assert at_ref["noise_rel"] == at_ref["pred_noise_rel"] == at_ref["pred_nsr_rel"] == 1.0
    plan = tp.plan_answer(json.loads((tmp_path / "o" / "plan" / "plan.json").read_text()))
    assert s["spec"] == plan["spec"] == "trl/grpo[scale_rewards=group]"
    c = tp.compare(g, plan)
    assert s["verdict"] == c["verdict"] and s["text"] == c["text"] and c["text"] in printed
    e = tp.compare_exact(g, plan)
    assert s["exact_text"] == e["text"] and e["text"] in printed
    assert (g["exact_noise"] > 0).all() and (g["exact_signal"] > 0).all()
    assert g[g["G"] == q["ref"]]["exact_nsr_rel"].iloc[0] == 1.0
    rollouts = pd.read_parquet(tmp_path / "o" / "plan-log" / "gpolab" / "rollouts.parquet")
    assert rollouts["step"].nunique() == q["plan_steps"]  # every step of plan's log measured


@pytest.mark.slow
def test_the_gradient_read_is_trls_loss_backward_and_the_estimators(tmp_path):
    """Two steps on frozen weights (dropout off, float32, so a backward repeats exactly): the
    second step's gradient the tool keeps equals a direct backward of TRL's compute_loss on the
    batch that step trained on (no gradient left from the first step, no rescaling), and equals
    −(1/N) Σ A_i ∇ log π(y_i | x_i), the estimator plan models (dapo: the token sum over the
    batch's N one-token completions), from an independent autograd pass."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("trl")
    from gpolab.integrations.trl_task import model as tiny

    s = {**tp.QUICK, "rollouts": 8}
    state = tiny(3).state_dict()
    t = tp.trainer(tmp_path, 4, 2, s, lr=0.0, state=state, disable_dropout=True, bf16=False)
    kept = tp.grads(t, keep_inputs=True)
    t.add_callback(kept)
    t.train()
    tp.frozen(t, state)
    assert len(kept.rows) == 2 and not np.allclose(kept.rows[0], kept.rows[1])
    inputs, net = kept.inputs, t.model
    params = [p for p in net.parameters() if p.requires_grad]
    net.zero_grad()
    with t.compute_loss_context_manager():
        t.compute_loss(net, inputs).backward()
    direct = torch.cat([p.grad.reshape(-1) for p in params]).double().numpy()
    np.testing.assert_allclose(kept.rows[-1], direct, rtol=1e-6, atol=1e-9)
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    assert inputs["completion_mask"].sum() == len(ids) == 8  # one token per completion
    P = inputs["prompt_ids"].shape[1]
    net.eval()
    logits = type(net).forward(net, input_ids=ids).logits[:, P - 1]
    logp = torch.log_softmax(logits, -1).gather(-1, ids[:, P, None])[:, 0]
    loss = -(inputs["advantages"] * logp).sum() / len(ids)
    formula = torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params)])
    np.testing.assert_allclose(kept.rows[-1], formula.double().numpy(), rtol=1e-4, atol=1e-7)


@pytest.mark.slow
def test_exact_prompts_are_the_gradient_of_each_prompts_success_probability():
    """g_x = E[∇ log π · Z] equals ∇ p_x, p_x = Σ_{y succeeds} π(y | x), by autograd; V = p_x;
    S2 = Σ π ‖∇ log π‖² ≥ e_wz2 ≥ 0 (two prompts of the task, random weights)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("trl")
    from gpolab.integrations.trl import _flat
    from gpolab.integrations.trl_task import VOCAB, model, task

    net = model(5)
    out = tp.exact_prompts(net.state_dict(), first=2)
    prompts, targets = task()
    params = [p for p in net.parameters() if p.requires_grad]
    net.eval()
    for i, x in enumerate(prompts[:2]):
        pi = net(input_ids=torch.tensor([[VOCAB[c] for c in x]])).logits[0, -1].softmax(-1)
        p = pi[[VOCAB[c] for c in sorted(targets[x])]].sum()
        grad = _flat(torch.autograd.grad(p, params), params).double().numpy()
        np.testing.assert_allclose(out["g"][i], grad, rtol=1e-4, atol=1e-8)
        assert out["V"][i] == pytest.approx(float(p.detach()), rel=1e-6)
        assert out["S2"][i] >= out["e_wz2"][i] > 0


# ---- the docs block ----------------------------------------------------------------------------
def test_the_docs_block_is_the_stored_table_and_its_verdict():
    """docs/plan.md's block renders its stored values, which equal the committed CSVs' (TRL is
    not rerun in the main venv); its verdict lines are :func:`compare` and :func:`compare_exact`
    of the CSVs' rows and plan's answer; a number that differs from the CSV is caught."""
    from tools import readme

    root = readme.Path(__file__).resolve().parents[2]
    block = readme.BLOCKS["trl-pergrad"]
    found = readme.blocks_of(readme.files(root))
    fresh = block.extract({})
    assert readme.stale(block, found["trl-pergrad"], fresh) == []
    g = pd.read_csv(root / readme.TRL_CSV)
    s = pd.read_csv(root / readme.TRL_SUMMARY_CSV).iloc[0]
    plan = {k: s[f"plan_{k}"] for k in ("gstar", "lo", "hi")} | {"safe_G": s["safe_G"]}
    body = found["trl-pergrad"]["body"]
    assert f"**Measured**: {tp.compare(g, plan)['text']}." in body
    assert f"**Exact**: {tp.compare_exact(g, plan)['text']}." in body
    assert s["text"] == tp.compare(g, plan)["text"]
    assert s["exact_text"] == tp.compare_exact(g, plan)["text"]
    key = f"G={int(g['G'].iloc[0])} noise"
    edited = {**fresh, key: (fresh[key][0] * 1.01, 0.0)}
    assert readme.compare(edited, fresh)
