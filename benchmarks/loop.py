"""The training loop's own cost: `frost.train.fit` against a bare loop over the same jitted step.

    python benchmarks/loop.py             # MLPs small enough that per-step host work shows

Both run one epoch of the same `make_train_step(adamw)` step over the same `frost.data.Loader`
(in-memory arrays, 0 workers): "bare" is `for batch in loader: step(...)` with one wait at the
end; "fit" is `frost.train.fit` with its progress bar off and no evaluation (it still checks
every step for non-finite values, keeps the loader state, logs every 20 steps and writes one
checkpoint at the end). Steps/s is the best of 3 epochs after one warm-up epoch (compilation);
fit/bare < 1 is the loop's overhead.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Publisher, header

from frost import data, nn, optim
from frost.train.loop import FitConfig, TrainState, fit, make_train_step

SIZES = [(256, 64), (1024, 256)]  # (width, batch)


def mlp(width, key):
    k1, k2, k3 = jax.random.split(key, 3)
    return nn.Sequential(
        nn.Linear(64, width, key=k1),
        nn.ReLU(),
        nn.Linear(width, width, key=k2),
        nn.ReLU(),
        nn.Linear(width, 10, key=k3),
    )


def bare(step, model, opt_state, loader, key):
    for batch in loader:
        model, opt_state, metrics = step(model, opt_state, batch, key)
    jax.block_until_ready((model, opt_state))


def with_fit(step, model, opt_state, loader, key):
    with tempfile.TemporaryDirectory() as run_dir:
        fit(
            TrainState(model, opt_state, key),
            step,
            loader,
            FitConfig(epochs=1, run_dir=run_dir, progress=False),
        )


def steps_per_s(runner, width, batch, steps, repeats):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch * steps, 64)).astype(np.float32)  # (steps * B, 64)
    y = rng.integers(0, 10, batch * steps).astype(np.int32)  # (steps * B,)
    model, opt = mlp(width, jax.random.key(0)), optim.adamw(1e-3)
    step, best = make_train_step(opt), float("inf")
    for i in range(repeats + 1):  # the first epoch compiles
        fresh = jax.tree.map(jnp.copy, model)  # the step donates its inputs
        with data.Loader(data.Arrays(x, y), batch, seed=0) as loader:
            t0 = time.perf_counter()
            runner(step, fresh, opt.init(fresh), loader, jax.random.key(1))
            best = min(best, time.perf_counter() - t0) if i else best
    return steps / best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", help="also append the table to this file")
    args = parser.parse_args()
    lines = [
        "| model | batch | bare steps/s | fit steps/s | fit/bare |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for width, batch in SIZES:
        b, f = (steps_per_s(r, width, batch, args.steps, args.repeats) for r in (bare, with_fit))
        lines.append(f"| MLP 64-{width}-{width}-10 | {batch} | {b:.0f} | {f:.0f} | {f / b:.2f} |")
        print(lines[-1], file=sys.stderr, flush=True)
    title = f"fit against a bare loop, {args.steps} steps per epoch, best of {args.repeats}"
    text = header(title, libraries=("jax",)) + "\n\n" + "\n".join(lines)
    print(text)
    Publisher(args.out)(text, final=True)


if __name__ == "__main__":
    main()
