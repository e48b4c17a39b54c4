"""gpolab's small task for TRL's ``GRPOTrainer`` on a CPU: a tiny GPT-2 built from a config, a
character tokenizer built here, 3-character prompts with single-token answers and a binary reward
(success: the answer lies in the prompt's set of characters, 10 of 14 for the easy half of the
prompts, 3 for the hard half).  The TRL integration test (``tests/integrations/test_trl.py``) and
the per-step gradient check (``tools/trl_pergrad.py``) build their trainers here.  Needs the
``trl`` extra (torch, transformers, trl, datasets); imported lazily.
"""

from __future__ import annotations

import random

CHARS = list("abcdefghijklmn")
VOCAB = {"<pad>": 0, "<eos>": 1, "?": 2, **{c: i + 3 for i, c in enumerate(CHARS)}}
EASY, HARD = 10, 3  # answers that succeed, of the 14 characters, for the easy and hard halves


def tokenizer():
    """A word-level tokenizer with one token per character (``<pad>``, ``<eos>``, ``?``, a–n)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(VOCAB, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")


def task(n: int = 64) -> tuple[list[str], dict[str, set]]:
    """The prompts (distinct ``xyz?`` strings from ``n`` draws; 62 for ``n = 64``) and each
    prompt's set of successful answers (easy and hard alternate); fixed (seed 0)."""
    rng = random.Random(0)
    prompts = list(
        dict.fromkeys("".join(rng.choice(CHARS) for _ in range(3)) + "?" for _ in range(n))
    )
    targets = {
        p: set(rng.sample(CHARS, EASY if i % 2 == 0 else HARD)) for i, p in enumerate(prompts)
    }
    return prompts, targets


def reward(targets: dict[str, set]):
    """The binary reward: 1 when the completion's first character is in the prompt's set."""

    def reward(completions, prompts, **kw):
        return [
            float(c.replace(" ", "")[:1] in targets[p])
            for p, c in zip(prompts, completions, strict=True)
        ]

    return reward


def model(seed: int = 0):
    """A 2-layer GPT-2 (2 heads, width 32) with random weights from ``torch.manual_seed(seed)``."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    return GPT2LMHeadModel(
        GPT2Config(
            vocab_size=len(VOCAB),
            n_layer=2,
            n_head=2,
            n_embd=32,
            n_positions=32,
            bos_token_id=1,
            eos_token_id=1,
            pad_token_id=0,
        )
    )


def build(out, *, G: int, groups: int, steps: int, lr: float, seed: int = 0, **config):
    """A ``GRPOTrainer`` on the task: ``groups`` groups of ``G`` completions per step (B·G rows in
    one device batch, one generation per step), ``steps`` steps at learning rate ``lr``, no KL
    term, the reward logged at every step; ``seed`` seeds the model's weights and TRL's run;
    ``config``: further ``GRPOConfig`` fields."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    net = model(seed)
    prompts, targets = task()
    args = GRPOConfig(
        **{
            "output_dir": str(out),
            "num_generations": G,
            "per_device_train_batch_size": groups * G,
            "max_completion_length": 1,
            "max_steps": steps,
            "logging_steps": 1,
            "log_completions": True,
            "report_to": [],
            "use_cpu": True,
            "learning_rate": lr,
            "beta": 0.0,
            "save_strategy": "no",
            "disable_tqdm": True,
            "seed": seed,
            **config,
        }
    )
    data = Dataset.from_dict({"prompt": prompts * 40})
    return GRPOTrainer(
        model=net,
        reward_funcs=reward(targets),
        args=args,
        train_dataset=data,
        processing_class=tokenizer(),
    )
