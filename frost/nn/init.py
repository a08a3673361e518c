"""Initialisers: functions of a PRNG key and a shape.

Weights use Frost's layouts: Linear (in, out), Conv (*kernel, in / groups, out). So for any
weight the last axis is fan-out, the one before it fan-in, and the rest the receptive field:

    fan_in = prod(shape[:-1]),  fan_out = prod(shape[:-2]) * shape[-1]

Defaults match PyTorch's layers: Linear and Conv use `kaiming_uniform(a=sqrt(5))`, i.e.
U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (He et al. 2015, "Delving Deep into Rectifiers"), and
their biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)); Embedding uses N(0, 1).
"""

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike


def fans(shape: Sequence[int]) -> tuple[int, int]:
    """Fan-in and fan-out of a weight in Frost's layouts (last axis out, the one before it in).

    Arguments:
        shape: the weight's shape, of rank >= 2, e.g. (in, out) or (*kernel, in / groups, out).

    Returns:
        `(fan_in, fan_out)`: prod(shape[:-1]) and prod(shape[:-2]) * shape[-1].
    """
    if len(shape) < 2:
        raise ValueError(f"fan-in/fan-out need a weight of rank >= 2, got shape {tuple(shape)}")
    receptive = math.prod(shape[:-2])
    return receptive * shape[-2], receptive * shape[-1]


def uniform(
    key: jax.Array, shape: Sequence[int], bound: float, dtype: DTypeLike = jnp.float32
) -> jax.Array:
    """U(-bound, bound).

    Arguments:
        key: a PRNG key (`jax.random.key`).
        shape: the array's shape.
        bound: the half-width of the interval.
        dtype: a float dtype.

    Returns:
        An array of `shape` and `dtype`.
    """
    return jax.random.uniform(key, shape, dtype, -bound, bound)


def _gain(nonlinearity: str, a: float = 0.0) -> float:
    return {
        "linear": 1.0,
        "sigmoid": 1.0,
        "tanh": 5.0 / 3,
        "relu": math.sqrt(2.0),
        "leaky_relu": math.sqrt(2.0 / (1 + a * a)),
    }[nonlinearity]


def kaiming_uniform(
    key: jax.Array,
    shape: Sequence[int],
    a: float = math.sqrt(5),
    nonlinearity: str = "leaky_relu",
    mode: str = "fan_in",
    dtype: DTypeLike = jnp.float32,
) -> jax.Array:
    """He et al. 2015: U(-b, b), b = gain * sqrt(3 / fan). PyTorch's default for Linear/Conv.

    Arguments:
        key: a PRNG key (`jax.random.key`).
        shape: the weight's shape, of rank >= 2 (see `fans`).
        a: the negative slope of a leaky ReLU, used by its gain; sqrt(5) gives PyTorch's default
            U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
        nonlinearity: the gain's activation: "linear", "sigmoid", "tanh", "relu" or "leaky_relu".
        mode: "fan_in" (preserves the forward pass's variance) or "fan_out" (the backward's).
        dtype: a float dtype.

    Returns:
        An array of `shape` and `dtype`.
    """
    fan = fans(shape)[0 if mode == "fan_in" else 1]
    return uniform(key, shape, _gain(nonlinearity, a) * math.sqrt(3.0 / fan), dtype)


def kaiming_normal(
    key: jax.Array,
    shape: Sequence[int],
    a: float = 0.0,
    nonlinearity: str = "relu",
    mode: str = "fan_in",
    dtype: DTypeLike = jnp.float32,
) -> jax.Array:
    """He et al. 2015: N(0, std^2), std = gain / sqrt(fan).

    Arguments:
        key: a PRNG key (`jax.random.key`).
        shape: the weight's shape, of rank >= 2 (see `fans`).
        a: the negative slope of a leaky ReLU, used when `nonlinearity` is "leaky_relu".
        nonlinearity: the gain's activation: "linear", "sigmoid", "tanh", "relu" or "leaky_relu".
        mode: "fan_in" (preserves the forward pass's variance) or "fan_out" (the backward's).
        dtype: a float dtype.

    Returns:
        An array of `shape` and `dtype`.
    """
    fan = fans(shape)[0 if mode == "fan_in" else 1]
    return _gain(nonlinearity, a) / math.sqrt(fan) * jax.random.normal(key, shape, dtype)


def xavier_uniform(
    key: jax.Array, shape: Sequence[int], gain: float = 1.0, dtype: DTypeLike = jnp.float32
) -> jax.Array:
    """Glorot & Bengio 2010: U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)).

    Arguments:
        key: a PRNG key (`jax.random.key`).
        shape: the weight's shape, of rank >= 2 (see `fans`).
        gain: a factor on the bound.
        dtype: a float dtype.

    Returns:
        An array of `shape` and `dtype`.
    """
    fan_in, fan_out = fans(shape)
    return uniform(key, shape, gain * math.sqrt(6.0 / (fan_in + fan_out)), dtype)


def truncated_normal(
    key: jax.Array,
    shape: Sequence[int],
    std: float = 1.0,
    lower: float = -2.0,
    upper: float = 2.0,
    dtype: DTypeLike = jnp.float32,
) -> jax.Array:
    """N(0, std^2) truncated to [lower, upper] in absolute units, like
    torch.nn.init.trunc_normal_.

    Arguments:
        key: a PRNG key (`jax.random.key`).
        shape: the array's shape.
        std: the standard deviation before truncation.
        lower: the smallest value, in the array's units (not in standard deviations).
        upper: the largest value, in the array's units.
        dtype: a float dtype.

    Returns:
        An array of `shape` and `dtype`.
    """
    return std * jax.random.truncated_normal(key, lower / std, upper / std, shape, dtype)


def bias_uniform(
    key: jax.Array, shape: Sequence[int], fan_in: int, dtype: DTypeLike = jnp.float32
) -> jax.Array:
    """PyTorch's default bias: U(-1/sqrt(fan_in), 1/sqrt(fan_in)); zeros when fan_in is 0.

    Arguments:
        key: a PRNG key (`jax.random.key`).
        shape: the bias's shape, e.g. (out,).
        fan_in: the fan-in of the layer's weight (see `fans`).
        dtype: a float dtype.

    Returns:
        An array of `shape` and `dtype`.
    """
    return uniform(key, shape, 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0, dtype)
