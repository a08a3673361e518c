"""Random-access data sources: `len(source)` and `source[i]` -> one sample.

A sample is a tuple (or a dict) of numpy arrays, for example `(image (H, W, C) uint8, label ())`.
Sources only read; shuffling, augmentation and batching live in the sampler, the transforms
and the loader. Every source pickles small (file sources reopen their file in each worker), so
a loader can ship it to worker processes.

```python
Arrays(images, labels)[3]             # (images[3], labels[3])
Arrays(x=xs, y=ys)[3]                 # {"x": xs[3], "y": ys[3]}
Arrays(*datasets.fashion_mnist())     # a real data set's arrays (frost.datasets reads its files)
ImageFolder("train/")[3]              # (image (H, W, 3) uint8, label int32), a class per folder
TokenWindows("tokens.bin", 1024)[3]   # (x (1024,) int32, y (1024,) int32), y = x shifted by one
```
"""

import os
import pathlib
from collections.abc import Sequence

import numpy as np

from frost.config import MissingData, UsageError


class Arrays:
    """In-memory arrays indexed along their first axis: positional (tuple samples) or named
    (dict samples).

    ```python
    Arrays(images, labels)[3]   # (images[3], labels[3])
    Arrays(x=xs, y=ys)[3]       # {"x": xs[3], "y": ys[3]}
    ```

    Arguments:
        *arrays: arrays of one length N along axis 0, such as (N, H, W, C) images and (N,)
            labels; a sample is the tuple of their rows.
        **named: arrays of one length N, by name; a sample is the dict of their rows. Give
            positional or named arrays, not both.

    Raises:
        TypeError: no arrays, or both positional and named ones.
        ValueError: the arrays' lengths differ.
    """

    def __init__(self, *arrays: np.ndarray, **named: np.ndarray):
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


IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")


class ImageFolder:
    """`root/<class name>/<image>` -> (image (H, W, C) uint8, label int32); classes sorted by name.

    Images (.jpg, .jpeg, .png) are decoded with Pillow on access and converted to `mode`. Sizes
    may differ between files; add a `transforms.Resize` before batching if they do. A file Pillow
    cannot read raises a UsageError naming it.

    Arguments:
        root: the folder holding one sub-folder per class; label i is the i-th name in sorted
            order (`self.classes`).
        mode: Pillow's mode to convert to: "RGB" (C = 3) or "L" (grey, C = 1).

    Raises:
        MissingData: `root` is not a folder, or its sub-folders hold no images.
    """

    def __init__(self, root: str | os.PathLike, mode: str = "RGB"):
        self.root = pathlib.Path(root)
        self.mode = mode
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

    Window i starts at token s = i * stride, so `x = tokens[s : s + seq_len]` and
    `y = tokens[s + 1 : s + seq_len + 1]`, both (seq_len,) int32: a language model's inputs and
    next-token targets. The files are opened lazily, so a pickled source maps them in each worker.

    Arguments:
        path: one token file, or a list of shard files whose windows follow one another (no
            window spans two shards), as `frost tokenizer encode` and `frost.data.corpus` write
            them.
        seq_len: the tokens in each window, T.
        dtype: the files' token dtype, "uint16" or "uint32" (`frost.text.token_dtype`).
        stride: tokens between window starts; None means seq_len (windows that do not overlap).

    Raises:
        ValueError: a bad dtype, a file that is not a whole number of tokens, or too few tokens
            for one window.
    """

    def __init__(
        self,
        path: str | os.PathLike | Sequence[str | os.PathLike],
        seq_len: int,
        dtype: str | np.dtype = "uint16",
        stride: int | None = None,
    ):
        self.paths = [str(p) for p in (path if isinstance(path, (list, tuple)) else [path])]
        self.path = self.paths[0]
        self.seq_len = int(seq_len)
        self.stride = int(stride or seq_len)
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
