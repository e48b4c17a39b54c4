"""The ``gpolab`` command line: one entry point, one subcommand per module in ``gpolab.commands``.

Each command module exposes ``register(subparsers)`` (argparse only, no heavy imports) and sets
``func`` to a runner that imports the library lazily, so ``gpolab --help`` is instant.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
import textwrap

from gpolab.validate import ConfigError

COMMANDS = (
    "sweep",
    "chi2",
    "tree",
    "train",
    "stdnorm",
    "curvature",
    "bench",
    "figures",
    "groupsize",
    "estimators",
    "zoo",
    "claims",
    "plan",
    "plancheck",
    "offpolicy",
    "allocate",
)

# Two or three invocations per command, shown at the end of its --help (each is parsed, and a
# lab's resolved, by tests/test_help_examples.py, so none goes stale).
EXAMPLES = {
    "sweep": (
        "gpolab sweep --quick",
        "gpolab sweep --estimators loo,grpo,verl/grpo --G 4,8,16 --seeds 20000 --out results/mine",
        "gpolab sweep --env tree --K 4,16 --M 1,4 --quick",
    ),
    "chi2": ("gpolab chi2 --quick", "gpolab chi2 --estimator loo --G 8 --B 4 --seeds 2000"),
    "tree": ("gpolab tree --quick", "gpolab tree --leaves 64 --quick"),
    "train": ("gpolab train --quick", "gpolab train --estimators grpo,loo --G 8 --quick"),
    "stdnorm": ("gpolab stdnorm --quick", "gpolab stdnorm --estimators grpo,loo --quick"),
    "curvature": ("gpolab curvature --quick", "gpolab curvature --prompts 8 --quick"),
    "bench": ("gpolab bench --quick", "gpolab bench --json"),
    "figures": (
        "gpolab figures --quick",
        "gpolab figures --only bandit_mse_vs_G,tree_mse_heatmap",
        "gpolab figures --replot",
    ),
    "groupsize": (
        "gpolab groupsize --quick",
        "gpolab groupsize --N 256,1024 --seeds 5000",
        "gpolab groupsize --train --env bandit --quick",
    ),
    "estimators": ("gpolab estimators", "gpolab estimators --json"),
    "zoo": ("gpolab zoo --quick", "gpolab zoo --estimators grpo,loo,trl/grpo --G 4,8 --quick"),
    "claims": ("gpolab claims --quick", "gpolab claims --only U1,T1 --markdown"),
    "plan": (
        "gpolab plan completions.parquet",
        "gpolab plan --log rollouts/ --format verl --G 8",
    ),
    "plancheck": ("gpolab plancheck --quick", "gpolab plancheck --env bandit --quick"),
    "allocate": (
        "gpolab allocate --quick",
        "gpolab allocate --rules uniform,gpolab,knapsack --budget 256,512 --seeds 4000",
        "gpolab allocate --estimator grpo --quick",
    ),
    "offpolicy": (
        "gpolab offpolicy --quick",
        "gpolab offpolicy --ratio token,sis --clip none,ppo,dual --eta 1,2,4 --m 1,4,16",
        "gpolab offpolicy --kl k1,k2,k3 --kappa 0.1 --ratio token --clip none --quick",
    ),
}


def _add_examples(parser: argparse.ArgumentParser, name: str) -> None:
    """``name``'s examples as its help's last lines, kept as written (a raw formatter; the
    description is wrapped here as argparse would)."""
    if parser.description:
        width = min(shutil.get_terminal_size().columns, 100) - 2
        parser.description = "\n\n".join(
            textwrap.fill(" ".join(par.split()), width) for par in parser.description.split("\n\n")
        )
    lines = "\n".join(f"  {line}" for line in EXAMPLES[name])
    parser.epilog = f"{parser.epilog}\n\n" if parser.epilog else ""
    parser.epilog += f"examples:\n{lines}"
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """Every subcommand; only the one named in ``argv`` gets its flags (a lab's flags come from
    its config, whose module imports JAX), so ``gpolab --help`` stays instant."""
    parser = argparse.ArgumentParser(
        prog="gpolab",
        description="Measure GRPO-family policy-gradient estimators against exact gradients.",
    )
    parser.add_argument("--version", action="version", version=f"gpolab {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = next((a for a in (sys.argv[1:] if argv is None else argv) if a in COMMANDS), None)
    for name in COMMANDS:
        module = importlib.import_module(f"gpolab.commands.{name}")
        if name == chosen or not hasattr(module.register, "brief"):
            module.register(sub)
        else:
            module.register.brief(sub)
    if chosen is not None:
        _add_examples(sub.choices[chosen], chosen)
    return parser


def version() -> str:
    """The installed distribution's version (``importlib.metadata``), else ``gpolab.__version__``
    (a source tree on ``PYTHONPATH`` that was never installed)."""
    from importlib import metadata

    try:
        return metadata.version("gpolab")
    except metadata.PackageNotFoundError:
        from gpolab import __version__

        return __version__


def enable_compilation_cache() -> None:
    """Keep XLA executables on disk across CLI runs (``GPOLAB_CACHE_DIR``; empty disables).

    Each ``gpolab`` invocation is a new process; with the cache a repeated sweep skips XLA
    compilation (e.g. a tree cell: 3.0 s cold, 0.7 s from the cache).
    """
    import os
    from pathlib import Path

    cache = os.environ.get("GPOLAB_CACHE_DIR", str(Path.home() / ".cache" / "gpolab" / "xla"))
    if cache:
        import jax

        jax.config.update("jax_compilation_cache_dir", cache)
        # every compilation, not only those over JAX's default 1 s: a sweep cell compiles in
        # ~1 s and its chunk probe in ~0.6 s, so the default would keep about half of them
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def use_cpu_cores() -> None:
    """One JAX CPU device per core before anything runs (``GPOLAB_CPU_DEVICES=N`` sets N), so the
    engine runs each core's seeds on its own device (:func:`gpolab.engine.use_cpu_devices`); and
    float32 matrix products in full float32 (:func:`gpolab.engine.full_precision`)."""
    import os

    from gpolab import engine, validate

    engine.full_precision()
    text = os.environ.get("GPOLAB_CPU_DEVICES", "")
    try:
        count = int(text) if text else None
    except ValueError:
        raise validate.ConfigError(
            f"GPOLAB_CPU_DEVICES: got {text!r}; allowed: a positive integer"
        ) from None
    if count is not None:
        validate.integer("GPOLAB_CPU_DEVICES", count, 1)
    engine.use_cpu_devices(count)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if args.command != "bench":  # bench measures cold compilation
        enable_compilation_cache()
    from gpolab.output import Interrupted

    try:
        use_cpu_cores()
        return int(args.func(args) or 0)
    except ConfigError as err:
        print(f"gpolab {args.command}: error: {err}", file=sys.stderr)
        return 2
    except Interrupted as err:
        print(f"gpolab {args.command}: {err}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print(f"gpolab {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `gpolab ... | head`: the reader left; not an error of ours
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as err:  # a file the run reads or writes (disk full, permissions): one line
        where = f"{err.filename!r}: " if err.filename else ""
        print(f"gpolab {args.command}: error: {where}{err.strerror or err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
