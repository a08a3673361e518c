"""Scaled dot-product attention for frost.nn, with one switch between two implementations.

    o = dot_product_attention(q, k, v, causal=True)   # q: (B, T, H, D), k, v: (B, S, H, D) -> (B,
    T, H, D)

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
    """Set the module default ("pallas", "xla", or None for auto); returns the previous one."""
    global _default
    previous, _default = _default, _checked(name, "set_attention_implementation(name)")
    return previous


def attention_implementation(implementation: str | None = None) -> str:
    """The implementation `dot_product_attention(..., implementation=implementation)` will use."""
    name = _checked(implementation, "implementation") or _default
    return name or ("pallas" if jax.default_backend() == "gpu" else "xla")


def dot_product_attention(
    q,
    k,
    v,
    *,
    causal: bool,
    key_padding_mask=None,
    scale: float | None = None,
    implementation: str | None = None,
) -> jax.Array:
    """softmax(scale q k^T) v per batch and head; scale defaults to 1/sqrt(D). See the module
    docstring."""
    pallas = attention_implementation(implementation) == "pallas"
    fn = flash_attention if pallas else attention_reference
    return fn(q, k, v, causal=causal, key_padding_mask=key_padding_mask, scale=scale)
