"""Mixed precision and sharded checkpoints: fp32 vs bf16 training steps, and checkpoint save/restore
of an FSDP state per process, sharded (frost.checkpoint) against gather-everything.

    python benchmarks/precision.py                   # both parts, CPU
    python benchmarks/precision.py --quick           # smoke: small models, 2 steps, 1-2 processes
    python benchmarks/precision.py --part step --steps 10
    python benchmarks/precision.py --part checkpoint --processes 1,2,4,8 --ckpt-size 2048,384,8

Part "step": one training step of the `frost train gpt` model (vocab 2048, dim 192, depth 4,
4 heads, rotary, 32 x 128 tokens, AdamW) and of ResNet-20 (batch 128, 32x32x3, SGD with Nesterov
momentum, BatchNorm in training mode), in fp32 and in bf16:

  Frost bf16     frost.nn.precision.policy("bf16"): float32 parameters and optimizer state, the
                 forward/backward pass in bfloat16, norm statistics, softmax and loss in float32
  PyTorch bf16   torch.autocast("cpu", torch.bfloat16) around the forward pass (float32 parameters)

bf16/fp32 is the bf16 step's speed over the fp32 step's (> 1: bf16 is faster); frost/torch is
Frost's speed over PyTorch's at the same precision. On a CPU without native bf16 matrix units
XLA converts bf16 to f32 around each operation, so bf16 is usually *slower* there; the policy
is for GPUs and TPUs.

Part "checkpoint": the GPT's parameters and AdamW state (float32, random values) laid out with
frost.parallel.fsdp over N processes on this machine (one CPU device each, gloo on loopback):

  sharded   checkpoint.save: each process writes the shards it holds; checkpoint.load into the
            same FSDP layout: each process reads the shards it needs
  gather    what frost.train.loop.save did before: multihost_utils.process_allgather of the whole
            state, process 0 writes one file; restore: every process reads the whole file and
            places it (frost.parallel.put)

Seconds are the slowest process's wall time (barrier to barrier, fsync included); bytes are the
most any one process wrote or read. All N processes share this machine's cores and disk, so the
seconds measure the mechanism, not a cluster.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import header, measure, one_line

GPT_SIZE = (2048, 192, 4, 4, 128, 32)  # vocab, dim, depth, heads, seq, batch: `frost train gpt`
RESNET_BATCH = 128


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--part", choices=("step", "checkpoint", "both"), default="both")
    p.add_argument(
        "--quick", action="store_true", help="small models, 1 warm-up, 2 steps, 1-2 processes"
    )
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--only", default="frost,torch", help="step part: frost and/or torch")
    p.add_argument("--processes", default="1,2,4,8", help="checkpoint part: process counts")
    p.add_argument(
        "--ckpt-size",
        default=None,
        help="checkpoint part: vocab,dim,depth of the GPT (default the step's)",
    )
    p.add_argument(
        "--repeats", type=int, default=3, help="checkpoint part: medians over this many saves/loads"
    )
    p.add_argument(
        "--child", nargs=4, metavar=("INDEX", "COUNT", "PORT", "DIR"), help=argparse.SUPPRESS
    )
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.warmup, args.repeats = 2, 1, 1
        args.processes = "1,2" if args.processes == "1,2,4,8" else args.processes
    args.gpt = (512, 64, 2, 4, 64, 8) if args.quick else GPT_SIZE
    args.resnet_batch = 16 if args.quick else RESNET_BATCH
    args.ckpt = tuple(int(v) for v in args.ckpt_size.split(",")) if args.ckpt_size else args.gpt[:3]
    return args


# --- step time ---------------------------------------------------------------------------------


def frost_step(model_name, precision_name, args):
    import jax
    import jax.numpy as jnp
    import numpy as np

    from frost import nn, optim
    from frost.models import gpt, resnet
    from frost.nn import precision

    policy = precision.policy(precision_name)
    rng = np.random.default_rng(0)
    fast_init = {"xla_backend_optimization_level": 0}

    def xent(logits, labels):
        logp = jax.nn.log_softmax(policy.cast_to_output(logits).astype(jnp.float32))
        return -jnp.mean(jnp.take_along_axis(logp, labels[..., None], axis=-1))

    if model_name == "gpt":
        vocab, dim, depth, heads, seq, batch = args.gpt
        model = jax.jit(
            lambda k: gpt.GPT(vocab, dim, depth, heads, seq, rotary=True, key=k),
            compiler_options=fast_init,
        )(jax.random.key(0))
        ids = rng.integers(0, vocab, (batch, seq + 1)).astype(np.int32)
        data = (jnp.asarray(ids[:, :-1]), jnp.asarray(ids[:, 1:]))
        opt = optim.adamw(3e-4, weight_decay=0.1)

        def loss_fn(m, x, y):
            return xent(policy.cast_to_compute(m)(x), y), m
    else:
        model = jax.jit(lambda k: resnet.resnet20(10, 3, key=k), compiler_options=fast_init)(
            jax.random.key(0)
        )
        data = (
            jnp.asarray(rng.standard_normal((args.resnet_batch, 32, 32, 3)), jnp.float32),
            jnp.asarray(rng.integers(0, 10, args.resnet_batch), jnp.int32),
        )
        opt = optim.sgd(0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)

        def loss_fn(m, x, y):
            logits, stats = nn.apply(
                policy.cast_to_compute(m), policy.cast_to_compute(x), train=True
            )
            return xent(logits, y), policy.cast_to_param(stats)

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def step(model, opt_state, x, y):
        (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(model, x, y)
        updates, opt_state = opt.update(grads, opt_state, model)
        return nn.update_buffers(optim.apply_updates(model, updates), stats), opt_state, loss

    state = {"model": model, "opt": opt.init(model)}

    def run():
        state["model"], state["opt"], loss = step(state["model"], state["opt"], *data)
        return loss

    return measure(
        run, lambda loss: float(jax.block_until_ready(loss)), warmup=args.warmup, steps=args.steps
    )


def torch_step(model_name, precision_name, args):
    import contextlib

    import torch
    import torch.nn.functional as F
    from _common import measure_torch

    torch.manual_seed(0)
    autocast = (
        torch.autocast("cpu", dtype=torch.bfloat16)
        if precision_name == "bf16"
        else contextlib.nullcontext()
    )
    if model_name == "gpt":
        from gpt import torch_gpt_class

        vocab, dim, depth, heads, seq, batch = args.gpt
        model = torch_gpt_class()(vocab, dim, depth, heads, seq).train()
        ids = torch.randint(0, vocab, (batch, seq + 1))
        x, y = ids[:, :-1], ids[:, 1:]
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    else:
        from resnet import ARCH, torch_resnet_class

        model = torch_resnet_class()(*ARCH["resnet20"]).train()
        x, y = torch.randn(args.resnet_batch, 3, 32, 32), torch.randint(0, 10, (args.resnet_batch,))
        opt = torch.optim.SGD(
            model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4
        )

    def loss():
        with autocast:
            logits = model(x)
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))

    # PyTorch's first CPU steps are ~10x slower than later ones (allocator and kernel warm-up): >= 3
    # untimed
    return measure_torch(
        loss,
        opt,
        torch.device("cpu"),
        argparse.Namespace(warmup=max(args.warmup, 3), steps=args.steps, inner=1),
    )


def step_part(args) -> str:
    rows = {}
    for model_name in ("gpt", "resnet20"):
        for framework in args.only.split(","):
            for precision_name in ("fp32", "bf16"):
                fn = {"frost": frost_step, "torch": torch_step}[framework]
                print(
                    f"[{model_name}] {framework} {precision_name} ...", file=sys.stderr, flush=True
                )
                try:
                    rows[model_name, framework, precision_name] = fn(
                        model_name, precision_name, args
                    )
                except Exception as e:
                    rows[model_name, framework, precision_name] = one_line(
                        f"{type(e).__name__}: {e}"
                    )
    unit = {"gpt": args.gpt[4] * args.gpt[5], "resnet20": args.resnet_batch}
    out = [
        "| model | framework | precision | ms/step | items/s | compile s | loss | bf16/fp32 | "
        "frost/torch |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for (model_name, framework, precision_name), t in rows.items():
        if isinstance(t, str):
            out.append(f"| {model_name} | {framework} | {precision_name} | failed: {t} | | | | | |")
            continue
        fp32 = rows.get((model_name, framework, "fp32"))
        torch_t = rows.get((model_name, "torch", precision_name))
        speedup = (
            f"{fp32.step_s / t.step_s:.2f}"
            if precision_name == "bf16" and not isinstance(fp32, str)
            else ""
        )
        versus = (
            f"{torch_t.step_s / t.step_s:.2f}"
            if framework == "frost" and torch_t is not None and not isinstance(torch_t, str)
            else ""
        )
        out.append(
            f"| {model_name} | {framework} | {precision_name} | {1e3 * t.step_s:.1f} | "
            f"{unit[model_name] / t.step_s:.0f} | {t.compile_s:.1f} | {t.loss:.4f} | {speedup} | "
            f"{versus} |"
        )
    return (
        "\n".join(out)
        + f"\n\nitems: tokens (gpt {args.gpt[5]} x {args.gpt[4]}), "
        + f"images (resnet20 batch {args.resnet_batch})"
    )


# --- checkpoints ---------------------------------------------------------------------------------


def child(args):
    """One of N processes: sharded and gathered save/restore of the FSDP state; prints JSON."""
    index, count, port, folder = (
        int(args.child[0]),
        int(args.child[1]),
        int(args.child[2]),
        args.child[3],
    )
    import jax
    import numpy as np
    from jax.experimental import multihost_utils
    from safetensors.numpy import load, save

    from frost import atomic, checkpoint, optim, parallel
    from frost.models import gpt

    if count > 1:
        parallel.initialize(f"127.0.0.1:{port}", count, index)
    vocab, dim, depth = args.ckpt
    shapes = jax.eval_shape(
        lambda k: gpt.GPT(vocab, dim, depth, 4, 128, rotary=True, key=k), jax.random.key(0)
    )
    shapes = {"model": shapes, "opt_state": jax.eval_shape(optim.adamw(1e-3).init, shapes)}
    rng = np.random.default_rng(0)
    host = jax.tree.map(
        lambda s: (
            rng.standard_normal(s.shape).astype(s.dtype)
            if s.dtype.kind == "f"
            else np.zeros(s.shape, s.dtype)
        ),
        shapes,
    )
    sharding = parallel.fsdp(host, parallel.make_mesh(data=count))
    state = parallel.put(host, sharding)
    templates = jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), host, sharding
    )
    total = sum(x.nbytes for x in jax.tree.leaves(host))
    names = [
        jax.tree_util.keystr(p, simple=True, separator=".")
        for p, _ in jax.tree_util.tree_flatten_with_path(host)[0]
    ]

    def timed(fn):
        multihost_utils.sync_global_devices("start") if count > 1 else None
        t0 = time.perf_counter()
        out = fn()
        jax.block_until_ready(out) if out is not None else None
        multihost_utils.sync_global_devices("end") if count > 1 else None
        return time.perf_counter() - t0

    def gather_save(path):  # the whole state on every process, then process 0 writes one file
        whole = (
            multihost_utils.process_allgather(state, tiled=True)
            if count > 1
            else jax.device_get(state)
        )
        if index == 0:
            arrays = dict(zip(names, map(np.asarray, jax.tree.leaves(whole))))
            blob = save(arrays)
            os.makedirs(path, exist_ok=True)
            atomic.write(os.path.join(path, "arrays.safetensors"), blob)
            atomic.write(
                os.path.join(path, "manifest.json"),
                json.dumps({"sha256": hashlib.sha256(blob).hexdigest()}),
            )

    def gather_load(path):  # as format 1 did: the whole file, its SHA-256 checked, on every process
        with open(os.path.join(path, "arrays.safetensors"), "rb") as f:
            blob = f.read()
        with open(os.path.join(path, "manifest.json")) as f:
            assert hashlib.sha256(blob).hexdigest() == json.load(f)["sha256"]
        arrays = load(blob)
        tree = jax.tree.unflatten(jax.tree.structure(host), [arrays[n] for n in names])
        return parallel.put(tree, sharding)

    opened, read = checkpoint.safe_open, [0]

    class Counted:  # checkpoint.safe_open, counting the bytes of the tensors read
        def __init__(self, *args, **kwargs):
            self.inner = opened(*args, **kwargs)

        def __enter__(self):
            self.handle = self.inner.__enter__()
            return self

        def __exit__(self, *exc):
            return self.inner.__exit__(*exc)

        def get_tensor(self, key):
            array = self.handle.get_tensor(key)
            read[0] += array.nbytes
            return array

    checkpoint.safe_open = Counted
    result = {k: [] for k in ("sharded_save", "sharded_load", "gather_save", "gather_load")}
    for r in range(args.repeats):
        sharded, gathered = os.path.join(folder, f"sharded{r}"), os.path.join(folder, f"gather{r}")
        result["sharded_save"].append(
            timed(lambda: checkpoint.save(sharded, 1, state, keep=1) and None)
        )
        result["sharded_load"].append(
            timed(lambda: checkpoint.load(os.path.join(sharded, "step_00000001"), templates)[0])
        )
        result["gather_save"].append(timed(lambda: gather_save(gathered)))
        result["gather_load"].append(timed(lambda: gather_load(gathered)))
    step = os.path.join(folder, "sharded0", "step_00000001")
    own = "arrays.safetensors" if count == 1 else f"arrays.{index}.safetensors"
    result.update({k: statistics.median(v) for k, v in result.items()})
    result["sharded_written"] = os.path.getsize(os.path.join(step, own)) + (
        os.path.getsize(os.path.join(step, "manifest.json")) if index == 0 else 0
    )
    result["sharded_read"] = read[0] // args.repeats
    result["gather_read"] = os.path.getsize(os.path.join(folder, "gather0", "arrays.safetensors"))
    result["gather_written"] = (
        os.path.getsize(os.path.join(folder, "gather0", "arrays.safetensors")) if index == 0 else 0
    )
    result["total"] = total
    print(json.dumps(result), flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def checkpoint_part(args) -> str:
    rows = []
    for n in [int(v) for v in args.processes.split(",")]:
        folder = tempfile.mkdtemp(prefix="frost-ckpt-bench-", dir=os.environ.get("FROST_BENCH_DIR"))
        port = free_port()
        env = {
            **os.environ,
            "JAX_PLATFORMS": "cpu",
            "XLA_FLAGS": "--xla_force_host_platform_device_count=1",
        }
        argv = [
            sys.executable,
            os.path.abspath(__file__),
            "--ckpt-size",
            ",".join(map(str, args.ckpt)),
            "--repeats",
            str(args.repeats),
        ]
        print(f"[checkpoint] {n} processes ...", file=sys.stderr, flush=True)
        procs = [
            subprocess.Popen(
                argv + ["--child", str(i), str(n), str(port), folder],
                env=env,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for i in range(n)
        ]
        try:
            outs = [p.communicate(timeout=1800) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            shutil.rmtree(folder, ignore_errors=True)
        if any(p.returncode for p in procs):
            err = next(e for p, (_, e) in zip(procs, outs) if p.returncode)
            rows.append(
                f"| {n} | failed: "
                f"{one_line(err.strip().splitlines()[-1] if err.strip() else 'no output')} |"
                + " |"
                * 9
            )
            continue
        res = [json.loads(o.strip().splitlines()[-1]) for o, _ in outs]
        worst = {k: max(r[k] for r in res) for k in res[0]}
        mb = 1 / 2**20
        rows.append(
            f"| {n} | {worst['total'] * mb:.1f} | {worst['sharded_save']:.2f} | "
            f"{worst['gather_save']:.2f} | {worst['sharded_written'] * mb:.1f} | "
            f"{worst['gather_written'] * mb:.1f} | "
            f"{worst['sharded_load']:.2f} | {worst['gather_load']:.2f} | "
            f"{worst['sharded_read'] * mb:.1f} | {worst['gather_read'] * mb:.1f} | "
            f"{worst['gather_save'] / worst['sharded_save']:.2f} |"
        )
    vocab, dim, depth = args.ckpt
    head = [
        "| processes | state MB | sharded save s | gather save s | sharded MB written "
        "(max/process) | gather MB written (max/process) | sharded restore s | gather restore s | "
        "sharded MB read (max/process) | gather MB read (max/process) | gather/sharded save |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    return "\n".join(head + rows) + (
        f"\n\nstate: GPT vocab {vocab}, dim {dim}, depth {depth} + AdamW moments, "
        f"float32; FSDP over N processes x 1 CPU device; medians of {args.repeats}"
    )


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if args.child:
        return child(args)
    parts = []
    if args.part in ("step", "both"):
        parts.append("#### Training step, fp32 vs bf16\n\n" + step_part(args))
    if args.part in ("checkpoint", "both"):
        parts.append(
            "#### FSDP checkpoint, sharded vs gather-everything\n\n" + checkpoint_part(args)
        )
    print(
        header("Mixed precision and sharded checkpoints", libraries=("jax", "torch")),
        *parts,
        sep="\n\n",
    )


if __name__ == "__main__":
    main()
