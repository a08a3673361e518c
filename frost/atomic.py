"""Atomic, durable file writes: the one way Frost writes a file (checkpoints, tokenizers, results).

    atomic.write(run_dir / "result.json", json.dumps(result))
    with atomic.directory(ckpt_dir / "step_00000100") as tmp:   # fill tmp/, then it is renamed into
    place
        ...

A file is written to a temporary name in the same folder, flushed and fsynced, renamed over the
target, and the folder fsynced, so a reader sees the old file or the new one, never a torn one,
and a crash after `write` returns loses nothing. Files are created with mode 0o666 minus the
user's umask, as `open()` would (not mkstemp's 0o600).
"""

import contextlib
import io
import os
import pathlib
import shutil
from collections.abc import Iterator


def fsync(path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _renaming(tmp: pathlib.Path, path: pathlib.Path, remove):
    """Around the code that fills `tmp` (a file or a folder): on success, rename it over `path` and
    fsync the folder; on failure, `remove(tmp)` and leave `path` as it was."""
    try:
        yield
        os.replace(tmp, path)
    except BaseException:
        remove(tmp)
        raise
    fsync(path.parent)


def write(path, data) -> pathlib.Path:
    """Replace `path` with `data` (bytes, or str written as UTF-8, or an iterable of them, streamed:
    a token file larger than memory) atomically and durably."""
    path = pathlib.Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    # open(): mode 0o666 - umask
    with _renaming(tmp, path, lambda tmp: tmp.unlink(missing_ok=True)), open(tmp, "wb") as f:
        for part in [data] if isinstance(data, (bytes, bytearray, memoryview, str)) else data:
            f.write(part.encode("utf-8") if isinstance(part, str) else part)
        f.flush()
        os.fsync(f.fileno())
    return path


def write_png(path, figure) -> pathlib.Path:
    """A matplotlib Figure, written as a PNG file the way `write` writes."""
    buf = io.BytesIO()
    figure.savefig(buf, format="png", dpi=100)
    return write(path, buf.getvalue())


@contextlib.contextmanager
def directory(path) -> Iterator[pathlib.Path]:
    """Yield an empty temporary folder beside `path`; on success, fsync its files and rename it
    to `path` (replacing an older one); on failure, remove it and leave `path` as it was."""
    path = pathlib.Path(path)
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with _renaming(tmp, path, lambda tmp: shutil.rmtree(tmp, ignore_errors=True)):
        yield tmp
        for f in tmp.iterdir():
            fsync(f)
        if path.exists():
            shutil.rmtree(path)
