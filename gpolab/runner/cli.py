"""The ``gpolab`` command line: one entry point, one subcommand per lab folder in ``gpolab/labs``
and per module in ``gpolab/runner/commands`` (found by listing them; no name list).

Each lab folder's ``__init__.py`` and each runner command module exposes ``register(subparsers)``
(argparse only, no heavy imports) and ``EXAMPLES``; ``register`` sets ``func`` to a runner that
imports the library lazily, so ``gpolab --help`` is instant.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import shutil
import sys
import textwrap

from gpolab.validate import ConfigError


def commands() -> dict:
    """{command name: its module}: every lab folder of :mod:`gpolab.labs` (a package on its
    ``__path__``, so a folder added there is a command) and every module of
    :mod:`gpolab.runner.commands`, in name order.  Only the light ``__init__`` of each lab is
    imported."""
    from gpolab.kit import running
    from gpolab.runner import commands as runner_commands

    found = {name: f"gpolab.labs.{name}" for name in running.folders()}
    for info in pkgutil.iter_modules(runner_commands.__path__):
        if not info.ispkg and not info.name.startswith("_"):
            found[info.name] = f"gpolab.runner.commands.{info.name}"
    return {name: importlib.import_module(found[name]) for name in sorted(found)}


def _add_examples(parser: argparse.ArgumentParser, examples) -> None:
    """``name``'s examples as its help's last lines, kept as written (a raw formatter; the
    description is wrapped here as argparse would)."""
    if parser.description:
        width = min(shutil.get_terminal_size().columns, 100) - 2
        parser.description = "\n\n".join(
            textwrap.fill(" ".join(par.split()), width) for par in parser.description.split("\n\n")
        )
    lines = "\n".join(f"  {line}" for line in examples)
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
    found = commands()
    chosen = next((a for a in (sys.argv[1:] if argv is None else argv) if a in found), None)
    for name, module in found.items():
        if name == chosen or not hasattr(module.register, "brief"):
            module.register(sub)
        else:
            module.register.brief(sub)
    if chosen is not None:
        _add_examples(sub.choices[chosen], found[chosen].EXAMPLES)
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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    import jax

    from gpolab.engine import devices

    if args.command != "bench":  # bench measures cold compilation
        devices.enable_compilation_cache()
    from gpolab.kit.output import Interrupted

    # the command runs in full float32 (use_cpu_cores) and the caller's setting comes back after
    # it: an in-process call (a test, a notebook) does not change what the process traces later
    precision = jax.config.jax_default_matmul_precision
    try:
        devices.use_cpu_cores()
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
    finally:
        jax.config.update("jax_default_matmul_precision", precision)


if __name__ == "__main__":
    sys.exit(main())
