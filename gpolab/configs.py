"""Lab configurations: one frozen dataclass per lab is the single source of defaults; TOML files,
``--quick`` and command-line flags only override it, through this one mechanism.

Every lab's ``Config`` and every env's ``Instance`` is a frozen dataclass deriving from
:class:`Config` (``replace``; class data ``LAB``, ``QUICK``, ``MODES``, ``INSTANCES``).
A field is declared with :func:`option` (default, help text, the modes that use it, whether its
value changes any number).  Values are coerced by the field's annotation: ``int``, ``float``,
``str``, ``bool`` and ``tuple[...]`` grids written as lists or comma lists (``"2,4,8"``).

Precedence (:func:`resolve`): defaults < config-file table < quick sizes < flags the user typed.
A typed flag always wins.  A flag or file key that the chosen mode does not use (``--dim`` with
``--env tree``) is an error naming the field and the mode.

Why not tyro: tyro fills every default into its result, so a typed value equal to the default
cannot be told from an untyped one, and the precedence above (and rejecting typed flags the mode
ignores) needs exactly that; it also parses grids as space-separated ``--G 2 4 8`` where gpolab's
flags have always been comma lists.  The flag builder here is ~40 lines of argparse.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import re
import tomllib
import typing
from pathlib import Path

from gpolab.validate import ConfigError

EXPERIMENT_KEYS = ("lab", "title", "figures")  # top-level keys of a config / experiment file


class Config:
    """Base of every settings class: each lab's ``Config`` and each env's ``Instance``, a frozen
    dataclass of :func:`option` fields (the base adds no field, so equality, hashing and
    pytree-ness stay the subclass's).  Class data a lab's config declares: ``LAB`` (its name),
    ``QUICK`` (the sizes ``--quick`` uses) and, where it has them, ``MODES`` (per-mode defaults
    and quick sizes, :func:`resolve`) and ``INSTANCES`` (an env's settings, :func:`instances`);
    and ``validate()``, which raises one :class:`ConfigError` naming the field."""

    def replace(self, **changes) -> typing.Self:
        """A copy with ``changes`` coerced by their fields' types (:func:`replace`)."""
        return replace(self, **changes)


def option(default, help: str, *, when: dict | None = None, key: bool = True):
    """A config field.  ``when={"env": ("bandit",), "kind": ("loglinear",)}``: used only when
    every named field has one of the listed values.  ``key=False``: the value changes no number
    (output folder, chunk size, sharding), so it is left out of result-cache keys."""
    meta = {"help": help, "when": when or {}, "key": key}
    return dataclasses.field(default=default, metadata=meta)


def borrow(
    cls, name: str, *, when: dict | None = None, default=dataclasses.MISSING, prefix: str = ""
):
    """A lab's field declared by an env's :class:`Instance` field ``name`` (its default and help,
    so a setting is declared once): ``default`` where the lab's differs, ``prefix`` before the
    help (e.g. "bandit: "), ``when`` as in :func:`option`."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    value = f.default if default is dataclasses.MISSING else default
    return option(value, prefix + f.metadata["help"], when=when, key=f.metadata["key"])


def borrowed(cls, cfg, **given):
    """An env ``Instance`` of class ``cls`` from lab config ``cfg``: the settings ``cfg`` names as
    ``cls`` names its fields (as :func:`borrow` declares them), ``given`` overriding them."""
    names = {f.name for f in dataclasses.fields(cls)} & {f.name for f in dataclasses.fields(cfg)}
    return cls(**{name: getattr(cfg, name) for name in names} | given)


def meta(cls, name: str) -> dict:
    """``name``'s option metadata; an instance field's ``when`` adds the envs that have it."""
    return _flat(cls)[name][1]


def _own_meta(cls, name: str) -> dict:
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    return {"help": "", "when": {}, "key": True, **f.metadata}


def instances(cls) -> tuple[str, dict] | None:
    """(selector field, {value: Instance class}) of a config holding an env's ``instance``
    (``INSTANCES = ("env", {"bandit": bandit.Instance, ...})``), else None."""
    return getattr(cls, "INSTANCES", None)


@functools.cache
def _flat(cls) -> dict:
    """Every flat setting name → (class that declares it, metadata): the config's own fields,
    then its instances' (a name several envs declare is used with each of them)."""
    out = {f.name: (cls, _own_meta(cls, f.name)) for f in dataclasses.fields(cls)}
    spec = instances(cls)
    if spec is None:
        return out
    out.pop("instance")
    selector, classes = spec
    for value, icls in classes.items():
        for f in dataclasses.fields(icls):
            info = _own_meta(icls, f.name)
            envs = out[f.name][1]["when"][selector] if f.name in out else ()
            when = {selector: (*envs, value), **info["when"]}
            helps = out[f.name][1]["help"].split("; ") if f.name in out else []
            text = "; ".join(dict.fromkeys([*helps, info["help"]]))
            out[f.name] = (out.get(f.name, (icls,))[0], {**info, "help": text, "when": when})
    return out


def names(cls) -> list[str]:
    """Every flat setting name (flags, file keys): own fields, then instance fields."""
    return list(_flat(cls))


def value(cfg, name: str):
    """Setting ``name`` of ``cfg`` (an instance field read from ``cfg.instance``; None where the
    instance has no such field)."""
    if instances(type(cfg)) is None or name in {f.name for f in dataclasses.fields(cfg)}:
        return getattr(cfg, name)
    return getattr(cfg.instance, name, None)


def settings(cfg) -> dict:
    """Every setting of ``cfg`` by its flat name (its instance's fields inline)."""
    own = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name != "instance"}
    if instances(type(cfg)) is None:
        return own
    return {**own, **dataclasses.asdict(cfg.instance)}


@functools.cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


# ----------------------------------------------------------------------------- coercion

_WORDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
_LIST_WORDS = {int: "integers", float: "numbers", str: "names"}


def _scalar(name: str, tp, value):
    bad = ConfigError(f"{name}: got {value!r}; allowed: {_WORDS[tp]}")
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise bad
    if tp is str:
        if not isinstance(value, str):
            raise bad
        return value.strip()
    if isinstance(value, bool):
        raise bad
    if isinstance(value, str):
        try:
            out = tp(value.strip())
        except ValueError:
            raise bad from None
        return _int64(name, out) if tp is int else out
    if tp is int and isinstance(value, int):
        return _int64(name, value)
    if tp is float and isinstance(value, (int, float)):
        return float(value)
    raise bad


SEEDS = ("seed", "instance_seed")  # PRNG seeds: JAX keeps a seed's low 32 bits


def _int64(name: str, value: int) -> int:
    """``value`` where it fits a signed 64-bit integer (TOML integers are 64-bit), and a seed
    (:data:`SEEDS`) where it fits 32 bits: ``jax.random.key(2**32 + 7)`` is ``key(7)``, so a
    larger seed would silently repeat another seed's draws.  One error line otherwise (never an
    OverflowError deep in a run)."""
    if name in SEEDS and value >= 1 << 32:
        raise ConfigError(
            f"{name}: got {value!r}; allowed: an integer below 2^32 = "
            f"{1 << 32:,} (JAX keeps a seed's low 32 bits: {name} {value} would "
            f"repeat the draws of {value % (1 << 32)})"
        )
    if not -(1 << 63) <= value < (1 << 63):
        raise ConfigError(
            f"{name}: got {value!r}; allowed: an integer of at most 64 bits (|{name}| < 2^63)"
        )
    return value


def unknown(cls, name: str) -> ConfigError:
    """The error for a setting ``cls`` does not have (a misspelt or a removed name)."""
    return ConfigError(f"{name}: unknown field; allowed: {', '.join(_flat(cls))}")


def coerce(cls, name: str, value):
    """``value`` (from TOML or a flag) as the type of field ``name``; one-line error otherwise."""
    if name not in _flat(cls):
        raise unknown(cls, name)
    tp = _hints(_flat(cls)[name][0])[name]
    if typing.get_origin(tp) is not tuple:
        return _scalar(name, tp, value)
    return coerce_list(name, value, typing.get_args(tp)[0])


def coerce_list(name: str, value, elem=str) -> tuple:
    """A grid: a list, one value or a comma list (``"2,4,8"``; no empty entries; commas inside
    brackets stay in their entry, as in ``trl/grpo[scale_rewards=batch,epsilon=1e-4],loo``).
    Entries are distinct: one listed twice (``loo,loo``, ``4,4``) is an error naming it."""
    if isinstance(value, str):
        parts = re.split(r",(?![^\[]*\])", value)
        if any(not p.strip() for p in parts):
            raise ConfigError(
                f"{name}: got {value!r}; allowed: a comma-separated list of {_LIST_WORDS[elem]} "
                "with no empty entries"
            )
    elif isinstance(value, (list, tuple)):
        parts = list(value)
    else:
        parts = [value]
    if not parts:
        raise ConfigError(f"{name}: got an empty list; allowed: one or more {_LIST_WORDS[elem]}")
    try:
        values = tuple(_scalar(name, elem, p) for p in parts)
    except ConfigError:
        raise ConfigError(
            f"{name}: got {value!r}; allowed: a list of {_LIST_WORDS[elem]}"
        ) from None
    twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
    if twice is not None:  # a repeated entry would be a repeated row, counted twice by any test
        raise ConfigError(
            f"{name}: got {value!r}, which lists {twice!r} twice; allowed: a list of distinct "
            f"{_LIST_WORDS[elem]}"
        )
    return values


def replace(cfg, **changes):
    """``dataclasses.replace`` with every value coerced by its field's type.  An instance field
    (``prompts``) changes ``cfg.instance``; a new selector value (``env``) starts from that
    env's default instance; a field the selected env's instance lacks is an error."""
    cls, spec = type(cfg), instances(type(cfg))
    own_names = {f.name for f in dataclasses.fields(cls)}
    own = {
        k: v if k == "instance" else coerce(cls, k, v) for k, v in changes.items() if k in own_names
    }
    rest = {k: v for k, v in changes.items() if k not in own_names}
    for k in rest:
        if k not in _flat(cls):
            raise unknown(cls, k)
    if spec is None or (not rest and "instance" in own):
        return dataclasses.replace(cfg, **own, **{k: coerce(cls, k, v) for k, v in rest.items()})
    selector, classes = spec
    chosen = own.get(selector, getattr(cfg, selector))
    icls = classes.get(chosen)
    inst = own.pop("instance", cfg.instance)
    if icls is None:  # an unknown env: its validate() names the field
        return dataclasses.replace(cfg, **own)
    inst = inst if isinstance(inst, icls) else icls()
    check_instance_names(cls, chosen, rest)
    inst = dataclasses.replace(inst, **{k: coerce(icls, k, v) for k, v in rest.items()})
    return dataclasses.replace(cfg, **own, instance=inst)


def _applies(cls, chosen, name: str) -> bool:
    """Whether ``name`` is an own field of ``cls`` or a field of env ``chosen``'s instance."""
    icls = instances(cls)[1].get(chosen)
    own = _flat(cls).get(name, (cls,))[0] is cls
    return own or icls is None or name in {f.name for f in dataclasses.fields(icls)}


def check_instance_names(cls, chosen, names, label=lambda n: n) -> None:
    """Each of ``names`` that is an instance field must be one of env ``chosen``'s."""
    spec = instances(cls)
    if spec is None or spec[1].get(chosen) is None:
        return
    selector, classes = spec
    mine = {f.name for f in dataclasses.fields(classes[chosen])}
    for name in names:
        if name in _flat(cls) and name not in mine and _flat(cls)[name][0] is not cls:
            need = " or ".join(meta(cls, name)["when"][selector])
            raise ConfigError(
                f"{label(name)}: not used with {selector} = {chosen}; it applies "
                f"only when {selector} is {need}"
            )


def init(cfg, kw: dict) -> None:
    """A frozen config's ``__init__`` accepting its instance's fields flat (``prompts=4``, as
    flags and file keys name them): own fields set as given (defaults for the rest),
    the instance built from the selected env's defaults and the flat fields."""
    cls = type(cfg)
    selector, classes = instances(cls)
    own = {f.name for f in dataclasses.fields(cls)}
    for f in dataclasses.fields(cls):
        if f.name != "instance":
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            object.__setattr__(cfg, f.name, kw.get(f.name, default))
    icls = classes.get(getattr(cfg, selector))
    inst = kw.get("instance")
    flat = {k: v for k, v in kw.items() if k not in own}
    for k in flat:
        if icls is None or k not in _flat(cls):
            raise unknown(cls, k)
    if icls is not None:
        check_instance_names(cls, getattr(cfg, selector), flat)
        inst = inst if isinstance(inst, icls) else icls()
        inst = dataclasses.replace(inst, **flat)
    object.__setattr__(cfg, "instance", inst)


def used(cfg, name: str) -> bool:
    """Whether field ``name`` is used by ``cfg``'s mode (see :func:`option`'s ``when``)."""
    when = meta(type(cfg), name)["when"]
    return all(_holds(value(cfg, f), values) for f, values in when.items())


def _holds(value, allowed) -> bool:
    """``value`` is one of ``allowed``; a grid (tuple) holds when it includes one of them."""
    if isinstance(value, tuple):
        return any(v in allowed for v in value)
    return value in allowed


def _condition(field: str, value, allowed) -> str:
    verb = "includes" if isinstance(value, tuple) else "is"
    return f"{field} {verb} {' or '.join(map(str, allowed))}"


def check_used(cfg, names, label=flag) -> None:
    for name in names:
        if used(cfg, name):
            continue
        when = meta(type(cfg), name)["when"]
        now = ", ".join(f"{f} = {_shown(value(cfg, f))}" for f in when)
        need = " and ".join(_condition(f, value(cfg, f), v) for f, v in when.items())
        raise ConfigError(f"{label(name)}: not used with {now}; it applies only when {need}")


def key_settings(cfg, exclude=()) -> dict:
    """Every setting the numbers of ``cfg`` depend on: used fields with ``key=True``."""
    return {
        name: v
        for name, v in settings(cfg).items()
        if name not in exclude and meta(type(cfg), name)["key"] and used(cfg, name)
    }


# ----------------------------------------------------------------------------- files


def read_toml(path) -> dict:
    try:
        return tomllib.loads(Path(path).read_text())
    except OSError as err:
        raise ConfigError(f"config: cannot read {str(path)!r} ({err.strerror})") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{Path(path).name}: not valid TOML ({err})") from None
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{Path(path).name}: not UTF-8 text (byte {err.start}); allowed: a "
            "TOML file, which is UTF-8"
        ) from None


def split_file(path, lab: str, data: dict | None = None) -> tuple[dict, dict, dict]:
    """(head, table, quick) of a config or experiment file for ``lab``: top-level keys
    (lab, title, figures), the ``[lab]`` table and the ``[quick]`` table.  Anything else, a
    missing ``[lab]`` table or a file naming another lab is an error naming the file."""
    name = Path(path).name
    data = read_toml(path) if data is None else data
    head = {k: v for k, v in data.items() if k in EXPERIMENT_KEYS or not isinstance(v, dict)}
    tables = {k: v for k, v in data.items() if k not in head}
    for k in head:
        if k not in EXPERIMENT_KEYS:
            raise ConfigError(f"{name}: {k}: unknown key; allowed: {', '.join(EXPERIMENT_KEYS)}")
    if head.get("lab", lab) != lab:
        raise ConfigError(f"{name}: lab = {head['lab']!r}, but this is the {lab!r} lab")
    for k in tables:
        if k not in (lab, "quick"):
            raise ConfigError(f"{name}: [{k}]: unknown table; allowed: [{lab}], [quick]")
    if lab not in tables:
        raise ConfigError(f"{name}: no [{lab}] table; allowed: [{lab}] (its settings), [quick]")
    return head, inline(tables[lab], f"{name} [{lab}"), tables.get("quick", {})


def inline(table: dict, where: str = "") -> dict:
    """A lab table with its env subtable (``[sweep.bandit]``, the canonical form) inline: flat
    fields, as flags name them.  A field given both ways is an error naming it."""
    flat = {k: v for k, v in table.items() if not isinstance(v, dict)}
    for sub, values in table.items():
        if isinstance(values, dict):
            for k in sorted(set(values) & set(flat)):
                raise ConfigError(f"{where}.{sub}] {k}: also given in {where}]; allowed: one")
            flat.update(values)
    return flat


def resolve(cls, *, typed=None, table=None, quick=False, file_quick=None, source: str = ""):
    """The validated config: defaults < the mode's defaults < ``table`` (a config file's) <
    quick sizes (only fields the user did not type) < ``typed`` (flags).

    ``quick=True``: the lab's ``QUICK`` sizes, the mode's (``MODES``) and ``file_quick`` (a
    file's ``[quick]``) over them; a dict: exactly those sizes.  A config may declare
    ``MODES = {(field, value): {"defaults": {...}, "quick": {...}}}``: defaults and quick sizes
    that apply when the (file and typed) settings put ``field`` at ``value``.  Errors about file
    entries name ``source`` (the file) and its table.  ``file_quick`` is checked whether or not
    ``quick`` is set (issue 55): every key coerced, and without ``quick`` the config ``--quick``
    would give resolved too, so a bad ``[quick]`` never waits for the run that uses it."""
    lab = getattr(cls, "LAB", cls.__name__)
    name = Path(source).name if source else ""
    _check_file_quick(cls, name, file_quick or {})
    if file_quick and quick is False:  # the run --quick would be (after this run's own checks)
        cfg = resolve(cls, typed=typed, table=table, file_quick=None, source=source)
        try:
            resolve(cls, typed=typed, table=table, quick=True, file_quick=file_quick, source=source)
        except ConfigError as err:
            raise ConfigError(
                str(err) if "[quick]" in str(err) else f"{err} (with --quick)"
            ) from None
        return cfg
    typed, table = dict(typed or {}), inline(table or {})
    mode_defaults, mode_quick = _modes(cls, typed, table)
    if isinstance(quick, dict):
        sizes = quick
    else:
        sizes = {**cls.QUICK, **mode_quick, **(file_quick or {})} if quick else {}
    quick = {k: v for k, v in sizes.items() if k not in typed}
    if instances(cls) is not None:  # an instance field of another env: named as typed
        selector = instances(cls)[0]
        chosen = typed.get(selector, table.get(selector, mode_defaults.get(selector)))
        chosen = getattr(cls(), selector) if chosen is None else coerce(cls, selector, chosen)
        check_instance_names(cls, chosen, typed, flag)
        check_instance_names(cls, chosen, table, lambda n: f"{name} [{lab}] {n}".strip())
        # a quick size of another env's instance is not used
        quick = {k: v for k, v in quick.items() if _applies(cls, chosen, k)}
    cfg = replace(cls(), **mode_defaults)
    for where, changes in ((f"[{lab}]", table), ("[quick]", quick), ("", typed)):
        prefix = f"{name} {where} ".lstrip() if where and name else ""
        try:
            cfg = replace(cfg, **changes)
        except ConfigError as err:
            raise ConfigError(f"{prefix}{err}") from None
    check_used(cfg, typed)
    check_used(cfg, table, lambda n: f"{name} [{lab}] {n}".strip())
    return _validated(cfg, name, lab, typed=typed, table=table, quick=quick)


def _check_file_quick(cls, name: str, file_quick: dict) -> None:
    """Every key of a file's ``[quick]`` coerced (a key a flag overrides is still the file's)."""
    for k, v in file_quick.items():
        try:
            coerce(cls, k, v)
        except ConfigError as err:
            raise ConfigError(f"{name} [quick] {err}".lstrip()) from None


def _modes(cls, typed: dict, table: dict) -> tuple[dict, dict]:
    """The defaults and quick sizes of ``cls.MODES`` that the settings select."""
    mode_defaults, mode_quick = {}, {}
    for (field, value), extra in getattr(cls, "MODES", {}).items():
        if coerce(cls, field, typed.get(field, table.get(field, getattr(cls(), field)))) == value:
            mode_defaults.update(extra.get("defaults", {}))
            mode_quick.update(extra.get("quick", {}))
    return mode_defaults, mode_quick


def _validated(cfg, name: str, lab: str, *, typed: dict, table: dict, quick: dict):
    """``cfg`` once its ``validate`` passes (an error about a file's value names where it is)."""
    try:
        cfg.validate()
    except ConfigError as err:
        field = re.split(r"[: (]", str(err), maxsplit=1)[0]
        where = "[quick]" if field in quick else f"[{lab}]" if field in table else ""
        if name and where and field not in typed:
            raise ConfigError(f"{name} {where} {err}") from None
        raise
    return cfg


def dumps(cfg, lab: str) -> str:
    """``cfg`` as a TOML config file that ``--config`` reads back to the same config; an env's
    instance is its subtable (``[sweep.bandit]``)."""
    lines = [
        f"# resolved settings of `gpolab {lab}` (defaults, config file, quick sizes, flags)",
        f'lab = "{lab}"',
        "",
        f"[{lab}]",
    ]
    own = [f.name for f in dataclasses.fields(cfg) if f.name != "instance"]
    # what the mode ignores would be rejected when read back; so would an empty list, which only
    # a default can be (claims' `only`: every claim) and which reading back restores
    lines += [
        f"{n} = {_toml_value(getattr(cfg, n))}"
        for n in own
        if used(cfg, n) and getattr(cfg, n) != ()
    ]
    spec = instances(type(cfg))
    if spec is not None and cfg.instance is not None:
        lines += ["", f"[{lab}.{getattr(cfg, spec[0])}]"]
        lines += [
            f"{f.name} = {_toml_value(getattr(cfg.instance, f.name))}"
            for f in dataclasses.fields(cfg.instance)
            if used(cfg, f.name)
        ]
    return "\n".join(lines) + "\n"


PATHS = ("out", "log", "grad_norms", "experiments")  # settings that name a file or folder


def absolute_paths(cfg):
    """``cfg`` with its path settings (:data:`PATHS`, where set) absolute, as a saved
    ``config.toml`` holds them: ``--config`` from any directory reads the same files and resumes
    the same output folder."""
    have = {f.name for f in dataclasses.fields(cfg)}
    return replace(
        cfg, **{k: os.path.abspath(getattr(cfg, k)) for k in PATHS if k in have and getattr(cfg, k)}
    )


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, float):
        return ("inf" if v > 0 else "-inf") if math.isinf(v) else "nan" if v != v else repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    return str(v)


# ----------------------------------------------------------------------------- flags


def add_flags(parser: argparse.ArgumentParser, cls) -> None:
    """One ``--field-name`` flag per config field (default None = "not typed"; values are
    coerced by :func:`resolve`), booleans as ``--flag/--no-flag``; help shows the default: the
    value a run uses (an instance field from the config's own default instance, which a lab may
    set apart from the env's: allocate's skewed bandit)."""
    made = cls() if instances(cls) else None
    for name, (owner, info) in _flat(cls).items():
        default = getattr(owner(), name)
        others = []
        if made is not None and owner is not cls:
            default = getattr(made.instance, name, default)
            others = _env_defaults(cls, name, made, default)
        help_text = info["help"].replace("%", "%%")  # argparse formats help with %
        if info["when"]:
            when = info["when"].items()
            help_text += " [" + "; ".join(f"{k}: {', '.join(map(str, v))}" for k, v in when)
            help_text += "]"
        if isinstance(default, bool):
            kind = {"action": argparse.BooleanOptionalAction, "help": help_text}
        else:
            shown = "; with ".join([_shown(default), *_mode_defaults(cls, name), *others])
            shown = shown.replace("%", "%%")
            kind = {"metavar": name.upper(), "help": f"{help_text} (default: {shown})"}
        parser.add_argument(flag(name), dest=name, default=None, **kind)


def _shown(v) -> str:
    return ",".join(map(str, v)) if isinstance(v, tuple) else str(v)


def _env_defaults(cls, name: str, made, default) -> list[str]:
    """An instance field several envs declare: the other envs' defaults where they differ from
    the default env's (``--env markov: 8``)."""
    selector, classes = instances(cls)
    out = []
    for env, icls in classes.items():
        if env != getattr(made, selector) and name in {f.name for f in dataclasses.fields(icls)}:
            value = getattr(icls(), name)
            if value != default:
                out.append(f"{flag(selector)} {env}: {_shown(value)}")
    return out


def _mode_defaults(cls, name: str) -> list[str]:
    """``name``'s defaults in the modes of ``MODES`` that change it, as help shows them
    (``--env tree: thought-std``): the help's default is the value a run uses in every mode."""
    out = []
    for (field, v), extra in getattr(cls, "MODES", {}).items():
        if name in extra.get("defaults", {}):
            typed = flag(field) if v is True else f"{flag(field)} {_shown(v)}"
            out.append(f"{typed}: {_shown(extra['defaults'][name])}")
    return out


def typed(args: argparse.Namespace, cls) -> dict:
    """The config fields whose flags the user typed."""
    return {n: getattr(args, n) for n in _flat(cls) if getattr(args, n, None) is not None}
