"""Scaled dot-product attention for frost.nn, with one switch between two implementations.

    # q: (B, T, H, D); k, v: (B, S, H, D) -> o: (B, T, H, D)
    o = dot_product_attention(q, k, v, causal=True)

- "pallas": `frost.kernels.flash_attention`, Frost's Pallas flash-attention kernels (forward and
  backward). Compiled through Triton on a GPU; on a CPU it runs in Pallas interpret mode, which
  is correct but slow (tests only).
- "xla": the kernel file's plain-jnp `attention_reference` (scores and softmax in float32, so a
  bfloat16 model keeps them in float32), which XLA fuses; for CPUs and TPUs. It is tested
  against `jax.nn.dot_product_attention`.
- None (auto): the module default if one is set, else "pallas" on a GPU and "xla" elsewhere.

The module default comes from the environment variable FROST_ATTENTION=pallas|xla at import,
or from `set_attention_implementation("pallas" | "xla" | None)`; the `implementation` argument
overrides both. The choice is made when a function is traced: a jitted function keeps the
implementation it was traced with.

Both give the same function: key_padding_mask (B, S) bool is True where a key may be attended
(jax.nn's `mask` convention; PyTorch's key_padding_mask is the opposite), the causal mask is
aligned top-left (query i sees keys 0..i), and a query row with no key to attend to gives zeros.
"""

import os

import jax

from frost.kernels.attention import attention_reference, flash_attention

IMPLEMENTATIONS = ("pallas", "xla")


def _checked(name, source: str):
    if name is not None and name not in IMPLEMENTATIONS:
        raise ValueError(f"{source} must be one of {IMPLEMENTATIONS} or unset (auto), got {name!r}")
    return name


_default = _checked(os.environ.get("FROST_ATTENTION") or None, "FROST_ATTENTION")


def set_attention_implementation(name: str | None) -> str | None:
    """Set the module default implementation of `dot_product_attention`.

    It applies to functions traced afterwards; a jitted function keeps the implementation it was
    traced with.

    Arguments:
        name: "pallas", "xla", or None for auto ("pallas" on a GPU, "xla" elsewhere).

    Returns:
        The previous default ("pallas", "xla" or None), to restore it later.
    """
    global _default
    previous = _default
    _default = _checked(name, "set_attention_implementation(name)")
    return previous


def attention_implementation(implementation: str | None = None) -> str:
    """The implementation `dot_product_attention(..., implementation=implementation)` will use.

    Arguments:
        implementation: "pallas", "xla", or None for the module default (FROST_ATTENTION or
            `set_attention_implementation`), else auto.

    Returns:
        "pallas" or "xla".
    """
    name = _checked(implementation, "implementation") or _default
    return name or ("pallas" if jax.default_backend() == "gpu" else "xla")


def dot_product_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    causal: bool,
    key_padding_mask: jax.Array | None = None,
    scale: float | None = None,
    implementation: str | None = None,
) -> jax.Array:
    """Multi-head scaled dot-product attention, softmax(scale q k^T) v per batch and head.

    The implementation is Frost's Pallas flash-attention kernel or its plain-jnp reference (see the
    module docstring); both compute the same function, differentiable in q, k and v.

    Arguments:
        q: (B, T, H, D) queries of a float dtype (float32, bfloat16 or float16).
        k: (B, S, H, D) keys, q's dtype.
        v: (B, S, H, D) values, q's dtype.
        causal: whether query i sees only keys 0..i (the mask aligned top-left).
        key_padding_mask: (B, S) bool, True where a key may be attended; None: every key.
        scale: the factor on the scores; None means 1/sqrt(D).
        implementation: "pallas", "xla", or None for the default (`attention_implementation`).

    Returns:
        (B, T, H, D) array of q's dtype; a query row with no key to attend to gives zeros.
    """
    pallas = attention_implementation(implementation) == "pallas"
    fn = flash_attention if pallas else attention_reference
    return fn(q, k, v, causal=causal, key_padding_mask=key_padding_mask, scale=scale)
