"""Where real data sets live on disk, and a clear error when they are not there.

    images, labels = fashion_mnist("train")     # (60000, 28, 28, 1) uint8, (60000,) int32 in 0..9

Files are looked for in $FROST_DATA (when set; it then replaces the default places) and its
sub-folder named after the data set, else in the place the system package installs them.
"""

import os
import pathlib

from frost.config import MissingData
from frost.data.sources import read_cifar, read_idx_pair

_FASHION = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def _dirs(name, default):
    root = os.environ.get("FROST_DATA")
    if root:
        return [pathlib.Path(root) / name, pathlib.Path(root)]
    return [pathlib.Path(default)] if default else []


def _find(splits, split, dirs, dataset, how):
    """The paths of the files `splits[split]` (plain or .gz) in the first of `dirs` that holds them
    all."""
    if split not in splits:
        raise ValueError(f"split must be one of {sorted(splits)}, got {split!r}")
    files = splits[split]
    for d in dirs:
        paths = [next((p for p in (d / f, d / f"{f}.gz") if p.is_file()), None) for f in files]
        if all(paths):
            return paths
    where = ", ".join(str(d) for d in dirs) or "nowhere (no default location)"
    raise MissingData(
        f"{dataset} not found: looked for {', '.join(files)} (or .gz) in {where}. {how}"
    )


def fashion_mnist(split: str = "train"):
    """(images (N, 28, 28, 1) uint8, labels (N,) int32); N = 60000 (train) or 10000 (test)."""
    dirs = _dirs("fashion-mnist", "/usr/share/datasets/fashion-mnist")
    how = (
        "Install it with `sudo apt-get install dataset-fashion-mnist` (Debian/Ubuntu), or set "
        "FROST_DATA to a directory holding the four IDX files."
    )
    return read_idx_pair(*_find(_FASHION, split, dirs, "Fashion-MNIST", how))


def cifar10(split: str = "train", root=None):
    """(images (N, 32, 32, 3) uint8, labels (N,) int32) from the CIFAR-10 binary files."""
    files = {"train": [f"data_batch_{i}.bin" for i in range(1, 6)], "test": ["test_batch.bin"]}
    folder = "cifar-10-batches-bin"
    dirs = [pathlib.Path(root)] if root else _dirs(folder, None)
    how = (
        "Download https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz, extract it and "
        f"pass root=<path to {folder}> or set FROST_DATA to the directory holding {folder}/."
    )
    return read_cifar(_find(files, split, dirs, "CIFAR-10", how), kind=10)
