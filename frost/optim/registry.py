"""Optimizers by name: the one registry behind `frost train --optimizer` and `frost audit`.

    entry = resolve("sophia")                 # or "adamw", ..., or "my_module:make"
    opt = entry.make(learning_rate, weight_decay=0.1, mask=decay_mask)
    entry.hessian                             # "gnb" | "hutchinson" | None: the step's
                                              # Sophia estimator

Every entry's `make(learning_rate, **hyperparams)` returns an optax-protocol
GradientTransformation. A user optimizer is named `MODULE:FUNCTION` (imported from sys.path, the
current directory first, which is taken off again: a local scipy.py never shadows a later
import) and follows the same signature; an optax optimizer works, e.g. `optax:adamw`. Its `make`
may also return `(optimizer, eval_params)`, where `eval_params(params, state)` gives the
parameters to evaluate (schedule-free AdamW's averaged point:
`optax.contrib.schedule_free_eval_params`); `build` then returns a `WithEval`. An exception in a
user's code is a UsageError of one line naming the exception and its file and line (`describe`).

Sophia needs a Hessian-diagonal estimate each refresh step: `hessian` names the estimator the
training step feeds it (Liu et al. 2023: Sophia-G uses Gauss-Newton-Bartlett,
Sophia-H Hutchinson).
"""

import functools
import hashlib
import importlib
import pathlib
import sys
import traceback
from collections.abc import Callable
from typing import Any, NamedTuple

import jax

from frost.config import UsageError
from frost.optim import optimizers
from frost.optim.base import GradientTransformation, ScalarOrSchedule, decay_mask


class Entry(NamedTuple):
    """A registry entry.

    Attributes:
        make: `make(learning_rate, **hyperparams)` -> a GradientTransformation, or
            (optimizer, eval_params).
        hessian: the Hessian-diagonal estimator the training step feeds a Sophia state: "gnb"
            (Gauss-Newton-Bartlett), "hutchinson", or None for optimizers without one.
        file: a user optimizer's module file; None for Frost's own.
        digest: a hash of that file, part of the key of its audit runs.
    """

    make: Callable  # (learning_rate, **hyperparams) -> GradientTransformation
    hessian: str | None = None
    file: str | None = None  # a user optimizer's module file
    digest: str | None = None  # a hash of that file, in the key of its audit runs


class WithEval(NamedTuple):
    """An optimizer whose parameters to evaluate are `eval_params(params, state)`.

    Attributes:
        init: the optimizer's init.
        update: the optimizer's update.
        eval_params: `eval_params(params, state)` -> the parameters to evaluate (schedule-free
            AdamW's averaged point).
    """

    init: Callable
    update: Callable
    eval_params: Callable


OPTIMIZERS = {
    # with Nesterov momentum 0.9
    "sgd": Entry(functools.partial(optimizers.sgd, momentum=0.9, nesterov=True)),
    "adam": Entry(optimizers.adam),
    "adamw": Entry(optimizers.adamw),
    "lion": Entry(optimizers.lion),
    "sophia": Entry(optimizers.sophia, "gnb"),
    "sophia-h": Entry(optimizers.sophia, "hutchinson"),
    "muon": Entry(optimizers.muon),
}
# files that are not a user's: Python's import machinery ("<frozen ...>"), Frost's, JAX's
_NOT_USER = ("<", str(pathlib.Path(__file__).parents[1]), str(pathlib.Path(jax.__file__).parent))
ALIASES = {"sgd-nesterov": "sgd"}  # other names of entries (the audit's, issue 13's)
NAMES = (*OPTIMIZERS, *ALIASES)  # every built-in name


def frost_own(name: str) -> bool:
    """Whether `name` is one of the registry's optimizers (not a user's MODULE:FUNCTION).

    Arguments:
        name: an --optimizer value.

    Returns:
        True for a name in OPTIMIZERS or ALIASES.
    """
    return ALIASES.get(name, name) in OPTIMIZERS


def resolve(name: str) -> Entry:
    """The registry entry for `name`, or a user's `MODULE:FUNCTION`, imported.

    Arguments:
        name: a registry name ("adamw", "sgd-nesterov", ...) or "MODULE:FUNCTION".

    Returns:
        The Entry; for a user's function, with its module file and that file's digest.

    Raises:
        UsageError: neither, or the module cannot be imported, or has no such function.
    """
    if frost_own(name):
        return OPTIMIZERS[ALIASES.get(name, name)]
    module, _, function = name.partition(":")
    if not (module and function):
        raise UsageError(
            f"--optimizer {name!r}: choose one of {', '.join(OPTIMIZERS)}, or MODULE:FUNCTION "
            "for your own make(learning_rate, **hyperparams)"
        )
    saved = list(sys.path)
    sys.path.insert(0, "")  # the current directory, for this import only
    try:
        code = importlib.import_module(module)
    except Exception as e:
        raise UsageError(f"--optimizer {name}: cannot import it ({describe(e)})") from None
    finally:
        sys.path[:] = saved
    make = getattr(code, function, None)
    if not callable(make):
        raise UsageError(f"--optimizer {name}: {module} has no function {function}")
    file = getattr(code, "__file__", None)
    digest = file and hashlib.sha256(pathlib.Path(file).read_bytes()).hexdigest()[:16]
    return Entry(make, None, file, digest)


def describe(e: BaseException, file: str | None = None) -> str:
    """An exception in one line, at the place where a user's code raised it.

    Arguments:
        e: the exception, with its traceback.
        file: the user's module file, whose last frame is the place; None: the last frame outside
            Frost, JAX and Python's import machinery (a SyntaxError names its own).

    Returns:
        "Type: first line of the message (at FILE:LINE)".
    """
    frames = [
        f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith(_NOT_USER)
    ]
    frames = [f for f in frames if f.filename == file] or frames
    if isinstance(e, SyntaxError):
        frames = [traceback.FrameSummary(e.filename, e.lineno, "")]
    lines = str(e).strip().splitlines() or [""]
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(e).__name__}: {lines[0]}{where}"


def build(
    name: str, learning_rate: ScalarOrSchedule, **hyperparams: Any
) -> GradientTransformation | WithEval:
    """`resolve(name).make(learning_rate, **hyperparams)`; the registry's own optimizers decay
    only matrices and kernels (`mask=decay_mask` unless given).

    Arguments:
        name: a registry name or "MODULE:FUNCTION" (see `resolve`).
        learning_rate: a float or a schedule (a function of the step count).
        **hyperparams: keyword arguments for `make` (weight_decay=, b1=, ...).

    Returns:
        The optimizer, or a WithEval where `make` returned (optimizer, eval_params).

    Raises:
        UsageError: a hyper-parameter the function rejects (any exception in `make`), or a result
            that is neither a GradientTransformation nor (optimizer, eval_params).
    """
    if frost_own(name):
        hyperparams.setdefault("mask", decay_mask)
    entry = resolve(name)
    try:
        opt = entry.make(learning_rate, **hyperparams)
    except Exception as e:
        raise UsageError(f"--optimizer {name}: {describe(e, entry.file)}") from None
    if isinstance(opt, tuple) and len(opt) == 2 and hasattr(opt[0], "update"):
        opt = WithEval(opt[0].init, opt[0].update, opt[1])  # (optimizer, eval_params)
    if not (callable(getattr(opt, "init", None)) and callable(getattr(opt, "update", None))):
        raise UsageError(
            f"--optimizer {name} returned {type(opt).__name__}, not a GradientTransformation "
            "(an object with init and update) or (optimizer, eval_params)"
        )
    return opt
