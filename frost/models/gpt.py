"""A GPT-2-style decoder (Radford et al. 2019), after nanoGPT: pre-norm blocks, learned or
rotary (Su et al. 2021, RoFormer) positions, weight tying, and generation with a KV cache.

    model = GPT(vocab_size=4096, dim=256, depth=4, heads=4, max_len=256, key=key)
    logits = model(ids)                                              # (B, T) int -> (B, T, V)
    out = generate(model, prompt, 100, key=key, temperature=0.8, top_k=50)

Initialisation is GPT-2's (as nanoGPT and transformers' GPT2 do it): embeddings, positions and
every Linear weight N(0, 0.02); the two residual projections of each block (attention `proj`, MLP
`out`) N(0, 0.02 / sqrt(2 * depth)), since 2 * depth of them add into the residual stream; biases
zero. `gelu_approximate=True` (the tanh GELU) and `eps` (LayerNorm) match a GPT-2 checkpoint's
`gelu_new` and `layer_norm_epsilon` (frost.interop.load_hf_gpt2); the defaults, exact GELU and
1e-5, are `frost train gpt`'s.

Attention goes through `frost.nn.attention.dot_product_attention`: the Pallas flash kernel on
GPU, XLA elsewhere. Generation pre-fills a cache of keys and values for the prompt, then feeds
one token at a time, attending to the cached positions (a plain masked softmax: one query).
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from frost import nn
from frost.nn.attention import dot_product_attention
from frost.nn.module import expand_to, shape_error, static


# (T,) -> cos, sin: (1, T, 1, D/2) each
def rotary_tables(positions: np.ndarray | jax.Array, head_dim: int) -> tuple[jax.Array, jax.Array]:
    """RoFormer's angles (Su et al. 2021), position * 10000^(-2i/D), as cos and sin tables shared
    by every block.

    Positions known when tracing (numpy: training, evaluation, a prompt) give constants of the
    compiled program, as PyTorch's buffers; computed inside it, XLA fuses cos and sin into every
    consumer and evaluates them anew for each batch row and head (a tenth of a GPT step on a
    CPU).

    Arguments:
        positions: (T,) integer positions, a numpy array (constant tables) or a jax array.
        head_dim: D, the size of each head (even).

    Returns:
        `(cos, sin)`, each (1, T, 1, D/2) float32, numpy arrays when `positions` is one.
    """
    xp = np if isinstance(positions, np.ndarray) else jnp
    d = head_dim // 2
    freqs = 1.0 / (10000 ** (xp.arange(d, dtype=np.float32) / d))  # (D/2,)
    angles = positions.astype(np.float32)[:, None] * freqs[None, :]  # (T, D/2)
    return xp.cos(angles)[None, :, None, :], xp.sin(angles)[None, :, None, :]


def rotary(x: jax.Array, tables: tuple[jax.Array, jax.Array]) -> jax.Array:
    """Rotary position embedding (Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary
    Position Embedding"): rotate each feature pair (x[i], x[i + D/2]) by its position's angle.

    Arguments:
        x: (B, T, H, D) queries or keys.
        tables: `(cos, sin)` from `rotary_tables` for the T positions, each (1, T, 1, D/2).

    Returns:
        (B, T, H, D) array of x's dtype (computed in float32).
    """
    cos, sin = tables
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d].astype(jnp.float32), x[..., d:].astype(jnp.float32)
    return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).astype(x.dtype)


def _linear(cin, cout, std, key, bias=True):
    """A Linear layer with GPT-2's N(0, std^2) weights and zero bias."""
    layer = nn.Linear(cin, cout, use_bias=bias, key=key)
    return layer.replace(
        weight=std * jax.random.normal(key, (cin, cout)), bias=jnp.zeros(cout) if bias else None
    )


class Block(nn.Module):
    """A pre-norm transformer block: x + attention(ln1(x)), then x + MLP(ln2(x)), with causal
    multi-head self-attention and a 4x GELU MLP; dropout on each residual branch.

    The leaves are those of its layers (LayerNorms `ln1`, `ln2`; Linears `qkv` (C, 3C), `proj`,
    `fc` (C, 4C) and `out` (4C, C)); `heads`, `rotary` and `gelu_approximate` are static. The
    Linear weights are N(0, 0.02), the residual projections' (`proj`, `out`) N(0, 0.02 / sqrt(2 *
    depth)), the biases zero.

    Arguments:
        dim: C, the width of the residual stream.
        heads: the number of attention heads; it must divide `dim`.
        use_rotary: rotate queries and keys by position (rotary embeddings) before attending.
        dropout: the dropout probability of the residual branches.
        key: a PRNG key (`jax.random.key`) for the initial weights.
        depth: the number of blocks in the model, which sets the residual projections' scale.
        gelu_approximate: use the tanh GELU (GPT-2's `gelu_new`) instead of the exact one.
        eps: the LayerNorms' epsilon.
    """

    ln1: nn.LayerNorm
    qkv: nn.Linear
    proj: nn.Linear
    ln2: nn.LayerNorm
    fc: nn.Linear
    out: nn.Linear
    drop: nn.Dropout
    heads: int = static()
    rotary: bool = static()
    gelu_approximate: bool = static(False)  # the tanh GELU (GPT-2's gelu_new)

    def __init__(
        self,
        dim: int,
        heads: int,
        use_rotary: bool,
        dropout: float,
        *,
        key: jax.Array,
        depth: int = 1,
        gelu_approximate: bool = False,
        eps: float = 1e-5,
    ):
        keys = jax.random.split(key, 4)
        residual = 0.02 / math.sqrt(2 * depth)  # the std of the projections into the residual
        self.ln1 = nn.LayerNorm(dim, eps)
        self.qkv = _linear(dim, 3 * dim, 0.02, keys[0])
        self.proj = _linear(dim, dim, residual, keys[1])
        self.ln2 = nn.LayerNorm(dim, eps)
        self.fc = _linear(dim, 4 * dim, 0.02, keys[2])
        self.out = _linear(4 * dim, dim, residual, keys[3])
        self.drop = nn.Dropout(dropout)
        self.heads = heads
        self.rotary = use_rotary
        self.gelu_approximate = gelu_approximate

    def attend(
        self,
        x: jax.Array,
        positions: np.ndarray | jax.Array,
        cache: tuple[jax.Array, jax.Array] | None = None,
        tables: tuple[jax.Array, jax.Array] | None = None,
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array] | None]:
        """Causal self-attention of x at `positions`, through the cache when there is one.

        With a cache, this step's keys and values are written at `positions` and each query
        attends to the cached positions up to its own.

        Arguments:
            x: (B, T, C) normalised inputs.
            positions: (T,) int positions of the T inputs (consecutive).
            cache: `(k, v)`, each (B, S, H, D) with S the model's max_len; None: no cache.
            tables: `rotary_tables(positions, D)` when the block is rotary, else None.

        Returns:
            `(y, cache)`: y (B, T, C) of x's dtype, and the updated cache (None without one).
        """
        B, T, C = x.shape
        # (B, T, H, D)
        q, k, v = jnp.split(self.qkv(x).reshape(B, T, 3 * self.heads, C // self.heads), 3, axis=2)
        if self.rotary:
            q, k = rotary(q, tables), rotary(k, tables)
        if cache is None:
            y = dot_product_attention(q, k, v, causal=True)  # (B, T, H, D)
            return self.proj(y.reshape(B, T, C)), None
        ck, cv = cache  # (B, S, H, D) each: this step's keys and values written at `positions`
        ck = jax.lax.dynamic_update_slice_in_dim(ck, k.astype(ck.dtype), positions[0], axis=1)
        cv = jax.lax.dynamic_update_slice_in_dim(cv, v.astype(cv.dtype), positions[0], axis=1)
        # (B, H, T, S), fp32
        scores = jnp.einsum("bthd,bshd->bhts", q, ck, preferred_element_type=jnp.float32)
        scores = scores / jnp.sqrt(jnp.float32(q.shape[-1]))
        # (T, S): causal over the cache
        visible = jnp.arange(ck.shape[1])[None, :] <= positions[:, None]
        scores = jnp.where(expand_to(visible, 4), scores, jnp.finfo(scores.dtype).min)
        y = jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(scores, axis=-1).astype(cv.dtype), cv)
        return self.proj(y.reshape(B, T, C)), (ck, cv)

    def __call__(
        self,
        x: jax.Array,
        positions: np.ndarray | jax.Array,
        cache: tuple[jax.Array, jax.Array] | None = None,
        tables: tuple[jax.Array, jax.Array] | None = None,
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array] | None]:
        """The block on x (B, T, C) at `positions`; the arguments are `attend`'s. Returns `(x,
        cache)`: the new (B, T, C) residual stream and the updated cache (None without one)."""
        a, cache = self.attend(self.ln1(x), positions, cache, tables)
        x = x + self.drop(a)
        h = self.fc(self.ln2(x))  # (B, T, 4C)
        h = jax.nn.gelu(h, approximate=True) if self.gelu_approximate else nn.gelu(h)
        x = x + self.drop(self.out(h))
        return x, cache


class GPT(nn.Module):
    """A GPT-2-style decoder-only transformer (Radford et al. 2019, "Language Models are
    Unsupervised Multitask Learners"): (B, T) int token ids -> (B, T, vocab_size) logits.

    Token embedding (+ learned positions unless rotary), `depth` pre-norm `Block`s, a final
    LayerNorm, and a head tied to the token embedding unless `tie_weights` is False. The leaves are
    `embed` (vocab_size, dim), `pos` (max_len, dim) or None, the blocks' and `ln_f`'s parameters,
    and `head` (a Linear without bias, dim -> vocab_size) or None; `max_len` is static. See the
    module docstring for the initialisation.

    ```python
    model = GPT(vocab_size=4096, dim=256, depth=4, heads=4, max_len=256, key=key)
    logits = model(ids)  # (B, T) int -> (B, T, 4096)
    ```

    Arguments:
        vocab_size: V, the number of token ids.
        dim: C, the width of the residual stream.
        depth: the number of blocks.
        heads: the number of attention heads; it must divide `dim`.
        max_len: the longest sequence, in tokens (the size of `pos` and of the KV cache).
        rotary: rotary position embeddings (Su et al. 2021) in each block instead of learned
            positions.
        tie_weights: the output head is the token embedding's transpose (no `head` leaf).
        dropout: the dropout probability of the residual branches (active in training mode).
        key: a PRNG key (`jax.random.key`) for the initial weights.
        gelu_approximate: the tanh GELU (GPT-2's `gelu_new`) instead of the exact one.
        eps: the LayerNorms' epsilon (GPT-2 checkpoints use 1e-5 too).
    """

    embed: nn.Embedding
    pos: jax.Array | None  # (max_len, dim) learned positions, or None with rotary
    blocks: tuple
    ln_f: nn.LayerNorm
    head: nn.Linear | None  # None: tied to the token embedding
    max_len: int = static()

    def __init__(
        self,
        vocab_size: int,
        dim: int = 256,
        depth: int = 4,
        heads: int = 4,
        max_len: int = 256,
        rotary: bool = False,
        tie_weights: bool = True,
        dropout: float = 0.0,
        *,
        key: jax.Array,
        gelu_approximate: bool = False,
        eps: float = 1e-5,
    ):
        if dim % heads:
            raise ValueError(f"GPT: heads={heads} must divide dim={dim}")
        keys = jax.random.split(key, depth + 3)
        self.embed = nn.Embedding(vocab_size, dim, key=keys[0])
        self.embed = self.embed.replace(weight=0.02 * self.embed.weight)
        self.pos = None if rotary else 0.02 * jax.random.normal(keys[1], (max_len, dim))
        options = dict(depth=depth, gelu_approximate=gelu_approximate, eps=eps)
        self.blocks = tuple(Block(dim, heads, rotary, dropout, key=k, **options) for k in keys[3:])
        self.ln_f = nn.LayerNorm(dim, eps)
        self.head = None if tie_weights else _linear(dim, vocab_size, 0.02, keys[2], bias=False)
        self.max_len = max_len

    def __call__(self, ids: jax.Array) -> jax.Array:  # (B, T) -> (B, T, V)
        return self.step(ids, 0, (None,) * len(self.blocks))[0]

    def step(self, ids: jax.Array, start: int | jax.Array, cache: tuple) -> tuple[jax.Array, tuple]:
        """Logits for `ids` placed at positions start..start+T-1, using and updating `cache`.

        Arguments:
            ids: (B, T) int token ids, T <= max_len.
            start: the position of the first id (a Python int, or a traced int in generation).
            cache: a tuple with one `(k, v)` per block, each (B, max_len, H, D) (`empty_cache`);
                or one None per block: no cache, as `__call__`.

        Returns:
            `(logits, cache)`: (B, T, V) logits of the parameters' dtype, and the updated cache.
        """
        if getattr(ids, "ndim", 0) != 2 or ids.shape[1] > self.max_len:
            raise shape_error(self, f"(B, T) token ids with T <= max_len={self.max_len}", ids)
        positions = start + (np if isinstance(start, int) else jnp).arange(ids.shape[1])  # (T,)
        x = self.embed(ids)  # (B, T, C)
        if self.pos is not None:
            x = x + jnp.take(self.pos, positions, axis=0)[None]
        tables = None
        if self.blocks[0].rotary:
            tables = rotary_tables(positions, x.shape[-1] // self.blocks[0].heads)
        new_cache = []
        for block, layer_cache in zip(self.blocks, cache):
            x, layer_cache = block(x, positions, layer_cache, tables)
            new_cache.append(layer_cache)
        x = self.ln_f(x)
        logits = x @ self.embed.weight.T if self.head is None else self.head(x)  # (B, T, V)
        return logits, tuple(new_cache)

    def flops_per_token(self, seq_len: int | None = None) -> int:
        """The model FLOPs of training on one token, forward and backward, as nanoGPT's
        `estimate_mfu` counts them (after the PaLM paper's appendix B, Chowdhery et al. 2022):
        6N for the parameters' matrix multiplies, N counting every parameter but the learned
        positions (a lookup), plus 12·L·H·Q·T for attention's scores and weighted values (L
        blocks, H heads of size Q, windows of T tokens).

        Arguments:
            seq_len: T, the tokens of each training window; None: `max_len`.

        Returns:
            FLOPs per token (an int).
        """
        n = self.param_count() - (0 if self.pos is None else self.pos.size)
        heads = self.blocks[0].heads
        head_dim = self.embed.dim // heads
        window = self.max_len if seq_len is None else seq_len
        return 6 * n + 12 * len(self.blocks) * heads * head_dim * window

    def empty_cache(self, batch: int, dtype: DTypeLike = jnp.float32) -> tuple:
        """A KV cache of zeros for `step`.

        Arguments:
            batch: B, the number of sequences generated together.
            dtype: the cached keys' and values' dtype.

        Returns:
            A tuple with one `(k, v)` per block, each (B, max_len, H, D) zeros.
        """
        heads = self.blocks[0].heads
        shape = (batch, self.max_len, heads, self.embed.dim // heads)  # (B, max_len, H, D)
        return tuple((jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)) for _ in self.blocks)


def sample_token(
    logits: jax.Array, key: jax.Array, temperature: float = 1.0, top_k: int | None = None
) -> jax.Array:
    """Greedy when temperature == 0; else sample from softmax(logits / temperature) over the top k.

    Arguments:
        logits: (B, V) float logits of the next token.
        key: a PRNG key (`jax.random.key`); unused when greedy.
        temperature: divides the logits; 0 picks the argmax.
        top_k: sample among the k largest logits only; None: among all.

    Returns:
        (B,) int32 token ids.
    """
    if temperature == 0.0:
        return jnp.argmax(logits, -1)
    logits = logits.astype(jnp.float32) / temperature
    if top_k is not None:
        kth = jax.lax.top_k(logits, top_k)[0][:, -1:]  # (B, 1)
        logits = jnp.where(logits < kth, -jnp.inf, logits)
    return jax.random.categorical(key, logits, axis=-1)


def generate(
    model: GPT,
    prompt: jax.Array,
    max_new_tokens: int,
    *,
    key: jax.Array,
    temperature: float = 1.0,
    top_k: int | None = None,
) -> jax.Array:
    """Extend `prompt` by `max_new_tokens` tokens, one at a time, with a KV cache.

    The prompt fills the cache in one pass; then each new token attends to the cached positions.
    Compiled once per model configuration, prompt shape, length and sampling settings.

    ```python
    out = generate(model, prompt, 100, key=key, temperature=0.8, top_k=50)
    ```

    Arguments:
        model: the GPT; T0 + max_new_tokens must not exceed its max_len.
        prompt: (B, T0) int token ids, T0 >= 1.
        max_new_tokens: the number of tokens to add.
        key: a PRNG key (`jax.random.key`) for sampling (folded with each step's index).
        temperature: divides the logits; 0 is greedy decoding.
        top_k: sample among the k most likely tokens only; None: among all.

    Returns:
        (B, T0 + max_new_tokens) array of prompt's dtype: the prompt, then the new tokens.
    """
    T0 = prompt.shape[1]
    if T0 + max_new_tokens > model.max_len:
        raise ValueError(
            f"GPT.generate: prompt length {T0} + {max_new_tokens} new tokens exceeds "
            f"max_len={model.max_len}"
        )
    return _generate(model, prompt, key, max_new_tokens, temperature, top_k)


@functools.partial(jax.jit, static_argnums=(3, 4, 5))
def _generate(model, prompt, key, max_new_tokens, temperature, top_k):
    B, T0 = prompt.shape
    logits, cache = model.step(prompt, 0, model.empty_cache(B, model.embed.weight.dtype))
    first = sample_token(logits[:, -1], jax.random.fold_in(key, 0), temperature, top_k)

    def body(i, carry):
        tokens, cache = carry
        logits, cache = model.step(tokens[:, T0 + i - 1][:, None], T0 + i - 1, cache)
        next_token = sample_token(logits[:, -1], jax.random.fold_in(key, i), temperature, top_k)
        return tokens.at[:, T0 + i].set(next_token.astype(tokens.dtype)), cache

    tokens = jnp.pad(prompt, ((0, 0), (0, max_new_tokens)))  # (B, T0 + new)
    tokens = tokens.at[:, T0].set(first.astype(prompt.dtype))
    return jax.lax.fori_loop(1, max_new_tokens, body, (tokens, cache))[0]
