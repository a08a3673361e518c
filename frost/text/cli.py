"""`frost tokenizer train` and `frost tokenizer encode`.

    frost tokenizer train corpus/*.txt --vocab-size 16384 -o tok.json [--hf tokenizer.json]
    frost tokenizer encode --tokenizer tok.json corpus/*.txt -o tokens.bin

A token file is the ids of all corpus files, one after another, as raw little-endian uint16 when the
vocabulary has fewer than 65536 tokens, else uint32 (`frost.text.token_dtype`): read it with
`np.memmap("tokens.bin", dtype=token_dtype(tok.vocab_size))`. `--eot TOKEN` appends that special
token after each file, marking where documents end.
"""

import dataclasses
import os
import sys

from frost import atomic
from frost.config import (
    Checked,
    UsageError,
    add_options,
    every,
    from_args,
    option,
    optional,
    output_file,
    required,
    whole,
)

WORKERS = option(None, "processes (default: all cores)", optional(whole(1)))


@dataclasses.dataclass(frozen=True)
class TrainTokenizer(Checked):
    vocab_size: int | None = option(None, "tokens in all: 256 bytes + merges + special", required)
    output: str | None = option(
        None, "where to write the tokenizer (Frost JSON)", every(required, output_file), short="-o"
    )
    special: tuple[str, ...] = option((), "a special token (repeatable)")
    pattern: str | None = option(None, "pre-tokenisation regex (default: GPT-4's)")
    hf: str | None = option(
        None, "also write a HF tokenizers tokenizer.json to this path", optional(output_file)
    )
    workers: int | None = WORKERS


@dataclasses.dataclass(frozen=True)
class EncodeTokens(Checked):
    tokenizer: str | None = option(
        None, "a tokenizer file written by `frost tokenizer train`", required
    )
    output: str | None = option(
        None,
        "token file to write (uint16 or uint32, raw)",
        every(required, output_file),
        short="-o",
    )
    eot: str | None = option(None, "special token to append after each file")
    special: str = option(
        "refuse",
        "what special-token strings inside the text mean",
        choices=("refuse", "allow", "text"),
    )
    workers: int | None = WORKERS


def add_commands(subparsers) -> None:
    parser = subparsers.add_parser(
        "tokenizer", help="train byte-level BPE tokenizers and encode corpora"
    )
    parser.set_defaults(run=lambda args: parser.print_help())
    sub = parser.add_subparsers(metavar="ACTION")
    for name, cls, run, help in (
        ("train", TrainTokenizer, _train, "train a tokenizer on UTF-8 text files"),
        ("encode", EncodeTokens, _encode, "encode UTF-8 text files into a flat token file"),
    ):
        p = sub.add_parser(name, help=help)
        p.add_argument("corpus", nargs="+", help="UTF-8 text files")
        add_options(p, [cls])
        p.set_defaults(run=run, config=cls, command=f"`frost tokenizer {name}`")


def _train(args) -> int:
    cfg = from_args(args.config, args, args.command)
    from .bpe import GPT4_PATTERN, stream_files, train
    from .io import save, save_hf

    _checked(cfg, args.corpus)
    tok = train(
        stream_files(args.corpus),
        cfg.vocab_size,
        pattern=GPT4_PATTERN if cfg.pattern is None else cfg.pattern,
        special_tokens=cfg.special,
        workers=cfg.workers,
        progress=True,
    )
    save(tok, cfg.output)
    if cfg.hf:
        save_hf(tok, cfg.hf)
    print(f"{tok!r} -> {cfg.output}", file=sys.stderr)
    return 0


def _encode(args) -> int:
    cfg = from_args(args.config, args, args.command)
    import numpy as np

    from .bpe import _bar, stream_files
    from .io import load, token_dtype

    tok = load(cfg.tokenizer)
    if cfg.eot is not None and cfg.eot not in tok.special:
        raise UsageError(
            f"--eot {cfg.eot!r} is not a special token of {cfg.tokenizer} (it has "
            f"{list(tok.special)})"
        )
    dtype = np.dtype(token_dtype(tok.vocab_size))
    bar = _bar(True, "encoding", "B", total=_checked(cfg, args.corpus))

    def blocks():  # the token file, streamed in blocks to frost's atomic writer
        for path in args.corpus:
            pieces = _counted(stream_files([path]), bar)
            for ids in tok.encode_iter(pieces, special=cfg.special, workers=cfg.workers):
                yield np.asarray(ids, dtype).tobytes()
            if cfg.eot is not None:
                yield np.asarray([tok.special[cfg.eot]], dtype).tobytes()

    with bar:
        atomic.write(cfg.output, blocks())
    tokens = os.path.getsize(cfg.output) // dtype.itemsize
    print(f"{tokens} tokens ({dtype.name}) -> {cfg.output}", file=sys.stderr)
    return 0


def _checked(cfg, corpus) -> int:
    """The corpus files' total size; UsageError, before any work, if one is missing (the outputs
    were checked when the config was built: frost.config.output_file)."""
    try:
        return sum(os.path.getsize(p) for p in corpus)
    except OSError as e:
        raise UsageError(f"{e.filename}: {e.strerror}") from None


def _counted(pieces, bar):
    for piece in pieces:
        bar.update(len(piece.encode("utf-8")))
        yield piece
