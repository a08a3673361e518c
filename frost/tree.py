"""Two PyTree helpers every floor uses: pick between two trees leaf by leaf, and name the leaves.

where(finite, new, old)        # each leaf jnp.where(finite, new_leaf, old_leaf)
names({"model": m})            # [("model.blocks.0.conv1.weight", leaf), ...]
"""

from typing import Any

import jax
import jax.numpy as jnp

PyTree = Any  # nested tuples, lists, dicts, NamedTuples and Modules with arrays at the leaves


def where(cond: jax.Array, a, b) -> Any:
    """The tree of `a` where `cond` holds and `b` elsewhere; `cond` broadcasts against each leaf
    (a scalar picks a whole tree, a (B,) vector picks per environment in a batched state)."""

    def pick(x, y):
        c = jnp.reshape(cond, jnp.shape(cond) + (1,) * (jnp.ndim(x) - jnp.ndim(cond)))
        return jnp.where(c, x, y)

    return jax.tree.map(pick, a, b)


def names(tree) -> list[tuple[str, object]]:
    """(dotted PyTree path, leaf) pairs in leaf order, e.g. 'model.blocks.0.conv1.weight'."""
    return [
        (jax.tree_util.keystr(path, simple=True, separator="."), leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
    ]
