"""Pooling, channels last: MaxPool, AvgPool (zero padding counted, as PyTorch's default), and
GlobalAvgPool (mean over all spatial axes)."""

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from frost.nn.conv import _tuple
from frost.nn.module import Module, shape_error, static


class _Pool(Module):
    """A window reduction over the spatial axes; the sizes are static tuples, one entry per axis."""

    kernel_size: tuple = static()
    stride: tuple = static()
    padding: tuple = static()

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        num_spatial_dims: int = 2,
    ):
        n = num_spatial_dims
        self.kernel_size = _tuple(kernel_size, n, "kernel_size")
        self.stride = self.kernel_size if stride is None else _tuple(stride, n, "stride")
        self.padding = _tuple(padding, n, "padding", low=0)

    def _reduce(self, x, init, op):  # (N, *spatial, C) -> (N, *spatial', C)
        n = len(self.kernel_size)
        if getattr(x, "ndim", 0) != n + 2:
            raise shape_error(self, f"(N, {n} spatial axes, C)", x)
        pads = ((0, 0),) + tuple((p, p) for p in self.padding) + ((0, 0),)
        return jax.lax.reduce_window(
            x, np.array(init, x.dtype), op, (1, *self.kernel_size, 1), (1, *self.stride, 1), pads
        )


class MaxPool(_Pool):
    """The maximum of each window: (N, *spatial, C) -> (N, *spatial', C), as `torch.nn.MaxPool2d`
    with the channels last (padding is -inf, so it never wins). It has no leaves.

    Arguments:
        kernel_size: the window, an int (every spatial axis) or one int per spatial axis.
        stride: the step between windows, an int or one per spatial axis; None: the window.
        padding: added at both ends of each spatial axis, an int or one per spatial axis.
        num_spatial_dims: the number of spatial axes (1: NWC, 2: NHWC, 3: NDHWC).
    """

    def __call__(self, x: jax.Array) -> jax.Array:
        return self._reduce(x, -jnp.inf, jax.lax.max)


class AvgPool(_Pool):
    """The mean of each window: (N, *spatial, C) -> (N, *spatial', C), as `torch.nn.AvgPool2d`
    with the channels last. Padding is zeros and counts in the mean (PyTorch's default,
    count_include_pad=True). It has no leaves.

    Arguments:
        kernel_size: the window, an int (every spatial axis) or one int per spatial axis.
        stride: the step between windows, an int or one per spatial axis; None: the window.
        padding: zeros added at both ends of each spatial axis, an int or one per spatial axis.
        num_spatial_dims: the number of spatial axes (1: NWC, 2: NHWC, 3: NDHWC).
    """

    def __call__(self, x: jax.Array) -> jax.Array:
        return self._reduce(x, 0.0, jax.lax.add) / math.prod(self.kernel_size)


class GlobalAvgPool(Module):
    """The mean over all spatial axes: (N, *spatial, C) -> (N, C). It takes no arguments."""

    def __call__(self, x: jax.Array) -> jax.Array:  # (N, *spatial, C) -> (N, C)
        if getattr(x, "ndim", 0) < 3:
            raise shape_error(self, "(N, *spatial, C)", x)
        return jnp.mean(x, axis=tuple(range(1, x.ndim - 1)))
