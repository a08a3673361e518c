"""Per-sample augmentation on numpy images (H, W, C), reproducible by construction.

An image transform is a callable `t(image, rng) -> image`. The loader hands every sample a
fresh `numpy.random.Generator` seeded from (seed, epoch, sample index) (see `sample_rng`), so
an augmented sample depends on nothing else: not on the worker that made it, nor on the
samples before it. `Compose` chains image transforms and applies them to one field of the
sample, giving the loader's sample-level transform `t(sample, rng) -> sample`:

```python
augment = Compose(RandomCrop(32, padding=4), RandomFlip(), Normalize(MEAN, STD), field=0)
augment((image, label), sample_rng(seed, epoch, index))  # (float32 (32, 32, 3), label)
```
"""

from collections.abc import Callable, Sequence

import numpy as np

# an image transform: t(image (H, W, C), rng) -> image
ImageTransform = Callable[[np.ndarray, np.random.Generator], np.ndarray]


def sample_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The random generator of one sample (stream 1; the sampler's shuffle uses stream 0).

    Arguments:
        seed: the loader's seed.
        epoch: the epoch the sample appears in.
        index: the sample's index in its source.

    Returns:
        A `numpy.random.Generator` seeded by (seed, 1, epoch, index): the same for the same
        sample in any worker, different for every sample and epoch.
    """
    return np.random.default_rng([seed, 1, epoch, index])


def _pair(size):
    return (int(size), int(size)) if np.isscalar(size) else tuple(int(s) for s in size)


class RandomCrop:
    """Zero-pad by `padding` on every side, then cut a random (h, w) window (the CIFAR recipe).

    `crop(image, rng)` takes an (H, W, C) image and returns an (h, w, C) image of its dtype; a
    crop smaller than the padded image raises ValueError.

    Arguments:
        size: the window: an int (square) or (h, w).
        padding: zero pixels added on every side before cropping.
    """

    def __init__(self, size: int | Sequence[int], padding: int = 0):
        self.size = _pair(size)
        self.padding = int(padding)

    def __call__(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        p = self.padding
        h, w = self.size
        H, W = image.shape[:2]
        if H + 2 * p < h or W + 2 * p < w:
            raise ValueError(
                f"RandomCrop({h}, {w}, padding={p}): the padded image ({H + 2 * p}, {W + 2 * p}) "
                f"is smaller than the crop"
            )
        # the window's top-left corner in image coordinates (negative: in the padding)
        top = rng.integers(0, H + 2 * p - h + 1) - p
        left = rng.integers(0, W + 2 * p - w + 1) - p
        if p == 0:
            return image[top : top + h, left : left + w]
        # Same as np.pad then slicing, without building the padded image: copy the part of the
        # window that overlaps the image into zeros. Window rows top..top+h-1 in image coordinates.
        out = np.zeros((h, w, image.shape[2]), image.dtype)
        r0, r1, c0, c1 = max(top, 0), min(top + h, H), max(left, 0), min(left + w, W)
        out[r0 - top : r1 - top, c0 - left : c1 - left] = image[r0:r1, c0:c1]
        return out


class RandomFlip:
    """Mirror an (H, W, C) image left-right with probability p.

    Arguments:
        p: the probability of a flip.
    """

    def __init__(self, p: float = 0.5):
        self.p = p

    def __call__(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return image[:, ::-1] if rng.random() < self.p else image


class Normalize:
    """float32 `(image / 255 - mean) / std` per channel (the / 255 only for integer images).

    `normalize(image, rng=None)` takes an (H, W, C) image and returns (H, W, C) float32.

    Arguments:
        mean: the per-channel mean, on [0, 1] pixels: a float or C floats.
        std: the per-channel standard deviation, on [0, 1] pixels: a float or C floats.
    """

    def __init__(self, mean: float | Sequence[float], std: float | Sequence[float]):
        self.mean = np.asarray(mean, np.float32)
        self.std = np.asarray(std, np.float32)
        self._rows = {}  # (scale, width, channels) -> per-channel constants tiled along one row

    def __call__(self, image: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
        h, w, c = image.shape
        scale = 1 / 255 if np.issubdtype(image.dtype, np.integer) else 1.0
        key = (scale, w, c)
        if key not in self._rows:  # numpy is much faster on one long row than on (..., 3) pixels
            mul = np.tile(np.broadcast_to(scale / self.std, (c,)), w).astype(np.float32)
            sub = np.tile(np.broadcast_to(self.mean / self.std, (c,)), w).astype(np.float32)
            self._rows[key] = (mul, sub)
        mul, sub = self._rows[key]
        rows = image.astype(np.float32).reshape(h, w * c)
        rows *= mul
        rows -= sub
        return rows.reshape(h, w, c)


class Resize:
    """Bilinear resize to (h, w) with Pillow; uint8 (H, W, C) in, uint8 (h, w, C) out.

    Arguments:
        size: the new size: an int (square) or (h, w).
    """

    def __init__(self, size: int | Sequence[int]):
        self.size = _pair(size)

    def __call__(self, image: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
        from PIL import Image

        h, w = self.size
        if image.shape[:2] == (h, w):
            return image
        pixels = image[..., 0] if image.shape[2] == 1 else image  # Pillow takes grey as (H, W)
        out = Image.fromarray(pixels).resize((w, h), Image.BILINEAR)
        # a grey image gets its channel axis back
        return np.asarray(out).reshape(h, w, image.shape[2])


class Compose:
    """Chain image transforms over `sample[field]` (a tuple position or a dict key).

    `augment(sample, rng)` returns the sample with that field replaced by the chain's result,
    every transform drawing from the same generator in turn; the other fields are kept.

    Arguments:
        *transforms: image transforms `t(image, rng) -> image`, applied in order.
        field: the sample's image: a position in a tuple sample, or a key of a dict sample.
    """

    def __init__(self, *transforms: ImageTransform, field: int | str = 0):
        self.transforms = transforms
        self.field = field

    def __call__(self, sample: tuple | dict, rng: np.random.Generator) -> tuple | dict:
        x = sample[self.field]
        for t in self.transforms:
            x = t(x, rng)
        if isinstance(sample, dict):
            return {**sample, self.field: x}
        return tuple(x if i == self.field else v for i, v in enumerate(sample))
