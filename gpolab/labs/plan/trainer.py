"""Which estimator a run trains with, read from the training hook's ``run.json`` (TRL's
``GRPOConfig`` settings, or the settings a verl user passes to ``PlanLogger``), as a registry spec
whose G* ``gpolab plan`` gives beside loo's (:mod:`gpolab.theory.gstar_model`).

TRL (``trl/trainer/grpo_trainer.py``): the advantage is ``trl/grpo[scale_rewards=…]``; ``loss_type``
decides how token log-prob gradients are summed (theory §9, :data:`gpolab.estimators.aggregation.
TRL_LOSS_TYPES`).  ``dr_grpo`` divides the token sum by a constant (B·max_completion_length): the
sequence-level estimator times a constant, exactly.  ``dapo`` and ``bnpo`` divide by the batch's
token count: one number per step, a constant when lengths vary little.  ``grpo`` weights each
response by 1/|y_i|: the sequence-level estimator only when lengths are equal.  verl:
``adv_estimator`` (``grpo`` with ``norm_adv_by_std_in_grpo``, ``rloo``, ``grpo_passk``) and
``loss_agg_mode`` likewise; its other estimators need lengths, a greedy reward or the whole batch
and have no count table (loo's G* only).
"""

from __future__ import annotations

SEQUENCE_LEVEL = {
    "dr_grpo": "exact: the token sum over a constant B·max_completion_length",
    "dapo": "the token sum over the batch's token count, one number per step: exact when that "
    "count is constant",
    "bnpo": "the token sum over the local batch's token count, one number per step: exact when "
    "that count is constant",
    "grpo": "each response's token sum over its own length: the sequence-level estimator only "
    "when every response has the same length (length weighting is not in the model; gpolab "
    "loss-agg measures it on the surrogates)",
    "seq-mean-token-sum": "exact",
    "seq-mean-token-sum-norm": "exact: the token sum over a constant",
    "token-mean": "the token sum over the batch's token count: exact when that count is constant",
    "seq-mean-token-mean": "each response over its own length: exact only for equal lengths",
}
VERL = {"grpo": "verl/grpo", "rloo": "verl/rloo", "grpo_passk": "verl/grpo_passk"}


def _get(run: dict, name: str):
    """``run[name]`` or a dotted key ending in it (``algorithm.adv_estimator``)."""
    if name in run:
        return run[name]
    return next((v for k, v in run.items() if str(k).rsplit(".", 1)[-1] == name), None)


def modelled(run: dict, override: str = "") -> dict:
    """``{spec, source, aggregation, reason}``: the registry spec G* models for this run (None
    with ``reason`` when the run's estimator has no count table or the run says too little),
    what it was read from, and how the loss's token aggregation relates to the sequence-level
    estimator the model is.  ``override``: a spec the user gave (``--trainer-estimator``)."""
    if override:
        return {
            "spec": override,
            "source": "--trainer-estimator",
            "aggregation": "",
            "reason": None,
        }
    if not run:
        return _none("no run.json (the training hook's settings): give --trainer-estimator")
    if run.get("framework") == "verl":
        adv = _get(run, "adv_estimator")
        if adv is None:
            return _none("run.json has no adv_estimator (pass it in PlanLogger's settings)")
        if adv not in VERL:
            return _none(
                f"verl's {adv!r} estimator needs lengths, a greedy reward or the whole batch: "
                "no count table, so loo's G* only"
            )
        spec, said = VERL[adv], f"verl adv_estimator = {adv}"
        norm = _get(run, "norm_adv_by_std_in_grpo")
        if adv == "grpo" and norm is not None:
            spec = f"verl/grpo[norm_adv_by_std_in_grpo={str(bool(norm)).lower()}]"
            said += f", norm_adv_by_std_in_grpo = {norm}"
        return _with_aggregation(spec, said, "loss_agg_mode", _get(run, "loss_agg_mode"))
    scale = run.get("scale_rewards")
    if scale is None:
        return _none("run.json has no scale_rewards (TRL's advantage setting)")
    scale = {True: "group", False: "none"}.get(scale, scale)
    said = f"TRL scale_rewards = {run['scale_rewards']}"
    if scale == "batch":
        # one batch std per step: a step size, so the rescaled target is scale_rewards=none's
        return {
            **_with_aggregation(
                "trl/grpo[scale_rewards=none]", said, "loss_type", run.get("loss_type")
            ),
            "batch": "scale_rewards = batch divides every advantage of a step by one batch "
            "std: a step size, modelled as scale_rewards = none (the batch std's own noise is "
            "left out)",
        }
    return _with_aggregation(
        f"trl/grpo[scale_rewards={scale}]", said, "loss_type", run.get("loss_type")
    )


def _none(reason: str) -> dict:
    return {"spec": None, "source": "", "aggregation": "", "reason": reason}


def _with_aggregation(spec: str, said: str, key: str, mode) -> dict:
    if mode is None:
        how = f"{key} not logged: modelled at the sequence level"
    else:
        how = f"{key} = {mode}: " + SEQUENCE_LEVEL.get(mode, "not known to gpolab; sequence level")
    return {"spec": spec, "source": said, "aggregation": how, "reason": None}
