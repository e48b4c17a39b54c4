"""``gpolab plancheck``: rollout logs simulated with their truth
(:mod:`gpolab.labs.plancheck.simulate`), written as TRL, verl and table logs, read back by
``gpolab plan``, and what it recovers compared with the truth (validation of ``gpolab plan``,
issue 18; theory §3, §10)."""

from __future__ import annotations

import dataclasses
import functools
import typing

import numpy as np

from gpolab import configs, envs, estimators, validate
from gpolab.configs import borrow, option
from gpolab.envs import bandit
from gpolab.kit.store import cell_key, resumed
from gpolab.labs.plancheck.simulate import (
    Simulated,
    check_sizes,
    simulate_arithmetic,
    simulate_bandit,
)
from gpolab.theory import groupsize

NAME = "plancheck"
TABLES = ("results",)
# the envs whose truth carries the loo MSE law, named (the lab simulates each one's logs with
# its own functions), bandit first (the stored runs' order: flags, tables, cell keys)
NEEDS = envs.Needs(("mse_law",), only=("bandit", "arithmetic"))
ENVS = envs.names(NEEDS)
FORMATS = ("trl", "verl", "table")
REPORT_G = (2, 4, 8, 16, 32, 64, 128, 256)
PROXY = "score_norm"  # the proxy's column name in every written log (a TRL/verl extra column)
REWARD = "correctness"  # the TRL reward function's name


@dataclasses.dataclass(frozen=True)
class Config(configs.Config):
    """Logs simulated from the surrogates, written as TRL and verl write them and as a table,
    read back by ``gpolab plan``; what it recovers against the truth they were drawn from."""

    LAB: typing.ClassVar[str] = NAME
    QUICK: typing.ClassVar[dict] = {
        "steps": 15,
        "norm_steps": 60,
        "arithmetic_steps": 8,
        "arithmetic_norm_steps": 40,
        "draws": 500,
    }

    env: tuple[str, ...] = option(ENVS, "comma list of " + ", ".join(ENVS))
    formats: tuple[str, ...] = option(FORMATS, "log formats written and read: trl, verl, table")
    G: int = option(8, "the simulated run's group size")
    steps: int = option(50, "bandit: logged steps")
    B: int = option(32, "bandit: prompts per step")
    prompts: int = borrow(bandit.Instance, "prompts", default=512, prefix="bandit: ")
    norm_batches: tuple[int, ...] = option((8, 64), "bandit: batch sizes of the gradient norms")
    norm_steps: int = option(200, "bandit: gradient-norm steps per batch size")
    arithmetic_steps: int = option(20, "arithmetic: logged steps")
    arithmetic_B: int = option(16, "arithmetic: questions per step")
    arithmetic_norm_batches: tuple[int, ...] = option((4, 32), "arithmetic: norm batch sizes")
    arithmetic_norm_steps: int = option(100, "arithmetic: gradient-norm steps per batch size")
    estimator: str = option(
        "trl/grpo",
        "the trainer's estimator plan is told (--trainer-estimator): its G* against the exact one",
    )
    draws: int = option(4000, "plan's parametric draws for the intervals")
    seed: int = option(0, "seed of the instances, the logs and the intervals")
    out: str = option("results/plancheck", "output folder (logs/, tables, figure)", key=False)

    def validate(self) -> None:
        for env in self.env:
            validate.choice("env", env, ENVS)
        for fmt in self.formats:
            validate.choice("formats", fmt, FORMATS)
        if not self.env or not self.formats:
            raise validate.ConfigError("env/formats: got an empty list; allowed: one or more")
        check_sizes(**sizes(self, "bandit"), seed=self.seed)
        check_sizes(**sizes(self, "arithmetic"), seed=self.seed, prompts=500, field="questions")
        validate.integer("draws", self.draws, 10)
        estimators.check_reward_only("estimator", self.estimator, "plan reads their count tables")


def cells(cfg: Config) -> int:
    return len(cfg.env) * len(cfg.formats)


def sizes(cfg: Config, env: str) -> dict:
    """The simulation sizes of ``env`` (the bandit's settings, or the ``arithmetic_`` ones)."""
    pre = "" if env == "bandit" else "arithmetic_"
    names = ("steps", "B", "norm_batches", "norm_steps")
    out = {n: getattr(cfg, pre + n) for n in names} | {"G": cfg.G}
    return out | ({"prompts": cfg.prompts} if env == "bandit" else {})


def simulate(cfg: Config, env: str) -> Simulated:
    run = simulate_bandit if env == "bandit" else simulate_arithmetic
    return run(**sizes(cfg, env), seed=cfg.seed)


def write_logs(sim: Simulated, folder, formats) -> dict:
    """{format: path} of the log written as that framework writes it, plus ``norms.csv``."""
    from pathlib import Path

    from gpolab.integrations import rollouts

    folder = Path(folder)
    f = sim.frame.rename(columns={"proxy": PROXY})
    paths = {}
    if "trl" in formats:
        trl = f.rename(columns={"reward": REWARD}).assign(advantage=0.0)
        rollouts.write_trl(folder / "trl", trl, reward_columns=(REWARD,), extra_columns=(PROXY,))
        paths["trl"] = folder / "trl"
    if "verl" in formats:
        verl = f.rename(columns={"completion": "output", "reward": "score"})
        verl = verl.assign(gts=verl["prompt_id"].astype(str))
        rollouts.write_verl(folder / "verl", verl, extra_columns=(PROXY,))
        paths["verl"] = folder / "verl"
    if "table" in formats:
        paths["table"] = rollouts.write_table(
            folder / "table.csv", f[["step", "prompt", "reward", "length", PROXY]]
        )
    norms = folder / "norms.csv"
    sim.norms.to_csv(norms, index=False)
    paths["norms"] = norms
    return paths


def cell_keys(cfg: Config) -> list[str]:
    """One store key per (env, log format): the settings every cell reads, its env and format."""
    settings = {k: v for k, v in configs.key_settings(cfg).items() if k not in ("env", "formats")}
    return [
        cell_key(NAME, settings=settings, env=env, format=fmt)
        for env in cfg.env
        for fmt in cfg.formats
    ]


def run(cfg: Config, key=None, *, store=None, progress=None) -> dict:
    """``{results}``: per env, format and quantity the truth, what ``plan`` recovered and its
    interval.  One unit per env (its logs are simulated once and read in every format), resumed
    from ``store`` per (env, format)."""
    cfg.validate()
    cells = [(env, fmt) for env in cfg.env for fmt in cfg.formats]

    def group(indices):
        by_env = {}
        for i in indices:
            by_env.setdefault(cells[i][0], []).append(i)
        return list(by_env.values())

    def compute(unit):
        env = cells[unit[0]][0]
        sim = simulate(cfg, env)
        paths = write_logs(sim, f"{cfg.out}/logs/{env}", cfg.formats)
        return [recovered(cfg, sim, paths, env, cells[i][1]) for i in unit]

    df = resumed(
        cfg,
        store,
        cell_keys(cfg),
        compute,
        group=group,
        progress=progress,
        label=lambda rows: f"{rows[0]['env']} {rows[0]['format']}",
    )
    return {"results": df}


def recovered(cfg: Config, sim, paths: dict, env: str, fmt: str) -> list[dict]:
    """The rows of one (env, format): ``plan`` run on the log written in that format."""
    from gpolab.labs.plan import lab as plan

    pcfg = plan.Config(
        log=str(paths[fmt]),
        format=fmt,
        proxy_column=PROXY,
        grad_norms=str(paths["norms"]),
        trainer_estimator=cfg.estimator,
        G=REPORT_G,
        draws=cfg.draws,
        seed=cfg.seed,
        out=f"{cfg.out}/plan-{env}-{fmt}",
    )
    return compare(sim.truth, plan.run(pcfg), cfg, env=env, format=fmt)


def _row(quantity, truth, recovered, lo=np.nan, hi=np.nan, G=np.nan, **ids) -> dict:
    covered = bool(lo <= truth <= hi) if np.isfinite(lo) and np.isfinite(hi) else None
    return {
        **ids,
        "quantity": quantity,
        "G": G,
        "truth": float(truth),
        "recovered": np.nan if recovered is None else float(recovered),
        "lo": lo,
        "hi": hi,
        "covered": covered,
    }


def compare(truth: dict, tables: dict, cfg: Config, **ids) -> list[dict]:
    """Truth against plan's answers: mean difficulty, the degenerate curve at REPORT_G (one fit:
    its intervals are correlated, not independent checks), the logged fraction, c1, C3, G*."""
    from gpolab.labs.plan import lab as plan

    row = functools.partial(_row, **ids)
    p = plan.pooled(tables)
    rows = [row("mean difficulty", truth["mean_V"], p["mean_p"], p["mean_p_lo"], p["mean_p_hi"])]
    curve = tables["curve"]
    curve = curve[curve["window"] == plan.POOLED].set_index("G")
    for G in REPORT_G:
        c = curve.loc[G]
        truth_G = truth["degenerate"][G]
        rows.append(row("degenerate fraction", truth_G, c["predicted"], c["lo"], c["hi"], G=G))
    m, half = p["logged_measured"], 1.96 * p["logged_measured_se"]
    truth_G = truth["degenerate"][p["G"]]
    rows.append(row("logged degenerate fraction", truth_G, m, m - half, m + half, G=p["G"]))
    rows += [row(name, truth[name], p.get(f"gstar_{name}")) for name in ("c1", "C3")]
    lo, hi = _num(p.get("gstar_lo")), _num(p.get("gstar_hi"))
    rows.append(row("G*", truth["gstar"], p.get("gstar"), lo, hi))
    return rows + safe_rows(truth, p, **ids) + estimator_rows(truth, p, cfg.estimator, **ids)


def safe_rows(truth: dict, p: dict, **ids) -> list[dict]:
    """plan's safe G for loo (:func:`gpolab.theory.gstar.safe_g`): that G against the exact best
    of the sizes it chooses among (the truth's c1, C2, C3 at the log's responses per step), and
    the exact noise excess at it over the best against the bound plan states (covered when
    within it)."""
    from gpolab.theory import gstar

    G, bound = p.get("safe_G"), p.get("safe_regret")
    grid = gstar.settable(p["budget"])  # the sizes plan chooses among
    c = groupsize.Constants(truth["c1"], truth["C2"], truth["C3"])
    noise = groupsize.fixed_n_mse(c, 1, np.asarray(grid, np.float64))
    best = grid[int(np.argmin(noise))]
    excess = np.nan if G is None else float(noise[grid.index(G)] / noise.min() - 1)
    lo, hi = (np.nan, np.nan) if G is None else (0.0, float(bound))
    return [
        _row("safe G (loo)", best, G, **ids),
        _row("noise excess at plan's safe G (loo)", excess, bound, lo, hi, **ids),
    ]


def estimator_rows(truth: dict, p: dict, spec: str, **ids) -> list[dict]:
    """G* of the trainer's estimator: the exact one (the env's per-prompt truth, the rescaled
    target of :func:`gpolab.theory.gstar_model.exact_criteria` at the log's responses per step,
    on the sizes plan chooses among)
    against plan's (the transfer model), and the exact noise-to-signal excess at plan's G* over
    the exact best (0: plan's G is the best; the cost of the model's error)."""
    from gpolab.theory import gstar, gstar_model

    ex = gstar_model.exact_criteria(truth["exact"], spec, p["budget"], gstar.settable(p["budget"]))
    best = int(ex["G"][np.argmin(ex["rescaled"])])
    got = p.get("estimator_gstar")
    excess = np.nan if got is None else gstar_model.noise_excess(ex, got)
    lo, hi = _num(p.get("estimator_gstar_lo")), _num(p.get("estimator_gstar_hi"))
    return [
        _row("G* of the trainer's estimator", best, got, lo, hi, **ids),
        _row("noise excess at plan's G*", 0.0, excess, **ids),
    ]


def _num(v) -> float:
    return np.nan if v is None else float(v)


def report(cfg: Config, tables: dict) -> str:
    from gpolab.kit.tables import table_text

    df = tables["results"]
    first = df[df["format"] == df["format"].iloc[0]]
    cols = ["env", "quantity", "G", "truth", "recovered", "lo", "hi", "covered"]
    return (
        f"gpolab plan on simulated logs ({df['format'].iloc[0]} format shown), truth vs "
        "recovered with its 95% interval:\n" + table_text(first, cols)
    )


def notes(cfg: Config, tables: dict) -> str:
    df = tables["results"]
    lines = []
    same = df.groupby(["env", "quantity", "G"], dropna=False)["recovered"].agg(
        lambda s: s.max() - s.min()
    )
    lines.append(
        f"formats read: {', '.join(dict.fromkeys(df['format']))}; largest difference "
        f"between formats of any recovered number: {float(same.abs().max()):.3g}"
    )
    for env, sub in df[df["format"] == df["format"].iloc[0]].groupby("env", sort=False):
        has = sub[sub["covered"].notna()]
        lines.append(
            f"{env}: truth inside the 95% interval for {int(has['covered'].sum())} of "
            f"{len(has)} quantities (the degenerate curve's G share one fit: correlated)"
        )
    return "\n".join(lines)


def figures(tables: dict) -> dict:
    from gpolab.labs.plan import plots

    return {"plancheck.png": plots.plancheck_figure}
