"""ResNets against a PyTorch reference written here, given the same weights: logits and
gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from frost import nn
from frost.models import resnet


class TorchBasicBlock(torch.nn.Module):
    def __init__(self, cin, cout, stride, option):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(cout)
        self.conv2 = torch.nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(cout)
        self.option, self.stride, self.pad = option, stride, cout - cin
        self.shortcut = None
        if (stride != 1 or cin != cout) and option == "B":
            self.shortcut = torch.nn.Sequential(
                torch.nn.Conv2d(cin, cout, 1, stride, bias=False), torch.nn.BatchNorm2d(cout)
            )

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        if self.shortcut is not None:
            r = self.shortcut(x)
        elif self.stride != 1 or self.pad:  # option A: subsample, zero-pad channels
            r = F.pad(
                x[:, :, :: self.stride, :: self.stride],
                (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2),
            )
        else:
            r = x
        return F.relu(y + r)


class TorchResNet(torch.nn.Module):
    def __init__(self, depths, widths, num_classes, cin, option):
        super().__init__()
        self.stem = torch.nn.Sequential(
            torch.nn.Conv2d(cin, widths[0], 3, 1, 1, bias=False),
            torch.nn.BatchNorm2d(widths[0]),
            torch.nn.ReLU(),
        )
        blocks, c = [], widths[0]
        for s, (d, w) in enumerate(zip(depths, widths)):
            for i in range(d):
                blocks.append(TorchBasicBlock(c, w, 2 if s > 0 and i == 0 else 1, option))
                c = w
        self.blocks = torch.nn.Sequential(*blocks)
        self.head = torch.nn.Linear(c, num_classes)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean(dim=(2, 3)))


def copy_into_torch(model, ref):
    """Copy every frost parameter into the torch module with the matching dotted name."""
    torch_params = dict(ref.named_parameters())
    pairs = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(model)[0]:
        name = jax.tree_util.keystr(path, simple=True, separator=".").replace("layers.", "")
        if name.endswith(("running_mean", "running_var")):
            continue
        tp = torch_params[name]
        value = np.asarray(leaf)
        if value.ndim == 4:
            value = value.transpose(3, 2, 0, 1)
        elif value.ndim == 2:
            value = value.T
        with torch.no_grad():
            tp.copy_(torch.tensor(value))
        pairs.append((name, tp))
    assert len(pairs) == len(torch_params)
    return pairs


@pytest.mark.parametrize(
    "depths, widths, option", [((3, 3, 3), (16, 32, 64), "A"), ((1, 1), (8, 16), "B")]
)
def test_cifar_resnet_matches_torch(key, depths, widths, option):
    model = resnet.ResNet(resnet.BasicBlock, depths, widths, 10, 3, False, option, key=key)
    ref = TorchResNet(depths, widths, 10, 3, option).train()
    copy_into_torch(model, ref)
    x = np.random.default_rng(0).standard_normal((4, 12, 12, 3)).astype(np.float32)
    labels = np.array([1, 3, 5, 7])

    def loss(m):
        logits, new = nn.apply(m, jnp.asarray(x), train=True)
        return jnp.mean(
            -jnp.take_along_axis(jax.nn.log_softmax(logits), jnp.asarray(labels)[:, None], 1)
        ), (logits, new)

    (value, (logits, new)), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(model)
    tlogits = ref(torch.tensor(x.transpose(0, 3, 1, 2)))
    tl = F.cross_entropy(tlogits, torch.tensor(labels))
    tl.backward()
    np.testing.assert_allclose(logits, tlogits.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(value, tl.item(), rtol=1e-5)
    g = {
        jax.tree_util.keystr(p, simple=True, separator=".").replace("layers.", ""): v
        for p, v in jax.tree_util.tree_flatten_with_path(grads)[0]
    }
    for name, tp in dict(ref.named_parameters()).items():
        value = np.asarray(g[name])
        value = (
            value.transpose(3, 2, 0, 1)
            if value.ndim == 4
            else value.T
            if value.ndim == 2
            else value
        )
        np.testing.assert_allclose(value, tp.grad.numpy(), rtol=1e-3, atol=1e-5, err_msg=name)
    # Running statistics after the training-mode pass match torch's.
    np.testing.assert_allclose(
        new.blocks[0].bn1.running_var, ref.blocks[0].bn1.running_var.numpy(), rtol=1e-5
    )
    # Eval mode with those statistics.
    ref.eval()
    np.testing.assert_allclose(
        jax.jit(lambda m, x: m(x))(new, jnp.asarray(x)),
        ref(torch.tensor(x.transpose(0, 3, 1, 2))).detach().numpy(),
        rtol=1e-4,
        atol=1e-5,
    )


@pytest.mark.parametrize(
    "name, classes, params",
    [
        ("resnet18", 1000, 11_689_512),
        ("resnet34", 1000, 21_797_672),
        ("resnet50", 1000, 25_557_032),  # torchvision
        ("resnet20", 10, 269_722),
        ("resnet56", 10, 853_018),  # option A, as in akamaster/pytorch_resnet_cifar10
        ("cifar_resnet18", 10, 11_173_962),
    ],
)
def test_parameter_counts(key, name, classes, params):
    shapes = jax.eval_shape(lambda k: resnet.MODELS[name](classes, 3, key=k), key)
    mask = nn.trainable_mask(shapes)
    count = sum(
        int(np.prod(s.shape)) for s, m in zip(jax.tree.leaves(shapes), jax.tree.leaves(mask)) if m
    )
    assert count == params


def test_imagenet_stem_output_shape(key):
    out = jax.eval_shape(
        lambda k, x: resnet.resnet18(5, 1, key=k)(x), key, jnp.ones((2, 64, 64, 1))
    )
    assert out.shape == (2, 5)


def test_zero_init_residual_makes_blocks_identity_on_the_residual_path(key):
    model = resnet.zero_init_residual(resnet.resnet20(10, 1, key=key))
    assert float(jnp.abs(model.blocks[0].bn2.weight).sum()) == 0.0
