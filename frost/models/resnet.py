"""ResNets (He et al. 2016, "Deep Residual Learning for Image Recognition"), channels last.

    model = resnet20(num_classes=10, in_channels=1, key=key)
    logits, model = frost.nn.apply(model, images, train=True)    # images: (N, H, W, C)

Two families:
- CIFAR (3x3 stem, no max-pool): `resnet20`, `resnet56` (3 stages of 16/32/64 channels with
  n = 3 or 9 basic blocks each, and the paper's parameter-free "option A" shortcut: stride-2
  subsampling plus zero channels), and `cifar_resnet18` (64-512 channels, projection shortcuts).
- ImageNet (7x7 stride-2 stem + 3x3 max-pool): `resnet18`, `resnet34` (basic blocks) and
  `resnet50` (bottleneck blocks, expansion 4), projection ("option B") shortcuts.

Every model is fully convolutional up to a global average pool, so any input size works
(28x28 Fashion-MNIST runs at 28/14/7 in the CIFAR family). Convolutions use Kaiming-normal
(fan-out) initialisation as in torchvision; the last BatchNorm of each block starts at zero
(`zero_init_residual`, Goyal et al. 2017) only when asked.
"""

import functools

import jax
import jax.numpy as jnp

from frost import nn
from frost.nn.module import static


def _conv(cin, cout, k, stride, key):
    conv = nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, use_bias=False, key=key)
    return conv.replace(weight=nn.init.kaiming_normal(key, conv.weight.shape, mode="fan_out"))


def _projection(cin, cout, stride, key):
    """The option B shortcut: a strided 1x1 convolution, then BatchNorm."""
    return nn.Sequential(_conv(cin, cout, 1, stride, key), nn.BatchNorm(cout))


class BasicBlock(nn.Module):
    """x -> conv3x3 -> BN -> ReLU -> conv3x3 -> BN, + shortcut(x), -> ReLU."""

    conv1: nn.Conv
    bn1: nn.BatchNorm
    conv2: nn.Conv
    bn2: nn.BatchNorm
    shortcut: nn.Sequential | None  # projection (option B), or None
    pad_channels: int = static(0)  # option A: zero channels added to the subsampled input
    stride: int = static(1)

    def __init__(self, cin, cout, stride, option, *, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.conv1, self.bn1 = _conv(cin, cout, 3, stride, k1), nn.BatchNorm(cout)
        self.conv2, self.bn2 = _conv(cout, cout, 3, 1, k2), nn.BatchNorm(cout)
        self.stride, self.pad_channels = stride, cout - cin if option == "A" else 0
        project = option != "A" and (stride != 1 or cin != cout)
        self.shortcut = _projection(cin, cout, stride, k3) if project else None

    def residual(self, x):  # (N, H, W, Cin) -> (N, H/s, W/s, Cout)
        if self.shortcut is not None:
            return self.shortcut(x)
        # option A (or the identity, at stride 1 with no padding)
        x = x[:, :: self.stride, :: self.stride, :]
        lo = self.pad_channels // 2
        return jnp.pad(x, ((0, 0), (0, 0), (0, 0), (lo, self.pad_channels - lo)))

    def __call__(self, x):
        y = jax.nn.relu(self.bn1(self.conv1(x)))
        return jax.nn.relu(self.bn2(self.conv2(y)) + self.residual(x))


class Bottleneck(nn.Module):
    """x -> 1x1 -> BN -> ReLU -> 3x3 (stride) -> BN -> ReLU -> 1x1 (4x) -> BN, + shortcut, ->
    ReLU."""

    conv1: nn.Conv
    bn1: nn.BatchNorm
    conv2: nn.Conv
    bn2: nn.BatchNorm
    conv3: nn.Conv
    bn3: nn.BatchNorm
    shortcut: nn.Sequential | None

    def __init__(self, cin, width, stride, option="B", *, key):
        k1, k2, k3, k4 = jax.random.split(key, 4)
        cout = 4 * width
        self.conv1, self.bn1 = _conv(cin, width, 1, 1, k1), nn.BatchNorm(width)
        self.conv2, self.bn2 = _conv(width, width, 3, stride, k2), nn.BatchNorm(width)
        self.conv3, self.bn3 = _conv(width, cout, 1, 1, k3), nn.BatchNorm(cout)
        project = stride != 1 or cin != cout
        self.shortcut = _projection(cin, cout, stride, k4) if project else None

    def __call__(self, x):
        y = jax.nn.relu(self.bn1(self.conv1(x)))
        y = jax.nn.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return jax.nn.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class ResNet(nn.Module):
    stem: nn.Sequential
    blocks: tuple
    head: nn.Linear

    def __init__(
        self, block, depths, widths, num_classes, in_channels, imagenet_stem, option, *, key
    ):
        keys = iter(jax.random.split(key, sum(depths) + 2))
        size, stride = (7, 2) if imagenet_stem else (3, 1)
        stem = [
            _conv(in_channels, widths[0], size, stride, next(keys)),
            nn.BatchNorm(widths[0]),
            nn.ReLU(),
        ]
        if imagenet_stem:
            stem.append(nn.MaxPool(3, stride=2, padding=1))
        self.stem = nn.Sequential(*stem)
        blocks, cin = [], widths[0]
        for stage, (depth, width) in enumerate(zip(depths, widths)):
            for i in range(depth):
                stride = 2 if stage > 0 and i == 0 else 1
                blocks.append(block(cin, width, stride, option, key=next(keys)))
                cin = width * (4 if block is Bottleneck else 1)
        self.blocks = tuple(blocks)
        self.head = nn.Linear(cin, num_classes, key=next(keys))

    def __call__(self, x):  # (N, H, W, C) -> (N, num_classes)
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.head(jnp.mean(x, axis=(1, 2)))  # global average pool -> (N, C) -> logits


def zero_init_residual(model: ResNet) -> ResNet:
    """Start each block's last BatchNorm scale at zero, so every block begins as the identity."""

    def zero(block):
        last = "bn3" if isinstance(block, Bottleneck) else "bn2"
        bn = getattr(block, last)
        return block.replace(**{last: bn.replace(weight=jnp.zeros_like(bn.weight))})

    return model.replace(blocks=tuple(zero(b) for b in model.blocks))


# name: (block, blocks per stage, stage widths, ImageNet stem, shortcut option, default classes);
# He et al. 2016: CIFAR ResNet-20/56 (option A, 3 stages) and ImageNet ResNet-18/34/50 (option B)
LAYOUTS = {
    "resnet20": (BasicBlock, (3, 3, 3), (16, 32, 64), False, "A", 10),
    "resnet56": (BasicBlock, (9, 9, 9), (16, 32, 64), False, "A", 10),
    "cifar_resnet18": (BasicBlock, (2, 2, 2, 2), (64, 128, 256, 512), False, "B", 10),
    "resnet18": (BasicBlock, (2, 2, 2, 2), (64, 128, 256, 512), True, "B", 1000),
    "resnet34": (BasicBlock, (3, 4, 6, 3), (64, 128, 256, 512), True, "B", 1000),
    "resnet50": (Bottleneck, (3, 4, 6, 3), (64, 128, 256, 512), True, "B", 1000),
}


def make(name: str, num_classes: int | None = None, in_channels: int = 3, *, key) -> ResNet:
    """The ResNet `name` (a key of LAYOUTS), e.g. make("resnet20", 10, 1, key=key)."""
    block, stages, widths, imagenet_stem, shortcut, classes = LAYOUTS[name]
    return ResNet(
        block, stages, widths, num_classes or classes, in_channels, imagenet_stem, shortcut, key=key
    )


MODELS = {name: functools.partial(make, name) for name in LAYOUTS}  # resnet20(10, 1, key=key)
resnet20, resnet56, cifar_resnet18, resnet18, resnet34, resnet50 = MODELS.values()
