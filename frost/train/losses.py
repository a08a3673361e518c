"""Losses for `(inputs, integer labels)` batches where `model(inputs)` gives logits: image
classification (logits (N, K), labels (N,)) and language modelling (logits (B, T, V), labels
(B, T)) are the same softmax cross-entropy over every position, so both jobs share one loss, one
evaluation step and one pair of Hessian estimators for Sophia.
"""

import jax
import jax.numpy as jnp

from frost import nn
from frost.optim import gauss_newton_bartlett, hutchinson


# (..., V), (...) -> (...): each position's -log p(label), in float32
def nll(logits, labels) -> jax.Array:
    logp = jax.nn.log_softmax(logits.astype(jnp.float32))  # (..., V)
    return -jnp.take_along_axis(logp, labels[..., None].astype(jnp.int32), axis=-1)[..., 0]


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Softmax cross-entropy, the mean of -log p(label) over every position, in float32.

    Arguments:
        logits: (..., V) float array: unnormalised log-probabilities over V classes.
        labels: (...) integer array of class indices in [0, V).

    Returns:
        () float32: the mean over all positions.
    """
    return jnp.mean(nll(logits, labels))


def correct(logits, labels) -> jax.Array:  # (..., V), (...) -> (...) bool
    """`jnp.argmax(logits, -1) == labels` (ties go to the first maximum, as argmax's), without
    argmax: XLA's CPU backend lowers argmax to a variadic reduce, 6x slower than these three."""
    top = jnp.max(logits, -1, keepdims=True)  # (..., 1)
    picked = jnp.take_along_axis(logits, labels[..., None].astype(jnp.int32), -1)  # (..., 1)
    index = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1)  # (..., V)
    # (...): a maximum before the label
    earlier = jnp.any((logits == top) & (index < labels[..., None]), -1)
    return (picked == top)[..., 0] & ~earlier


def classification_loss(
    model: nn.Module, batch: tuple[jax.Array, jax.Array], key: jax.Array
) -> tuple[jax.Array, tuple[nn.Module, dict]]:
    """Softmax cross-entropy of `model(inputs)` in training mode (`frost.nn.apply(...,
    train=True)`): the default loss of `make_train_step`.

    Arguments:
        model: a model mapping inputs to logits, (N, K) for images or (B, T, V) for text.
        batch: `(inputs, labels)`: e.g. (N, H, W, C) floats and (N,) integer labels, or (B, T)
            token ids and (B, T) next-token ids.
        key: a PRNG key (`jax.random.key`), for dropout.

    Returns:
        `(loss, (stats_model, metrics))`: the float32 scalar loss, the model with its new
        BatchNorm statistics, and `{"accuracy": float32 scalar}`.
    """
    x, labels = batch
    logits, stats_model = nn.apply(model, x, train=True, key=key)
    metrics = {"accuracy": jnp.mean(correct(logits, labels))}
    return cross_entropy(logits, labels), (stats_model, metrics)


def eval_sums(model, batch, valid=None) -> dict:
    """Evaluation mode: {loss_sum, correct, count} over the batch's positions (summed by
    `evaluate`); `valid` (N,) marks the real rows of a padded batch (all rows when None)."""
    x, labels = batch
    logits = model(x)
    rows = jnp.ones(labels.shape[:1], bool) if valid is None else valid  # (N,)
    weight = jnp.broadcast_to(rows.reshape(rows.shape + (1,) * (labels.ndim - 1)), labels.shape)
    return {
        "loss_sum": jnp.sum(jnp.where(weight, nll(logits, labels), 0.0)),
        "correct": jnp.sum(correct(logits, labels) & weight),
        "count": jnp.sum(weight, dtype=jnp.float32),
    }


# Sophia's Hessian-diagonal estimators (Liu et al. 2023) for this loss, as the training step calls
# them.
HESSIAN = {
    "gnb": lambda loss_fn, model, batch, key: gauss_newton_bartlett(
        lambda m: nn.apply(m, batch[0], train=True, key=key)[0], model, key=key
    ),
    "hutchinson": lambda loss_fn, model, batch, key: hutchinson(
        lambda m: loss_fn(m, batch, key)[0], model, key=key
    ),
}
