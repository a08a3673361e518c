"""frost.rl.search against mctx (the same roots, the same random recurrent function, the same
keys), a two-action tree worked by hand, invalid actions, a terminal inside the tree, and one
compilation for many calls."""

import itertools
import math
import re

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


# --- a root with every action invalid -------------------------------------------------------


def all_invalid_at(rows, batch=4, actions=3):
    """A (batch, actions) float mask, every action invalid at `rows`, action 1 invalid elsewhere."""
    invalid = np.zeros((batch, actions), np.float32)
    invalid[:, 1] = 1.0
    invalid[list(rows)] = 1.0
    return invalid


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("rows", [(0, 3)])  # the first and the last root of B = 4
def test_a_root_without_a_valid_action_is_searched_as_mctx(policy, rows):
    """A traced mask cannot be refused: such a root visits action 0 in every simulation and
    returns it, with weight 1.0 (MuZero) or uniform weights (Gumbel), as mctx's does; the other
    roots are searched as ever."""
    outs = []
    for lib in (mctx, search):
        root, recurrent_fn, _ = problem(lib, 4, 3, False)

        def run(key, invalid, lib=lib, root=root, recurrent_fn=recurrent_fn):
            return getattr(lib, policy)(None, key, root, recurrent_fn, 8, invalid)

        with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
            outs.append(jax.jit(run)(jax.random.key(1), jnp.asarray(all_invalid_at(rows))))
    assert_equal(*outs)
    ours = outs[1]
    stuck = np.array(rows)
    np.testing.assert_array_equal(np.asarray(ours.action)[stuck], 0)
    np.testing.assert_array_equal(np.asarray(ours.search_tree.children_visits)[stuck, 0, 0], 8)
    expected = [1.0, 0.0, 0.0] if policy == "muzero_policy" else [1 / 3] * 3
    weights = np.asarray(ours.action_weights)[stuck]
    np.testing.assert_allclose(weights, [expected] * len(rows), rtol=1e-6)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(
    "rows, named", [((1,), "at root 1 (of B = 4)"), ((0, 3), "at roots 0, 3 (of B = 4)")]
)
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "constant-under-jit"])
def test_a_concrete_mask_without_a_valid_action_is_refused(policy, rows, named, jit):
    """A concrete mask, eager or a constant of a jitted function, is looked at: a root with every
    action invalid is refused in one line naming it."""
    root, recurrent_fn, _ = problem(search, 4, 3, False)
    invalid = all_invalid_at(rows)

    def run(key):
        return getattr(search, policy)(None, key, root, recurrent_fn, 4, invalid)

    with pytest.raises(ValueError, match=f"every action is invalid {re.escape(named)}") as err:
        (jax.jit(run) if jit else run)(jax.random.key(0))
    assert "action 0" in str(err.value) and "\n" not in str(err.value)


# --- shapes, checked when the search is traced ------------------------------------------------


def step_changed(recurrent_fn, change):
    """recurrent_fn with `change(out, embedding) -> result` applied to what it returns."""

    def changed(params, key, action, embedding):
        return change(*recurrent_fn(params, key, action, embedding))

    return changed


ROOT_MISTAKES = {  # root -> a wrong root: the message expected
    "value (B+1,)": (
        lambda root: root._replace(value=jnp.zeros(5)),
        "RootFnOutput.value has shape (5,); expected (4,)",
    ),
    "value (B, 1)": (
        lambda root: root._replace(value=root.value[:, None]),
        "RootFnOutput.value has shape (4, 1); expected (4,)",
    ),
    "prior_logits rank 1": (
        lambda root: root._replace(prior_logits=root.prior_logits[0]),
        "RootFnOutput.prior_logits has shape (3,); expected (B, A)",
    ),
    "an embedding leaf of another batch": (
        lambda root: root._replace(embedding={"h": root.embedding, "d": jnp.zeros(2)}),
        "RootFnOutput.embedding['d'] has shape (2,); expected (4, ...)",
    ),
}
STEP_MISTAKES = {  # recurrent_fn's (out, embedding) -> a wrong result: the message expected
    "value (B, 1)": (
        lambda out, h: (out._replace(value=out.value[:, None]), h),
        "recurrent_fn's RecurrentFnOutput.value has shape (4, 1); expected (4,)",
    ),
    "a scalar discount": (
        lambda out, h: (out._replace(discount=jnp.float32(0.9)), h),
        "recurrent_fn's RecurrentFnOutput.discount has shape (); expected (4,)",
    ),
    "reward (B+1,)": (
        lambda out, h: (out._replace(reward=jnp.zeros(5)), h),
        "recurrent_fn's RecurrentFnOutput.reward has shape (5,); expected (4,)",
    ),
    "prior_logits of A - 1 actions": (
        lambda out, h: (out._replace(prior_logits=out.prior_logits[:, :2]), h),
        "recurrent_fn's RecurrentFnOutput.prior_logits has shape (4, 2); expected (4, 3)",
    ),
    "an embedding of another shape": (
        lambda out, h: (out, h[:, :3]),
        "recurrent_fn's new embedding has shape (4, 3); expected (4, 7)",
    ),
    "an embedding of another structure": (
        lambda out, h: (out, {"h": h}),
        "recurrent_fn's new embedding is PyTreeDef({'h': *}); expected the structure",
    ),
    "three results": (
        lambda out, h: (out, h, h),
        "recurrent_fn returned a tuple of length 3; expected a pair (RecurrentFnOutput, new",
    ),
    "the output alone": (
        lambda out, h: out,
        "recurrent_fn returned a RecurrentFnOutput of length 4; expected a pair",
    ),
    "a plain tuple for the output": (
        lambda out, h: (tuple(out), h),
        "recurrent_fn's first result is a tuple; expected a RecurrentFnOutput(reward,",
    ),
}


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("mistake", [*ROOT_MISTAKES, *[f"step: {m}" for m in STEP_MISTAKES]])
def test_a_wrong_shape_is_one_line_naming_the_field(policy, jit, mistake):
    """Each field of the root and of recurrent_fn's result, at the wrong shape or structure: a
    ValueError of one line naming the field, the shape expected and the one received, raised
    when the search is traced (under jit too), as mctx's chex assertions do."""
    root, recurrent_fn, _ = problem(search, 4, 3, False)
    if mistake in ROOT_MISTAKES:
        change, message = ROOT_MISTAKES[mistake]
        root = change(root)
    else:
        change, message = STEP_MISTAKES[mistake.removeprefix("step: ")]
        recurrent_fn = step_changed(recurrent_fn, change)

    def run(key):
        return getattr(search, policy)(None, key, root, recurrent_fn, 4)

    with pytest.raises(ValueError, match=re.escape(message)) as err:
        (jax.jit(run) if jit else run)(jax.random.key(0))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("shape", [(4, 2), (3,), (1, 4, 3)])
def test_a_wrong_mask_is_one_clear_error(shape):
    root, recurrent_fn, _ = problem(search, 4, 3, False)
    traced = jax.jit(
        lambda key, invalid: search.muzero_policy(None, key, root, recurrent_fn, 4, invalid)
    )
    message = re.escape(f"invalid_actions has shape {shape}; expected (4, 3)")
    with pytest.raises(ValueError, match=message):
        search.muzero_policy(None, jax.random.key(0), root, recurrent_fn, 4, jnp.zeros(shape))
    with pytest.raises(ValueError, match=message):
        traced(jax.random.key(0), jnp.zeros(shape))


@pytest.mark.parametrize("policy", POLICIES)
def test_the_checks_leave_nothing_in_the_compiled_search(policy):
    """The checks run in Python while tracing, not in the program: it holds no host callback."""
    root, recurrent_fn, invalid = problem(search, 4, 3, True)

    def run(key, root, invalid):
        return getattr(search, policy)(None, key, root, recurrent_fn, 4, invalid)

    assert "callback" not in jax.jit(run).lower(jax.random.key(0), root, invalid).as_text()
