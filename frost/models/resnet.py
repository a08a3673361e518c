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

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from frost import nn
from frost.nn.module import static


def _conv(cin, cout, k, stride, key):
    """A k x k convolution without bias, Kaiming-normal (fan-out) initialised as in torchvision."""
    conv = nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, use_bias=False, key=key)
    return conv.replace(weight=nn.init.kaiming_normal(key, conv.weight.shape, mode="fan_out"))


def _projection(cin, cout, stride, key):
    """The option B shortcut: a strided 1x1 convolution, then BatchNorm."""
    return nn.Sequential(_conv(cin, cout, 1, stride, key), nn.BatchNorm(cout))


class BasicBlock(nn.Module):
    """x -> conv3x3 -> BN -> ReLU -> conv3x3 -> BN, + shortcut(x), -> ReLU (He et al. 2016).

    (N, H, W, cin) -> (N, H/stride, W/stride, cout). The shortcut is the identity when the shapes
    match; else option A (subsample by `stride`, then zero channels: no parameters, `shortcut` is
    None and `pad_channels` static) or option B (a projection: strided 1x1 convolution and
    BatchNorm). The leaves are those of the convolutions, BatchNorms and projection; `stride` and
    `pad_channels` are static.

    Arguments:
        cin: the input's channels.
        cout: the output's channels.
        stride: the first convolution's (and the shortcut's) stride, 1 or 2.
        option: "A" (zero-padding shortcut) or "B" (projection shortcut).
        key: a PRNG key (`jax.random.key`) for the initial weights.
    """

    conv1: nn.Conv
    bn1: nn.BatchNorm
    conv2: nn.Conv
    bn2: nn.BatchNorm
    shortcut: nn.Sequential | None  # projection (option B), or None
    pad_channels: int = static(0)  # option A: zero channels added to the subsampled input
    stride: int = static(1)

    def __init__(self, cin: int, cout: int, stride: int, option: str, *, key: jax.Array):
        k1, k2, k3 = jax.random.split(key, 3)
        self.conv1 = _conv(cin, cout, 3, stride, k1)
        self.bn1 = nn.BatchNorm(cout)
        self.conv2 = _conv(cout, cout, 3, 1, k2)
        self.bn2 = nn.BatchNorm(cout)
        self.stride = stride
        self.pad_channels = cout - cin if option == "A" else 0
        project = option != "A" and (stride != 1 or cin != cout)
        self.shortcut = _projection(cin, cout, stride, k3) if project else None

    def residual(self, x: jax.Array) -> jax.Array:  # (N, H, W, Cin) -> (N, H/s, W/s, Cout)
        if self.shortcut is not None:
            return self.shortcut(x)
        # option A (or the identity, at stride 1 with no padding)
        x = x[:, :: self.stride, :: self.stride, :]
        lo = self.pad_channels // 2
        return jnp.pad(x, ((0, 0), (0, 0), (0, 0), (lo, self.pad_channels - lo)))

    def __call__(self, x: jax.Array) -> jax.Array:  # (N, H, W, Cin) -> (N, H/s, W/s, Cout)
        y = jax.nn.relu(self.bn1(self.conv1(x)))
        return jax.nn.relu(self.bn2(self.conv2(y)) + self.residual(x))


class Bottleneck(nn.Module):
    """x -> 1x1 -> BN -> ReLU -> 3x3 (stride) -> BN -> ReLU -> 1x1 (4x) -> BN, + shortcut, ->
    ReLU (He et al. 2016, ResNet-50's block; the stride on the 3x3 convolution, as torchvision).

    (N, H, W, cin) -> (N, H/stride, W/stride, 4 * width). The shortcut is the identity when the
    shapes match, else a projection (strided 1x1 convolution and BatchNorm). The leaves are those
    of the convolutions, BatchNorms and projection; it has no static fields.

    Arguments:
        cin: the input's channels.
        width: the 3x3 convolution's channels; the block outputs 4 * width.
        stride: the 3x3 convolution's (and the shortcut's) stride, 1 or 2.
        option: the shortcut option; only "B" (projection) is built, whatever is passed.
        key: a PRNG key (`jax.random.key`) for the initial weights.
    """

    conv1: nn.Conv
    bn1: nn.BatchNorm
    conv2: nn.Conv
    bn2: nn.BatchNorm
    conv3: nn.Conv
    bn3: nn.BatchNorm
    shortcut: nn.Sequential | None

    def __init__(self, cin: int, width: int, stride: int, option: str = "B", *, key: jax.Array):
        k1, k2, k3, k4 = jax.random.split(key, 4)
        cout = 4 * width
        self.conv1 = _conv(cin, width, 1, 1, k1)
        self.bn1 = nn.BatchNorm(width)
        self.conv2 = _conv(width, width, 3, stride, k2)
        self.bn2 = nn.BatchNorm(width)
        self.conv3 = _conv(width, cout, 1, 1, k3)
        self.bn3 = nn.BatchNorm(cout)
        project = stride != 1 or cin != cout
        self.shortcut = _projection(cin, cout, stride, k4) if project else None

    def __call__(self, x: jax.Array) -> jax.Array:  # (N, H, W, Cin) -> (N, H/s, W/s, 4 width)
        y = jax.nn.relu(self.bn1(self.conv1(x)))
        y = jax.nn.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return jax.nn.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class ResNet(nn.Module):
    """A residual network (He et al. 2016, "Deep Residual Learning for Image Recognition"):
    (N, H, W, in_channels) images -> (N, num_classes) logits.

    A stem (a convolution, BatchNorm and ReLU; with `imagenet_stem`, a 7x7 stride-2 convolution
    and a 3x3 stride-2 max-pool, else a 3x3 stride-1 convolution), then stages of blocks, each
    stage after the first starting with a stride-2 block, then a global average pool and a Linear
    head. The leaves are those of `stem` (a Sequential), `blocks` (a tuple) and `head`; it has no
    static fields. The named constructors (`resnet20`, ..., `resnet50`) fill in the arguments.

    Arguments:
        block: the block class, `BasicBlock` or `Bottleneck`.
        depths: the number of blocks of each stage, e.g. (3, 3, 3).
        widths: the channels of each stage (a Bottleneck's inner width), e.g. (16, 32, 64).
        num_classes: the number of logits.
        in_channels: the images' channels.
        imagenet_stem: the 7x7 stride-2 stem with a max-pool (ImageNet) instead of a 3x3 one.
        option: the shortcut option, "A" (zero padding) or "B" (projections); Bottleneck
            blocks always project.
        key: a PRNG key (`jax.random.key`) for the initial weights.
    """

    stem: nn.Sequential
    blocks: tuple
    head: nn.Linear

    def __init__(
        self,
        block: type[BasicBlock] | type[Bottleneck],
        depths: Sequence[int],
        widths: Sequence[int],
        num_classes: int,
        in_channels: int,
        imagenet_stem: bool,
        option: str,
        *,
        key: jax.Array,
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
        blocks = []
        cin = widths[0]
        for stage, (depth, width) in enumerate(zip(depths, widths)):
            for i in range(depth):
                stride = 2 if stage > 0 and i == 0 else 1
                blocks.append(block(cin, width, stride, option, key=next(keys)))
                cin = width * (4 if block is Bottleneck else 1)
        self.blocks = tuple(blocks)
        self.head = nn.Linear(cin, num_classes, key=next(keys))

    def __call__(self, x: jax.Array) -> jax.Array:  # (N, H, W, C) -> (N, num_classes)
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.head(jnp.mean(x, axis=(1, 2)))  # global average pool -> (N, C) -> logits


def zero_init_residual(model: ResNet) -> ResNet:
    """Start each block's last BatchNorm scale at zero, so every block begins as the identity
    (on its residual path; Goyal et al. 2017, "Accurate, Large Minibatch SGD").

    Arguments:
        model: a ResNet.

    Returns:
        `model` with the `weight` of each block's last BatchNorm set to zeros.
    """

    def zero(block):
        last = "bn3" if isinstance(block, Bottleneck) else "bn2"
        bn = getattr(block, last)
        return block.replace(**{last: bn.replace(weight=jnp.zeros_like(bn.weight))})

    return model.replace(blocks=tuple(zero(b) for b in model.blocks))


# name: (block, blocks per stage, stage widths, ImageNet stem, shortcut option);
# He et al. 2016: CIFAR ResNet-20/56 (option A, 3 stages) and ImageNet ResNet-18/34/50 (option B)
LAYOUTS = {
    "resnet20": (BasicBlock, (3, 3, 3), (16, 32, 64), False, "A"),
    "resnet56": (BasicBlock, (9, 9, 9), (16, 32, 64), False, "A"),
    "cifar_resnet18": (BasicBlock, (2, 2, 2, 2), (64, 128, 256, 512), False, "B"),
    "resnet18": (BasicBlock, (2, 2, 2, 2), (64, 128, 256, 512), True, "B"),
    "resnet34": (BasicBlock, (3, 4, 6, 3), (64, 128, 256, 512), True, "B"),
    "resnet50": (Bottleneck, (3, 4, 6, 3), (64, 128, 256, 512), True, "B"),
}


def make(name: str, num_classes: int, in_channels: int = 3, *, key: jax.Array) -> ResNet:
    """The ResNet `name` (a key of LAYOUTS), e.g. make("resnet20", 10, 1, key=key).

    Arguments:
        name: one of LAYOUTS' keys.
        num_classes: the number of logits.
        in_channels: the images' channels.
        key: a PRNG key (`jax.random.key`) for the initial weights.

    Returns:
        The `ResNet`.
    """
    block, stages, widths, imagenet_stem, shortcut = LAYOUTS[name]
    return ResNet(block, stages, widths, num_classes, in_channels, imagenet_stem, shortcut, key=key)


def resnet20(num_classes: int = 10, in_channels: int = 3, *, key: jax.Array) -> ResNet:
    """ResNet-20 for small images (He et al. 2016, section 4.2): a 3x3 stem, 3 stages of 3 basic
    blocks (16, 32, 64 channels), option A shortcuts; 269,722 parameters with 10 classes.

    Arguments:
        num_classes: the number of logits.
        in_channels: the images' channels (3: RGB, 1: greyscale).
        key: a PRNG key (`jax.random.key`) for the initial weights.

    Returns:
        A `ResNet` taking (N, H, W, in_channels) images to (N, num_classes) logits.
    """
    return make("resnet20", num_classes, in_channels, key=key)


def resnet56(num_classes: int = 10, in_channels: int = 3, *, key: jax.Array) -> ResNet:
    """ResNet-56 for small images (He et al. 2016, section 4.2): a 3x3 stem, 3 stages of 9 basic
    blocks (16, 32, 64 channels), option A shortcuts; 853,018 parameters with 10 classes.

    Arguments:
        num_classes: the number of logits.
        in_channels: the images' channels (3: RGB, 1: greyscale).
        key: a PRNG key (`jax.random.key`) for the initial weights.

    Returns:
        A `ResNet` taking (N, H, W, in_channels) images to (N, num_classes) logits.
    """
    return make("resnet56", num_classes, in_channels, key=key)


def cifar_resnet18(num_classes: int = 10, in_channels: int = 3, *, key: jax.Array) -> ResNet:
    """ResNet-18's stages on a CIFAR stem (3x3, stride 1, no max-pool): 4 stages of 2 basic blocks
    (64-512 channels), projection shortcuts; 11,173,962 parameters with 10 classes.

    Arguments:
        num_classes: the number of logits.
        in_channels: the images' channels (3: RGB, 1: greyscale).
        key: a PRNG key (`jax.random.key`) for the initial weights.

    Returns:
        A `ResNet` taking (N, H, W, in_channels) images to (N, num_classes) logits.
    """
    return make("cifar_resnet18", num_classes, in_channels, key=key)


def resnet18(num_classes: int = 1000, in_channels: int = 3, *, key: jax.Array) -> ResNet:
    """ResNet-18 for ImageNet (He et al. 2016, Table 1): a 7x7 stride-2 stem and max-pool, 4
    stages of 2 basic blocks (64-512 channels), projection shortcuts; torchvision's layout and its
    11,689,512 parameters with 1000 classes.

    Arguments:
        num_classes: the number of logits.
        in_channels: the images' channels (3: RGB, 1: greyscale).
        key: a PRNG key (`jax.random.key`) for the initial weights.

    Returns:
        A `ResNet` taking (N, H, W, in_channels) images to (N, num_classes) logits.
    """
    return make("resnet18", num_classes, in_channels, key=key)


def resnet34(num_classes: int = 1000, in_channels: int = 3, *, key: jax.Array) -> ResNet:
    """ResNet-34 for ImageNet (He et al. 2016, Table 1): a 7x7 stride-2 stem and max-pool, stages of
    3, 4, 6 and 3 basic blocks (64-512 channels), projection shortcuts; torchvision's layout and its
    21,797,672 parameters with 1000 classes.

    Arguments:
        num_classes: the number of logits.
        in_channels: the images' channels (3: RGB, 1: greyscale).
        key: a PRNG key (`jax.random.key`) for the initial weights.

    Returns:
        A `ResNet` taking (N, H, W, in_channels) images to (N, num_classes) logits.
    """
    return make("resnet34", num_classes, in_channels, key=key)


def resnet50(num_classes: int = 1000, in_channels: int = 3, *, key: jax.Array) -> ResNet:
    """ResNet-50 for ImageNet (He et al. 2016, Table 1): a 7x7 stride-2 stem and max-pool, stages of
    3, 4, 6 and 3 bottleneck blocks (64-512 wide, 256-2048 out), projection shortcuts;
    torchvision's layout and its 25,557,032 parameters with 1000 classes.

    Arguments:
        num_classes: the number of logits.
        in_channels: the images' channels (3: RGB, 1: greyscale).
        key: a PRNG key (`jax.random.key`) for the initial weights.

    Returns:
        A `ResNet` taking (N, H, W, in_channels) images to (N, num_classes) logits.
    """
    return make("resnet50", num_classes, in_channels, key=key)


# name -> constructor, called as MODELS[name](num_classes, in_channels, key=key)
MODELS = {
    "resnet20": resnet20,
    "resnet56": resnet56,
    "cifar_resnet18": cifar_resnet18,
    "resnet18": resnet18,
    "resnet34": resnet34,
    "resnet50": resnet50,
}
