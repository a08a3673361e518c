"""Attention throughput: Frost's Pallas flash attention beside jax.nn.dot_product_attention.

    python benchmarks/attention.py            # GPU: T = 1k, 4k, 16k; D = 64, 128; causal or not
    python benchmarks/attention.py --seq 1024,2048,4096,8192,16384          # every length
    python benchmarks/attention.py --quick    # smoke: T = 1k, D = 64 on a GPU (tiny on a CPU)
    python benchmarks/attention.py --seq 4096 --head-dims 128 --tune    # time other BlockSizes

On a GPU, three implementations of the same multi-head attention, in bf16:

  frost        frost.nn.dot_product_attention(implementation="pallas"): the Pallas kernels of
               frost/kernels/attention.py, forward and backward
  jax.nn-cudnn jax.nn.dot_product_attention(implementation="cudnn"): cuDNN's fused flash attention
  jax.nn-xla   jax.nn.dot_product_attention(implementation="xla"): the scores materialised by XLA

Before timing, the kernel is checked against `attention_reference` at one shape whose length
divides no block (output and gradients; max abs error printed). On a CPU the Pallas kernel only
runs interpreted, so there the table is a sanity check of the harness: jax.nn's XLA attention
(what frost.nn picks on a CPU) beside the plain-jnp reference, in fp32.

Shapes follow FlashAttention-2's benchmark: batch x length = 16k tokens, heads x head dim = 2048.
"fwd" times the forward pass; "fwd+bwd" times jax.vjp (forward, then the gradients for q, k and
v). FLOPs count the matrix products only: 4 B H T^2 D forward, 2.5x that backward (the recomputed
scores included), halved when causal. TFLOP/s = FLOPs / median time; % of peak uses the chip's
dense bf16 peak (H100/H200: 989 TFLOP/s; --peak to override). frost/peer is Frost's TFLOP/s over
the row's; on Frost's own row, over the best peer's. Timing: first call (compilation) apart, 2
warm-up calls, then 5 samples of enough calls to last ~50 ms each; the median sample counts.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import sys
import time
import traceback

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import header, jax_wait, measure, one_line

from frost.kernels.attention import BlockSizes, attention_reference, flash_attention
from frost.nn.attention import dot_product_attention

PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0}  # dense bf16


def implementations(gpu: bool, blocks: BlockSizes | None = None):
    if not gpu:
        return {
            "frost.nn (xla)": functools.partial(dot_product_attention, implementation="xla"),
            "reference (jnp)": attention_reference,
        }

    def nn_attention(impl):
        return lambda q, k, v, causal: jax.nn.dot_product_attention(
            q, k, v, is_causal=causal, implementation=impl
        )

    return {
        "frost": functools.partial(flash_attention, block_sizes=blocks),
        "jax.nn-cudnn": nn_attention("cudnn"),
        "jax.nn-xla": nn_attention("xla"),
    }


def step_fn(attend, causal: bool, backward: bool):
    if not backward:
        return jax.jit(lambda q, k, v, do: attend(q, k, v, causal=causal))
    return jax.jit(
        lambda q, k, v, do: jax.vjp(lambda q, k, v: attend(q, k, v, causal=causal), q, k, v)[1](do)
    )


def inputs(b, t, h, d, dtype, seed=0):
    keys = jax.random.split(jax.random.key(seed), 4)
    return [jax.random.normal(key, (b, t, h, d), dtype) for key in keys]  # q, k, v, dout


def flops(b, t, h, d, causal, backward):
    fwd = 4.0 * b * h * t * t * d * (0.5 if causal else 1.0)
    return fwd * (3.5 if backward else 1.0)


def time_one(fn, args) -> float:
    """Median seconds per call (see the module docstring)."""
    jax_wait(fn(*args))  # compile
    t0 = time.perf_counter()
    jax_wait(fn(*args))
    inner = int(min(max(0.05 / max(time.perf_counter() - t0, 1e-6), 1), 200))
    return measure(lambda: fn(*args), jax_wait, warmup=2, steps=5, inner=inner).step_s


def check_kernel(b=2, t=1000, h=4, d=128, dtype=jnp.bfloat16):
    """Max abs error of the kernel against the reference, output and gradients, at a length that
    divides no block size, causal with a key padding mask."""
    q, k, v, do = inputs(b, t, h, d, dtype, seed=1)
    keep = jax.random.bernoulli(jax.random.key(2), 0.9, (b, t))
    errors = {}
    for name, fn in (("frost", flash_attention), ("reference", attention_reference)):
        f = lambda q, k, v: fn(q, k, v, causal=True, key_padding_mask=keep)  # noqa: E731
        out, vjp = jax.jit(lambda q, k, v: jax.vjp(f, q, k, v))(q, k, v)
        errors[name] = [x.astype(jnp.float32) for x in (out, *jax.jit(vjp)(do))]
    return {
        n: (float(jnp.abs(a - b).max()), float(jnp.abs(b).max()))
        for n, a, b in zip(("out", "dq", "dk", "dv"), *errors.values())
    }


def tune(seqs, head_dims, dtype):
    """Time a few BlockSizes (forward alone, then forward+backward with the best forward)."""
    fwd = [
        dict(block_q=bq, block_k=bk, num_warps=w, num_stages=s)
        for bq, bk, w, s in [
            (128, 64, None, 3),
            (128, 64, 8, 2),
            (128, 128, 8, 2),
            (64, 64, 4, 3),
            (128, 32, 4, 4),
        ]
    ]
    bwd = [
        dict(block_q_dkv=a, block_k_dkv=b, block_q_dq=c, block_k_dq=e)
        for a, b, c, e in [
            (64, 64, 64, 64),
            (32, 64, 64, 32),
            (32, 128, 128, 32),
            (64, 128, 128, 64),
            (32, 32, 32, 32),
        ]
    ]
    for t in seqs:
        for d in head_dims:
            b, h = max(1, 16384 // t), 2048 // d
            args = inputs(b, t, h, d, dtype)
            for causal in (False, True):
                best = {}
                for backward, candidates in ((False, fwd), (True, bwd)):
                    results = []
                    for c in candidates:
                        blocks = dataclasses.replace(BlockSizes(), **best, **c)
                        try:
                            s = time_one(
                                step_fn(
                                    functools.partial(flash_attention, block_sizes=blocks),
                                    causal,
                                    backward,
                                ),
                                args,
                            )
                            results.append((s, c))
                            print(
                                f"tune T={t} D={d} causal={causal} "
                                f"{'fwd+bwd' if backward else 'fwd'} {c}: "
                                f"{flops(b, t, h, d, causal, backward) / s / 1e12:.0f} TFLOP/s",
                                flush=True,
                            )
                        except Exception as e:
                            print(
                                f"tune {c}: failed: {one_line(f'{type(e).__name__}: {e}')}",
                                flush=True,
                            )
                    if results:
                        best.update(min(results, key=lambda r: r[0])[1])
                print(f"best for T={t} D={d} causal={causal}: BlockSizes({best})", flush=True)


def measure_all(impls, frost_name, dims, seqs, gpu, dtype, peak, lines):
    """Append one table row per (pass, mask, D, T, implementation) to `lines`."""
    for backward in (False, True):
        for causal in (False, True):
            for d in dims:
                for t in seqs:
                    b, h = (max(1, 16384 // t), 2048 // d) if gpu else (1, 4)
                    args_ = inputs(b, t, h, d, dtype)
                    tflops = {}
                    for name, attend in impls.items():
                        print(
                            f"[T={t} D={d} causal={causal} bwd={backward}] {name} ...",
                            file=sys.stderr,
                            flush=True,
                        )
                        try:
                            s = time_one(step_fn(attend, causal, backward), args_)
                            tflops[name] = (s, flops(b, t, h, d, causal, backward) / s / 1e12)
                        except Exception as e:
                            traceback.print_exc()
                            tflops[name] = (None, one_line(f"{type(e).__name__}: {e}"))
                    ours = tflops[frost_name][0] and tflops[frost_name][1]
                    peers = [v[1] for n, v in tflops.items() if n != frost_name and v[0]]
                    for name, (s, value) in tflops.items():
                        row = [
                            "fwd+bwd" if backward else "fwd",
                            str(causal),
                            str(t),
                            str(d),
                            f"{b} x {h}",
                            name,
                        ]
                        if s is None:
                            lines.append(row + [f"failed: {value}", "", "", ""])
                            continue
                        other = max(peers, default=None) if name == frost_name else value
                        ratio = f"{ours / other:.2f}" if ours and other else "n/a"
                        pct = f"{100 * value / peak:.0f}%" if peak else "n/a"
                        lines.append(row + [f"{1e3 * s:.2f}", f"{value:.3g}", pct, ratio])
                        print(" | ".join(lines[-1]), file=sys.stderr, flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one small shape, for a smoke run")
    parser.add_argument("--seq", default=None, help="comma-separated sequence lengths")
    parser.add_argument("--head-dims", default=None, help="comma-separated head dims")
    parser.add_argument(
        "--peak", type=float, default=None, help="dense bf16 peak TFLOP/s of the chip"
    )
    parser.add_argument("--tune", action="store_true", help="time alternative BlockSizes instead")
    args = parser.parse_args(argv)

    device = jax.devices()[0]
    gpu = device.platform == "gpu"
    if gpu:
        seqs, dims, dtype = (
            ([1024], [64]) if args.quick else ([1024, 4096, 16384], [64, 128]),
            jnp.bfloat16,
        )
    else:
        seqs, dims, dtype = ([256] if args.quick else [256, 1024]), [64], jnp.float32
    seqs = [int(s) for s in args.seq.split(",")] if args.seq else seqs
    dims = [int(d) for d in args.head_dims.split(",")] if args.head_dims else dims
    if args.tune:
        if not gpu:
            parser.error(
                "--tune times the Pallas kernels, which need a GPU (on a CPU they are interpreted)"
            )
        return tune(seqs, dims, dtype)
    peak = args.peak or next(
        (p for name, p in PEAK_TFLOPS.items() if name in device.device_kind), None
    )

    notes = []
    if gpu:
        errors = check_kernel()
        notes.append(
            "kernel vs reference (B=2, T=S=1000, H=4, D=128, bf16, causal, key padding mask), max "
            "abs error (max abs of the reference): "
            + ", ".join(f"{n} {e:.2e} ({r:.2f})" for n, (e, r) in errors.items())
        )
        print(notes[-1], file=sys.stderr, flush=True)

    impls = implementations(gpu)
    frost_name = next(iter(impls))
    head = [
        "pass",
        "causal",
        "T",
        "D",
        "B x H",
        "implementation",
        "ms",
        "TFLOP/s",
        "% of peak",
        "frost/peer",
    ]
    lines = []
    try:
        measure_all(impls, frost_name, dims, seqs, gpu, dtype, peak, lines)
    # Ctrl-C or `timeout -s INT` (benchmarks/gpu.sh): print what was measured
    except KeyboardInterrupt:
        notes.append("interrupted: the rows above are the shapes measured before the time limit")

    title = "Attention throughput" + ("" if gpu else " (CPU: sanity check only)")
    print(
        header(title, gpu=device.device_kind if gpu else None, libraries=("jax", "jaxlib")),
        "",
        sep="\n",
    )
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(" ---: " if i > 5 else " --- " for i in range(len(head))) + "|")
    for row in lines:
        print("| " + " | ".join(row) + " |")
    for note in notes:
        print(f"\n- {note}")


if __name__ == "__main__":
    main()
