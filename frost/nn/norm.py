"""Normalisation layers, channels last: BatchNorm, LayerNorm, RMSNorm, GroupNorm.

BatchNorm (Ioffe & Szegedy 2015) keeps running statistics as buffers. In training mode (inside
`frost.nn.apply(..., train=True)`) it normalises with the batch statistics and records updated
running statistics, which `apply` writes into the returned model; otherwise it uses the running
statistics. Updates follow PyTorch: running = (1 - momentum) * running + momentum * batch, with
the unbiased batch variance for the running estimate.

Mixed precision: every layer here computes its statistics and the normalisation in float32 (at
least), whatever the input's dtype, and returns the input's dtype; BatchNorm's running
statistics keep their own dtype (frost.nn.precision leaves buffers in float32). Centering a
bfloat16 input in bfloat16 loses the signal when the mean is large against the spread.
"""

import jax
import jax.numpy as jnp

from frost.nn import context
from frost.nn.linear import check_float_input, check_input
from frost.nn.module import Module, buffer, expand_to, shape_error, static


def _f32(x):
    return x.astype(jnp.float32) if x.dtype.itemsize < 4 else x  # bf16/fp16 -> fp32; fp32/fp64 kept


def _scale_shift(shape, dtype, scale: bool, shift: bool) -> tuple:
    """The affine parameters (weight, bias): ones and zeros of `shape`, each None when not
    wanted."""
    return jnp.ones(shape, dtype) if scale else None, jnp.zeros(shape, dtype) if shift else None


def _affine(y, weight, bias, dtype):  # y in float32 -> y * weight + bias in `dtype`
    if weight is not None:
        y = y * expand_to(weight, y.ndim).astype(y.dtype)
    if bias is not None:
        y = y + expand_to(bias, y.ndim).astype(y.dtype)
    return y.astype(dtype)


def _check_channels(layer, x, channels: int) -> None:
    """BatchNorm/GroupNorm input check: (N, ..., channels), a float array of the weights' dtype."""
    check_input(layer, x, getattr(x, "ndim", 0) >= 2, channels, f"(N, ..., {channels})")


def _check_trailing(layer, x) -> tuple:
    """LayerNorm/RMSNorm input check: x ends with `layer.shape`; returns those trailing axes."""
    k = len(layer.shape)
    if getattr(x, "ndim", 0) < k or tuple(x.shape[x.ndim - k :]) != layer.shape:
        raise shape_error(layer, f"(..., {', '.join(map(str, layer.shape))})", x)
    check_float_input(layer, x, layer.weight, "a floating array")
    return tuple(range(x.ndim - k, x.ndim))


class BatchNorm(Module):
    weight: jax.Array | None  # (C,)
    bias: jax.Array | None  # (C,)
    running_mean: jax.Array = buffer()  # (C,)
    running_var: jax.Array = buffer()  # (C,)
    num_features: int = static()
    eps: float = static()
    momentum: float = static()

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float = 0.1,
        affine: bool = True,
        dtype=jnp.float32,
    ):
        self.weight, self.bias = _scale_shift(num_features, dtype, affine, affine)
        self.running_mean = jnp.zeros(num_features, dtype)
        self.running_var = jnp.ones(num_features, dtype)
        self.num_features, self.eps, self.momentum = num_features, eps, momentum

    def __call__(self, x):  # (N, ..., C) -> (N, ..., C)
        _check_channels(self, x, self.num_features)
        axes, xf = tuple(range(x.ndim - 1)), _f32(x)
        if context.is_training():
            mean, var = jnp.mean(xf, axes), jnp.var(xf, axes)  # (C,), biased
            n, m, dtype = x.size // self.num_features, self.momentum, self.running_mean.dtype
            context.record(
                self,
                running_mean=((1 - m) * _f32(self.running_mean) + m * mean).astype(dtype),
                running_var=(
                    (1 - m) * _f32(self.running_var) + m * var * (n / max(n - 1, 1))
                ).astype(dtype),
            )
        else:
            mean, var = _f32(self.running_mean), _f32(self.running_var)
        y = (xf - expand_to(mean, x.ndim)) * expand_to(jax.lax.rsqrt(var + self.eps), x.ndim)
        return _affine(y, self.weight, self.bias, x.dtype)


class LayerNorm(Module):
    """Ba et al. 2016: normalise over the trailing `shape` axes."""

    weight: jax.Array | None
    bias: jax.Array | None
    shape: tuple = static()
    eps: float = static()

    def __init__(
        self,
        shape,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        use_bias: bool = True,
        dtype=jnp.float32,
    ):
        self.shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self.weight, self.bias = _scale_shift(
            self.shape, dtype, elementwise_affine, elementwise_affine and use_bias
        )
        self.eps = eps

    def __call__(self, x):  # (..., *shape) -> same
        axes, xf = _check_trailing(self, x), _f32(x)
        mean, var = jnp.mean(xf, axes, keepdims=True), jnp.var(xf, axes, keepdims=True)
        return _affine((xf - mean) * jax.lax.rsqrt(var + self.eps), self.weight, self.bias, x.dtype)


class RMSNorm(Module):
    """Zhang & Sennrich 2019: x / sqrt(mean(x^2) + eps) * weight. eps=None means the dtype's
    machine epsilon, as in torch.nn.RMSNorm."""

    weight: jax.Array | None
    shape: tuple = static()
    eps: float | None = static()

    def __init__(
        self, shape, eps: float | None = None, elementwise_affine: bool = True, dtype=jnp.float32
    ):
        self.shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self.weight = jnp.ones(self.shape, dtype) if elementwise_affine else None
        self.eps = eps

    def __call__(self, x):  # (..., *shape) -> same
        axes, xf = _check_trailing(self, x), _f32(x)
        eps = jnp.finfo(x.dtype).eps if self.eps is None else self.eps
        ms = jnp.mean(jnp.square(xf), axes, keepdims=True)
        return _affine(xf * jax.lax.rsqrt(ms + eps), self.weight, None, x.dtype)


class GroupNorm(Module):
    """Wu & He 2018: normalise each sample over (spatial axes, channels within a group)."""

    weight: jax.Array | None  # (C,)
    bias: jax.Array | None  # (C,)
    num_groups: int = static()
    num_channels: int = static()
    eps: float = static()

    def __init__(
        self,
        num_groups: int,
        num_channels: int,
        eps: float = 1e-5,
        affine: bool = True,
        dtype=jnp.float32,
    ):
        if num_channels % num_groups:
            raise ValueError(
                f"GroupNorm: num_groups={num_groups} must divide num_channels={num_channels}"
            )
        self.weight, self.bias = _scale_shift(num_channels, dtype, affine, affine)
        self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps

    def __call__(self, x):  # (N, ..., C) -> same
        _check_channels(self, x, self.num_channels)
        # (N, ..., G, C/G)
        g = _f32(x).reshape(*x.shape[:-1], self.num_groups, self.num_channels // self.num_groups)
        axes = tuple(range(1, g.ndim - 2)) + (g.ndim - 1,)
        mean, var = jnp.mean(g, axes, keepdims=True), jnp.var(g, axes, keepdims=True)
        y = ((g - mean) * jax.lax.rsqrt(var + self.eps)).reshape(x.shape)
        return _affine(y, self.weight, self.bias, x.dtype)
