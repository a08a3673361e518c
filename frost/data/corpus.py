"""Text corpora as token shards: one small text (`kjv`, a .txt file), or a corpus of any size
(.txt, .jsonl, .parquet files, folders and globs of them, a `datasets` save_to_disk folder).

```python
files = find("shards/")                                  # sorted .txt/.jsonl/.parquet files
tok = tokenizer(files, None, 4096, 100_000_000, cache)   # trained on a sample, or loaded
manifest = prepare(files, tok, cache)                    # made once, then reused
TokenWindows(shard_paths(manifest, "train"), 1024, manifest["dtype"])
```

A corpus is a sequence of documents: a .txt file is one, a .jsonl line one (its `key` field), a
parquet or Arrow row one (its `column`), each followed by an end-of-text token. Files are read as
streams (text in ~1 MB pieces, parquet and Arrow in record batches), encoded in the BPE worker pool
(`Tokenizer.encode_flat`) and written as uint16/uint32 shards, so memory stays bounded at any
corpus size. Every 20th document is validation, as nanoGPT's prepare.py holds out a share of
documents. The shards live in `cache/<corpus fingerprint>-<tokenizer hash>/` with a manifest; the
folder is filled under another name and renamed into place (frost.atomic), so a killed preparation
leaves nothing a later run would use, and it starts again cleanly. A file lock beside it makes one
process prepare while the others (the processes of a multi-process run, or a second run) wait.

The tokenizer is trained on a deterministic sample of about `sample` characters, the first
documents of every file in proportion to its size (SentencePiece's `input_sentence_size`, drawn
from every shard), or loaded: a Frost tokenizer.json or a GPT-2 folder (frost.text.io.load_gpt2).
"""

import contextlib
import fcntl
import glob
import hashlib
import json
import os
import pathlib
import time
from collections.abc import Iterator, Sequence
from itertools import tee

import numpy as np

from frost import atomic, text
from frost.config import UsageError, needs

SUFFIXES = (".txt", ".jsonl", ".parquet")
EOT = "<|endoftext|>"
VAL_EVERY = 20  # document i is validation when i % VAL_EVERY == VAL_EVERY - 1
SHARD_TOKENS = 1 << 28  # tokens per shard file (512 MB of uint16)


# --- the small path: one text, split 95/5 by characters ---


def read_text(name: str) -> str:
    """The text of `kjv` (frost.text.kjv_text) or of a UTF-8 file.

    Arguments:
        name: "kjv", or a text file's path.

    Returns:
        The text.

    Raises:
        UsageError: `name` is neither, or the file is not UTF-8.
    """
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


def prepare_text(
    name: str,
    folder: str | os.PathLike,
    vocab_size: int,
    limit: int | None,
    need: int,
    progress: bool = True,
) -> text.Tokenizer:
    """A tokenizer trained on the first 95% of a small text, and both parts encoded.

    The text is cut at a line break near 95%; the parts are written to `folder`/train.bin and
    val.bin (token files of `text.token_dtype`). Made once: tokenizer.json is written last, so its
    presence means the files are complete, and a later call loads it.

    Arguments:
        name: "kjv" or a UTF-8 file (`read_text`).
        folder: where train.bin, val.bin and tokenizer.json go.
        vocab_size: the tokenizer's size (`text.train`).
        limit: use only the first `limit` characters (None: all).
        need: the fewest training tokens a run can use (a batch of windows, plus one).
        progress: show progress bars and the time taken.

    Returns:
        The tokenizer.

    Raises:
        UsageError: too little text for `need` tokens and a validation part.
    """
    tok_path = pathlib.Path(folder) / "tokenizer.json"
    if tok_path.exists():
        return text.load(tok_path)
    corpus = read_text(name)[:limit]
    cut = corpus.rfind("\n", 0, int(0.95 * len(corpus))) + 1 or int(0.95 * len(corpus))
    # a token is >= 1 byte
    if len(corpus[:cut].encode()) < need or len(corpus) - cut < 2:
        raise UsageError(
            f"--data {name}{f' --limit {limit}' if limit else ''}: {len(corpus):,} characters is "
            f"too little text for {need:,} training tokens plus a validation part"
        )
    start = time.perf_counter()
    tok = text.train(corpus[:cut], vocab_size, progress=progress)
    for part, chars in (("train.bin", corpus[:cut]), ("val.bin", corpus[cut:])):
        ids = np.asarray(tok.encode(chars), text.token_dtype(tok.vocab_size))
        atomic.write(pathlib.Path(folder) / part, ids.tobytes())
    text.save(tok, tok_path)
    if progress:
        took = f"{time.perf_counter() - start:.1f} s"
        print(f"tokenizer: {tok.vocab_size} tokens, trained and applied in {took}", flush=True)
    return tok


# --- corpora: files of documents ---


def is_corpus(name: str) -> bool:
    """Whether --data names a corpus (a folder, a glob, a .jsonl or .parquet file) rather than
    `kjv` or one text file.

    Arguments:
        name: the --data value.

    Returns:
        True for a corpus (`find`, `prepare`), False for a small text (`prepare_text`).
    """
    path = pathlib.Path(name)
    return name != "kjv" and not (path.is_file() and path.suffix not in SUFFIXES[1:])


def find(name: str) -> list[pathlib.Path]:
    """The files of a corpus, sorted.

    Arguments:
        name: a file, a folder (searched recursively) or a glob of .txt/.jsonl/.parquet files, or
            a `datasets` save_to_disk folder (its .arrow files; of a DatasetDict, give one
            split's folder).

    Returns:
        The files' paths.

    Raises:
        UsageError: no such files, or pyarrow is missing for parquet or Arrow files.
    """
    path = pathlib.Path(name)
    if (path / "state.json").is_file():  # a datasets.Dataset.save_to_disk folder
        needs("pyarrow", f"--data {name}", "pyarrow")
        state = json.loads((path / "state.json").read_text())
        return [path / f["filename"] for f in state["_data_files"]]
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES and p.is_file())
    else:
        files = sorted(pathlib.Path(p) for p in glob.glob(name) if p.endswith(SUFFIXES))
    if not files:
        raise UsageError(
            f"--data {name}: neither kjv nor a text file, nor a folder or glob of "
            f"{', '.join(SUFFIXES)} files"
        )
    if any(p.suffix == ".parquet" for p in files):
        needs("pyarrow", f"--data {name} (parquet files)", "pyarrow")
    return files


def _columns(batches, column: str, path) -> Iterator[tuple[str, bool]]:
    for batch in batches:
        if column not in batch.schema.names:
            raise UsageError(
                f"{path}: no --text-column {column!r} (its columns: {batch.schema.names})"
            )
        for doc in batch.column(column).to_pylist():
            yield doc or "", True


def pieces(
    path: str | os.PathLike, key: str = "text", column: str = "text"
) -> Iterator[tuple[str, bool]]:
    """The documents of one file, read as a stream.

    Arguments:
        path: a .txt file (one document), .jsonl (a document a line), .parquet or .arrow (a
            document a row).
        key: the field of a .jsonl line that holds its text.
        column: the column of a parquet or Arrow row that holds its text.

    Yields:
        (text, whether it ends a document): a .txt file comes in ~1 MB pieces followed by
        ("", True); every other document is one piece that ends it.

    Raises:
        UsageError: a line that is not JSON or lacks `key`, or a file without `column`.
    """
    path = pathlib.Path(path)
    if path.suffix == ".txt":
        yield from ((piece, False) for piece in text.stream_files([path]))
        yield "", True
    elif path.suffix == ".jsonl":
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    doc = json.loads(line)
                except json.JSONDecodeError as e:
                    raise UsageError(f"{path} line {n}: not JSON ({e.msg})") from None
                if not isinstance(doc, dict) or not isinstance(doc.get(key), str):
                    raise UsageError(
                        f"{path} line {n}: no text under --text-key {key!r} ({line[:60]!r})"
                    )
                yield doc[key], True
    elif path.suffix == ".parquet":
        import pyarrow.parquet as pq

        yield from _columns(pq.ParquetFile(path).iter_batches(1024), column, path)
    else:  # .arrow: the Arrow stream files of a datasets folder
        import pyarrow as pa

        with pa.memory_map(str(path)) as source:
            yield from _columns(pa.ipc.open_stream(source), column, path)


def fingerprint(files: Sequence[pathlib.Path], key: str, column: str) -> str:
    """Names the corpus: each file's path, size and modification time, and the fields read.

    Arguments:
        files: the corpus's files (`find`).
        key: the .jsonl text field.
        column: the parquet/Arrow text column.

    Returns:
        16 hex digits; they change when a file, its size or time, or a field changes.
    """
    stats = [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    return _hash([stats, key, column, VAL_EVERY, SHARD_TOKENS])


def _hash(value) -> str:
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()[:16]


def token_hash(tok: text.Tokenizer | text.io.Renumbered) -> str:
    """Names a tokenizer: its merges, special tokens, pattern and (GPT-2) id numbering.

    Arguments:
        tok: a Frost tokenizer, or a GPT-2 one (`text.io.load_gpt2`).

    Returns:
        16 hex digits.
    """
    base = getattr(tok, "tok", tok)
    return _hash([base.merges, base.special, base.pattern, getattr(tok, "ids", None)])


@contextlib.contextmanager
def _locked(path: pathlib.Path):
    """Hold an exclusive lock on `path`: the first process in does the work, the others wait."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def sample(
    files: Sequence[pathlib.Path], chars: int, key: str = "text", column: str = "text"
) -> Iterator[str]:
    """About `chars` characters of documents: the first ones of each file, in proportion to its
    size, so every shard is drawn from and the sample is the same on every run.

    Arguments:
        files: the corpus's files (`find`).
        chars: about how many characters to take in all.
        key: the .jsonl text field.
        column: the parquet/Arrow text column.

    Yields:
        Pieces of documents (str), file by file.
    """
    sizes = [p.stat().st_size for p in files]
    for path, size in zip(files, sizes, strict=True):
        share = chars * size / max(sum(sizes), 1)  # this file's part of the sample
        taken = 0
        for piece, _ in pieces(path, key, column):
            if taken >= share:
                break
            yield piece
            taken += len(piece)


def load_tokenizer(path: str) -> text.Tokenizer | text.io.Renumbered:
    """A Frost tokenizer.json, or a GPT-2 folder (frost.text.io.load_gpt2).

    Arguments:
        path: the file or folder.

    Returns:
        The tokenizer.
    """
    if pathlib.Path(path).is_dir():
        return text.io.load_gpt2(path)
    return text.load(path)


def tokenizer(
    files: Sequence[pathlib.Path],
    path: str | None,
    vocab_size: int,
    chars: int,
    cache: str | os.PathLike,
    key: str = "text",
    column: str = "text",
    workers: int | None = None,
    progress: bool = False,
) -> text.Tokenizer | text.io.Renumbered:
    """The tokenizer of a corpus: loaded from `path`, or trained on `sample(files, chars)` with
    the end-of-text token, once (it is kept in `cache`, named by the corpus and the settings).

    Arguments:
        files: the corpus's files (`find`).
        path: a tokenizer to load (`load_tokenizer`), or None to train one.
        vocab_size: the trained tokenizer's size.
        chars: about how many characters of the corpus to train on.
        cache: the folder that keeps trained tokenizers.
        key: the .jsonl text field.
        column: the parquet/Arrow text column.
        workers: processes that count the sample's chunks (None: all cores).
        progress: show progress bars while training.

    Returns:
        The tokenizer; it has the end-of-text token.

    Raises:
        UsageError: the loaded tokenizer has no end-of-text token.
    """
    if path:
        tok = load_tokenizer(path)
        if EOT not in getattr(tok, "tok", tok).special:
            raise UsageError(f"--tokenizer {path}: has no {EOT} token to end documents with")
        return tok
    name = f"tokenizer-{_hash([fingerprint(files, key, column), vocab_size, chars])}.json"
    target = pathlib.Path(cache).expanduser() / name
    with _locked(target.with_suffix(".lock")):
        if not target.is_file():
            docs = sample(files, chars, key, column)
            trained = text.train(
                docs, vocab_size, special_tokens=[EOT], workers=workers, progress=progress
            )
            text.save(trained, target)
    return text.load(target)


def _append(folder: pathlib.Path, shards: list, part: str, ids: np.ndarray, dtype) -> None:
    """Add `ids` to the last of the shard files `shards` ([[name, tokens], ...]) of `part`,
    starting `part_00001.bin`, ... once it holds SHARD_TOKENS."""
    if not shards or shards[-1][1] >= SHARD_TOKENS:
        shards.append([f"{part}_{len(shards):05d}.bin", 0])
    with open(folder / shards[-1][0], "ab") as f:
        f.write(ids.astype(dtype).tobytes())
    shards[-1][1] += len(ids)


def _batches(files, key, column) -> Iterator[tuple[list[str], np.ndarray]]:
    """(texts, whether each ends a document) in groups of about 1 MB of text, the size of the BPE
    workers' tasks (text.bpe.BATCH_CHARS)."""
    texts = []
    ends = []
    chars = 0
    for path in files:
        for piece, end in pieces(path, key, column):
            texts.append(piece)
            ends.append(end)
            chars += len(piece)
            if chars >= text.bpe.BATCH_CHARS:
                yield texts, np.array(ends)
                texts = []
                ends = []
                chars = 0
    if texts:
        yield texts, np.array(ends)


def prepare(
    files: Sequence[pathlib.Path],
    tok: text.Tokenizer | text.io.Renumbered,
    cache: str | os.PathLike,
    key: str = "text",
    column: str = "text",
    workers: int | None = None,
    progress: bool = False,
) -> dict:
    """The corpus's token shards under `tok`: encoded once into the cache (see the module's
    docstring), and read from it afterwards.

    Arguments:
        files: the corpus's files (`find`).
        tok: the tokenizer (`tokenizer`); it has the end-of-text token.
        cache: the folder that keeps prepared corpora.
        key: the .jsonl text field.
        column: the parquet/Arrow text column.
        workers: processes that encode (None: all cores).
        progress: print the tokens and time taken when it encodes.

    Returns:
        The manifest: {"dtype", "train" and "val" ([[shard file, tokens], ...]), "documents",
        "vocab_size", "files", "folder" (where the shards are), ...}; see `shard_paths`.
    """
    name = f"{fingerprint(files, key, column)}-{token_hash(tok)}"
    folder = pathlib.Path(cache).expanduser() / name
    with _locked(folder.with_name(folder.name + ".lock")):
        if not (folder / "manifest.json").is_file():
            start = time.perf_counter()
            with atomic.directory(folder) as tmp:
                manifest = _encode(files, tok, tmp, key, column, workers)
                atomic.write(tmp / "manifest.json", json.dumps(manifest))
            if progress:
                tokens = sum(n for _, n in manifest["train"] + manifest["val"])
                print(f"corpus: {tokens:,} tokens in {time.perf_counter() - start:.1f} s")
    return {**json.loads((folder / "manifest.json").read_text()), "folder": str(folder)}


def _encode(files, tok, folder: pathlib.Path, key, column, workers) -> dict:
    base = getattr(tok, "tok", tok)  # the Frost tokenizer (under a GPT-2 renumbering)
    dtype = text.token_dtype(tok.vocab_size)
    # Frost id -> the id written: a GPT-2 tokenizer's own numbering (load_gpt2); None: the same
    renumber = np.asarray(tok.ids, np.int64) if hasattr(tok, "ids") else None
    shards = {"train": [], "val": []}
    batches, texts = tee(_batches(files, key, column))
    docs = 0
    encoded = base.encode_flat((t for t, _ in texts), special="text", workers=workers)
    for (_, ends), (flat, lengths) in zip(batches, encoded):
        ids = np.insert(flat, np.cumsum(lengths)[ends], base.special[EOT])  # each document + EOT
        if renumber is not None:
            ids = renumber[ids]
        doc = docs + np.cumsum(ends) - ends  # (pieces,) the document of each piece
        val = np.repeat(doc % VAL_EVERY == VAL_EVERY - 1, lengths + ends)  # (tokens,)
        _append(folder, shards["train"], "train", ids[~val], dtype)
        _append(folder, shards["val"], "val", ids[val], dtype)
        docs += int(ends.sum())
    return {
        "format": "frost-tokens",
        "version": 1,
        "dtype": np.dtype(dtype).name,
        **shards,
        "documents": docs,
        "vocab_size": tok.vocab_size,
        "files": [str(p) for p in files],
    }


def shard_paths(manifest: dict, part: str) -> list[pathlib.Path]:
    """The shard files of `part` that hold tokens.

    Arguments:
        manifest: what `prepare` returns.
        part: "train" or "val".

    Returns:
        The paths, in order: `TokenWindows(paths, seq_len, manifest["dtype"])` reads them.
    """
    return [pathlib.Path(manifest["folder"]) / f for f, n in manifest[part] if n]
