"""Batched MuZero and Gumbel MuZero tree search in jax.numpy, with mctx's interface (Babuschkin
et al. 2020, github.com/google-deepmind/mctx), so `from frost.rl import search as mctx` switches.

    root = RootFnOutput(prior_logits=logits, value=v, embedding=h)     # (B, A), (B,), (B, ...)
    def recurrent_fn(params, key, action, embedding):                  # action (B,)
        return RecurrentFnOutput(reward, discount, prior_logits, value), new_embedding
    out = gumbel_muzero_policy(params, key, root, recurrent_fn, num_simulations=8)
    out.action, out.action_weights, out.search_tree                    # (B,), (B, A), Tree

The tree of every root is a set of fixed-size arrays (`Tree`: N = num_simulations + 1 nodes, the
root at index 0), so one jitted program searches a whole batch. A simulation goes down from the
root choosing actions until it meets an unexpanded action (`_simulate`), evaluates it with one
`recurrent_fn` call for the whole batch (`_expand`), and backs the leaf's value up its path
(`_backward`). Where mctx vmaps an unbatched tree through while loops that carry the whole tree,
here every step works on rows of the batched tree: the path is recorded on the way down, and the
backup is one loop over (B,) scalars followed by one scatter per statistic.

A discount of 0 ends an episode inside the tree: no value flows back past it. Invalid actions
(`invalid_actions` (B, A), 1 = invalid) are masked at the root, as in mctx.
"""

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

f32 = jnp.float32
UNVISITED = -1  # children_index of an action not yet expanded; parents of the root
ROOT = 0  # the root's node index


class RootFnOutput(NamedTuple):
    prior_logits: jax.Array  # (B, A)
    value: jax.Array  # (B,)
    embedding: Any  # (B, ...) a PyTree


class RecurrentFnOutput(NamedTuple):
    reward: jax.Array  # (B,)
    discount: jax.Array  # (B,) 0 where the episode ended
    prior_logits: jax.Array  # (B, A)
    value: jax.Array  # (B,)


class Tree(NamedTuple):
    """The search trees of a batch: B roots, N nodes each, A actions (mctx's `Tree`)."""

    node_visits: jax.Array  # (B, N) int32
    raw_values: jax.Array  # (B, N) the network's value when the node was expanded
    node_values: jax.Array  # (B, N) the mean of the values backed up through the node
    parents: jax.Array  # (B, N) int32
    action_from_parent: jax.Array  # (B, N) int32
    children_index: jax.Array  # (B, N, A) int32, UNVISITED until expanded
    children_prior_logits: jax.Array  # (B, N, A)
    children_visits: jax.Array  # (B, N, A) int32
    children_rewards: jax.Array  # (B, N, A)
    children_discounts: jax.Array  # (B, N, A)
    children_values: jax.Array  # (B, N, A)
    embeddings: Any  # (B, N, ...)
    root_invalid_actions: jax.Array  # (B, A)
    extra_data: Any  # Gumbel MuZero: the root's Gumbel noise (B, A)

    def qvalues(self, node) -> jax.Array:
        """Q(s, a) = r(s, a) + discount(s, a) * v(s'), (B, A) at node (B,) (or ROOT)."""
        return _row(self.children_rewards, node) + _row(self.children_discounts, node) * _row(
            self.children_values, node
        )

    def summary(self) -> "SearchSummary":
        """The root's visit counts, visit distribution, value and Q-values."""
        counts = self.children_visits[:, 0].astype(self.node_values.dtype)  # (B, A)
        total = counts.sum(-1, keepdims=True)
        probs = jnp.where(total > 0, counts / jnp.maximum(total, 1), 1 / counts.shape[-1])
        return SearchSummary(counts, probs, self.node_values[:, 0], self.qvalues(ROOT))


class SearchSummary(NamedTuple):
    visit_counts: jax.Array  # (B, A)
    visit_probs: jax.Array  # (B, A)
    value: jax.Array  # (B,)
    qvalues: jax.Array  # (B, A)


class PolicyOutput(NamedTuple):
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


def _as_mask(invalid, root: RootFnOutput):
    """invalid_actions (B, A) of any dtype as root's float dtype (None stays None)."""
    if invalid is None:
        return None
    invalid = jnp.asarray(invalid)
    if invalid.shape != root.prior_logits.shape:
        raise ValueError(
            f"invalid_actions has shape {invalid.shape}, prior_logits {root.prior_logits.shape}"
        )
    return invalid.astype(root.prior_logits.dtype)


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
        n = _row(tree.node_visits, node).astype(f32)[:, None]  # (B, 1)
        pb_c = pb_c_init + jnp.log((n + pb_c_base + 1.0) / pb_c_base)
        prior = jax.nn.softmax(_row(tree.children_prior_logits, node))
        policy = jnp.sqrt(n) * pb_c * prior / (visits + 1).astype(f32)
        noise = 1e-7 * jax.vmap(lambda k: jax.random.uniform(k, visits.shape[-1:]))(keys)
        score = _q_minmax(tree, node) + policy + noise
        return _masked_argmax(score, jnp.where((depth == 0)[:, None], tree.root_invalid_actions, 0))

    return select


def considered_visits(max_considered: int, num_simulations: int) -> tuple[int, ...]:
    """Sequential halving (Karnin et al. 2013) as visit counts: the count an action must have to
    be visited at each simulation, m actions getting floor(n / (log2(m) m)) visits each, then the
    better half, ... e.g. considered_visits(4, 8) = (0, 0, 0, 0, 1, 1, 2, 2)."""
    if max_considered <= 1:
        return tuple(range(num_simulations))
    log2max = math.ceil(math.log2(max_considered))
    sequence, visits, considered = [], [0] * max_considered, max_considered
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
        visits, logits = _row(tree.children_visits, node), _row(tree.children_prior_logits, node)
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
    nodes, dtype = num_simulations + 1, root.value.dtype
    zeros = jnp.zeros((batch, nodes, actions), dtype)
    tree = Tree(
        node_visits=jnp.zeros((batch, nodes), jnp.int32),
        raw_values=jnp.zeros((batch, nodes), dtype),
        node_values=jnp.zeros((batch, nodes), dtype),
        parents=jnp.full((batch, nodes), UNVISITED, jnp.int32),
        action_from_parent=jnp.full((batch, nodes), UNVISITED, jnp.int32),
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
    b = jnp.arange(tree.node_visits.shape[0])
    return tree._replace(
        children_prior_logits=tree.children_prior_logits.at[b, node].set(prior_logits),
        raw_values=tree.raw_values.at[b, node].set(value),
        node_values=tree.node_values.at[b, node].set(value),
        node_visits=tree.node_visits.at[b, node].add(1),
        embeddings=jax.tree.map(lambda t, e: t.at[b, node].set(e), tree.embeddings, embedding),
    )


class _Walk(NamedTuple):
    keys: jax.Array  # (B,) one key per root
    node: jax.Array  # (B,) the node an action is chosen at
    action: jax.Array  # (B,)
    next: jax.Array  # (B,) the child it leads to, UNVISITED if not expanded yet
    depth: jax.Array  # (B,) int32
    going: jax.Array  # (B,) bool


def _simulate(tree: Tree, keys, select, max_depth: int) -> _Walk:
    """From the root, choose actions until one leads to an unexpanded child or max_depth."""
    batch = keys.shape[0]
    b, zero = jnp.arange(batch), jnp.zeros(batch, jnp.int32)
    walk = _Walk(keys, zero - 1, zero - 1, zero, zero, jnp.ones(batch, bool))

    def step(w: _Walk) -> _Walk:
        split = jax.vmap(jax.random.split)(w.keys)  # (B, 2): carried on, used here
        action = select(split[:, 1], tree, w.next, w.depth.astype(f32))
        depth = w.depth + w.going.astype(jnp.int32)
        nxt = jnp.where(w.going, tree.children_index[b, w.next, action], w.next)
        return _Walk(
            keys=split[:, 0],
            node=jnp.where(w.going, w.next, w.node),
            action=jnp.where(w.going, action, w.action),
            next=nxt,
            depth=depth,
            going=w.going & (nxt != UNVISITED) & (depth < max_depth),
        )

    return lax.while_loop(lambda w: w.going.any(), step, walk)


def _expand(params, key, tree: Tree, recurrent_fn, walk: _Walk, new_node):
    """Evaluate the chosen action of every root with one recurrent_fn call; store its child at
    `new_node` (B,), or over the existing child where max_depth stopped the walk."""
    b, parent, action = jnp.arange(walk.node.shape[0]), walk.node, walk.action
    leaf = jnp.where(walk.next == UNVISITED, new_node, walk.next)
    embedding = jax.tree.map(lambda x: _row(x, parent), tree.embeddings)
    out, embedding = recurrent_fn(params, key, action, embedding)
    tree = _set_node(tree, leaf, out.prior_logits, out.value, embedding)
    tree = tree._replace(
        children_index=tree.children_index.at[b, parent, action].set(leaf),
        children_rewards=tree.children_rewards.at[b, parent, action].set(out.reward),
        children_discounts=tree.children_discounts.at[b, parent, action].set(out.discount),
        parents=tree.parents.at[b, leaf].set(parent),
        action_from_parent=tree.action_from_parent.at[b, leaf].set(action),
    )
    return tree, leaf


def _backward(tree: Tree, leaf) -> Tree:
    """Back the leaf's value up to the root through the parents: for each edge (s, a) from the
    leaf up, G = r(s, a) + discount(s, a) * G, V(s) = (N(s) V(s) + G) / (N(s) + 1), N(s) += 1,
    and N(s, a), Q-child(s, a) = the child's new count and value."""
    batch, nodes = tree.node_visits.shape
    b = jnp.arange(batch)

    def edge(carry):
        tree, value, node = carry  # value, node (B,): G and the node it was backed up to
        going = node != ROOT
        parent = jnp.where(going, tree.parents[b, node], ROOT)
        a = tree.action_from_parent[b, node]
        g = tree.children_rewards[b, parent, a] + tree.children_discounts[b, parent, a] * value
        count = tree.node_visits[b, parent].astype(f32)
        v = (tree.node_values[b, parent] * count + g) / (count + 1.0)
        s = jnp.where(going, parent, nodes)  # at the root already: dropped
        tree = tree._replace(
            node_values=tree.node_values.at[b, s].set(v, mode="drop"),
            node_visits=tree.node_visits.at[b, s].add(1, mode="drop"),
            children_values=tree.children_values.at[b, s, a].set(
                tree.node_values[b, node], mode="drop"
            ),
            children_visits=tree.children_visits.at[b, s, a].add(1, mode="drop"),
        )
        return tree, jnp.where(going, g, value), parent

    start = (tree, _row(tree.node_values, leaf), leaf)
    return lax.while_loop(lambda c: (c[2] != ROOT).any(), edge, start)[0]


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
    params,
    rng_key,
    root: RootFnOutput,
    recurrent_fn,
    num_simulations: int,
    invalid_actions=None,
    max_depth: int | None = None,
    *,
    dirichlet_fraction: float = 0.25,
    dirichlet_alpha: float = 0.3,
    pb_c_init: float = 1.25,
    pb_c_base: float = 19652.0,
    temperature: float = 1.0,
) -> PolicyOutput:
    """MuZero search (Schrittwieser et al. 2020, arXiv 1911.08265): the root prior mixed with
    Dirichlet noise, P = (1 - f) softmax(logits) + f Dir(alpha); pUCT selection with min-max
    normalised Q-values; the action sampled from the root's visit counts N(a)^(1 / temperature),
    which (normalised) are the policy target."""
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
    params,
    rng_key,
    root: RootFnOutput,
    recurrent_fn,
    num_simulations: int,
    invalid_actions=None,
    max_depth: int | None = None,
    *,
    max_num_considered_actions: int = 16,
    gumbel_scale: float = 1.0,
) -> PolicyOutput:
    """Gumbel MuZero (Danihelka et al. 2022, "Policy improvement by planning with Gumbel", ICLR):
    sample the top m actions without replacement by g + logits, g ~ Gumbel (Gumbel-top-k), halve
    them by g + logits + sigma(Q) over the simulations (sequential halving), and act by the best
    survivor. The policy target is the improved policy pi' = softmax(logits + sigma(completed Q)),
    a policy improvement even with 2 simulations."""
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
