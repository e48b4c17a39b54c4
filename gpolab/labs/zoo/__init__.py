"""``gpolab zoo``: the estimator zoo lab (:mod:`gpolab.labs.zoo.lab`)."""

from __future__ import annotations

from gpolab.kit.command import lab_command

# shown at the end of --help; tests/runner/test_help_examples.py parses and resolves each
EXAMPLES = (
    "gpolab zoo --quick",
    "gpolab zoo --estimators grpo,loo,trl/grpo --G 4,8 --quick",
    "gpolab zoo --env graded --grid 0,0.5,1 --quick",
)

register = lab_command(
    "zoo",
    help="every registered estimator x G on the bandit, the arithmetic surrogate and graded "
    "rewards, and kappa",
    description="Runs every estimator of the registry (gpolab's, verl, TRL, OpenRLHF, NeMo-RL, "
    "pass@k training, or --estimators) at each G on the bandit, the arithmetic surrogate and "
    "the graded bandit (rewards on a grid of values) against the exact gradient: MSE, bias^2, "
    "cosine, the scale-invariant snr, degenerate share, exact finite-G theory (graded: the "
    "graded count tables, and the binary theory of the same means beside them); and "
    "kappa_G(p), the weight each reward-only estimator gives a prompt of difficulty p (binary "
    "rewards).  Writes the results and kappa tables, config.toml, zoo.png and kappa.png to "
    "--out.",
)
