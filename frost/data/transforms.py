"""Per-sample augmentation on numpy images (H, W, C), reproducible by construction.

An image transform is a callable `t(image, rng) -> image`. The loader hands every sample a
fresh `numpy.random.Generator` seeded from (seed, epoch, sample index) (see `sample_rng`), so
an augmented sample depends on nothing else: not on the worker that made it, nor on the
samples before it. `Compose` chains image transforms and applies them to one field of the
sample, giving the loader's sample-level transform `t(sample, rng) -> sample`:

    augment = Compose(RandomCrop(32, padding=4), RandomFlip(), Normalize(MEAN, STD), field=0)
    augment((image, label), sample_rng(seed, epoch, index)) -> (float32 (32, 32, 3), label)
"""
from __future__ import annotations

import numpy as np


def sample_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The random generator of one sample (stream 1; the sampler's shuffle uses stream 0)."""
    return np.random.default_rng([seed, 1, epoch, index])


def _pair(size):
    return (int(size), int(size)) if np.isscalar(size) else tuple(int(s) for s in size)


class RandomCrop:
    """Zero-pad by `padding` on every side, then cut a random (h, w) window (the CIFAR recipe)."""

    def __init__(self, size, padding: int = 0):
        self.size, self.padding = _pair(size), int(padding)

    def __call__(self, image, rng):
        p, (h, w) = self.padding, self.size
        if p:
            image = np.pad(image, ((p, p), (p, p), (0, 0)))
        top = rng.integers(0, image.shape[0] - h + 1)
        left = rng.integers(0, image.shape[1] - w + 1)
        return image[top:top + h, left:left + w]


class RandomFlip:
    """Mirror left-right with probability p."""

    def __init__(self, p: float = 0.5):
        self.p = p

    def __call__(self, image, rng):
        return image[:, ::-1] if rng.random() < self.p else image


class Normalize:
    """float32 `(image / 255 - mean) / std` per channel (the / 255 only for integer images)."""

    def __init__(self, mean, std):
        self.mean, self.std = np.asarray(mean, np.float32), np.asarray(std, np.float32)

    def __call__(self, image, rng=None):
        scale = 1 / 255 if np.issubdtype(image.dtype, np.integer) else 1.0
        out = np.multiply(image, (scale / self.std).astype(np.float32), dtype=np.float32)
        out -= self.mean / self.std
        return out


class Resize:
    """Bilinear resize to (h, w) with Pillow; uint8 in, uint8 out."""

    def __init__(self, size):
        self.size = _pair(size)

    def __call__(self, image, rng=None):
        from PIL import Image
        h, w = self.size
        if image.shape[:2] == (h, w):
            return image
        grey = image.shape[2] == 1
        out = np.asarray(Image.fromarray(image[..., 0] if grey else image).resize((w, h), Image.BILINEAR))
        return out[..., None] if grey else out


class Compose:
    """Chain image transforms over `sample[field]` (a tuple position or a dict key)."""

    def __init__(self, *transforms, field=0):
        self.transforms, self.field = transforms, field

    def __call__(self, sample, rng):
        x = sample[self.field]
        for t in self.transforms:
            x = t(x, rng)
        if isinstance(sample, dict):
            return {**sample, self.field: x}
        return tuple(x if i == self.field else v for i, v in enumerate(sample))
