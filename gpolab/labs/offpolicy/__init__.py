"""``gpolab offpolicy``: the off-policy lab (:mod:`gpolab.labs.offpolicy.lab`), the practical GRPO
update (minibatch reuse, importance ratios, clipping, KL penalties, stale rollouts) against the
exact gradient."""

from __future__ import annotations

from gpolab.runner.commands import lab_command

# shown at the end of --help; tests/runner/test_help_examples.py parses and resolves each
EXAMPLES = (
    "gpolab offpolicy --quick",
    "gpolab offpolicy --ratio token,sis --clip none,ppo,dual --eta 1,2,4 --m 1,4,16",
    "gpolab offpolicy --env markov --T 64,256 --mismatch noise:0.05,bf16:16 "
    "--from-config grpo_config.yaml",
)

register = lab_command(
    "offpolicy",
    help="off-policy updates: minibatch reuse, ratio rules, clipping, KL, staleness, "
    "rollout-training mismatch",
    description="Rollouts drawn at theta_old, updated m times (Algorithm 2 of arXiv 2603.01162) "
    "or k policy versions late, with each ratio rule (none, token, sequence/GSPO, sis, cispo), "
    "clip mode and KL estimator: bias^2, variance, MSE, cos and snr of every update against the "
    "exact gradient at the theta where it is applied.  Writes the results, updates, scaling and "
    "safe_reuse tables, config.toml and figures to --out.  With --env markov: responses of T "
    "tokens sampled by a rollout engine whose policy differs from the trainer's, and every "
    "framework's mismatch correction (TRL, verl) against the exact gradient; --from-config names "
    "the correction a TRL or verl config runs.  Writes the results and decision tables.",
)
