"""Random-access data sources: `len(source)` and `source[i]` -> one sample.

A sample is a tuple (or a dict) of numpy arrays, for example `(image (H, W, C) uint8, label ())`.
Sources only read; shuffling, augmentation and batching live in the sampler, the transforms
and the loader. Every source pickles small (file sources reopen their file in each worker), so
a loader can ship it to worker processes.

    Arrays(images, labels)[3]                -> (images[3], labels[3])
    Arrays(x=xs, y=ys)[3]                    -> {"x": xs[3], "y": ys[3]}
    Arrays(*read_idx_pair(images_path, labels_path))   # MNIST / Fashion-MNIST files
    Arrays(*read_cifar(paths, kind=10))      # CIFAR-10/100 binary files
    ImageFolder("train/")[3]                 -> (image (H, W, 3) uint8, label int32), one class per
    sub-folder TokenWindows("tokens.bin", 1024)[3]      -> (x (1024,) int32, y (1024,) int32), y = x
    shifted by one
"""

import gzip
import os
import pathlib

import numpy as np

from frost.config import MissingData, UsageError


class Arrays:
    """In-memory arrays indexed along their first axis: positional (tuple samples) or named
    (dict)."""

    def __init__(self, *arrays, **named):
        if arrays and named:
            raise TypeError(
                "Arrays takes positional arrays (tuple samples) or named arrays (dict samples), "
                "not both"
            )
        self.arrays = {k: np.asarray(a) for k, a in named.items()}
        if arrays:
            self.arrays = tuple(np.asarray(a) for a in arrays)
        lengths = [len(a) for a in (self.arrays.values() if named else self.arrays)]
        if not lengths:
            raise TypeError("Arrays needs at least one array")
        if len(set(lengths)) != 1:
            raise ValueError(
                f"Arrays: all arrays need the same length (first axis), got lengths {lengths}"
            )
        self.size = lengths[0]

    def __len__(self):
        return self.size

    def __getitem__(self, i):
        if isinstance(self.arrays, dict):
            return {k: a[i] for k, a in self.arrays.items()}
        return tuple(a[i] for a in self.arrays)


# ---------------------------------------------------------------------------------------------
# IDX (MNIST, Fashion-MNIST): magic 0x0000 | dtype code | ndim, then ndim big-endian uint32
# sizes, then the data in big-endian order. Files may be gzipped.

_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def _read_bytes(path) -> bytes:
    """A file's bytes, gunzipped when it starts with the gzip magic number."""
    data = pathlib.Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise ValueError(f"corrupt gzip file {path}: {e}") from e
    return data


def read_idx(path) -> np.ndarray:
    """Read an IDX file (gzipped or not) into a native-endian numpy array."""
    data = _read_bytes(path)
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_DTYPES:
        raise ValueError(
            f"{path} is not an IDX file (header {data[:4].hex() or 'empty'}; "
            f"expected 00 00 <dtype code> <ndim>)"
        )
    dtype, ndim = np.dtype(_IDX_DTYPES[data[2]]), data[3]
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


def read_idx_pair(images_path, labels_path):
    """(images (N, H, W, 1) uint8, labels (N,) int32) from an MNIST-style pair of IDX files."""
    images, labels = read_idx(images_path), read_idx(labels_path)
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


def read_cifar(paths, kind: int = 10, label: str = "fine"):
    """(images (N, 32, 32, 3) uint8, labels (N,) int32) from CIFAR-10 or CIFAR-100 binary files."""
    if kind not in (10, 100):
        raise ValueError(f"kind must be 10 or 100, got {kind}")
    skip = 1 if kind == 10 else 2
    images, labels = [], []
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

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")


class ImageFolder:
    """`root/<class name>/<image>` -> (image (H, W, C) uint8, label int32); classes sorted by name.

    Images are decoded with Pillow on access and converted to `mode` ("RGB": C=3, "L": C=1).
    Sizes may differ between files; add a `transforms.Resize` before batching if they do.
    """

    def __init__(self, root, mode: str = "RGB"):
        self.root, self.mode = pathlib.Path(root), mode
        if not self.root.is_dir():
            raise MissingData(f"ImageFolder: {self.root} is not a directory")
        self.classes = sorted(p.name for p in self.root.iterdir() if p.is_dir())
        found = [
            (str(p), label)
            for label, name in enumerate(self.classes)
            for p in sorted((self.root / name).iterdir())
            if p.suffix.lower() in IMAGE_SUFFIXES
        ]
        if not found:
            raise MissingData(
                f"ImageFolder: no {'/'.join(IMAGE_SUFFIXES)} files in sub-folders of {self.root}"
            )
        self.files = [path for path, _ in found]
        self.labels = np.array([label for _, label in found], np.int32)

    def __len__(self):
        return len(self.files)

    def name_of(self, i) -> str:
        """What sample `i` is, for error messages (the loader asks any source that has this)."""
        return self.files[i]

    def __getitem__(self, i):
        from PIL import Image

        path = self.files[i]
        try:
            with Image.open(path) as im:
                image = np.asarray(im.convert(self.mode))
        # Pillow raises several types (UnidentifiedImageError, OSError, SyntaxError); a bad file is
        # the user's to fix, so a UsageError (the loader carries it out of its workers as one)
        except Exception as e:
            raise UsageError(f"cannot read image {path}: {e}; fix or remove the file") from e
        return (image if image.ndim == 3 else image[..., None]), self.labels[i]


class TokenWindows:
    """Flat token files (memory-mapped uint16/uint32) as windows `(x, y)`: y is x shifted by one.

    Window i starts at token i * stride (stride defaults to seq_len: non-overlapping windows),
    so `x = tokens[s : s + seq_len]`, `y = tokens[s + 1 : s + seq_len + 1]`, both int32. `path`:
    one file, or a list of shard files whose windows follow one another (none spans two shards).
    """

    def __init__(self, path, seq_len: int, dtype="uint16", stride: int | None = None):
        self.paths = [str(p) for p in (path if isinstance(path, (list, tuple)) else [path])]
        self.path, self.seq_len, self.stride = self.paths[0], int(seq_len), int(stride or seq_len)
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.uint16, np.uint32):
            raise ValueError(f"TokenWindows: dtype must be uint16 or uint32, got {self.dtype}")
        counts = []
        for p in self.paths:
            nbytes = os.path.getsize(p)
            if nbytes % self.dtype.itemsize:
                raise ValueError(
                    f"{p}: {nbytes} bytes is not a whole number of {self.dtype} tokens"
                )
            counts.append(nbytes // self.dtype.itemsize)
        per_shard = [max(0, (count - 1 - self.seq_len) // self.stride + 1) for count in counts]
        self._starts = np.cumsum([0] + per_shard)  # (shards + 1,) the first window of each shard
        self.windows = int(self._starts[-1])
        if self.windows == 0:
            raise ValueError(
                f"{self.path}{f' and {len(self.paths) - 1} more' if len(self.paths) > 1 else ''} "
                f"hold {sum(counts)} tokens, too few for one window of {self.seq_len} + 1"
            )
        self._tokens = None

    def __len__(self):
        return self.windows

    def __getitem__(self, i):
        if self._tokens is None:  # opened lazily, so a pickled source maps the files in each worker
            self._tokens = [np.memmap(p, self.dtype, mode="r") for p in self.paths]
        if not -self.windows <= i < self.windows:
            raise IndexError(f"window {i} out of range for {self.windows} windows")
        i %= self.windows
        shard = int(np.searchsorted(self._starts, i, side="right")) - 1
        s = (i - int(self._starts[shard])) * self.stride
        chunk = np.asarray(self._tokens[shard][s : s + self.seq_len + 1], np.int32)
        return chunk[:-1], chunk[1:]

    def __getstate__(self):
        return {**self.__dict__, "_tokens": None}
