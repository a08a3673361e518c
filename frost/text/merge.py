"""The BPE merge loop, compiled with numba: incremental pair counts and a max-heap.

Input: the distinct pre-token chunks ("words"), each a run of byte ids in one flat array, and how
often each occurred. Pairs are counted once; each merge then touches only the words that hold the
merged pair and updates the counts of the pairs around each occurrence. Example, word `abab`
(count 5), merge (a, b) -> X:

    before: {(a,b): 10, (b,a): 5}      after: {(X,X): 5}   changes: (b,a) -5, (X,X) +5

Tie rule (documented, deterministic): the pair with the highest count is merged first; among equal
counts, the smallest (left id, right id) pair. Nothing depends on hash or dict order: the heap
orders entries by (-count, left << 32 | right).

If a merge yields bytes that already are a token (for example (ab, c) after (a, bc) made "abc"),
the existing id is reused, as HF `tokenizers` does, so every token's bytes are unique.

Compiling is part of a first run's time, so the compiled code is scalar loops over int64 arrays
that `merge_loop` allocates in Python: no numba containers, array expressions or allocation
inside (a typed Dict, heapq on a list or one 2-D slice copy each cost numba seconds to compile).
The arrays are sized for the worst case; np.empty only reserves address space, so memory grows
with the rows used. All int64; p, e, t index rows:

    P[p] = (key, count, head, stamp)  pairs ever seen; key = left << 32 | right; table: key -> p
    E[e] = (word, next)               linked lists of the words that hold pair p (from P[p].head);
                                      may hold stale words, which are skipped when merged
    H[:n] = (count, key)              lazy max-heap: a popped entry whose count is out of date is
                                      re-pushed
    T[t] = (hash, same, pos, len, pow)  token t: a polynomial hash of its bytes (byhash: hash ->
                                      the newest token with it, `same` the one before), its bytes
                                      at orig[pos:pos + len] (each symbol's byte offset is kept
                                      in `pos`)
"""

import warnings

import numba as nb
import numpy as np

KEY, COUNT, HEAD, STAMP = 0, 1, 2, 3  # columns of P
HASH, SAME, POS, LEN, POW = 0, 1, 2, 3, 4  # columns of T
MIX = -7046029254386353131  # 0x9E3779B97F4A7C15 as an int64: Fibonacci hashing


def _jit(fn):
    """numba.njit with the on-disk cache (NUMBA_CACHE_DIR, else __pycache__ beside this file, else
    ~/.cache/numba), so only the first run compiles; where none is writable, compile every run, and
    say so."""
    try:
        return nb.njit(cache=True, nogil=True)(fn)
    except RuntimeError:  # numba: "cannot cache function ...: no locator available"
        warnings.warn(
            "frost.text: numba has no writable cache folder, so the BPE merge loop is compiled on "
            "every run (seconds); set NUMBA_CACHE_DIR to a writable folder",
            stacklevel=2,
        )
        return nb.njit(nogil=True)(fn)


@_jit
def _slot(table, rows, key):
    """The slot of the open-addressing `table` (row ids of `rows`, -1: empty) that holds the row
    whose column 0 is `key`, else the empty slot where it goes."""
    mask = table.shape[0] - 1
    i = ((key * MIX) >> 32) & mask
    while table[i] >= 0 and rows[table[i], 0] != key:
        i = (i + 1) & mask
    return i


@_jit
def _sift(H, n, i, count, key):
    """Put (count, key) at row i of the heap H[:n] (top: the highest count, then the smallest key),
    moving it up past lesser parents, then down past greater children. Push: i = n - 1; pop: i =
    0."""
    while i > 0 and (
        H[(i - 1) >> 1, 0] < count or (H[(i - 1) >> 1, 0] == count and H[(i - 1) >> 1, 1] > key)
    ):
        H[i, 0], H[i, 1] = H[(i - 1) >> 1, 0], H[(i - 1) >> 1, 1]
        i = (i - 1) >> 1
    while 2 * i + 1 < n:
        c = 2 * i + 1  # the greater child
        c += c + 1 < n and (
            H[c + 1, 0] > H[c, 0] or (H[c + 1, 0] == H[c, 0] and H[c + 1, 1] < H[c, 1])
        )
        if count > H[c, 0] or (count == H[c, 0] and key < H[c, 1]):
            break
        H[i, 0], H[i, 1] = H[c, 0], H[c, 1]
        i = c
    H[i, 0], H[i, 1] = count, key


@_jit
def _bump(P, E, table, size, key, f, w):
    """Add f to pair `key` (creating it) and note that word w holds it; returns its row p.
    size = [rows of P used, rows of E used]."""
    s = _slot(table, P, key)
    if table[s] < 0:  # a new pair
        table[s] = size[0]
        P[size[0], KEY], P[size[0], COUNT], P[size[0], HEAD], P[size[0], STAMP] = key, 0, -1, -1
        size[0] += 1
    p = table[s]
    P[p, COUNT] += f
    # one word is processed at a time, so a repeat is the head
    if P[p, HEAD] < 0 or E[P[p, HEAD], 0] != w:
        E[size[1], 0], E[size[1], 1] = w, P[p, HEAD]
        P[p, HEAD] = size[1]
        size[1] += 1
    return p


@_jit
def _loop(
    sym, pos, orig, starts, wlen, wcount, P, E, H, T, table, byhash, size, touched, out, progress
):
    for t in range(256):  # the byte tokens; orig[S + t] is byte t
        T[t, HASH] = t + 1
        T[t, SAME] = -1
        T[t, POS] = sym.shape[0] + t
        T[t, LEN] = 1
        T[t, POW] = 257
        byhash[_slot(byhash, T, t + 1)] = t
    for w in range(wcount.shape[0]):
        for i in range(starts[w], starts[w] + wlen[w] - 1):
            _bump(P, E, table, size, (np.int64(sym[i]) << 32) | sym[i + 1], wcount[w], w)
    n = size[0]
    for p in range(n):
        _sift(H, p + 1, p, P[p, COUNT], P[p, KEY])
    m = 0  # merges made
    n_made = 256  # tokens made
    while n_made < T.shape[0] and n > 0:
        cnt, key = H[0, 0], H[0, 1]
        n -= 1
        _sift(H, n, 0, H[n, 0], H[n, 1])  # pop
        p = table[_slot(table, P, key)]
        if cnt != P[p, COUNT]:  # stale entry: counts only fall, so re-push the true count
            if P[p, COUNT] > 0:
                n += 1
                _sift(H, n, n - 1, P[p, COUNT], key)
            continue
        a, b = key >> 32, key & 0xFFFFFFFF
        la, lb = T[a, LEN], T[b, LEN]
        h = T[a, HASH] * T[b, POW] + T[b, HASH]  # the hash of bytes(a) + bytes(b), wrapping
        s = _slot(byhash, T, h)
        c = byhash[s]
        while c >= 0:  # a token with this hash: has it these bytes?
            k = 0
            while T[c, LEN] == la + lb > k and orig[T[c, POS] + k] == (
                orig[T[a, POS] + k] if k < la else orig[T[b, POS] + k - la]
            ):
                k += 1
            if k == la + lb:
                break
            c = T[c, SAME]
        if c < 0:  # new bytes: a new token, whose position is set at its first occurrence
            c = n_made
            T[c, HASH] = h
            T[c, SAME] = byhash[s]
            T[c, POS] = -1
            T[c, LEN] = la + lb
            T[c, POW] = T[a, POW] * T[b, POW]
            byhash[s] = c
            n_made += 1
        out[m, 0], out[m, 1], out[m, 2] = a, b, c
        m += 1
        nt = 0  # pairs touched
        e = P[p, HEAD]  # the list of words that hold (a, b)
        while e >= 0:
            w, e = E[e, 0], E[e, 1]
            f, s = wcount[w], starts[w]
            end = s + wlen[w]
            i = j = s  # read position, write position
            while i < end:
                if i + 1 < end and sym[i] == a and sym[i + 1] == b:
                    if T[c, POS] < 0:
                        T[c, POS] = pos[i]
                    for side in range(2):
                        if side == 0 and j > s:  # (x, a) -> (x, c)
                            old = (np.int64(sym[j - 1]) << 32) | a
                            new = (np.int64(sym[j - 1]) << 32) | c
                        elif side == 1 and i + 2 < end:  # (b, y) -> (c, y)
                            old, new = (b << 32) | sym[i + 2], (c << 32) | sym[i + 2]
                        else:
                            continue
                        P[table[_slot(table, P, old)], COUNT] -= f
                        q = _bump(P, E, table, size, new, f, w)
                        if P[q, STAMP] != m:  # push each changed pair once, with its final count
                            P[q, STAMP] = m
                            touched[nt] = q
                            nt += 1
                    sym[j], pos[j] = c, pos[i]
                    i += 2
                else:
                    sym[j], pos[j] = sym[i], pos[i]
                    i += 1
                j += 1
            wlen[w] = j - s
        P[p, COUNT] = 0
        for k in range(nt):
            if P[touched[k], COUNT] > 0:
                n += 1
                _sift(H, n, n - 1, P[touched[k], COUNT], P[touched[k], KEY])
        progress[0] = n_made
    return m


def merge_loop(
    sym: np.ndarray, starts: np.ndarray, wcount: np.ndarray, n_tokens: int, progress: np.ndarray
) -> np.ndarray:
    """Merge until there are `n_tokens` tokens (bytes included) or no pair is left.

    Arguments:
        sym: (S,) int32 byte ids of all words, one after another; rewritten in place.
        starts: (W + 1,) int64 offsets of the words in `sym`.
        wcount: (W,) int64 occurrences of each word.
        n_tokens: tokens to reach, the 256 bytes included.
        progress: (1,) int64, set to the number of tokens made so far, readable from another
            thread (the loop releases the GIL).

    Returns:
        (M, 3) int64 merges as rows (left, right, new id), in the order learned.
    """
    S = sym.shape[0]
    # pairs, list entries, heap entries: at most S initial ones + 2 per merged occurrence
    rows = 3 * S + 16
    out = np.empty((S + 16, 3), np.int64)
    m = _loop(
        sym,
        np.arange(S),  # pos
        np.concatenate([sym, np.arange(256, dtype=sym.dtype)]),  # orig: every token's bytes
        starts,
        np.diff(starts),  # wlen
        wcount,
        np.empty((rows, 4), np.int64),  # P
        np.empty((rows, 2), np.int64),  # E
        np.empty((rows, 2), np.int64),  # H
        np.empty((n_tokens, 5), np.int64),  # T
        # the hash tables, larger than what they can hold (pairs: at most `rows`), so never full
        np.full(1 << rows.bit_length(), -1, np.int64),  # table
        np.full(1 << (4 * n_tokens).bit_length(), -1, np.int64),  # byhash
        np.zeros(2, np.int64),  # size
        np.empty(rows, np.int64),  # touched
        out,
        progress,
    )
    return out[:m].copy()
