"""Frost's byte-level BPE against HF tokenizers, SentencePiece and tiktoken, on the King James
Bible.

    flock /tmp/frost-bench.lock python benchmarks/bpe.py          # KJV and KJV x12 (~50 MB),
                                                                  # vocab 4096 and 16384, 5 repeats
    flock /tmp/frost-bench.lock python benchmarks/bpe.py --quick  # KJV, vocab 4096 (smoke check)

Training: Frost `train(text, V)` (counting spread over all cores); HF `BpeTrainer` on the lines with
the same regex and byte-level alphabet (its default thread count, i.e. all cores); SentencePiece BPE
with byte fallback (its own whitespace pre-tokenisation, so not the same work). Encoding: every line
of the corpus, in a batch — Frost `encode_batch` (processes) with a fresh tokenizer each repeat, so
its chunk cache starts cold; HF `encode_batch` (threads); SentencePiece `encode`; tiktoken
`encode_ordinary_batch` loaded with Frost's merges (same regex; we check its ids match ours).
Times are medians of --repeats runs (a third as many on the 50 MB corpus), the libraries taking
turns within each repeat, so that other work on the machine slows them alike; the load average is
printed beside each row. HF's encode time includes collecting its ids into lists (a few ms).
Ratios are frost/peer seconds: below 1 means Frost is faster. Notes follow the table: one 40k-
and one 1M-letter chunk encoded by Frost and HF (the same ids?), and a profile of Frost's
single-process time.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import platform
import random
import statistics
import sys
import time
from collections import Counter
from itertools import chain

from frost.text import (
    GPT4_PATTERN,
    Tokenizer,
    kjv_text,
    split_chunks,
    to_hf_json,
    train,
    train_counts,
)


def hf_train(lines, vocab_size):
    from tokenizers import Regex, models, pre_tokenizers, trainers
    from tokenizers import Tokenizer as HF

    tok = HF(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(GPT4_PATTERN), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.train_from_iterator(
        lines,
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    return tok


def sp_train(lines, vocab_size):
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        model_type="bpe",
        vocab_size=vocab_size,
        byte_fallback=True,
        character_coverage=1.0,
        num_threads=os.cpu_count(),
        minloglevel=2,
    )
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def tiktoken_from(tok: Tokenizer):
    import tiktoken

    return tiktoken.Encoding(
        name="frost",
        pat_str=tok.pattern,
        special_tokens={},
        mergeable_ranks={b: i for i, b in enumerate(tok.vocab)},
    )


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
    out.append(
        f"train {vocab_size}: regex split {t_split:.2f} s, Counter {t_count:.2f} s, merge loop "
        f"(+ setup) {t_merge:.2f} s for {len(counts)} distinct chunks"
    )
    fresh = Tokenizer(tok.merges, tok.special, tok.pattern)
    t = time.perf_counter()
    for c in counts:
        fresh._cache[c]
    t_bpe = time.perf_counter() - t
    t = time.perf_counter()
    list(chain.from_iterable(map(fresh._cache.__getitem__, chunks)))
    t_look = time.perf_counter() - t
    out.append(
        f"encode {vocab_size}: regex split {t_split:.2f} s, BPE of each distinct chunk (cache "
        f"misses) {t_bpe:.2f} s, cache lookups + flatten {t_look:.2f} s"
    )
    return out


def long_chunks(tok: Tokenizer) -> list[str]:
    """Encoding one very long chunk (the GPT-4 pattern does not cap a run of letters): Frost, and HF
    tokenizers loaded with Frost's tokenizer (its tokenizer.json export)."""
    from tokenizers import Tokenizer as HF

    hf, rng, out = HF.from_str(json.dumps(to_hf_json(tok))), random.Random(0), []
    for n in (40_000, 1_000_000):
        chunk = "".join(rng.choices("etaoinshrdlucmfwypvbgk", k=n))
        t = time.perf_counter()
        ids = Tokenizer(tok.merges, tok.special, tok.pattern).encode(chunk)
        t_frost = time.perf_counter() - t
        t = time.perf_counter()
        theirs = hf.encode(chunk).ids
        t_hf = time.perf_counter() - t
        out.append(
            f"one {n:,}-letter chunk: frost {t_frost:.2f} s, HF tokenizers {t_hf:.2f} s "
            f"({'the same ids' if ids == theirs else 'DIFFERENT ids'}, {len(ids):,} tokens)"
        )
    return out


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(
                line.split(":", 1)[1].strip() for line in f if line.startswith("model name")
            )
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def interleaved(fns: dict, repeats: int) -> dict:
    """Run each fn once per repeat, in turn (so a busy spell of the machine hits every library):
    {name: (median seconds, last result, median load average)}."""
    times, loads, out = {k: [] for k in fns}, {k: [] for k in fns}, {}
    for _ in range(repeats):
        for k, fn in fns.items():
            out[k] = None
            gc.collect()
            t = time.perf_counter()
            out[k] = fn()
            times[k].append(time.perf_counter() - t)
            loads[k].append(os.getloadavg()[0])
    return {k: (statistics.median(times[k]), out[k], statistics.median(loads[k])) for k in fns}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="KJV only, vocab 4096")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-peers", action="store_true", help="time Frost only")
    args = parser.parse_args(argv)
    kjv = kjv_text()
    corpora = [("KJV", kjv)] + ([] if args.quick else [("KJV x12", kjv * 12)])
    vocabs = [4096] if args.quick else [4096, 16384]
    train("warm up numba's compiled-code cache", 300)  # ~0.5 s once per process, not counted
    rows, notes = [], []
    for name, text in corpora:
        lines = text.splitlines(keepends=True)
        stripped = [s.rstrip("\n") for s in lines]
        mb = len(text.encode("utf-8")) / 1e6
        reps = args.repeats if mb < 10 else max(1, args.repeats // 3)
        for vocab in vocabs:
            fit = {"frost": lambda: train(text, vocab)}
            if not args.no_peers:
                fit.update(
                    {
                        "HF tokenizers": lambda: hf_train(lines, vocab),
                        "SentencePiece": lambda: sp_train(stripped, vocab),
                    }
                )
            fit = interleaved(fit, reps)
            tok = fit["frost"][1]
            enc = {
                "frost": lambda: Tokenizer(tok.merges, tok.special, tok.pattern).encode_batch(lines)
            }
            if not args.no_peers:
                try:
                    tk = tiktoken_from(tok)
                    enc["tiktoken (Frost merges)"] = lambda: tk.encode_ordinary_batch(
                        lines, num_threads=os.cpu_count()
                    )
                except Exception as e:  # report, don't hide
                    notes.append(f"{name} {vocab}: tiktoken could not load Frost's merges: {e!r}")
                hf, sp = fit["HF tokenizers"][1], fit["SentencePiece"][1]
                enc["HF tokenizers"] = lambda: [e.ids for e in hf.encode_batch(lines)]
                enc["SentencePiece"] = lambda: sp.encode(stripped)
            enc = interleaved(enc, reps)
            ids = enc["frost"][1]
            if not args.no_peers and name == "KJV" and vocab == vocabs[0]:
                notes += [f"{name} {vocab}: {line}" for line in long_chunks(tok)]
            if "tiktoken (Frost merges)" in enc:
                same = sum(a == b for a, b in zip(enc["tiktoken (Frost merges)"][1], ids)) / len(
                    ids
                )
                notes.append(
                    f"{name} {vocab}: tiktoken with Frost's merges gives Frost's ids on "
                    f"{100 * same:.2f}% of lines"
                )
            ft, fe = fit["frost"][0], enc["frost"][0]
            for lib, (te, out, load) in enc.items():
                t = fit[lib][0] if lib in fit else None
                rows.append(
                    [
                        name,
                        f"{mb:.1f}",
                        str(vocab),
                        lib,
                        "-" if t is None else f"{t:.2f}",
                        "-" if t is None else f"{ft / t:.2f}",
                        f"{te:.2f}",
                        f"{mb / te:.1f}",
                        f"{fe / te:.2f}",
                        f"{mb * 1e6 / sum(map(len, out)):.4f}",
                        f"{load:.1f}",
                    ]
                )
                print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
            del fit, enc, ids
            gc.collect()
        notes += [f"{name}: {line}" for line in profile(text, vocabs[-1])]
    head = [
        "corpus",
        "MB",
        "vocab",
        "library",
        "train s",
        "frost/peer",
        "encode s",
        "encode MB/s",
        "frost/peer",
        "bytes/token",
        "load",
    ]
    print(
        "\n`flock /tmp/frost-bench.lock python benchmarks/bpe.py "
        f"{' '.join(argv or sys.argv[1:])}`".rstrip()
    )
    print(
        f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}; medians of "
        f"{args.repeats} interleaved runs (KJV x12: {max(1, args.repeats // 3)}); load: the "
        "1-minute load average during them\n"
    )
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
