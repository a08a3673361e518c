"""Dropout (Srivastava et al. 2014): zero each element with probability p, scale the rest by
1 / (1 - p). The key is explicit: `drop(x, key=key)` always drops; inside
`frost.nn.apply(model, x, train=True, key=key)` each Dropout gets its own key; otherwise
(evaluation mode, no key) it is the identity."""

import jax
import jax.numpy as jnp

from frost.nn import context
from frost.nn.module import Module, static


class Dropout(Module):
    p: float = static(0.5)

    def __post_init__(self):
        if not 0.0 <= self.p < 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1), got {self.p}")

    def __call__(self, x, *, key=None):
        if self.p == 0.0 or (key is None and not context.is_training()):
            return x
        key = context.next_key(self) if key is None else key
        keep = jax.random.bernoulli(key, 1.0 - self.p, x.shape)
        return jnp.where(keep, x / (1.0 - self.p), jnp.zeros_like(x))
