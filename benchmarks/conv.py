"""Where a ResNet step's time goes on a CPU: one 3x3 convolution at a time, four lowerings beside
PyTorch.

    python benchmarks/conv.py           # the CIFAR ResNet-18's four 3x3 convolutions, batch 128
    python benchmarks/conv.py --quick   # smoke run: small shapes, 1 sample

Each row is one stride-1, padding-1 3x3 convolution of the CIFAR ResNet-18 (64 channels at 32x32,
128 at 16x16, 256 at 8x8, 512 at 4x4), NHWC in, NHWC out, fp32, timed alone:

  lax.conv      jax.lax.conv_general_dilated: what frost.nn.Conv uses
  im2col        the nine shifted copies concatenated along channels, then one matmul
  winograd-2    Winograd F(2x2, 3x3) (Lavin & Gray, "Fast Algorithms for Convolutional Neural
                Networks", 2016): 16 batched matmuls on 4x4 input tiles, 2.25x fewer multiplies
  winograd-4    Winograd F(4x4, 3x3): 36 batched matmuls on 6x6 tiles, 4x fewer multiplies
  torch-cl      PyTorch F.conv2d on a channels_last tensor (oneDNN), the fastest PyTorch mode

"fwd" times the convolution; "fwd+bwd" the convolution and both gradients (jax.vjp for x and the
weight; torch autograd.grad). Both sides return the forward output with the gradients: the
gradients of a convolution do not need its output, so a JAX program returning only them lets XLA
drop the forward convolution that torch's autograd computes. The JAX lowerings are
differentiated by JAX, so their backward passes are the transposes XLA derives. "err" is the max
abs difference from lax.conv's forward over lax.conv's max abs output. vs lax / vs torch: the
row's fwd+bwd time over lax.conv's and over torch-cl's (< 1: faster). Timing:
benchmarks/_common.measure, median of --steps samples.
"""

from __future__ import annotations

import argparse
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Publisher, cores, header, jax_wait, measure

LAYERS = [
    (32, 64),
    (16, 128),
    (8, 256),
    (4, 512),
]  # (spatial size, channels) of the ResNet-18 stages


def lax_conv(x, w):  # x (N, H, W, C), w (3, 3, C, O) -> (N, H, W, O)
    return jax.lax.conv_general_dilated(
        x, w, (1, 1), ((1, 1), (1, 1)), dimension_numbers=("NHWC", "HWIO", "NHWC")
    )


def im2col_conv(x, w):
    n, h, wd, c = x.shape
    xp = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    # (N, H, W, 9C)
    cols = jnp.concatenate([xp[:, i : i + h, j : j + wd] for i in range(3) for j in range(3)], -1)
    return cols @ w.reshape(9 * c, -1)  # (N, H, W, O)


# Winograd transforms F(m x m, 3 x 3): y = A^T [(G g G^T) * (B^T d B)] A on (m + 2)-wide input
# tiles.
WINOGRAD = {
    2: (
        np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]),  # B^T
        np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]]),  # G
        np.array([[1, 1, 1, 0], [0, 1, -1, -1]]),
    ),  # A^T
    4: (
        np.array(
            [
                [4, 0, -5, 0, 1, 0],
                [0, -4, -4, 1, 1, 0],
                [0, 4, -4, -1, 1, 0],
                [0, -2, -1, 2, 1, 0],
                [0, 2, -1, -2, 1, 0],
                [0, 4, 0, -5, 0, 1],
            ]
        ),
        np.array(
            [
                [1 / 4, 0, 0],
                [-1 / 6, -1 / 6, -1 / 6],
                [-1 / 6, 1 / 6, -1 / 6],
                [1 / 24, 1 / 12, 1 / 6],
                [1 / 24, -1 / 12, 1 / 6],
                [0, 0, 1],
            ]
        ),
        np.array(
            [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]
        ),
    ),
}


def _combine(matrix, parts):
    """[sum_j matrix[i, j] * parts[j] for each row i], skipping zeros: the transforms as adds."""
    return [
        sum((float(c) * p for c, p in zip(row, parts) if c), start=jnp.zeros_like(parts[0]))
        for row in matrix
    ]


def winograd_conv(x, w, m: int):
    bt, g, at = WINOGRAD[m]
    a = m + 2  # input tile size
    n, h, wd, c = x.shape
    th, tw = -(-h // m), -(-wd // m)  # tiles per axis
    # (N, m th + 2, m tw + 2, C)
    xp = jnp.pad(x, ((0, 0), (1, m * th + 1 - h), (1, m * tw + 1 - wd), (0, 0)))
    rows = _combine(bt, [xp[:, i : i + m * th : m] for i in range(a)])  # a x (N, th, W', C)
    tiles = [
        t for r in rows for t in _combine(bt, [r[:, :, j : j + m * tw : m] for j in range(a)])
    ]  # a*a x (N, th, tw, C)
    v = jnp.stack(tiles).reshape(a * a, n * th * tw, c)  # (a*a, P, C)
    u = jnp.einsum("ik,klco,jl->ijco", g.astype(np.float32), w, g.astype(np.float32)).reshape(
        a * a, c, -1
    )
    prod = (v @ u).reshape(a, a, n, th, tw, -1)  # (a, a, N, th, tw, O)
    out = [
        jnp.stack(_combine(at, list(r)), axis=3) for r in _combine(at, list(prod))
    ]  # m x (N, th, tw, m, O)
    return jnp.stack(out, axis=2).reshape(n, m * th, m * tw, -1)[:, :h, :wd]  # (N, H, W, O)


LOWERINGS = {
    "lax.conv": lax_conv,
    "im2col": im2col_conv,
    "winograd-2": lambda x, w: winograd_conv(x, w, 2),
    "winograd-4": lambda x, w: winograd_conv(x, w, 4),
}


def forward_and_gradients(f, dy):
    """(x, w) -> (f(x, w), its gradients for x and w given the output's gradient dy)."""

    def both(x, w):
        y, vjp = jax.vjp(f, x, w)
        return y, vjp(dy)

    return both


def time_jax(f, x, w, dy, args):
    fwd = jax.jit(f)
    both = jax.jit(forward_and_gradients(f, dy))
    return [
        measure(lambda fn=fn: fn(x, w), jax_wait, warmup=1, steps=args.steps).step_s
        for fn in (fwd, both)
    ], fwd(x, w)


def time_torch(x, w, dy, args):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(cores())
    cl = torch.channels_last
    tx = (
        torch.from_numpy(np.asarray(x))
        .permute(0, 3, 1, 2)
        .contiguous(memory_format=cl)
        .requires_grad_()
    )
    tw = (
        torch.from_numpy(np.asarray(w))
        .permute(3, 2, 0, 1)
        .contiguous(memory_format=cl)
        .requires_grad_()
    )
    tdy = torch.from_numpy(np.asarray(dy)).permute(0, 3, 1, 2).contiguous(memory_format=cl)

    def fwd():
        with torch.no_grad():
            return F.conv2d(tx, tw, padding=1)

    def both():
        y = F.conv2d(tx, tw, padding=1)
        return y, torch.autograd.grad(y, (tx, tw), tdy)

    return [
        measure(fn, lambda out: None, warmup=1, steps=args.steps).step_s for fn in (fwd, both)
    ], fwd().permute(0, 2, 3, 1).numpy()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--only", default=",".join([*LOWERINGS, "torch-cl"]))
    parser.add_argument(
        "--quick", action="store_true", help="batch 8, 16 and 32 channels, 1 sample"
    )
    parser.add_argument("--out", help="also append the table to this file")
    args = parser.parse_args()
    layers = [(16, 16), (8, 32)] if args.quick else LAYERS
    if args.quick:
        args.batch_size, args.steps = 8, 1
    names = args.only.split(",")
    lines = [
        "| layer | lowering | fwd ms | fwd+bwd ms | err | vs lax | vs torch |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for size, ch in layers:
        kx, kw, kd = jax.random.split(jax.random.key(0), 3)
        x = jax.random.normal(kx, (args.batch_size, size, size, ch))  # (N, H, W, C)
        w = jax.random.normal(kw, (3, 3, ch, ch)) * (2 / (9 * ch)) ** 0.5  # (3, 3, C, O)
        dy = jax.random.normal(kd, (args.batch_size, size, size, ch))  # (N, H, W, O)
        results = {
            name: time_jax(f, x, w, dy, args) for name, f in LOWERINGS.items() if name in names
        }
        if "torch-cl" in names:
            results["torch-cl"] = time_torch(x, w, dy, args)
        ref = results["lax.conv"][1] if "lax.conv" in results else None
        for name, ((fwd_s, both_s), y) in results.items():
            err = (
                ""
                if ref is None
                else f"{float(jnp.max(jnp.abs(y - ref)) / jnp.max(jnp.abs(ref))):.1e}"
            )
            vs = lambda other: f"{both_s / results[other][0][1]:.2f}" if other in results else ""  # noqa: E731
            lines.append(
                f"| {ch} ch @ {size}x{size} | {name} | {1e3 * fwd_s:.1f} | {1e3 * both_s:.1f} | "
                f"{err} | {vs('lax.conv')} | {vs('torch-cl')} |"
            )
            print(lines[-1], file=sys.stderr, flush=True)
    title = (
        f"3x3 convolutions of the CIFAR ResNet-18, batch {args.batch_size}, fp32, NHWC; "
        f"median of {args.steps}"
    )
    text = header(title, libraries=("jax", "torch")) + "\n\n" + "\n".join(lines)
    print(text)
    Publisher(args.out)(text, final=True)


if __name__ == "__main__":
    main()
