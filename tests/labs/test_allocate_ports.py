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


# ---------------------------------------------------------------- Pilot-Commit (issue 59)
# databricks/pilot-commit @ 8ca7605 recipe/pc: the shipped scripts' band, rollout.n = 3 n_explore,
# gen_batch_size = 3 × train_batch_size, buffer_sampling_method random (yaml, 4B script)

LOWER, UPPER = 0.125, 0.25  # diversity_threshold_lower / _upper in both train scripts


def _their_filter_batch(acc_by_prompt):
    """``RayPCTrainer.filter_batch``, transcribed: the pass band on the pilot mean of ``acc``,
    both ends inclusive; returns (pass, too_correct, too_incorrect) prompt indices."""
    passed, correct, incorrect = [], [], []
    for idx, metric_values in enumerate(acc_by_prompt):
        mean_metric = np.mean(metric_values)
        if mean_metric >= LOWER and mean_metric <= (1 - UPPER):
            passed.append(idx)
        elif mean_metric > (1 - UPPER):
            correct.append(idx)
        else:
            incorrect.append(idx)
    return passed, correct, incorrect


def _their_grpo(scores, eps=1e-6):
    """verl ``compute_grpo_outcome_advantage`` for one uid (mean, torch's unbiased std)."""
    s = np.asarray(scores, float)
    return (s - s.mean()) / (s.std(ddof=1) + eps)


def _their_step(z_pilot, z_commit, train_bsz):
    """One step of their loop for prompts whose pilots are already buffered (the buffer holds
    ``len(passed)`` prompts): ``buffer.sample`` returns all when it holds no more than needed,
    else a random subset; each sampled prompt's pilots and ``rollout.n`` commits form one uid,
    and GRPO runs over that pooled group.  Returns {prompt: pooled advantages}."""
    passed, _, _ = _their_filter_batch(z_pilot)
    assert len(passed) <= train_bsz  # the hand cases stay on the get_all() path
    return {x: _their_grpo(np.concatenate([z_pilot[x], z_commit[x]]).astype(float)) for x in passed}


def _pc_setup(P, s, seed):
    cfg, env, pi, view, a1, a0 = _view(P, cap=64)
    rng = np.random.default_rng(seed)
    M = 64
    a = rng.integers(0, pi.shape[-1], (1, P, M))
    z = rng.random((1, P, M)) < rng.uniform(0.05, 0.9, (1, P, 1))
    return env, pi, view, a, z, 2 * s * P


@pytest.mark.parametrize("seed", range(4))
def test_pilot_commit_trains_on_what_their_loop_trains_on(seed):
    """Six prompts, 8 pilots each (N = 2·8·6): the prompts their filter_batch passes are the
    ones committed (at most P/3 = 2 of them; with no more than that in the buffer, their sampler
    returns them all), each pools its 8 pilots with 24 commits, and ĝ_x of ``pilot-commit-grpo``
    is (1/32) Σ_i A_i (e_{a_i} − π_x) with A their GRPO over the pooled group."""
    P, s = 6, 8
    env, pi, view, a, z, budget = _pc_setup(P, s, seed)
    z[0, :, :s] = False
    z[0, 0, :2] = True  # p̂ = 2/8 = 0.25: passes
    z[0, 1, :6] = True  # p̂ = 6/8 = 0.75: passes (the upper end is inclusive)
    z[0, 2, :7] = True  # p̂ = 7/8: too correct
    z[0, 3, :1] = True  # p̂ = 1/8 = 0.125: passes (the lower end is inclusive)
    passed, correct, incorrect = _their_filter_batch(z[0, :, :s])
    assert passed == [0, 1, 3] and correct == [2] and incorrect == [4, 5]
    z[0, 3, :1] = False  # p̂ = 0: two passed, no more than P/3 (their get_all() path)
    rule = rules.RULES["pilot-commit-grpo"]
    G, _, gen, ghat, n, c, _ = steps.step(rule, view, budget, pi, env.success, a, z, rng_of(seed))
    assert G[0].tolist() == [32, 32, 0, 0, 0, 0] and gen[0].tolist() == [32, 32, 8, 8, 8, 8]
    adv = _their_step(z[0, :, :s], z[0, :, s : 4 * s], train_bsz=P // 3)
    e = np.eye(pi.shape[-1])
    for x, A in adv.items():
        want = np.mean(A[:, None] * (e[a[0, x, : 4 * s]] - pi[x]), 0)
        np.testing.assert_allclose(ghat[0, x], want, rtol=1e-6, atol=1e-12)
    assert np.all(ghat[0, 2:] == 0)


def rng_of(seed):
    return np.random.default_rng(1000 + seed)


def test_pilot_commit_samples_at_most_a_third_at_random_from_the_admitted():
    """More admitted prompts than the train batch (P/3): exactly P/3 are committed, all of them
    admitted, and over draws every admitted prompt is committed about equally often (their
    ``random.sample``); 1 pilot per prompt (N = 2P) can never pass the band."""
    P, s = 12, 4
    env, pi, view, a, z, budget = _pc_setup(P, s, 0)
    z[0, :, :s] = False
    z[0, :8, :2] = True  # 8 prompts at p̂ = 1/2
    counts = np.zeros(P)
    for seed in range(400):
        G, *_ = steps.step(
            rules.RULES["pilot-commit"], view, budget, pi, env.success, a, z, rng_of(seed)
        )
        assert (G[0] > 0).sum() == P // 3 and np.all(G[0, 8:] == 0)
        assert set(G[0][G[0] > 0].tolist()) == {4 * s}
        counts += G[0] > 0
    share = counts[:8] / 400
    assert np.all(np.abs(share - 0.5) < 0.1), share  # 4 of 8 each draw
    G, _, gen, *_ = steps.step(
        rules.RULES["pilot-commit"], view, 2 * P, pi, env.success, a, z, rng_of(0)
    )
    assert np.all(G == 0) and np.all(gen == 1)  # p̂ ∈ {0, 1}: outside [0.125, 0.75]


# ---------------------------------------------------------------- sGPO (gpolab's construction)


def _their_classify(p_hat):
    """RohanAwhad/fast-rl-bench @ 514d4d3a scripts/sgpo_profile.py ``classify``, transcribed."""
    if p_hat > 0.75:
        return "trivial", None
    if p_hat == 0.0:
        return "unsolved", None
    if p_hat > 1 / 4:
        return "learnable", 2
    if p_hat > 1 / 8:
        return "learnable", 4
    return "learnable", 8


def test_sgpo_buckets_are_the_ports_classify_on_every_profile_of_8():
    p = np.arange(9) / 8
    got = rules.sgpo_bucket(p).tolist()
    want = [_their_classify(float(x))[1] or 0 for x in p]
    assert got == want == [0, 8, 4, 2, 2, 2, 2, 0, 0]


def test_sgpo_spends_the_budget_in_proportion_to_its_buckets():
    """Profiles (of 8) at p̂ = 1/8, 2/8, 3/8, 7/8, 0, 0: shares 8 : 4 : 2 : 0, the unsolved
    mixed in at G = 2 with probability 0.1 (over 4000 seeds within 4 SE), sizes summing to N."""
    P, S = 6, 4000
    cfg, env, pi, view, a1, a0 = _view(P, S=S, cap=64)
    c = np.broadcast_to([1.0, 2, 3, 7, 0, 0], (S, P))
    view = dataclasses.replace(view, profile_c=c, profile_n=np.full((S, P), 8.0))
    G = rules.gpolab_sgpo(view, 56, np.random.default_rng(0))
    assert np.all(G.sum(-1) == 56) and np.all(G[:, 3] == 0)
    none = (G[:, 4:] == 0).all(-1)
    assert G[none][0, :3].tolist() == [32, 16, 8]  # 56 × (8, 4, 2)/14
    mixed = (G[:, 4:] > 0).mean()
    assert abs(mixed - 0.1) < 4 * math.sqrt(0.09 / (2 * S)), mixed
    unprofiled = dataclasses.replace(view, profile_n=np.zeros((S, P)))
    np.testing.assert_array_equal(
        rules.gpolab_sgpo(unprofiled, 60, np.random.default_rng(0))[:2], 10
    )


def test_profile_is_the_first_group_seen():
    state = steps.fresh_state(1, 3)
    c, n = np.array([[1.0, 0, 2]]), np.array([[4.0, 0, 4]])
    state = steps.observe(state, c, n, 1.0)
    state = steps.observe(state, np.array([[3.0, 2, 0]]), np.array([[4.0, 4, 4]]), 1.0)
    assert state["profile_c"].tolist() == [[1, 2, 2]]
    assert state["profile_n"].tolist() == [[4, 4, 4]]
    assert state["last_c"].tolist() == [[3, 2, 0]]


# ---------------------------------------------------------------- HORA (gpolab's construction)


def test_hit_utility_is_the_beta_posterior_formula():
    """U(m) = 1 − B(s + 1, n − s + 1 + m)/B(s + 1, n − s + 1), by scipy's betaln, and the
    Monte Carlo P(a hit among m) under the posterior."""
    from scipy.special import betaln

    for s, n in ((0, 8), (3, 8), (8, 8), (1, 2)):
        a, b = s + 1, n - s + 1
        U = rules.hit_utility(a, b, 20)
        want = [1 - math.exp(betaln(a, b + m) - betaln(a, b)) for m in range(21)]
        np.testing.assert_allclose(U, want, rtol=1e-12, atol=1e-15)
        assert U[0] == 0 and np.all(np.diff(np.diff(U)) <= 1e-15)  # concave
    rng = np.random.default_rng(0)
    p = rng.beta(2, 7, 200_000)
    hit = rng.random((200_000, 5)) < p[:, None]
    assert abs(hit.any(-1).mean() - rules.hit_utility(2, 7, 5)[5]) < 0.005


def _brute_hits(U, budget, lo, hi):
    """The best total Σ_x U_x(m_x), Σ m_x = budget, lo ≤ m_x ≤ hi, over every allocation."""
    import itertools

    best = -math.inf
    for m in itertools.product(range(lo, hi + 1), repeat=len(U)):
        if sum(m) == budget:
            best = max(best, sum(U[x][k] for x, k in enumerate(m)))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_hora_greedy_is_the_brute_force_optimum(seed):
    """Random posteriors over 4 prompts, budgets 8…20, cap 8: HORA's greedy allocation reaches
    the brute-force maximum of the total posterior hit utility, and beats uniform's."""
    rng = np.random.default_rng(seed)
    P, cap = 4, 8
    n = rng.integers(0, 12, P)
    s = rng.binomial(n, rng.uniform(0, 1, P))
    cfg, env, pi, view, a1, a0 = _view(P, cap=cap)
    view = dataclasses.replace(view, alpha=(s + 1.0)[None], beta=(n - s + 1.0)[None], cap=cap)
    U = rules.hit_utility(s + 1.0, n - s + 1.0, cap)
    for budget in (8, 13, 20):
        G = rules.gpolab_hora(view, budget, None)[0]
        assert G.sum() == budget and G.min() >= 2 and G.max() <= cap
        total = sum(U[x, g] for x, g in enumerate(G))
        assert total == pytest.approx(_brute_hits(U, budget, 2, cap), abs=1e-12)


def test_hora_maximizes_its_own_objective_in_the_lab():
    """The static rows' ``hit_posterior`` (the posterior hit share of the step's rollouts, HORA's
    objective) is at least every other rule's at the same rollouts; ``hit_share`` is its true-p
    counterpart, exact per seed: uniform's equals mean_x 1 − (1 − p_x)^G."""
    cfg = lab.Config(
        prompts=8,
        actions=4,
        budget=(40,),
        cap=16,
        seeds=64,
        history=4,
        rules=("uniform", "gpolab", "vip", "gpolab-hora"),
    )
    res = {r["rule"]: r for r in lab.static_rows(cfg, 40) if r["table"] == "results"}
    top = res["gpolab-hora"]["hit_posterior"]
    assert all(top >= r["hit_posterior"] - 1e-12 for r in res.values())
    env = steps.Bandit.of(cfg.instance)
    V = env.truth(env.policy(env.theta))["V"]
    assert res["uniform"]["hit_share"] == pytest.approx(np.mean(1 - (1 - V) ** 5), rel=1e-12)
