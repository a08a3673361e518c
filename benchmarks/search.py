"""frost.rl.search beside mctx and LightZero's compiled C++ MuZero tree: simulations per second of
one batched search call, in one run.

    python benchmarks/search.py            # B in {1, 16, 256, 1024}, N in {16, 64} (~10 min)
    python benchmarks/search.py --quick    # B in {1, 16}, N 16: checks it runs

The network is the same tiny MLP for all (embedding 32, hidden 64, 18 actions; recurrent:
[embedding, one_hot(action)] -> hidden -> [embedding', reward, logits, value]), random weights.
MuZero search (pUCT, noise off, discount 0.997) for all three, and Gumbel MuZero for Frost and
mctx (LightZero's ctree_muzero has no Gumbel search):

- Frost and mctx: the whole search one jitted call, `muzero_policy(params, key, root, ...)`;
  "compile s" is the first call (tracing and compilation) less one call.
- LightZero 0.2.0 (`pip install lightzero --no-deps`): `lzero/mcts/ctree/ctree_muzero/mz_tree*.so`
  loaded by file path (the package's __init__ imports torch), driven as its MuZeroMCTSCtree.search
  does: per simulation, the C++ batch_traverse, the leaves' latent states gathered in Python, the
  network once on the batch of leaves (the same MLP, jitted), then the C++ batch_backpropagate.

Rows are sims/s = B * N / seconds per search call (median of 7 samples of about 4096
simulations each, after 2 warm-up calls);
frost/peer is Frost's rate over the row's, for the same B, N and search.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import sys

import jax
import jax.numpy as jnp
import mctx
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import attempt, header, measure, table

from frost.rl import search

ACTIONS, EMBED, HIDDEN, DISCOUNT = 18, 32, 64, 0.997
STEPS = 7  # timed samples, each of inner() calls


def inner(sims: int) -> int:
    """Calls per timed sample: about 4096 simulations, so a sample is not a few microseconds."""
    return max(1, 4096 // sims)


def network(key):
    """The tiny MLP's weights: a root head and a recurrent (dynamics + prediction) MLP."""
    k = jax.random.split(key, 4)
    normal = jax.random.normal
    return {
        "root_out": normal(k[0], (EMBED, ACTIONS + 1)) / EMBED**0.5,  # [logits, value]
        "w1": normal(k[1], (EMBED + ACTIONS, HIDDEN)) / (EMBED + ACTIONS) ** 0.5,
        "w2": normal(k[2], (HIDDEN, EMBED + ACTIONS + 2)) / HIDDEN**0.5,
    }


def root_out(params, embedding):  # (B, E) -> logits (B, A), value (B,)
    out = embedding @ params["root_out"]
    return out[:, :ACTIONS], jnp.tanh(out[:, -1])


def step(params, action, embedding):
    """(B,) actions from (B, E) states -> (reward (B,), logits (B, A), value (B,), (B, E))."""
    x = jnp.concatenate([embedding, jax.nn.one_hot(action, ACTIONS)], -1)  # (B, E + A)
    out = jnp.tanh(x @ params["w1"]) @ params["w2"]  # (B, E + A + 2)
    new = jnp.tanh(out[:, :EMBED])
    logits, reward, value = out[:, EMBED:-2], jnp.tanh(out[:, -2]), jnp.tanh(out[:, -1])
    return reward, logits, value, new


def jax_search(lib, policy: str, params, batch: int, sims: int):
    """One jitted search call of mctx or frost.rl.search (the same code for both: one import)."""

    def recurrent_fn(params, key, action, embedding):
        reward, logits, value, new = step(params, action, embedding)
        discount = jnp.full_like(reward, DISCOUNT)
        out = lib.RecurrentFnOutput(
            reward=reward, discount=discount, prior_logits=logits, value=value
        )
        return out, new

    noise = {"muzero": {"dirichlet_fraction": 0.0}, "gumbel_muzero": {"gumbel_scale": 0.0}}[policy]
    run = getattr(lib, f"{policy}_policy")

    @jax.jit
    def call(params, key, embedding):
        logits, value = root_out(params, embedding)
        root = lib.RootFnOutput(prior_logits=logits, value=value, embedding=embedding)
        with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
            out = run(params, key, root, recurrent_fn, sims, **noise)
        return out.action_weights, out.search_tree.summary().value

    embedding = jax.random.normal(jax.random.key(1), (batch, EMBED))
    key = jax.random.key(2)
    return measure(
        lambda: call(params, key, embedding),
        lambda out: float(jax.block_until_ready(out)[1].mean()),
        steps=STEPS,
        inner=inner(batch * sims),
    )


def lightzero_tree():
    """LightZero's compiled mz_tree, loaded by file path without importing lzero (torch)."""
    spec = importlib.util.find_spec("lzero")
    if spec is None:
        raise ImportError("skipped: pip install lightzero --no-deps")
    path = glob.glob(
        os.path.join(spec.submodule_search_locations[0], "mcts/ctree/ctree_muzero/mz_tree*.so")
    )
    spec = importlib.util.spec_from_file_location("mz_tree", path[0])
    tree = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tree)
    return tree


def lightzero_search(tree, params, batch: int, sims: int):
    """LightZero's MuZeroMCTSCtree.search (lzero/mcts/tree_search/mcts_ctree.py) with our MLP."""
    recurrent = jax.jit(lambda params, action, embedding: step(params, action, embedding))
    initial = jax.jit(root_out)
    embedding = jax.random.normal(jax.random.key(1), (batch, EMBED))

    def call():
        logits, value = (np.asarray(x) for x in initial(params, embedding))
        roots = tree.Roots(batch, [list(range(ACTIONS))] * batch)
        to_play = [-1] * batch
        roots.prepare_no_noise([0.0] * batch, logits.tolist(), to_play)
        stats = tree.MinMaxStatsList(batch)
        stats.set_delta(0.01)
        states = [np.asarray(embedding)]  # states[s][b]: the state of simulation s's leaf b
        for sim in range(sims):
            results = tree.ResultsWrapper(num=batch)
            path, index, actions, to_play_now = tree.batch_traverse(
                roots, 19652, 1.25, DISCOUNT, stats, results, to_play
            )
            leaves = np.asarray([states[s][b] for s, b in zip(path, index)])
            reward, logits, value, new = recurrent(params, np.asarray(actions), leaves)
            states.append(np.asarray(new))
            tree.batch_backpropagate(
                sim + 1,
                DISCOUNT,
                np.asarray(reward).tolist(),
                np.asarray(value).tolist(),
                np.asarray(logits).tolist(),
                stats,
                results,
                to_play_now,
            )
        return roots

    sync = lambda roots: float(np.mean(roots.get_values()))  # noqa: E731
    return measure(call, sync, steps=STEPS, inner=inner(batch * sims))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="B in {1, 16}, N 16: checks it runs")
    args = parser.parse_args()
    batches, simulations = ((1, 16), (16,)) if args.quick else ((1, 16, 256, 1024), (16, 64))
    params = network(jax.random.key(0))
    try:
        tree = lightzero_tree()
    except Exception as e:  # the rows say why
        tree, reason = None, e
    rows = []
    for sims in simulations:
        for batch in batches:
            name, n = f"MuZero B={batch} N={sims}", batch * sims
            attempt(
                rows,
                name,
                "Frost",
                n,
                lambda: jax_search(search, "muzero", params, batch, sims),
                baseline=True,
            )
            attempt(rows, name, "mctx", n, lambda: jax_search(mctx, "muzero", params, batch, sims))

            def lightzero():
                if tree is None:
                    raise reason
                return lightzero_search(tree, params, batch, sims)

            attempt(rows, name, "LightZero ctree", n, lightzero)
            name = f"Gumbel B={batch} N={sims}"
            attempt(
                rows,
                name,
                "Frost",
                n,
                lambda: jax_search(search, "gumbel_muzero", params, batch, sims),
                baseline=True,
            )
            attempt(
                rows,
                name,
                "mctx",
                n,
                lambda: jax_search(mctx, "gumbel_muzero", params, batch, sims),
            )
    title = "Batched tree search: simulations per second of one search call"
    print(header(title, libraries=("jax", "mctx", "lightzero")), table(rows, "sims/s"), sep="\n\n")


if __name__ == "__main__":
    main()
