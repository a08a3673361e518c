"""frost.kernels: Pallas kernels, each with its plain-jnp reference in the same file."""

from frost.kernels.attention import BlockSizes, attention_reference, flash_attention

__all__ = ["BlockSizes", "attention_reference", "flash_attention"]
