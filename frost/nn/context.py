"""Training mode, layer state and dropout keys, without threading them through every layer.

    logits, model = frost.nn.apply(model, x, train=True, key=key)   # inside your jitted step

Why this design: the model stays a pure value at the jit boundary (a step takes a model and
returns a new one), yet model code reads like PyTorch (`y = self.bn(self.conv(x))`), with no
`state` argument passed in and out of each layer by hand (Equinox's most common complaint).

`apply` opens a context for one forward pass. Inside it, layers ask `is_training()`;
BatchNorm reports its new running statistics with `record(self, ...)`, keyed by the layer
object itself (its position in the model tree); Dropout draws keys with `next_key()`, each
the caller's key folded with a per-call counter, so the same key gives the same masks.
When the forward pass returns, `apply` writes the recorded fields into a copy of the model
and returns `(output, updated_model)`.

Outside any context, layers run in evaluation mode: BatchNorm uses its running statistics,
Dropout is the identity. Call `apply` inside the same `jit`/`grad` as the forward pass, so the
recorded statistics belong to that trace. A layer object used twice in one pass records twice;
the last call wins.
"""

import contextvars
import dataclasses
from collections.abc import Callable
from typing import Any

import jax

from frost.nn.module import Module, is_module, map_children


@dataclasses.dataclass
class _Context:
    train: bool
    key: jax.Array | None
    # id(layer) -> (layer, {field: new value})
    records: dict = dataclasses.field(default_factory=dict)
    calls: int = 0


# The innermost open _Context of this thread (or asyncio task), None outside `apply`; `apply` sets
# it and, when the forward pass returns, restores the one it replaced (nested applies).
_context = contextvars.ContextVar("frost_nn_context", default=None)


def is_training() -> bool:
    """Whether the innermost open `apply` runs in training mode.

    Layers ask it: BatchNorm normalises with batch statistics and Dropout drops in training mode.

    Returns:
        True inside `apply(..., train=True)`; False inside `apply(..., train=False)` and outside
        any `apply` (evaluation mode).
    """
    ctx = _context.get()
    return ctx is not None and ctx.train


def record(layer: Module, **fields: jax.Array) -> None:
    """Called by a layer during `apply(train=True)` to replace some of its fields afterwards.

    Outside training mode it does nothing. The values are recorded with their gradients stopped.

    Arguments:
        layer: the layer object itself (the key of its position in the model tree).
        **fields: the new values of some of the layer's fields, by name.
    """
    if is_training():
        stopped = {k: jax.lax.stop_gradient(v) for k, v in fields.items()}
        _context.get().records[id(layer)] = (layer, stopped)


def next_key(layer: Module) -> jax.Array:
    """A fresh PRNG key for a random layer in training mode: `apply`'s key folded with a counter.

    Arguments:
        layer: the layer asking (named in the error when `apply` was given no key).

    Returns:
        A PRNG key, different at each call within one `apply`.
    """
    ctx = _context.get()
    if ctx is None or ctx.key is None:
        raise ValueError(
            f"{layer.describe()} needs a PRNG key in training mode: pass `key=` to the layer, "
            "or run the model through `frost.nn.apply(model, x, train=True, key=key)`"
        )
    ctx.calls += 1
    return jax.random.fold_in(ctx.key, ctx.calls)


def _write_back(tree, records: dict):
    found = set()

    def visit(x):
        if not isinstance(x, Module):
            return x
        if id(x) in records:
            found.add(id(x))
            x = x.replace(**records[id(x)][1])  # keeps the child objects, so their ids still match
        return map_children(x, lambda _, value: jax.tree.map(visit, value, is_leaf=is_module))

    out = jax.tree.map(visit, tree, is_leaf=is_module)
    lost = [layer for i, (layer, _) in records.items() if i not in found]
    if lost:
        raise ValueError(
            f"{lost[0].describe()} recorded new state (e.g. BatchNorm statistics) in apply(), but "
            "that layer object is not part of the model given to apply(): a copy or cast made "
            "during the forward pass would lose it. Cast or copy the model before apply(), not "
            "inside it."
        )
    return out


def apply(
    model: Callable[..., Any],
    *args: Any,
    train: bool = False,
    key: jax.Array | None = None,
    **kwargs: Any,
) -> tuple[Any, Any]:
    """Run `model(*args, **kwargs)` in training or evaluation mode and return the updated model.

    ```python
    logits, model = frost.nn.apply(model, x, train=True, key=key)  # inside the jitted step
    ```

    Arguments:
        model: a Module (or any callable PyTree of Modules); its layers may record new state
            (BatchNorm's running statistics) during the call.
        *args: the positional arguments of the forward pass, e.g. the (N, H, W, C) images.
        train: training mode (batch statistics, dropout) when True; evaluation mode otherwise.
        key: a PRNG key (`jax.random.key`) from which each Dropout draws its own; needed only in
            training mode by models with Dropout.
        **kwargs: keyword arguments of the forward pass.

    Returns:
        `(output, updated_model)`: whatever `model(*args, **kwargs)` returns, and `model` with
        the recorded fields written in (`model` itself when nothing was recorded).
    """
    ctx = _Context(train=train, key=key)
    token = _context.set(ctx)
    try:
        out = model(*args, **kwargs)
    finally:
        _context.reset(token)
    return out, (_write_back(model, ctx.records) if ctx.records else model)
