"""The claims lab's text: the report it prints, the ledger as a markdown table (the ledger page's
claims block, docs/claims.md) and the README's compact summary (its ``claims-summary`` block).
The blocks themselves are read and written by the repository's docs tool (tools/readme.py,
``python -m tools.readme``), never by the lab: ``gpolab claims`` reports verdicts.
"""

from __future__ import annotations

PAPERS = {
    "U": "arXiv 2603.01162",
    "T": "arXiv 2509.24494",
    "N": "arXiv 2601.23135",
    "I": "arXiv 2603.12151",
    "W": "arXiv 2510.00977",
    "LL": "Liu & Li's blog (2025)",
    "FK": "Fang & Khazi's blog (2025)",
    "AS": "arXiv 2607.01083",
    "Q": "arXiv 2512.01374",
    "CT": "arXiv 2605.07331",
    "VX": "arXiv 2605.14220",
    "IP": "arXiv 2510.18855",
    "KP": "the KPop blog (2026)",
    "VC": "arXiv 2602.17616",
    "NM": "NeMo-RL PR#4161 and PR#4158 (2026)",
    "VP": "verl PR#6348 (2026)",
    "OT": "arXiv 2602.07078",
    "VR": "verl-recipe PR #125 (2026)",
    "gpolab": "gpolab's derivation",
}
VERDICTS = (
    "reproduced",
    "partly",
    "not reproduced",
    "inconclusive",
    "not testable here",
    "not run",
)


def report(cfg, tables: dict) -> str:
    """One claim per entry: id, verdict, the claim, the reason and each rule's margin."""
    lines = []
    for r in tables["claims"].to_dict("records"):
        lines.append(
            f"{r['id']:<13} {r['verdict']:<17} {r['claim']}\n{'':<31}{r['reason']}"
            + (f"\n{'':<31}rules: {r['margins']}" if r.get("margins") else "")
        )
    spent = tables.get("timings")
    if spent is not None and not spent.empty:
        from gpolab.kit.tables import table_text

        lines += ["", "Where the time went (seconds; --timings):", table_text(spent, list(spent))]
    return "\n".join(lines)


def _cell(text) -> str:
    """A markdown table cell's text: a literal | would end the cell."""
    return str(text).replace("|", "\\|")


def _claim(r: dict) -> str:
    """The claim, then the paper's own sentence where the claim is the paper's (a quotation from
    docs/papers.md, which gives its location)."""
    quote = r.get("quote") or ""
    return f"{r['claim']} *Paper:* “{quote}”" if quote else r["claim"]


def _sizes_note(records: list, then: str) -> str:
    """The italic line over a claims table: the sizes of the verdicts (the command that gives
    them), then ``then``."""
    sizes = {r.get("sizes", "full") for r in records}
    quick = " --quick" if sizes == {"quick"} else ""
    return (
        f"*Verdicts at the experiments' {' and '.join(sorted(sizes))} sizes "
        f"(`gpolab claims{quick}`); {then}.*\n\n"
    )


def markdown(tables: dict) -> str:
    """The claims ledger as a markdown table (generated, never typed): every claim, where it is
    made, its verdict, the statistic's detail and each rule's value and margin in SE."""
    head = (
        "| id | paper, where | claim | verdict | statistic (experiment) | rules: value "
        "(margin in SE) |\n|---|---|---|---|---|---|"
    )

    records = tables["claims"].to_dict("records")
    note = _sizes_note(
        records,
        "margin = (value − threshold)/SE, positive when the rule holds; within one SE: "
        "inconclusive",
    )
    rows = [
        f"| {_cell(r['id'])} | {_cell(r['paper'])}, {_cell(r['where'])} | {_cell(_claim(r))} | "
        f"**{r['verdict']}** | {_cell(r['reason'])} (`{r['experiment']}`) | "
        f"{_cell(r.get('margins', '')) or '—'} |"
        for r in records
    ]
    return note + "\n".join([head, *rows])


UNTESTABLE = "not testable here"


def summary(tables: dict) -> str:
    """The README's claims summary: each testable claim and its verdict, then the ids of those
    not testable here (the ledger, :func:`markdown`, adds where each is made, the statistic,
    every rule's margin and each untestable claim's reason)."""
    records = tables["claims"].to_dict("records")
    papers = ", ".join(f"{k} {v.removeprefix('arXiv ')}" for k, v in PAPERS.items())
    note = _sizes_note(records, f"ids by source (arXiv ids bare): {papers}")
    untestable = [r["id"] for r in records if r["verdict"] == UNTESTABLE]
    rows = [
        f"| {_cell(r['id'])} | {_cell(headline(r['claim']))} | **{r['verdict']}** |"
        for r in records
        if r["verdict"] != UNTESTABLE
    ]
    table = "\n".join(["| id | claim | verdict |", "|---|---|---|", *rows])
    if untestable:  # their reasons are the ledger's; the summary names them
        table += f"\n\n*{UNTESTABLE.capitalize()}, each with its reason on the ledger: "
        table += ", ".join(untestable) + ".*"
    return note + table


HEADLINE = 76  # characters of a claim the README's summary shows (the ledger page has it whole)


def headline(claim: str) -> str:
    """A claim's first clause for the README's summary: up to its first ". " or ": " outside
    parentheses, at most
    :data:`HEADLINE` characters (cut at a word, "…")."""
    depth, end = 0, len(claim)
    for i, ch in enumerate(claim):  # the first ". " or ": " outside parentheses
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and claim[i : i + 2] in (". ", ": "):
            end = i
            break
    if end == len(claim) and len(claim) <= HEADLINE:
        return claim  # one short clause: as written
    text = claim[:end].rstrip(".")
    if len(text) > HEADLINE:
        text = text[:HEADLINE].rsplit(" ", 1)[0] + " …"
    return text + ("." if not text.endswith("…") else "")
