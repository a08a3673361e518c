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
    ctx = _context.get()
    return ctx is not None and ctx.train


def record(layer: Module, **fields) -> None:
    """Called by a layer during `apply(train=True)` to replace some of its fields afterwards."""
    if is_training():
        stopped = {k: jax.lax.stop_gradient(v) for k, v in fields.items()}
        _context.get().records[id(layer)] = (layer, stopped)


def next_key(layer: Module) -> jax.Array:
    """A fresh PRNG key for a random layer in training mode."""
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
    model, *args, train: bool = False, key: jax.Array | None = None, **kwargs
) -> tuple[Any, Any]:
    """Run `model(*args, **kwargs)` in train or eval mode; return `(output, updated_model)`."""
    ctx = _Context(train=train, key=key)
    token = _context.set(ctx)
    try:
        out = model(*args, **kwargs)
    finally:
        _context.reset(token)
    return out, (_write_back(model, ctx.records) if ctx.records else model)
