"""Dynamic loss scaling for float16 training (Micikevicius et al. 2018, "Mixed Precision
Training"), as an optimizer wrapper; frost.nn.precision has the dtype policy.

float16 has bfloat16's precision plus 3 bits but a narrow range: gradients below 6e-8 flush to
zero. Dynamic loss scaling multiplies the loss by a large scale before the backward pass,
divides the (float32) gradients by it after, halves the scale and skips the step when the
gradients overflow, and doubles it after `period` good steps (as NVIDIA apex and DeepMind jmp):

    grads = jax.grad(lambda m: scale_loss(scaler, loss_fn(m)))(model)
    grads = unscale(scaler, grads)
    finite = frost.optim.all_finite(grads)
    scaler = adjust(scaler, finite)          # apply the update only where `finite`

`dynamic_scaling(optimizer)` keeps that state in the optimizer's (so it is checkpointed with it)
and does the unscaling, skipping and adjusting; frost.train's step finds it there and scales
the loss (`--precision fp16`).
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from frost.optim.base import GradientTransformation, call_update
from frost.optim.transforms import all_finite, wide
from frost.tree import where


class LossScale(NamedTuple):
    """Dynamic loss-scaling state, a PyTree of scalars: the scale, good steps since the last change,
    and the number of steps skipped for overflow."""

    scale: jax.Array
    good_steps: jax.Array
    skipped: jax.Array


def loss_scale(initial: float = 2.0**15) -> LossScale:
    return LossScale(jnp.float32(initial), jnp.int32(0), jnp.int32(0))


def scale_loss(state: LossScale, loss) -> jax.Array:
    return loss * state.scale.astype(loss.dtype)


def unscale(state: LossScale, grads) -> Any:
    """Scaled gradients -> true gradients, in float32 (at least)."""

    def leaf(g):
        g = g.astype(wide(g.dtype))
        return g / state.scale.astype(g.dtype)

    return jax.tree.map(leaf, grads)


def adjust(
    state: LossScale, finite, period: int = 2000, factor: float = 2.0, min_scale: float = 1.0
) -> LossScale:
    """After a step: on overflow (`finite` False) divide the scale by `factor` (not below
    `min_scale`) and count a skipped step; after `period` finite steps in a row multiply it."""
    grown = state.good_steps + 1 >= period
    on_finite = jnp.where(grown, state.scale * factor, state.scale)
    on_overflow = jnp.maximum(state.scale / factor, min_scale)
    scale = jnp.where(finite, on_finite, on_overflow)
    good = jnp.where(finite & ~grown, state.good_steps + 1, 0)
    skipped = state.skipped + (~finite).astype(jnp.int32)
    return LossScale(scale.astype(jnp.float32), good.astype(jnp.int32), skipped)


class ScaledState(NamedTuple):
    inner: Any
    scale: LossScale


def dynamic_scaling(inner, initial: float = 2.0**15, period: int = 2000) -> GradientTransformation:
    """`inner` for loss-scaled gradients: divide them by the scale in this state, and on overflow
    return zero updates with inner's state unchanged; then `adjust` the scale. The training step
    multiplies the loss by `find_states(opt_state, ScaledState)[0].scale.scale` before `grad`."""

    def update(grads, state, params=None, **extra_args):
        grads = unscale(state.scale, grads)
        ok = all_finite(grads)
        out, inner_state = call_update(inner, grads, state.inner, params, **extra_args)
        out = where(ok, out, jax.tree.map(jnp.zeros_like, out))
        scale = adjust(state.scale, ok, period)
        return out, ScaledState(where(ok, inner_state, state.inner), scale)

    return GradientTransformation(
        lambda params: ScaledState(inner.init(params), loss_scale(initial)), update
    )
