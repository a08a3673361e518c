"""Real data sets: where their files live on disk, how their formats are read, and a clear error
when they are not there.

```python
images, labels = fashion_mnist("train")  # (60000, 28, 28, 1) uint8, (60000,) int32 in 0..9
images, labels = cifar10("test")         # (10000, 32, 32, 3) uint8, (10000,) int32 in 0..9
```

Files are looked for in $FROST_DATA (when set; it then replaces the default places) and its
sub-folder named after the data set, else in the place the system package installs them.

The readers of the two file formats, IDX (MNIST, Fashion-MNIST) and CIFAR's binary records, live
here with the data sets that use them; `frost.data` re-exports them beside its sources. This module
imports nothing from `frost.data`, so `frost.data.load_images` calls `fashion_mnist` and `cifar10`
directly, without an import cycle.
"""

import gzip
import os
import pathlib
from collections.abc import Iterable

import numpy as np

from frost.config import MissingData

# ---------------------------------------------------------------------------------------------
# IDX (MNIST, Fashion-MNIST): magic 0x0000 | dtype code | ndim, then ndim big-endian uint32
# sizes, then the data in big-endian order. Files may be gzipped.

_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def _read_bytes(path: str | os.PathLike) -> bytes:
    """A file's bytes, gunzipped when it starts with the gzip magic number."""
    data = pathlib.Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise ValueError(f"corrupt gzip file {path}: {e}") from e
    return data


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file (gzipped or not) into a native-endian numpy array.

    IDX is the format of MNIST and Fashion-MNIST: a 4-byte magic number (two zero bytes, a dtype
    code, the number of dimensions), each dimension's size as a big-endian uint32, then the data,
    big-endian, in C order.

    Arguments:
        path: the file; gzipped when it starts with gzip's magic number, whatever its name.

    Returns:
        An array of the shape and dtype the header gives (for example (N, 28, 28) uint8 images or
        (N,) uint8 labels), in native byte order.

    Raises:
        ValueError: the file is not IDX (the header is shown), is truncated, or is a corrupt gzip.
    """
    data = _read_bytes(path)
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_DTYPES:
        raise ValueError(
            f"{path} is not an IDX file (header {data[:4].hex() or 'empty'}; "
            f"expected 00 00 <dtype code> <ndim>)"
        )
    dtype = np.dtype(_IDX_DTYPES[data[2]])
    ndim = data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(f"corrupt IDX file {path}: truncated header")
    shape = tuple(int(d) for d in np.frombuffer(data, ">u4", ndim, offset=4))
    expected = header + int(np.prod(shape)) * dtype.itemsize
    if len(data) != expected:
        raise ValueError(
            f"corrupt IDX file {path}: shape {shape} needs {expected} bytes, the file has "
            f"{len(data)}"
        )
    return np.frombuffer(data, dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def read_idx_pair(
    images_path: str | os.PathLike, labels_path: str | os.PathLike
) -> tuple[np.ndarray, np.ndarray]:
    """The images and labels of an MNIST-style pair of IDX files.

    Arguments:
        images_path: the IDX file of the images, (N, H, W) or (N, H, W, C) uint8.
        labels_path: the IDX file of the labels, (N,).

    Returns:
        (images (N, H, W, C) uint8, with C = 1 for grey images; labels (N,) int32).

    Raises:
        ValueError: the two files hold different numbers of samples, or either is not IDX.
    """
    images = read_idx(images_path)
    labels = read_idx(labels_path)
    if images.ndim == 3:
        images = images[..., None]
    if len(images) != len(labels):
        raise ValueError(
            f"{images_path} holds {len(images)} images but {labels_path} holds {len(labels)} labels"
        )
    return images, labels.astype(np.int32)


# ---------------------------------------------------------------------------------------------
# CIFAR binary format: records of <label byte(s)> <3072 bytes: 32x32 red, then green, then blue>.
# CIFAR-10 has one label byte; CIFAR-100 two (coarse, fine).


def read_cifar(
    paths: str | os.PathLike | Iterable[str | os.PathLike], kind: int = 10, label: str = "fine"
) -> tuple[np.ndarray, np.ndarray]:
    """The images and labels of CIFAR-10 or CIFAR-100 binary files, concatenated in order.

    Arguments:
        paths: one file, or several (CIFAR-10's five `data_batch_<i>.bin`), gzipped or not.
        kind: 10 (records of one label byte) or 100 (two: coarse, then fine).
        label: for CIFAR-100, which label to return: "fine" (100 classes) or "coarse" (20).

    Returns:
        (images (N, 32, 32, 3) uint8, HWC; labels (N,) int32).

    Raises:
        ValueError: `kind` is not 10 or 100, or a file is not a whole number of records.
    """
    if kind not in (10, 100):
        raise ValueError(f"kind must be 10 or 100, got {kind}")
    skip = 1 if kind == 10 else 2
    images = []
    labels = []
    for path in [paths] if isinstance(paths, (str, os.PathLike)) else paths:
        data = _read_bytes(path)
        if len(data) == 0 or len(data) % (3072 + skip):
            raise ValueError(
                f"corrupt CIFAR-{kind} file {path}: {len(data)} bytes is not a whole number "
                f"of {3072 + skip}-byte records"
            )
        records = np.frombuffer(data, np.uint8).reshape(-1, 3072 + skip)
        labels.append(records[:, skip - 1 if label == "fine" else 0].astype(np.int32))
        images.append(records[:, skip:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))  # CHW -> HWC
    return np.ascontiguousarray(np.concatenate(images)), np.concatenate(labels)


# ---------------------------------------------------------------------------------------------
# Where the data sets are

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


def fashion_mnist(split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST (Xiao et al., 2017): 28x28 grey images of clothing in 10 classes.

    The four IDX files are looked for in $FROST_DATA/fashion-mnist/ or $FROST_DATA when it is set,
    else in /usr/share/datasets/fashion-mnist (Debian's `dataset-fashion-mnist`).

    Arguments:
        split: "train" (60,000 images) or "test" (10,000).

    Returns:
        (images (N, 28, 28, 1) uint8; labels (N,) int32 in 0..9).

    Raises:
        MissingData: the files are not there (a FileNotFoundError whose message says where it
            looked and how to install them).
    """
    dirs = _dirs("fashion-mnist", "/usr/share/datasets/fashion-mnist")
    how = (
        "Install it with `sudo apt-get install dataset-fashion-mnist` (Debian/Ubuntu), or set "
        "FROST_DATA to a directory holding the four IDX files."
    )
    images_path, labels_path = _find(_FASHION, split, dirs, "Fashion-MNIST", how)
    return read_idx_pair(images_path, labels_path)


def cifar10(
    split: str = "train", root: str | os.PathLike | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-10 (Krizhevsky, 2009): 32x32 colour images in 10 classes, from its binary files.

    Arguments:
        split: "train" (the five `data_batch_<i>.bin`, 50,000 images) or "test"
            (`test_batch.bin`, 10,000).
        root: the `cifar-10-batches-bin` folder; None looks in $FROST_DATA/cifar-10-batches-bin/
            and $FROST_DATA.

    Returns:
        (images (N, 32, 32, 3) uint8; labels (N,) int32 in 0..9).

    Raises:
        MissingData: the files are not there (the message says where to download them).
    """
    files = {"train": [f"data_batch_{i}.bin" for i in range(1, 6)], "test": ["test_batch.bin"]}
    folder = "cifar-10-batches-bin"
    dirs = [pathlib.Path(root)] if root else _dirs(folder, None)
    how = (
        "Download https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz, extract it and "
        f"pass root=<path to {folder}> or set FROST_DATA to the directory holding {folder}/."
    )
    return read_cifar(_find(files, split, dirs, "CIFAR-10", how), kind=10)
