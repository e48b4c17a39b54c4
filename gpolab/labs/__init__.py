"""Labs: one folder per lab, one shape for all of them.

``gpolab/labs/<lab>/`` holds everything the lab owns.  Its ``__init__.py`` is the command (argparse
only, no JAX: ``register`` from :func:`gpolab.kit.command.lab_command`, ``EXAMPLES``), found by
listing this package, so a new lab is one folder (plus its docs page and experiment file).  Its
``lab.py`` has

* ``NAME`` and ``Config``: a frozen dataclass of :func:`gpolab.configs.option` fields on the
  base :class:`gpolab.configs.Config` (``replace``), the single source of defaults, with
  ``QUICK`` (the sizes ``--quick`` uses) and a plain-Python ``validate()`` that names the field
  and what is allowed;
* ``TABLES``: the names of the tables ``run`` returns (the first is the main one);
* ``cells(cfg) -> int`` (progress) and ``run(cfg, key, *, store=None, progress=None)`` returning
  ``{name: DataFrame}`` tidy tables, one row per cell and every setting that produced it a column
  (resumable per cell through ``store``); the lab's analysis lives in the lab;
* ``figures(tables) -> {file name: draw}`` with ``draw(tables, path)`` from
:mod:`gpolab.kit.plots`,
  which reads saved tables only;
* ``report(cfg, tables) -> str`` (the table the CLI prints), optionally ``notes(cfg, tables)``
  (recommendations, summaries; on stderr with ``--json``) and ``JSON`` (the main table's
  columns ``--json`` prints).

and ``plots.py`` draws its figures; helpers private to the lab sit beside them.  The runner
(:mod:`gpolab.kit.running`) runs any lab the same way.
"""
