"""Batched MuZero and Gumbel MuZero tree search in jax.numpy, with mctx's interface (Babuschkin
et al. 2020, github.com/google-deepmind/mctx), so `from frost.rl import search as mctx` switches.
MuZero's search follows Schrittwieser et al. 2020, "Mastering Atari, Go, chess and shogi by
planning with a learned model" (arXiv 1911.08265); Gumbel MuZero's, Danihelka et al. 2022,
"Policy improvement by planning with Gumbel" (ICLR).

```python
root = RootFnOutput(prior_logits=logits, value=v, embedding=h)     # (B, A), (B,), (B, ...)
def recurrent_fn(params, key, action, embedding):                  # action (B,)
    return RecurrentFnOutput(reward, discount, prior_logits, value), new_embedding
out = gumbel_muzero_policy(params, key, root, recurrent_fn, num_simulations=8)
out.action, out.action_weights, out.search_tree                    # (B,), (B, A), Tree
```

The tree of every root is a set of fixed-size arrays (`Tree`: N = num_simulations + 1 nodes, the
root at index ROOT = 0), so one jitted program searches a whole batch. A simulation goes down
from the root choosing actions until it meets an unexpanded action (`_simulate`), evaluates it
with one `recurrent_fn` call for the whole batch (`_expand`), and backs the leaf's value up to
the root (`_backward`). Where mctx vmaps an unbatched tree through while loops that carry the
whole tree, here every step works on rows of the batched tree. The walk down keeps only where
it is (the node, the action chosen there, the child it leads to), not the path; the backup then
climbs from the leaf through `Tree.parents`, one edge of every root per iteration of a while
loop, each iteration updating each statistic of the parents with one scatter (a root already
reached writes out of range, and the scatter drops it), until every root is reached.

Two markers, as mctx's `Tree.NO_PARENT` and `Tree.UNVISITED`, both -1: `NO_PARENT` is the parent
(and the action from the parent) of the root and of nodes not yet expanded, `UNVISITED` the
child index of an action not yet expanded.

A discount of 0 ends an episode inside the tree: no value flows back past it. Invalid actions
(`invalid_actions` (B, A), 1 = invalid) are masked at the root, as in mctx. A root whose actions
are all invalid (a terminal state) has no valid answer: the search then visits action 0 in every
simulation and returns it, as mctx 0.0.71 does, MuZero's with weight 1.0 on it, Gumbel MuZero's
with uniform weights over the invalid actions. A concrete mask (a NumPy or JAX array, a constant
under jit too) with such a row is refused, naming the row. A traced mask (an argument of a jitted
function) cannot be refused when traced; where such roots can happen, check for them with
checkify:

```python
from jax.experimental import checkify

def act(key, root, invalid):  # invalid (B, A)
    checkify.check(jnp.any(invalid == 0, axis=-1).all(), "a root has no valid action")
    return gumbel_muzero_policy(params, key, root, recurrent_fn, 8, invalid)

error, out = jax.jit(checkify.checkify(act))(key, root, invalid)
error.throw()  # JaxRuntimeError: a root has no valid action (`check` failed)
```

The shapes of `root`'s fields, of `invalid_actions` and of what `recurrent_fn` returns (and the
structure of its new embedding) are checked when the search is traced, as mctx's chex assertions
check them: they are static, so the compiled search pays nothing. A wrong one is a ValueError of
one line naming the field, the shape expected and the shape received.
"""

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from frost.tree import PyTree

f32 = jnp.float32
ROOT = 0  # the root's node index (mctx's Tree.ROOT_INDEX)
NO_PARENT = -1  # `parents` and `action_from_parent` of the root and of nodes not yet expanded
UNVISITED = -1  # `children_index` of an action not yet expanded

# (params, key, action (B,), embedding (B, ...)) -> (RecurrentFnOutput, new embedding (B, ...))
RecurrentFn = Callable[[PyTree, jax.Array, jax.Array, PyTree], tuple["RecurrentFnOutput", PyTree]]


class RootFnOutput(NamedTuple):
    """The network's evaluation of the roots, where the search starts (mctx's `RootFnOutput`).

    Attributes:
        prior_logits: (B, A) float array; the policy's logits at each root.
        value: (B,) float array; the value of each root.
        embedding: a PyTree of arrays with a leading B axis, (B, ...); each root's state, as
            `recurrent_fn` takes it.
    """

    prior_logits: jax.Array  # (B, A)
    value: jax.Array  # (B,)
    embedding: PyTree  # (B, ...)


class RecurrentFnOutput(NamedTuple):
    """What `recurrent_fn` returns for one action from each of B nodes, beside the new embedding
    (mctx's `RecurrentFnOutput`).

    Attributes:
        reward: (B,) float array; the reward of the action.
        discount: (B,) float array; the discount of the values after it, 0 where the episode
            ended.
        prior_logits: (B, A) float array; the policy's logits at the new node.
        value: (B,) float array; the value of the new node.
    """

    reward: jax.Array  # (B,)
    discount: jax.Array  # (B,) 0 where the episode ended
    prior_logits: jax.Array  # (B, A)
    value: jax.Array  # (B,)


class Tree(NamedTuple):
    """The search trees of a batch: B roots, N nodes each, A actions (mctx's `Tree`). A node's
    index is its row; the root is ROOT, node i + 1 the one simulation i expanded.

    Attributes:
        node_visits: (B, N) int32; the visits of each node.
        raw_values: (B, N); the network's value of each node when it was expanded.
        node_values: (B, N); the mean of the values backed up through each node.
        parents: (B, N) int32; each node's parent, NO_PARENT for the root and unexpanded nodes.
        action_from_parent: (B, N) int32; the action that leads from the parent to each node,
            NO_PARENT for the root and unexpanded nodes.
        children_index: (B, N, A) int32; the node each action leads to, UNVISITED until it is
            expanded.
        children_prior_logits: (B, N, A); the policy's logits at each node.
        children_visits: (B, N, A) int32; the visits of each action.
        children_rewards: (B, N, A); the reward of each expanded action.
        children_discounts: (B, N, A); the discount after each expanded action.
        children_values: (B, N, A); the value of the node each action leads to.
        embeddings: a PyTree of (B, N, ...) arrays; each node's embedding.
        root_invalid_actions: (B, A); 1 where an action is invalid at the root, else 0.
        extra_data: the search's own data: Gumbel MuZero's root Gumbel noise (B, A), None for
            MuZero's.
    """

    node_visits: jax.Array  # (B, N) int32
    raw_values: jax.Array  # (B, N) the network's value when the node was expanded
    node_values: jax.Array  # (B, N) the mean of the values backed up through the node
    parents: jax.Array  # (B, N) int32, NO_PARENT for the root and unexpanded nodes
    action_from_parent: jax.Array  # (B, N) int32, NO_PARENT for the root and unexpanded nodes
    children_index: jax.Array  # (B, N, A) int32, UNVISITED until expanded
    children_prior_logits: jax.Array  # (B, N, A)
    children_visits: jax.Array  # (B, N, A) int32
    children_rewards: jax.Array  # (B, N, A)
    children_discounts: jax.Array  # (B, N, A)
    children_values: jax.Array  # (B, N, A)
    embeddings: PyTree  # (B, N, ...)
    root_invalid_actions: jax.Array  # (B, A)
    extra_data: Any  # Gumbel MuZero: the root's Gumbel noise (B, A)

    def qvalues(self, node: jax.Array | int) -> jax.Array:
        """Q(s, a) = r(s, a) + discount(s, a) * v(s') of every action at a node of each tree.

        Arguments:
            node: (B,) int32, a node of each tree; or one index for all (ROOT).

        Returns:
            (B, A) array of the values' dtype.
        """
        rewards = _row(self.children_rewards, node)
        return rewards + _row(self.children_discounts, node) * _row(self.children_values, node)

    def summary(self) -> "SearchSummary":
        """The root's visit counts, visit distribution, value and Q-values.

        Returns:
            A `SearchSummary` of each root.
        """
        counts = self.children_visits[:, ROOT].astype(self.node_values.dtype)  # (B, A)
        total = counts.sum(-1, keepdims=True)
        probs = jnp.where(total > 0, counts / jnp.maximum(total, 1), 1 / counts.shape[-1])
        return SearchSummary(
            visit_counts=counts,
            visit_probs=probs,
            value=self.node_values[:, ROOT],
            qvalues=self.qvalues(ROOT),
        )


class SearchSummary(NamedTuple):
    """The statistics of each root after a search (mctx's `SearchSummary`).

    Attributes:
        visit_counts: (B, A); the visits of each action at the root, as floats.
        visit_probs: (B, A); the visit counts normalised (uniform where the root has none).
        value: (B,); the root's value, the mean of the values backed up through it.
        qvalues: (B, A); Q(s, a) at the root.
    """

    visit_counts: jax.Array  # (B, A)
    visit_probs: jax.Array  # (B, A)
    value: jax.Array  # (B,)
    qvalues: jax.Array  # (B, A)


class PolicyOutput(NamedTuple):
    """What a search returns (mctx's `PolicyOutput`).

    Attributes:
        action: (B,) int32; the action to take at each root.
        action_weights: (B, A); the policy target: the visit distribution (MuZero) or the improved
            policy (Gumbel MuZero).
        search_tree: the `Tree` searched.
    """

    action: jax.Array  # (B,) int32
    action_weights: jax.Array  # (B, A) the policy target
    search_tree: Tree


def _row(x, node):
    """x (B, N, ...) at node (B,), or at one node for all (ROOT) -> (B, ...)."""
    return x[jnp.arange(x.shape[0]), node]


def _masked_argmax(score, invalid):
    return jnp.argmax(jnp.where(invalid > 0, -jnp.inf, score), axis=-1).astype(jnp.int32)


def _mask_invalid(logits, invalid):
    """Logits with no mass on invalid actions (unchanged without a mask)."""
    if invalid is None:
        return logits
    logits = logits - logits.max(-1, keepdims=True)
    return jnp.where(invalid > 0, jnp.finfo(logits.dtype).min, logits)


# ---------------------------------------------------------------------------------------------
# Checks of what the caller passes, at trace time: shapes are static, so a compiled search pays
# nothing for them (mctx checks the same shapes with chex's assertions)


def _check_shape(name: str, x, expected: tuple, meaning: str) -> None:
    """Refuse `x` unless its shape is `expected`, in one line naming the field."""
    shape = jnp.shape(x)
    if shape != expected:
        raise ValueError(f"{name} has shape {shape}; expected {expected}, {meaning}")


def _check_root(root: RootFnOutput) -> None:
    """prior_logits (B, A), value (B,) and every embedding leaf (B, ...)."""
    logits_shape = jnp.shape(root.prior_logits)
    if len(logits_shape) != 2:
        raise ValueError(
            f"RootFnOutput.prior_logits has shape {logits_shape}; expected (B, A), B roots by A "
            "actions"
        )
    batch = logits_shape[0]
    roots = f"one per root (B = {batch}, as prior_logits {logits_shape})"
    _check_shape("RootFnOutput.value", root.value, (batch,), roots)
    for path, leaf in jax.tree_util.tree_flatten_with_path(root.embedding)[0]:
        shape = jnp.shape(leaf)
        if shape[:1] != (batch,):
            name = f"RootFnOutput.embedding{jax.tree_util.keystr(path)}"
            raise ValueError(f"{name} has shape {shape}; expected ({batch}, ...), {roots}")


def _check_step(result, embedding: PyTree, batch: int, actions: int) -> None:
    """recurrent_fn's result: (RecurrentFnOutput, new embedding), its fields (B,) and (B, A), the
    new embedding of the structure and shapes of the `embedding` (B, ...) it was given."""
    if not (isinstance(result, tuple) and len(result) == 2):
        got = type(result).__name__
        if isinstance(result, tuple):
            got = f"{got} of length {len(result)}"
        raise ValueError(
            f"recurrent_fn returned a {got}; expected a pair (RecurrentFnOutput, new embedding)"
        )
    out, new_embedding = result
    if not all(hasattr(out, field) for field in RecurrentFnOutput._fields):
        raise ValueError(
            f"recurrent_fn's first result is a {type(out).__name__}; expected a "
            "RecurrentFnOutput(reward, discount, prior_logits, value)"
        )
    nodes = f"one per node (B = {batch})"
    for field in ("reward", "discount", "value"):
        _check_shape(
            f"recurrent_fn's RecurrentFnOutput.{field}", getattr(out, field), (batch,), nodes
        )
    _check_shape(
        "recurrent_fn's RecurrentFnOutput.prior_logits",
        out.prior_logits,
        (batch, actions),
        f"(B, A): {nodes}, A = {actions} actions",
    )
    given = jax.tree.structure(embedding)
    if jax.tree.structure(new_embedding) != given:
        raise ValueError(
            f"recurrent_fn's new embedding is {jax.tree.structure(new_embedding)}; expected the "
            f"structure of the embedding it was given, {given}"
        )
    paths = jax.tree_util.tree_flatten_with_path(new_embedding)[0]
    for (path, new), old in zip(paths, jax.tree.leaves(embedding)):
        name = f"recurrent_fn's new embedding{jax.tree_util.keystr(path)}"
        _check_shape(name, new, old.shape, "the shape of the embedding it was given")


def _as_mask(invalid, root: RootFnOutput):
    """invalid_actions (B, A) of any dtype as root's float dtype (None stays None), checked: its
    shape, and, where it is concrete (not traced), that every root has a valid action."""
    if invalid is None:
        return None
    _check_shape("invalid_actions", invalid, root.prior_logits.shape, "as prior_logits (B, A)")
    if not isinstance(invalid, jax.core.Tracer):  # concrete (a constant under jit too): one look
        (stuck,) = np.nonzero(np.all(np.asarray(invalid) > 0, axis=-1))
        if stuck.size:
            roots = "root " if stuck.size == 1 else "roots "
            raise ValueError(
                f"invalid_actions: every action is invalid at {roots}"
                f"{', '.join(map(str, stuck))} (of B = {len(invalid)}), where the search would "
                "return action 0, as mctx's; give every root a valid action"
            )
    return jnp.asarray(invalid).astype(root.prior_logits.dtype)


def _log(probs):
    return jnp.log(jnp.maximum(probs, jnp.finfo(probs.dtype).tiny))


# ---------------------------------------------------------------------------------------------
# Q-value transforms


def _q_minmax(tree: Tree, node, epsilon=1e-8):
    """MuZero's min-max normalisation (Schrittwieser et al. 2020, appendix B), over the node's own
    value and its visited children: Q_bar = (Q - min) / (max - min), 0 for unvisited actions."""
    q, visits = tree.qvalues(node), _row(tree.children_visits, node)  # (B, A)
    value = _row(tree.node_values, node)[:, None]  # (B, 1)
    safe = jnp.where(visits > 0, q, value)
    low = jnp.minimum(value, safe.min(-1, keepdims=True))
    high = jnp.maximum(value, safe.max(-1, keepdims=True))
    return (jnp.where(visits > 0, q, low) - low) / jnp.maximum(high - low, epsilon)


def _q_completed(tree: Tree, node, value_scale=0.1, maxvisit_init=50.0, epsilon=1e-8):
    """Gumbel MuZero's completed Q-values (Danihelka et al. 2022, appendix D): an unvisited action
    takes the mixed value v_mix = (v + sum_b N(b) * sum_{N(a)>0} pi(a) Q(a) / sum_{N(a)>0} pi(a))
    / (1 + sum_b N(b)); then rescaled to [0, 1] and scaled by sigma = (c_visit + max_b N(b)) *
    c_scale."""
    q, visits = tree.qvalues(node), _row(tree.children_visits, node)  # (B, A)
    prior = jax.nn.softmax(_row(tree.children_prior_logits, node))
    prior = jnp.maximum(prior, jnp.finfo(prior.dtype).tiny)
    seen = visits > 0
    total = visits.sum(-1).astype(q.dtype)  # (B,)
    seen_prior = jnp.where(seen, prior, 0.0).sum(-1, keepdims=True)
    weighted = jnp.where(seen, prior * q / jnp.where(seen, seen_prior, 1.0), 0.0).sum(-1)
    mixed = (_row(tree.raw_values, node) + total * weighted) / (total + 1)  # (B,)
    completed = jnp.where(seen, q, mixed[:, None])
    low, high = completed.min(-1, keepdims=True), completed.max(-1, keepdims=True)
    completed = (completed - low) / jnp.maximum(high - low, epsilon)
    scale = maxvisit_init + visits.max(-1, keepdims=True).astype(q.dtype)
    return scale * value_scale * completed


# ---------------------------------------------------------------------------------------------
# Action selection: select(key (B,), tree, node (B,), depth (B,)) -> action (B,)


def _puct(pb_c_init, pb_c_base):
    """pUCT (MuZero, appendix B): argmax_a Q_bar(s, a) + P(s, a) sqrt(N(s)) / (1 + N(s, a)) *
    (c1 + log((N(s) + c2 + 1) / c2)), with 1e-7 uniform noise to break ties."""

    def select(keys, tree, node, depth):
        visits = _row(tree.children_visits, node)  # (B, A)
        node_visits = _row(tree.node_visits, node).astype(f32)[:, None]  # (B, 1)
        pb_c = pb_c_init + jnp.log((node_visits + pb_c_base + 1.0) / pb_c_base)
        prior = jax.nn.softmax(_row(tree.children_prior_logits, node))
        policy = jnp.sqrt(node_visits) * pb_c * prior / (visits + 1).astype(f32)
        noise = 1e-7 * jax.vmap(lambda k: jax.random.uniform(k, visits.shape[-1:]))(keys)
        score = _q_minmax(tree, node) + policy + noise
        return _masked_argmax(score, jnp.where((depth == 0)[:, None], tree.root_invalid_actions, 0))

    return select


def considered_visits(max_considered: int, num_simulations: int) -> tuple[int, ...]:
    """Sequential halving (Karnin et al. 2013, "Almost optimal exploration in multi-armed
    bandits") as visit counts, as Gumbel MuZero's root uses it (Danihelka et al. 2022): the count
    an action must have to be visited at each simulation. The m considered actions get
    floor(n / (log2(m) m)) visits each, then the better half as many again, and so on.

    ```python
    considered_visits(4, 8)  # (0, 0, 0, 0, 1, 1, 2, 2)
    ```

    Arguments:
        max_considered: m, the actions considered at the root (at most 1: the visits count up
            one action's).
        num_simulations: n, the simulations of the search.

    Returns:
        A tuple of `num_simulations` ints: the visit count an action needs to be chosen at each
        simulation (mctx's `get_sequence_of_considered_visits`).
    """
    if max_considered <= 1:
        return tuple(range(num_simulations))
    log2max = math.ceil(math.log2(max_considered))
    sequence = []
    visits = [0] * max_considered
    considered = max_considered
    while len(sequence) < num_simulations:
        for _ in range(max(1, int(num_simulations / (log2max * considered)))):
            sequence.extend(visits[:considered])
            visits[:considered] = [v + 1 for v in visits[:considered]]
        considered = max(2, considered // 2)
    return tuple(sequence[:num_simulations])


def _score_considered(considered_visit, gumbel, logits, q, visits):
    """g(a) + logits(a) + sigma(Q(a)) for the actions with `considered_visit` visits, else -inf."""
    logits = logits - logits.max(-1, keepdims=True)
    penalty = jnp.where(visits == considered_visit, 0.0, -jnp.inf)
    return jnp.maximum(-1e9, gumbel + logits + q) + penalty


def _gumbel(num_simulations, max_considered):
    """Gumbel MuZero (Danihelka et al. 2022): at the root, sequential halving over the top-m
    actions by g + logits; below it, the action whose visits lag the improved policy pi' =
    softmax(logits + sigma(completed Q)) most: argmax_a pi'(a) - N(a) / (1 + sum_b N(b))."""
    table = jnp.array(
        [considered_visits(m, num_simulations) for m in range(max_considered + 1)], jnp.int32
    )  # (m + 1, num_simulations)

    def select(keys, tree, node, depth):
        visits = _row(tree.children_visits, node)  # (B, A)
        logits = _row(tree.children_prior_logits, node)
        q = _q_completed(tree, node)  # (B, A)
        valid = (1 - tree.root_invalid_actions).sum(-1).astype(jnp.int32)
        considered = table[jnp.minimum(max_considered, valid), visits.sum(-1)][:, None]
        root = _score_considered(considered, tree.extra_data, logits, q, visits)
        root = jnp.where(tree.root_invalid_actions > 0, -jnp.inf, root)
        total = visits.sum(-1, keepdims=True).astype(f32)
        interior = jax.nn.softmax(logits + q) - visits.astype(f32) / (1 + total)
        return jnp.argmax(jnp.where((depth == 0)[:, None], root, interior), -1).astype(jnp.int32)

    return select


# ---------------------------------------------------------------------------------------------
# The search


def _new_tree(root: RootFnOutput, num_simulations: int, invalid, extra_data) -> Tree:
    """The trees of num_simulations + 1 nodes, the root's filled in."""
    if num_simulations < 1:
        raise ValueError(f"num_simulations={num_simulations}: at least 1 is needed")
    invalid = jnp.zeros_like(root.prior_logits) if invalid is None else invalid
    batch, actions = root.prior_logits.shape
    nodes = num_simulations + 1
    dtype = root.value.dtype
    zeros = jnp.zeros((batch, nodes, actions), dtype)
    tree = Tree(
        node_visits=jnp.zeros((batch, nodes), jnp.int32),
        raw_values=jnp.zeros((batch, nodes), dtype),
        node_values=jnp.zeros((batch, nodes), dtype),
        parents=jnp.full((batch, nodes), NO_PARENT, jnp.int32),
        action_from_parent=jnp.full((batch, nodes), NO_PARENT, jnp.int32),
        children_index=jnp.full((batch, nodes, actions), UNVISITED, jnp.int32),
        children_prior_logits=zeros.astype(root.prior_logits.dtype),
        children_visits=jnp.zeros((batch, nodes, actions), jnp.int32),
        children_rewards=zeros,
        children_discounts=zeros,
        children_values=zeros,
        embeddings=jax.tree.map(
            lambda x: jnp.zeros((batch, nodes, *x.shape[1:]), x.dtype), root.embedding
        ),
        root_invalid_actions=invalid,
        extra_data=extra_data,
    )
    return _set_node(tree, ROOT, root.prior_logits, root.value, root.embedding)


def _set_node(tree: Tree, node, prior_logits, value, embedding) -> Tree:
    """Fill node (B,) (or ROOT) with a network evaluation and count its first visit."""
    batch_range = jnp.arange(tree.node_visits.shape[0])  # (B,): each tree's row
    return tree._replace(
        children_prior_logits=tree.children_prior_logits.at[batch_range, node].set(prior_logits),
        raw_values=tree.raw_values.at[batch_range, node].set(value),
        node_values=tree.node_values.at[batch_range, node].set(value),
        node_visits=tree.node_visits.at[batch_range, node].add(1),
        embeddings=jax.tree.map(
            lambda stored, new: stored.at[batch_range, node].set(new), tree.embeddings, embedding
        ),
    )


class _Walk(NamedTuple):
    """Where the walk down each tree is (mctx's `_SimulationState`): at `node` it chose `action`,
    which leads to `next_node`."""

    keys: jax.Array  # (B,) one key per root
    node: jax.Array  # (B,) int32: the node an action was chosen at; NO_PARENT before the first
    action: jax.Array  # (B,) int32: the action chosen there; NO_PARENT before the first
    next_node: jax.Array  # (B,) int32: the child it leads to, UNVISITED if not expanded yet
    depth: jax.Array  # (B,) int32: the depth of next_node
    continuing: jax.Array  # (B,) bool: the walk goes on from next_node


def _simulate(tree: Tree, keys, select, max_depth: int) -> _Walk:
    """From the root, choose actions until one leads to an unexpanded child or max_depth."""
    batch = keys.shape[0]
    batch_range = jnp.arange(batch)
    start = _Walk(
        keys=keys,
        node=jnp.full(batch, NO_PARENT, jnp.int32),
        action=jnp.full(batch, NO_PARENT, jnp.int32),
        next_node=jnp.full(batch, ROOT, jnp.int32),
        depth=jnp.zeros(batch, jnp.int32),
        continuing=jnp.ones(batch, bool),
    )

    def step(walk: _Walk) -> _Walk:
        # every row chooses; a row whose walk has stopped keeps what it had
        split = jax.vmap(jax.random.split)(walk.keys)  # (B, 2): carried on, used here
        action = select(split[:, 1], tree, walk.next_node, walk.depth.astype(f32))
        depth = walk.depth + walk.continuing.astype(jnp.int32)
        child = tree.children_index[batch_range, walk.next_node, action]
        next_node = jnp.where(walk.continuing, child, walk.next_node)
        return _Walk(
            keys=split[:, 0],
            node=jnp.where(walk.continuing, walk.next_node, walk.node),
            action=jnp.where(walk.continuing, action, walk.action),
            next_node=next_node,
            depth=depth,
            continuing=walk.continuing & (next_node != UNVISITED) & (depth < max_depth),
        )

    return lax.while_loop(lambda walk: walk.continuing.any(), step, start)


def _expand(params, key, tree: Tree, recurrent_fn, walk: _Walk, new_node):
    """Evaluate the chosen action of every root with one recurrent_fn call; store its child at
    `new_node` (B,), or over the existing child where max_depth stopped the walk."""
    batch_range = jnp.arange(walk.node.shape[0])
    parent = walk.node
    action = walk.action
    leaf = jnp.where(walk.next_node == UNVISITED, new_node, walk.next_node)
    embedding = jax.tree.map(lambda x: _row(x, parent), tree.embeddings)
    result = recurrent_fn(params, key, action, embedding)
    _check_step(result, embedding, batch_range.shape[0], tree.children_prior_logits.shape[-1])
    out, embedding = result
    tree = _set_node(tree, leaf, out.prior_logits, out.value, embedding)
    tree = tree._replace(
        children_index=tree.children_index.at[batch_range, parent, action].set(leaf),
        children_rewards=tree.children_rewards.at[batch_range, parent, action].set(out.reward),
        children_discounts=tree.children_discounts.at[batch_range, parent, action].set(
            out.discount
        ),
        parents=tree.parents.at[batch_range, leaf].set(parent),
        action_from_parent=tree.action_from_parent.at[batch_range, leaf].set(action),
    )
    return tree, leaf


class _Backup(NamedTuple):
    """How far the backup has climbed each tree."""

    tree: Tree
    value: jax.Array  # (B,) G, the return backed up to `node`
    node: jax.Array  # (B,) int32: the node reached; ROOT when done


def _backward(tree: Tree, leaf) -> Tree:
    """Back the leaf's value up to the root through the parents: for each edge (s, a) from the
    leaf up, G = r(s, a) + discount(s, a) * G, V(s) = (N(s) V(s) + G) / (N(s) + 1), N(s) += 1,
    and N(s, a), Q-child(s, a) = the child's new count and value."""
    batch, nodes = tree.node_visits.shape
    batch_range = jnp.arange(batch)

    def edge(backup: _Backup) -> _Backup:
        tree, value, node = backup
        below_root = node != ROOT  # this tree's backup goes on, up the edge into `node`
        parent = jnp.where(below_root, tree.parents[batch_range, node], ROOT)
        action = tree.action_from_parent[batch_range, node]
        reward = tree.children_rewards[batch_range, parent, action]
        parent_return = reward + tree.children_discounts[batch_range, parent, action] * value
        count = tree.node_visits[batch_range, parent].astype(f32)
        parent_value = (tree.node_values[batch_range, parent] * count + parent_return) / (
            count + 1.0
        )
        # the row each tree writes: its parent, or out of range (dropped) at the root already
        written = jnp.where(below_root, parent, nodes)
        tree = tree._replace(
            node_values=tree.node_values.at[batch_range, written].set(parent_value, mode="drop"),
            node_visits=tree.node_visits.at[batch_range, written].add(1, mode="drop"),
            children_values=tree.children_values.at[batch_range, written, action].set(
                tree.node_values[batch_range, node], mode="drop"
            ),
            children_visits=tree.children_visits.at[batch_range, written, action].add(
                1, mode="drop"
            ),
        )
        return _Backup(tree=tree, value=jnp.where(below_root, parent_return, value), node=parent)

    start = _Backup(tree=tree, value=_row(tree.node_values, leaf), node=leaf)
    return lax.while_loop(lambda backup: (backup.node != ROOT).any(), edge, start).tree


def _search(params, key, tree: Tree, recurrent_fn, select, max_depth: int | None) -> Tree:
    """Run a simulation for each node of `tree` but the root; returns the searched tree."""
    batch, nodes = tree.node_visits.shape
    max_depth = nodes - 1 if max_depth is None else max_depth

    def simulation(sim, carry):
        key, tree = carry
        key, walk_key, expand_key = jax.random.split(key, 3)
        walk = _simulate(tree, jax.random.split(walk_key, batch), select, max_depth)
        tree, leaf = _expand(params, expand_key, tree, recurrent_fn, walk, sim + 1)
        return key, _backward(tree, leaf)

    return lax.fori_loop(0, nodes - 1, simulation, (key, tree))[1]


def muzero_policy(
    params: PyTree,
    rng_key: jax.Array,
    root: RootFnOutput,
    recurrent_fn: RecurrentFn,
    num_simulations: int,
    invalid_actions: jax.Array | None = None,
    max_depth: int | None = None,
    *,
    dirichlet_fraction: float = 0.25,
    dirichlet_alpha: float = 0.3,
    pb_c_init: float = 1.25,
    pb_c_base: float = 19652.0,
    temperature: float = 1.0,
) -> PolicyOutput:
    """MuZero's search (Schrittwieser et al. 2020, "Mastering Atari, Go, chess and shogi by
    planning with a learned model", arXiv 1911.08265), as mctx's `muzero_policy`.

    The root prior is mixed with Dirichlet noise, P = (1 - f) softmax(logits) + f Dir(alpha);
    actions are selected by pUCT on min-max normalised Q-values (appendix B); the action is
    sampled from the root's visit counts N(a)^(1 / temperature), which, normalised, are the
    policy target.

    Arguments:
        params: any PyTree, passed to `recurrent_fn` as it is (a model's parameters).
        rng_key: a PRNG key (`jax.random.key`), for the Dirichlet noise, the selection's
            tie-breaking noise and the sampled action.
        root: the network's evaluation of the B roots: prior_logits (B, A), value (B,),
            embedding (B, ...).
        recurrent_fn: `(params, key, action (B,), embedding (B, ...)) -> (RecurrentFnOutput,
            new embedding (B, ...))`, the learned model: one step from each of B nodes.
        num_simulations: the simulations, at least 1; each expands one node of every tree.
        invalid_actions: (B, A), 1 where an action is invalid at the root, 0 where it is valid
            (any dtype); None: all valid. Every root needs a valid action: where all are
            invalid, the search returns action 0 with weight 1.0, as mctx's. A concrete mask
            with such a row is refused; a traced one is not checked (the module docstring shows
            a checkify check).
        max_depth: the deepest a simulation walks; None: num_simulations.
        dirichlet_fraction: f, the weight of the Dirichlet noise in the root prior.
        dirichlet_alpha: alpha, the Dirichlet noise's concentration.
        pb_c_init: c1 of pUCT.
        pb_c_base: c2 of pUCT.
        temperature: the visit counts' temperature for the sampled action (toward 0: the most
            visited).

    Returns:
        A `PolicyOutput`: action (B,) int32, action_weights (B, A) the visit distribution at the
        root, and the search tree.

    Raises:
        ValueError: a field of `root`, `invalid_actions` or `recurrent_fn`'s result of the wrong
            shape or structure (when traced); a concrete `invalid_actions` with a root whose
            actions are all invalid; num_simulations < 1.
    """
    _check_root(root)
    invalid_actions = _as_mask(invalid_actions, root)
    key, noise_key, search_key = jax.random.split(rng_key, 3)
    batch, actions = root.prior_logits.shape
    noise = jax.random.dirichlet(noise_key, jnp.full([actions], dirichlet_alpha), (batch,))
    prior = jax.nn.softmax(root.prior_logits)
    probs = (1 - dirichlet_fraction) * prior + dirichlet_fraction * noise
    root = root._replace(prior_logits=_mask_invalid(_log(probs), invalid_actions))
    tree = _new_tree(root, num_simulations, invalid_actions, None)
    tree = _search(params, search_key, tree, recurrent_fn, _puct(pb_c_init, pb_c_base), max_depth)
    weights = tree.summary().visit_probs  # (B, A)
    logits = _log(weights)
    logits = logits - logits.max(-1, keepdims=True)
    action = jax.random.categorical(key, logits / jnp.maximum(jnp.finfo(f32).tiny, temperature))
    return PolicyOutput(action.astype(jnp.int32), weights, tree)


def gumbel_muzero_policy(
    params: PyTree,
    rng_key: jax.Array,
    root: RootFnOutput,
    recurrent_fn: RecurrentFn,
    num_simulations: int,
    invalid_actions: jax.Array | None = None,
    max_depth: int | None = None,
    *,
    max_num_considered_actions: int = 16,
    gumbel_scale: float = 1.0,
) -> PolicyOutput:
    """Gumbel MuZero's search (Danihelka et al. 2022, "Policy improvement by planning with
    Gumbel", ICLR), as mctx's `gumbel_muzero_policy`.

    At the root it samples the top m actions without replacement by g + logits, g ~ Gumbel
    (Gumbel-top-k), halves them by g + logits + sigma(Q) over the simulations (sequential
    halving, `considered_visits`), and acts by the best survivor. Below the root it picks the
    action whose visits lag the improved policy most. The policy target is the improved policy
    pi' = softmax(logits + sigma(completed Q)), a policy improvement even with 2 simulations.

    Arguments:
        params: any PyTree, passed to `recurrent_fn` as it is (a model's parameters).
        rng_key: a PRNG key (`jax.random.key`), for the Gumbel noise.
        root: the network's evaluation of the B roots: prior_logits (B, A), value (B,),
            embedding (B, ...).
        recurrent_fn: `(params, key, action (B,), embedding (B, ...)) -> (RecurrentFnOutput,
            new embedding (B, ...))`, the learned model: one step from each of B nodes.
        num_simulations: the simulations, at least 1; each expands one node of every tree.
        invalid_actions: (B, A), 1 where an action is invalid at the root, 0 where it is valid
            (any dtype); None: all valid. Every root needs a valid action: where all are
            invalid, the search returns action 0 and uniform weights over the invalid actions,
            as mctx's. A concrete mask with such a row is refused; a traced one is not checked
            (the module docstring shows a checkify check).
        max_depth: the deepest a simulation walks; None: num_simulations.
        max_num_considered_actions: m, the actions sampled at the root.
        gumbel_scale: the Gumbel noise's scale; 0 makes the search deterministic (greedy
            acting).

    Returns:
        A `PolicyOutput`: action (B,) int32, action_weights (B, A) the improved policy pi', and
        the search tree (its `extra_data` the root's Gumbel noise (B, A)).

    Raises:
        ValueError: a field of `root`, `invalid_actions` or `recurrent_fn`'s result of the wrong
            shape or structure (when traced); a concrete `invalid_actions` with a root whose
            actions are all invalid; num_simulations < 1.
    """
    _check_root(root)
    invalid_actions = _as_mask(invalid_actions, root)
    logits = _mask_invalid(root.prior_logits, invalid_actions)
    root = root._replace(prior_logits=logits)
    key, gumbel_key = jax.random.split(rng_key)
    gumbel = gumbel_scale * jax.random.gumbel(gumbel_key, logits.shape, logits.dtype)
    select = _gumbel(num_simulations, max_num_considered_actions)
    tree = _new_tree(root, num_simulations, invalid_actions, gumbel)
    tree = _search(params, key, tree, recurrent_fn, select, max_depth)
    visits = tree.summary().visit_counts  # (B, A)
    q = _q_completed(tree, ROOT)
    score = _score_considered(visits.max(-1, keepdims=True), gumbel, logits, q, visits)
    weights = jax.nn.softmax(_mask_invalid(logits + q, invalid_actions))
    return PolicyOutput(_masked_argmax(score, tree.root_invalid_actions), weights, tree)
