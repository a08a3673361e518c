"""N-dimensional convolution, channels last (NWC, NHWC, NDHWC).

Weight layout is (*kernel, in_channels / groups, out_channels) ("HWIO"), the layout XLA prefers.
Padding is an int, a tuple of ints (one per spatial axis), a tuple of (low, high) pairs,
or "SAME" / "VALID".

The lowering is `lax.conv_general_dilated` (cuDNN on a GPU, XLA's own kernels on a CPU).
`benchmarks/conv.py` measures im2col + matmul and Winograd F(2x2, 3x3) / F(4x4, 3x3) beside it
on a CPU: none is faster across the ResNet's layers (README, "Where the time goes").
"""

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from frost.nn import init
from frost.nn.linear import check_input
from frost.nn.module import Module, expand_to, static

_SPATIAL = {1: "W", 2: "HW", 3: "DHW"}
# an int, one per spatial axis (ints or (low, high) pairs), or "SAME" / "VALID"
Padding = int | str | Sequence[int | tuple[int, int]]


def _tuple(value, n: int, name: str, low: int = 1) -> tuple:
    out = (value,) * n if isinstance(value, int) else tuple(value)
    if len(out) != n or not all(isinstance(v, int) and v >= low for v in out):
        raise ValueError(f"{name}={value!r} must be an int >= {low} or a sequence of {n} such ints")
    return out


def _padding(padding, n: int):
    if isinstance(padding, str):
        if padding.upper() not in ("SAME", "VALID"):
            raise ValueError(f"padding={padding!r}: use an int, a tuple, 'SAME' or 'VALID'")
        return padding.upper()
    per_axis = (padding,) * n if isinstance(padding, int) else padding
    pairs = tuple((p, p) if isinstance(p, int) else tuple(p) for p in per_axis)
    if len(pairs) != n or not all(len(p) == 2 and min(p) >= 0 for p in pairs):
        raise ValueError(
            f"padding={padding!r} must be >= 0, one entry (or (low, high) pair) per spatial axis "
            f"({n})"
        )
    return pairs


class Conv(Module):
    """N-dimensional convolution, channels last: (N, *spatial, in_channels) -> (N, *spatial',
    out_channels), as `torch.nn.Conv{1,2,3}d` with the channels moved last.

    Weights are initialised as PyTorch's: `init.kaiming_uniform` (a = sqrt(5)), bias
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)). The leaves are `weight` (*kernel, in_channels / groups,
    out_channels) and `bias` (out_channels,) or None; the sizes below are static fields (stride,
    dilation and kernel_size stored as tuples, one entry per spatial axis).

    ```python
    conv = Conv(3, 16, kernel_size=3, padding=1, key=key)  # (N, 32, 32, 3) -> (N, 32, 32, 16)
    ```

    Arguments:
        in_channels: channels of the input (its last axis).
        out_channels: channels of the output.
        kernel_size: the window, an int (every spatial axis) or one int per spatial axis.
        stride: the step between windows, an int or one per spatial axis.
        padding: zeros added around each spatial axis: an int, one int or (low, high) pair per
            spatial axis, or "SAME" / "VALID".
        dilation: the spacing of the kernel's taps, an int or one per spatial axis.
        groups: split the channels into this many groups convolved separately (it must divide
            both channel counts; groups == in_channels is a depthwise convolution).
        use_bias: whether to add a learned bias.
        num_spatial_dims: 1 (NWC), 2 (NHWC) or 3 (NDHWC).
        key: a PRNG key (`jax.random.key`) for the initial weights.
        dtype: the parameters' dtype; inputs must have it too.
    """

    weight: jax.Array  # (*kernel, in / groups, out)
    bias: jax.Array | None  # (out,)
    in_channels: int = static()
    out_channels: int = static()
    kernel_size: tuple = static()
    stride: tuple = static()
    padding: object = static()
    dilation: tuple = static()
    groups: int = static()

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: Padding = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        use_bias: bool = True,
        num_spatial_dims: int = 2,
        *,
        key: jax.Array,
        dtype: DTypeLike = jnp.float32,
    ):
        n = num_spatial_dims
        if n not in _SPATIAL:
            raise ValueError(f"num_spatial_dims must be 1, 2 or 3, got {n}")
        if min(in_channels, out_channels, groups) < 1:
            raise ValueError(
                f"in_channels={in_channels}, out_channels={out_channels} and groups={groups} must "
                "be >= 1"
            )
        if in_channels % groups or out_channels % groups:
            raise ValueError(
                f"groups={groups} must divide in_channels={in_channels} and "
                f"out_channels={out_channels}"
            )
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.groups = groups
        self.kernel_size = _tuple(kernel_size, n, "kernel_size")
        self.stride = _tuple(stride, n, "stride")
        self.dilation = _tuple(dilation, n, "dilation")
        self.padding = _padding(padding, n)
        wkey, bkey = jax.random.split(key)
        shape = (*self.kernel_size, in_channels // groups, out_channels)
        self.weight = init.kaiming_uniform(wkey, shape, dtype=dtype)
        fan_in = init.fans(shape)[0]
        self.bias = init.bias_uniform(bkey, (out_channels,), fan_in, dtype) if use_bias else None

    def __call__(self, x):  # (N, *spatial, in) -> (N, *spatial', out)
        n = len(self.kernel_size)
        expected = f"(N, {', '.join(_SPATIAL[n])}, {self.in_channels})"
        check_input(self, x, getattr(x, "ndim", 0) == n + 2, self.in_channels, expected)
        layout = "N" + _SPATIAL[n] + "C"
        y = jax.lax.conv_general_dilated(
            x,
            self.weight,
            window_strides=self.stride,
            padding=self.padding,
            rhs_dilation=self.dilation,
            dimension_numbers=(layout, _SPATIAL[n] + "IO", layout),
            feature_group_count=self.groups,
        )
        return y if self.bias is None else y + expand_to(self.bias, y.ndim)


def Conv1d(
    in_channels: int,
    out_channels: int,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] = 1,
    padding: Padding = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
    use_bias: bool = True,
    *,
    key: jax.Array,
    dtype: DTypeLike = jnp.float32,
) -> Conv:
    """A 1-d convolution over (N, W, in_channels) sequences: `Conv` with num_spatial_dims=1.

    Arguments:
        in_channels: channels of the input (its last axis).
        out_channels: channels of the output.
        kernel_size: the window width, an int or a 1-tuple.
        stride: the step between windows.
        padding: zeros added at both ends: an int, a (low, high) pair in a 1-tuple, or "SAME" /
            "VALID".
        dilation: the spacing of the kernel's taps.
        groups: the number of channel groups convolved separately.
        use_bias: whether to add a learned bias.
        key: a PRNG key (`jax.random.key`) for the initial weights.
        dtype: the parameters' dtype.

    Returns:
        A `Conv` taking (N, W, in_channels) to (N, W', out_channels).
    """
    return Conv(
        in_channels,
        out_channels,
        kernel_size,
        stride,
        padding,
        dilation,
        groups,
        use_bias,
        num_spatial_dims=1,
        key=key,
        dtype=dtype,
    )


def Conv2d(
    in_channels: int,
    out_channels: int,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] = 1,
    padding: Padding = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
    use_bias: bool = True,
    *,
    key: jax.Array,
    dtype: DTypeLike = jnp.float32,
) -> Conv:
    """A 2-d convolution over (N, H, W, in_channels) images: `Conv` with num_spatial_dims=2.

    Arguments:
        in_channels: channels of the input (its last axis).
        out_channels: channels of the output.
        kernel_size: the window, an int or (height, width).
        stride: the step between windows, an int or one per spatial axis.
        padding: zeros added around the image: an int, one int or (low, high) pair per spatial
            axis, or "SAME" / "VALID".
        dilation: the spacing of the kernel's taps, an int or one per spatial axis.
        groups: the number of channel groups convolved separately.
        use_bias: whether to add a learned bias.
        key: a PRNG key (`jax.random.key`) for the initial weights.
        dtype: the parameters' dtype.

    Returns:
        A `Conv` taking (N, H, W, in_channels) to (N, H', W', out_channels).
    """
    return Conv(
        in_channels,
        out_channels,
        kernel_size,
        stride,
        padding,
        dilation,
        groups,
        use_bias,
        num_spatial_dims=2,
        key=key,
        dtype=dtype,
    )
