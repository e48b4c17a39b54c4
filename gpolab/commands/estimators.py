"""``gpolab estimators``: the estimator registry — names, what each needs, its options, its scope,
whether exact finite-G theory covers it, and where its semantics come from."""

from __future__ import annotations

import json


def register(sub) -> None:
    p = sub.add_parser(
        "estimators",
        help="list the registered estimators (gpolab's, verl, TRL, OpenRLHF, NeMo-RL, papers)",
        description="Every name --estimators accepts: what it needs besides the rewards, its "
        "options (use NAME[option=value,...]), its scope, its smallest group and its source. "
        "Your own function: --estimators package.module:function.",
    )
    p.add_argument("names", nargs="*", help="only these (default: all)")
    p.add_argument("--json", action="store_true", help="one JSON object per estimator")
    p.set_defaults(func=run)


def rows(names=()) -> list[dict]:
    from gpolab import estimators

    entries = [estimators.resolve(n) for n in names] or [
        e for e in estimators.REGISTRY.values() if not e.user
    ]
    return [
        {
            "name": e.name,
            "needs": list(e.needs),
            "options": dict(e.options),
            "scope": e.scope
            + "".join(f"; batch when {k}={'/'.join(map(str, v))}" for k, v in e.batch_when.items()),
            "min_G": e.min_group,
            "theory": theory_kind(e),
            "source": e.source,
        }
        for e in entries
    ]


CLOSED = ("vanilla", "oracle", "loo", "mean", "ustat")  # gpolab.theory.mse's closed forms


def theory_kind(entry) -> str:
    """Which exact theory covers ``entry`` at its default options (see gpolab.theory.exact)."""
    if entry.name in CLOSED:
        return "exact: closed form"
    if entry.reward_only_for():
        return "exact: count table (theory §8)"
    if entry.needs == ("lengths",) and entry.scope == "group":
        return "exact when every response has the same length; else Monte Carlo only"
    why = f"needs {', '.join(entry.needs)}" if entry.needs else f"{entry.scope}-scoped"
    return f"Monte Carlo only ({why})"


def run(args) -> int:
    table = rows(args.names)
    if args.json:
        for row in table:
            print(json.dumps(row))
        return 0
    for row in table:
        needs = ", ".join(row["needs"]) or "-"
        opts = ", ".join(f"{k}={v!r}" for k, v in row["options"].items()) or "-"
        theory = row["theory"]
        print(f"{row['name']}\n    needs: {needs}; scope: {row['scope']}; G >= {row['min_G']}; "
              f"{theory}\n    options: {opts}\n    source: {row['source']}")  # fmt: skip
    return 0
