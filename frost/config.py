"""Job configuration: one frozen dataclass per job, checked once when it is built, with its
command-line options generated from its fields, so the CLI, the README and the job cannot drift.

    @dataclasses.dataclass(frozen=True)
    class Config(Checked):
        lr: float = option(0.1, "peak learning rate", positive)
        optimizer: str = option("sgd", "optimizer", choices=("sgd", "adamw"))

    class LMConfig(Config):      # a per-job default: redeclare the field, the help is inherited
        lr: float = 2e-3

    add_options(parser, [Config, LMConfig])  # --lr, --optimizer; each job's default in the help
    cfg = from_args(LMConfig, args)          # options left unset take the job's defaults

A field's `check` returns None when the value is allowed, or what is allowed ("must be > 0").
Building a config with a bad value raises `UsageError("--lr -1.0: must be > 0")`: the CLI prints
that one line as `frost: error: ...` and exits 2. An empty string never means "the default":
`--sizes ''` is refused ("must not be empty") unless the field says, with `option(empty=True)`,
that an empty value means something of its own. A path that a command writes (a run directory, a
cache, an output file) is checked with `output_folder` or `output_file` when the config is
built, so a path that cannot be written is one line at start-up, before any work.

`UsageError` is the class of every user's mistake Frost reports (bad flags, missing or too-small
data, stale run directories); its base `FrostError` covers errors that are not a mistake but
need no traceback either (exit 1).
"""

import argparse
import dataclasses
import importlib.util
import math
import os
import pathlib
import tempfile
import typing
from collections.abc import Callable
from typing import Any


class FrostError(Exception):
    """An error whose message tells the whole story (a diverged run, a failed data worker): the
    CLI prints it as one line and exits 1, with the traceback only under --debug."""


class UsageError(FrostError, ValueError):
    """A user's mistake, with a message that names the value and says what is allowed (exit 2)."""


class MissingData(UsageError, FileNotFoundError):
    """A data set or data file that is not there: the message says where it was looked for and how
    to install it (a UsageError at the CLI, and still a FileNotFoundError for library callers)."""


def option(
    default,
    help: str,
    check=None,
    choices=None,
    cli: bool = True,
    short: str = "",
    empty: bool = False,
) -> Any:
    """A config field with its help text, its check, its allowed values and its short flag
    (`-o`). A `tuple[str, ...]` field is a repeatable option (`--special A --special B`). An empty
    string (or an empty entry of a tuple) is refused unless `empty` is True: the field declares
    that an empty value means something (it never means "the default")."""
    metadata = {
        "help": help,
        "check": check,
        "choices": choices,
        "cli": cli,
        "short": short,
        "empty": empty,
    }
    return dataclasses.field(default=default, metadata=metadata)


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def needs(module: str, what: str, install: str) -> None:
    """Refuse `what` at once, before any work, when the optional package `module` it uses is
    missing."""
    if importlib.util.find_spec(module) is None:
        raise UsageError(f"{what}: needs {module} (pip install {install})")


# --- checks: value -> None if allowed, else what is allowed ---


def positive(x) -> str | None:
    return None if isinstance(x, (int, float)) and math.isfinite(x) and x > 0 else "must be > 0"


def nonnegative(x) -> str | None:
    return None if isinstance(x, (int, float)) and math.isfinite(x) and x >= 0 else "must be >= 0"


def whole(low: int) -> Callable[[Any], str | None]:
    """A whole number (not a bool) of at least `low`."""

    def check(x):
        ok = isinstance(x, int) and not isinstance(x, bool) and x >= low
        return None if ok else f"must be a whole number >= {low}"

    return check


def required(x) -> str | None:
    return "is required" if x is None else None  # with default None: an option one must give


def optional(check) -> Callable[[Any], str | None]:
    """`check`, but None (unset) is allowed too."""
    return lambda x: None if x is None else check(x)


def every(*checks) -> Callable[[Any], str | None]:
    """All of `checks`, in order: the first problem found (`every(required, output_file)`)."""

    def check(x):
        for one in checks:
            problem = one(x)
            if problem:
                return problem
        return None

    return check


# --- checks of the paths a command writes: the one place they are checked, at start-up ---


def output_folder(path: str) -> str | None:
    """A folder a command writes in (a run directory, a cache): an existing folder, or one that
    can be made, with the folders above it that are missing."""
    if not path:  # pathlib reads "" as the current folder
        return "must not be empty"
    target = pathlib.Path(path).expanduser()
    if target.exists() and not target.is_dir():
        return "is a file, not a folder; give a folder"
    return _writable(target)


def output_file(path: str) -> str | None:
    """A file a command writes (a tokenizer, a token file, a plot): in an existing folder, and not
    a folder itself. Frost's writer (frost.atomic) makes no folders for a file."""
    if not path:  # pathlib reads "" as the current folder
        return "must not be empty"
    target = pathlib.Path(path).expanduser()
    if target.is_dir():
        return "is a folder; give a file name"
    if not os.path.lexists(target.parent):
        return f"there is no folder {target.parent.absolute()} to write it in"
    return _writable(target.parent)


def _writable(folder: pathlib.Path) -> str | None:
    """None when `folder`, or the nearest folder above it that exists, takes a new entry; else why
    not. Tried, not guessed from permissions (root ignores them, and a read-only or virtual file
    system such as /proc refuses only when tried): a temporary folder is made there and removed,
    so the check leaves nothing behind."""
    existing = folder.absolute()
    while not os.path.lexists(existing):
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    try:
        tempfile.TemporaryDirectory(prefix=".frost-check-", dir=existing).cleanup()
    except OSError as e:
        return f"cannot write in {existing} ({e.strerror or e})"
    return None


def _meta(cls, name: str) -> dict:
    """A field's metadata, from the nearest class in the MRO that declared it with `option`."""
    for klass in cls.__mro__:
        f = getattr(klass, "__dataclass_fields__", {}).get(name)
        if f is not None and f.metadata:
            return f.metadata
    return {}


class Checked:
    """Mixin: a dataclass that validates its fields (then its own `check()`) when it is built."""

    def __post_init__(self):
        """Raise UsageError for the first field whose value is not allowed, then run `check()`."""
        for f in dataclasses.fields(self):
            meta = _meta(type(self), f.name)
            value = getattr(self, f.name)
            choices = meta.get("choices")
            check = meta.get("check")
            entries = value if isinstance(value, tuple) else (value,)
            problem = None
            if choices is not None and value not in choices:
                problem = f"choose one of {', '.join(map(str, choices))}"
            elif "" in entries and not meta.get("empty", False):
                problem = "must not be empty"
                value = ""  # the message shows the empty entry, not the whole tuple
            elif check is not None:
                problem = check(value)
            if problem:
                given = "" if value is None else f" {value!r}"
                raise UsageError(f"{flag(f.name)}{given}: {problem}")
        self.check()

    def check(self) -> None:
        """Cross-field rules of a job; raise UsageError."""


def _arg_type(hint):
    """The argparse type of a field annotation: int, float, str, bool (also inside `X | None`),
    tuple for `tuple[str, ...]`, or for `int | str` a number or a word (`--seeds 5`, `auto`)."""
    if typing.get_origin(hint) is tuple:
        return tuple
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    if args == [int, str]:
        return lambda text: int(text) if text.isdigit() else text
    return args[0] if args[0] in (int, float, str, bool) else str


def _defaults(defaults: list) -> str:
    """The help's default: one value, or each class's when they differ; none when unset."""
    values = {repr(d) for _, d in defaults}
    if values in ({"None"}, {"()"}):
        return ""
    if len(values) == 1:
        return f" (default {defaults[0][1]})"
    return " (default " + ", ".join(f"{d} ({label})" for label, d in defaults) + ")"


def add_options(parser: argparse.ArgumentParser, classes, labels=None) -> None:
    """One option per CLI field of the config classes (their union); each defaults to None, so
    `from_args` can tell which were given. `labels[i]` names class i in the defaults of the help."""
    seen = {}  # option name -> (type hint, metadata, [(label, default) of each class])
    for cls, label in zip(classes, labels or [c.__name__ for c in classes]):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            meta = _meta(cls, f.name)
            if not meta.get("cli", True):
                continue
            if f.name not in seen:
                seen[f.name] = (hints[f.name], meta, [])
            seen[f.name][2].append((label, f.default))
    for name, (hint, meta, defaults) in seen.items():
        kind = _arg_type(hint)
        choices = meta.get("choices")
        help = (meta.get("help", "") + _defaults(defaults)).replace("%", "%%")
        if kind is bool:  # --x / --no-x
            how = {"action": argparse.BooleanOptionalAction}
        elif kind is tuple:  # repeatable
            how = {"action": "append", "metavar": name.upper()}
        else:
            how = {"type": kind, "choices": choices, "metavar": None if choices else name.upper()}
        flags = [meta["short"], flag(name)] if meta.get("short") else [flag(name)]
        parser.add_argument(*flags, default=None, help=help, **how)
    before = parser.get_default("_config_options") or ()
    parser.set_defaults(_config_options=before + tuple(seen))


def from_args(
    cls, args: argparse.Namespace, command: str = "this command", also=(), **fixed
) -> Checked:
    """Build `cls` from the options given on the command line (plus `fixed` values). An option
    given that neither `cls` nor a class in `also` (the command's other configs, built by their
    own `from_args`) has a field for is refused, never ignored."""
    options = getattr(args, "_config_options", ())
    given = {k: v for k, v in vars(args).items() if k in options and v is not None}
    mine = {f.name for f in dataclasses.fields(cls)}
    others = {f.name for other in also for f in dataclasses.fields(other)}
    stray = sorted(set(given) - mine - others)
    if stray:
        raise UsageError(f"{', '.join(flag(s) for s in stray)}: not an option of {command}")
    taken = {k: tuple(v) if isinstance(v, list) else v for k, v in given.items() if k in mine}
    return cls(**taken, **fixed)


@dataclasses.dataclass(frozen=True)
class Launch(Checked):
    """The multi-process start-up options of every command that can span processes (each
    defaults to its environment variable; see frost.parallel.initialize)."""

    coordinator: str | None = option(
        None, "HOST:PORT of process 0, for multi-process runs (or FROST_COORDINATOR)"
    )
    num_processes: int | None = option(
        None, "number of processes (or FROST_NUM_PROCESSES)", optional(whole(1))
    )
    process_id: int | None = option(
        None, "this process's index (or FROST_PROCESS_ID)", optional(whole(0))
    )
