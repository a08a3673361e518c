"""`frost tokenizer train` and `frost tokenizer encode`.

    frost tokenizer train corpus/*.txt --vocab-size 16384 -o tok.json [--hf tokenizer.json]
    frost tokenizer encode --tokenizer tok.json corpus/*.txt -o tokens.bin

A token file is the ids of all corpus files, one after another, as raw little-endian uint16 when the
vocabulary has fewer than 65536 tokens, else uint32 (`frost.text.token_dtype`): read it with
`np.memmap("tokens.bin", dtype=token_dtype(tok.vocab_size))`. `--eot TOKEN` appends that special
token after each file, marking where documents end.
"""

import os
import sys

from frost import atomic
from frost.config import UsageError


def add_commands(subparsers) -> None:
    parser = subparsers.add_parser(
        "tokenizer", help="train byte-level BPE tokenizers and encode corpora"
    )
    parser.set_defaults(run=lambda args: parser.print_help())
    sub = parser.add_subparsers(metavar="ACTION")

    t = sub.add_parser("train", help="train a tokenizer on UTF-8 text files")
    t.add_argument("corpus", nargs="+", help="UTF-8 text files")
    t.add_argument(
        "--vocab-size", type=int, required=True, help="tokens in all: 256 bytes + merges + special"
    )
    t.add_argument(
        "-o", "--output", required=True, help="where to write the tokenizer (Frost JSON)"
    )
    t.add_argument(
        "--special",
        action="append",
        default=[],
        metavar="TOKEN",
        help="a special token (repeatable)",
    )
    t.add_argument("--pattern", default=None, help="pre-tokenisation regex (default: GPT-4's)")
    t.add_argument("--hf", metavar="PATH", help="also write a HF tokenizers tokenizer.json")
    t.add_argument(
        "--workers", type=int, default=None, help="processes for counting (default: all cores)"
    )
    t.set_defaults(run=_train)

    e = sub.add_parser("encode", help="encode UTF-8 text files into a flat token file")
    e.add_argument("corpus", nargs="+", help="UTF-8 text files")
    e.add_argument(
        "--tokenizer", required=True, help="a tokenizer file written by `frost tokenizer train`"
    )
    e.add_argument(
        "-o", "--output", required=True, help="token file to write (uint16 or uint32, raw)"
    )
    e.add_argument("--eot", metavar="TOKEN", help="special token to append after each file")
    e.add_argument(
        "--special",
        choices=["refuse", "allow", "text"],
        default="refuse",
        help="what special-token strings inside the text mean (default: refuse)",
    )
    e.add_argument(
        "--workers", type=int, default=None, help="processes for encoding (default: all cores)"
    )
    e.set_defaults(run=_encode)


def _train(args) -> int:
    from .bpe import GPT4_PATTERN, stream_files, train
    from .io import save, save_hf

    _checked(args)
    pattern = GPT4_PATTERN if args.pattern is None else args.pattern
    tok = train(
        stream_files(args.corpus),
        args.vocab_size,
        pattern=pattern,
        special_tokens=args.special,
        workers=args.workers,
        progress=True,
    )
    save(tok, args.output)
    if args.hf:
        save_hf(tok, args.hf)
    print(f"{tok!r} -> {args.output}", file=sys.stderr)
    return 0


def _encode(args) -> int:
    import numpy as np

    from .bpe import _bar, stream_files
    from .io import load, token_dtype

    tok = load(args.tokenizer)
    if args.eot is not None and args.eot not in tok.special:
        raise UsageError(
            f"--eot {args.eot!r} is not a special token of {args.tokenizer} (it has "
            f"{list(tok.special)})"
        )
    dtype, bar = (
        np.dtype(token_dtype(tok.vocab_size)),
        _bar(True, "encoding", "B", total=_checked(args)),
    )

    def blocks():  # the token file, streamed in blocks to frost's atomic writer
        for path in args.corpus:
            for ids in tok.encode_iter(
                _counted(stream_files([path]), bar), special=args.special, workers=args.workers
            ):
                yield np.asarray(ids, dtype).tobytes()
            if args.eot is not None:
                yield np.asarray([tok.special[args.eot]], dtype).tobytes()

    with bar:
        atomic.write(args.output, blocks())
    print(
        f"{os.path.getsize(args.output) // dtype.itemsize} tokens ({dtype.name}) -> {args.output}",
        file=sys.stderr,
    )
    return 0


def _checked(args) -> int:
    """The corpus files' total size; UsageError, before any work, if one is missing, or an output's
    folder."""
    for out in (args.output, getattr(args, "hf", None)):
        if out and not os.path.isdir(os.path.dirname(os.path.abspath(out))):
            raise UsageError(
                f"{out}: there is no folder {os.path.dirname(os.path.abspath(out))} to write it in"
            )
    try:
        return sum(os.path.getsize(p) for p in args.corpus)
    except OSError as e:
        raise UsageError(f"{e.filename}: {e.strerror}") from None


def _counted(pieces, bar):
    for piece in pieces:
        bar.update(len(piece.encode("utf-8")))
        yield piece
