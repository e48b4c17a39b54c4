"""Logging hooks for training frameworks: what ``gpolab plan`` needs, written during a real run
(:mod:`gpolab.integrations.trl` for TRL's ``GRPOTrainer``; :mod:`gpolab.integrations.verl` for a
verl reward manager or trainer hook).  Both write the same files under ``<output_dir>/gpolab/``
(:mod:`gpolab.integrations.files`).  The frameworks' own rollout logs (TRL's completions parquet,
verl's rollout jsonl) are read and written by :mod:`gpolab.integrations.rollouts`."""
