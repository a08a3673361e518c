"""Mixed precision (Micikevicius et al. 2018, "Mixed Precision Training"): parameters kept in
float32, the forward and backward passes computed in bfloat16 or float16, outputs in float32.

    policy = precision.policy("bf16")        # Policy(params=float32, compute=bfloat16,
    output=float32)

    def loss_fn(model, batch, key):          # inside the jitted step: casts are part of the graph
        x, y = policy.cast_to_compute(batch)
        logits, stats = nn.apply(policy.cast_to_compute(model), x, train=True, key=key)
        loss = cross_entropy(policy.cast_to_output(logits), y)
        return loss, (policy.cast_to_param(stats), {})

The gradient of a cast is the cast back, so gradients arrive in the parameters' dtype and the
optimizer's moments stay float32. What stays float32 inside a bfloat16 forward pass:
normalisation statistics (frost.nn.norm computes them in float32 whatever the input), BatchNorm's
running statistics (buffers are never cast), attention scores and softmax (jax.nn's XLA path,
Frost's Pallas kernel and the GPT's KV-cache path accumulate in float32), and the loss
(`cross_entropy` upcasts the logits).

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

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from frost.config import UsageError
from frost.nn.module import buffer_mask
from frost.optim import GradientTransformation, all_finite
from frost.optim.transforms import update_if


def cast(tree, dtype):
    """`tree` with its floating-point leaves as `dtype`; integers, PRNG keys and buffers
    unchanged."""

    def leaf(x, is_buffer):
        floating = hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating)
        return x.astype(dtype) if floating and not is_buffer else x

    return jax.tree.map(leaf, tree, buffer_mask(tree))


@dataclasses.dataclass(frozen=True)
class Policy:
    """The dtypes of a step: `params` stored, `compute` for the forward/backward pass, `output`
    returned."""

    params: Any = jnp.float32
    compute: Any = jnp.bfloat16
    output: Any = jnp.float32

    def cast_to_compute(self, tree):
        return cast(tree, self.compute)

    def cast_to_param(self, tree):
        return cast(tree, self.params)

    def cast_to_output(self, tree):
        return cast(tree, self.output)


POLICIES = {
    "fp32": Policy(compute=jnp.float32),
    "bf16": Policy(compute=jnp.bfloat16),
    "fp16": Policy(compute=jnp.float16),
}


def policy(name: str) -> Policy:
    """The policy of `--precision NAME`: fp32, bf16 or fp16 compute; float32 parameters and
    outputs."""
    if name not in POLICIES:
        raise UsageError(f"--precision {name!r}: choose one of {', '.join(POLICIES)}")
    return POLICIES[name]


class LossScale(NamedTuple):
    """Dynamic loss-scaling state, a PyTree of scalars: the scale, good steps since the last change,
    and the number of steps skipped for overflow."""

    scale: jax.Array
    good_steps: jax.Array
    skipped: jax.Array


def loss_scale(initial: float = 2.0**15) -> LossScale:
    return LossScale(jnp.float32(initial), jnp.int32(0), jnp.int32(0))


def scale_loss(state: LossScale, loss):
    return loss * state.scale.astype(loss.dtype)


def unscale(state: LossScale, grads):
    """Scaled gradients -> true gradients, in float32 (at least)."""

    def leaf(g):
        g = g.astype(jnp.float32) if g.dtype.itemsize < 4 else g
        return g / state.scale.astype(g.dtype)

    return jax.tree.map(leaf, grads)


def adjust(
    state: LossScale, finite, period: int = 2000, factor: float = 2.0, min_scale: float = 1.0
) -> LossScale:
    """After a step: on overflow (`finite` False) divide the scale by `factor` (not below
    `min_scale`) and count a skipped step; after `period` finite steps in a row multiply it."""
    grown = state.good_steps + 1 >= period
    scale = jnp.where(
        finite,
        jnp.where(grown, state.scale * factor, state.scale),
        jnp.maximum(state.scale / factor, min_scale),
    )
    good = jnp.where(finite & ~grown, state.good_steps + 1, 0)
    return LossScale(
        scale.astype(jnp.float32),
        good.astype(jnp.int32),
        state.skipped + (~finite).astype(jnp.int32),
    )


class ScaledState(NamedTuple):
    inner: Any
    scale: LossScale


def dynamic_scaling(inner, initial: float = 2.0**15, period: int = 2000) -> GradientTransformation:
    """`inner` for loss-scaled gradients: divide them by the scale in this state, and on overflow
    return zero updates with inner's state unchanged; then `adjust` the scale. The training step
    multiplies the loss by `find_states(opt_state, ScaledState)[0].scale.scale` before `grad`."""

    def update(grads, state, params=None):
        grads = unscale(state.scale, grads)
        ok = all_finite(grads)
        out, inner_state = update_if(ok, inner, grads, state.inner, params)
        return out, ScaledState(inner_state, adjust(state.scale, ok, period))

    return GradientTransformation(
        lambda params: ScaledState(inner.init(params), loss_scale(initial)), update
    )
