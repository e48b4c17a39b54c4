"""``gpolab estimators``: the estimator registry — names, what each needs, its options, its scope,
whether exact finite-G theory covers it, whether ``gpolab train`` and ``gpolab chi2`` take it (or
why not), and where its semantics come from.  Every answer is a query of the registry entry."""

from __future__ import annotations

import json

# shown at the end of --help; tests/runner/test_help_examples.py parses and resolves each
EXAMPLES = ("gpolab estimators", "gpolab estimators --json")


def register(sub) -> None:
    p = sub.add_parser(
        "estimators",
        help="list the registered estimators (gpolab's, verl, TRL, OpenRLHF, NeMo-RL, papers)",
        description="Every name --estimators accepts: what it needs besides the rewards, its "
        "options (use NAME[option=value,...]), its scope, its smallest group and its source. "
        "Your own function: --estimators package.module:function.  Also the ratio rules "
        "(ratio/NAME) and KL estimators (kl/NAME) of gpolab offpolicy.",
    )
    p.add_argument("names", nargs="*", help="only these (default: all)")
    p.add_argument("--json", action="store_true", help="one JSON object per estimator")
    p.set_defaults(func=run)


def rows(names=()) -> list[dict]:
    from gpolab import estimators  # deferred: jax (``gpolab --help`` stays instant)

    entries = [estimators.resolve(n) for n in names] or list(estimators.REGISTRY.values())
    return [
        {
            "kind": "advantage",
            "name": e.name,
            "needs": list(e.needs),
            "options": dict(e.options),
            "scope": e.scope
            + "".join(f"; batch when {k}={'/'.join(map(str, v))}" for k, v in e.batch_when.items()),
            "min_G": e.min_group,
            "theory": theory_kind(e),
            "train": train_kind(e.name),
            "chi2": chi2_kind(e.name),
            "source": e.source,
        }
        for e in entries
    ]


def theory_kind(entry) -> str:
    """Which exact theory covers ``entry`` at its default options (see gpolab.theory.exact)."""
    from gpolab.theory import mse  # deferred: jax, as in rows

    if mse.closed_form(entry.name):
        return "exact: closed form"
    if entry.reward_only_for():
        return "exact: count table (theory §8)"
    if entry.needs == ("lengths",) and entry.scope == "group":
        return "exact when every response has the same length; else Monte Carlo only"
    why = f"needs {', '.join(entry.needs)}" if entry.needs else f"{entry.scope}-scoped"
    return f"Monte Carlo only ({why})"


def train_kind(name: str) -> str:
    """Whether ``gpolab train`` runs the estimator (finite G, G = inf), or why not."""
    from gpolab.engine import train  # deferred: jax, as in rows

    finite, exact = train.why_not(name), train.why_not(name, train.EXACT)
    if finite:
        return f"no: {finite}"
    return "finite G and G = inf" if not exact else f"finite G only ({exact.split(' (')[0]})"


def chi2_kind(name: str) -> str:
    """Whether ``gpolab chi2`` has a limit law for the estimator (and how), or why not."""
    from gpolab.theory import chi2  # deferred: jax and scipy, as in rows

    reason = chi2.why_not(name)
    if reason:
        return f"no: {reason}"
    return "closed-form law" if chi2.closed_form(name) else "Monte Carlo law"


def offpolicy_rows(names=()) -> list[dict]:
    """The off-policy lab's ratio rules and KL estimators (``gpolab offpolicy --ratio/--kl``):
    kind, name, the clip modes a ratio takes, what it is and its source."""
    from gpolab.estimators import offpolicy  # deferred: jax, as in rows

    out = []
    for kind, reg in (("ratio", offpolicy.RATIOS), ("kl", offpolicy.KLS)):
        for name, rule in reg.items():
            if names and f"{kind}/{name}" not in names:
                continue
            row = {"kind": kind, "name": f"{kind}/{name}", "doc": rule.doc, "source": rule.source}
            if kind == "ratio":
                row["clips"] = list(rule.clips)
            out.append(row)
    return out


def run(args) -> int:
    extra = [n for n in args.names if n.startswith(("ratio/", "kl/"))]
    names = [n for n in args.names if n not in extra]
    if extra:
        from gpolab import validate

        known = [r["name"] for r in offpolicy_rows()]
        for n in extra:
            validate.choice("estimator", n, known)
    table = rows(names) if names or not extra else []
    off = offpolicy_rows(extra) if extra or not names else []
    if args.json:
        for row in table:
            print(json.dumps(row))
        for row in off:
            print(json.dumps(row))
        return 0
    for row in off:
        clips = f" (clip: {', '.join(row['clips'])})" if "clips" in row else ""
        print(
            f"{row['name']}{clips}\n    {row['doc']}"
            + (f"\n    source: {row['source']}" if row["source"] else "")
        )
    if off and table:
        print()
    for row in table:
        needs = ", ".join(row["needs"]) or "-"
        opts = ", ".join(f"{k}={v!r}" for k, v in row["options"].items()) or "-"
        theory = row["theory"]
        print(
            f"{row['name']}\n    needs: {needs}; scope: {row['scope']}; G >= {row['min_G']}; "
            f"{theory}\n    train: {row['train']}; chi2: {row['chi2']}\n    options: {opts}"
            f"\n    source: {row['source']}"
        )
    return 0
