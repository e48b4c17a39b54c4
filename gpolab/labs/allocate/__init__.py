"""``gpolab allocate``: the allocation lab (:mod:`gpolab.labs.allocate.lab`), per-prompt rollout
allocation rules against gpolab's exact-MSE-optimal allocation on the exact gradient."""

from __future__ import annotations

from gpolab.kit.command import lab_command

# shown at the end of --help; tests/runner/test_help_examples.py parses and resolves each
EXAMPLES = (
    "gpolab allocate --quick",
    "gpolab allocate --rules uniform,gpolab,knapsack --budget 256,512 --seeds 4000",
    "gpolab allocate --estimator grpo --quick",
)

register = lab_command(
    "allocate",
    help="per-prompt rollout allocation: every published rule vs the exact-MSE optimum",
    description="A step's rollout budget spread over prompts of a skewed difficulty mix by each "
    "rule (uniform G, gpolab's exact-MSE-optimal allocation from the truth or from Beta "
    "posteriors, Knapsack RL and GVM-RAFT as their authors run them, GRESO, VIP, MoPPS, PODS, "
    "Reinforce-Ada, Pilot-Commit, gpolab's constructions of sGPO and HORA): MSE, cos and snr of "
    "the step's gradient against the exact one at equal rollouts, each rule's own objective "
    "(Knapsack RL's value, groups with both outcomes, update cost, hit utility, rollouts spent), "
    "the rollouts each rule "
    "needs to match uniform G, and training curves (gap and success rate against cumulative "
    "rollouts, 95% intervals over runs).  Writes the results, match, training, trained and "
    "allocation tables, config.toml and figures to --out.",
)
