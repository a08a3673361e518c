"""Linear (fully connected) layer: y = x @ W + b."""

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from frost.nn import init
from frost.nn.module import Module, expand_to, shape_error, static


def check_float_input(layer: Module, x, weight, expected: str) -> None:
    """Shared input check: a floating array whose dtype matches the layer's weights (if it has
    any)."""
    if not hasattr(x, "dtype") or not jnp.issubdtype(x.dtype, jnp.floating):
        raise shape_error(layer, f"{expected} of a floating dtype", x)
    if weight is not None and x.dtype != weight.dtype:
        raise shape_error(
            layer,
            f"{expected} of dtype {weight.dtype.name} (the weights' dtype; cast the input, "
            "or the model with jax.tree.map(lambda a: a.astype(...), model))",
            x,
        )


def check_input(layer: Module, x, rank_ok: bool, channels: int, expected: str) -> None:
    """The channels-last layers' input check: a rank that passes the caller's test (`rank_ok`), a
    last axis of `channels`, then `check_float_input` against the layer's weights."""
    if not rank_ok or x.shape[-1] != channels:
        raise shape_error(layer, expected, x)
    check_float_input(layer, x, layer.weight, expected)


class Linear(Module):
    """A fully connected layer, y = x @ weight + bias, over the last axis: (..., in_features) ->
    (..., out_features).

    Weights are initialised as PyTorch's `torch.nn.Linear`: `init.kaiming_uniform` (a = sqrt(5)),
    i.e. U(-1/sqrt(in_features), 1/sqrt(in_features)), and so is the bias. The leaves are
    `weight` (in_features, out_features), the transpose of PyTorch's layout, and `bias`
    (out_features,) or None; the two sizes are static fields.

    Arguments:
        in_features: the size of the input's last axis.
        out_features: the size of the output's last axis.
        use_bias: whether to add a learned bias.
        key: a PRNG key (`jax.random.key`) for the initial weights.
        dtype: the parameters' dtype; inputs must have it too.
    """

    weight: jax.Array  # (in_features, out_features)
    bias: jax.Array | None  # (out_features,)
    in_features: int = static()
    out_features: int = static()

    def __init__(
        self,
        in_features: int,
        out_features: int,
        use_bias: bool = True,
        *,
        key: jax.Array,
        dtype: DTypeLike = jnp.float32,
    ):
        if in_features < 1 or out_features < 1:
            raise ValueError(
                f"Linear: in_features={in_features} and out_features={out_features} must be >= 1"
            )
        wkey, bkey = jax.random.split(key)
        self.weight = init.kaiming_uniform(wkey, (in_features, out_features), dtype=dtype)
        self.bias = (
            init.bias_uniform(bkey, (out_features,), in_features, dtype) if use_bias else None
        )
        self.in_features = in_features
        self.out_features = out_features

    def __call__(self, x):  # (..., in) -> (..., out)
        expected = f"(..., {self.in_features})"
        check_input(self, x, getattr(x, "ndim", 0) >= 1, self.in_features, expected)
        y = x @ self.weight  # (..., out)
        return y if self.bias is None else y + expand_to(self.bias, y.ndim)
