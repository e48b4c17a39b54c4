"""``gpolab stdnorm``: the std-normalization lab under its own name (same as ``gpolab train``)."""

from __future__ import annotations

from gpolab.commands import lab_command
from gpolab.commands.train import DESCRIPTION, HELP

register = lab_command("stdnorm", help=f"{HELP} (= gpolab train)", description=DESCRIPTION)
