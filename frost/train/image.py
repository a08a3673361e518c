"""The image-classification job behind `frost train resnet20 --data fashion-mnist`.

Data: `fashion-mnist` (Debian's dataset-fashion-mnist, 28x28 grey), `cifar10` (binary format
under $FROST_DATA), or a folder with `train/` and `test/` image-folder sub-directories.
Fashion-MNIST is used at its own 28x28 size: the CIFAR ResNets' 3x3 stem and global pooling
take any size, so stages run at 28, 14 and 7 pixels (no padding to 32). Training augmentation
is the CIFAR recipe (random crop with 2-4 pixels of zero padding, horizontal flip), run in the
loader's workers on uint8 images; normalisation runs on the device inside the jitted step.

Recipe (defaults): SGD with Nesterov momentum 0.9, weight decay 5e-4 on weights (not on
BatchNorm or biases), one-cycle learning rate (Smith & Topin 2017) peaking at `lr`, batch 128.
"""

import pathlib

import jax.numpy as jnp

from frost import data, datasets, optim
from frost.config import UsageError
from frost.models import resnet
from frost.nn.module import expand_to
from frost.train.job import Data, Job

DATASETS = {  # name: (loader of (images, labels) per split, crop padding, normalisation mean/std)
    "fashion-mnist": (datasets.fashion_mnist, 2, (0.2860,), (0.3530,)),
    "cifar10": (datasets.cifar10, 4, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
}


def load_data(name: str, limit: int | None = None, image_size: int = 32):
    """(train source, test source or None, image shape (H, W, C), classes, crop padding, mean, std,
    transforms to run before augmentation). Sources yield (uint8 image (H, W, C), int32 label)."""
    if name in DATASETS:
        read, pad, mean, std = DATASETS[name]
        (images, labels), (test_images, test_labels) = read("train"), read("test")
        return (
            data.Arrays(images[:limit], labels[:limit]),
            data.Arrays(test_images[:limit], test_labels[:limit]),
            images.shape[1:],
            int(max(labels.max(), test_labels.max())) + 1,
            pad,
            mean,
            std,
            (),
        )
    root = pathlib.Path(name)
    if not (root / "train").is_dir():
        raise UsageError(
            f"--data {name!r}: not a known data set ({', '.join(DATASETS)}) nor a folder "
            "with train/ (and optionally test/) image-folder sub-directories"
        )
    train = data.ImageFolder(root / "train")
    test = data.ImageFolder(root / "test") if (root / "test").is_dir() else None
    if limit:
        train.files, train.labels = train.files[:limit], train.labels[:limit]
    return (
        train,
        test,
        (image_size, image_size, 3),
        len(train.classes),
        4,
        (0.5,) * 3,
        (0.25,) * 3,
        (data.Resize(image_size),),
    )


def normalise(x, mean, std):  # uint8 (N, H, W, C) -> float32, per-channel standardised
    return (x.astype(jnp.float32) / 255 - expand_to(mean, x.ndim)) / expand_to(std, x.ndim)


class ImageJob(Job):
    unit, eval_batch = "images", 1000

    def data(self, cfg, run_dir, progress) -> Data:
        train, test, shape, classes, pad, mean, std, pre = load_data(cfg.data, cfg.limit)
        mean, std = jnp.asarray(mean, jnp.float32), jnp.asarray(std, jnp.float32)
        return Data(
            train,
            test,
            f"{cfg.data}: {len(train)} training images {tuple(shape)}, {classes} classes",
            data.Compose(*pre, data.RandomCrop(shape[:2], padding=pad), data.RandomFlip()),
            data.Compose(*pre) if pre else None,
            lambda batch: (normalise(batch[0], mean, std), batch[1]),
            {"shape": shape, "classes": classes},
        )

    def model(self, cfg, d, key):
        return resnet.MODELS[cfg.model](d.extra["classes"], d.extra["shape"][-1], key=key)

    def schedule(self, cfg, steps):
        return optim.one_cycle(steps, cfg.peak_lr)
