"""The runner's own subcommands (bench, estimators, figures); each module has
``register(subparsers)``.  A lab's subcommand is :func:`gpolab.kit.command.lab_command`."""
