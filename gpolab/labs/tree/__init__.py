"""``gpolab tree``: the tree-branching lab (:mod:`gpolab.labs.tree.lab`)."""

from __future__ import annotations

from gpolab.kit.command import lab_command

# shown at the end of --help; tests/runner/test_help_examples.py parses and resolves each
EXAMPLES = ("gpolab tree --quick", "gpolab tree --leaves 64 --quick")

register = lab_command(
    "tree",
    help="tree branching lab: K thoughts x M continuations, variance floor, best split",
    description="Thought-level advantages of K thoughts x M continuations (arXiv 2509.24494) "
    "over many seeds: conditional variance, MSE against the population-standardized value, "
    "correlation and degenerate-group fraction, with the exact closed forms for Beta(beta_a, "
    "beta_b) thought values.  --leaves N compares every split K*M = N and recommends one "
    "(lowest tokens per effective thought (L_think + M*L_answer)/corr^2, a score invariant to "
    "rescaling the advantage; ties within Monte Carlo noise are flagged); --model finite adds "
    "the thought-level policy-gradient MSE and its bias share.  Writes "
    "results.parquet/.csv, floor.parquet/.csv (the exact floor curve), config.toml and figures "
    "to --out.",
)
