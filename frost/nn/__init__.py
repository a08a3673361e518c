"""frost.nn: PyTree modules and layers (see module.py for the Module system, context.py for
training mode and BatchNorm state)."""

from frost.nn import init
from frost.nn.attention import (
    attention_implementation,
    dot_product_attention,
    set_attention_implementation,
)
from frost.nn.containers import (
    GELU,
    Flatten,
    Identity,
    Lambda,
    ReLU,
    Sequential,
    Sigmoid,
    SiLU,
    Tanh,
    gelu,
    log_softmax,
    relu,
    sigmoid,
    silu,
    softmax,
    tanh,
)
from frost.nn.context import apply, is_training
from frost.nn.conv import Conv, Conv1d, Conv2d
from frost.nn.dropout import Dropout
from frost.nn.embed import Embedding
from frost.nn.linear import Linear
from frost.nn.module import Module, buffer, buffer_mask, static, trainable_mask, update_buffers
from frost.nn.norm import BatchNorm, GroupNorm, LayerNorm, RMSNorm
from frost.nn.pool import AvgPool, GlobalAvgPool, MaxPool

__all__ = [n for n in dir() if not n.startswith("_")]
