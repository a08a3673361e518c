"""frost.models: ResNets (resnet.py) and a GPT (gpt.py)."""

from frost.models import gpt, resnet
from frost.models.gpt import GPT, generate
from frost.models.resnet import (
    MODELS,
    ResNet,
    cifar_resnet18,
    resnet18,
    resnet20,
    resnet34,
    resnet50,
    resnet56,
)

__all__ = [n for n in dir() if not n.startswith("_")]
