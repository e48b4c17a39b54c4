"""What ``gpolab plan`` needs, logged from a verl run (verl's trainer needs GPUs and an inference
engine, so this is a plain function a user calls, not a hook gpolab installs).

    from gpolab.integrations.verl import PlanLogger
    logger = PlanLogger(config.trainer.default_local_dir)            # once
    # in a custom reward manager or after compute_advantage in RayPPOTrainer.fit, per step:
    logger.log_generations(step, inputs, scores, uids=batch.non_tensor_batch["uid"])
    logger.flush()                                                  # any time; cheap

``inputs``, ``scores`` are what verl's ``RayPPOTrainer._dump_generations`` receives (the decoded
prompts and the sequence scores ``token_level_scores.sum(-1)``); ``uids`` are the group ids verl's
GRPO advantage groups by (without them, equal inputs of a step form a group, as ``gpolab plan``
reads a ``rollout_data_dir`` dump).  ``proxy`` (per response ‖∇θ log πθ(y|x)‖²) and
``log_group_gradients`` (per group (1/G) Σ_g A_loo,g ∇θ log πθ(y_g)) are optional: the user's
model code computes them; with them ``gpolab plan`` estimates G*.  The files are those of
:mod:`gpolab.integrations.files`, so ``gpolab plan <default_local_dir>`` reads them.
"""

from __future__ import annotations

import numpy as np

from gpolab import validate
from gpolab.integrations.files import Writer, batch_norms, batch_sizes


class PlanLogger:
    """Accumulates a verl run's groups (and optional score norms and group gradients) for
    ``gpolab plan``; ``settings``: what the trainer's loss followed (e.g. verl's
    ``algorithm.adv_estimator``, ``actor.loss_agg_mode``, ``norm_adv_by_std_in_grpo``)."""

    def __init__(self, output_dir, settings: dict | None = None):
        self.writer = Writer(output_dir, {"framework": "verl", **(settings or {})})

    def log_generations(self, step: int, inputs, scores, *, uids=None, proxy=None) -> None:
        """One step's responses: ``inputs`` (prompt per response), ``scores`` (reward per
        response), ``uids`` (group id per response; default: the input), ``proxy`` (per response
        score norm, NaN where not measured)."""
        inputs = [str(x) for x in inputs]
        scores = np.asarray(scores, np.float64).ravel()
        n = len(inputs)
        keys = [str(u) for u in uids] if uids is not None else inputs
        q = np.full(n, np.nan) if proxy is None else np.asarray(proxy, np.float64).ravel()
        if not (len(scores) == len(keys) == len(q) == n) or n == 0:
            raise validate.ConfigError(
                f"log_generations: got {n} inputs, {len(scores)} scores, {len(keys)} uids, "
                f"{len(q)} proxies; allowed: one of each per response, at least one"
            )
        validate.finite_array("scores", scores)
        order = {}
        for i, k in enumerate(keys):
            order.setdefault(k, []).append(i)
        idx = list(order.values())
        self.writer.add_groups(
            step, [inputs[ix[0]] for ix in idx], [scores[ix] for ix in idx], [q[ix] for ix in idx]
        )

    def log_group_gradients(self, step: int, group_grads) -> None:
        """Per-group vectors (n_groups, D), (1/G) Σ_g A_loo,g ∇θ log πθ(y_g): norm rows at B = 1,
        2, 4, … (disjoint runs of B groups)."""
        h = np.asarray(group_grads, np.float64)
        self.writer.add_norms(step, batch_norms(h, batch_sizes(len(h))))

    def flush(self) -> None:
        self.writer.flush()
