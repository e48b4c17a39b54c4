"""``gpolab train``: the std-normalization lab (:mod:`gpolab.labs.stdnorm.lab`), GRPO against
REINFORCE at admissible and tuned step sizes on the log-linear bandit; ``--env bandit|arithmetic``
runs the group-size lab's training check for that env instead."""

from __future__ import annotations

from gpolab import configs
from gpolab.kit.command import lab_command, run_lab
from gpolab.validate import ConfigError

# shown at the end of --help; tests/runner/test_help_examples.py parses and resolves each
EXAMPLES = ("gpolab train --quick", "gpolab train --estimators grpo,loo --G 8 --quick")

HELP = "train GRPO vs REINFORCE (admissible and tuned steps, many seeds); gain and phases"
DESCRIPTION = (
    "Policy-gradient training on the log-linear bandit of arXiv 2601.23135 (theory §7).  Writes "
    "summary, gain, finite_sample, curves and phases tables (parquet and CSV), config.toml and "
    "train_curves.png, train_gain.png, train_phases.png to --out.  --env bandit|arithmetic: "
    "SGD at a fixed budget N = B*G per step, the group-size lab's training check (gpolab "
    "groupsize --train --env ENV; --seeds, --steps, --seed, --quick and --out carry over)."
)
CARRIED = ("env", "seeds", "steps", "seed", "out")  # flags the group-size check takes over


def _run(lab, args) -> int:
    from gpolab.labs.groupsize import lab as groupsize  # deferred: jax (`gpolab --help`)

    typed = configs.typed(args, lab.Config)
    env = typed.get("env")
    if env not in groupsize.ENVS:
        return run_lab(lab, args)
    for name in typed:
        if name not in CARRIED:
            raise ConfigError(
                f"{configs.flag(name)}: not used with env = {env}; it applies only when env is "
                "loglinear"
            )
    if args.config:
        raise ConfigError(f"config: not used with env = {env}; use gpolab groupsize --config")
    mapped = {
        "train": True,
        "env": env,
        **{k: typed[k] for k in ("seeds", "seed", "out") if k in typed},
    }
    if "steps" in typed:
        mapped[f"{env}_steps"] = typed["steps"]
    cfg = configs.resolve(groupsize.Config, typed=mapped, quick=args.quick)
    return run_lab(groupsize, args, cfg)


register = lab_command("stdnorm", "train", help=HELP, description=DESCRIPTION, runner=_run)
