"""``gpolab stdnorm``: the std-normalization lab under its own name (same as ``gpolab train``)."""

from __future__ import annotations

from gpolab.kit.command import lab_command
from gpolab.labs.train import DESCRIPTION, HELP

# shown at the end of --help; tests/runner/test_help_examples.py parses and resolves each
EXAMPLES = ("gpolab stdnorm --quick", "gpolab stdnorm --estimators grpo,loo --quick")

register = lab_command("stdnorm", help=f"{HELP} (= gpolab train)", description=DESCRIPTION)
