"""``gpolab offpolicy``: the off-policy lab (:mod:`gpolab.labs.offpolicy.lab`), the practical GRPO
update (minibatch reuse, importance ratios, clipping, KL penalties, stale rollouts) against the
exact gradient.  The rollout–training mismatch is ``gpolab mismatch``."""

from __future__ import annotations

import argparse

from gpolab.kit.command import lab_command, run_lab

# shown at the end of --help; tests/runner/test_help_examples.py parses and resolves each
EXAMPLES = (
    "gpolab offpolicy --quick",
    "gpolab offpolicy --ratio token,sis --clip none,ppo,dual --eta 1,2,4 --m 1,4,16",
)
# the flags of the mismatch lab, which was this lab's --env markov mode (issue 57)
MOVED_FLAGS = ("--T", "--mismatch", "--correction", "--from-config", "--batch", "--length")


def _moved_flags(parser) -> None:
    """The mismatch lab's flags, hidden, so an old invocation gets one line naming it."""
    for name in MOVED_FLAGS:
        parser.add_argument(name, dest=f"moved_{name[2:]}", help=argparse.SUPPRESS)


def _run(lab, args) -> int:
    """:func:`gpolab.kit.command.run_lab`, after refusing the mismatch lab's settings."""
    from gpolab.validate import ConfigError

    typed = [f for f in MOVED_FLAGS if getattr(args, f"moved_{f[2:]}") is not None]
    env = args.env
    if args.config and env is None:
        from gpolab import configs

        env = configs.split_file(args.config, lab.NAME)[1].get("env")
    if typed or env in lab.MOVED:
        why = f"{typed[0]}: not an offpolicy flag" if typed else f"env: got {env!r}"
        raise ConfigError(f"{why}; {lab.MOVED['markov']}")
    return run_lab(lab, args)


register = lab_command(
    "offpolicy",
    help="off-policy updates: minibatch reuse, ratio rules, clipping, KL, staleness",
    description="Rollouts drawn at theta_old, updated m times (Algorithm 2 of arXiv 2603.01162) "
    "or k policy versions late, with each ratio rule (none, token, sequence/GSPO, sis, cispo), "
    "clip mode and KL estimator: bias^2, variance, MSE, cos and snr of every update against the "
    "exact gradient at the theta where it is applied.  Writes the results, updates, scaling and "
    "safe_reuse tables, config.toml and figures to --out.  The rollout-training mismatch (the "
    "Markov env, every framework's correction) is gpolab mismatch.",
    extend=_moved_flags,
    runner=_run,
)
