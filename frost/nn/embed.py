"""Embedding: a lookup table from integer ids to vectors."""
import jax
import jax.numpy as jnp

from frost.nn.module import Module, shape_error, static


class Embedding(Module):
    weight: jax.Array  # (num_embeddings, dim)
    num_embeddings: int = static()
    dim: int = static()

    def __init__(self, num_embeddings: int, dim: int, *, key, dtype=jnp.float32):
        self.weight = jax.random.normal(key, (num_embeddings, dim), dtype)  # N(0, 1), as in PyTorch
        self.num_embeddings, self.dim = num_embeddings, dim

    def __call__(self, ids):  # (...) int -> (..., dim)
        if not hasattr(ids, "dtype") or not jnp.issubdtype(ids.dtype, jnp.integer):
            raise shape_error(self, f"integer ids in [0, {self.num_embeddings})", ids)
        return jnp.take(self.weight, ids, axis=0)
