"""Issue 55: the allocation lab's published rules as their authors ship them.  GVM-RAFT ranks
prompts by its authors' gradient quantity (the mean score norm over the first stage's correct
responses, RLHFlow/GVM em/stage_2_calc_acceptRates_grads.py ``calc_grad_logp``), Knapsack RL
clips advantages at ±5 (liziniu/KnapsackRL ray_trainer.py, ADV_CLIP_VALUE) with verl's GRPO, and
the scale-free ``scaled_mse`` column against its closed form."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from gpolab.labs.allocate import analysis, lab, rules, steps

ALPHA, BETA = 1e-3, 2.0  # their calc_sample_ratio defaults (run_em.sh passes the same)


def _their_calc_sample_ratio(Gs, ps):
    """RLHFlow/GVM em/stage_2_calc_sample_size.py::calc_sample_ratio @ 96de9857, transcribed."""
    sizes = []
    for G, p in zip(Gs, ps, strict=True):
        if G == 0 or p == 0:
            sizes.append(0)
        else:
            sizes.append(G / (np.sqrt(p + ALPHA / np.power(p, BETA - 1.0))))
    total = sum(sizes)
    return [x / total for x in sizes]


def _their_float_to_int_preserve_sum(arr, N):
    """The same file's float_to_int_preserve_sum, transcribed."""
    scaled = np.array(arr) * N
    out = np.round(scaled).astype(int)
    error = N - np.sum(out)
    if error != 0:
        residuals = scaled - out
        idx = np.argsort(-residuals if error > 0 else residuals)[: abs(error)]
        out[idx] += np.sign(error)
    return out.tolist()


def _their_grad_quantity(norms, correct):
    """Their ``calc_grad_logp``: the mean of the per-output gradient norms over the correct
    outputs of stage 1 (``item['outputs']`` holds only those), 0 where none is correct."""
    kept = [n for n, c in zip(norms, correct, strict=True) if c]
    return float(np.mean(kept)) if kept else 0.0


def _view(P=6, S=1, cap=64):
    cfg = lab.Config(prompts=P, actions=4, budget=(4 * P,), cap=cap)
    env = steps.Bandit.of(cfg.instance)
    pi = env.policy(env.theta)
    a1, a0, _ = steps._tables("loo", cap)
    view = steps.view_of(cfg, env, pi, steps.fresh_state(S, P), a1, a0, None)
    return cfg, env, pi, view, a1, a0


@pytest.mark.parametrize("seed", range(5))
def test_gvm_allocates_as_the_authors_code_from_their_stage_one_quantity(seed):
    """The staged ``gvm`` step on random first stages gives exactly the sizes of their
    calc_sample_ratio + float_to_int_preserve_sum, fed their stage-1 accept rate and their mean
    gradient norm over correct outputs (the bandit's per-response gradient norm ‖e_a − π_x‖)."""
    P, s = 6, 8
    cfg, env, pi, view, a1, a0 = _view(P)
    rng = np.random.default_rng(seed)
    M = 64
    a = rng.integers(0, pi.shape[-1], (1, P, M))
    z = rng.random((1, P, M)) < rng.uniform(0, 0.6, (1, P, 1))
    z[0, 0, :s] = False  # a prompt with no correct answer in stage 1: 0 responses
    budget = 2 * s * P
    G, *_ = steps.step(rules.RULES["gvm"], view, budget, pi, env.success, a, z, rng)
    norms = np.linalg.norm(np.eye(pi.shape[-1])[a[0, :, :s]] - pi[:, None, :], axis=-1)
    Gs = [_their_grad_quantity(norms[x], z[0, x, :s]) for x in range(P)]
    ps = [z[0, x, :s].sum() / s for x in range(P)]
    want = _their_float_to_int_preserve_sum(_their_calc_sample_ratio(Gs, ps), budget - s * P)
    assert G[0].tolist() == want and G[0, 0] == 0


def test_stage_one_quantity_is_the_mean_score_norm_over_correct_and_unbiased_for_it():
    """By hand on one group, then over 40,000 groups of 8: the mean over groups with a correct
    response equals the exact E[‖∇ log π‖ | correct] within 4 standard errors (the conditional
    mean of an exchangeable sample's correct members); a group with none correct reads 0."""
    pi = np.array([[0.5, 0.3, 0.2]])
    a = np.array([[[0, 1, 2, 1]]])
    z = np.array([[[True, False, True, False]]])
    norm = np.sqrt(steps.score_sq(pi))[0]
    got = steps.correct_score_norm(pi, a, z)
    assert got[0, 0] == pytest.approx((norm[0] + norm[2]) / 2, abs=1e-15)
    assert steps.correct_score_norm(pi, a, np.zeros_like(z))[0, 0] == 0.0
    cfg = lab.Config(prompts=4, actions=4, budget=(16,), cap=16)
    env = steps.Bandit.of(cfg.instance)
    pi = env.policy(env.theta)
    exact = env.truth(pi)["w_correct"]
    want = np.sum(pi * env.success * np.sqrt(steps.score_sq(pi)), -1) / np.sum(pi * env.success, -1)
    np.testing.assert_allclose(exact, want, rtol=1e-12)
    a, z = steps.draw(np.random.default_rng(3), pi, env.success, (40_000, 4, 8))
    est = steps.correct_score_norm(pi, a, z)
    seen = z.any(-1)
    for x in range(4):
        v = est[seen[:, x], x]
        assert abs(v.mean() - exact[x]) < 4 * v.std() / math.sqrt(len(v)) + 1e-12, (x, v.mean())


def test_gvm_reads_their_quantity_and_the_variants_read_theirs():
    """The negative control: with a stage whose correct responses' score norm disagrees with
    ‖g_x‖, ``gvm`` follows the former, ``gpolab-gvm-gnorm`` the latter, ``gpolab-gvm-exact`` the
    exact conditional mean."""
    P = 2
    cfg, env, pi, view, a1, a0 = _view(P)
    view = dataclasses.replace(view, gnorm=np.array([1.0, 9.0]), score_correct=np.array([1.0, 9.0]))
    s = 4
    M = 64
    lo, hi = np.argmax(pi, -1), np.argmin(pi, -1)  # small and large score norms
    a = np.zeros((1, P, M), np.int64)
    a[0, 0], a[0, 1] = hi[0], lo[1]  # prompt 0's correct answers have the larger score norm
    z = np.zeros((1, P, M), bool)
    z[0, :, :2] = True  # p̂ = 1/2 for both
    budget = 2 * s * P + 40
    G = {
        n: steps.step(rules.RULES[n], view, budget, pi, env.success, a, z, None)[0][0]
        for n in ("gvm", "gpolab-gvm-gnorm", "gpolab-gvm-exact")
    }
    ours = steps.correct_score_norm(pi, a[..., :s], z[..., :s])[0]
    assert ours[0] > 2 * ours[1] and G["gvm"][0] > G["gvm"][1], (ours, G)
    assert G["gpolab-gvm-gnorm"][1] > G["gpolab-gvm-gnorm"][0]
    assert G["gpolab-gvm-exact"][1] > G["gpolab-gvm-exact"][0]


def test_knapsack_clips_advantages_at_five_as_their_trainer():
    """Their ray_trainer clamps the advantages to ±ADV_CLIP_VALUE = 5 after verl's GRPO: a
    success alone in a group of n has A = √((n − 1)²/n) (unbiased std, epsilon 1e-6), above 5
    from n = 27; the rule's tables are verl/grpo's clipped there, loo's (|A| ≤ 1) unchanged."""
    grpo = rules.RULES["knapsack-grpo"]
    assert grpo.estimator == "verl/grpo" and grpo.adv_clip == rules.KNAPSACK_ADV_CLIP == 5.0
    raw = steps._tables("verl/grpo", 64)
    clipped = steps.rule_tables(grpo, "loo", 64)
    for n in (26, 27, 40):
        A = (n - 1) / math.sqrt(n) / (1 + 1e-6 * math.sqrt(n))  # (1 − 1/n)/(1/√n + 1e-6)
        assert raw[0][n, 0] == pytest.approx(A, rel=1e-9) and (A > 5) == (n >= 27)
        assert clipped[0][n, 0] == pytest.approx(min(raw[0][n, 0], 5.0), rel=1e-12)
    assert np.all(np.abs(clipped[0]) <= 5) and np.all(np.abs(clipped[1]) <= 5)
    assert (np.abs(raw[0]) > 5).any()  # the negative control: the clip binds
    loo = steps.rule_tables(rules.RULES["knapsack"], "loo", 64)
    np.testing.assert_array_equal(loo[0], steps._tables("loo", 64)[0])


def test_knapsack_grpo_step_trains_on_the_clipped_advantage():
    """One prompt, 32 responses, one success: the step's ĝ_x is (1/32) Σ_i A_i (e_{a_i} − π)
    with the success's A clipped to 5 (unclipped √(31²/32) ≈ 5.48)."""
    cfg = lab.Config(prompts=2, actions=4, budget=(64,), cap=64)
    env = steps.Bandit.of(cfg.instance)
    pi = env.policy(env.theta)
    a1, a0, _ = steps._tables("loo", 64)
    view = steps.view_of(cfg, env, pi, steps.fresh_state(1, 2), a1, a0, None)
    rule = dataclasses.replace(rules.RULES["knapsack-grpo"], fn=lambda v, b, r: np.full((1, 2), 32))
    M = 64
    a = np.zeros((1, 2, M), np.int64)
    a[0, :, 0] = 1
    z = np.zeros((1, 2, M), bool)
    z[0, :, 0] = True
    _, _, _, ghat, *_ = steps.step(rule, view, 64, pi, env.success, a, z, None)
    n, s = 32, 1 / 32
    std = math.sqrt((s * (1 - s)) * n / (n - 1))
    lose = -s / (std + 1e-6)
    e = np.eye(4)
    want = (5.0 * (e[1] - pi[0]) + (n - 1) * lose * (e[0] - pi[0])) / n
    np.testing.assert_allclose(ghat[0, 0], want, rtol=1e-6)


@pytest.mark.parametrize("est", ["loo", "grpo"])
def test_scaled_mse_of_uniform_matches_its_closed_form(est):
    """Uniform G keeps every prompt at G = N/P: E[ĝ·g] = Σ_x f_x² κ_G(p_x) ‖g_x‖² and E‖ĝ‖² =
    Σ_x f_x² E‖ĝ_x(G)‖² exactly (disjoint blocks), so the scale-free MSE ‖g‖² − E[ĝ·g]²/E‖ĝ‖²
    has a closed form; the Monte Carlo column agrees within 4 of its SEs."""
    cfg = lab.Config(
        prompts=8, actions=4, budget=(32,), cap=16, seeds=3000, rules=("uniform",), estimator=est
    )
    res = lab.static_rows(cfg, 32)[0]
    o, f = analysis._instance_curves(cfg)
    G = 4
    dot = np.sum(f**2 * o["kappa"][:, G] * o["gsq"])
    norm2 = np.sum(f**2 * o["second_moment"][:, G])
    exact = np.sum(f**2 * o["gsq"]) - dot**2 / norm2
    assert res["scaled_mse_se"] > 0
    assert abs(res["scaled_mse"] - exact) < 4 * res["scaled_mse_se"], (res["scaled_mse"], exact)
    assert res["scaled_mse"] <= res["mse"] + 4 * res["mse_se"]
