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

Data structures (all int64 unless said):
    P[p] = (key, count, head, stamp)   one row per pair ever seen; key = left << 32 | right
    E[e] = (word, next)                linked lists of the words that hold pair p (from P[p].head);
                                       may hold stale words, which are skipped when merged
    heap of (-count, key)              lazy: a popped entry whose count is out of date is re-pushed
"""
import heapq

import numba as nb
import numpy as np
from numba import types
from numba.typed import Dict, List

KEY, COUNT, HEAD, STAMP = 0, 1, 2, 3


@nb.njit(cache=True)
def _grown(a, n):
    """`a` if it has room for row n, else a copy with twice the rows."""
    if n < a.shape[0]:
        return a
    b = np.empty((2 * a.shape[0], a.shape[1]), a.dtype)
    b[: a.shape[0]] = a
    return b


@nb.njit(cache=True)
def _bump(P, E, size, pidx, key, f, w):
    """Add f to pair `key` (creating it) and note that word w holds it. Returns (P, E, p).

    size = [number of pairs, number of list entries]."""
    p = pidx.setdefault(key, size[0])
    if p == size[0]:  # a new pair
        P = _grown(P, p)
        P[p, KEY], P[p, COUNT], P[p, HEAD], P[p, STAMP] = key, 0, -1, -1
        size[0] += 1
    P[p, COUNT] += f
    h = P[p, HEAD]
    if h < 0 or E[h, 0] != w:  # one word is processed at a time, so a repeat is the list head
        e = size[1]
        E = _grown(E, e)
        E[e, 0], E[e, 1] = w, h
        P[p, HEAD] = e
        size[1] += 1
    return P, E, p


@nb.njit(cache=True)
def _fnv(data):
    h = np.uint64(14695981039346656037)
    for x in data:
        h = (h ^ np.uint64(x)) * np.uint64(1099511628211)
    return h


@nb.njit(cache=True, nogil=True)
def merge_loop(sym, starts, wcount, n_tokens, progress):
    """Merge until there are `n_tokens` tokens (bytes included) or no pair is left.

    sym: int32 (S,) byte ids of all words, rewritten in place; starts: int64 (W + 1,) word offsets;
    wcount: int64 (W,) occurrences; progress: int64 (1,) set to the number of tokens made so far,
    readable from another thread. Returns int64 (M, 3) merges as rows (left, right, new id).
    """
    W = wcount.shape[0]
    wlen = starts[1:] - starts[:-1]
    P = np.empty((max(16, 2 * sym.shape[0]), 4), np.int64)
    E = np.empty((max(16, 2 * sym.shape[0]), 2), np.int64)
    size = np.zeros(2, np.int64)
    pidx = Dict.empty(types.int64, types.int64)
    for w in range(W):
        for i in range(starts[w], starts[w] + wlen[w] - 1):
            P, E, p = _bump(P, E, size, pidx, (np.int64(sym[i]) << 32) | sym[i + 1], wcount[w], w)

    toks = List()  # bytes of every token, to find merges that yield an existing token
    same = List()  # next token with the same hash
    for i in range(256):
        toks.append(np.array([i], np.uint8))
        same.append(-1)
    byhash = Dict.empty(types.uint64, types.int64)
    out = np.empty((max(16, n_tokens - 256), 3), np.int64)
    heap = [(-P[p, COUNT], P[p, KEY]) for p in range(size[0])]
    heapq.heapify(heap)
    touched = np.empty(16, np.int64)
    m = 0
    while len(toks) < n_tokens and len(heap) > 0:
        negc, key = heapq.heappop(heap)
        p = pidx[key]
        if -negc != P[p, COUNT]:  # stale entry: counts only fall, so re-push the true count
            if P[p, COUNT] > 0:
                heapq.heappush(heap, (-P[p, COUNT], key))
            continue
        a, b = key >> 32, key & 0xFFFFFFFF
        new = np.concatenate((toks[a], toks[b]))
        h = _fnv(new)
        c = byhash[h] if h in byhash else -1
        while c >= 0 and not (toks[c].shape[0] == new.shape[0] and (toks[c] == new).all()):
            c = same[c]
        if c < 0:
            c = len(toks)
            toks.append(new)
            same.append(byhash[h] if h in byhash else -1)
            byhash[h] = c
        out = _grown(out, m)
        out[m, 0], out[m, 1], out[m, 2] = a, b, c
        m += 1
        nt = 0
        e = P[p, HEAD]
        while e >= 0:
            w, e = E[e, 0], E[e, 1]
            f, s = wcount[w], starts[w]
            end = s + wlen[w]
            i = j = s  # read position, write position
            while i < end:
                if i + 1 < end and sym[i] == a and sym[i + 1] == b:
                    for side in range(2):
                        if side == 0 and j > s:  # (x, a) -> (x, c)
                            x = np.int64(sym[j - 1])
                            P[pidx[(x << 32) | a], COUNT] -= f
                            P, E, q = _bump(P, E, size, pidx, (x << 32) | c, f, w)
                        elif side == 1 and i + 2 < end:  # (b, y) -> (c, y)
                            y = np.int64(sym[i + 2])
                            P[pidx[(b << 32) | y], COUNT] -= f
                            P, E, q = _bump(P, E, size, pidx, (c << 32) | y, f, w)
                        else:
                            continue
                        if P[q, STAMP] != m:
                            P[q, STAMP] = m
                            if nt == touched.shape[0]:
                                touched = np.concatenate((touched, touched))
                            touched[nt] = q
                            nt += 1
                    sym[j] = c
                    i += 2
                else:
                    sym[j] = sym[i]
                    i += 1
                j += 1
            wlen[w] = j - s
        P[p, COUNT] = 0
        for k in range(nt):
            q = touched[k]
            if P[q, COUNT] > 0:
                heapq.heappush(heap, (-P[q, COUNT], P[q, KEY]))
        progress[0] = len(toks)
    return out[:m].copy()
