"""Embedding: a lookup table from integer ids to vectors.

An id outside [0, num_embeddings) is an error: concrete ids are checked at once; inside `jit`,
where values are unknown, such an id gives a row of NaN (never another row: -1 does not wrap),
which the training loop's non-finite policy then stops on."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from frost.nn.module import Module, shape_error, static


class Embedding(Module):
    """A lookup table: integer ids (...) -> vectors (..., dim), as `torch.nn.Embedding`.

    The leaf is `weight`, (num_embeddings, dim), initialised N(0, 1) as in PyTorch; the two sizes
    are static fields.

    Arguments:
        num_embeddings: the number of rows (the vocabulary size); ids are in [0, num_embeddings).
        dim: the length of each vector.
        key: a PRNG key (`jax.random.key`) for the initial weights.
        dtype: the table's dtype.
    """

    weight: jax.Array  # (num_embeddings, dim)
    num_embeddings: int = static()
    dim: int = static()

    def __init__(
        self, num_embeddings: int, dim: int, *, key: jax.Array, dtype: DTypeLike = jnp.float32
    ):
        if num_embeddings < 1 or dim < 1:
            raise ValueError(
                f"Embedding: num_embeddings={num_embeddings} and dim={dim} must be >= 1"
            )
        self.weight = jax.random.normal(key, (num_embeddings, dim), dtype)  # N(0, 1), as in PyTorch
        self.num_embeddings = num_embeddings
        self.dim = dim

    def __call__(self, ids):  # (...) int -> (..., dim)
        if not hasattr(ids, "dtype") or not jnp.issubdtype(ids.dtype, jnp.integer):
            raise shape_error(self, f"integer ids in [0, {self.num_embeddings})", ids)
        n = self.num_embeddings
        # concrete ids (also constants inside a trace)
        if not isinstance(ids, jax.core.Tracer) and ids.size:
            host = np.asarray(ids)
            low, high = int(host.min()), int(host.max())
            if low < 0 or high >= n:
                raise ValueError(
                    f"{self.describe()}: ids must be in [0, {n}), got values from {low} to {high}"
                )
        inside = jnp.where((ids >= 0) & (ids < n), ids, n)  # n: out of range, a row of NaN
        return jnp.take(self.weight, inside, axis=0, mode="fill", fill_value=jnp.nan)
