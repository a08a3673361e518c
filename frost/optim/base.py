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
tests/test_optax_suite.py runs optax's own alias, combine and transform tests against Frost's
functions.

Frost's transforms are not instances of `optax.GradientTransformation`, and cannot be without
importing optax. Optax defines it as a `typing.NamedTuple`, whose metaclass is plain `type`, so
`isinstance(x, optax.GradientTransformation)` is a nominal check that `type(x)` is optax's class
or a subclass of it. No hook admits another class: it is no ABC (there is no `register`), and the
`__instancecheck__` that decides lives on the metaclass, `type` itself. So a Frost transform would
have to be built from optax's class, which means importing optax, or finding it in `sys.modules`
and so making a transform's type depend on what was imported before it was built. Frost does
neither. In optax only `with_extra_args_support` looks at the type (optax.chain, masked,
partition, MultiSteps and inject_hyperparams call it on their inner transforms): it wraps a
transform that is not a `GradientTransformationExtraArgs` so that it ignores extra keyword
arguments, so a Frost `chain` inside optax.chain receives none (Frost's own transforms need none).
Code that insists on optax's type can convert, as the fields are the same, in the same order:

    optax.GradientTransformationExtraArgs(*frost.optim.adamw(3e-4))

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

from frost.tree import PyTree

Schedule = Callable[[jax.Array], jax.Array]  # step count (int32 scalar) -> value (float scalar)
ScalarOrSchedule = float | jax.Array | Schedule  # a constant, or a function of the step (optax's)
# which leaves a transform applies to: a tree of bools shaped like the params (or a prefix of it),
# or a function params -> such a tree (optax's MaskOrFn)
MaskOrFn = PyTree | Callable[[PyTree], PyTree]

HYPERPARAMS = ("learning_rate", "weight_decay", "momentum", "b1", "b2")


class GradientTransformation(NamedTuple):
    """A pair of pure functions that transform gradients into updates: optax's protocol.

    ```python
    state = tx.init(params)
    updates, state = tx.update(grads, state, params)
    ```

    Attributes:
        init: `init(params) -> state`: the initial state (a PyTree, usually a NamedTuple) for
            parameters shaped like `params`.
        update: `update(updates, state, params=None) -> (updates, state)`: the transformed
            updates, shaped like the input ones, and the next state. `params` is needed only by
            transforms that read the parameters (weight decay, the parameter EMA). An update may
            also take `**extra_args` (see `call_update`).
    """

    init: Callable  # params -> state
    update: Callable  # (updates, state, params=None) -> (updates, state)


class EmptyState(NamedTuple):
    """The state of a stateless transform: an empty NamedTuple, a PyTree with no leaves."""


class MaskedNode(NamedTuple):
    """Stands where a mask leaves a leaf out: an empty PyTree node, so inner transforms never see
    it."""


class MaskedState(NamedTuple):
    """The state of `masked`.

    Attributes:
        inner: the inner transform's state, built for the selected leaves only (`MaskedNode`s
            elsewhere).
    """

    inner: PyTree


class PartitionState(NamedTuple):
    """The state of `partition`.

    Attributes:
        inner_states: {label: MaskedState} in the order of `partition`'s transforms.
    """

    inner_states: dict  # label -> MaskedState


def hyperparam(x: float | jax.Array) -> jax.Array:
    """A hyper-parameter as stored in a state: a float32 scalar array (never weakly typed).

    Arguments:
        x: a Python number or a scalar array (traced or not).

    Returns:
        () float32 array of `x`'s value.
    """
    return jnp.asarray(x, jnp.float32)


def stateless(fn: Callable[[PyTree], PyTree]) -> GradientTransformation:
    """The transform `updates -> fn(updates)`, with no state (EmptyState).

    Arguments:
        fn: a function from an updates tree to an updates tree of the same structure.

    Returns:
        A GradientTransformation whose update ignores `params`.
    """
    return GradientTransformation(
        lambda params: EmptyState(), lambda updates, state, params=None: (fn(updates), state)
    )


def identity() -> GradientTransformation:
    """Updates unchanged, no state (optax.identity).

    Returns:
        A GradientTransformation with an `EmptyState`.
    """
    return stateless(lambda updates: updates)


def call_update(
    transform: GradientTransformation,
    updates: PyTree,
    state: PyTree,
    params: PyTree | None = None,
    **extra_args: Any,
) -> tuple[PyTree, PyTree]:
    """`transform.update(updates, state, params, **extra_args)`, the extra arguments given only if
    its update takes `**kwargs` (optax's GradientTransformationExtraArgs protocol).

    Arguments:
        transform: a Frost or optax transform.
        updates: the gradients (or updates so far), shaped like the params.
        state: `transform`'s state.
        params: the parameters, or None for a transform that does not read them.
        **extra_args: keyword arguments some transforms need (optax.polyak_sgd's `value=`);
            dropped for an update that does not take `**kwargs`.

    Returns:
        (updates, state): the transformed updates and `transform`'s next state.
    """
    kinds = [p.kind for p in inspect.signature(transform.update).parameters.values()]
    if inspect.Parameter.VAR_KEYWORD in kinds:
        return transform.update(updates, state, params, **extra_args)
    return transform.update(updates, state, params)


def chain(*transforms: GradientTransformation) -> GradientTransformation:
    """Apply transforms one after the other (optax.chain); the state is the tuple of their states.

    ```python
    opt = chain(clip_by_global_norm(1.0), scale_by_adam(), scale_by_learning_rate(3e-4))
    ```

    Arguments:
        *transforms: Frost or optax transforms, applied in the order given.

    Returns:
        A GradientTransformation whose update forwards extra keyword arguments to the links that
        take them (see `call_update`).
    """

    def init(params):
        return tuple(t.init(params) for t in transforms)

    def update(updates, state, params=None, **extra_args):
        new_state = []
        for t, s in zip(transforms, state, strict=True):
            updates, s = call_update(t, updates, s, params, **extra_args)
            new_state.append(s)
        return updates, tuple(new_state)

    return GradientTransformation(init, update)


def apply_updates(params: PyTree, updates: PyTree) -> PyTree:
    """params + updates, added in the wider dtype and returned in each parameter's own dtype.

    Arguments:
        params: the parameters.
        updates: a tree of the same structure (an optimizer's output).

    Returns:
        The new parameters: same structure, shapes and dtypes as `params`.
    """

    def add(p, u):
        wide = p.dtype if p.dtype.itemsize >= u.dtype.itemsize else u.dtype
        return (p.astype(wide) + u.astype(wide)).astype(p.dtype)

    return jax.tree.map(add, params, updates)


def _resolve(tree_or_fn, tree):
    """A mask or labels given as a function of the params, or as the tree itself. A callable PyTree
    (a Module of bools) is a tree: only a leaf, such as a function, is called."""
    is_fn = callable(tree_or_fn) and jax.tree_util.treedef_is_leaf(jax.tree.structure(tree_or_fn))
    return tree_or_fn(tree) if is_fn else tree_or_fn


def masked(inner: GradientTransformation, mask: MaskOrFn) -> GradientTransformation:
    """Apply `inner` only where `mask` is True; elsewhere updates pass through unchanged
    (optax.masked).

    Inner sees the selected leaves only (the others are `MaskedNode`s), so its state holds nothing
    for them and tree-wide steps (global-norm clipping) see only them.

    Arguments:
        inner: the transform to apply to the selected leaves.
        mask: a tree of Python bools shaped like the params (or a prefix of it), or a function
            params -> such a tree (`decay_mask`).

    Returns:
        A GradientTransformation whose state is a `MaskedState`.
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


def partition(
    transforms: dict[str, GradientTransformation], labels: PyTree | Callable[[PyTree], PyTree]
) -> GradientTransformation:
    """Send each leaf to the transform named by its label (optax.multi_transform / partition).

    ```python
    partition({"muon": muon_chain, "adam": adamw(3e-4)},
              lambda params: jax.tree.map(lambda p: "muon" if p.ndim == 2 else "adam", params))
    ```

    Arguments:
        transforms: {label: transform}; every label in `labels` must have one.
        labels: a tree of labels shaped like the params (or a prefix of it), or a function
            params -> such a tree.

    Returns:
        A GradientTransformation whose state is a `PartitionState`; its init raises ValueError for
        a label that has no transform.
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


def decay_mask(params: PyTree) -> PyTree:
    """True at leaves of rank >= 2 (weight matrices, kernels, embeddings), False at biases and
    norm scales: pass as `mask=` to weight-decay only the matrices, as nanoGPT does.

    Arguments:
        params: the parameters.

    Returns:
        A tree of Python bools shaped like `params`.
    """
    return jax.tree.map(lambda p: p.ndim >= 2, params)


def map_states(fn: Callable[[Any, str], Any], state: PyTree, prefix: str = "") -> PyTree:
    """Rebuild an optimizer state, replacing every NamedTuple `s` in it by `fn(s, prefix)`.

    Children are rebuilt first, so `fn` sees a NamedTuple whose inner states are already replaced.

    Arguments:
        fn: `fn(s, prefix) -> s'`, called on every NamedTuple state; `prefix` is the partition
            labels above `s` ("muon/"), "" outside any partition.
        state: an optimizer state (nested tuples, lists, dicts and NamedTuples).
        prefix: the labels above `state` itself.

    Returns:
        The rebuilt state, of the same structure where `fn` keeps it.
    """
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


def find_states(state: PyTree, state_type: type) -> list:
    """Every state of type `state_type` inside `state`, in order (children before their parents).

    ```python
    ema = find_states(opt_state, EmaState)[0].ema
    ```

    Arguments:
        state: an optimizer state.
        state_type: a NamedTuple state class (EmaState, ScaledState, SophiaState, ...).

    Returns:
        A list of the `state_type` instances found, empty if none.
    """
    return [s for s, _ in _named_states(state) if isinstance(s, state_type)]


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


def get_hyperparams(state: PyTree) -> dict[str, jax.Array]:
    """Every hyper-parameter stored in an optimizer state, by name.

    A name that occurs in several partitions is qualified by the label ('muon/learning_rate').

    Arguments:
        state: an optimizer state.

    Returns:
        {name: () float32 array}, in the state's order.
    """
    values = {(prefix, n): getattr(s, n) for s, prefix in _named_states(state) for n in s._fields}
    return {key: values[prefix, n] for (prefix, n), key in _hyper_keys(state).items()}


def set_hyperparams(state: PyTree, **values: float | jax.Array) -> PyTree:
    """A copy of `state` with some hyper-parameters replaced (same dtype and shape: no recompile).

    ```python
    state = set_hyperparams(state, learning_rate=1e-4, weight_decay=0.0)
    state = set_hyperparams(state, **{"muon/learning_rate": 0.01})
    ```

    Arguments:
        state: an optimizer state.
        **values: new values by the names `get_hyperparams` gives, each a scalar.

    Returns:
        The state with those values, cast to the stored dtype (float32).

    Raises:
        KeyError: a name the state does not hold.
        ValueError: a value that is not a scalar, or a learning rate that follows a schedule.
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
