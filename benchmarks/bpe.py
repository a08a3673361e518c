"""Frost's byte-level BPE against HF tokenizers, SentencePiece and tiktoken, on the King James Bible.

    flock /tmp/frost-bench.lock python benchmarks/bpe.py            # KJV and KJV x12 (~50 MB), vocab 4096 and 16384
    flock /tmp/frost-bench.lock python benchmarks/bpe.py --quick    # KJV, vocab 4096 (smoke check)

Training: Frost `train(text, V)` (counting spread over all cores); HF `BpeTrainer` on the lines with
the same regex and byte-level alphabet (its default thread count, i.e. all cores); SentencePiece BPE
with byte fallback (its own whitespace pre-tokenisation, so not the same work). Encoding: every line
of the corpus, in a batch — Frost `encode_batch` (processes) with a fresh tokenizer each repeat, so
its chunk cache starts cold; HF `encode_batch` (threads); SentencePiece `encode`; tiktoken
`encode_ordinary_batch` loaded with Frost's merges (same regex; we check its ids match ours).
Times are medians of --repeats runs (one run on the 50 MB corpus); the encode times of HF and
SentencePiece include summing the lengths of their outputs (a few ms). Ratios are frost/peer seconds:
below 1 means Frost is faster. A profile of Frost's single-process time follows the table.
"""
from __future__ import annotations

import argparse
import gc
import io
import os
import platform
import statistics
import sys
import time
from collections import Counter
from itertools import chain

from frost.text import GPT4_PATTERN, Tokenizer, kjv_text, split_chunks, train, train_counts


def timed(fn, repeats: int):
    times, out = [], None
    for _ in range(repeats):
        out = None
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def hf_train(lines, vocab_size):
    from tokenizers import Regex, Tokenizer as HF, models, pre_tokenizers, trainers
    tok = HF(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(GPT4_PATTERN), "isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def sp_train(lines, vocab_size):
    import sentencepiece as spm
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, model_type="bpe",
                                   vocab_size=vocab_size, byte_fallback=True, character_coverage=1.0,
                                   num_threads=os.cpu_count(), minloglevel=2)
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def tiktoken_from(tok: Tokenizer):
    import tiktoken
    return tiktoken.Encoding(name="frost", pat_str=tok.pattern, special_tokens={},
                             mergeable_ranks={b: i for i, b in enumerate(tok.vocab)})


def profile(text: str, vocab_size: int) -> list[str]:
    """Where Frost's single-process time goes."""
    out = []
    t = time.perf_counter()
    chunks = split_chunks(GPT4_PATTERN, text)
    t_split = time.perf_counter() - t
    t = time.perf_counter()
    counts = Counter(chunks)
    t_count = time.perf_counter() - t
    t = time.perf_counter()
    tok = train_counts(counts, vocab_size)
    t_merge = time.perf_counter() - t
    out.append(f"train {vocab_size}: regex split {t_split:.2f} s, Counter {t_count:.2f} s, merge loop "
               f"(+ setup) {t_merge:.2f} s for {len(counts)} distinct chunks")
    fresh = Tokenizer(tok.merges, tok.special, tok.pattern)
    t = time.perf_counter()
    for c in counts:
        fresh._cache[c]
    t_bpe = time.perf_counter() - t
    t = time.perf_counter()
    list(chain.from_iterable(map(fresh._cache.__getitem__, chunks)))
    t_look = time.perf_counter() - t
    out.append(f"encode {vocab_size}: regex split {t_split:.2f} s, BPE of each distinct chunk (cache misses) "
               f"{t_bpe:.2f} s, cache lookups + flatten {t_look:.2f} s")
    return out


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="KJV only, vocab 4096")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-peers", action="store_true", help="time Frost only")
    args = parser.parse_args(argv)
    kjv = kjv_text()
    corpora = [("KJV", kjv)] + ([] if args.quick else [("KJV x12", kjv * 12)])
    vocabs = [4096] if args.quick else [4096, 16384]
    train("warm up numba's compiled-code cache", 300)  # ~0.4 s once per process, not counted
    rows, notes = [], []
    for name, text in corpora:
        lines = text.splitlines(keepends=True)
        mb = len(text.encode("utf-8")) / 1e6
        reps = args.repeats if mb < 10 else 1
        for vocab in vocabs:
            res = {}  # library -> (train s, encode s, tokens); id lists are dropped at once so that
            # garbage collection of millions of held lists does not slow the next measurement
            t, tok = timed(lambda: train(text, vocab), reps)
            te, ids = timed(lambda: Tokenizer(tok.merges, tok.special, tok.pattern).encode_batch(lines), reps)
            res["frost"] = (t, te, sum(map(len, ids)))
            if not args.no_peers:
                try:
                    tk = tiktoken_from(tok)
                    te, tids = timed(lambda: tk.encode_ordinary_batch(lines, num_threads=os.cpu_count()), reps)
                    res["tiktoken (Frost merges)"] = (None, te, sum(map(len, tids)))
                    same = sum(a == b for a, b in zip(tids, ids)) / len(ids)
                    notes.append(f"{name} {vocab}: tiktoken with Frost's merges gives Frost's ids on {100 * same:.2f}% of lines")
                    del tids
                except Exception as e:  # report, don't hide
                    notes.append(f"{name} {vocab}: tiktoken could not load Frost's merges: {e!r}")
                del ids
                gc.collect()
                t, hf = timed(lambda: hf_train(lines, vocab), reps)
                te, n = timed(lambda: sum(len(e.ids) for e in hf.encode_batch(lines)), reps)
                res["HF tokenizers"] = (t, te, n)
                stripped = [s.rstrip("\n") for s in lines]
                t, sp = timed(lambda: sp_train(stripped, vocab), reps)
                te, n = timed(lambda: sum(map(len, sp.encode(stripped))), reps)
                res["SentencePiece"] = (t, te, n)
                del hf, sp, stripped
                gc.collect()
            ft, fe, _ = res["frost"]
            for lib, (t, te, n_tok) in res.items():
                rows.append([name, f"{mb:.1f}", str(vocab), lib, "-" if t is None else f"{t:.2f}",
                             "-" if t is None else f"{ft / t:.2f}", f"{te:.2f}", f"{mb / te:.1f}", f"{fe / te:.2f}",
                             f"{mb * 1e6 / n_tok:.4f}"])
                print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
            gc.collect()
        notes += [f"{name}: {line}" for line in profile(text, vocabs[-1])]
    head = ["corpus", "MB", "vocab", "library", "train s", "frost/peer", "encode s", "encode MB/s",
            "frost/peer", "bytes/token"]
    print(f"\n`flock /tmp/frost-bench.lock python benchmarks/bpe.py {' '.join(argv or sys.argv[1:])}`".rstrip())
    print(f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()
    for note in notes:
        print(f"- {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
