"""Flash attention in Pallas: forward and backward kernels, with a plain-jnp reference at the end.

```python
# q: (B, T, H, D); k, v: (B, S, H, D) -> o: (B, T, H, D)
o = flash_attention(q, k, v, causal=True)
# keep: (B, S) bool, True where a key may be attended
o = flash_attention(q, k, v, key_padding_mask=keep)
```

Attention is softmax(scale * q k^T) v per batch and head. Written out, it materialises a
(T, S) matrix of scores; flash attention (Dao et al. 2022, "FlashAttention: Fast and
Memory-Efficient Exact Attention with IO-Awareness") never does. Each program of the forward
kernel owns `block_q` query rows and walks over the keys `block_k` at a time, keeping a running
row maximum m, a running normaliser l (`total`) and an unnormalised output o (the online softmax):

```text
for each key block j:
    s  = scale * q k_j^T              # (block_q, block_k) scores of this key block
    m' = max(m, rowmax(s))
    a  = exp(m - m')                  # rescales what was accumulated under the old maximum
    o  = a o + exp(s - m') v_j
    l  = a l + rowsum(exp(s - m'))
    m  = m'
after the last block:
    out = o / l
    lse = m + log(l)
```

Only O(T) extra memory: the log-sum-exp `lse` of each row, saved for the backward pass. The
backward pass follows FlashAttention-2 (Dao 2023, "FlashAttention-2: Faster Attention with Better
Parallelism and Work Partitioning"): it recomputes p = exp(s - lse) tile by tile instead of
storing it, with delta = rowsum(out * dout) computed up front (cheap, in XLA), and

```text
dv = p^T dout
dp = dout v^T
ds = p * (dp - delta)
dq = scale ds k
dk = scale ds^T q
```

split into two kernels so that no two programs write the same output: `_dkdv_kernel` (one
program per key block, looping over the queries) and `_dq_kernel` (one program per query block,
looping over the keys). Exponentials are taken base 2 (exp(x) = 2^(x log2 e), `exp2` is one
instruction on a GPU), so `m` and `lse` live in log2 units inside this file.

Causal attention skips the tiles above the diagonal and builds the mask only for the tiles that
cross it: each kernel runs two loops, one over fully visible tiles without a mask and one over
the diagonal tiles with it. The causal mask is aligned top-left (query i sees keys 0..i), as in
`jax.nn.dot_product_attention(is_causal=True)`. A query row with no key to attend to (possible
with a key padding mask) returns zeros, with zero gradients.

Matrix products take the inputs' dtype (fp32, bf16, fp16) and accumulate in fp32; the softmax
statistics are fp32. On a GPU, fp32 products use TF32 (Triton's default precision, as XLA's).

Layout and lowering follow `jax/experimental/pallas/ops/gpu/attention.py` (Triton backend): grids
of (sequence block, batch, head) with `pl.BlockSpec`s that squeeze the batch and head axes,
`plgpu.load`s masked along a head dimension padded to a power of two (D = 80 runs in 128-wide
tiles; D = 64 and 128 need no mask), `lax.fori_loop` over the other sequence. Sequence lengths
are padded in the wrapper to a multiple of the block sizes and the padded keys masked, so any
length works. On CPU the kernels run in Pallas interpret mode (the tests), and the tests also
lower them through the Triton backend for "cuda" without a GPU.
"""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

LOG2E = math.log2(math.e)
# a masked score; finite, so exp2(m - m_new) is never NaN
MASK = -0.7 * float(jnp.finfo(jnp.float32).max)


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Tile sizes (rows of q, rows of k/v) of the three kernels, and Triton's launch settings.

    Each block is a power of two, at least 16 (the smallest tile a tensor-core dot takes); blocks
    larger than a (padded) sequence are shrunk to fit it. Defaults are meant for an H100/H200
    with bf16 inputs; `benchmarks/attention.py --tune` times alternatives on a GPU. A frozen
    dataclass of ints, hashable, so `flash_attention` takes it as a static argument.

    Arguments:
        block_q: forward kernel: query rows per program.
        block_k: forward kernel: key rows per loop step.
        block_q_dkv: dk/dv kernel: query rows per loop step.
        block_k_dkv: dk/dv kernel: key rows per program.
        block_q_dq: dq kernel: query rows per program.
        block_k_dq: dq kernel: key rows per loop step.
        num_warps: Triton warps per program; None: 4 for a head dimension <= 64, else 8.
        num_stages: Triton's software-pipelining depth of the key/query loops.
    """

    block_q: int = 128  # forward: query rows per program
    block_k: int = 64  # forward: key rows per loop step
    block_q_dkv: int = 64  # dk/dv kernel: query rows per loop step
    block_k_dkv: int = 64  # dk/dv kernel: key rows per program
    block_q_dq: int = 64  # dq kernel: query rows per program
    block_k_dq: int = 64  # dq kernel: key rows per loop step
    num_warps: int | None = None  # None: 4 for head dim <= 64, else 8
    num_stages: int = 3  # software pipelining depth of the key/query loops

    def __post_init__(self):
        for f in dataclasses.fields(self)[:6]:
            b = getattr(self, f.name)
            if b < 16 or b & (b - 1):
                raise ValueError(f"BlockSizes.{f.name} must be a power of two >= 16, got {b}")

    def fit(self, q_len: int, kv_len: int) -> "BlockSizes":
        """Shrink blocks that are longer than the sequence they tile (rounded up to a power of
        2).

        Arguments:
            q_len: T, the queries' sequence length.
            kv_len: S, the keys' and values' sequence length.

        Returns:
            A `BlockSizes` whose query blocks are at most max(16, T rounded up to a power of 2)
            and whose key blocks at most the same of S; the launch settings unchanged.
        """
        tq = max(16, pl.next_power_of_2(q_len))
        tk = max(16, pl.next_power_of_2(kv_len))
        fitted = {
            f.name: min(getattr(self, f.name), tq if f.name.startswith("block_q") else tk)
            for f in dataclasses.fields(self)[:6]
        }  # the six block sizes
        return dataclasses.replace(self, **fitted)


@functools.partial(jax.jit, static_argnames=("causal", "scale", "block_sizes", "interpret"))
def flash_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    causal: bool = False,
    key_padding_mask: jax.Array | None = None,
    scale: float | None = None,
    block_sizes: BlockSizes | None = None,
    interpret: bool | None = None,
) -> jax.Array:
    """Multi-head attention softmax(scale q k^T) v with the Pallas kernels (Dao et al. 2022);
    differentiable in q, k and v (the backward kernels follow Dao 2023).

    Jitted, with `causal`, `scale`, `block_sizes` and `interpret` static. Any sequence lengths
    work (they are padded to the blocks); any head dimension (padded to a power of two).

    Arguments:
        q: (B, T, H, D) queries of a float dtype (float32, bfloat16 or float16).
        k: (B, S, H, D) keys, q's dtype.
        v: (B, S, H, D) values, q's dtype.
        causal: whether query i sees only keys 0..i (the mask aligned top-left).
        key_padding_mask: (B, S) bool, True where a key may be attended (jax.nn's `mask`
            convention; PyTorch's key_padding_mask is the opposite); None: every key.
        scale: the factor on the scores; None means 1/sqrt(D).
        block_sizes: the kernels' tiles and launch settings; None: `BlockSizes()`.
        interpret: run the kernels in Pallas interpret mode; None: True on a CPU backend.

    Returns:
        (B, T, H, D) array of q's dtype; a query row with no key to attend to gives zeros.

    Raises:
        ValueError: when the shapes or dtypes of q, k, v or key_padding_mask do not fit.
    """
    # k and v: q's shape but for the sequence axis
    if q.ndim != 4 or k.shape != v.shape or k.shape[:1] + k.shape[2:] != q.shape[:1] + q.shape[2:]:
        raise ValueError(
            f"flash_attention expects q (B, T, H, D) and k, v (B, S, H, D); got q {q.shape}, "
            f"k {k.shape}, v {v.shape}"
        )
    if not (q.dtype == k.dtype == v.dtype) or not jnp.issubdtype(q.dtype, jnp.floating):
        raise ValueError(f"q, k, v must share one float dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    b, t, _, d = q.shape
    s = k.shape[1]
    if key_padding_mask is not None and key_padding_mask.shape != (b, s):
        raise ValueError(
            f"key_padding_mask must be (B, S) = {(b, s)}, got {key_padding_mask.shape}"
        )
    scale = d**-0.5 if scale is None else float(scale)
    interpret = jax.default_backend() == "cpu" if interpret is None else interpret
    blocks = (block_sizes or BlockSizes()).fit(t, s)
    # powers of 2: a multiple of the largest fits all
    bq = max(blocks.block_q, blocks.block_q_dkv, blocks.block_q_dq)
    bk = max(blocks.block_k, blocks.block_k_dkv, blocks.block_k_dq)
    t_pad = pl.cdiv(t, bq) * bq
    s_pad = pl.cdiv(s, bk) * bk
    q, k, v = (
        # (B, L, H, D) -> (B, n, H, D), zeros appended
        jnp.pad(x, ((0, 0), (0, n - x.shape[1]), (0, 0), (0, 0)))
        for x, n in ((q, t_pad), (k, s_pad), (v, s_pad))
    )
    # keep: (B, S_pad) int32, 1 = attend; padded keys beyond S are masked by the kernels
    keep = None
    if key_padding_mask is not None:
        keep = jnp.pad(key_padding_mask.astype(jnp.int32), ((0, 0), (0, s_pad - s)))
    return _flash(q, k, v, keep, causal, scale, s, blocks, interpret)[:, :t]


def _scores(q, k, span_q, span_k, keep, *, causal, scale, kv_len, kv_pad):
    """Masked scores of one tile in log2 units: (block_q, D) x (block_k, D) -> (block_q,
    block_k)."""
    s = plgpu.dot(q, k.T) * (scale * LOG2E)
    valid = None
    if keep is not None:  # the padded tail of `keep` is 0 already
        valid = keep[None, :]
    elif kv_len < kv_pad:
        valid = span_k[None, :] < kv_len
    if causal:
        below = span_q[:, None] >= span_k[None, :]
        valid = below if valid is None else jnp.logical_and(valid, below)
    return s if valid is None else jnp.where(valid, s, MASK)


def _two_loops(body, bounds, masked_first: bool, carry):
    """lax.fori_loop over blocks [a, b) then [b, c); the causal mask only on the diagonal part."""
    a, b, c = bounds
    for lo, hi, causal in ((a, b, masked_first), (b, c, not masked_first)):
        # known to be empty: left out
        if not (isinstance(lo, int) and isinstance(hi, int) and lo == hi):
            carry = lax.fori_loop(lo, hi, functools.partial(body, causal=causal), carry)
    return carry


def _key_bounds(i, block_q, block_k, n_k, causal):
    """Key blocks for query block i: [0, b) fully visible, [b, c) on the diagonal, the rest
    skipped."""
    if not causal:
        return 0, n_k, n_k
    full = jnp.minimum(lax.div(i * block_q + 1, block_k), n_k)  # last key <= first query
    # first key <= last query
    stop = jnp.minimum(lax.div((i + 1) * block_q + block_k - 1, block_k), n_k)
    return 0, full, stop


def _head_mask(ref, head_dim):
    """(1, D_pad): True at the real head-dimension columns; None when D is a power of 2 (no
    padding)."""
    return None if ref.shape[-1] == head_dim else (jnp.arange(ref.shape[-1]) < head_dim)[None, :]


def _loader(ref, head_dim):
    """plgpu.load with the padded head-dimension columns masked off (when D is not a power of 2)."""
    mask = _head_mask(ref, head_dim)
    return plgpu.load if mask is None else functools.partial(plgpu.load, mask=mask, other=0.0)


def _store(ref, x, head_dim):
    plgpu.store(ref, x.astype(ref.dtype), mask=_head_mask(ref, head_dim))


def _forward_kernel(
    q_ref, k_ref, v_ref, keep_ref, o_ref, lse_ref, *, block_k, head_dim, causal, **opts
):
    block_q = q_ref.shape[0]
    load = _loader(q_ref, head_dim)
    i = pl.program_id(0)
    q = load(q_ref)  # (block_q, D_pad), stays on chip
    span_q = i * block_q + jnp.arange(block_q)

    def body(j, carry, causal):
        o, m, total = carry  # (block_q, D_pad), (block_q,), (block_q,)
        ks = pl.ds(j * block_k, block_k)
        keep = None if keep_ref is None else keep_ref[ks] != 0
        k = load(k_ref.at[ks, :])  # (block_k, D_pad)
        s = _scores(q, k, span_q, j * block_k + jnp.arange(block_k), keep, causal=causal, **opts)
        m_new = jnp.maximum(m, s.max(axis=-1))
        alpha = jnp.exp2(m - m_new)  # rescales what was accumulated under the old maximum
        p = jnp.exp2(s - m_new[:, None])  # (block_q, block_k)
        v = load(v_ref.at[ks, :])  # (block_k, D_pad)
        o = alpha[:, None] * o + plgpu.dot(p.astype(v.dtype), v)
        return o, m_new, alpha * total + p.sum(axis=-1)

    o = jnp.zeros(q.shape, jnp.float32)  # (block_q, D_pad): the unnormalised output
    m = jnp.full((block_q,), -jnp.inf, jnp.float32)  # the running row maximum
    total = jnp.zeros((block_q,), jnp.float32)  # the running normaliser
    bounds = _key_bounds(i, block_q, block_k, k_ref.shape[0] // block_k, causal)
    o, m, total = _two_loops(body, bounds, False, (o, m, total))
    # A row that saw only masked keys still has m == MASK (any real score is larger): give it
    # output 0 and lse = +inf, so that p = exp2(s - lse) = 0 in the backward pass.
    empty = m == MASK
    lse_ref[...] = jnp.where(empty, jnp.inf, m + jnp.log2(total))
    _store(o_ref, jnp.where(empty[:, None], 0.0, o / total[:, None]), head_dim)


def _dkdv_kernel(*refs, block_q, head_dim, causal, **opts):
    q_ref, k_ref, v_ref, keep_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref = refs  # in, out
    block_k = k_ref.shape[0]
    load = _loader(k_ref, head_dim)
    j = pl.program_id(0)
    k, v = load(k_ref), load(v_ref)  # (block_k, D_pad) each
    keep = None if keep_ref is None else keep_ref[...] != 0  # (block_k,)
    span_k = j * block_k + jnp.arange(block_k)

    def body(i, carry, causal):
        dk, dv = carry  # (block_k, D_pad) each, fp32
        qs = pl.ds(i * block_q, block_q)
        q, do = load(q_ref.at[qs, :]), load(do_ref.at[qs, :])  # (block_q, D_pad) each
        s = _scores(q, k, i * block_q + jnp.arange(block_q), span_k, keep, causal=causal, **opts)
        p = jnp.exp2(s - lse_ref[qs][:, None])  # (block_q, block_k): the softmax, recomputed
        dv = dv + plgpu.dot(p.astype(do.dtype).T, do)
        ds = p * (plgpu.dot(do, v.T) - delta_ref[qs][:, None])  # d loss / d (scale q k^T)
        return dk + plgpu.dot(ds.astype(q.dtype).T, q), dv

    n_q = q_ref.shape[0] // block_q
    bounds = 0, 0, n_q
    if causal:  # query blocks ending before this key block are skipped; past its end, no mask
        start = jnp.minimum(lax.div(j * block_k, block_q), n_q)  # first query block seeing a key
        # the first query block below the diagonal: its first query >= this block's last key
        stop = jnp.minimum(lax.div((j + 1) * block_k - 1 + block_q - 1, block_q), n_q)
        bounds = start, stop, n_q
    zeros = jnp.zeros(k.shape, jnp.float32)
    dk, dv = _two_loops(body, bounds, True, (zeros, zeros))
    _store(dk_ref, dk * opts["scale"], head_dim)
    _store(dv_ref, dv, head_dim)


def _dq_kernel(*refs, block_k, head_dim, causal, **opts):
    q_ref, k_ref, v_ref, keep_ref, do_ref, lse_ref, delta_ref, dq_ref = refs  # in, out
    block_q = q_ref.shape[0]
    load = _loader(q_ref, head_dim)
    i = pl.program_id(0)
    q, do = load(q_ref), load(do_ref)  # (block_q, D_pad) each
    lse, delta = lse_ref[...], delta_ref[...]  # (block_q,) each
    span_q = i * block_q + jnp.arange(block_q)

    def body(j, dq, causal):  # dq: (block_q, D_pad), fp32
        ks = pl.ds(j * block_k, block_k)
        k, v = load(k_ref.at[ks, :]), load(v_ref.at[ks, :])  # (block_k, D_pad) each
        keep = None if keep_ref is None else keep_ref[ks] != 0
        s = _scores(q, k, span_q, j * block_k + jnp.arange(block_k), keep, causal=causal, **opts)
        p = jnp.exp2(s - lse[:, None])
        ds = p * (plgpu.dot(do, v.T) - delta[:, None])
        return dq + plgpu.dot(ds.astype(k.dtype), k)

    bounds = _key_bounds(i, block_q, block_k, k_ref.shape[0] // block_k, causal)
    dq = _two_loops(body, bounds, False, jnp.zeros(q.shape, jnp.float32))
    _store(dq_ref, dq * opts["scale"], head_dim)


def _specs(q_len, k_len, d_pad, keep, *, over_q: bool):
    """BlockSpecs for a grid (sequence block, batch, head) that runs over query blocks (over_q) or
    key blocks: those of (B, T, H, D) query-side arrays and (B, H, T) row statistics, `q_len` rows
    each, then of (B, S, H, D) key-side arrays and the (B, S) key mask (None when there is no `keep`
    mask), `k_len` rows each. The side the grid runs over gets the program's own block; the other
    side its whole sequence, to be sliced inside the kernel's loop."""
    keeps = pl.BlockSpec((None, k_len), lambda i, b, h: (b, 0 if over_q else i))
    return (
        pl.BlockSpec((None, q_len, None, d_pad), lambda i, b, h: (b, i if over_q else 0, h, 0)),
        pl.BlockSpec((None, None, q_len), lambda i, b, h: (b, h, i if over_q else 0)),
        pl.BlockSpec((None, k_len, None, d_pad), lambda i, b, h: (b, 0 if over_q else i, h, 0)),
        None if keep is None else keeps,
    )


def _call(kernel, name, grid, blocks: BlockSizes, interpret, specs):
    """`kernel` over the `grid` programs, a function of the input arrays; specs: (in_specs,
    out_specs, out_shape). The first output's head dim (that of q, or k) sets the default warps."""
    in_specs, out_specs, out_shape = specs
    d = jax.tree.leaves(out_shape)[0].shape[-1]
    num_warps = blocks.num_warps or (4 if d <= 64 else 8)
    return pl.pallas_call(
        kernel,
        grid=grid,
        in_specs=in_specs,
        out_specs=out_specs,
        out_shape=out_shape,
        compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=blocks.num_stages),
        interpret=interpret,
        name=name,
    )


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6, 7, 8))
def _flash(q, k, v, keep, causal, scale, kv_len, blocks, interpret):
    return _flash_fwd(q, k, v, keep, causal, scale, kv_len, blocks, interpret)[0]


def _flash_fwd(q, k, v, keep, causal, scale, kv_len, blocks: BlockSizes, interpret):
    """The forward kernel: the output and, for the backward pass, the residuals with lse (B, H, T)
    (fp32, log2 units)."""
    b, t, h, d = q.shape
    s = k.shape[1]
    d_pad = max(16, pl.next_power_of_2(d))  # the head dimension in the kernels' tiles
    bq = blocks.block_q
    opts = dict(causal=causal, scale=scale, kv_len=kv_len, kv_pad=s, head_dim=d)
    qs, rows, kvs, keeps = _specs(bq, s, d_pad, keep, over_q=True)
    kernel = functools.partial(_forward_kernel, block_k=blocks.block_k, **opts)
    out = [jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((b, h, t), jnp.float32)]
    grid = (t // bq, b, h)
    specs = ([qs, kvs, kvs, keeps], [qs, rows], out)
    o, lse = _call(kernel, "frost_flash_forward", grid, blocks, interpret, specs)(q, k, v, keep)
    return o, (q, k, v, keep, o, lse)


def _flash_bwd(causal, scale, kv_len, blocks: BlockSizes, interpret, residuals, do):
    """The two backward kernels: (dq, dk, dv), and no cotangent for `keep`."""
    q, k, v, keep, o, lse = residuals
    b, t, h, d = q.shape
    s = k.shape[1]
    d_pad = max(16, pl.next_power_of_2(d))
    opts = dict(causal=causal, scale=scale, kv_len=kv_len, kv_pad=s, head_dim=d)
    # (B, H, T)
    delta = jnp.sum(o.astype(jnp.float32) * do.astype(jnp.float32), axis=-1).transpose(0, 2, 1)

    bk = blocks.block_k_dkv  # dk, dv: one program per key block, all queries in its loop
    qs, rows, kvs, keeps = _specs(t, bk, d_pad, keep, over_q=False)
    kernel = functools.partial(_dkdv_kernel, block_q=blocks.block_q_dkv, **opts)
    out = [jax.ShapeDtypeStruct(k.shape, k.dtype)] * 2
    specs = ([qs, kvs, kvs, keeps, qs, rows, rows], [kvs, kvs], out)
    call = _call(kernel, "frost_flash_dkdv", (s // bk, b, h), blocks, interpret, specs)
    dk, dv = call(q, k, v, keep, do, lse, delta)

    bq = blocks.block_q_dq  # dq: one program per query block, all keys in its loop
    qs, rows, kvs, keeps = _specs(bq, s, d_pad, keep, over_q=True)
    kernel = functools.partial(_dq_kernel, block_k=blocks.block_k_dq, **opts)
    specs = ([qs, kvs, kvs, keeps, qs, rows, rows], qs, jax.ShapeDtypeStruct(q.shape, q.dtype))
    call = _call(kernel, "frost_flash_dq", (t // bq, b, h), blocks, interpret, specs)
    dq = call(q, k, v, keep, do, lse, delta)
    return dq, dk, dv, None


_flash.defvjp(_flash_fwd, _flash_bwd)


def attention_reference(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    causal: bool = False,
    key_padding_mask: jax.Array | None = None,
    scale: float | None = None,
) -> jax.Array:
    """The same function as `flash_attention`, written out in plain jnp with fp32 math.

    Materialises the (B, H, T, S) scores; rows with no key to attend to return zeros. XLA fuses
    it; `frost.nn.dot_product_attention` uses it off GPUs, and the tests check the kernels
    against it.

    Arguments:
        q: (B, T, H, D) queries of a float dtype.
        k: (B, S, H, D) keys.
        v: (B, S, H, D) values.
        causal: whether query i sees only keys 0..i (the mask aligned top-left).
        key_padding_mask: (B, S) bool, True where a key may be attended; None: every key.
        scale: the factor on the scores; None means 1/sqrt(D).

    Returns:
        (B, T, H, D) array of q's dtype.
    """
    t = q.shape[1]
    s = k.shape[1]
    d = q.shape[-1]
    scale = d**-0.5 if scale is None else scale
    # (B, H, T, S)
    scores = jnp.einsum("bthd,bshd->bhts", q.astype(jnp.float32), k.astype(jnp.float32)) * scale
    valid = jnp.tril(jnp.ones((1, 1, t, s), bool)) if causal else jnp.ones((1, 1, t, s), bool)
    if key_padding_mask is not None:
        valid = jnp.logical_and(valid, key_padding_mask[:, None, None, :])
    scores = jnp.where(valid, scores, -jnp.inf)
    m = lax.stop_gradient(scores.max(axis=-1, keepdims=True))
    m = jnp.where(jnp.isfinite(m), m, 0.0)
    p = jnp.where(valid, jnp.exp(scores - m), 0.0)
    denom = p.sum(axis=-1, keepdims=True)
    p = p / jnp.where(denom == 0.0, 1.0, denom)
    return jnp.einsum("bhts,bshd->bthd", p, v.astype(jnp.float32)).astype(q.dtype)
