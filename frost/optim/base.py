"""The optimizer protocol, exactly optax's, and the glue around it.

    opt = chain(clip_by_global_norm(1.0), adamw(3e-4))
    state = opt.init(params)
    updates, state = opt.update(grads, state, params)   # params: needed by weight decay, EMA
    params = apply_updates(params, updates)

A transform is `GradientTransformation(init, update)`. Since only the two attribute names
matter, an optax transform can sit inside a Frost `chain` and a Frost transform inside
`optax.chain` (tests/test_optim.py shows both). As in optax, `update` may take extra keyword
arguments (`value=` for optax.polyak_sgd, a line search's `value_fn=`): `chain`, `masked` and
`partition` accept any and forward them to the links whose `update` takes `**kwargs`, so a link
that needs one gets it and the others are called without (optax.with_extra_args_support).
tests/test_optax_suite.py runs optax's own alias tests against Frost's adam, adamw, lion, sgd.

Hyper-parameters live in the state. Every transform stores the hyper-parameters a run may want
to change (learning rate, weight decay, momentum and betas) as float32 scalar arrays in its
NamedTuple state, under the names in `HYPERPARAMS`. `jax.jit` traces them like any other state
array, so changing one between steps neither recompiles nor changes the arithmetic:

    get_hyperparams(state)                      # {'learning_rate': Array(3e-4), 'b1': ..., ...}
    state = set_hyperparams(state, learning_rate=1e-4)

A name that occurs in several partitions (Muon's two learning rates) is qualified by the
partition label: 'muon/learning_rate', 'adam/learning_rate'.
"""

import inspect
from collections import Counter
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

Schedule = Callable[[jax.Array], jax.Array]  # step count (int32 scalar) -> value (float scalar)
ScalarOrSchedule = float | jax.Array | Schedule  # a constant, or a function of the step (optax's)

HYPERPARAMS = ("learning_rate", "weight_decay", "momentum", "b1", "b2")


class GradientTransformation(NamedTuple):
    init: Callable  # params -> state
    update: Callable  # (updates, state, params=None) -> (updates, state)


class EmptyState(NamedTuple):
    """The state of a stateless transform."""


class MaskedNode(NamedTuple):
    """Stands where a mask leaves a leaf out: an empty PyTree node, so inner transforms never see
    it."""


class MaskedState(NamedTuple):
    inner: Any


class PartitionState(NamedTuple):
    inner_states: dict  # label -> MaskedState


def hyperparam(x) -> jax.Array:
    """A hyper-parameter as stored in a state: a float32 scalar array (never weakly typed)."""
    return jnp.asarray(x, jnp.float32)


def stateless(fn) -> GradientTransformation:
    """The transform `updates -> fn(updates)`, with no state."""
    return GradientTransformation(
        lambda params: EmptyState(), lambda updates, state, params=None: (fn(updates), state)
    )


def identity() -> GradientTransformation:
    """Updates unchanged, no state (optax.identity)."""
    return stateless(lambda updates: updates)


def call_update(t, updates, state, params=None, **extra_args):
    """`t.update(updates, state, params, **extra_args)`, the extra arguments given only if its
    update takes `**kwargs` (optax's GradientTransformationExtraArgs protocol)."""
    kinds = [p.kind for p in inspect.signature(t.update).parameters.values()]
    if inspect.Parameter.VAR_KEYWORD in kinds:
        return t.update(updates, state, params, **extra_args)
    return t.update(updates, state, params)


def chain(*transforms) -> GradientTransformation:
    """Apply transforms one after the other; the state is the tuple of their states."""

    def init(params):
        return tuple(t.init(params) for t in transforms)

    def update(updates, state, params=None, **extra_args):
        new_state = []
        for t, s in zip(transforms, state, strict=True):
            updates, s = call_update(t, updates, s, params, **extra_args)
            new_state.append(s)
        return updates, tuple(new_state)

    return GradientTransformation(init, update)


def apply_updates(params, updates):
    """params + updates, added in the wider dtype and returned in each parameter's own dtype."""

    def add(p, u):
        wide = p.dtype if p.dtype.itemsize >= u.dtype.itemsize else u.dtype
        return (p.astype(wide) + u.astype(wide)).astype(p.dtype)

    return jax.tree.map(add, params, updates)


def _resolve(tree_or_fn, tree):
    """A mask or labels given as a function of the params, or as the tree itself. A callable PyTree
    (a Module of bools) is a tree: only a leaf, such as a function, is called."""
    is_fn = callable(tree_or_fn) and jax.tree_util.treedef_is_leaf(jax.tree.structure(tree_or_fn))
    return tree_or_fn(tree) if is_fn else tree_or_fn


def masked(inner, mask) -> GradientTransformation:
    """Apply `inner` only where `mask` is True; elsewhere updates pass through unchanged.

    `mask` is a tree of Python bools shaped like the params (or a prefix of it), or a function
    params -> such a tree. Inner sees the selected leaves only (the others are `MaskedNode`s), so
    its state holds nothing for them and tree-wide steps (global-norm clipping) see only them.
    """

    def select(tree, m):
        return jax.tree.map(lambda keep, x: x if keep else MaskedNode(), m, tree)

    def init(params):
        return MaskedState(inner.init(select(params, _resolve(mask, params))))

    def update(updates, state, params=None, **extra_args):
        m = _resolve(mask, updates)
        chosen = None if params is None else select(params, m)
        new, inner_state = call_update(inner, select(updates, m), state.inner, chosen, **extra_args)
        out = jax.tree.map(lambda keep, n, u: n if keep else u, m, new, updates)
        return out, MaskedState(inner_state)

    return GradientTransformation(init, update)


def partition(transforms: dict, labels) -> GradientTransformation:
    """Send each leaf to the transform named by its label (optax.multi_transform / partition).

    `labels` is a tree of strings shaped like the params, or a function params -> such a tree:

        partition({"muon": muon_chain, "adam": adamw(3e-4)},
                  lambda params: jax.tree.map(lambda p: "muon" if p.ndim == 2 else "adam", params))
    """

    def mask(label):
        return lambda tree: jax.tree.map(lambda lab: lab == label, _resolve(labels, tree))

    # The masks are disjoint, so applying the masked transforms in turn partitions.
    parts = chain(*(masked(t, mask(k)) for k, t in transforms.items()))

    def init(params):
        unknown = set(jax.tree.leaves(_resolve(labels, params))) - set(transforms)
        if unknown:
            raise ValueError(
                f"partition: no transform for label(s) {sorted(unknown)}; "
                f"transforms are given for {sorted(transforms)}"
            )
        return PartitionState(dict(zip(transforms, parts.init(params))))

    def update(updates, state, params=None, **extra_args):
        inner = tuple(state.inner_states[k] for k in transforms)
        updates, states = parts.update(updates, inner, params, **extra_args)
        return updates, PartitionState(dict(zip(transforms, states)))

    return GradientTransformation(init, update)


def decay_mask(params):
    """True at leaves of rank >= 2 (weight matrices, kernels, embeddings), False at biases and
    norm scales: pass as `mask=` to weight-decay only the matrices, as nanoGPT does."""
    return jax.tree.map(lambda p: p.ndim >= 2, params)


def map_states(fn, state, prefix: str = ""):
    """Rebuild an optimizer state, replacing every NamedTuple `s` in it by `fn(s, prefix)`.

    Children are rebuilt first; `prefix` is the partition labels above `s` ("muon/")."""
    if isinstance(state, PartitionState):
        return PartitionState(
            {k: map_states(fn, s, f"{prefix}{k}/") for k, s in state.inner_states.items()}
        )
    if isinstance(state, tuple) and hasattr(state, "_fields"):
        return fn(type(state)(*(map_states(fn, s, prefix) for s in state)), prefix)
    if isinstance(state, (tuple, list)):
        return type(state)(map_states(fn, s, prefix) for s in state)
    if isinstance(state, dict):
        return {k: map_states(fn, s, prefix) for k, s in state.items()}
    return state


def _named_states(state) -> list:
    """[(s, prefix)] for every NamedTuple `s` inside `state`, in map_states' order (children
    first)."""
    found = []

    def visit(s, prefix):
        found.append((s, prefix))
        return s

    map_states(visit, state)
    return found


def find_states(state, cls) -> list:
    """Every state of type `cls` inside `state`, in order."""
    return [s for s, _ in _named_states(state) if isinstance(s, cls)]


def _hyper_keys(state) -> dict:
    """{(prefix, field name): key} for every hyper-parameter; a key is qualified only where
    ambiguous."""
    found = [
        (prefix, n) for s, prefix in _named_states(state) for n in s._fields if n in HYPERPARAMS
    ]
    counts = Counter(n for _, n in found)
    keys = {(p, n): n if counts[n] == 1 else p + n for p, n in found}
    if len(set(keys.values())) < len(found):
        raise ValueError(
            f"hyper-parameter names clash in this state: {[p + n for p, n in found]}; "
            "put the transforms that share a name in different partition()s"
        )
    return keys


def get_hyperparams(state) -> dict:
    """{name: float32 scalar} of every hyper-parameter stored in an optimizer state."""
    values = {(prefix, n): getattr(s, n) for s, prefix in _named_states(state) for n in s._fields}
    return {key: values[prefix, n] for (prefix, n), key in _hyper_keys(state).items()}


def set_hyperparams(state, **values):
    """A copy of `state` with some hyper-parameters replaced (same dtype and shape: no recompile).

    state = set_hyperparams(state, learning_rate=1e-4, weight_decay=0.0)
    state = set_hyperparams(state, **{"muon/learning_rate": 0.01})
    """
    keys = _hyper_keys(state)
    unknown = set(values) - set(keys.values())
    if unknown:
        raise KeyError(
            f"no hyper-parameter(s) {sorted(unknown)} in this optimizer state; "
            f"it has {sorted(keys.values())}"
        )

    def replace(s, prefix):
        changes = {n: values[keys[prefix, n]] for n in s._fields if keys.get((prefix, n)) in values}
        for n, v in changes.items():
            if n in getattr(type(s), "scheduled", ()):
                raise ValueError(
                    f"{keys[prefix, n]} follows a schedule (a function of the step count); build "
                    "the optimizer with another schedule, or with a float to set it by hand"
                )
            if jnp.shape(v) != ():
                raise ValueError(f"{keys[prefix, n]} must be a scalar, got shape {jnp.shape(v)}")
        return s._replace(**{n: jnp.asarray(v, getattr(s, n).dtype) for n, v in changes.items()})

    return map_states(replace, state)
