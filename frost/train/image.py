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

import jax.numpy as jnp

from frost import data, optim
from frost.models import resnet
from frost.nn.module import expand_to
from frost.train.job import Data, Job


def normalise(x, mean, std):  # uint8 (N, H, W, C) -> float32, per-channel standardised
    return (x.astype(jnp.float32) / 255 - expand_to(mean, x.ndim)) / expand_to(std, x.ndim)


class ImageJob(Job):
    unit = "images"
    eval_batch = 1000

    def data(self, cfg, run_dir, progress) -> Data:
        d = data.load_images(cfg.data, cfg.limit)
        mean = jnp.asarray(d.mean, jnp.float32)
        std = jnp.asarray(d.std, jnp.float32)
        return Data(
            d.train,
            d.test,
            f"{cfg.data}: {len(d.train)} training images {tuple(d.shape)}, {d.classes} classes",
            data.Compose(*d.pre, data.RandomCrop(d.shape[:2], padding=d.pad), data.RandomFlip()),
            data.Compose(*d.pre) if d.pre else None,
            lambda batch: (normalise(batch[0], mean, std), batch[1]),
            {"shape": d.shape, "classes": d.classes},
        )

    def model(self, cfg, d, key):
        return resnet.MODELS[cfg.model](d.extra["classes"], d.extra["shape"][-1], key=key)

    def schedule(self, cfg, steps):
        return optim.one_cycle(steps, cfg.peak_lr)
