"""``gpolab curvature``: the curvature lab (:mod:`gpolab.labs.curvature.lab`), per-prompt gradient
and Hessian norms of the log-linear bandit against the reward std."""

from __future__ import annotations

from gpolab.kit.command import lab_command

# shown at the end of --help; tests/runner/test_help_examples.py parses and resolves each
EXAMPLES = ("gpolab curvature --quick", "gpolab curvature --prompts 8 --quick")

register = lab_command(
    "curvature",
    help="curvature law: per-prompt gradient and Hessian norms against the reward std",
    description="Exact ||g_x|| and ||H_x||_op of the log-linear bandit at many random theta, "
    "against sigma_x, with the bounds 2B sigma_x and 4B^2 sigma_x (arXiv 2601.23135).  Writes "
    "the fits and curvature tables (parquet and CSV), config.toml and curvature.png to --out.",
)
