"""Initialisers: functions of a PRNG key and a shape.

Weights use Frost's layouts: Linear (in, out), Conv (*kernel, in / groups, out). So for any
weight the last axis is fan-out, the one before it fan-in, and the rest the receptive field:

    fan_in = prod(shape[:-1]),  fan_out = prod(shape[:-2]) * shape[-1]

Defaults match PyTorch's layers: Linear and Conv use `kaiming_uniform(a=sqrt(5))`, i.e.
U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (He et al. 2015, "Delving Deep into Rectifiers"), and
their biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)); Embedding uses N(0, 1).
"""

import math

import jax
import jax.numpy as jnp


def fans(shape) -> tuple[int, int]:
    if len(shape) < 2:
        raise ValueError(f"fan-in/fan-out need a weight of rank >= 2, got shape {tuple(shape)}")
    receptive = math.prod(shape[:-2])
    return receptive * shape[-2], receptive * shape[-1]


def uniform(key, shape, bound: float, dtype=jnp.float32) -> jax.Array:
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
    key, shape, a: float = math.sqrt(5), nonlinearity="leaky_relu", mode="fan_in", dtype=jnp.float32
) -> jax.Array:
    """He et al. 2015: U(-b, b), b = gain * sqrt(3 / fan). PyTorch's default for Linear/Conv."""
    fan = fans(shape)[0 if mode == "fan_in" else 1]
    return uniform(key, shape, _gain(nonlinearity, a) * math.sqrt(3.0 / fan), dtype)


def kaiming_normal(
    key, shape, a: float = 0.0, nonlinearity="relu", mode="fan_in", dtype=jnp.float32
) -> jax.Array:
    """He et al. 2015: N(0, std^2), std = gain / sqrt(fan)."""
    fan = fans(shape)[0 if mode == "fan_in" else 1]
    return _gain(nonlinearity, a) / math.sqrt(fan) * jax.random.normal(key, shape, dtype)


def xavier_uniform(key, shape, gain: float = 1.0, dtype=jnp.float32) -> jax.Array:
    """Glorot & Bengio 2010: U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = fans(shape)
    return uniform(key, shape, gain * math.sqrt(6.0 / (fan_in + fan_out)), dtype)


def truncated_normal(
    key, shape, std: float = 1.0, lower: float = -2.0, upper: float = 2.0, dtype=jnp.float32
) -> jax.Array:
    """N(0, std^2) truncated to [lower, upper] in absolute units, like
    torch.nn.init.trunc_normal_."""
    return std * jax.random.truncated_normal(key, lower / std, upper / std, shape, dtype)


def bias_uniform(key, shape, fan_in: int, dtype=jnp.float32) -> jax.Array:
    """PyTorch's default bias: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    return uniform(key, shape, 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0, dtype)
