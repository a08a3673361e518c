"""Dropout (Srivastava et al. 2014): zero each element with probability p, scale the rest by
1 / (1 - p). The key is explicit: `drop(x, key=key)` always drops; inside
`frost.nn.apply(model, x, train=True, key=key)` each Dropout gets its own key; otherwise
(evaluation mode, no key) it is the identity."""

import jax
import jax.numpy as jnp

from frost.nn import context
from frost.nn.module import Module, static


class Dropout(Module):
    """Zero each element with probability `p` and scale the rest by 1 / (1 - p) (Srivastava et al.
    2014, "Dropout: A Simple Way to Prevent Neural Networks from Overfitting").

    Call it as `drop(x)` inside `frost.nn.apply(..., train=True, key=key)`, or as `drop(x,
    key=key)` to drop with a key of your own; otherwise it is the identity. It has no leaves.

    Arguments:
        p: the probability of zeroing an element, in [0, 1) (static).
    """

    p: float = static(0.5)

    def __post_init__(self):
        if not 0.0 <= self.p < 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1), got {self.p}")

    def __call__(self, x: jax.Array, *, key: jax.Array | None = None) -> jax.Array:
        if self.p == 0.0 or (key is None and not context.is_training()):
            return x
        key = context.next_key(self) if key is None else key
        keep = jax.random.bernoulli(key, 1.0 - self.p, x.shape)
        return jnp.where(keep, x / (1.0 - self.p), jnp.zeros_like(x))
