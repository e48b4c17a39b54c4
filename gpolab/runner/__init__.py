"""The runner: the ``gpolab`` command line (:mod:`~gpolab.runner.cli`), built from the lab folders
and the runner's own commands (:mod:`~gpolab.runner.commands`: bench, estimators, figures).  It is
the top layer: it uses the labs and the kit (:mod:`gpolab.kit`); nothing imports it."""
