"""ResNet training-step throughput: Frost beside PyTorch, torch.compile, Equinox and plain JAX.

    python benchmarks/resnet.py                       # CPU, fp32, batch 128: the issue-6 table
    python benchmarks/resnet.py --quick               # smoke test: ResNet-20, 1 warm-up, 2 steps
    python benchmarks/resnet.py --device gpu --batch-size 256 --dtype fp32,bf16
    python benchmarks/resnet.py --workload e2e --device gpu --batch-size 32 --e2e-steps 300

Workload "step" (default): one training step of the CIFAR ResNet-18 (`cifar_resnet18`, 64-512
channels, projection shortcuts) and of ResNet-20 (16-64 channels, option-A shortcuts) on one fixed
batch of random 32x32x3 images with 10 classes: forward, softmax cross-entropy, backward, and SGD
(learning rate 0.1, Nesterov momentum 0.9, weight decay 5e-4 on every parameter, as
torch.optim.SGD), BatchNorm in training mode (batch statistics, running statistics updated).
Every peer builds the same network itself:

  frost               frost.models.resnet + frost.train.loop.make_train_step(frost.optim.sgd(...))
  torch               PyTorch eager, NCHW (the model is written below)
  torch-cl            PyTorch eager, channels_last model and input
  torch-compile       torch.compile (default mode) of the channels_last model; optimizer eager
  torch-compile-nchw  the same on the NCHW model (not run unless named in --only)
  equinox             Equinox (eqx.nn.Conv2d, eqx.nn.BatchNorm with eqx.nn.State, vmap over the
                      batch as Equinox's docs do it) + optax, eqx.filter_jit
  jax                 plain JAX: NHWC, lax.conv_general_dilated, a dict of params, optax, jax.jit

By default cifar_resnet18 runs every peer but torch-compile-nchw, and resnet20 runs Frost and
the three PyTorch modes. The first call (compilation, cuDNN autotuning, one step) is timed apart
("compile s" = first call - one step); then --warmup untimed steps; then --steps timed samples of
--inner steps each, each sample waiting for the device (block_until_ready / cuda.synchronize).
img/s is batch / median step; frost/peer is Frost's img/s over the peer's (> 1: Frost is faster).
A peer that fails (missing package, a compiler error) gets its error in its row; the rest go on.
torch.compile starts from an empty cache (a temporary TORCHINDUCTOR_CACHE_DIR unless one is set),
so its compile time is what a new user waits.

Workload "e2e" (the reference workload of Frost's first benchmark): ResNet-20 at batch 32, wall
time of --e2e-steps steps from an empty start, data loading included: Frost reads --e2e-samples
random uint8 images through frost.data.Loader (+ prefetch_to_device) into its jitted step, which
normalises them on the device; PyTorch reads the same arrays through a torch DataLoader over a
TensorDataset. Each peer runs in a fresh subprocess (its import, compilation and worker start-up
count; no JAX in the PyTorch process, so its DataLoader forks as usual).

bf16 casts parameters, BatchNorm statistics and inputs to bfloat16 (no autocast, no fp32 master
weights); the loss is computed in fp32. fp32 on a GPU uses each library's default math: cuDNN and
XLA allow TF32 in convolutions.
"""

from __future__ import annotations

import argparse
import atexit
import functools
import gc
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (
    Publisher,
    Row,
    attempt,
    cores,
    header,
    measure,
    measure_torch,
    one_line,
    status,
    table,
)

LR, MOMENTUM, WEIGHT_DECAY = 0.1, 0.9, 5e-4
CLASSES, IMAGE = 10, 32
ARCH = {  # depths, widths, shortcut option (A: subsample + zero channels, B: 1x1 conv + BN)
    "cifar_resnet18": ((2, 2, 2, 2), (64, 128, 256, 512), "B"),
    "resnet20": ((3, 3, 3), (16, 32, 64), "A"),
}
PEERS = {
    "frost": "Frost",
    "torch": "PyTorch eager",
    "torch-cl": "PyTorch eager channels_last",
    "torch-compile": "torch.compile channels_last",
    "torch-compile-nchw": "torch.compile NCHW",
    "equinox": "Equinox + Optax",
    "jax": "plain JAX lax.conv",
}
DEFAULT_PEERS = {
    "cifar_resnet18": ["frost", "torch", "torch-cl", "torch-compile", "equinox", "jax"],
    "resnet20": ["frost", "torch", "torch-cl", "torch-compile"],
}
E2E_PEERS = ["frost", "torch"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--workload", choices=("step", "e2e"), default="step")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--batch-size", type=int, default=None, help="default 128 (step), 32 (e2e)")
    p.add_argument("--dtype", default="fp32", help="fp32, bf16, or a comma list (fp32,bf16)")
    p.add_argument(
        "--models", default=None, help="comma list of cifar_resnet18, resnet20 (step default: both)"
    )
    p.add_argument("--only", default=None, help=f"comma list of peers: {', '.join(PEERS)}")
    p.add_argument("--steps", type=int, default=5, help="timed samples (median taken)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps after the first call")
    p.add_argument("--inner", type=int, default=1, help="steps per timed sample")
    p.add_argument(
        "--quick", action="store_true", help="smoke test: resnet20 only, --warmup 1 --steps 2"
    )
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="torch.set_num_threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds: peers not yet started when this is spent are skipped (their rows say so)",
    )
    p.add_argument(
        "--out", default=None, help="also add the table to this file (kept up to date row by row)"
    )
    p.add_argument("--e2e-steps", type=int, default=300)
    p.add_argument(
        "--e2e-samples", type=int, default=50000, help="random uint8 images in the data set"
    )
    p.add_argument(
        "--e2e-repeats", type=int, default=1, help="fresh runs per peer; the median is reported"
    )
    p.add_argument("--workers", type=int, default=min(4, cores()), help="data-loader workers (e2e)")
    p.add_argument("--child-timeout", type=float, default=600, help="seconds per e2e subprocess")
    p.add_argument("--e2e-child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.dtypes = [d.strip() for d in args.dtype.split(",")]
    if bad := [d for d in args.dtypes if d not in ("fp32", "bf16")]:
        p.error(f"--dtype: unknown {bad}; use fp32 and/or bf16")
    if args.batch_size is None:
        args.batch_size = 32 if args.workload == "e2e" else 128
    if args.workload == "e2e" and args.e2e_samples < args.batch_size:
        p.error(
            f"--e2e-samples {args.e2e_samples} must be at least the batch size {args.batch_size}"
        )
    if args.quick:
        args.warmup, args.steps = min(args.warmup, 1), min(args.steps, 2)
        args.e2e_steps = min(args.e2e_steps, 20)
    default_models = (
        "resnet20" if args.quick or args.workload == "e2e" else "cifar_resnet18,resnet20"
    )
    args.models = [m.strip() for m in (args.models or default_models).split(",")]
    if bad := [m for m in args.models if m not in ARCH]:
        p.error(f"--models: unknown {bad}; choose from {', '.join(ARCH)}")
    args.only = None if args.only is None else [n.strip() for n in args.only.split(",")]
    if args.only and (bad := [n for n in args.only if n not in PEERS]):
        p.error(f"--only: unknown {bad}; choose from {', '.join(PEERS)}")
    if (
        args.workload == "e2e"
        and args.only
        and (bad := [n for n in args.only if n in ("equinox", "jax")])
    ):
        p.error(f"--only: {bad} have no e2e variant; use frost and the torch modes")
    return args


def configure(args):
    """Environment that must be set before JAX is imported."""
    os.environ["JAX_PLATFORMS"] = "cuda" if args.device == "gpu" else "cpu"
    warnings.filterwarnings("ignore", message=".*donated buffers.*")  # CPU ignores donation


# --- JAX-based peers --------------------------------------------------------------------------


def jax_check(args):
    """Fail with JAX's own message when the asked-for platform is missing (else errors are
    obscure)."""
    import jax

    platform = "cuda" if args.device == "gpu" else "cpu"
    try:
        jax.devices(platform)
    except Exception as e:
        raise RuntimeError(
            f"JAX finds no {platform} devices (JAX_PLATFORMS={os.environ.get('JAX_PLATFORMS')}): "
            f"{type(e).__name__} {e}; is jax installed with its CUDA plugin?"
        ) from e


def jax_dtype(name):
    import jax.numpy as jnp

    return {"fp32": jnp.float32, "bf16": jnp.bfloat16}[name]


def jax_batch(args, dtype, layout):
    import jax

    k1, k2 = jax.random.split(jax.random.key(args.seed + 1))
    shape = (
        (args.batch_size, IMAGE, IMAGE, 3)
        if layout == "NHWC"
        else (args.batch_size, 3, IMAGE, IMAGE)
    )
    return (
        jax.random.normal(k1, shape, jax_dtype("fp32")).astype(dtype),
        jax.random.randint(k2, (args.batch_size,), 0, CLASSES),
    )


def cast_floats(tree, dtype):
    import jax
    import jax.numpy as jnp

    return jax.tree.map(
        lambda a: (
            a.astype(dtype)
            if isinstance(a, jax.Array) and jnp.issubdtype(a.dtype, jnp.floating)
            else a
        ),
        tree,
    )


def jax_sync(out):
    import jax

    jax.block_until_ready(out)
    return out["loss"]


def optax_sgd():
    import optax

    return optax.chain(
        optax.add_decayed_weights(WEIGHT_DECAY), optax.sgd(LR, momentum=MOMENTUM, nesterov=True)
    )


def xent(logits, labels):
    import jax.numpy as jnp
    import optax

    return optax.softmax_cross_entropy_with_integer_labels(
        logits.astype(jnp.float32), labels
    ).mean()


def run_frost(name, dtype, args):
    import jax

    from frost import optim
    from frost.models import resnet
    from frost.train import loop

    jax_check(args)
    key = jax.random.key(args.seed)
    model = cast_floats(resnet.MODELS[name](CLASSES, 3, key=key), jax_dtype(dtype))
    optimizer = optim.sgd(LR, momentum=MOMENTUM, nesterov=True, weight_decay=WEIGHT_DECAY)
    state = {"model": model, "opt": optimizer.init(model)}
    train_step = loop.make_train_step(optimizer)
    batch = jax_batch(args, jax_dtype(dtype), "NHWC")

    def step():
        state["model"], state["opt"], metrics = train_step(state["model"], state["opt"], batch, key)
        return dict(state, loss=metrics["loss"])

    return measure(step, jax_sync, warmup=args.warmup, steps=args.steps, inner=args.inner)


def run_equinox(name, dtype, args):
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    jax_check(args)
    depths, widths, option = ARCH[name]
    dt = jax_dtype(dtype)

    def bn(c):
        return eqx.nn.BatchNorm(c, axis_name="batch", momentum=1 - 0.1, mode="batch", dtype=dt)

    def conv(cin, cout, k, stride, key):
        return eqx.nn.Conv2d(
            cin, cout, k, stride, padding=k // 2, use_bias=False, dtype=dt, key=key
        )

    class Block(eqx.Module):  # one sample, (C, H, W)
        conv1: eqx.nn.Conv2d
        bn1: eqx.nn.BatchNorm
        conv2: eqx.nn.Conv2d
        bn2: eqx.nn.BatchNorm
        proj: eqx.nn.Conv2d | None
        proj_bn: eqx.nn.BatchNorm | None
        stride: int = eqx.field(static=True)
        pad: int = eqx.field(static=True)

        def __init__(self, cin, cout, stride, key):
            k1, k2, k3 = jax.random.split(key, 3)
            self.conv1, self.bn1 = conv(cin, cout, 3, stride, k1), bn(cout)
            self.conv2, self.bn2 = conv(cout, cout, 3, 1, k2), bn(cout)
            self.stride, self.pad, self.proj, self.proj_bn = stride, 0, None, None
            if stride != 1 or cin != cout:
                if option == "A":
                    self.pad = cout - cin
                else:
                    self.proj, self.proj_bn = conv(cin, cout, 1, stride, k3), bn(cout)

        def __call__(self, x, state):
            y, state = self.bn1(self.conv1(x), state)
            y, state = self.bn2(self.conv2(jax.nn.relu(y)), state)
            if self.proj is not None:
                s, state = self.proj_bn(self.proj(x), state)
            else:
                s = x[:, :: self.stride, :: self.stride]
                s = jnp.pad(s, ((self.pad // 2, self.pad - self.pad // 2), (0, 0), (0, 0)))
            return jax.nn.relu(y + s), state

    class Net(eqx.Module):
        stem: eqx.nn.Conv2d
        stem_bn: eqx.nn.BatchNorm
        blocks: tuple
        head: eqx.nn.Linear

        def __init__(self, key):
            keys = iter(jax.random.split(key, sum(depths) + 2))
            self.stem, self.stem_bn = conv(3, widths[0], 3, 1, next(keys)), bn(widths[0])
            blocks, cin = [], widths[0]
            for stage, (depth, width) in enumerate(zip(depths, widths)):
                for i in range(depth):
                    blocks.append(Block(cin, width, 2 if stage > 0 and i == 0 else 1, next(keys)))
                    cin = width
            self.blocks = tuple(blocks)
            self.head = eqx.nn.Linear(cin, CLASSES, dtype=dt, key=next(keys))

        def __call__(self, x, state):
            x, state = self.stem_bn(self.stem(x), state)
            x = jax.nn.relu(x)
            for block in self.blocks:
                x, state = block(x, state)
            return self.head(jnp.mean(x, axis=(1, 2))), state

    model, bn_state = eqx.nn.make_with_state(Net)(jax.random.key(args.seed))
    tx = optax_sgd()
    opt_state = tx.init(eqx.filter(model, eqx.is_inexact_array))
    x, labels = jax_batch(args, dt, "NCHW")

    def loss_fn(model, bn_state, x, labels):
        batched = jax.vmap(model, axis_name="batch", in_axes=(0, None), out_axes=(0, None))
        logits, bn_state = batched(x, bn_state)
        return xent(logits, labels), bn_state

    @eqx.filter_jit
    def train_step(model, bn_state, opt_state, x, labels):
        (loss, bn_state), grads = eqx.filter_value_and_grad(loss_fn, has_aux=True)(
            model, bn_state, x, labels
        )
        updates, opt_state = tx.update(grads, opt_state, eqx.filter(model, eqx.is_inexact_array))
        return eqx.apply_updates(model, updates), bn_state, opt_state, loss

    state = {"model": model, "bn": bn_state, "opt": opt_state}

    def step():
        state["model"], state["bn"], state["opt"], loss = train_step(
            state["model"], state["bn"], state["opt"], x, labels
        )
        return dict(state, loss=loss)

    return measure(step, jax_sync, warmup=args.warmup, steps=args.steps, inner=args.inner)


def run_plain_jax(name, dtype, args):
    import jax
    import jax.numpy as jnp
    import optax

    jax_check(args)
    depths, widths, option = ARCH[name]
    dt = jax_dtype(dtype)
    keys = iter(jax.random.split(jax.random.key(args.seed), 4 * sum(depths) + 4))

    def conv_weight(k, cin, cout):  # HWIO, Kaiming normal (fan-out)
        return (
            jax.random.normal(next(keys), (k, k, cin, cout)) * math.sqrt(2 / (k * k * cout))
        ).astype(dt)

    def bn_init(c):
        return {"scale": jnp.ones(c, dt), "bias": jnp.zeros(c, dt)}, {
            "mean": jnp.zeros(c, dt),
            "var": jnp.ones(c, dt),
        }

    params, stats, plan = (
        {},
        {},
        [],
    )  # plan: the static (stride, shortcut, zero channels) of each block
    params["stem"], (params["stem_bn"], stats["stem_bn"]) = (
        conv_weight(3, 3, widths[0]),
        bn_init(widths[0]),
    )
    cin = widths[0]
    for stage, (depth, width) in enumerate(zip(depths, widths)):
        for i in range(depth):
            stride, b = (2 if stage > 0 and i == 0 else 1), f"block{len(plan)}"
            p, s = {"conv1": conv_weight(3, cin, width), "conv2": conv_weight(3, width, width)}, {}
            (p["bn1"], s["bn1"]), (p["bn2"], s["bn2"]) = bn_init(width), bn_init(width)
            project = (stride != 1 or cin != width) and option == "B"
            if project:
                p["proj"], (p["proj_bn"], s["proj_bn"]) = conv_weight(1, cin, width), bn_init(width)
            plan.append((b, stride, project, 0 if project else width - cin))
            params[b], stats[b], cin = p, s, width
    bound = 1 / math.sqrt(cin)
    params["head"] = {
        "w": jax.random.uniform(next(keys), (cin, CLASSES), dt, -bound, bound),
        "b": jax.random.uniform(next(keys), (CLASSES,), dt, -bound, bound),
    }

    def conv(x, w, stride):
        pad = w.shape[0] // 2
        return jax.lax.conv_general_dilated(
            x,
            w,
            (stride, stride),
            ((pad, pad), (pad, pad)),
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
        )

    def batch_norm(x, p, s):  # batch statistics; returns the new running statistics
        mean, var = jnp.mean(x, (0, 1, 2)), jnp.var(x, (0, 1, 2))
        n = x.size // x.shape[-1]
        new = {
            "mean": 0.9 * s["mean"] + 0.1 * mean,
            "var": 0.9 * s["var"] + 0.1 * var * (n / (n - 1)),
        }
        return (x - mean) * jax.lax.rsqrt(var + 1e-5) * p["scale"] + p[
            "bias"
        ], jax.lax.stop_gradient(new)

    def forward(params, stats, x):
        new = {}
        y, new["stem_bn"] = batch_norm(
            conv(x, params["stem"], 1), params["stem_bn"], stats["stem_bn"]
        )
        x = jax.nn.relu(y)
        for b, stride, project, zeros in plan:
            p, s, n = params[b], stats[b], {}
            y, n["bn1"] = batch_norm(conv(x, p["conv1"], stride), p["bn1"], s["bn1"])
            y, n["bn2"] = batch_norm(conv(jax.nn.relu(y), p["conv2"], 1), p["bn2"], s["bn2"])
            if project:
                short, n["proj_bn"] = batch_norm(
                    conv(x, p["proj"], stride), p["proj_bn"], s["proj_bn"]
                )
            else:
                short = jnp.pad(
                    x[:, ::stride, ::stride, :],
                    ((0, 0), (0, 0), (0, 0), (zeros // 2, zeros - zeros // 2)),
                )
            x, new[b] = jax.nn.relu(y + short), n
        return jnp.mean(x, (1, 2)) @ params["head"]["w"] + params["head"]["b"], new

    def loss_fn(params, stats, x, labels):
        logits, new_stats = forward(params, stats, x)
        return xent(logits, labels), new_stats

    tx = optax_sgd()

    @functools.partial(jax.jit, donate_argnums=(0, 1, 2))
    def train_step(params, stats, opt_state, x, labels):
        (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, stats, x, labels)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), stats, opt_state, loss

    state = {"params": params, "stats": stats, "opt": tx.init(params)}
    x, labels = jax_batch(args, dt, "NHWC")

    def step():
        state["params"], state["stats"], state["opt"], loss = train_step(
            state["params"], state["stats"], state["opt"], x, labels
        )
        return dict(state, loss=loss)

    return measure(step, jax_sync, warmup=args.warmup, steps=args.steps, inner=args.inner)


# --- PyTorch ----------------------------------------------------------------------------------


@functools.cache
def torch_resnet_class():
    import torch
    from torch import nn
    from torch.nn import functional as F

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride, option):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.stride, self.pad, self.shortcut = stride, 0, None
            if stride != 1 or cin != cout:
                if option == "A":  # subsample, then zero channels on both sides
                    self.pad = cout - cin
                else:
                    self.shortcut = nn.Sequential(
                        nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
                    )

        def forward(self, x):
            y = F.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            if self.shortcut is not None:
                s = self.shortcut(x)
            elif self.stride != 1 or self.pad:
                s = F.pad(
                    x[:, :, :: self.stride, :: self.stride],
                    (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2),
                )
            else:
                s = x
            return F.relu(y + s)

    class ResNet(nn.Module):
        def __init__(self, depths, widths, option, classes=CLASSES):
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, widths[0], 3, 1, 1, bias=False),
                nn.BatchNorm2d(widths[0]),
                nn.ReLU(inplace=True),
            )
            blocks, cin = [], widths[0]
            for stage, (depth, width) in enumerate(zip(depths, widths)):
                for i in range(depth):
                    blocks.append(BasicBlock(cin, width, 2 if stage > 0 and i == 0 else 1, option))
                    cin = width
            self.blocks = nn.Sequential(*blocks)
            self.fc = nn.Linear(cin, classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

        def forward(self, x):
            return self.fc(torch.mean(self.blocks(self.stem(x)), dim=(2, 3)))

    return ResNet


def torch_setup(name, dtype, args, mode):
    """(model, forward, optimizer, device, torch dtype) for a PyTorch mode: torch, torch-cl,
    torch-compile[-nchw]."""
    import torch

    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if args.device == "gpu" else "cpu")
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    tdtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    torch.manual_seed(args.seed)
    model = torch_resnet_class()(*ARCH[name]).to(device=device, dtype=tdtype).train()
    if mode in ("torch-cl", "torch-compile"):
        model = model.to(memory_format=torch.channels_last)
    forward = model
    if mode.startswith("torch-compile"):
        torch._dynamo.reset()
        forward = torch.compile(model)
    opt = torch.optim.SGD(
        model.parameters(), lr=LR, momentum=MOMENTUM, nesterov=True, weight_decay=WEIGHT_DECAY
    )
    return model, forward, opt, device, tdtype


def run_torch(name, dtype, args, mode):
    import torch

    model, forward, opt, device, tdtype = torch_setup(name, dtype, args, mode)
    g = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randn(args.batch_size, 3, IMAGE, IMAGE, generator=g).to(device=device, dtype=tdtype)
    if mode in ("torch-cl", "torch-compile"):
        x = x.contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, CLASSES, (args.batch_size,), generator=g).to(device)
    loss_fn = torch.nn.CrossEntropyLoss()

    return measure_torch(lambda: loss_fn(forward(x).float(), labels), opt, device, args)


# --- the step workload ------------------------------------------------------------------------


def step_workload(args, publish):
    configure(args)
    runners = {"frost": run_frost, "equinox": run_equinox, "jax": run_plain_jax}
    jobs = [
        (name, dtype, peer)
        for name in args.models
        for dtype in args.dtypes
        for peer in (args.only or DEFAULT_PEERS[name])
    ]
    rows, start, stop = [], time.perf_counter(), None
    for name, dtype, peer in jobs:
        label = f"{name} {dtype}"
        if stop is None and args.budget is not None and time.perf_counter() - start > args.budget:
            stop = f"skipped: --budget {args.budget:.0f} s spent"
        if stop is not None:
            rows.append(
                Row(label, PEERS[peer], args.batch_size, error=stop, baseline=peer == "frost")
            )
            continue
        fn = functools.partial(run_torch, mode=peer) if peer.startswith("torch") else runners[peer]
        try:
            attempt(
                rows,
                label,
                PEERS[peer],
                args.batch_size,
                functools.partial(fn, name, dtype, args),
                baseline=peer == "frost",
            )
        except KeyboardInterrupt:  # Ctrl-C or `timeout -s INT`: report what was measured
            stop = "skipped: interrupted"
            rows.append(
                Row(
                    label,
                    PEERS[peer],
                    args.batch_size,
                    error="interrupted",
                    baseline=peer == "frost",
                )
            )
        gc.collect()
        if peer.startswith("torch") and args.device == "gpu":
            import torch

            torch.cuda.empty_cache()
        publish(step_report(args, rows))
    return step_report(args, rows)


def step_report(args, rows):
    title = (
        f"ResNet training step on {args.device.upper()}, batch {args.batch_size}, "
        f"{'/'.join(args.dtypes)}; median of {args.steps} x {args.inner} steps after {args.warmup} "
        "warm-up"
    )
    return (
        header(title, gpu_name(args), ("jax", "torch", "equinox", "optax")) + "\n\n" + table(rows)
    )


def gpu_name(args):
    if args.device != "gpu":
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.strip()
        return out.replace("\n", "; ") or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


# --- the e2e workload -------------------------------------------------------------------------

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


def e2e_arrays(args):
    import numpy as np

    rng = np.random.default_rng(args.seed)
    # NHWC, as CIFAR's
    images = rng.integers(0, 256, (args.e2e_samples, IMAGE, IMAGE, 3), dtype=np.uint8)
    labels = rng.integers(0, CLASSES, args.e2e_samples).astype(np.int32)
    return images, labels


def e2e_frost(name, dtype, args, t0):
    import jax
    import jax.numpy as jnp

    from frost import data, optim
    from frost.models import resnet
    from frost.train import loop

    jax_check(args)
    images, labels = e2e_arrays(args)
    dt = jax_dtype(dtype)
    mean, std = jnp.asarray(MEAN, jnp.float32), jnp.asarray(STD, jnp.float32)

    def prepare(batch):  # uint8 NHWC -> normalised, on the device inside the step
        x, y = batch
        return ((x.astype(jnp.float32) / 255 - mean) / std).astype(dt), y

    key = jax.random.key(args.seed)
    model = cast_floats(resnet.MODELS[name](CLASSES, 3, key=key), dt)
    optimizer = optim.sgd(LR, momentum=MOMENTUM, nesterov=True, weight_decay=WEIGHT_DECAY)
    opt_state = optimizer.init(model)
    train_step = loop.make_train_step(optimizer, prepare=prepare)
    done, first = 0, None
    with data.Loader(
        data.Arrays(images, labels),
        args.batch_size,
        shuffle=True,
        seed=args.seed,
        drop_last=True,
        workers=args.workers,
    ) as loader:
        while done < args.e2e_steps:
            for batch in data.prefetch_to_device(loader):
                model, opt_state, metrics = train_step(model, opt_state, batch, key)
                done += 1
                if first is None:
                    jax.block_until_ready(metrics)
                    first = time.perf_counter() - t0
                if done == args.e2e_steps:
                    break
    jax.block_until_ready((model, opt_state))
    return first, float(metrics["loss"])


def e2e_torch(name, dtype, args, t0, mode):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    images, labels = e2e_arrays(args)
    model, forward, opt, device, tdtype = torch_setup(name, dtype, args, mode)
    channels_last = mode in ("torch-cl", "torch-compile")
    dataset = TensorDataset(
        torch.from_numpy(images).permute(0, 3, 1, 2).contiguous(), torch.from_numpy(labels).long()
    )
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=args.workers,
        pin_memory=device.type == "cuda",
        persistent_workers=args.workers > 0,
    )
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)
    loss_fn = torch.nn.CrossEntropyLoss()
    done, first = 0, None
    while done < args.e2e_steps:
        for x, y in loader:
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)
            x = ((x.float() / 255 - mean) / std).to(tdtype)
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(forward(x).float(), y)
            loss.backward()
            opt.step()
            done += 1
            if first is None:
                loss.item()
                first = time.perf_counter() - t0
            if done == args.e2e_steps:
                break
    if device.type == "cuda":
        torch.cuda.synchronize()
    return first, loss.item()


def e2e_child(args):
    """One e2e run in this (fresh) process; prints one RESULT line of JSON."""
    t0 = time.perf_counter()
    name, dtype = args.models[0], args.dtypes[0]
    if args.e2e_child == "frost":
        configure(args)
        first, loss = e2e_frost(name, dtype, args, t0)
    else:
        first, loss = e2e_torch(name, dtype, args, t0, args.e2e_child)
    total = time.perf_counter() - t0
    print("RESULT " + json.dumps({"total_s": total, "first_s": first, "loss": loss}), flush=True)


def e2e_workload(args, publish):
    rows, start, interrupted = [], time.perf_counter(), False
    for name in args.models:
        for dtype in args.dtypes:
            for peer in args.only or E2E_PEERS:
                runs, error = [], "skipped: interrupted" if interrupted else None
                for _ in range(0 if interrupted else args.e2e_repeats):
                    if args.budget is not None and time.perf_counter() - start > args.budget:
                        error = error or f"skipped: --budget {args.budget:.0f} s spent"
                        break
                    cmd = [
                        sys.executable,
                        os.path.abspath(__file__),
                        "--workload",
                        "e2e",
                        "--e2e-child",
                        peer,
                        "--models",
                        name,
                        "--dtype",
                        dtype,
                        "--device",
                        args.device,
                        "--batch-size",
                        str(args.batch_size),
                        "--e2e-steps",
                        str(args.e2e_steps),
                        "--e2e-samples",
                        str(args.e2e_samples),
                        "--workers",
                        str(args.workers),
                        "--threads",
                        str(args.threads),
                        "--seed",
                        str(args.seed),
                    ]
                    print(f"[e2e {name} {dtype}] {peer} ...", file=sys.stderr, flush=True)
                    try:
                        proc = subprocess.run(
                            cmd, capture_output=True, text=True, timeout=args.child_timeout
                        )
                        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
                        if proc.returncode or not lines:
                            sys.stderr.write(proc.stderr[-4000:])
                            error = one_line(f"exit {proc.returncode}: {last_error(proc.stderr)}")
                            break
                        runs.append(json.loads(lines[-1][len("RESULT ") :]))
                        print(
                            f"[e2e {name} {dtype}] {peer}: {runs[-1]}", file=sys.stderr, flush=True
                        )
                    except subprocess.TimeoutExpired:
                        error = f"timed out after {args.child_timeout:.0f} s"
                        break
                    except KeyboardInterrupt:
                        error, interrupted = "interrupted", True
                        break
                rows.append(
                    {
                        "model": f"{name} {dtype}",
                        "framework": PEERS[peer],
                        "runs": runs,
                        "error": None if runs else error,
                        "baseline": peer == "frost",
                    }
                )
                publish(e2e_report(args, rows))
    return e2e_report(args, rows)


def last_error(stderr: str) -> str:
    """The exception line of a traceback (the last line that looks like `SomeError: ...`)."""
    lines = stderr.strip().splitlines() or [""]
    found = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception|Interrupt|Exit)\b", ln)]
    return (found or lines)[-1]


def e2e_report(args, rows):
    title = (
        f"Reference workload on {args.device.upper()}: {', '.join(args.models)}, batch "
        f"{args.batch_size}, {args.e2e_steps} steps end to end (from the start of a fresh process "
        f"to the last step, data loading from {args.e2e_samples} random uint8 images with "
        f"{args.workers} workers included), median of {args.e2e_repeats} fresh run(s)"
    )
    return header(title, gpu_name(args), ("jax", "torch")) + "\n\n" + e2e_table(rows, args)


def e2e_table(rows, args):
    images = args.e2e_steps * args.batch_size
    out = [
        "| model | framework | total s | img/s end to end | first step s | img/s after it | loss | "
        "frost/peer |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        if r["runs"]:
            r["total"] = statistics.median(run["total_s"] for run in r["runs"])
            r["first"] = statistics.median(run["first_s"] for run in r["runs"])
    base = {r["model"]: r["total"] for r in rows if r["baseline"] and r["runs"]}
    for r in rows:
        if not r["runs"]:
            out.append(f"| {r['model']} | {r['framework']} | {status(r['error'])} | | | | | |")
            continue
        steady = (images - args.batch_size) / max(r["total"] - r["first"], 1e-9)
        ratio = f"{r['total'] / base[r['model']]:.2f}" if r["model"] in base else "n/a"
        out.append(
            f"| {r['model']} | {r['framework']} | {r['total']:.1f} | {images / r['total']:.0f} | "
            f"{r['first']:.1f} | {steady:.0f} | {r['runs'][-1]['loss']:.4f} | {ratio} |"
        )
    out.append(
        "\n(frost/peer: the peer's total time over Frost's, i.e. Frost's end-to-end img/s over the "
        "peer's; the first step includes imports, data-set creation, compilation and worker "
        "start-up.)"
    )
    return "\n".join(out)


def main(argv=None):
    args = parse_args(argv)
    if args.e2e_child:
        return e2e_child(args)
    # a cold torch.compile (and Triton) cache, as a new user has
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache = tempfile.mkdtemp(
            prefix="frost-bench-inductor-"
        )
        atexit.register(shutil.rmtree, cache, ignore_errors=True)
    publish = Publisher(args.out)
    report = (e2e_workload if args.workload == "e2e" else step_workload)(args, publish)
    print(report, flush=True)
    publish(report, final=True)


if __name__ == "__main__":
    main()
