"""``PlanCallback``: what ``gpolab plan`` needs, logged during a TRL ``GRPOTrainer`` run.

    trainer = GRPOTrainer(...)
    trainer.add_callback(PlanCallback(trainer))
    trainer.train()          # then: gpolab plan <args.output_dir>

Every training step's groups (prompt, rewards: TRL's summed reward, ``reward_weights``
applied), and for ``groups_per_step`` of its groups every ``every`` steps the exact
per-response score norm ‖∇θ log πθ(y|x)‖² (log π of the whole completion, the policy in eval
mode, per-sample gradients by ``torch.func``) and the norms of the plain leave-one-out gradient
over 1, 2, 4, … of those groups (the batch sizes G* needs).  Files:
:mod:`gpolab.integrations.files`.

It wraps the trainer's ``_generate_and_score_completions`` (read in TRL 1.16.0,
``trl/trainer/grpo_trainer.py``: it returns ``prompt_ids``, ``prompt_mask``,
``completion_ids``, ``completion_mask``, and has just extended ``trainer._logs`` with the
gathered prompts and every reward function's rewards), so the groups are the ones TRL trained
on; consecutive ``num_generations`` rows form a group, as in TRL.  Responses are scored under
softmax(logits / ``args.temperature``), the distribution TRL samples from and its loss scores
(``add_fused_lm_head(..., temperature=self.temperature)`` in ``GRPOTrainer.__init__``), and a
generation setting that samples from another (:data:`SAMPLING`) is refused before training.
Cost: a forward and backward pass per measured response (``groups_per_step`` × G per measured
step, vmapped per group); ``run.json`` records the hook's seconds against the training's.  Needs
torch and transformers (the ``trl`` extra).
"""

from __future__ import annotations

import contextlib
import time
from importlib import metadata

import numpy as np
from transformers import TrainerCallback

from gpolab import validate
from gpolab.estimators import loo_advantages
from gpolab.integrations.files import Writer, batch_norms, batch_sizes, decision_text
from gpolab.theory import gstar

FLUSH_EVERY = 20  # rewrite the files every this many trainer logs (and at the end)
SETTINGS = (
    "loss_type",
    "scale_rewards",
    "num_generations",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "steps_per_generation",
    "generation_batch_size",
    "beta",
    "epsilon",
    "epsilon_high",
    "importance_sampling_level",
    "max_completion_length",
    "temperature",
    "learning_rate",
)
# GRPOConfig's generation settings (TRL 1.16.0, trl/trainer/grpo_config.py) that make TRL sample
# from another distribution than softmax(logits / temperature), the one its loss scores
# (GRPOTrainer.__init__ passes them to GenerationConfig or vLLM, the temperature alone to the
# loss's log-probs), with the values that leave it unchanged (the first: TRL's default)
SAMPLING = {
    "top_p": (1.0, None),
    "top_k": (0, None),
    "min_p": (None, 0.0),
    "repetition_penalty": (1.0, None),
    "generation_kwargs": (None, {}),
    "vllm_structured_outputs_regex": (None, ""),
}


def settings_of(trainer) -> dict:
    """The trainer's settings that decide which gradient it follows, and the versions."""
    args = trainer.args
    out = {k: getattr(args, k, None) for k in SETTINGS}
    out["num_processes"] = trainer.accelerator.num_processes
    out["reward_functions"] = [getattr(f, "__name__", str(f)) for f in trainer.reward_funcs]
    out["trl_version"] = metadata.version("trl")
    return out


def refuse_unhooked(trainer) -> None:
    """One line, before any training step, for a trainer without the hook: TRL's
    ``AsyncGRPOTrainer`` (``trl.experimental.async_grpo``, read in TRL 1.16.0) generates with a
    vLLM server and scores in a spawned worker process, and trains on queued samples that carry
    their advantage already: there is no ``_generate_and_score_completions`` to wrap."""
    if not callable(getattr(trainer, "_generate_and_score_completions", None)):
        raise validate.ConfigError(
            f"PlanCallback: {type(trainer).__name__} has no _generate_and_score_completions "
            "(TRL's AsyncGRPOTrainer scores its rollouts in a separate worker process), so its "
            "groups cannot be logged; use trl.GRPOTrainer with PlanCallback, or write each "
            "group's rewards with gpolab.integrations.verl.PlanLogger and run gpolab plan"
        )


def refuse_unscorable(args) -> None:
    """One line, before any training step, for a generation setting of :data:`SAMPLING` that
    the callback cannot reproduce: its scores (score norms, pair scores, gradient norms) are
    those of softmax(logits / temperature), which TRL's loss uses, and would not be those of the
    distribution the responses were drawn from."""
    for name, neutral in SAMPLING.items():
        value = getattr(args, name, neutral[0])
        if value not in neutral:
            raise validate.ConfigError(
                f"PlanCallback: {name}: got {value!r}; allowed: {neutral[0]!r} (TRL's default): "
                "with it TRL samples from another distribution than softmax(logits / "
                "temperature), the one its loss and the callback's score norms and pair scores "
                "use, so they would not be those of the sampled responses"
            )


@contextlib.contextmanager
def _float32_eval(model):
    """The model in eval mode (no dropout) with its own float32 forward: accelerate patches the
    instance's forward with an autocast (TRL trains in bf16 on CPU by default), which would
    round the gradients; both are restored after."""
    was_training = model.training
    model.eval()
    patched = model.__dict__.pop("forward", None)
    try:
        yield
    finally:
        model.train(was_training)
        if patched is not None:
            model.forward = patched


def _flat(grads, params):
    """One flat vector of ``torch.autograd.grad``'s output (zeros where a parameter is unused)."""
    import torch

    return torch.cat(
        [
            (g if g is not None else torch.zeros_like(p)).reshape(-1)
            for g, p in zip(grads, params, strict=True)
        ]
    )


class PlanCallback(TrainerCallback):
    """Logs rewards of every group, per-response score norms and gradient norms at several batch
    sizes of sampled groups, under ``<output_dir>/gpolab/`` (``gpolab plan`` reads them).

    ``groups_per_step``: groups measured per measured step (≥ 2: the batch sizes 1, 2, 4, … up
    to it; fewer when the step has fewer groups); ``every``: measure every this many steps
    (1: every step); ``output_dir``: default the trainer's ``args.output_dir``.

    ``cheap=True``: every group of every step is also measured the cheap way, with one forward
    and one backward pass per group instead of one per response.  The forward gives verl's
    forward-only proxy W(τ) = Σ_t [1 − 2π_t(y_t) + Σ_a π_t(a)²] per response; the backward of
    (1/G) Σ_g A_loo,g log π(y_g) gives the group's gradient, and the gradient norms are those
    groups' (B = 1, 2, 4, …).  W lives in logit coordinates, so the exact score norms of the
    ``groups_per_step`` groups every ``every`` steps fix one scale k = Σq/ΣW over the responses
    that have both (gpolab's calibration: on the arithmetic surrogate one k gives plan's c1 and
    C3 as the exact norms do), and ``rollouts.parquet``'s ``proxy`` is q where measured, k·W
    elsewhere (``exact_proxy`` and ``logit_proxy`` keep both; ``run.json``: ``proxy_scale``)."""

    def __init__(
        self,
        trainer,
        *,
        groups_per_step: int = 4,
        every: int = 16,
        output_dir=None,
        cheap: bool = False,
    ):
        refuse_unhooked(trainer)
        refuse_unscorable(trainer.args)
        validate.integer("groups_per_step", groups_per_step, 2)
        validate.integer("every", every, 1)
        if not isinstance(cheap, bool):
            raise validate.ConfigError(f"cheap: got {cheap!r}; allowed: True, False")
        self.trainer, self.groups_per_step, self.every = trainer, groups_per_step, every
        self.cheap = cheap
        self.G = int(trainer.num_generations)
        self.temperature = float(trainer.args.temperature)
        settings = {
            **settings_of(trainer),
            "groups_per_step": groups_per_step,
            "every": every,
            "cheap": cheap,
        }
        self.writer = Writer(output_dir or trainer.args.output_dir, settings)
        self.sizes = batch_sizes(groups_per_step)
        self._start, self._logs = None, 0
        original = trainer._generate_and_score_completions

        def wrapped(inputs):
            output = original(inputs)
            if trainer.model.training:
                begin = time.perf_counter()
                self.record(inputs, output)
                self.writer.seconds["hook"] += time.perf_counter() - begin
            return output

        trainer._generate_and_score_completions = wrapped

    # ------------------------------------------------------------------ what TRL just scored
    def _rewards(self, n: int) -> tuple[list, np.ndarray]:
        """The last ``n`` gathered prompts and summed rewards TRL logged (its weights, nansum)."""
        logs = self.trainer._logs
        names = list(logs["rewards"])
        per = np.array([list(logs["rewards"][k])[-n:] for k in names], np.float64).T  # (n, F)
        w = np.asarray(self.trainer.reward_weights.detach().cpu(), np.float64)
        prompts = [str(p) for p in list(logs["prompt"])[-n:]]
        return prompts, np.nansum(per * w, axis=1)

    def record(self, inputs, output) -> None:
        trainer = self.trainer
        n = len(inputs) * trainer.accelerator.num_processes
        prompts, rewards = self._rewards(n)
        G = self.G
        groups = n // G
        step = trainer.state.global_step + 1  # TRL names this step's completions file so
        proxy, logit = np.full((groups, G), np.nan), np.full((groups, G), np.nan)
        pairs = np.full((groups, G), np.nan)
        main = trainer.accelerator.is_main_process
        if main and (step - 1) % self.every == 0:
            k = min(self.groups_per_step, len(inputs) // G)
            grads = []
            for j in range(k):
                W = self.scores(output, range(j * G, (j + 1) * G))
                proxy[j] = np.sum(W * W, axis=1)
                if G >= 3:  # the scores' inner products: E‖g_x‖² without within-group noise
                    pairs[j] = gstar.pair_scores(rewards[j * G : (j + 1) * G], W @ W.T)
                if not self.cheap:  # cheap: the norms come from every group below
                    grads.append(self._advantages(rewards, j) @ W / G)
            if len(grads) >= 2:
                self.writer.add_norms(step, batch_norms(np.stack(grads), self.sizes))
        if main and self.cheap:
            local = len(inputs) // G
            grads = []
            for j in range(local):
                A = self._advantages(rewards, j)
                logit[j], h = self.group_pass(output, range(j * G, (j + 1) * G), A)
                grads.append(h)
            if local >= 2:
                self.writer.add_norms(step, batch_norms(np.stack(grads), batch_sizes(local)))
        if main:
            self.writer.add_groups(
                step, prompts[::G], rewards.reshape(groups, G), proxy, logit, pairs
            )

    def _advantages(self, rewards: np.ndarray, j: int) -> np.ndarray:
        """Group j's leave-one-out advantages (G,)."""
        G = self.G
        return np.asarray(loo_advantages(rewards[j * G : (j + 1) * G]), np.float64)

    def scores(self, output, rows) -> np.ndarray:
        """(len(rows), D) ∇θ log πθ(completion | prompt) per response of one group under
        softmax(logits / temperature) (TRL's loss's log-probs), the model in eval mode (no
        dropout) and float32 (outside the trainer's mixed-precision autocast).  The
        group's rows share their (left-padded) prompt, and padding after a completion cannot
        change the causal log-probs before it, so one ``torch.func.vmap`` of the per-response
        gradient serves the group; a model that vmap cannot trace falls back to one backward
        pass per response (``run.json``: ``score_method``)."""
        model, ids, mask, P = self._group(output, rows)
        with _float32_eval(model):
            if self.writer.settings.get("score_method") != "loop":
                try:
                    out = self._vmap_scores(model, ids, mask, P, self.temperature)
                    self.writer.settings["score_method"] = "vmap"
                    return out
                except Exception as err:  # a model vmap cannot trace: the loop, said once
                    self.writer.settings["score_method"] = "loop"
                    self.writer.settings["vmap_error"] = f"{type(err).__name__}: {err}"[:300]
            return self._loop_scores(model, ids, mask, P, self.temperature)

    def _group(self, output, rows):
        """(model, ids, completion mask, prompt length) of one group's rows: they share their
        (left-padded) prompt, and padding after a completion cannot change the causal log-probs
        before it, so the rows run as one batch without an attention mask."""
        import torch

        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        rows = list(rows)
        keep = output["prompt_mask"][rows[0]].bool()
        prompt = output["prompt_ids"][rows[0]][keep]
        comp, mask = output["completion_ids"][rows], output["completion_mask"][rows].float()
        return model, torch.cat([prompt.expand(len(rows), -1), comp], 1), mask, len(prompt)

    def group_pass(self, output, rows, A) -> tuple[np.ndarray, np.ndarray]:
        """One forward and one backward pass over a group (``cheap``): verl's W(τ) per response
        (G,) and the group's gradient (1/G) Σ_g A_g ∇θ log πθ(y_g) (D,), float32, eval mode; both
        of softmax(logits / temperature), the distribution :meth:`scores` scores."""
        import torch

        model, ids, mask, P = self._group(output, rows)
        params = [p for p in model.parameters() if p.requires_grad]
        with _float32_eval(model):
            logits = model(input_ids=ids).logits[:, P - 1 : -1].float() / self.temperature
            logp = logits.log_softmax(-1)
            lp = logp.gather(-1, ids[:, P:, None])[..., 0]
            with torch.no_grad():
                p = logp.exp()
                W = ((1 - 2 * lp.exp() + (p * p).sum(-1)) * mask).sum(-1)
            weights = torch.as_tensor(A, dtype=lp.dtype) / len(A)
            grads = torch.autograd.grad(
                ((lp * mask).sum(-1) * weights).sum(), params, allow_unused=True
            )
        return W.double().cpu().numpy(), _flat(grads, params).double().cpu().numpy()

    @staticmethod
    def _vmap_scores(model, ids, mask, P: int, T: float) -> np.ndarray:
        """Per-response gradients by ``torch.func``: the embeddings looked up from the parameter
        itself and passed as ``inputs_embeds`` (the model's checks on token ids, such as the
        padding warning, and gradient checkpointing's embedding hook are data-dependent or call
        ``requires_grad_``, which vmap refuses), no attention mask (no padding inside)."""
        import torch
        from torch.func import functional_call, grad, vmap

        table = model.get_input_embeddings().weight
        params = {k: v.detach() for k, v in model.named_parameters() if v.requires_grad}
        emb = next(k for k, v in model.named_parameters() if v is table)
        buffers = dict(model.named_buffers())

        def logp(p, x, m):
            e = torch.nn.functional.embedding(x, p[emb])[None]
            logits = functional_call(model, (p, buffers), (), {"inputs_embeds": e}).logits
            lp = (logits[0, P - 1 : -1].float() / T).log_softmax(-1).gather(-1, x[P:, None])[:, 0]
            return (lp * m).sum()

        g = vmap(grad(logp), in_dims=(None, 0, 0))(params, ids, mask)
        return torch.cat([v.reshape(len(ids), -1) for v in g.values()], 1).double().cpu().numpy()

    @staticmethod
    def _loop_scores(model, ids, mask, P: int, T: float) -> np.ndarray:
        import torch

        params = [p for p in model.parameters() if p.requires_grad]
        out = []
        for x, m in zip(ids, mask, strict=True):
            logits = model(input_ids=x[None]).logits[0, P - 1 : -1].float() / T
            logp = (logits.log_softmax(-1).gather(-1, x[P:, None])[:, 0] * m).sum()
            out.append(_flat(torch.autograd.grad(logp, params, allow_unused=True), params))
        return torch.stack(out).double().cpu().numpy()

    # ------------------------------------------------------------------ trainer events
    def on_train_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_log(self, args, state, control, **kwargs):
        self._logs += 1
        if self._logs % FLUSH_EVERY == 0:  # the files are rewritten whole: not at every log
            self._flush()

    def on_train_end(self, args, state, control, **kwargs):
        self._flush()
        if self.trainer.accelerator.is_main_process:  # does the log decide G* yet, or how far
            print(decision_text(self.writer.settings["decision"]))

    def _flush(self) -> None:
        """Rewrite the files; their seconds count as the hook's (``run.json`` last, with them)."""
        main = self.trainer.accelerator.is_main_process
        begin = time.perf_counter()
        if main:
            self.writer.write_rows()
        self.writer.seconds["hook"] += time.perf_counter() - begin
        if self._start is not None:
            self.writer.seconds["train"] = (
                time.perf_counter() - self._start - self.writer.seconds["hook"]
            )
        if main:
            self.writer.write_run()
