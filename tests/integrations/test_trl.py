"""A real TRL ``GRPOTrainer`` run with ``PlanCallback``, then ``gpolab plan`` on its output folder
(slow; needs the ``trl`` extra: skipped without torch/trl).

The run: a 2-layer GPT-2 built from a config, a character tokenizer, 62 distinct
3-character prompts, single-token answers and a binary reward (success: the answer lies in the
prompt's set, 10 of 14 characters for the easy half of the prompts, 3 for the hard half), 16
groups of G = 4 per step for 60 steps at a small learning rate, every group measured (the task:
:mod:`gpolab.integrations.trl_task`).  Checked:
the callback's rewards equal those TRL logged for the same steps; ``gpolab plan`` on the output
folder recommends a G with a finite interval; the per-response score norms the callback computes
(``torch.func``) equal an independent autograd computation; the hook's seconds are recorded."""

import json

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
pytestmark = pytest.mark.slow

STEPS, GROUPS, G = 60, 16, 4


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from gpolab.integrations.trl import PlanCallback
    from gpolab.integrations.trl_task import build

    out = tmp_path_factory.mktemp("trl-run")
    trainer = build(out, G=G, groups=GROUPS, steps=STEPS, lr=1e-5)
    callback = PlanCallback(trainer, groups_per_step=GROUPS, every=1)
    trainer.add_callback(callback)
    trainer.train()
    return out, trainer, callback


def test_callback_rewards_equal_what_trl_logged(run):
    out, _, _ = run
    mine = pd.read_parquet(out / "gpolab" / "rollouts.parquet")
    assert mine["step"].nunique() == STEPS and len(mine) == STEPS * GROUPS * G
    assert mine["proxy"].notna().all()
    files = sorted((out / "completions").glob("completions_*.parquet"))
    assert len(files) >= 30
    for f in files:
        trl = pd.read_parquet(f)
        step = int(trl["step"].iloc[0])
        rows = mine[mine["step"] == step]
        np.testing.assert_array_equal(rows["reward"].to_numpy(), trl["reward"].to_numpy())
        assert list(rows["prompt"]) == [str(p) for p in trl["prompt"]]


def test_plan_on_the_output_folder_recommends_a_G_with_a_finite_interval(run, tmp_path):
    from gpolab.runner.cli import main

    out, _, _ = run
    assert main(["plan", str(out), "--out", str(tmp_path / "plan"), "--quick"]) == 0
    report = (tmp_path / "plan" / "report.md").read_text()
    lines = report.splitlines()
    assert lines[lines.index("## Recommendation") + 1].startswith("use G = ")
    s = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert 2 <= s["gstar_lo"] <= s["gstar"] <= s["gstar_hi"] < np.inf
    assert "loss_type = dapo" in report
    # every measured group carries its pair scores, so c1 comes from them
    assert "c1 from the pair products of the responses' scores" in report


def test_pair_scores_fill_every_measured_group_and_follow_the_formula(run):
    """The hook writes ``pair_score`` on every measured group (here all), from the Gram matrix
    of the group's per-response gradients; on a group of the trained model, gstar.pair_scores
    of those gradients equals the formula written out with loops."""
    from gpolab.theory import gstar

    out, _, callback = run
    rows = pd.read_parquet(out / "gpolab" / "rollouts.parquet")
    assert rows["pair_score"].notna().all()
    _, _, output = _one_group()
    W = callback.scores(output, range(4))
    z = np.array([1.0, 0.0, 0.0, 1.0])
    direct = []
    for i in range(4):
        total = 0.0
        for j in range(4):
            if j != i:
                b = (z.sum() - z[i] - z[j]) / 2
                total += (z[i] - b) * (z[j] - b) * float(W[i] @ W[j])
        direct.append(total / 3)
    assert gstar.pair_scores(z, W @ W.T) == pytest.approx(direct, rel=1e-9)


P = 4  # the prompt length of _one_group


def _one_group():
    """(prompt, answers, output): one group of four single-token answers to one prompt, as
    TRL's ``_generate_and_score_completions`` returns them."""
    prompt = torch.tensor([5, 6, 7, 2])
    answers = torch.tensor([[3], [8], [12], [16]])
    output = {
        "prompt_ids": prompt.expand(4, -1),
        "prompt_mask": torch.ones(4, P, dtype=torch.long),
        "completion_ids": answers,
        "completion_mask": torch.ones(4, 1, dtype=torch.long),
    }
    return prompt, answers, output


def test_score_norms_equal_an_independent_autograd_computation(run):
    """The callback's vmapped per-response gradients against plain autograd, one backward pass
    per response, on a group of the trained model (same prompt, four answers)."""
    _, trainer, callback = run
    model = trainer.model
    prompt, answers, output = _one_group()
    W = callback.scores(output, range(4))
    assert callback.writer.settings["score_method"] == "vmap"
    model.eval()
    params = [p for p in model.parameters() if p.requires_grad]
    for i in range(4):
        ids = torch.cat([prompt, answers[i]])[None]
        # the model's class forward: TRL trains under accelerate's bf16 autocast on CPU (a wrapped
        # instance forward); the callback's scores are float32, as is this reference
        logits = type(model).forward(model, input_ids=ids).logits
        logp = torch.log_softmax(logits[0, P - 1], -1)[answers[i, 0]]
        grads = torch.autograd.grad(logp, params, allow_unused=True)
        ref = sum(float((g**2).sum()) for g in grads if g is not None)
        assert float(W[i] @ W[i]) == pytest.approx(ref, rel=1e-4)


def test_the_hook_records_its_seconds_and_the_trainer_settings(run):
    out, _, _ = run
    info = json.loads((out / "gpolab" / "run.json").read_text())
    assert info["num_generations"] == G and info["loss_type"] == "dapo"
    assert info["seconds"]["hook"] > 0 and info["seconds"]["train"] > 0
    assert np.isfinite(info["overhead"])
    # the run's files decide loo's G* (plan recommends a finite interval on them, above)
    d = info["decision"]
    assert d["decided"] and d["groups_measured"] == STEPS * GROUPS and d["gstar_hi"] < np.inf
    # and a safe G on the grid with its bound (what the end-of-training line names if undecided)
    from gpolab.theory.gstar import GRID

    assert d["safe_G"] in GRID and d["safe_regret"] >= 0


def test_a_trainer_without_the_hook_is_refused_in_one_line_before_training():
    """TRL's AsyncGRPOTrainer scores rollouts in a worker process and has no
    ``_generate_and_score_completions``: PlanCallback refuses it at construction (an instance of
    the real class, its __init__ skipped: it needs a vLLM server), naming what is missing and
    what to use instead; nothing is written."""
    import warnings

    from gpolab.integrations.trl import PlanCallback
    from gpolab.validate import ConfigError

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # trl.experimental's import warning
        from trl.experimental.async_grpo import AsyncGRPOTrainer

    assert not hasattr(AsyncGRPOTrainer, "_generate_and_score_completions")
    trainer = object.__new__(AsyncGRPOTrainer)
    with pytest.raises(ConfigError) as err:
        PlanCallback(trainer, output_dir="never-written")
    text = str(err.value)
    assert "\n" not in text
    assert "AsyncGRPOTrainer has no _generate_and_score_completions" in text
    assert "use trl.GRPOTrainer with PlanCallback" in text


def test_the_cheap_pass_gives_the_exact_group_gradient_and_verls_W(run):
    """``cheap``'s one forward and one backward per group: the gradient equals (1/G) Σ A_g s_g
    from the exact per-response scores, and W equals 1 − 2π(y) + Σπ² from the logits (one
    answer token), on a group of the trained model."""
    _, trainer, callback = run
    prompt, answers, output = _one_group()
    A = np.array([2 / 3, -2 / 3, -2 / 3, 2 / 3])
    W, h = callback.group_pass(output, range(4), A)
    S = callback.scores(output, range(4))
    np.testing.assert_allclose(h, A @ S / 4, rtol=1e-4, atol=1e-7)
    model = trainer.model
    model.eval()
    with torch.no_grad():
        ids = torch.cat([prompt.expand(4, -1), answers], 1)
        p = torch.softmax(type(model).forward(model, input_ids=ids).logits[:, P - 1], -1)
    want = 1 - 2 * p[torch.arange(4), answers[:, 0]] + (p * p).sum(-1)
    np.testing.assert_allclose(W, want.double().numpy(), rtol=1e-5)


def test_a_cheap_run_fills_the_proxy_by_one_scale_and_plan_reads_it(tmp_path):
    """``cheap=True`` with exact norms on 2 groups every 4 steps: every group carries W and
    gradient norms; ``proxy`` is q where measured, k·W elsewhere with k = Σq/ΣW (run.json)."""
    from gpolab.integrations.trl import PlanCallback
    from gpolab.integrations.trl_task import build
    from gpolab.runner.cli import main

    trainer = build(tmp_path / "run", G=G, groups=8, steps=12, lr=1e-5)
    callback = PlanCallback(trainer, groups_per_step=2, every=4, cheap=True)
    trainer.add_callback(callback)
    trainer.train()
    rows = pd.read_parquet(tmp_path / "run" / "gpolab" / "rollouts.parquet")
    info = json.loads((tmp_path / "run" / "gpolab" / "run.json").read_text())
    assert rows["logit_proxy"].notna().all() and rows["exact_proxy"].notna().sum() == 3 * 2 * G
    q, w = rows["exact_proxy"], rows["logit_proxy"]
    k = q.sum() / w[q.notna()].sum()
    assert info["proxy_scale"] == pytest.approx(k) and info["proxy_scale_responses"] == 24
    np.testing.assert_allclose(rows["proxy"], q.where(q.notna(), k * w))
    norms = pd.read_csv(tmp_path / "run" / "gpolab" / "grad_norms.csv")
    assert set(norms["batch"]) == {1, 2, 4, 8} and (norms["batch"] == 1).sum() == 12 * 8
    assert main(["plan", str(tmp_path / "run"), "--out", str(tmp_path / "plan"), "--quick"]) == 0


def test_scores_at_a_temperature_equal_autograd_of_trls_own_log_probs(tmp_path):
    """At temperature 0.7 TRL samples from softmax(logits / 0.7) and its loss's log-probs are
    those of that distribution (``add_fused_lm_head(..., temperature)``): the callback's
    per-response score norms equal plain autograd of TRL's own per-token log-probs
    (``GRPOTrainer._get_per_token_logps_and_entropies``, float32: ``bf16=False``) on a group of
    the trained model, and differ from the temperature-1 norms the hook computed before."""
    from gpolab.integrations.trl import PlanCallback
    from gpolab.integrations.trl_task import build

    trainer = build(tmp_path, G=G, groups=4, steps=2, lr=1e-5, temperature=0.7, bf16=False)
    callback = PlanCallback(trainer, groups_per_step=2, every=1)
    trainer.add_callback(callback)
    trainer.train()
    prompt, answers, output = _one_group()
    W = callback.scores(output, range(4))
    model = trainer.model
    model.eval()
    params = [p for p in model.parameters() if p.requires_grad]
    ids = torch.cat([prompt.expand(4, -1), answers], 1)
    logps, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, torch.ones_like(ids), 1)
    ref = []
    for i in range(4):
        grads = torch.autograd.grad(logps[i].sum(), params, retain_graph=True, allow_unused=True)
        ref.append(sum(float((g.double() ** 2).sum()) for g in grads if g is not None))
    np.testing.assert_allclose(np.sum(W * W, axis=1), ref, rtol=1e-4)
    callback.temperature = 1.0  # what the hook scored before: another distribution
    W1 = callback.scores(output, range(4))
    assert np.all(np.abs(np.sum(W1 * W1, axis=1) / ref - 1) > 0.05)


@pytest.mark.parametrize(
    "setting, value",
    [
        ("top_p", 0.9),
        ("top_k", 5),
        ("min_p", 0.05),
        ("repetition_penalty", 1.2),
        ("generation_kwargs", {"num_beams": 2}),
        ("vllm_structured_outputs_regex", "[a-n]"),
    ],
)
def test_a_sampling_setting_the_scores_cannot_follow_is_refused(tmp_path, setting, value):
    """A GRPOConfig generation setting that makes TRL sample from another distribution than
    softmax(logits / temperature) (the one its loss and the callback score) is refused at
    construction, before any training step, in one line naming it and its value; nothing is
    written."""
    from gpolab.integrations.trl import PlanCallback
    from gpolab.integrations.trl_task import build
    from gpolab.validate import ConfigError

    trainer = build(tmp_path / "run", G=G, groups=2, steps=1, lr=1e-5, **{setting: value})
    with pytest.raises(ConfigError) as err:
        PlanCallback(trainer, output_dir=tmp_path / "out")
    text = str(err.value)
    assert "\n" not in text and f"{setting}: got {value!r}" in text
    assert not (tmp_path / "out").exists() and trainer.state.global_step == 0


def test_trls_default_sampling_settings_pass(tmp_path):
    """GRPOConfig's defaults (top_p 1, top_k 0, min_p None, repetition_penalty 1, no
    generation_kwargs) and their neutral spellings (min_p 0, top_k None) pass."""
    from trl import GRPOConfig

    from gpolab.integrations.trl import SAMPLING, PlanCallback
    from gpolab.integrations.trl_task import build

    defaults = GRPOConfig(output_dir=str(tmp_path / "d"), use_cpu=True)
    assert {k: getattr(defaults, k) for k in SAMPLING} == {k: v[0] for k, v in SAMPLING.items()}
    for extra in ({}, {"min_p": 0.0, "top_k": None, "temperature": 0.7}):
        trainer = build(tmp_path / "run", G=G, groups=2, steps=1, lr=1e-5, **extra)
        PlanCallback(trainer, output_dir=tmp_path / "out")
