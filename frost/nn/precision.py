"""Mixed precision (Micikevicius et al. 2018, "Mixed Precision Training"): parameters kept in
float32, the forward and backward passes computed in bfloat16 or float16, outputs in float32.

    # Policy(params=float32, compute=bfloat16, output=float32)
    policy = precision.policy("bf16")

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

float16 needs loss scaling too: frost.optim.scaling.dynamic_scaling (an optimizer wrapper, so it
lives in optim; nn does not import optim).
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from frost.config import UsageError
from frost.nn.module import buffer_mask
from frost.tree import PyTree


def cast(tree: PyTree, dtype: DTypeLike) -> PyTree:
    """`tree` with its floating-point leaves as `dtype`; integers, PRNG keys and buffers
    unchanged.

    Arguments:
        tree: a Module, a batch, or any PyTree of arrays.
        dtype: the floating-point dtype to cast to.

    Returns:
        A tree of `tree`'s structure.
    """

    def leaf(x, is_buffer):
        floating = hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating)
        return x.astype(dtype) if floating and not is_buffer else x

    return jax.tree.map(leaf, tree, buffer_mask(tree))


@dataclasses.dataclass(frozen=True)
class Policy:
    """The dtypes of a step: `params` stored, `compute` for the forward/backward pass, `output`
    returned. Each `cast_to_*` method casts a tree's floating leaves (not its buffers) with `cast`.

    Arguments:
        params: the dtype parameters are kept (and updated) in.
        compute: the dtype of the forward and backward passes.
        output: the dtype of the model's outputs (logits, for the loss).
    """

    params: Any = jnp.float32
    compute: Any = jnp.bfloat16
    output: Any = jnp.float32

    def cast_to_compute(self, tree: PyTree) -> PyTree:
        return cast(tree, self.compute)

    def cast_to_param(self, tree: PyTree) -> PyTree:
        return cast(tree, self.params)

    def cast_to_output(self, tree: PyTree) -> PyTree:
        return cast(tree, self.output)


POLICIES = {
    "fp32": Policy(compute=jnp.float32),
    "bf16": Policy(compute=jnp.bfloat16),
    "fp16": Policy(compute=jnp.float16),
}


def policy(name: str) -> Policy:
    """The policy of `--precision NAME`: fp32, bf16 or fp16 compute; float32 parameters and
    outputs.

    Arguments:
        name: "fp32", "bf16" or "fp16".

    Returns:
        The `Policy`; an unknown name raises `UsageError`.
    """
    if name not in POLICIES:
        raise UsageError(f"--precision {name!r}: choose one of {', '.join(POLICIES)}")
    return POLICIES[name]
