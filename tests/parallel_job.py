"""Helper for tests/test_parallel.py, run in subprocesses (the device count is fixed at JAX
start-up).

    python tests/parallel_job.py strategies          # 8 forced CPU devices: 1 vs 8 devices
    python tests/parallel_job.py process I N PORT    # one of N real processes on localhost

Prints one JSON line with the losses (and byte counts) for the test to compare.
"""

import functools
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

from frost import data, optim, parallel
from frost.models import gpt, resnet
from frost.train import loop
from frost.train.losses import classification_loss, cross_entropy

STEPS = 3


@functools.cache
def _built(build):
    return jax.tree.map(np.asarray, jax.jit(build)(jax.random.key(0)))


def init(build):
    """A fresh copy of the model `build(key)` makes: built once per process (one compile), copied
    for each run (the step donates its inputs), so every strategy trains the same model."""
    return jax.tree.map(jnp.array, _built(build))


def resnet8(
    key,
):  # resnet20's layout (CIFAR stem, 16/32/64 channels, option-A shortcuts), one block a stage
    return resnet.ResNet(resnet.BasicBlock, (1, 1, 1), (16, 32, 64), 10, 3, False, "A", key=key)


def small_gpt(key):
    return gpt.GPT(64, 32, 2, 4, 16, rotary=True, key=key)


def resnet_setup():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 8, 8, 3)).astype(np.float32)
    y = rng.integers(0, 10, 64).astype(np.int32)
    model = init(resnet8)
    return (
        model,
        optim.sgd(0.05, momentum=0.9, nesterov=True, weight_decay=5e-4),
        (x, y),
        classification_loss,
    )


def gpt_loss(model, batch, key):
    x, y = batch
    logits = model(x)
    return cross_entropy(logits, y), (model, {})


def gpt_setup():
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 64, (64, 17)).astype(np.int32)
    model = init(small_gpt)
    return model, optim.adamw(1e-2), (tokens[:, :-1], tokens[:, 1:]), gpt_loss


def losses(setup, mesh=None, strategy=None, batch=16, grad_accum=1):
    model, opt, arrays, loss_fn = setup()
    opt_state = opt.init(model)
    shardings, nbytes = None, None
    if mesh is not None:
        tree = {"model": model, "opt_state": opt_state}
        sh = strategy(tree, mesh)
        shardings = (sh["model"], sh["opt_state"], parallel.batch_sharding(mesh))
        model, opt_state = (
            parallel.put(model, sh["model"]),
            parallel.put(opt_state, sh["opt_state"]),
        )
        # one device
        nbytes = sum(leaf.addressable_shards[0].data.nbytes for leaf in jax.tree.leaves(model))
    step = loop.make_train_step(opt, loss_fn, grad_accum=grad_accum, shardings=shardings)
    out = []
    with data.Loader(
        data.Arrays(*arrays),
        batch,
        seed=0,
        drop_last=True,
        process_index=jax.process_index(),
        process_count=jax.process_count(),
    ) as loader:
        for i, local in zip(range(STEPS), loader):
            b = parallel.global_batch(local, shardings[2]) if mesh is not None else local
            model, opt_state, metrics = step(model, opt_state, b, jax.random.key(i))
            out.append(float(metrics["loss"]))
    total = sum(x.nbytes for x in jax.tree.leaves(model))
    return {"losses": out, "per_device_bytes": nbytes, "total_bytes": total}


def main():
    mode = sys.argv[1]
    if mode == "strategies":
        mesh8 = parallel.make_mesh(data=8)
        result = {
            "resnet_1": losses(resnet_setup),
            "resnet_dp": losses(resnet_setup, mesh8, parallel.replicated),
            "resnet_fsdp": losses(resnet_setup, mesh8, parallel.fsdp),
            "gpt_1": losses(gpt_setup),
            "gpt_fsdp": losses(gpt_setup, mesh8, parallel.fsdp),
            "gpt_tp": losses(
                gpt_setup, parallel.make_mesh(data=4, model=2), parallel.tensor_parallel
            ),
            # 2 micro-batches of 8 rows a step, one row of each a device: the 16-row batch's update
            "gpt_accum": losses(gpt_setup, mesh8, parallel.replicated, grad_accum=2),
        }
        try:
            parallel.check_batch(mesh8, 12)
        except ValueError as e:
            result["batch_error"] = str(e)
        try:
            parallel.make_mesh(data=3)
        except ValueError as e:
            result["mesh_error"] = str(e)
    else:
        index, count, port = map(int, sys.argv[2:5])
        if count > 1:
            parallel.initialize(f"127.0.0.1:{port}", count, index)
        mesh = parallel.make_mesh()
        result = (
            losses(resnet_setup, mesh, parallel.replicated) if count > 1 else losses(resnet_setup)
        )
        result["process_count"] = jax.process_count()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    main()
