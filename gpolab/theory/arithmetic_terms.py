"""Why the arithmetic surrogate's gradient MSE grows with policy strength (gpolab's analysis,
docs/arithmetic.md): the exact per-question MSE split into its filler and decoded parts.

The score W = ∇_θ log π(f, y|x) of a response with filler f and decoded answer y has two blocks
on disjoint weights (the filler head; the GRU decoder), so ‖W‖² = ‖W_f‖² + ‖W_c‖², and the filler,
drawn independently of the answer, has E[‖W_f‖² | Z] = E‖W_f‖² (exact, see
:func:`gpolab.envs.arithmetic_model.filler_score_norm`).  With A_c = E[‖W_c‖² Z] (exact, by
enumerating the successful sequences) and S2_c = E‖W_c‖² (Monte Carlo), the closed forms of
:mod:`gpolab.theory.mse` split per question as

    G · MSE_vanilla = E‖WZ‖² − ‖g_x‖²          = V E‖W_f‖²  + A_c − ‖g_x‖²
    G · MSE_oracle  = E[‖W‖²(Z − V)²] − ‖g_x‖² = σ² E‖W_f‖² + (1 − V)² A_c
                                                  + V² (S2_c − A_c) − ‖g_x‖²

(σ² = V(1 − V); the last decoded term is the failures' share, the only Monte Carlo one).
Run ``python -m gpolab.theory.arithmetic_terms`` for the table of the sweep's default policies.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from gpolab.envs import arithmetic as ar
from gpolab.envs import arithmetic_model as am


def _one(params, key, feat, answer, samples: int):
    """(A_c, S2_c, its standard error, E‖W_f‖²) of one question; the Monte Carlo draws are those
    of :func:`gpolab.envs.arithmetic.exact` for the same key."""
    seqs = ar.correct_sequences(params, answer)
    feats = jnp.broadcast_to(feat, (seqs.shape[0], ar.FEATURES))
    probs = jnp.exp(am.core_log_prob(params.weights, params, feats, seqs))
    a_core = probs @ ar.score_norms(params, feat, seqs, am.core_log_prob)
    core = ar.sample(key, params, feat, samples)[:, params.filler :]
    w2 = ar.score_norms(params, feat, core, am.core_log_prob)
    se = jnp.std(w2, ddof=1) / np.sqrt(samples)
    return a_core, jnp.mean(w2), se, am.filler_score_norm(params, feat)


def terms(key, params, questions, samples: int = 256) -> dict[str, np.ndarray]:
    """Per-question arrays (n,): V, sigma2, gsq = ‖g_x‖², filler = E‖W_f‖², a_core = E[‖W_c‖²Z],
    s2_core = E‖W_c‖² (Monte Carlo) and s2_core_se; question i draws with fold_in(key, i), as in
    :func:`gpolab.envs.arithmetic.exact`, so the sums reproduce its truth."""
    V = ar.success_prob(params, questions)
    gsq = jnp.sum(ar.exact_gradients(params, questions) ** 2, axis=-1)
    n = questions.features.shape[0]
    keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, jnp.arange(n))
    one = jax.jit(lambda k, f, a: _one(params, k, f, a, samples))
    a_core, s2_core, se, filler = jax.lax.map(
        lambda a: one(*a), (keys, questions.features, questions.answers)
    )
    out = dict(V=V, gsq=gsq, filler=filler, a_core=a_core, s2_core=s2_core, s2_core_se=se)
    out = {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}
    out["sigma2"] = out["V"] * (1 - out["V"])
    return out


def split(t: dict) -> dict[str, float]:
    """Question-averaged terms (uniform questions) and the two MSE splits (× G); ``*_se`` is the
    Monte Carlo standard error of a term (0 for the exact ones)."""
    n = t["V"].shape[0]
    mean = lambda x: float(np.mean(x))  # noqa: E731
    fail_se = float(np.sqrt(np.sum(t["s2_core_se"] ** 2)) / n)
    fail = t["s2_core"] - t["a_core"]
    out = {
        "V": mean(t["V"]),
        "sigma2": mean(t["sigma2"]),
        "filler": mean(t["filler"]),
        "core_z1": float(np.sum(t["a_core"]) / np.sum(t["V"])),
        "core_z0": float(np.sum(fail) / np.sum(1 - t["V"])),
        "core_z0_se": fail_se * n / float(np.sum(1 - t["V"])),
        "gsq": mean(t["gsq"]),
        "vanilla_filler": mean(t["V"] * t["filler"]),
        "vanilla_core": mean(t["a_core"]),
        "oracle_filler": mean(t["sigma2"] * t["filler"]),
        "oracle_core_z1": mean((1 - t["V"]) ** 2 * t["a_core"]),
        "oracle_core_z0": mean(t["V"] ** 2 * fail),
        "oracle_core_z0_se": float(np.sqrt(np.sum((t["V"] ** 2 * t["s2_core_se"]) ** 2)) / n),
    }
    out["vanilla"] = out["vanilla_filler"] + out["vanilla_core"] - out["gsq"]
    out["oracle"] = (
        out["oracle_filler"] + out["oracle_core_z1"] + out["oracle_core_z0"] - out["gsq"]
    )
    return out


COLUMNS = (
    ("V", "V"),
    ("sigma2", "σ²"),
    ("filler", "E‖W_f‖²"),
    ("core_z1", "E[‖W_c‖² ∣ Z=1]"),
    ("core_z0", "E[‖W_c‖² ∣ Z=0]"),
    ("gsq", "‖g_x‖²"),
    ("vanilla", "G·vanilla"),
    ("vanilla_filler", "= V·E‖W_f‖²"),
    ("vanilla_core", "+ E[‖W_c‖²Z]"),
    ("oracle", "G·oracle"),
    ("oracle_filler", "= σ²·E‖W_f‖²"),
    ("oracle_core_z1", "+ Z=1 decoded"),
    ("oracle_core_z0", "+ Z=0 decoded"),
)


def markdown(rows: dict[str, dict]) -> str:
    """One markdown row per policy (± the Monte Carlo standard error where a term has one)."""

    def cell(r, k):
        se = r.get(f"{k}_se")
        return f"{r[k]:.3g}" + (f" ± {se:.2g}" if se else "")

    head = "| policy | " + " | ".join(h for _, h in COLUMNS) + " |"
    sep = "|---" * (len(COLUMNS) + 1) + "|"
    body = [
        f"| {p} | " + " | ".join(cell(r, k) for k, _ in COLUMNS) + " |" for p, r in rows.items()
    ]  # noqa: E501
    return "\n".join([head, sep, *body])


def table(inst: ar.Instance) -> str:
    """The markdown table of :func:`split` for every policy of the instance ``inst`` (the
    sweep's truth key and Monte Carlo draws: ``inst.truth_samples``)."""
    rows = {}
    for name, pol in ar.make(inst).items():
        rows[name] = split(terms(pol.truth_key, pol.policy, pol.questions, pol.truth_samples))
    return markdown(rows)


def main(argv=None) -> None:
    """``python -m gpolab.theory.arithmetic_terms [--questions N --strength a,b,c ...]``: the
    flags are the arithmetic instance's own (:class:`gpolab.envs.arithmetic.Instance`, the same
    as ``gpolab sweep --env arithmetic``'s), read by the one flag mechanism."""
    import argparse

    from gpolab import configs

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    configs.add_flags(p, ar.Instance)
    try:
        inst = configs.replace(ar.Instance(), **configs.typed(p.parse_args(argv), ar.Instance))
        inst.validate()
    except configs.ConfigError as err:  # one line, as every gpolab command
        p.exit(2, f"arithmetic_terms: error: {err}\n")
    print(table(inst))


if __name__ == "__main__":
    main()
