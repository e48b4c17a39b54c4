"""Why the arithmetic surrogate's gradient MSE grows with policy strength (gpolab's analysis,
docs/arithmetic.md): the exact per-question MSE split into its filler and decoded parts.

The score W = ∇_θ log π(f, y|x) of a response with filler f and decoded answer y has two blocks
on disjoint weights (the filler head; the GRU decoder), so ‖W‖² = ‖W_f‖² + ‖W_c‖², and the filler,
drawn independently of the answer, has E[‖W_f‖² | Z] = E‖W_f‖² (exact, see
:func:`gpolab.envs.arithmetic.filler_score_norm`).  With A_c = E[‖W_c‖² Z] (exact, by
enumerating the successful sequences) and S2_c = E‖W_c‖² (Monte Carlo), the closed forms of
:mod:`gpolab.theory.mse` split per question as

    G · MSE_vanilla = E‖WZ‖² − ‖g_x‖²          = V E‖W_f‖²  + A_c − ‖g_x‖²
    G · MSE_oracle  = E[‖W‖²(Z − V)²] − ‖g_x‖² = σ² E‖W_f‖² + (1 − V)² A_c
                                                  + V² (S2_c − A_c) − ‖g_x‖²

(σ² = V(1 − V); the last decoded term is the failures' share, the only Monte Carlo one).
Run ``python -m gpolab.theory.arithmetic_terms`` for the table of the sweep's default policies.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from gpolab.envs import arithmetic as ar


def _one(params, key, feat, answer, samples: int):
    """(A_c, S2_c, its standard error, E‖W_f‖²) of one question; the Monte Carlo draws are those
    of :func:`gpolab.envs.arithmetic.exact` for the same key."""
    seqs = ar.correct_sequences(params, answer)
    feats = jnp.broadcast_to(feat, (seqs.shape[0], ar.FEATURES))
    probs = jnp.exp(ar._core_log_prob(params.weights, params, feats, seqs))
    a_core = probs @ ar.score_norms(params, feat, seqs, ar._core_log_prob)
    core = ar.sample(key, params, feat, samples)[:, params.filler :]
    w2 = ar.score_norms(params, feat, core, ar._core_log_prob)
    se = jnp.std(w2, ddof=1) / np.sqrt(samples)
    return a_core, jnp.mean(w2), se, ar.filler_score_norm(params, feat)


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
    ("V", "V"), ("sigma2", "σ²"), ("filler", "E‖W_f‖²"), ("core_z1", "E[‖W_c‖² ∣ Z=1]"),
    ("core_z0", "E[‖W_c‖² ∣ Z=0]"), ("gsq", "‖g_x‖²"), ("vanilla", "G·vanilla"),
    ("vanilla_filler", "= V·E‖W_f‖²"), ("vanilla_core", "+ E[‖W_c‖²Z]"), ("oracle", "G·oracle"),
    ("oracle_filler", "= σ²·E‖W_f‖²"), ("oracle_core_z1", "+ Z=1 decoded"),
    ("oracle_core_z0", "+ Z=0 decoded"),
)  # fmt: skip


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


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--questions", type=int, default=500)
    p.add_argument("--filler", type=int, default=64)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--strength", default="0.15,0.40,0.65", help="mean V of base,instruct,icl")
    p.add_argument("--filler-sharpen", type=float, default=0.0)
    p.add_argument("--truth-samples", type=int, default=256)
    p.add_argument("--instance-seed", type=int, default=0)
    a = p.parse_args(argv)
    q = ar.make_questions(a.instance_seed, a.questions)
    targets = dict(zip(ar.POLICIES, map(float, a.strength.split(",")), strict=True))
    policies = ar.pretrain(
        q, a.instance_seed, a.hidden, targets, filler=a.filler, filler_sharpen=a.filler_sharpen
    )
    key = jax.random.fold_in(jax.random.key(a.instance_seed), 1)  # the sweep's truth key
    rows = {n: split(terms(key, pol, q, a.truth_samples)) for n, pol in policies.items()}
    print(markdown(rows))


if __name__ == "__main__":
    main()
