"""``gpolab asynchronous``: the asynchronous-RL lab (:mod:`gpolab.labs.asynchronous.lab`),
staleness, rollout–training mismatch and minibatch reuse in one loop, each framework's composition
against the exact gradient, and training curves on the exact expected reward."""

from __future__ import annotations

from gpolab.kit.command import lab_command

# shown at the end of --help; tests/runner/test_help_examples.py parses and resolves each
EXAMPLES = (
    "gpolab asynchronous --quick",
    "gpolab asynchronous --correction trl/async_grpo,verl/decoupled_token_is,sis "
    "--staleness 0,1,2,4,8 --mismatch noise:0.05 --eta 0.1,0.2",
)

register = lab_command(
    "asynchronous",
    help="asynchronous RL: staleness x mismatch x reuse, each framework's composition",
    description="Rollouts drawn by a mismatched inference engine from the policy k versions "
    "old, reused over m minibatch updates, with each framework's composition of the trainer's, "
    "the proximal and the engine's log-probs (TRL AsyncGRPO, AReaL decoupled PPO and A-3PO, "
    "verl's decoupled and bypass modes): bias^2, variance, MSE, cos and scale of every update "
    "against the exact gradient at the theta where it is applied (Markov env, T = 256), and "
    "training curves on the exact expected reward with paired seeds.  Writes the results, "
    "updates, safe_staleness, curves and training tables, config.toml and figures to --out.",
)
