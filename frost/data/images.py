"""Image classification data sets by name: Fashion-MNIST, CIFAR-10 (read by frost.datasets), or a
folder with train/ and optionally test/ image folders, as the training job and the audit load them.

```python
d = load_images("fashion-mnist")   # Images(train, test, shape=(28, 28, 1), classes=10, ...)
```
"""

import pathlib
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from frost.config import UsageError
from frost.data.sources import Arrays, ImageFolder
from frost.data.transforms import Resize
from frost.datasets import cifar10, fashion_mnist


class Images(NamedTuple):
    """An image classification data set, ready for a loader: its sources and what training needs to
    know about them. Both sources yield (image (H, W, C) uint8, label int32) samples.

    Attributes:
        train: the training source (`Arrays` or `ImageFolder`).
        test: the test source, or None for a folder without test/.
        shape: (H, W, C) of every image after `pre`.
        classes: the number of classes; labels are in 0..classes - 1.
        pad: the zero padding of the crop augmentation (`RandomCrop(H, padding=pad)`).
        mean: per-channel mean for `Normalize`, on [0, 1] pixels (C floats).
        std: per-channel standard deviation for `Normalize`, on [0, 1] pixels (C floats).
        pre: transforms to run before augmentation (a folder's `Resize`), or ().
    """

    train: Arrays | ImageFolder
    test: Arrays | ImageFolder | None
    shape: tuple[int, int, int]
    classes: int
    pad: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    pre: tuple


# name: (the frost.datasets function that reads (images, labels) of a split, the crop padding,
# the normalisation mean and std per channel)
DATASETS: dict[str, tuple[Callable[[str], tuple[np.ndarray, np.ndarray]], int, tuple, tuple]] = {
    "fashion-mnist": (fashion_mnist, 2, (0.2860,), (0.3530,)),
    "cifar10": (cifar10, 4, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
}


def load_images(name: str, limit: int | None = None, image_size: int = 32) -> Images:
    """The image data set `name`: a known data set, or a folder of image folders.

    A known data set (a key of DATASETS: "fashion-mnist", "cifar10") is read whole into memory by
    its frost.datasets reader. A folder needs train/ and may have test/, each with one sub-folder
    of images per class (`ImageFolder`); its images are resized to `image_size` and normalised
    with mean 0.5 and std 0.25.

    Arguments:
        name: a key of DATASETS, or the path of a folder with train/ (and optionally test/).
        limit: keep only the first `limit` images of each split (None: all of them).
        image_size: the side, in pixels, that a folder's images are resized to (known data sets
            keep their own size).

    Returns:
        An `Images`: the sources, the image shape (H, W, C), the number of classes and the
        augmentation's padding and normalisation.

    Raises:
        UsageError: `name` is neither a known data set nor a folder with train/.
        MissingData: a known data set's files are not on disk.
    """
    if name in DATASETS:
        read, pad, mean, std = DATASETS[name]
        images, labels = read("train")
        test_images, test_labels = read("test")
        train = Arrays(images[:limit], labels[:limit])
        test = Arrays(test_images[:limit], test_labels[:limit])
        classes = int(max(labels.max(), test_labels.max())) + 1
        return Images(
            train=train,
            test=test,
            shape=images.shape[1:],
            classes=classes,
            pad=pad,
            mean=mean,
            std=std,
            pre=(),
        )
    root = pathlib.Path(name)
    if not (root / "train").is_dir():
        raise UsageError(
            f"--data {name!r}: not a known data set ({', '.join(DATASETS)}) nor a folder "
            "with train/ (and optionally test/) image-folder sub-directories"
        )
    train = ImageFolder(root / "train")
    test = ImageFolder(root / "test") if (root / "test").is_dir() else None
    if limit:
        train.files = train.files[:limit]
        train.labels = train.labels[:limit]
    return Images(
        train=train,
        test=test,
        shape=(image_size, image_size, 3),
        classes=len(train.classes),
        pad=4,
        mean=(0.5,) * 3,
        std=(0.25,) * 3,
        pre=(Resize(image_size),),  # the folder's images resized
    )
