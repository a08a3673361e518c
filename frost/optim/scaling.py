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

from typing import NamedTuple

import jax
import jax.numpy as jnp

from frost.optim.base import GradientTransformation, call_update
from frost.optim.transforms import all_finite, wide
from frost.tree import PyTree, where


class LossScale(NamedTuple):
    """Dynamic loss-scaling state, a PyTree of scalars.

    Attributes:
        scale: () float32, the factor the loss is multiplied by.
        good_steps: () int32, finite steps since the scale last changed.
        skipped: () int32, steps skipped for overflow so far.
    """

    scale: jax.Array
    good_steps: jax.Array
    skipped: jax.Array


def loss_scale(initial: float = 2.0**15) -> LossScale:
    """A fresh loss-scaling state.

    Arguments:
        initial: the first scale (2^15, as NVIDIA apex and jmp).

    Returns:
        A LossScale with no good or skipped steps.
    """
    return LossScale(jnp.float32(initial), jnp.int32(0), jnp.int32(0))


def scale_loss(state: LossScale, loss: jax.Array) -> jax.Array:
    """The loss times the current scale, to differentiate instead of the loss.

    Arguments:
        state: the loss-scaling state.
        loss: () float array.

    Returns:
        () array of `loss`'s dtype.
    """
    return loss * state.scale.astype(loss.dtype)


def unscale(state: LossScale, grads: PyTree) -> PyTree:
    """Scaled gradients -> true gradients, in float32 (at least).

    Arguments:
        state: the loss-scaling state the gradients were scaled with.
        grads: the gradients of `scale_loss(state, loss)`.

    Returns:
        The gradients divided by the scale, shaped like `grads`, each leaf at least float32.
    """

    def leaf(g):
        g = g.astype(wide(g.dtype))
        return g / state.scale.astype(g.dtype)

    return jax.tree.map(leaf, grads)


def adjust(
    state: LossScale,
    finite: jax.Array,
    period: int = 2000,
    factor: float = 2.0,
    min_scale: float = 1.0,
) -> LossScale:
    """The scale after a step: on overflow (`finite` False) divide the scale by `factor` (not below
    `min_scale`) and count a skipped step; after `period` finite steps in a row multiply it.

    Arguments:
        state: the loss-scaling state before the step.
        finite: () bool, whether the step's gradients were all finite (`all_finite`).
        period: finite steps in a row before the scale grows.
        factor: the scale's growth and shrink factor.
        min_scale: the smallest scale.

    Returns:
        The LossScale after the step.
    """
    grown = state.good_steps + 1 >= period
    on_finite = jnp.where(grown, state.scale * factor, state.scale)
    on_overflow = jnp.maximum(state.scale / factor, min_scale)
    scale = jnp.where(finite, on_finite, on_overflow)
    good = jnp.where(finite & ~grown, state.good_steps + 1, 0)
    skipped = state.skipped + (~finite).astype(jnp.int32)
    return LossScale(scale.astype(jnp.float32), good.astype(jnp.int32), skipped)


class ScaledState(NamedTuple):
    """The state of `dynamic_scaling`.

    Attributes:
        inner: the wrapped optimizer's state, unchanged on a skipped step.
        scale: the LossScale; the training step multiplies the loss by `scale.scale`.
    """

    inner: PyTree
    scale: LossScale


def dynamic_scaling(
    inner: GradientTransformation, initial: float = 2.0**15, period: int = 2000
) -> GradientTransformation:
    """`inner` for loss-scaled gradients: divide them by the scale in this state, and on overflow
    return zero updates with inner's state unchanged; then `adjust` the scale.

    The training step multiplies the loss by `find_states(opt_state, ScaledState)[0].scale.scale`
    before `grad`.

    Arguments:
        inner: the optimizer to wrap.
        initial: the first scale.
        period: finite steps in a row before the scale doubles.

    Returns:
        A GradientTransformation with a `ScaledState`; extra update arguments reach `inner`.
    """

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
