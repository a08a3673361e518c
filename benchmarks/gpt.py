"""GPT training-step throughput: Frost beside PyTorch eager and torch.compile.

    python benchmarks/gpt.py                 # CPU: the `frost train gpt` model, 32 x 128, fp32
    python benchmarks/gpt.py --device gpu    # GPU: GPT-2 small (768 x 12), 16 x 1024, bf16
    python benchmarks/gpt.py --device gpu --dtype fp32,bf16 --only frost,torch

One training step of the same decoder-only model in each framework, on one fixed batch of random
tokens: pre-norm blocks (LayerNorm, causal multi-head attention with rotary positions, exact-GELU
MLP of width 4x), tied input/output embeddings, softmax cross-entropy over all positions, and
AdamW (lr 3e-4, betas 0.9/0.999, weight decay 0.1 on every parameter, as torch.optim.AdamW):

  frost          frost.models.gpt.GPT + frost.train.loop.make_train_step(frost.optim.adamw(...));
                 attention by frost.nn's dispatch: the Pallas flash kernel on a GPU, XLA on a CPU
  frost-xla      the same with FROST_ATTENTION=xla (jax.nn.dot_product_attention's XLA path);
                 GPU only by default (on a CPU it is the `frost` row)
  torch          PyTorch eager, F.scaled_dot_product_attention(is_causal=True) (flash/cuDNN on a
                 GPU), torch.optim.AdamW (foreach)
  torch-compile  torch.compile (default mode) of the same model; optimizer eager

bf16 casts parameters and inputs (no autocast, no fp32 master weights); the loss is computed in
fp32. Timing is benchmarks/_common.measure: first call (compilation) apart, warm-up, then the
median of --steps samples. tokens/s = batch x length / median step; frost/peer is Frost's
tokens/s over the peer's (> 1: Frost is faster).
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import sys
import tempfile
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Publisher, Row, attempt, header, measure, measure_torch, table

PEERS = {
    "frost": "Frost",
    "frost-xla": "Frost, XLA attention",
    "torch": "PyTorch eager (SDPA)",
    "torch-compile": "torch.compile",
}
SIZES = {  # (vocab, dim, depth, heads, seq_len, batch)
    "cpu": (2048, 192, 4, 4, 128, 32),  # the `frost train gpt --data kjv` model
    "gpu": (50304, 768, 12, 12, 1024, 16),  # GPT-2 small, nanoGPT's padded vocabulary
}
LR, WEIGHT_DECAY = 3e-4, 0.1


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument(
        "--dtype",
        default=None,
        help="fp32, bf16 or both (fp32,bf16); default fp32 on CPU, bf16 on GPU",
    )
    p.add_argument("--only", default=None, help=f"comma list of peers: {', '.join(PEERS)}")
    p.add_argument(
        "--size", default=None, help="vocab,dim,depth,heads,seq_len,batch (default per device)"
    )
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--inner", type=int, default=1)
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="torch.set_num_threads")
    p.add_argument("--out", default=None, help="also append the table to this file")
    args = p.parse_args()
    args.dtypes = (args.dtype or ("bf16" if args.device == "gpu" else "fp32")).split(",")
    if bad := [d for d in args.dtypes if d not in ("fp32", "bf16")]:
        p.error(f"--dtype: unknown {bad}; use fp32 and/or bf16")
    default = (
        ["frost", "frost-xla", "torch", "torch-compile"]
        if args.device == "gpu"
        else ["frost", "torch", "torch-compile"]
    )
    args.only = default if args.only is None else args.only.split(",")
    if bad := [n for n in args.only if n not in PEERS]:
        p.error(f"--only: unknown {bad}; choose from {', '.join(PEERS)}")
    try:
        args.size = tuple(int(v) for v in args.size.split(",")) if args.size else SIZES[args.device]
        assert len(args.size) == 6
    except (ValueError, AssertionError):
        p.error("--size: six integers vocab,dim,depth,heads,seq_len,batch")
    return args


def tokens(args):
    import numpy as np

    vocab, *_, seq, batch = args.size
    ids = np.random.default_rng(0).integers(0, vocab, (batch, seq + 1), dtype=np.int32)
    return ids[:, :-1], ids[:, 1:]  # (B, T) inputs, (B, T) targets


# --- Frost -------------------------------------------------------------------------------------


def run_frost(dtype, args, attention=None):
    import jax
    import jax.numpy as jnp

    from frost import optim
    from frost.models import gpt
    from frost.nn import attention as attn
    from frost.train import loop

    vocab, dim, depth, heads, seq, _ = args.size
    previous = attn.set_attention_implementation(attention)
    try:
        cast = {"fp32": jnp.float32, "bf16": jnp.bfloat16}[dtype]
        model = jax.jit(lambda k: gpt.GPT(vocab, dim, depth, heads, seq, rotary=True, key=k))(
            jax.random.key(0)
        )
        model = jax.tree.map(
            lambda a: a.astype(cast) if jnp.issubdtype(a.dtype, jnp.floating) else a, model
        )
        opt = optim.adamw(LR, weight_decay=WEIGHT_DECAY)
        state = {"model": model, "opt": opt.init(model)}
        train_step = loop.make_train_step(opt)  # softmax cross-entropy over all positions
        batch = tuple(jax.device_put(a) for a in tokens(args))
        key = jax.random.key(1)

        def step():
            state["model"], state["opt"], metrics = train_step(
                state["model"], state["opt"], batch, key
            )
            return metrics["loss"]

        return measure(
            step,
            lambda loss: float(jax.block_until_ready(loss)),
            warmup=args.warmup,
            steps=args.steps,
            inner=args.inner,
        )
    finally:
        attn.set_attention_implementation(previous)


# --- PyTorch -----------------------------------------------------------------------------------


def torch_gpt_class():
    import torch
    import torch.nn.functional as F

    def rotary(x, cos, sin):  # (B, H, T, D), (T, D/2) -> (B, H, T, D)
        d = x.shape[-1] // 2
        x1, x2 = x[..., :d].float(), x[..., d:].float()
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).to(x.dtype)

    class Block(torch.nn.Module):
        def __init__(self, dim, heads):
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
            self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
            self.fc, self.out = torch.nn.Linear(dim, 4 * dim), torch.nn.Linear(4 * dim, dim)

        def forward(self, x, cos, sin):  # (B, T, C)
            B, T, C = x.shape
            q, k, v = (
                self.qkv(self.ln1(x))
                .view(B, T, 3, self.heads, C // self.heads)
                .permute(2, 0, 3, 1, 4)
            )
            y = F.scaled_dot_product_attention(
                rotary(q, cos, sin), rotary(k, cos, sin), v, is_causal=True
            )
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))  # (B, H, T, D) -> (B, T, C)
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(torch.nn.Module):
        def __init__(self, vocab, dim, depth, heads, seq):
            super().__init__()
            self.embed = torch.nn.Embedding(vocab, dim)
            torch.nn.init.normal_(self.embed.weight, std=0.02)
            self.blocks = torch.nn.ModuleList(Block(dim, heads) for _ in range(depth))
            self.ln_f = torch.nn.LayerNorm(dim)
            d = dim // heads // 2
            angles = (
                torch.arange(seq).float()[:, None]
                / (10000 ** (torch.arange(d).float() / d))[None, :]
            )
            self.register_buffer("cos", angles.cos(), persistent=False)  # (T, D/2)
            self.register_buffer("sin", angles.sin(), persistent=False)

        def forward(self, ids):  # (B, T) -> (B, T, V)
            x = self.embed(ids)
            T = ids.shape[1]
            for block in self.blocks:
                x = block(x, self.cos[:T], self.sin[:T])
            return self.ln_f(x) @ self.embed.weight.T

    return GPT


def run_torch(dtype, args, compiled=False):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if args.device == "gpu" else "cpu")
    torch.manual_seed(0)
    vocab, dim, depth, heads, seq, _ = args.size
    cast = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    model = torch_gpt_class()(vocab, dim, depth, heads, seq).to(device=device, dtype=cast).train()
    forward = model
    if compiled:
        torch._dynamo.reset()
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="frost-inductor-"))
        forward = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    x, y = (torch.from_numpy(a).long().to(device) for a in tokens(args))

    def loss():
        logits = forward(x)  # (B, T, vocab)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.view(-1))

    return measure_torch(loss, opt, device, args)


def main():
    args = parse_args()
    os.environ["JAX_PLATFORMS"] = "cuda" if args.device == "gpu" else "cpu"
    warnings.filterwarnings("ignore", message=".*donated buffers.*")  # CPU ignores donation
    runners = {
        "frost": run_frost,
        "frost-xla": functools.partial(run_frost, attention="xla"),
        "torch": run_torch,
        "torch-compile": functools.partial(run_torch, compiled=True),
    }
    vocab, dim, depth, heads, seq, batch = args.size
    rows, stop = [], None
    for dtype in args.dtypes:
        for peer in args.only:
            label = f"gpt {dim}x{depth} {dtype}"
            if stop:
                rows.append(
                    Row(label, PEERS[peer], batch * seq, error=stop, baseline=peer == "frost")
                )
                continue
            try:
                attempt(
                    rows,
                    label,
                    PEERS[peer],
                    batch * seq,
                    functools.partial(runners[peer], dtype, args),
                    baseline=peer == "frost",
                )
            # Ctrl-C or `timeout -s INT` (benchmarks/gpu.sh): report what was measured
            except KeyboardInterrupt:
                stop = "skipped: interrupted"
                rows.append(
                    Row(
                        label,
                        PEERS[peer],
                        batch * seq,
                        error="interrupted",
                        baseline=peer == "frost",
                    )
                )
            gc.collect()
    gpu = None
    if args.device == "gpu":
        import jax

        gpu = jax.devices()[0].device_kind
    title = (
        f"GPT training step on {args.device.upper()}: vocab {vocab}, dim {dim}, depth {depth}, "
        f"{heads} heads, batch {batch} x {seq} tokens; median of {args.steps} x {args.inner} steps "
        f"after {args.warmup} warm-up"
    )
    text = header(title, gpu, ("jax", "torch")) + "\n\n" + table(rows, unit="tokens/s")
    print(text)
    Publisher(args.out)(text, final=True)


if __name__ == "__main__":
    main()
