"""Image classification data sets by name: Fashion-MNIST, CIFAR-10 (frost.datasets), or a folder
with train/ and optionally test/ image folders, as the training job and the audit load them.

    d = load_images("fashion-mnist")   # Images(train, test, shape=(28, 28, 1), classes=10, ...)
"""

import pathlib
from typing import NamedTuple

from frost import datasets
from frost.config import UsageError
from frost.data.sources import Arrays, ImageFolder
from frost.data.transforms import Resize


class Images(NamedTuple):
    """Sources yield (uint8 image (H, W, C), int32 label)."""

    train: object  # a source: Arrays or ImageFolder
    test: object | None  # None for a folder without test/
    shape: tuple  # (H, W, C) of every image
    classes: int
    pad: int  # the crop augmentation's zero padding
    mean: tuple  # per-channel normalisation, on [0, 1] pixels
    std: tuple
    pre: tuple  # transforms to run before augmentation (a folder's Resize)


# name: (the frost.datasets function that reads (images, labels) per split, crop padding,
# normalisation mean/std); named, not referenced, as frost.datasets itself imports frost.data
DATASETS = {
    "fashion-mnist": ("fashion_mnist", 2, (0.2860,), (0.3530,)),
    "cifar10": ("cifar10", 4, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
}


def load_images(name: str, limit: int | None = None, image_size: int = 32) -> Images:
    """The image data set `name` (a key of DATASETS, or a folder with train/ and optionally test/
    image folders), its first `limit` images of each split; folders' images resized to
    `image_size`. UsageError when it is neither."""
    if name in DATASETS:
        reader, pad, mean, std = DATASETS[name]
        read = getattr(datasets, reader)
        (images, labels), (test_images, test_labels) = read("train"), read("test")
        train = Arrays(images[:limit], labels[:limit])
        test = Arrays(test_images[:limit], test_labels[:limit])
        classes = int(max(labels.max(), test_labels.max())) + 1
        return Images(train, test, images.shape[1:], classes, pad, mean, std, ())
    root = pathlib.Path(name)
    if not (root / "train").is_dir():
        raise UsageError(
            f"--data {name!r}: not a known data set ({', '.join(DATASETS)}) nor a folder "
            "with train/ (and optionally test/) image-folder sub-directories"
        )
    train = ImageFolder(root / "train")
    test = ImageFolder(root / "test") if (root / "test").is_dir() else None
    if limit:
        train.files, train.labels = train.files[:limit], train.labels[:limit]
    shape = (image_size, image_size, 3)
    pre = (Resize(image_size),)  # the folder's images resized
    return Images(train, test, shape, len(train.classes), 4, (0.5,) * 3, (0.25,) * 3, pre)
