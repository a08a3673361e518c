"""Sequential, Lambda, and activations as modules (so they can sit in a Sequential)."""

import jax
import jax.numpy as jnp

from frost.nn.module import Module, static


class Lambda(Module):
    """Wrap a parameter-free function, e.g. `Lambda(jnp.tanh)`; the function is static."""

    fn: object = static()

    def __call__(self, x):
        return self.fn(x)


class Sequential(Module):
    """Apply layers in order. Plain callables are wrapped in `Lambda`."""

    layers: tuple

    def __init__(self, *layers):
        self.layers = tuple(
            layer if isinstance(layer, Module) else Lambda(layer) for layer in layers
        )

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

    def __getitem__(self, i):
        return Sequential(*self.layers[i]) if isinstance(i, slice) else self.layers[i]

    def __len__(self):
        return len(self.layers)


def gelu(x) -> jax.Array:
    """Exact GELU, x * Phi(x) (Hendrycks & Gimpel 2016), PyTorch's default; `jax.nn.gelu` defaults
    to the tanh approximation. Written with erf, as PyTorch does: jax.nn.gelu(approximate=False)
    uses erfc, which XLA's CPU backend computes 3x slower (equal within 1e-6)."""
    return 0.5 * x * (1 + jax.lax.erf(x * 0.7071067811865476))


relu = jax.nn.relu
silu = jax.nn.silu
sigmoid = jax.nn.sigmoid
tanh = jnp.tanh
softmax = jax.nn.softmax
log_softmax = jax.nn.log_softmax


def _activation(name, fn):
    doc = f"{name} activation as a module."
    return type(name, (Module,), {"__call__": lambda self, x: fn(x), "__doc__": doc})


ReLU = _activation("ReLU", relu)
GELU = _activation("GELU", gelu)
SiLU = _activation("SiLU", silu)
Sigmoid = _activation("Sigmoid", sigmoid)
Tanh = _activation("Tanh", tanh)
Identity = _activation("Identity", lambda x: x)


class Flatten(Module):
    """(N, ...) -> (N, prod(...))."""

    def __call__(self, x):
        return x.reshape(x.shape[0], -1)
