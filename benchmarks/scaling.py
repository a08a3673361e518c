"""Scaling: the small GPT's training-step time on 1, 2, 4 and 8 devices, per sharding strategy.

    python benchmarks/scaling.py                      # CPU: 1/2/4/8 forced host devices
    python benchmarks/scaling.py --device gpu         # the GPUs this machine has (1, 2, 4, ...)
    python benchmarks/scaling.py --devices 1,8 --strategies dp,fsdp --batch-size 64

The workload is the `frost train gpt` model (GPT, dim 192, depth 4, 4 heads, rotary positions,
vocabulary 2048, 128-token windows), AdamW, on a fixed global batch of random tokens (strong
scaling: the global batch stays the same whatever the device count), through
`frost.train.loop.make_train_step` with the shardings of `frost.parallel`:

  dp    replicated parameters, batch split over data=N (XLA all-reduces the gradients)
  fsdp  parameters and optimizer state split over data=N (all-gather / reduce-scatter)
  tp    data=N/2 x model=2, the blocks' matrices split Megatron-style (N >= 2)

On CPU each device count runs in a fresh process with
XLA_FLAGS=--xla_force_host_platform_device_count=N (the count is fixed at JAX start-up). The
forced devices share this machine's cores, so the CPU numbers check correctness (the loss of
every row must match the 1-device loss) and measure the overhead of partitioning and
collectives; they are not a speed-up. On GPUs the same script times real devices
(jax.devices()[:N] in one process). "vs 1 device" is the 1-device step time over the row's
(> 1: faster than one device).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Publisher, header, measure, one_line


def time_strategy(n: int, strategy: str, args) -> dict:
    """One row: the step time of `strategy` on the first `n` devices (runs in the child process)."""
    import jax
    import numpy as np

    from frost import optim, parallel
    from frost.models import gpt
    from frost.train import configs, loop

    devices = jax.devices()[:n]
    if len(devices) < n:
        raise RuntimeError(f"{n} devices asked for, {len(devices)} visible")
    if strategy == "tp":
        if n < 2:
            raise ValueError("tp needs at least 2 devices")
        mesh = parallel.make_mesh(data=n // 2, model=2, devices=devices)
    else:
        mesh = parallel.make_mesh(data=n, devices=devices)
    parallel.check_batch(mesh, args.batch_size)
    cfg = configs.LMConfig()
    model = jax.jit(
        lambda k: gpt.GPT(
            cfg.vocab_size, cfg.dim, cfg.depth, cfg.heads, cfg.seq_len, rotary=True, key=k
        )
    )(jax.random.key(0))
    opt = optim.adamw(1e-3, weight_decay=0.1)
    tree = {"model": model, "opt_state": opt.init(model)}
    shardings = parallel.STRATEGIES[strategy](tree, mesh)
    tree = parallel.put(tree, shardings)
    batch_sh = parallel.batch_sharding(mesh)
    step = loop.make_train_step(
        opt, shardings=(shardings["model"], shardings["opt_state"], batch_sh)
    )
    tokens = np.random.default_rng(0).integers(
        0, cfg.vocab_size, (args.batch_size, cfg.seq_len + 1), np.int32
    )
    batch = parallel.global_batch((tokens[:, :-1], tokens[:, 1:]), batch_sh)  # (B, T), (B, T)
    state = [tree["model"], tree["opt_state"], None]

    def run():
        state[0], state[1], metrics = step(state[0], state[1], batch, jax.random.key(0))
        return metrics["loss"]

    timing = measure(
        run, lambda loss: float(jax.block_until_ready(loss)), warmup=args.warmup, steps=args.steps
    )
    per_device = sum(leaf.addressable_shards[0].data.nbytes for leaf in jax.tree.leaves(state[0]))
    total = sum(leaf.nbytes for leaf in jax.tree.leaves(state[0]))
    return {
        "devices": n,
        "strategy": strategy,
        "mesh": dict(mesh.shape),
        "step_s": timing.step_s,
        "compile_s": timing.compile_s,
        "loss": timing.loss,
        "param_bytes_per_device": per_device,
        "param_bytes": total,
        "platform": devices[0].platform,
    }


def child(args) -> None:
    for n in args.devices:
        for strategy in args.strategies:
            if strategy == "tp" and n < 2:
                continue
            try:
                row = time_strategy(n, strategy, args)
            except Exception as e:
                row = {
                    "devices": n,
                    "strategy": strategy,
                    "error": one_line(f"{type(e).__name__}: {e}"),
                }
            print(json.dumps(row), flush=True)


def spawn(args, n: int | None) -> list:
    """Run the child part in a subprocess (with n forced CPU devices when n is given)."""
    env = dict(os.environ)
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        "--batch-size",
        str(args.batch_size),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--strategies",
        ",".join(args.strategies),
    ]
    if n is None:
        cmd += ["--devices", ",".join(map(str, args.devices))]
    else:
        cmd += ["--devices", str(n)]
        env["JAX_PLATFORMS"] = "cpu"
        env["XLA_FLAGS"] = (
            f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={n}".strip()
        )
    print(
        f"== {' '.join(cmd[2:])}" + (f"  ({n} CPU devices)" if n else ""),
        file=sys.stderr,
        flush=True,
    )
    done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, timeout=args.timeout)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode and not rows:
        rows = [
            {"devices": n, "strategy": s, "error": f"child exited with {done.returncode}"}
            for s in args.strategies
        ]
    for row in rows:
        print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def report(rows: list, args) -> str:
    base = next(
        (r for r in rows if r.get("devices") == 1 and r.get("strategy") == "dp" and "step_s" in r),
        None,
    )
    tokens = args.batch_size * 128
    out = [
        "| devices | strategy | mesh | ms/step | tokens/s | vs 1 device | compile s | loss | loss "
        "- 1-device loss | param MB / device |",
        "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['devices']} | {r['strategy']} | | failed: {r['error']} | | | | | | |")
            continue
        mesh = " x ".join(f"{k}={v}" for k, v in r["mesh"].items() if v > 1) or "1"
        speed = f"{base['step_s'] / r['step_s']:.2f}" if base else "n/a"
        diff = f"{r['loss'] - base['loss']:+.1e}" if base else "n/a"
        out.append(
            f"| {r['devices']} | {r['strategy']} | {mesh} | {1e3 * r['step_s']:.1f} | "
            f"{tokens / r['step_s']:,.0f} | {speed} | {r['compile_s']:.1f} | {r['loss']:.5f} | "
            f"{diff} | {r['param_bytes_per_device'] / 1e6:.2f} of {r['param_bytes'] / 1e6:.2f} |"
        )
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--devices", default="1,2,4,8", help="comma-separated device counts")
    p.add_argument("--strategies", default="dp,fsdp,tp", help="comma-separated: dp, fsdp, tp")
    p.add_argument(
        "--batch-size", type=int, default=32, help="global batch (sequences of 128 tokens)"
    )
    p.add_argument("--steps", type=int, default=5, help="timed steps (median)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--timeout", type=int, default=600, help="seconds per subprocess")
    p.add_argument("--out", help="also append the table to this file")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.devices = [int(n) for n in args.devices.split(",")]
    args.strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = set(args.strategies) - {"dp", "fsdp", "tp"}
    if unknown:
        p.error(f"unknown strategies {sorted(unknown)}; choose from dp, fsdp, tp")
    if args.child:
        return child(args)
    if args.device == "cpu":
        rows = [row for n in args.devices for row in spawn(args, n)]
    else:
        rows = spawn(args, None)
    gpu = None
    if args.device == "gpu" and rows and "platform" in rows[0]:
        gpu = f"{max(r['devices'] for r in rows)} x {rows[0]['platform']}"
    title = (
        f"GPT training step, global batch {args.batch_size} x 128 tokens, "
        f"on 1-{max(args.devices)} devices"
    )
    text = header(title, gpu=gpu, libraries=("jax", "jaxlib")) + "\n\n" + report(rows, args)
    print(text)
    Publisher(args.out)(text, final=True)


if __name__ == "__main__":
    main()
