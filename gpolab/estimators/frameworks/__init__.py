"""Advantage estimators as the RL frameworks practitioners run compute them, semantics matched.

One pure, jit-traceable function per (framework, estimator), signature

    fn(rewards, *, lengths=None, greedy=None, **options) -> advantages

``rewards`` is ``(P, G)``: P prompts (the batch) times G responses each; group-scoped estimators
also take any leading shape ``(..., G)``, batch-scoped ones reduce over the last two axes, so
leading axes are independent batches.  ``lengths`` ``(P, G)`` are response lengths in tokens,
``greedy`` ``(P,)`` the reward of each prompt's greedy response.  Options carry the framework's
own names and defaults and must be static Python values under ``jax.jit``.  The result is
``(P, G)``: per response the advantage every one of its tokens gets (the frameworks broadcast a
scalar over the response mask; for token-whitened schemes the value is still one per response).
A function's ``Args:`` leave out the inputs it does not read (``lengths``, ``greedy``).
One module per family (``verl``, ``trl``, ``openrlhf``, ``nemo``, ``passk``, ``crossprompt``,
``mathforge``);
this one names them all and holds :data:`SPECS`, what the registry reads.

Sources read (the ``source`` of each :data:`SPECS` entry names file and function):

* verl 0.9.1 (the PyPI release) and ``b178a3cd`` (v0.7.0-125): ``verl/trainer/ppo/core_algos.py``,
  ``verl/utils/torch_functional.py::masked_whiten``, ``verl/utils/groupwise.py::group_mean_std``,
  ``verl/trainer/ppo/ray_trainer.py::compute_advantage`` (what the trainer passes).  Checked by
  running verl's own functions, both versions, on the same batches as these (G = 1, 2, 3, 4, 5,
  8; binary, graded and normal rewards; all-equal and tiny-variance groups; float32 and
  float64): ``tests/estimators/test_verl_reference.py`` holds 0.9.1's outputs and redoes the
  comparison when verl is installed.  Every verl entry equals 0.9.1 (and 1dda039b9c63, the
  newest read) up to the float32 rounding inside verl; b178a3cd differs only in
  ``verl/grpo_vectorized``, whose variance it floored at ``epsilon`` (see that function).
* TRL ``f2cd5771`` (v1.9.0-26): ``trl/trainer/grpo_trainer.py::_generate_and_score_completions``,
  ``trl/trainer/rloo_trainer.py`` (same method), ``trl/trainer/utils.py::nanstd``.
* OpenRLHF ``3c3be623`` (v0.11.0): ``openrlhf/trainer/ppo_utils/experience_maker.py::
  compute_advantages_and_returns``, ``openrlhf/cli/train_ppo_ray.py`` (asserts G > 1).
* NeMo-RL ``7ea279ab`` (v0.1.0-1338): ``nemo_rl/algorithms/utils.py::
  calculate_baseline_and_std_per_prompt``, ``nemo_rl/algorithms/advantage_estimator.py::
  GRPOAdvantageEstimator.compute_advantage``.
* Pass@k training (arXiv 2508.10751): the authors' ``RUCAIBox/Passk_Training``
  ``code/passk_adv.py::calc_adv`` @ ``00474d78`` and its README formulas.
* DGPO (MathForge, arXiv 2601.20614): the authors' vendored TRL 0.20,
  ``AMAP-ML/MathForge`` ``trl-0.20.0/trl/trainer/grpo_trainer.py::_generate_and_score_completions``
  and ``grpo_config.py`` @ ``83edda02``, and its ``scripts_mathforge/*/run_dgpo.sh``.

Floating-point policy (gpolab's): where a framework's value is exactly 0 in real arithmetic on an
all-equal group (or an all-equal leave-one-out set), ours is exactly 0; the frameworks can return
rounding noise there (e.g. torch.mean of three 0.1s), which for std-normalised schemes is then
amplified by 1/eps.  Where a framework returns NaN, ours is finite and the docstring says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from gpolab.estimators.frameworks.crossprompt import areal_liteppo, jspo, jspo_plus_plus, spo
from gpolab.estimators.frameworks.mathforge import mathforge_dgae, mathforge_dgpo
from gpolab.estimators.frameworks.nemo import nemo_grpo
from gpolab.estimators.frameworks.openrlhf import (
    openrlhf_dr_grpo,
    openrlhf_group_norm,
    openrlhf_reinforce_baseline,
    openrlhf_rloo,
)
from gpolab.estimators.frameworks.passk import passk_training
from gpolab.estimators.frameworks.trl import trl_grpo, trl_high_entropy_mask, trl_rloo
from gpolab.estimators.frameworks.verl import (
    verl_gpg,
    verl_grpo,
    verl_grpo_passk,
    verl_grpo_vectorized,
    verl_opo,
    verl_optimal_token_baseline,
    verl_reinforce_plus_plus_baseline,
    verl_remax,
    verl_rloo,
    verl_rloo_vectorized,
)

__all__ = [
    "Spec",
    "SPECS",
    "verl_grpo",
    "verl_grpo_vectorized",
    "verl_rloo",
    "verl_rloo_vectorized",
    "verl_reinforce_plus_plus_baseline",
    "verl_opo",
    "verl_gpg",
    "verl_grpo_passk",
    "verl_remax",
    "verl_optimal_token_baseline",
    "trl_grpo",
    "trl_rloo",
    "trl_high_entropy_mask",
    "openrlhf_group_norm",
    "openrlhf_rloo",
    "openrlhf_reinforce_baseline",
    "openrlhf_dr_grpo",
    "nemo_grpo",
    "passk_training",
    "mathforge_dgae",
    "mathforge_dgpo",
    "areal_liteppo",
    "jspo",
    "jspo_plus_plus",
    "spo",
]

VERL = (
    "volcengine/verl verl/trainer/ppo/core_algos.py::{} @ verl 0.9.1 (PyPI) and b178a3cd"
    " (v0.7.0-125), outputs compared"
)
TRL = "huggingface/trl trl/trainer/{}::_generate_and_score_completions @ f2cd5771 (v1.9.0-26)"
MATHFORGE = (
    "AMAP-ML/MathForge trl-0.20.0/trl/trainer/grpo_trainer.py::_generate_and_score_completions"
    " @ 83edda02 (DGPO, arXiv 2601.20614)"
)
ORLHF = (
    "OpenRLHF/OpenRLHF openrlhf/trainer/ppo_utils/experience_maker.py::"
    "compute_advantages_and_returns ({}) @ 3c3be623 (v0.11.0)"
)


@dataclasses.dataclass(frozen=True)
class Spec:
    """One framework estimator for the registry.

    ``needs``: extra inputs ("lengths", "greedy"); ``scope``: "group" (a response's advantage
    depends on its group only) or "batch" (on the whole (P, G) batch) at the default options;
    ``batch_when``: option → the values that make a group-scoped entry batch-scoped; ``min_group``:
    smallest G the framework runs; ``reward_only``: group-scoped, no lengths, no greedy at the
    default options (exact finite-G theory applies); ``source``: repo path::function @ commit.
    """

    name: str
    fn: Callable
    needs: tuple[str, ...] = ()
    scope: str = "group"
    min_group: int = 1
    options: dict = dataclasses.field(default_factory=dict)
    source: str = ""
    reward_only: bool = True
    batch_when: dict[str, tuple] = dataclasses.field(default_factory=dict)


_EPS_NORM = {"epsilon": 1e-6, "norm_adv_by_std_in_grpo": True}


def _verl(name: str, fn: Callable, *, also: str = "", **fields) -> Spec:
    """Entry ``verl/<name>``: verl's ``compute_<name>_outcome_advantage`` (``also``: what else
    it reads)."""
    source = VERL.format(f"compute_{name}_outcome_advantage") + also
    return Spec(f"verl/{name}", fn, source=source, **fields)


def _trl(name: str, fn: Callable, **fields) -> Spec:
    """Entry ``trl/<name>``: TRL's ``<name>_trainer.py``."""
    return Spec(f"trl/{name}", fn, source=TRL.format(f"{name}_trainer.py"), **fields)


def _openrlhf(name: str, fn: Callable, **fields) -> Spec:
    """Entry ``openrlhf/<name>``: OpenRLHF's ``<name>`` branch, G >= 2 (its CLI asserts it)."""
    return Spec(f"openrlhf/{name}", fn, min_group=2, source=ORLHF.format(name), **fields)


def _jspo(name: str, fn: Callable, *, also: str = "") -> Spec:
    """Entry ``jspo/<name>``: the authors' ``compute_<name>_outcome_advantage`` (``also``: a
    note), batch-scoped, G >= 2."""
    source = (
        "guanning03/JSPO-Official code/verl/trainer/ppo/core_algos.py::"
        f"compute_{name}_outcome_advantage @ 3f8539de (James-Stein baselines){also}"
    )
    options = {"epsilon": 1e-6}
    return Spec(
        f"jspo/{name}",
        fn,
        scope="batch",
        min_group=2,
        options=options,
        source=source,
        reward_only=False,
    )


def _mathforge(name: str, fn: Callable, **fields) -> Spec:
    """Entry ``mathforge/<name>``: DGPO in the authors' vendored TRL 0.20, G >= 2 (its
    ``GRPOConfig`` refuses ``num_generations < 2``)."""
    source = MATHFORGE + fields.pop("also", "")
    return Spec(f"mathforge/{name}", fn, min_group=2, source=source, **fields)


SPECS: tuple[Spec, ...] = (
    _verl("grpo", verl_grpo, options=dict(_EPS_NORM)),
    Spec(
        "verl/grpo_vectorized",
        verl_grpo_vectorized,
        options=dict(_EPS_NORM),
        source="volcengine/verl verl/trainer/ppo/core_algos.py::"
        "compute_grpo_vectorized_outcome_advantage + verl/utils/groupwise.py::group_mean_std"
        " @ 1dda039b (eps 0: no variance floor since verl PR#6348), 0.9.1's outputs "
        "compared; b178a3cd floored the variance at epsilon",
    ),
    _verl("rloo", verl_rloo),
    _verl("rloo_vectorized", verl_rloo_vectorized),
    _verl(
        "reinforce_plus_plus_baseline",
        verl_reinforce_plus_plus_baseline,
        also=" + verl/utils/torch_functional.py::masked_whiten",
        needs=("lengths",),
        scope="batch",
        reward_only=False,
    ),
    _verl("opo", verl_opo, needs=("lengths",), reward_only=False),
    _verl("gpg", verl_gpg, scope="batch", options={"f_norm": 1.0}, reward_only=False),
    _verl("grpo_passk", verl_grpo_passk, min_group=2, options=dict(_EPS_NORM)),
    _verl("remax", verl_remax, needs=("greedy",), reward_only=False),
    _trl(
        "grpo",
        trl_grpo,
        options={"scale_rewards": "group"},
        batch_when={"scale_rewards": ("batch",)},
    ),
    _trl(
        "rloo",
        trl_rloo,
        options={"normalize_advantages": False},
        batch_when={"normalize_advantages": (True,)},
    ),
    _openrlhf("group_norm", openrlhf_group_norm),
    _openrlhf("rloo", openrlhf_rloo),
    _openrlhf(
        "reinforce_baseline",
        openrlhf_reinforce_baseline,
        needs=("lengths",),
        scope="batch",
        options={"no_std_norm": False},
        reward_only=False,
    ),
    _openrlhf("dr_grpo", openrlhf_dr_grpo),
    Spec(
        "nemo/grpo",
        nemo_grpo,
        options={"normalize_rewards": True, "use_leave_one_out_baseline": True},
        source="NVIDIA-NeMo/RL nemo_rl/algorithms/utils.py::calculate_baseline_and_std_per_prompt"
        " + nemo_rl/algorithms/advantage_estimator.py::GRPOAdvantageEstimator.compute_advantage"
        " @ 7ea279ab (v0.1.0-1338)",
    ),
    Spec(
        "paper/passk-training",
        passk_training,
        min_group=4,
        options={"k": 4},
        source="RUCAIBox/Passk_Training code/passk_adv.py::calc_adv @ 00474d78 (arXiv 2508.10751)",
    ),
    _mathforge(
        "dgae",
        mathforge_dgae,
        also="; the advantage alone (L1721-1726: G(r - mean)/(sum |r - mean| + 1e-4))",
    ),
    _mathforge(
        "dgpo",
        mathforge_dgpo,
        scope="batch",
        options={"enable_dgpo_dqw": True, "dgpo_dqw_temp": 2.0},
        reward_only=False,
        also="; with zero_mask_ratio and the DQW weights (L1701-1734, grpo_config.py L581-593,"
        " the run_dgpo.sh settings); global_balancing_ratio (1 on one process) not modelled",
    ),
    Spec(
        "areal/liteppo",
        areal_liteppo,
        scope="batch",
        reward_only=False,
        source="inclusionAI/AReaL areal/utils/data.py::Normalization (mean_level=group, "
        "std_level=batch) @ 4aef98d8 (LitePPO, arXiv 2508.08221); the example config's "
        "second, token-level adv_norm pass is not modelled",
    ),
    _jspo("jspo", jspo),
    _jspo(
        "jspo_plus_plus",
        jspo_plus_plus,
        also="; js_smooth_coef 0, the code's default (the authors' run_math.sh: 0.99, not "
        "modelled)",
    ),
    Spec(
        "spo/spo",
        spo,
        needs=("baseline",),
        scope="batch",
        reward_only=False,
        source="verl-project/verl-recipe spo/spo_ray_trainer.py::RayPPOTrainer.fit @ 550d42f5 "
        "(arXiv 2509.13232); the tracker's value is the given baseline (the labs: the exact "
        "V(x), a perfect tracker; SPO's train.sh runs one response per prompt)",
    ),
)
