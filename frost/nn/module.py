"""Modules are frozen dataclasses registered as PyTrees.

    class Affine(Module):
        scale: jax.Array
        shift: jax.Array
        features: int = static()          # configuration: kept in the tree definition

        def __call__(self, x):            # (B, features) -> (B, features)
            return x * self.scale + self.shift

Every field is a PyTree child unless it is declared with `static()`. Children are arrays,
sub-modules, or tuples/lists/dicts of them; static fields are hashable configuration (sizes,
flags, activation functions) and live in the tree definition, so `jax.jit`, `jax.grad`,
`jax.vmap` and `jax.tree.map` take a model directly and only recompile when the
configuration changes, never when array values do.

Subclasses are turned into dataclasses automatically. A subclass may write its own
`__init__` that assigns `self.field = ...` (initialisation from a key); after `__init__`
returns the instance is frozen and `model.replace(field=value)` makes a modified copy.
Unflattening (inside jit/grad/tree.map) bypasses `__init__`.
"""

import dataclasses
import functools
from typing import Any

import jax
import numpy as np

from frost.tree import PyTree

_INIT_FLAG = "_frost_initialising"


def static(default: Any = dataclasses.MISSING) -> Any:
    """Declare a configuration field: part of the tree definition, not a leaf.

    ```python
    class Scale(Module):
        factor: jax.Array
        features: int = static()  # a size: jit recompiles when it changes
    ```

    Arguments:
        default: the field's default value (hashable: it lives in the tree definition); none by
            default, so the field must be given.

    Returns:
        A `dataclasses.field` marked static, to assign to a class attribute of a Module.
    """
    return dataclasses.field(default=default, metadata={"static": True})


def buffer(default: Any = dataclasses.MISSING) -> Any:
    """Declare a non-trainable array field (BatchNorm's running statistics).

    A buffer is a PyTree child like a parameter (it is saved, jitted and sharded), but it is
    left out of `param_count`, and `trainable_mask` marks it False so an optimizer can skip it.

    Arguments:
        default: the field's default value; none by default, so the field must be set.

    Returns:
        A `dataclasses.field` marked as a buffer, to assign to a class attribute of a Module.
    """
    return dataclasses.field(default=default, metadata={"buffer": True})


def is_module(x) -> bool:
    return isinstance(x, Module)


def map_children(module, fn) -> Any:
    """`module` with each child (non-static) field's value replaced by `fn(field, value)`."""
    children = [f for f in dataclasses.fields(module) if not f.metadata.get("static")]
    return module.replace(**{f.name: fn(f, module.__dict__[f.name]) for f in children})


def buffer_mask(tree: PyTree) -> PyTree:
    """Mark the leaves that sit inside a `buffer()` field of some Module in `tree`.

    Arguments:
        tree: a Module, or any PyTree holding Modules and arrays.

    Returns:
        A tree of bools with `tree`'s structure: True at buffer leaves, False at every other leaf.
    """

    def child(field, value):
        if field.metadata.get("buffer"):
            return jax.tree.map(lambda _: True, value)
        return buffer_mask(value)

    def node(x):  # a module (its children masked field by field) or a leaf outside any buffer
        return map_children(x, child) if isinstance(x, Module) else False

    return jax.tree.map(node, tree, is_leaf=is_module)


def trainable_mask(tree: PyTree) -> PyTree:
    """Mark the trainable leaves of `tree`, the opposite of `buffer_mask`; pass it to an optimizer's
    mask so that buffers (BatchNorm's running statistics) are left alone.

    Arguments:
        tree: a Module, or any PyTree holding Modules and arrays.

    Returns:
        A tree of bools with `tree`'s structure: True at parameters, False at buffers.
    """
    return jax.tree.map(lambda b: not b, buffer_mask(tree))


def update_buffers(model: PyTree, source: PyTree) -> PyTree:
    """Copy the buffers of `source` into `model`, keeping `model`'s parameters.

    Arguments:
        model: a Module (or a tree of them) whose parameters are kept.
        source: a tree of the same structure (e.g. the model `frost.nn.apply` returned, or an
            averaged copy) whose buffer leaves are taken.

    Returns:
        `model` with each buffer leaf replaced by the one at the same position in `source`.
    """
    return jax.tree.map(lambda is_buf, m, s: s if is_buf else m, buffer_mask(model), model, source)


def shape_error(layer, expected: str, x) -> ValueError:
    """The error every layer raises for a bad input: names the layer and both shapes."""
    got = repr(x)
    if hasattr(x, "shape"):
        got = f"shape {tuple(x.shape)} and dtype {np.dtype(x.dtype).name}"
    return ValueError(f"{layer.describe()} expected input {expected}, got {got}")


def expand_to(v, ndim: int) -> jax.Array:
    """Reshape a trailing-axes array to rank `ndim` by adding leading 1s (explicit broadcasting,
    since Frost's tests run with rank promotion set to raise)."""
    return v.reshape((1,) * (ndim - v.ndim) + v.shape)


def _wrap_init(user_init):
    def __init__(self, *args, **kwargs):
        if self.__dict__.get(_INIT_FLAG):  # nested super().__init__ call
            return user_init(self, *args, **kwargs)
        object.__setattr__(self, _INIT_FLAG, True)
        try:
            user_init(self, *args, **kwargs)
        finally:
            del self.__dict__[_INIT_FLAG]
        missing = [f.name for f in dataclasses.fields(self) if f.name not in self.__dict__]
        if missing:
            raise TypeError(f"{type(self).__name__}.__init__ did not set field(s) {missing}")

    # its name, docstring and signature (__wrapped__)
    return functools.update_wrapper(__init__, user_init)


class Module:
    """Base class of every Frost layer and model: a frozen dataclass registered as a PyTree.

    A subclass declares its fields as class annotations: array and sub-module fields are the
    tree's children (leaves, once flattened), fields declared with `static()` are configuration
    kept in the tree definition, and fields declared with `buffer()` are non-trainable arrays. The
    subclass becomes a dataclass whose constructor takes those fields, unless it writes its own
    `__init__` (see the module docstring). `Module` itself takes no arguments.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # own or inherited
        custom = "__init__" in cls.__dict__ or getattr(cls, "_frost_custom_init", False)
        dataclasses.dataclass(cls, init=not custom, repr=False, eq=False)
        # wrap ours, or the dataclass-generated one (an inherited one is wrapped)
        if "__init__" in cls.__dict__:
            cls.__init__ = _wrap_init(cls.__dict__["__init__"])
        cls._frost_custom_init = custom
        children = tuple(f.name for f in dataclasses.fields(cls) if not f.metadata.get("static"))
        statics = tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("static"))
        keys = tuple(jax.tree_util.GetAttrKey(n) for n in children)

        def flatten(m):
            return tuple(m.__dict__[n] for n in children), tuple(m.__dict__[n] for n in statics)

        def flatten_with_keys(m):
            kids, aux = flatten(m)
            return tuple(zip(keys, kids)), aux

        def unflatten(aux, kids):
            m = object.__new__(cls)
            m.__dict__.update(zip(children + statics, (*kids, *aux)))
            return m

        jax.tree_util.register_pytree_with_keys(
            cls, flatten_with_keys, unflatten, flatten_func=flatten
        )

    def __setattr__(self, name, value):
        if self.__dict__.get(_INIT_FLAG):
            return object.__setattr__(self, name, value)
        raise dataclasses.FrozenInstanceError(
            f"cannot set {type(self).__name__}.{name}: modules are immutable. "
            f"Use `model = model.replace({name}=...)` or `jax.tree.map` to make a new one."
        )

    def __delattr__(self, name):
        raise dataclasses.FrozenInstanceError(
            f"cannot delete {type(self).__name__}.{name}: modules are immutable"
        )

    def replace(self, **changes) -> "Module":
        """A copy with some fields changed (does not call `__init__`)."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = set(changes) - names
        if unknown:
            raise TypeError(
                f"{type(self).__name__} has no field(s) {sorted(unknown)}; fields are "
                f"{sorted(names)}"
            )
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__, **changes)
        return new

    def param_count(self) -> int:
        """Number of scalars in the floating-point parameter leaves (buffers excluded)."""
        params = jax.tree.map(lambda x, b: None if b else x, self, buffer_mask(self))
        return sum(
            int(np.prod(x.shape))
            for x in jax.tree.leaves(params)
            if hasattr(x, "dtype") and np.issubdtype(x.dtype, np.inexact)
        )

    def describe(self) -> str:
        """A one-line name with the configuration, used in error messages."""
        statics = [
            f"{f.name}={_leaf_repr(self.__dict__[f.name])}"
            for f in dataclasses.fields(self)
            if f.metadata.get("static")
        ]
        return f"{type(self).__name__}({', '.join(statics)})"

    def __repr__(self) -> str:
        return _repr(self, 0)


def _leaf_repr(x) -> str:
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return f"{np.dtype(x.dtype).name}{list(x.shape)}"
    if callable(x) and hasattr(x, "__name__"):
        return x.__name__
    return repr(x)


def _repr(obj, depth: int) -> str:
    pad = "  " * (depth + 1)
    if isinstance(obj, Module):
        parts = [
            f"{f.name}={_repr(obj.__dict__.get(f.name), depth + 1)}"
            for f in dataclasses.fields(obj)
        ]
        if not any("\n" in p for p in parts) and sum(map(len, parts)) < 80:
            return f"{type(obj).__name__}({', '.join(parts)})"
        body = ",\n".join(pad + p for p in parts)
        return f"{type(obj).__name__}(\n{body}\n{'  ' * depth})"
    if isinstance(obj, (list, tuple)) and any(isinstance(v, Module) for v in obj):
        body = ",\n".join(f"{pad}{_repr(v, depth + 1)}" for v in obj)
        open_, close = ("[", "]") if isinstance(obj, list) else ("(", ")")
        return f"{open_}\n{body}\n{'  ' * depth}{close}"
    if isinstance(obj, (list, tuple)):
        return "(" + ", ".join(_repr(v, depth) for v in obj) + ("," if len(obj) == 1 else "") + ")"
    return _leaf_repr(obj)
