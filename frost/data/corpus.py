"""Text corpora as token shards: one small text (`kjv`, a .txt file), or a corpus of any size
(.txt, .jsonl, .parquet files, folders and globs of them, a `datasets` save_to_disk folder).

```python
files = find("shards/")                                  # sorted .txt/.jsonl/.parquet files
tok = tokenizer(files, None, 4096, 100_000_000, cache)   # trained on a sample, or loaded
manifest = prepare(files, tok, cache)                    # made once, then reused
TokenWindows(shard_paths(manifest, "train"), 1024, manifest["dtype"])
```

A corpus is a sequence of documents: a .txt file is one, a .jsonl line one (its `key` field), a
parquet or Arrow row one (its `column`), each followed by an end-of-text token. One rule for every
source: a document without text (a null, a missing key, a number) is refused, naming the file, the
line or row, and the key or column; nothing is skipped. A file that is not what it claims (a
corrupt parquet file, a text column of ints, a datasets folder missing a shard) is refused by
`find`, before any work.

Files are read as streams (text in ~1 MB pieces, parquet and Arrow in record batches), encoded in
the BPE worker pool (`Tokenizer.encode_flat`) and written as uint16/uint32 shards, so memory stays
bounded at any corpus size. Every 20th document is validation, as nanoGPT's prepare.py holds out a
share of documents. The shards live in `cache/<corpus fingerprint>-<tokenizer hash>/` with a
manifest; the folder is filled under another name and renamed into place (frost.atomic), so a
killed preparation leaves nothing a later run would use, and it starts again cleanly. A file lock
beside it makes one process prepare while the others (the processes of a multi-process run, or a
second run) wait; it is removed when the work ends, and a refused corpus leaves nothing behind.

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


def find(name: str, column: str = "text") -> list[pathlib.Path]:
    """The files of a corpus, sorted, each checked to be what it claims before any work: a
    parquet or Arrow file is opened, and its `column` must hold strings.

    Arguments:
        name: a file, a folder (searched recursively) or a glob of .txt/.jsonl/.parquet files, or
            a `datasets` save_to_disk folder (its .arrow files; of a DatasetDict, give one
            split's folder).
        column: the parquet/Arrow text column.

    Returns:
        The files' paths.

    Raises:
        UsageError: no such files; pyarrow is missing for parquet or Arrow files; a datasets
            folder whose state.json is unreadable or lists a missing file; a parquet or Arrow
            file that is not one, or has no string column `column`.
    """
    path = pathlib.Path(name)
    if (path / "state.json").is_file():  # a datasets.Dataset.save_to_disk folder
        needs("pyarrow", f"--data {name}", "pyarrow")
        files = _saved_dataset(path)
    elif path.is_dir():
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
    for file in files:
        if file.suffix in (".parquet", ".arrow"):
            _opened(file, column)  # refused here, at once, if it is not what it claims
    return files


def _saved_dataset(path: pathlib.Path) -> list[pathlib.Path]:
    """The .arrow files that a datasets save_to_disk folder's state.json lists, each there."""
    state = path / "state.json"
    try:
        listed = json.loads(state.read_text(encoding="utf-8"))["_data_files"]
        files = [path / entry["filename"] for entry in listed]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise UsageError(
            f"{state}: not the state.json of a datasets save_to_disk folder ({_why(e)})"
        ) from None
    missing = [file for file in files if not file.is_file()]
    if missing:
        raise UsageError(
            f"{missing[0]}: not found, though {state} lists it ({len(missing)} of its "
            f"{len(files)} .arrow files are missing); save the data set again"
        )
    return files


def _why(error: Exception) -> str:
    """An exception's message on one line (pyarrow's may span several)."""
    return " ".join(str(error).split()) or type(error).__name__


def _is_text(kind) -> bool:
    """Whether an Arrow type holds strings (plain, large, view, or dictionary-encoded)."""
    import pyarrow as pa

    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return (
        pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)
    )


def _opened(path: pathlib.Path, column: str):
    """The record batches of `column` of a parquet file, or of an Arrow stream file (a datasets
    shard), opened and checked: the file is one, and the column is there and holds strings. Only
    the footer or header is read here; the batches are read as they are taken."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = path.suffix == ".parquet"
    try:
        if parquet:
            source = pq.ParquetFile(path)
            schema = source.schema_arrow
        else:
            source = pa.ipc.open_stream(pa.memory_map(str(path)))
            schema = source.schema
    except (pa.ArrowException, OSError) as e:
        kind = "a parquet file" if parquet else "an Arrow stream file (a datasets shard)"
        raise UsageError(f"{path}: not {kind} ({_why(e)})") from None
    if column not in schema.names:
        raise UsageError(f"{path}: no --text-column {column!r} (its columns: {schema.names})")
    kind = schema.field(column).type
    if not _is_text(kind):
        raise UsageError(
            f"{path}: --text-column {column!r} holds {kind}, not strings; give the column that "
            "holds the documents' text"
        )
    if parquet:
        return source.iter_batches(1024, columns=[column])
    return source


def _rows(path: pathlib.Path, column: str) -> Iterator[tuple[str, bool]]:
    """The documents of a parquet or Arrow file (`_opened`), one a row; a null text is refused,
    naming the row (counted from 0)."""
    import pyarrow as pa

    row = 0
    try:
        for batch in _opened(path, column):
            for doc in batch.column(column).to_pylist():
                if doc is None:
                    raise UsageError(
                        f"{path} row {row}: --text-column {column!r} is null, not a string; "
                        "drop the row or give it a text"
                    )
                yield doc, True
                row += 1
    except (pa.ArrowException, OSError) as e:
        raise UsageError(f"{path}: cannot read it after row {row} ({_why(e)})") from None


def _jsonl_text(path: pathlib.Path, n: int, line: bytes, key: str) -> str | None:
    """The text of line `n` of a .jsonl file (None for a blank line), or a UsageError naming the
    line: not UTF-8, not JSON, not an object, no `key`, or a `key` that is not a string."""
    where = f"{path} line {n}"
    try:
        decoded = line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(
            f"{where}: not UTF-8 text (byte {e.start} is {line[e.start : e.start + 1]!r})"
        ) from None
    if not decoded.strip():
        return None
    try:
        doc = json.loads(decoded)
    except json.JSONDecodeError as e:
        raise UsageError(f"{where}: not JSON ({e.msg})") from None
    if not isinstance(doc, dict) or key not in doc:
        raise UsageError(f"{where}: no text under --text-key {key!r} ({decoded[:60]!r})")
    if not isinstance(doc[key], str):
        raise UsageError(
            f"{where}: --text-key {key!r} is {json.dumps(doc[key])[:40]}, not a string; drop the "
            "line or give it a text"
        )
    return doc[key]


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
        UsageError: a document without text (a null in `column`; a .jsonl line without `key`,
            or with a null or another non-string under it), or a .jsonl line that is not UTF-8
            or not JSON, each named by its file and row or line; a parquet or Arrow file that is
            not one, or whose `column` is missing or holds no strings (as `find` checks).
    """
    path = pathlib.Path(path)
    if path.suffix == ".txt":
        yield from ((piece, False) for piece in text.stream_files([path]))
        yield "", True
    elif path.suffix == ".jsonl":
        with open(path, "rb") as f:
            for n, line in enumerate(f, 1):
                doc = _jsonl_text(path, n, line, key)
                if doc is not None:
                    yield doc, True
    else:  # .parquet, or .arrow: the Arrow stream files of a datasets folder
        yield from _rows(path, column)


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
    """Hold an exclusive lock on the file `path`: the first process in does the work, the others
    wait. The lock file is removed when the work ends, and the folders made for it too when the
    work fails (a refused corpus leaves nothing in the cache)."""
    made = [folder for folder in path.parents if not folder.exists()]  # the deepest first
    try:
        with _lock_file(path):
            yield
    except BaseException:
        for folder in made:
            with contextlib.suppress(OSError):  # one that holds another run's files stays
                folder.rmdir()
        raise


@contextlib.contextmanager
def _lock_file(path: pathlib.Path):
    """Lock `path`, made if missing, and remove it on release. A process that waited on a file
    its holder then removed holds a lock nobody else sees: it notices (the name no longer leads
    to the file it locked) and locks the file now there."""
    while True:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                break
        except FileNotFoundError:  # removed by the process that held it
            pass
        os.close(fd)
    try:
        yield
    finally:
        path.unlink(missing_ok=True)  # while locked: a process waiting on it will look again
        os.close(fd)


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
        UsageError: the loaded tokenizer has no end-of-text token or its files are broken, or
            the sample meets a document without text (`pieces`).
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

    Raises:
        UsageError: a document without text, or a file that cannot be read (`pieces`); nothing
            is left in `cache` then.
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
