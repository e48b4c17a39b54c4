"""``gpolab train``: the std-normalization lab (:mod:`gpolab.labs.stdnorm`), GRPO against
REINFORCE at admissible and tuned step sizes on the log-linear bandit."""

from __future__ import annotations

from gpolab.commands import lab_command

HELP = "train GRPO vs REINFORCE (admissible and tuned steps, many seeds); gain and phases"
DESCRIPTION = (
    "Policy-gradient training on the log-linear bandit of arXiv 2601.23135 (DESIGN §7).  Writes "
    "summary, gain, finite_sample, curves and phases tables (parquet and CSV), config.toml and "
    "train_curves.png, train_gain.png, train_phases.png to --out.  B*G = N training on the "
    "bandit or the arithmetic surrogate: gpolab groupsize --train."
)

register = lab_command("stdnorm", "train", help=HELP, description=DESCRIPTION)
