"""The claims lab (``gpolab claims``): the ledger of every claim gpolab tests, with its statistic,
its pre-stated acceptance rules and the verdict, computed from the experiments' saved tables.

The ledger is declarative (``ledger.toml`` beside this module): per claim an id, the paper
and where in it, the claim in one sentence, the experiment (``experiments/<name>.toml``) whose
saved tables test it, a statistic (a function of :data:`STATISTICS`) and its rules
(``"name op number"``; op one of ``< <= > >= ==``).  A statistic returns, for every quantity a
rule reads, its value and its standard error (``se``; 0 for an exact or count-valued quantity,
e.g. an exact-theory number, a count of settings or a test's p-value, which is the test).  A rule
whose value is within one SE of its threshold is *inconclusive*; a NaN value or SE is never a
pass (inconclusive, with the reason).  Verdict: every rule passes → ``reproduced``; some pass and
some fail → ``partly``; some fail and none pass → ``not reproduced``; none fails but some are
inconclusive → ``inconclusive``; ``testable = false`` → ``not testable here`` with its reason.
Each rule's margin (value − threshold, in SEs, positive when it holds) is in the table.  An
experiment whose tables are missing is run first (resumably; ``--quick`` at its quick sizes,
into ``<results>/<name>-quick``); saved tables are never recomputed.  ``quick = "why"`` in a
ledger entry says why the quick sizes cannot decide the claim (its quick verdict may then differ
from the full one).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import operator
import re
import time
from pathlib import Path
from typing import ClassVar

from gpolab import configs, envs, validate
from gpolab.configs import option
from gpolab.kit import experiments, output, running, timings
from gpolab.labs.claims import stats as claims_stats
from gpolab.labs.claims import (
    stats_async,
    stats_chi2,
    stats_float,
    stats_gain,
    stats_groupsize,
    stats_otb,
    stats_shaped,
    stats_sweep,
    stats_tree,
)
from gpolab.labs.claims.report import PAPERS, VERDICTS, markdown, report  # noqa: F401 (protocol)

NAME = "claims"
NEEDS = envs.Needs(only=())  # no env of its own: it runs the experiments of other labs
TABLES = ("claims", "timings")
LEDGER = Path(__file__).with_name("ledger.toml")
OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq}
RULE = re.compile(r"^\s*([A-Za-z_0-9]+)\s*(<=|>=|==|<|>)\s*([A-Za-z_0-9.+-]+)\s*$")


@dataclasses.dataclass(frozen=True)
class Config(configs.Config):
    """Where the ledger, the experiments and their saved tables are."""

    LAB: ClassVar[str] = NAME
    QUICK: ClassVar[dict] = {"sizes": "quick"}

    sizes: str = option(
        "full",
        "full or quick: which saved tables to read (quick: those of `gpolab figures "
        "--quick`); missing ones are computed at these sizes",
    )
    only: tuple[str, ...] = option(
        (), "comma list of claim ids (none given: every claim; an empty list is an error)"
    )
    ledger: str = option(str(LEDGER), "the ledger TOML", key=False)
    experiments: str = option(
        "",
        "folder of the experiment TOMLs (default: those shipped with "
        "gpolab, found from any working directory)",
        key=False,
    )
    results: str = option("results", "results root (as `gpolab figures --out`)", key=False)
    out: str = option("results/claims", "output folder (claims table, config.toml)", key=False)
    timings: bool = option(
        False,
        "where the time goes, per experiment: compile, count tables, Monte Carlo, figures, I/O "
        "and analysis (the timings table, printed after the verdicts)",
        key=False,
    )
    jobs: int = option(
        0,
        "worker processes for the experiments to compute (0: one per core; 1: this process); "
        "each experiment's numbers do not depend on it",
        key=False,
    )

    def validate(self) -> None:
        validate.choice("sizes", self.sizes, ("full", "quick"))
        validate.integer("jobs", self.jobs, 0, 256)
        claims = load(self.ledger)
        ids = [c["id"] for c in claims]
        if self.only:  # `--only ''` never gets here: the list parser refuses it
            experiments.selection("only", self.only, ids)
        folder = self.experiment_dir()
        if not folder.is_dir():
            raise validate.ConfigError(
                f"experiments: got {str(folder)!r}; allowed: a folder of experiment TOMLs"
            )
        known = {p.stem for p in folder.glob("*.toml")}
        for c in claims:
            if c["experiment"] not in known:
                raise validate.ConfigError(
                    f"{Path(self.ledger).name}: claim {c['id']}: experiment: got "
                    f"{c['experiment']!r}; allowed: one of {folder}/*.toml"
                )

    def experiment_dir(self) -> Path:
        """``--experiments``, or the experiments shipped with gpolab (any working directory)."""
        return Path(self.experiments) if self.experiments else experiments.DEFAULT_DIR


FIELDS = {
    "id": str,
    "paper": str,
    "where": str,
    "claim": str,
    "experiment": str,
    "statistic": str,
    "rules": list,
    "testable": bool,
    "reason": str,
    "quick": str,
    "quote": str,
}


def load(path) -> list[dict]:
    """The ledger's claims, each checked (fields, paper, statistic, rule syntax)."""
    data = configs.read_toml(Path(path))
    claims = data.get("claim", [])
    name = Path(path).name
    if not claims:
        raise validate.ConfigError(f"{name}: claim: no [[claim]] entries")
    for i, c in enumerate(claims):
        where = f"{name}: claim {c.get('id', i)}"
        for key, value in c.items():
            if key not in FIELDS or not isinstance(value, FIELDS[key]):
                allowed = ", ".join(f"{k} ({t.__name__})" for k, t in FIELDS.items())
                raise validate.ConfigError(f"{where}: {key}: got {value!r}; allowed: {allowed}")
        for key in ("id", "paper", "claim", "experiment", "statistic"):
            if key not in c:
                raise validate.ConfigError(f"{where}: {key}: missing")
        validate.choice(f"{where}: paper", c["paper"], PAPERS)
        validate.choice(f"{where}: statistic", c["statistic"], STATISTICS)
        for rule in c.get("rules", []):
            if not RULE.match(rule):
                raise validate.ConfigError(
                    f"{where}: rules: got {rule!r}; allowed: 'name op number', op in < <= > >= =="
                )
        if c.get("testable", True) and not c.get("rules"):
            raise validate.ConfigError(f"{where}: rules: a testable claim needs at least one")
    return claims


def cells(cfg: Config) -> int:
    return len(selected(cfg))


def selected(cfg: Config) -> list[dict]:
    """The ledger's claims that ``--only`` names (not given: every claim)."""
    return [c for c in load(cfg.ledger) if not cfg.only or c["id"] in cfg.only]


def outcome(rule: str, values: dict, se: dict) -> tuple[str, float, str]:
    """One rule on the statistic's values and SEs: (``pass`` / ``fail`` / ``inconclusive``, the
    margin value − threshold in SEs (positive when the rule holds; ±inf when exact), a note).

    Exact (SE 0): the comparison decides.  Otherwise a value within one SE of its threshold is
    inconclusive (``==`` with an SE can only fail or be inconclusive).  A missing or NaN value or
    SE is inconclusive, never a pass."""
    name, op, number = RULE.match(rule).groups()
    value = values.get(name)
    target = values.get(number) if number in values else float(number)
    s = math.hypot(se.get(name, math.nan), se.get(number, math.nan) if number in values else 0.0)
    if value is None or target is None or math.isnan(float(value)) or math.isnan(float(target)):
        return "inconclusive", math.nan, f"{name} is not measured (NaN)"
    value, target = float(value), float(target)
    if op == "==":  # exact values equal up to rounding (a float statistic never by its last bit)
        holds = abs(value - target) <= 1e-12 * max(1.0, abs(value), abs(target))
    else:
        holds = bool(OPS[op](value, target))
    if math.isnan(s):
        return "inconclusive", math.nan, f"{name} has no standard error"
    d = {
        ">": value - target,
        ">=": value - target,
        "<": target - value,
        "<=": target - value,
        "==": -abs(value - target),
    }[op]
    if s == 0:
        return ("pass" if holds else "fail"), (math.inf if holds else -math.inf), "exact"
    margin = d / s
    if abs(d) <= s or (op == "==" and holds):
        return "inconclusive", margin, "within one SE"
    return ("pass" if holds else "fail"), margin, ""


def check(rule: str, values: dict, se: dict | None = None) -> bool | None:
    """One rule: True (passes), False (fails), None (inconclusive: NaN, no SE, within one SE).
    Without ``se`` every value is taken as exact."""
    se = se if se is not None else dict.fromkeys(values, 0.0)
    state = outcome(rule, values, se)[0]
    return {"pass": True, "fail": False}.get(state)


def verdict(claim: dict, values: dict | None, se: dict | None = None) -> str:
    if values is None:
        return "not run"
    if not claim.get("testable", True):
        return "not testable here"
    results = [check(r, values, se) for r in claim["rules"]]
    if all(r is True for r in results):
        return "reproduced"
    if any(r is False for r in results):
        return "partly" if any(r is True for r in results) else "not reproduced"
    return "inconclusive"


def margin_text(rule: str, values: dict, se: dict) -> str:
    """``rule: value (margin)``: the margin in SEs, "exact" for SE 0, the reason when NaN."""
    state, margin, note = outcome(rule, values, se)
    name = RULE.match(rule).group(1)
    value = values.get(name)
    shown = f"{value:.4g}" if isinstance(value, float) else str(value)
    if note == "exact":
        how = "exact, holds" if state == "pass" else "exact, fails"
    elif math.isnan(margin):
        how = note
    else:
        how = f"{margin:+.1f} SE" + (", inconclusive" if state == "inconclusive" else "")
    return f"{rule}: {shown} ({how})"


def tables_of(cfg: Config, name: str, cache: dict) -> dict:
    """The saved tables of experiment ``name`` (computed first when missing)."""
    if name not in cache:
        exp, folder, lab = _saved_at(cfg, name)
        if not _saved(cfg, name):
            experiments.run(exp, cfg.results, quick=cfg.sizes == "quick")
        cache[name] = output.read_tables(folder, lab.TABLES)
    return cache[name]


def _saved_at(cfg: Config, name: str):
    """(experiment, its results folder at ``cfg``'s sizes, its lab) of experiment ``name``."""
    exp = experiments.load(cfg.experiment_dir() / f"{name}.toml")
    return exp, Path(exp.config(cfg.sizes == "quick", cfg.results).out), running.get(exp.lab)


def run(cfg: Config, key=None, *, store=None, progress=None) -> dict:
    """``{"claims": one row per claim}``: values, verdict and the reason in one line."""
    import pandas as pd

    cfg.validate()
    cache: dict = {}
    rows = []
    spent: dict[str, dict] = {}  # experiment → its seconds per phase (timings)
    start = time.perf_counter()
    computed = _compute_missing(cfg)  # every experiment the selected claims need, then read
    recorder = timings.Recorder().start() if cfg.timings else None
    for c in selected(cfg):
        with contextlib.nullcontext({}) if recorder is None else recorder.part() as part:
            # a claim whose statistic reads nothing: its experiment is neither run nor read
            reads = c["statistic"] != "not_measured"
            values, se, detail = measure(cfg, c, cache) if reads else ({}, {}, "")
        if recorder is not None:
            ran = c["experiment"] in computed
            if c["experiment"] not in spent and ran:
                part = {k: part.get(k, 0.0) + computed[c["experiment"]][2][k] for k in part}
            _add(spent, c, part, ran)
        rows.append(_row(cfg, c, values, se, detail))
        if progress is not None:
            progress.update(1, f"{c['id']}: {rows[-1]['verdict']}")
    if recorder is not None:
        recorder.stop()
    wall = time.perf_counter() - start
    jobs = experiments.workers(cfg.jobs, len(computed)) if computed else 1
    return {"claims": pd.DataFrame(rows), "timings": _timings_table(spent, wall, jobs)}


def _row(cfg: Config, c: dict, values: dict | None, se: dict, detail: str) -> dict:
    """The claims table's row of claim ``c``: its ledger fields, values, margins and verdict, and
    the reason in one line (the statistic's detail, the rules that fail or are inconclusive)."""
    import json

    v = verdict(c, values, se)
    rules = c.get("rules", [])
    failed = [r for r in rules if values and check(r, values, se) is False]
    unsure = [r for r in rules if values and check(r, values, se) is None]
    reason = detail + (f"; fails: {', '.join(failed)}" if failed else "")
    reason += f"; inconclusive: {', '.join(unsure)}" if unsure else ""
    if v == "not testable here":
        reason = c.get("reason", "") + (f" (measured: {detail})" if detail else "")
    return {
        "id": c["id"],
        "paper": PAPERS[c["paper"]],
        "where": c.get("where", ""),
        "claim": c["claim"],
        "quote": c.get("quote", ""),
        "experiment": c["experiment"],
        "statistic": c["statistic"],
        "rules": "; ".join(rules),
        "values": json.dumps(values, default=float),
        "se": json.dumps(se, default=float),
        "margins": "; ".join(margin_text(r, values, se) for r in rules) if values else "",
        "verdict": v,
        "reason": reason,
        "quick": c.get("quick", ""),
        "sizes": cfg.sizes,
    }


def _compute_missing(cfg: Config) -> dict:
    """Compute every experiment the selected claims read whose tables are not saved (in
    ``cfg.jobs`` worker processes): :func:`gpolab.kit.experiments.run_all`'s results."""
    names = dict.fromkeys(
        c["experiment"] for c in selected(cfg) if c["statistic"] != "not_measured"
    )
    missing = [_saved_at(cfg, n)[0] for n in names if not _saved(cfg, n)]
    if not missing:
        return {}
    return experiments.run_all(
        missing, cfg.results, quick=cfg.sizes == "quick", jobs=cfg.jobs, timed=cfg.timings
    )


def _saved(cfg: Config, name: str) -> bool:
    """Whether experiment ``name``'s tables are saved at ``cfg``'s sizes (read, not run)."""
    _, folder, lab = _saved_at(cfg, name)
    return all((folder / f"{t}.parquet").exists() for t in lab.TABLES)


def _add(spent: dict, claim: dict, part: dict, ran: bool) -> None:
    row = spent.setdefault(
        claim["experiment"], {"experiment": claim["experiment"], "ran": ran, "claims": []}
    )
    row["ran"] = row["ran"] or ran
    row["claims"].append(claim["id"])
    for k, v in part.items():
        row[k] = row.get(k, 0.0) + v


def _timings_table(spent: dict, wall: float = math.nan, jobs: int = 1):
    """One row per experiment (``ran``: computed here, else read from saved tables), its seconds
    and each phase's (:data:`gpolab.kit.timings.PHASES`), slowest first, a total row (their
    sums: with ``jobs`` > 1 worker processes, more than the wall time) and the run's ``wall``
    seconds."""
    import pandas as pd

    if not spent:
        return pd.DataFrame()
    cols = ["seconds", *timings.PHASES]
    df = pd.DataFrame([{**r, "claims": ",".join(r["claims"])} for r in spent.values()]).rename(
        columns={p: f"{p.replace(' ', '_').replace('/', '')}_s" for p in cols}
    )
    df = df.sort_values("seconds_s", ascending=False, ignore_index=True)
    total = {"experiment": "total", "ran": bool(df["ran"].any()), "claims": ""}
    total |= {c: float(df[c].sum()) for c in df.columns if c.endswith("_s")}
    whole = {"experiment": f"wall ({jobs} worker process{'es' * (jobs > 1)})"}
    whole |= {"ran": total["ran"], "claims": "", "seconds_s": wall}
    return pd.concat([df, pd.DataFrame([total, whole])], ignore_index=True)


def measure(cfg: Config, claim: dict, cache: dict) -> tuple[dict | None, dict, str]:
    """The claim's statistic on its experiment's saved tables: (values, SEs, detail); (None, {},
    why) when the tables lack what it reads (e.g. saved by an older gpolab: rerun it)."""
    tables = tables_of(cfg, claim["experiment"], cache)
    try:
        values = STATISTICS[claim["statistic"]](tables)
    except (KeyError, IndexError, ValueError, TypeError) as e:
        return (
            None,
            {},
            (
                f"the saved tables of {claim['experiment']} lack what this statistic "
                f"reads ({type(e).__name__}: {e}); rerun `gpolab figures --only "
                f"{claim['experiment']}`"
            ),
        )
    detail, se = values.pop("detail", ""), values.pop("se", {})
    return values, se, detail


def figures(tables: dict) -> dict:
    return {}


FAMILIES = (
    stats_sweep,
    stats_tree,
    stats_gain,
    stats_chi2,
    stats_groupsize,
    claims_stats,
    stats_async,
    stats_float,
    stats_otb,
    stats_shaped,
)
STATISTICS = {f.__name__: f for family in FAMILIES for f in family.STATISTICS}
