"""Optimizers by name: the one registry behind `frost train --optimizer` and `frost audit`.

    entry = resolve("sophia")                 # or "adamw", ..., or "my_module:make"
    opt = entry.make(learning_rate, weight_decay=0.1, mask=decay_mask)
    entry.hessian                             # "gnb" | "hutchinson" | None: the step's Sophia
    estimator

Every entry's `make(learning_rate, **hyperparams)` returns an optax-protocol
GradientTransformation. A user optimizer is named `MODULE:FUNCTION` (imported from sys.path, the
current directory first) and follows the same signature; an optax optimizer works, e.g.
`optax:adamw`. Sophia needs a Hessian-diagonal estimate each refresh step: `hessian` names the
estimator the training step feeds it (Liu et al. 2023: Sophia-G uses Gauss-Newton-Bartlett,
Sophia-H Hutchinson).
"""

import functools
import importlib
import sys
from collections.abc import Callable
from typing import NamedTuple

from frost.config import UsageError
from frost.optim import optimizers as o
from frost.optim.base import decay_mask


class Entry(NamedTuple):
    make: Callable  # (learning_rate, **hyperparams) -> GradientTransformation
    hessian: str | None = None


OPTIMIZERS = {
    # with Nesterov momentum 0.9
    "sgd": Entry(functools.partial(o.sgd, momentum=0.9, nesterov=True)),
    "adam": Entry(o.adam),
    "adamw": Entry(o.adamw),
    "lion": Entry(o.lion),
    "sophia": Entry(o.sophia, "gnb"),
    "sophia-h": Entry(o.sophia, "hutchinson"),
    "muon": Entry(o.muon),
}
ALIASES = {"sgd-nesterov": "sgd"}  # other names of entries (the audit's, issue 13's)
NAMES = (*OPTIMIZERS, *ALIASES)  # every built-in name


def frost_own(name: str) -> bool:
    """Whether `name` is one of the registry's optimizers (not a user's MODULE:FUNCTION)."""
    return ALIASES.get(name, name) in OPTIMIZERS


def resolve(name: str) -> Entry:
    """The registry entry for `name`, or a user's `MODULE:FUNCTION`; UsageError if neither."""
    if frost_own(name):
        return OPTIMIZERS[ALIASES.get(name, name)]
    module, _, function = name.partition(":")
    if not (module and function):
        raise UsageError(
            f"--optimizer {name!r}: choose one of {', '.join(OPTIMIZERS)}, or MODULE:FUNCTION "
            "for your own make(learning_rate, **hyperparams)"
        )
    if "" not in sys.path:
        sys.path.insert(0, "")
    try:
        make = getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as e:
        raise UsageError(
            f"--optimizer {name!r}: cannot import it ({type(e).__name__}: {e})"
        ) from None
    if not callable(make):
        raise UsageError(f"--optimizer {name!r}: {function} is not a function")
    return Entry(make)


def build(name: str, learning_rate, **hyperparams):
    """`resolve(name).make(learning_rate, **hyperparams)`; the registry's own optimizers decay
    only matrices and kernels (`mask=decay_mask` unless given). A hyper-parameter the function
    rejects, or a result that is not a GradientTransformation, is a UsageError naming it."""
    if frost_own(name):
        hyperparams.setdefault("mask", decay_mask)
    try:
        opt = resolve(name).make(learning_rate, **hyperparams)
    except (TypeError, ValueError) as e:
        raise UsageError(f"--optimizer {name!r}: {e}") from None
    if not (callable(getattr(opt, "init", None)) and callable(getattr(opt, "update", None))):
        raise UsageError(
            f"--optimizer {name!r} returned {type(opt).__name__}, not a GradientTransformation "
            "(an object with init and update)"
        )
    return opt
