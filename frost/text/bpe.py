"""Byte-level BPE: train a tokenizer, encode text to ids and decode ids to text.

```python
tok = train(kjv_text(), vocab_size=4096, special_tokens=["<|endoftext|>"])
ids = tok.encode("In the beginning")       # [1066, 262, 3011] (say)
tok.decode(ids)                            # 'In the beginning'
```

Byte-pair encoding (Sennrich et al., 2016, "Neural Machine Translation of Rare Words with Subword
Units") starts from single symbols and repeatedly merges the most frequent adjacent pair into a new
token. Byte-level BPE (Radford et al., 2019, "Language Models are Unsupervised Multitask Learners",
GPT-2) starts from the 256 bytes instead of characters: every byte is a base token (ids 0-255), so
any string encodes and nothing is unknown. Text is first split into chunks by a pre-tokenisation
regex (default: the GPT-4 pattern); merges never cross a chunk boundary. Merged tokens get ids 256,
257, ... in the order they were learned; special tokens come last.

Training counts the distinct chunks once (memory grows with the number of distinct chunks, not the
corpus size), then runs the numba merge loop in `merge.py`, whose docstring gives the tie rule.
Work on large inputs (counting, `encode_batch`) is spread over worker processes in ~1 MB batches.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import heapq
import os
import re
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, wait
from itertools import chain, islice
from multiprocessing import get_context
from typing import TYPE_CHECKING, Any

import numpy as np
import regex

from frost.config import UsageError

if TYPE_CHECKING:
    from tqdm import tqdm

GPT4_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}|"""
    r""" ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"""
)
BATCH_CHARS = 1 << 20  # text per worker task
_WS = r"\t\n\v\f\r "  # what the regex module's \s matches among ASCII characters
# GPT4_PATTERN restricted to ASCII text, for the stdlib `re` engine (about twice as fast on it)
_GPT4_ASCII = re.compile(
    rf"""'(?i:[sdmt]|ll|ve|re)|[^\r\nA-Za-z0-9]?+[A-Za-z]+|[0-9]{{1,3}}|"""
    rf""" ?[^{_WS}A-Za-z0-9]++[\r\n]*|"""
    rf"""[{_WS}]*[\r\n]|[{_WS}]+(?![^{_WS}])|[{_WS}]+"""
)


@functools.lru_cache(maxsize=8)
def _compile(pattern: str):
    """The pre-tokenisation regex, refused (UsageError) if it is broken or matches the empty string
    (then it would split text into single characters, and no merge would ever apply)."""
    try:
        pat = regex.compile(pattern)
    except regex.error as e:
        raise UsageError(f"pattern {pattern!r} is not a valid regex: {e}") from None
    if pat.match("") is not None:
        raise UsageError(
            f"pattern {pattern!r} matches the empty string; every match must hold a character"
        )
    return pat


def split_chunks(pattern: str, text: str) -> list[str]:
    """Pre-tokenise: the regex matches, plus any text between them as chunks of its own (as HF's
    "isolated" Split does), so no character is ever dropped.

    ```python
    split_chunks(GPT4_PATTERN, "Hello world!!")  # ['Hello', ' world', '!!']
    ```

    Arguments:
        pattern: the pre-tokenisation regex (the `regex` module's syntax), such as GPT4_PATTERN.
        text: the text to split.

    Returns:
        The chunks, in order; they join back into `text`.

    Raises:
        UsageError: the pattern is not a valid regex, or matches the empty string.
    """
    pat = _GPT4_ASCII if pattern == GPT4_PATTERN and text.isascii() else _compile(pattern)
    chunks = pat.findall(text)
    # the matches cover the text: always for GPT-4's pattern (some branch matches any character),
    # else check
    if pattern == GPT4_PATTERN or sum(map(len, chunks)) == len(text):
        return chunks
    out = []
    pos = 0
    for m in pat.finditer(text):
        out += [text[pos : m.start()], m.group()]
        pos = m.end()
    return [c for c in out + [text[pos:]] if c]


# A newline followed by a non-space character: no chunk of the GPT-4 or GPT-2 pattern spans it, so
# a long text cut there encodes exactly as the whole. (re's \S excludes all of str.isspace, a
# superset of the regex module's \s, so the test is conservative.)
_CUT = re.compile(r"\n(?=\S)")


def _pieces(texts: Iterable[str] | str, size: int = BATCH_CHARS) -> Iterator[str]:
    """Each text, long ones cut at the first safe point after every `size` characters."""
    for text in [texts] if isinstance(texts, str) else texts:
        start = 0
        while m := _CUT.search(text, start + size):
            yield text[start : m.end()]
            start = m.end()
        yield text[start:] if start else text


def _batches(texts: Iterable[str], size: int = BATCH_CHARS) -> Iterator[list[str]]:
    """Group texts into lists of about `size` characters in all."""
    batch, n = [], 0
    for text in texts:
        batch.append(text)
        n += len(text)
        if n >= size:
            yield batch
            batch, n = [], 0
    if batch:
        yield batch


def stream_files(paths: Iterable[str | os.PathLike], size: int = BATCH_CHARS) -> Iterator[str]:
    """Read UTF-8 files lazily, one file at a time, in pieces of about `size` characters cut at safe
    points, so `train(stream_files(paths), ...)` handles corpora larger than memory.

    A piece ends at a newline followed by a non-space character, where no chunk of the GPT-4 or
    GPT-2 pattern can span, so the pieces encode exactly as the whole file would.

    Arguments:
        paths: the UTF-8 text files, read in order.
        size: about how many characters each piece holds (a piece runs on to the next safe cut).

    Yields:
        The files' text in pieces (str); a piece never spans two files.

    Raises:
        UsageError: a file cannot be read, or is not UTF-8.
    """
    for path in paths:
        try:
            with open(path, encoding="utf-8", newline="") as f:
                rest = ""
                while block := f.read(size):
                    # every piece but the last ends at a safe point; the last is read on with the
                    # next block
                    *pieces, rest = _pieces(rest + block, size)
                    yield from pieces
        except UnicodeDecodeError as e:
            raise UsageError(f"{path}: not UTF-8 text ({e.reason}); is it a binary file?") from None
        except OSError as e:
            raise UsageError(f"{path}: {e.strerror or e}") from None
        if rest:
            yield rest


def parallel_map(
    fn: Callable[[Any], Any],
    items: Iterable[Any],
    workers: int | None = None,
    init: Callable[..., None] | None = None,
    initargs: tuple = (),
    local: Callable[[Any], Any] | None = None,
    started: Callable[[], None] = lambda: None,
) -> Iterator[Any]:
    """`map(fn, items)` in order, in worker processes, with at most two tasks per worker in flight,
    so a lazy input is read only as fast as it is used.

    Arguments:
        fn: the function, picklable (defined at module level).
        items: its inputs, read lazily.
        workers: processes (None: all cores, at most 64). A single item, or workers=1, runs here.
        init: called as `init(*initargs)` in each worker when it starts, or None.
        initargs: init's arguments.
        local: what to call instead of `fn` when running here (`fn` may need init's state).
        started: called once the workers exist (a thread started from it cannot make forking
            them unsafe).

    Yields:
        fn(item) for each item, in order.

    Raises:
        UsageError: workers < 1.
    """
    if workers is not None and workers < 1:
        raise UsageError(f"workers={workers}: must be at least 1")
    items = iter(items)
    head = list(islice(items, 2))
    workers = min(workers or os.cpu_count() or 1, 64)
    if len(head) < 2 or workers == 1:
        started()
        yield from map(local or fn, chain(head, items))
        return
    with ProcessPoolExecutor(workers, _mp_context(), initializer=init, initargs=initargs) as ex:
        # with fork, the first submit starts every worker
        pending = [ex.submit(fn, x) for x in head]
        started()
        for x in items:
            if len(pending) >= 2 * workers:
                yield pending.pop(0).result()
            pending.append(ex.submit(fn, x))
        for fut in pending:
            yield fut.result()


def _mp_context():
    """fork (fast, and no `if __name__ == "__main__"` needed) while this process runs one thread and
    has not loaded JAX, whose threads make fork unsafe; else forkserver (which re-imports __main__,
    so scripts need the guard)."""
    if os.name == "posix" and threading.active_count() == 1 and "jax" not in sys.modules:
        return get_context("fork")
    return get_context("forkserver" if os.name == "posix" else "spawn")


def _count_batch(pattern: str, texts: list[str]) -> tuple[Counter, int]:
    chunks = chain.from_iterable(split_chunks(pattern, text) for text in texts)
    return Counter(chunks), sum(map(len, texts))


def count_chunks(
    texts: Iterable[str] | str,
    pattern: str = GPT4_PATTERN,
    workers: int | None = None,
    progress: tqdm | None = None,
    started: Callable[[], None] = lambda: None,
) -> Counter:
    """How often each pre-token chunk occurs, counted in worker processes on ~1 MB batches.

    ```python
    count_chunks(" the cat, the hat")  # Counter({' the': 2, ' cat': 1, ',': 1, ' hat': 1})
    ```

    Arguments:
        texts: a string, or an iterable of strings (documents), read lazily.
        pattern: the pre-tokenisation regex.
        workers: processes to count in (None: all cores).
        progress: a tqdm bar to advance by the characters read, or None.
        started: called once the worker processes exist (see `parallel_map`).

    Returns:
        A Counter {chunk: occurrences}, the input of `train_counts`.
    """
    total = Counter()
    count = functools.partial(_count_batch, pattern)
    for counts, n_chars in parallel_map(count, _batches(_pieces(texts)), workers, started=started):
        total.update(counts)
        if progress is not None:
            progress.update(n_chars)
    return total


def train(
    texts: Iterable[str] | str,
    vocab_size: int,
    *,
    pattern: str = GPT4_PATTERN,
    special_tokens: Iterable[str] = (),
    workers: int | None = None,
    progress: bool = False,
) -> Tokenizer:
    """Train a byte-level BPE tokenizer with `vocab_size` tokens in all (256 bytes, the merges, then
    the special tokens).

    BPE as Sennrich et al. (2016) learn it, on bytes as GPT-2 does (Radford et al., 2019): count
    the pre-token chunks, then repeatedly merge the most frequent adjacent pair of tokens within
    the chunks (ties as `merge.py` says). Texts over ~1 MB are cut after a newline that precedes a
    non-space character, which changes nothing for the GPT-4 and GPT-2 patterns; a custom pattern
    whose matches span such a point would see the cut. numba loads (or, on a first run, compiles)
    the merge loop in a thread while the worker processes count.

    ```python
    tok = train(stream_files(["a.txt", "b.txt"]), 16384, special_tokens=["<|endoftext|>"])
    ```

    Arguments:
        texts: a string, or an iterable of strings (documents), read lazily; see `stream_files`
            for files.
        vocab_size: tokens in all: 256 bytes + merges + special tokens.
        pattern: the pre-tokenisation regex; merges never cross a chunk it makes.
        special_tokens: strings given their own ids after the merges (duplicates dropped).
        workers: processes that count the chunks (None: all cores).
        progress: show tqdm bars while counting and merging.

    Returns:
        The trained `Tokenizer`. It may hold fewer tokens than `vocab_size` when the text runs
        out of pairs to merge.

    Raises:
        UsageError: a broken or empty-matching pattern, an empty special token, or a vocab_size
            below 256 + the special tokens.
    """
    # refuse mistakes before reading anything
    _compile(pattern)
    _n_tokens(vocab_size, special_tokens)
    loading = threading.Thread(target=_load_merge_loop, daemon=True)
    with _bar(progress, "counting", "char") as bar:
        counts = count_chunks(texts, pattern, workers, bar, started=loading.start)
    loading.join()
    return train_counts(
        counts, vocab_size, pattern=pattern, special_tokens=special_tokens, progress=progress
    )


def _load_merge_loop():
    """Import numba and compile or load the merge loop, by merging one tiny word (an error shows
    again when train_counts runs the loop)."""
    with contextlib.suppress(Exception):
        from .merge import merge_loop

        word = np.array([97, 98], np.int32)  # "ab", once
        merge_loop(word, np.array([0, 2]), np.ones(1, np.int64), 257, np.zeros(1, np.int64))


def train_counts(
    counts: dict[str, int],
    vocab_size: int,
    *,
    pattern: str = GPT4_PATTERN,
    special_tokens: Iterable[str] = (),
    progress: bool = False,
) -> Tokenizer:
    """Train a byte-level BPE tokenizer from chunk counts instead of text (see `train`).

    Arguments:
        counts: {chunk: occurrences}, as `count_chunks` returns; counts are non-negative and fit
            int64.
        vocab_size: tokens in all: 256 bytes + merges + special tokens.
        pattern: the pre-tokenisation regex the chunks were split with (kept in the tokenizer).
        special_tokens: strings given their own ids after the merges (duplicates dropped).
        progress: show a tqdm bar while merging.

    Returns:
        The trained `Tokenizer`.

    Raises:
        UsageError: a negative count, an empty special token, or too small a vocab_size.
    """
    from .merge import merge_loop  # numba loads only when training

    special_tokens, n_tokens = _n_tokens(vocab_size, special_tokens)
    words = [w.encode("utf-8") for w in counts]
    keep = [i for i, w in enumerate(words) if len(w) > 1]  # a single byte has no pairs
    sym = np.frombuffer(b"".join(words[i] for i in keep), np.uint8).astype(np.int32)
    starts = np.cumsum([0] + [len(words[i]) for i in keep], dtype=np.int64)
    wcount = np.fromiter(counts.values(), np.int64, len(words))[keep]
    if np.any(wcount < 0):
        raise UsageError("chunk counts must be non-negative")
    done = np.zeros(1, np.int64)
    with (
        ThreadPoolExecutor(1) as pool,
        _bar(progress, "merging", "tok", total=n_tokens - 256) as bar,
    ):
        # it releases the GIL
        merging = pool.submit(merge_loop, sym, starts, wcount, n_tokens, done)
        while bar is not None and not merging.done():  # this thread moves the bar
            wait([merging], 0.1)
            bar.update(max(0, int(done[0]) - 256 - bar.n))
    merges = merging.result()
    n_made = int(merges[:, 2].max(initial=255)) + 1
    special = {s: n_made + i for i, s in enumerate(special_tokens)}
    return Tokenizer([tuple(m) for m in merges.tolist()], special, pattern)


def _n_tokens(vocab_size: int, special_tokens: Iterable[str]) -> tuple[list[str], int]:
    """The special tokens (duplicates dropped) and the number of other tokens; UsageError if too
    few."""
    special = list(dict.fromkeys(special_tokens))
    if "" in special or vocab_size < 256 + len(special):
        raise UsageError(
            f"vocab_size={vocab_size}, special tokens {special}: special tokens must be non-empty, "
            f"and the vocabulary needs the 256 bytes and them: use at least {256 + len(special)}"
        )
    return special, vocab_size - len(special)


def _bar(on: bool, desc: str, unit: str, total=None):
    """A tqdm progress bar to use in `with`, erased when done, or (off) a context that yields
    None."""
    if not on:
        return contextlib.nullcontext()
    from tqdm import tqdm

    class Bar(tqdm):
        # no monitor thread: a thread makes forking the workers unsafe (so slow)
        monitor_interval = 0

    # the last line: the result, or the error
    return Bar(total=total, desc=desc, unit=unit, unit_scale=True, leave=False)


class _Cache(dict):
    """chunk -> token ids; a miss runs BPE and is kept while the cache holds < `limit` chunks, so
    the frequent ones (which come early, by Zipf's law) stay and memory stays bounded."""

    def __init__(self, bpe, limit: int):
        super().__init__()
        self.bpe = bpe
        self.limit = limit

    def __missing__(self, chunk: str) -> tuple[int, ...]:
        ids = self.bpe(chunk)
        if len(self) < self.limit:
            self[chunk] = ids
        return ids


class Tokenizer:
    """A trained byte-level BPE tokenizer (Sennrich et al., 2016; on bytes, as GPT-2's, Radford et
    al., 2019). Build one with `train` or `load`.

    Encoding splits text into chunks with `pattern`, then applies the merges within each chunk,
    the one learned first wherever it applies, as HF tokenizers and tiktoken do. Long chunks (the
    GPT-4 pattern does not cap a run of letters) are neither capped nor split: each is encoded by
    the same rule in O(n log n) time, so the ids equal HF tokenizers' at any length (tested on a
    60k-letter chunk; 40k letters take ~0.1 s, 1 MB ~2.5 s).

    ```python
    tok = Tokenizer([(116, 104, 256), (256, 101, 257)])  # t+h -> 256, th+e -> 257
    tok.encode(" the")                                   # [32, 257]
    ```

    Arguments:
        merges: (left id, right id, new id) triples in the order learned; new ids are 256, 257,
            ... (a merge may reuse an earlier id whose bytes it makes).
        special: {text: id} of the special tokens, numbered right after the merged tokens.
        pattern: the pre-tokenisation regex.
        cache_size: how many distinct chunks' ids to keep (the frequent ones, seen first).

    Raises:
        ValueError: a merge names an id that does not exist yet or makes other bytes than its
            id's, or the special ids are not the ones right after the merges.
    """

    def __init__(
        self,
        merges: list[tuple[int, int, int]],
        special: dict[str, int] | None = None,
        pattern: str = GPT4_PATTERN,
        cache_size: int = 1 << 18,
    ):
        self.merges = [tuple(m) for m in merges]
        self.special = dict(special or {})
        self.pattern = pattern
        self.vocab = [bytes([i]) for i in range(256)]  # id -> bytes
        for a, b, c in self.merges:
            n = len(self.vocab)
            if not (0 <= a < n and 0 <= b < n and 0 <= c <= n):
                raise ValueError(
                    f"merge {(a, b, c)} refers to an id that does not exist yet (have {n})"
                )
            made = self.vocab[a] + self.vocab[b]
            if c == n:
                self.vocab.append(made)
            elif self.vocab[c] != made:
                raise ValueError(f"merge {(a, b, c)}: token {c} is {self.vocab[c]!r}, not {made!r}")
        n = len(self.vocab)
        if sorted(self.special.values()) != list(range(n, n + len(self.special))):
            raise ValueError(
                f"special token ids must be {n}..{n + len(self.special) - 1}, got {self.special}"
            )
        self._ranks = {(a, b): r for r, (a, b, _) in enumerate(self.merges)}
        self._pat = _compile(pattern)
        self._special_re = None
        if self.special:
            longest_first = sorted(self.special, key=len, reverse=True)
            self._special_re = regex.compile("(" + "|".join(map(regex.escape, longest_first)) + ")")
        self._cache = _Cache(self._bpe, cache_size)
        specials = sorted(self.special, key=self.special.get)
        self._decode = self.vocab + [s.encode("utf-8") for s in specials]

    @property
    def vocab_size(self) -> int:
        """Tokens in all: the 256 bytes, the merged tokens and the special tokens."""
        return len(self._decode)

    def __repr__(self):
        return (
            f"Tokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)}, "
            f"special={list(self.special)})"
        )

    def _bpe(self, chunk: str) -> tuple[int, ...]:
        """BPE of one chunk: merge the adjacent pair learned first (lowest rank), leftmost first,
        until no learned pair is left; a heap of (rank, position) makes it O(n log n), as HF's.
        ' the' -> [32, 116, 104, 101] -> [32, 256, 101] (t,h) -> [32, 257] (th,e)
        -> [258] ( ,the)"""
        ids = list(chunk.encode("utf-8"))  # ids[i] is None once merged into the token on its left
        n = len(ids)
        get = self._ranks.get
        # neighbours still there (left[n]: unused)
        left = list(range(-1, n))
        right = list(range(1, n + 1))
        heap = [(r, i) for i in range(n - 1) if (r := get((ids[i], ids[i + 1]))) is not None]
        heapq.heapify(heap)
        while heap:
            r, i = heapq.heappop(heap)
            j = right[i]
            if ids[i] is None or j == n or get((ids[i], ids[j])) != r:  # stale: the pair changed
                continue
            ids[i] = self.merges[r][2]  # the merged token, in the left one's place
            ids[j] = None
            right[i] = right[j]
            left[right[i]] = i
            for x, y in ((left[i], i), (i, right[i])):
                if x >= 0 and y < n and (q := get((ids[x], ids[y]))) is not None:
                    heapq.heappush(heap, (q, x))
        return tuple(x for x in ids if x is not None)

    def encode_ordinary(self, text: str) -> list[int]:
        """Encode text, treating special-token strings as plain text.

        Arguments:
            text: the text.

        Returns:
            The token ids.
        """
        chunks = split_chunks(self.pattern, text)
        return list(chain.from_iterable(map(self._cache.__getitem__, chunks)))

    def encode(self, text: str, *, special: str = "refuse") -> list[int]:
        """Text -> ids.

        Arguments:
            text: the text.
            special: what a special-token string in the text means: "refuse" raises UsageError,
                "allow" encodes it as its special id, "text" as plain text.

        Returns:
            The token ids.
        """
        if special not in ("refuse", "allow", "text"):
            raise UsageError(f"special must be 'refuse', 'allow' or 'text', not {special!r}")
        parts = [text]
        if self._special_re is not None and special != "text":
            parts = self._special_re.split(text)
        # parts: [text, special, text, special, ..., text]
        if special == "refuse" and len(parts) > 1:
            raise UsageError(
                f"text contains the special token {parts[1]!r} at {len(parts[0])}; pass "
                "special='allow' to encode it as a special token or 'text' as plain text"
            )
        ids = []
        for k, part in enumerate(parts):
            ids += [self.special[part]] if k % 2 else self.encode_ordinary(part)
        return ids

    def encode_iter(
        self, texts: Iterable[str], *, special: str = "refuse", workers: int | None = None
    ) -> Iterator[list[int]]:
        """Lazily encode many texts, in order, in `workers` processes.

        Arguments:
            texts: the texts, read lazily in ~1 MB batches.
            special: as in `encode`.
            workers: processes (None: all cores; 1: this process).

        Yields:
            The ids of each text (a list of ints), in order.
        """
        for flat, lengths in self.encode_flat(_batches(texts), special=special, workers=workers):
            ids = flat.tolist()
            pos = 0
            for n in lengths.tolist():
                yield ids[pos : pos + n]
                pos += n

    def encode_flat(
        self, batches: Iterable[list[str]], *, special: str = "refuse", workers: int | None = None
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Lazily encode lists of texts, in order, in `workers` processes, as flat arrays (which
        cross process boundaries ~10x faster than lists).

        Arguments:
            batches: lists of texts; each list is one task for a worker (about 1 MB of text
                keeps them busy).
            special: as in `encode`.
            workers: processes (None: all cores; 1: this process).

        Returns:
            An iterator of (ids (n,) int64: the ids of the list's texts one after another,
            lengths (texts,) int64: how many ids each text has), one per list, in order.
        """
        encode = functools.partial(_encode_batch, special)
        state = (self.merges, self.special, self.pattern)
        here = lambda texts: _flat([self.encode(t, special=special) for t in texts])  # noqa: E731
        return parallel_map(encode, batches, workers, _set_worker_tokenizer, (state,), here)

    def encode_batch(
        self, texts: Iterable[str], *, special: str = "refuse", workers: int | None = None
    ) -> list[list[int]]:
        """[encode(t) for t in texts], spread over `workers` processes.

        Arguments:
            texts: the texts.
            special: as in `encode`.
            workers: processes (None: all cores; 1: this process).

        Returns:
            The ids of each text, in order.
        """
        enabled = gc.isenabled()
        gc.disable()  # a million new ints in lists would otherwise set off many full GC passes
        try:
            return list(self.encode_iter(texts, special=special, workers=workers))
        finally:
            if enabled:
                gc.enable()

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """Ids -> the bytes they stand for (special tokens as their UTF-8 text).

        Arguments:
            ids: token ids, each in range(vocab_size).

        Returns:
            The bytes.

        Raises:
            UsageError: an id is out of range.
        """
        ids = list(ids)
        if ids and not 0 <= min(ids) <= max(ids) < len(self._decode):
            raise UsageError(
                f"token ids {min(ids)}..{max(ids)} are out of range: this tokenizer's are "
                f"0..{len(self._decode) - 1}"
            )
        return b"".join(map(self._decode.__getitem__, ids))

    def decode(self, ids: Iterable[int], errors: str = "replace") -> str:
        """Ids -> text.

        Arguments:
            ids: token ids, each in range(vocab_size).
            errors: how to decode bytes that are not whole UTF-8 characters (a sequence cut
                inside a character), as `bytes.decode` takes it: "replace", "strict", ...

        Returns:
            The text.
        """
        return self.decode_bytes(ids).decode("utf-8", errors=errors)


_worker_tokenizer: Tokenizer | None = None


def _set_worker_tokenizer(state):
    global _worker_tokenizer
    _worker_tokenizer = Tokenizer(*state)


def _encode_batch(special: str, texts: list[str]):
    return _flat([_worker_tokenizer.encode(t, special=special) for t in texts])


def _flat(lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Id lists as (all ids, lengths): arrays cross process boundaries ~10x faster than lists."""
    lengths = np.fromiter(map(len, lists), np.int64, len(lists))
    return np.fromiter(chain.from_iterable(lists), np.int64, int(lengths.sum())), lengths
