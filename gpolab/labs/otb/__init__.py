"""``gpolab otb``: the token-baseline lab (:mod:`gpolab.labs.otb.lab`), verl's optimal token
baseline (OTB, arXiv 2602.07078) against response-level baselines on the arithmetic surrogate."""

from __future__ import annotations

from gpolab.kit.command import lab_command

# shown at the end of --help; tests/runner/test_help_examples.py parses and resolves each
EXAMPLES = ("gpolab otb --quick", "gpolab otb --policy base --G 4,32 --seeds 200 --quick")

register = lab_command(
    "otb",
    help="token-level rules: verl's optimal token baseline (OTB) and TRL's entropy mask vs GRPO",
    description="Gradient error of verl's optimal_token_baseline (per-token baseline weighted by "
    "the cumulative logit-gradient energy) and of response-level estimators on the same draws of "
    "the arithmetic surrogate (TRL's top_entropy_quantile mask as trl/top_entropy), against the "
    "exact per-question gradient, per policy and G: MSE, "
    "the best-scale MSE relative to ||g||^2 and the cosine, with standard errors from "
    "independent seed splits; the OTB abstract's N = 4 against N = 32 comparison, and with "
    "--train-steps the same comparison in training at equal steps (Adam, exact J).  Writes the "
    "results, match, train and train_match tables (parquet and CSV), config.toml, otb.png and "
    "(training) otb_train.png to --out.",
)
