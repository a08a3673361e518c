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

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from frost.nn import context
from frost.nn.linear import check_float_input, check_input
from frost.nn.module import Module, buffer, expand_to, shape_error, static


def _f32(x):
    return x.astype(jnp.float32) if x.dtype.itemsize < 4 else x  # bf16/fp16 -> fp32; fp32/fp64 kept


def _scale_shift(shape, dtype, scale: bool, shift: bool) -> tuple:
    """The affine parameters (weight, bias): ones and zeros of `shape`, each None when not
    wanted."""
    weight = jnp.ones(shape, dtype) if scale else None
    bias = jnp.zeros(shape, dtype) if shift else None
    return weight, bias


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
    """Batch normalisation over every axis but the last (Ioffe & Szegedy 2015, "Batch
    Normalization: Accelerating Deep Network Training by Reducing Internal Covariate Shift"):
    (N, ..., C) -> (N, ..., C), as `torch.nn.BatchNorm{1,2,3}d` with the channels last.

    In training mode (inside `frost.nn.apply(..., train=True)`) it normalises with the batch's
    mean and biased variance and records new running statistics, which `apply` writes into the
    model it returns; otherwise it normalises with the running statistics. The leaves are
    `weight` and `bias` (C,) (ones and zeros; None without `affine`) and the buffers
    `running_mean` and `running_var` (C,) (zeros and ones); the other fields are static.

    Arguments:
        num_features: C, the size of the input's last axis.
        eps: added to the variance before its square root.
        momentum: the weight of the batch in the running statistics' update, running =
            (1 - momentum) * running + momentum * batch (PyTorch's convention).
        affine: whether to learn a per-channel scale (`weight`) and shift (`bias`).
        dtype: the parameters' and buffers' dtype.
    """

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
        dtype: DTypeLike = jnp.float32,
    ):
        self.weight, self.bias = _scale_shift(num_features, dtype, affine, affine)
        self.running_mean = jnp.zeros(num_features, dtype)
        self.running_var = jnp.ones(num_features, dtype)
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum

    def __call__(self, x: jax.Array) -> jax.Array:  # (N, ..., C) -> (N, ..., C)
        _check_channels(self, x, self.num_features)
        axes = tuple(range(x.ndim - 1))  # every axis but the channels
        xf = _f32(x)
        if context.is_training():
            mean = jnp.mean(xf, axes)  # (C,)
            var = jnp.var(xf, axes)  # (C,), biased
            n = x.size // self.num_features  # values per channel
            m = self.momentum
            dtype = self.running_mean.dtype
            context.record(
                self,
                running_mean=((1 - m) * _f32(self.running_mean) + m * mean).astype(dtype),
                running_var=(
                    (1 - m) * _f32(self.running_var) + m * var * (n / max(n - 1, 1))
                ).astype(dtype),
            )
        else:
            mean = _f32(self.running_mean)
            var = _f32(self.running_var)
        y = (xf - expand_to(mean, x.ndim)) * expand_to(jax.lax.rsqrt(var + self.eps), x.ndim)
        return _affine(y, self.weight, self.bias, x.dtype)


class LayerNorm(Module):
    """Layer normalisation over the trailing `shape` axes (Ba et al. 2016, "Layer
    Normalization"): (..., *shape) -> (..., *shape), as `torch.nn.LayerNorm`.

    Each slice over the trailing axes is centred by its mean, divided by sqrt(variance + eps)
    (the biased variance), then scaled by `weight` and shifted by `bias`. The leaves are `weight`
    and `bias`, each of `shape` (ones and zeros; None when not learned); `shape` and `eps` are
    static.

    Arguments:
        shape: the normalised trailing axes' sizes, an int (the last axis) or a sequence.
        eps: added to the variance before its square root.
        elementwise_affine: whether to learn `weight` (and `bias`, unless `use_bias` is False).
        use_bias: whether to learn `bias` when `elementwise_affine` is True.
        dtype: the parameters' dtype; inputs must have it too.
    """

    weight: jax.Array | None
    bias: jax.Array | None
    shape: tuple = static()
    eps: float = static()

    def __init__(
        self,
        shape: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        use_bias: bool = True,
        dtype: DTypeLike = jnp.float32,
    ):
        self.shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self.weight, self.bias = _scale_shift(
            self.shape, dtype, elementwise_affine, elementwise_affine and use_bias
        )
        self.eps = eps

    def __call__(self, x: jax.Array) -> jax.Array:  # (..., *shape) -> same
        axes = _check_trailing(self, x)
        xf = _f32(x)
        mean = jnp.mean(xf, axes, keepdims=True)
        var = jnp.var(xf, axes, keepdims=True)
        return _affine((xf - mean) * jax.lax.rsqrt(var + self.eps), self.weight, self.bias, x.dtype)


class RMSNorm(Module):
    """Root-mean-square normalisation over the trailing `shape` axes (Zhang & Sennrich 2019, "Root
    Mean Square Layer Normalization"): x / sqrt(mean(x^2) + eps) * weight, as `torch.nn.RMSNorm`.

    Unlike LayerNorm it neither centres nor shifts. The leaf is `weight` of `shape` (ones; None
    without `elementwise_affine`); `shape` and `eps` are static.

    Arguments:
        shape: the normalised trailing axes' sizes, an int (the last axis) or a sequence.
        eps: added to the mean square; None means the input dtype's machine epsilon, as in
            torch.nn.RMSNorm.
        elementwise_affine: whether to learn a scale, `weight`.
        dtype: the parameters' dtype; inputs must have it too.
    """

    weight: jax.Array | None
    shape: tuple = static()
    eps: float | None = static()

    def __init__(
        self,
        shape: int | Sequence[int],
        eps: float | None = None,
        elementwise_affine: bool = True,
        dtype: DTypeLike = jnp.float32,
    ):
        self.shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self.weight = jnp.ones(self.shape, dtype) if elementwise_affine else None
        self.eps = eps

    def __call__(self, x: jax.Array) -> jax.Array:  # (..., *shape) -> same
        axes = _check_trailing(self, x)
        xf = _f32(x)
        eps = jnp.finfo(x.dtype).eps if self.eps is None else self.eps
        ms = jnp.mean(jnp.square(xf), axes, keepdims=True)
        return _affine(xf * jax.lax.rsqrt(ms + eps), self.weight, None, x.dtype)


class GroupNorm(Module):
    """Group normalisation (Wu & He 2018, "Group Normalization"): (N, ..., C) -> (N, ..., C), as
    `torch.nn.GroupNorm` with the channels last.

    The C channels are split into `num_groups` groups of consecutive channels; each sample is
    normalised over its spatial axes and the channels of one group, then scaled and shifted per
    channel. The leaves are `weight` and `bias` (C,) (ones and zeros; None without `affine`); the
    other fields are static.

    Arguments:
        num_groups: the number of groups; it must divide `num_channels`.
        num_channels: C, the size of the input's last axis.
        eps: added to the variance before its square root.
        affine: whether to learn a per-channel scale (`weight`) and shift (`bias`).
        dtype: the parameters' dtype; inputs must have it too.
    """

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
        dtype: DTypeLike = jnp.float32,
    ):
        if num_channels % num_groups:
            raise ValueError(
                f"GroupNorm: num_groups={num_groups} must divide num_channels={num_channels}"
            )
        self.weight, self.bias = _scale_shift(num_channels, dtype, affine, affine)
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps

    def __call__(self, x: jax.Array) -> jax.Array:  # (N, ..., C) -> same
        _check_channels(self, x, self.num_channels)
        # (N, ..., G, C/G)
        g = _f32(x).reshape(*x.shape[:-1], self.num_groups, self.num_channels // self.num_groups)
        axes = tuple(range(1, g.ndim - 2)) + (g.ndim - 1,)
        mean = jnp.mean(g, axes, keepdims=True)
        var = jnp.var(g, axes, keepdims=True)
        y = ((g - mean) * jax.lax.rsqrt(var + self.eps)).reshape(x.shape)
        return _affine(y, self.weight, self.bias, x.dtype)
