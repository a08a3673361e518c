"""Run by tests/test_train.py in a process with 8 forced CPU devices: `loop.evaluate` on meshes
of 1, 2, 3 and 8 devices over a validation set none of them divides; prints the results as
JSON, with the unpadded single-device reference."""

import functools
import json

import jax
import jax.numpy as jnp
import numpy as np

from frost import data, nn, parallel
from frost.train import loop, losses

rng = np.random.default_rng(0)
x = rng.standard_normal((101, 5)).astype(np.float32)  # (N, 5): 101 = 4 * 24 + 5
y = rng.integers(0, 3, 101).astype(np.int32)  # (N,)
model = nn.Linear(5, 3, key=jax.random.key(0))
whole = losses.eval_sums(model, (jnp.asarray(x), jnp.asarray(y)))  # the reference, unpadded
out = {"reference": [float(whole["loss_sum"] / 101), float(whole["correct"] / 101)]}
step = loop.make_eval_step()
for n in (1, 2, 3, 8):
    mesh = parallel.make_mesh(data=n, devices=jax.devices()[:n])
    place = functools.partial(parallel.global_batch, sharding=parallel.batch_sharding(mesh))
    with data.Loader(data.Arrays(x, y), 24, shuffle=False) as batches:
        result = loop.evaluate(model, batches, step, 24, place)
    out[n] = [result["loss"], result["accuracy"]]
print(json.dumps(out))
