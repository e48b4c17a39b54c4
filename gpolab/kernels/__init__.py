"""Monte Carlo kernels: what one seed of a measurement computes, in the library.

Every kernel follows one small protocol, the one :func:`gpolab.engine.run` runs:

* a **cell**: a static, hashable frozen dataclass of the settings that set shapes and code paths
  (G, B, K, M, the estimator specs, ...); the engine's jit cache is keyed on it;
* a **per-seed function** ``per_seed(cell, key, args) -> {name: array}`` (named ``*_error``
  here): ``key`` is the seed's own key (``fold_in(key, i)``), ``args`` a pytree of traced data
  (env params, exact truth, eps, ...), so sweeping a continuous knob never recompiles; the
  engine reduces each output leaf to its sum (and scalars to their sum of squares) over seeds;
* a **summary** from the engine's moments (:class:`gpolab.engine.Moments`): e.g.
  :func:`gpolab.engine.error_stats` (MSE, variance, bias²), :mod:`gpolab.kernels.splits` (the
  same with standard errors from independent seed batches), or a module's own (a ratio's
  delta-method interval, a correlation's standard error).

Kernels import only the library (envs, estimators, theory, engine); labs add flags, units,
tables and figures around them.  One module per measurement, named as the theory it checks:

* :mod:`gpolab.kernels.grouped`: one group of G responses per prompt: the bandit's and the
  arithmetic surrogate's gradient errors of every estimator on common draws, and their loss
  aggregation;
* :mod:`gpolab.kernels.dynamic`: DAPO dynamic sampling on the bandit (verl ``filter_groups``,
  :mod:`gpolab.theory.dynamic`);
* :mod:`gpolab.kernels.shaped`: DAPO dynamic sampling under a shaped reward, verl's
  ``filter_groups.metric`` acc against score (:mod:`gpolab.envs.shaped`);
* :mod:`gpolab.kernels.tree`: K thoughts × M continuations: thought advantages, their
  correlation with the true values, the thought-policy gradient and the overlap moments
  (:mod:`gpolab.theory.tree`, :mod:`gpolab.theory.tree_overlap`).
* :mod:`gpolab.kernels.offpolicy`: the practical GRPO update (minibatch reuse, ratio rules,
  clipping, KL terms, stale rollouts) against the exact gradient at the θ where it is applied;
* :mod:`gpolab.kernels.rollout_mismatch`: a rollout engine's μ ≠ π_θ and every framework's
  mismatch correction against the exact gradient (Markov env);
* :mod:`gpolab.kernels.async_rl`: asynchronous RL, the engine's stale and mismatched rollouts
  reused over m minibatch updates, each framework's composition of π_θ, π_prox and μ
  (:mod:`gpolab.estimators.asynchronous`) against the exact gradient (Markov env);
* :mod:`gpolab.kernels.splits`: bias², variance, MSE and their standard errors from per-split
  moments (the one split-statistics helper).
"""
