"""The runner: the ``gpolab`` command line (:mod:`~gpolab.runner.cli`), built from the lab folders
and :mod:`~gpolab.runner.commands`; running any lab into its output folder
(:mod:`~gpolab.runner.labs`), resumable cells (:mod:`~gpolab.runner.store`), output folders
(:mod:`~gpolab.runner.output`), declarative experiments (:mod:`~gpolab.runner.experiments`) and
the one matplotlib setup (:mod:`~gpolab.runner.plots`).  The library never imports it."""
