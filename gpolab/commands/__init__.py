"""CLI subcommands; each module has ``register(subparsers)``.

Commands whose settings are a frozen config dataclass expose every field as a flag with
:func:`add_config_flags` and read back the ones given with :func:`given`, so the dataclass stays
the single source of defaults.
"""

from __future__ import annotations

import argparse
import dataclasses


def add_config_flags(parser: argparse.ArgumentParser, cls, help: dict[str, str]) -> None:
    """One ``--field-name`` flag per dataclass field (default None = "not given").

    Tuples are read as comma lists (strings, parsed by the config), booleans as
    ``--flag/--no-flag``; the help text shows the dataclass default.
    """
    defaults = cls()
    for f in dataclasses.fields(cls):
        default = getattr(defaults, f.name)
        flag = "--" + f.name.replace("_", "-")
        if isinstance(default, bool):
            parser.add_argument(
                flag,
                dest=f.name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=help[f.name],
            )
            continue
        shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
        kind = str if isinstance(default, (tuple, str)) else type(default)
        parser.add_argument(
            flag, dest=f.name, type=kind, default=None, help=f"{help[f.name]} (default: {shown})"
        )


def given(args: argparse.Namespace, cls) -> dict:
    """The config fields whose flags were given on the command line."""
    return {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(cls)
        if getattr(args, f.name) is not None
    }
