"""frost.rl.search against mctx (the same roots, the same random recurrent function, the same
keys), a two-action tree worked by hand, invalid actions, a terminal inside the tree, and one
compilation for many calls."""

import itertools
import math

import jax
import jax.numpy as jnp
import mctx
import numpy as np
import pytest

from frost.rl import search

POLICIES = {  # noise off, as the equality grid asks
    "muzero_policy": {"dirichlet_fraction": 0.0},
    "gumbel_muzero_policy": {"gumbel_scale": 0.0},
}
BATCHES, SIMULATIONS, ACTIONS = (1, 7, 64), (1, 2, 16, 50), (2, 3, 18)
FULL = list(itertools.product(BATCHES, SIMULATIONS, ACTIONS, (False, True)))
# every (batch, simulations) pair and every (simulations, actions) pair, masks alternating: the
# default run; the whole grid is `-m slow`
COVER = [(b, n, ACTIONS[(i + j) % 3], (i + j) % 2 == 1) for (i, b), (j, n) in
         itertools.product(enumerate(BATCHES), enumerate(SIMULATIONS))]  # fmt: skip


def problem(lib, batch, actions, with_invalid, seed=0):
    """Random roots, a random deterministic recurrent function (a fixed random tanh layer per
    action, a linear head) whose discount is 0 on about a third of the steps, and a random mask."""
    k = jax.random.split(jax.random.key(seed), 6)
    width = 7
    layer = jax.random.normal(k[0], (actions, width, width)) * 0.8
    head = jax.random.normal(k[1], (width, actions + 3))

    def recurrent_fn(params, key, action, embedding):
        h = jnp.tanh(jnp.einsum("bs,bst->bt", embedding, layer[action]))  # (B, width)
        out = h @ head  # (B, A + 3)
        discount = jnp.where(out[:, -1] > 0.5, 0.0, 0.95)
        step = lib.RecurrentFnOutput(
            reward=out[:, -2], discount=discount, prior_logits=out[:, :actions], value=out[:, -3]
        )
        return step, h

    root = lib.RootFnOutput(
        prior_logits=jax.random.normal(k[2], (batch, actions)),
        value=jax.random.normal(k[3], (batch,)),
        embedding=jax.random.normal(k[4], (batch, width)),
    )
    invalid = None
    if with_invalid:  # about 30% invalid, action 0 always valid
        invalid = (jax.random.uniform(k[5], (batch, actions)) < 0.3).at[:, 0].set(False)
        invalid = invalid.astype(jnp.float32)
    return root, recurrent_fn, invalid


def both(policy, batch, simulations, actions, with_invalid, **kw):
    outs = []
    for lib in (mctx, search):
        root, recurrent_fn, invalid = problem(lib, batch, actions, with_invalid)

        def run(key, lib=lib, root=root, recurrent_fn=recurrent_fn, invalid=invalid):
            return getattr(lib, policy)(
                None, key, root, recurrent_fn, simulations, invalid_actions=invalid, **kw
            )

        # mctx relies on numpy's promotions; frost.rl.search runs under the tests' strict ones
        with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
            outs.append(jax.jit(run)(jax.random.key(1)))
    return outs


def assert_equal(theirs, ours):
    np.testing.assert_array_equal(ours.action, theirs.action)
    np.testing.assert_allclose(ours.action_weights, theirs.action_weights, atol=1e-5)
    a, b = theirs.search_tree, ours.search_tree
    np.testing.assert_array_equal(b.children_visits[:, 0], a.children_visits[:, 0])
    np.testing.assert_allclose(b.node_values, a.node_values, atol=1e-5)
    np.testing.assert_allclose(b.children_values, a.children_values, atol=1e-5)
    np.testing.assert_array_equal(b.children_index, a.children_index)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("batch,simulations,actions,with_invalid", COVER)
def test_equals_mctx(policy, batch, simulations, actions, with_invalid):
    assert_equal(*both(policy, batch, simulations, actions, with_invalid, **POLICIES[policy]))


@pytest.mark.slow
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("batch,simulations,actions,with_invalid", FULL)
def test_equals_mctx_on_the_whole_grid(policy, batch, simulations, actions, with_invalid):
    assert_equal(*both(policy, batch, simulations, actions, with_invalid, **POLICIES[policy]))


@pytest.mark.parametrize("policy", POLICIES)
def test_equals_mctx_with_noise_on(policy):
    """Dirichlet and Gumbel noise drawn from the same keys as mctx's."""
    assert_equal(*both(policy, 7, 16, 3, True))


def two_actions():
    """A root with prior (0.6, 0.4) and value 0. Action 0 pays 1 and ends the episode (discount 0)
    before a state of value 100; action 1 pays 0 (discount 0, value 0)."""

    def recurrent_fn(params, key, action, embedding):
        reward = jnp.where(action == 0, 1.0, 0.0)
        zeros = jnp.zeros_like(reward)
        step = search.RecurrentFnOutput(reward, zeros, jnp.zeros((1, 2)), zeros + 100.0)
        return step, embedding

    root = search.RootFnOutput(jnp.log(jnp.array([[0.6, 0.4]])), jnp.zeros(1), jnp.zeros((1, 1)))
    return root, recurrent_fn


def test_muzero_two_action_tree_by_hand():
    """Simulation 1: pUCT prefers the larger prior, action 0; G = 1 + 0 * 100 = 1, V(root) =
    (0 + 1) / 2. Simulation 2: Q_bar = (1, 0) (min-max over V = 0.5 and Q(0) = 1), and pUCT's
    prior terms sqrt(2) c (0.6 / 2, 0.4) add less than 1, so action 0 again, into the terminal
    node; its child's value stops at the discount: V(root) = (0.5 * 2 + 1) / 3 = 2/3."""
    root, recurrent_fn = two_actions()
    out = search.muzero_policy(
        None, jax.random.key(0), root, recurrent_fn, 2, dirichlet_fraction=0.0
    )
    tree = out.search_tree
    np.testing.assert_array_equal(tree.children_visits[0, 0], [2, 0])
    np.testing.assert_allclose(tree.node_values[0, 0], 2 / 3, rtol=1e-6)
    np.testing.assert_allclose(tree.summary().qvalues[0], [1.0, 0.0])
    np.testing.assert_allclose(out.action_weights[0], [1.0, 0.0])
    assert int(out.action[0]) == 0


def test_gumbel_two_action_tree_by_hand():
    """Sequential halving over 2 actions with 2 simulations visits each once: Q = (1, 0); the
    completed Q rescaled to (1, 0) and scaled by (50 + 1) * 0.1; the improved policy is
    softmax(log 0.6 + 5.1, log 0.4) and the action the argmax, 0."""
    root, recurrent_fn = two_actions()
    out = search.gumbel_muzero_policy(
        None, jax.random.key(0), root, recurrent_fn, 2, gumbel_scale=0.0
    )
    np.testing.assert_array_equal(out.search_tree.children_visits[0, 0], [1, 1])
    p = 0.6 * math.exp(5.1) / (0.6 * math.exp(5.1) + 0.4)
    np.testing.assert_allclose(out.action_weights[0], [p, 1 - p], rtol=1e-5)
    assert int(out.action[0]) == 0


@pytest.mark.parametrize("policy", POLICIES)
def test_invalid_actions_are_never_searched_or_chosen(policy):
    root, recurrent_fn, invalid = problem(search, 16, 5, True, seed=3)
    for seed in range(3):  # noise on
        out = getattr(search, policy)(None, jax.random.key(seed), root, recurrent_fn, 16, invalid)
        bad = np.asarray(invalid) > 0
        assert (np.asarray(out.search_tree.children_visits[:, 0])[bad] == 0).all()
        assert (np.asarray(out.action_weights)[bad] < 1e-6).all()
        assert not bad[np.arange(16), np.asarray(out.action)].any()


def test_one_compilation_for_many_calls():
    traces = []
    _, recurrent_fn, _ = problem(search, 4, 3, False)

    def counted(*args):
        traces.append(1)
        return recurrent_fn(*args)

    policy = jax.jit(lambda key, root: search.gumbel_muzero_policy(None, key, root, counted, 8))
    for seed in range(3):
        root, _, _ = problem(search, 4, 3, False, seed=seed)
        jax.block_until_ready(policy(jax.random.key(seed), root))
    assert len(traces) == 1 and policy._cache_size() == 1


def test_a_wrong_mask_is_one_clear_error():
    root, recurrent_fn, _ = problem(search, 4, 3, False)
    with pytest.raises(ValueError, match=r"invalid_actions has shape \(4, 2\)"):
        search.muzero_policy(None, jax.random.key(0), root, recurrent_fn, 4, jnp.zeros((4, 2)))
