"""Checkpoints: a PyTree of arrays in safetensors, plus a JSON manifest. No pickle, no gather.

```python
path = save(run_dir / "checkpoints", step, {"model": model, "opt_state": opt_state}, meta={...})
template = {"model": model, "opt_state": opt_state}  # arrays or ShapeDtypeStructs
tree, meta = load(latest(run_dir / "checkpoints"), template)
```

Layout: `<dir>/step_00001200/{manifest.json, arrays.safetensors}`, or with several processes one
`arrays.<process>.safetensors` per process. Entries are named by their PyTree path
(`model.blocks[0].conv1.weight`). Each array is stored as its distinct shards, written where
they live: an array on one device, or replicated, is one shard; an FSDP-sharded array on 8
devices is 8. Each shard is written by one process that holds it (of several replicas, the one
picked by a hash of the entry name, so replicated state is spread over the processes too), so
no process gathers another's data and each writes about 1/N of an FSDP state. The manifest,
written by process 0, records each entry's global shape, dtype and sharding, and each shard's
index (start, stop per axis), file, key and SHA-256.

Loading builds each array with the template leaf's sharding (a jax.Array's or a
ShapeDtypeStruct's `.sharding`; without one, whole on the default device): each device's block
is cut from the stored shards that overlap it, and only those are read and checked. So a
checkpoint saved on 8 devices loads on 1, on 2, or on a 2x4 mesh with another layout. Across
hosts the checkpoint folder must be shared storage; every process calls `save` and `load`.

Atomic: process 0 stages the checkpoint in `step_00001200.tmp/` with `frost.atomic.directory`,
every process writes its file there with `frost.atomic.write` between barriers, and the folder is
renamed into place when all are written, so a process killed mid-save leaves the previous
checkpoints intact (`latest` ignores `.tmp` folders; the next save removes them). A corrupt or
mismatched checkpoint is reported with the file and the entry at fault. PRNG keys are stored as
their raw `key_data`; bfloat16 as its 16-bit pattern. Format 1 (one arrays.safetensors with a
whole-file SHA-256, written before sharding, 2026-12-02) is refused by name: its reader was dropped
to keep one checkpoint format.
"""

import contextlib
import hashlib
import json
import pathlib
import shutil
import zlib

import jax
import jax.numpy as jnp
import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save as safetensors_bytes

from frost import atomic
from frost.config import FrostError
from frost.tree import PyTree, names

FORMAT = "frost-checkpoint/2"


class CheckpointError(FrostError, ValueError):
    """A checkpoint that cannot be used as it is: missing, damaged or from another model."""


def _is_key(leaf) -> bool:
    return jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def _spec(leaf) -> tuple[str, tuple]:
    """(dtype name, shape) as stored: PRNG keys as their key data. Works on arrays and
    ShapeDtypeStructs."""
    if _is_key(leaf):  # a key dtype names its impl, on arrays and ShapeDtypeStructs alike
        return "key:" + leaf.dtype._impl.name, tuple(leaf.shape) + leaf.dtype._impl.key_shape
    return np.dtype(leaf.dtype).name, tuple(leaf.shape)


def _stored(array) -> np.ndarray:
    array = np.ascontiguousarray(array)
    return array.view(np.uint16) if array.dtype == jnp.bfloat16 else array


def _sha256(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data).hexdigest()


def _bounds(index, shape) -> tuple:
    """A tuple of slices over `shape` -> ((start, stop), ...)."""
    return tuple(s.indices(n)[:2] for s, n in zip(index, shape))


def _window(lo, hi, bounds) -> tuple:
    """The slices that cut [lo, hi) per axis out of the block at `bounds` ((start, stop), ...)."""
    return tuple(slice(low - a, high - a) for low, high, (a, _) in zip(lo, hi, bounds))


def _describe(leaf):
    sharding = getattr(leaf, "sharding", None)
    if not isinstance(sharding, jax.sharding.NamedSharding):
        return None
    return {
        "mesh": dict(sharding.mesh.shape),
        "spec": [list(p) if isinstance(p, tuple) else p for p in sharding.spec],
    }


def _shards(name: str, array, shape) -> list:
    """[(bounds, process that writes it, its data there or None)] for each distinct shard of
    `array`. Host values, and with several processes an array local to each process, are process
    0's."""
    if not isinstance(array, jax.Array) or (array.is_fully_addressable and jax.process_count() > 1):
        return [(tuple((0, n) for n in shape), 0, array)]
    holders = {}
    for device, index in array.sharding.devices_indices_map(shape).items():
        holders.setdefault(_bounds(index, shape), []).append(device)
    local = {_bounds(s.index, shape): s.data for s in array.addressable_shards}
    # which holder (by device id) writes each shard: spread by entry name
    replica = zlib.crc32(name.encode())
    out = []
    for bounds, devices in sorted(holders.items()):
        writer = sorted(devices, key=lambda d: d.id)[replica % len(devices)]
        out.append((bounds, writer.process_index, local.get(bounds)))
    return out


def _file(process: int, count: int) -> str:
    """The shard file that `process` writes, of `count` writing processes."""
    return "arrays.safetensors" if count == 1 else f"arrays.{process}.safetensors"


def _barrier(name: str, count: int) -> None:
    if count > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


@contextlib.contextmanager
def _staging(final: pathlib.Path, count: int):
    """The temporary folder the `count` writing processes write into: process 0 owns it
    (frost.atomic.directory: removed on failure, renamed to `final` on success); the others wait
    until it exists."""
    if jax.process_index() == 0:
        with atomic.directory(final) as tmp:
            _barrier(f"{final} staged", count)
            yield tmp
    else:
        _barrier(f"{final} staged", count)
        yield final.with_name(final.name + ".tmp")  # frost.atomic.directory's temporary folder
    _barrier(f"{final} saved", count)


def _gather_digests(tmp: pathlib.Path, digests: dict, count: int) -> dict:
    """Every process's {key: sha256} on process 0 (through the shared folder; {} elsewhere)."""
    me = jax.process_index()
    if count == 1:
        return digests
    atomic.write(tmp / f"sha256.{me}.json", json.dumps(digests))
    _barrier(f"{tmp} written", count)
    if me != 0:
        return {}
    out = {}
    for i in range(count):
        out.update(json.loads((tmp / f"sha256.{i}.json").read_text()))
        (tmp / f"sha256.{i}.json").unlink()
    return out


def save(
    directory: str | pathlib.Path,
    step: int,
    tree: PyTree,
    meta: dict | None = None,
    keep: int = 3,
) -> pathlib.Path:
    """Write `tree` atomically as checkpoint `step`, each process its own shards; keep the newest
    `keep` checkpoints. Every process calls it (with the same tree structure and `step`). A tree
    without global arrays (host values, or arrays local to each process, e.g. gathered state) is
    written by process 0 alone; the other processes return at once.

    Arguments:
        directory: the folder of checkpoints (made if missing), e.g. `run_dir / "checkpoints"`.
        step: the checkpoint's number, its folder's name (`step_00001200`).
        tree: the arrays to save, in any PyTree: jax or numpy arrays (bfloat16 and PRNG keys
            included), sharded or not.
        meta: JSON values kept in the manifest, given back by `load`.
        keep: how many checkpoints to keep, the newest; 0 keeps every one.

    Returns:
        The checkpoint's folder, `directory/step_<step, 8 digits>`.
    """
    directory = pathlib.Path(directory)
    sharded = any(
        isinstance(x, jax.Array) and not x.is_fully_addressable for x in jax.tree.leaves(tree)
    )
    me = jax.process_index()
    count = jax.process_count() if sharded else 1  # the processes that write
    final = directory / f"step_{step:08d}"
    if me >= count:
        return final
    entries = {}  # the manifest's entries: {name: dtype, shape, sharding, shards}
    mine = {}  # the shards this process writes: {key: array}
    for name, leaf in names(tree):
        dtype, shape = _spec(leaf)
        parts = _shards(name, jax.random.key_data(leaf) if _is_key(leaf) else leaf, shape)
        shards = []
        for k, (bounds, writer, data) in enumerate(parts):
            key = f"{name}#{k}"
            shards.append(
                {"index": [list(b) for b in bounds], "file": _file(writer, count), "key": key}
            )
            if writer == me:
                mine[key] = _stored(data)
        entries[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "sharding": _describe(leaf),
            "shards": shards,
        }
    with _staging(final, count) as tmp:
        atomic.write(tmp / _file(me, count), safetensors_bytes(mine))
        digests = _gather_digests(tmp, {k: _sha256(v) for k, v in mine.items()}, count)
        if me == 0:
            for shard in (s for entry in entries.values() for s in entry["shards"]):
                shard["sha256"] = digests[shard["key"]]
            manifest = {
                "format": FORMAT,
                "step": step,
                "processes": count,
                "meta": meta or {},
                "entries": entries,
            }
            # compact: 2/3 of indented
            atomic.write(tmp / "manifest.json", json.dumps(manifest, separators=(",", ":")))
    # the checkpoints before the newest `keep` (none with keep=0), and folders of killed saves
    if me == 0:
        for old in checkpoints(directory)[:-keep] + list(directory.glob("step_*.tmp")):
            shutil.rmtree(old, ignore_errors=True)
    return final


def checkpoints(directory: str | pathlib.Path) -> list[pathlib.Path]:
    """The checkpoints in `directory` (renamed into place, so complete when written), oldest first.
    One damaged later (its manifest deleted) is still listed: loading it fails loudly instead of
    silently rolling back to an older one.

    Arguments:
        directory: the folder of checkpoints; a missing one holds none.

    Returns:
        The checkpoint folders (`step_*`, without unfinished `.tmp` ones), oldest first.
    """
    return sorted(
        p
        for p in pathlib.Path(directory).glob("step_*")
        if p.is_dir() and not p.name.endswith(".tmp")
    )


def latest(directory: str | pathlib.Path) -> pathlib.Path | None:
    """The newest checkpoint in `directory`.

    Arguments:
        directory: the folder of checkpoints; a missing one holds none.

    Returns:
        The newest checkpoint's folder, or None when there is none.
    """
    return max(checkpoints(directory), default=None)


def read_manifest(path: str | pathlib.Path) -> dict:
    """A checkpoint's manifest, checked to be of this format (a CheckpointError otherwise).

    Arguments:
        path: the checkpoint's folder.

    Returns:
        The manifest: {"format", "step", "processes", "meta", "entries"}, where each entry holds
        the array's dtype, shape, sharding and shards (index, file, key, sha256).
    """
    path = pathlib.Path(path)
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(
            f"{path / 'manifest.json'}: cannot read the checkpoint's manifest ({e}); the "
            f"checkpoint is damaged: remove {path} to resume from the one before it"
        ) from None
    if manifest.get("format") != FORMAT:
        raise CheckpointError(
            f"{path / 'manifest.json'}: unknown format {manifest.get('format')!r}, expected "
            f"{FORMAT!r}"
        )
    return manifest


class _Reader:
    """Stored shards, read on demand from their files and checked against the manifest."""

    def __init__(self, path: pathlib.Path, stack: contextlib.ExitStack):
        self.path = path
        self.stack = stack  # keeps the open files
        self.files = {}  # path -> open safetensors file

    def __call__(self, name: str, shard: dict) -> np.ndarray:
        file = self.path / shard["file"]
        try:
            if file not in self.files:
                self.files[file] = self.stack.enter_context(safe_open(str(file), framework="numpy"))
            array = self.files[file].get_tensor(shard["key"])
        except (OSError, SafetensorError) as e:
            raise CheckpointError(f"{file}: cannot read entry '{name}' ({e})") from e
        if _sha256(array) != shard["sha256"]:
            raise CheckpointError(
                f"{file}: checksum mismatch in entry '{name}', the file is corrupt or was "
                "changed after saving"
            )
        # safetensors may store 0-d arrays as 1-d
        return array.reshape([b - a for a, b in shard["index"]])


def _assemble(name: str, entry: dict, leaf, read: _Reader) -> jax.Array:
    """The array of `leaf`'s dtype, shape and sharding, each device's block cut from the stored
    shards that overlap it (each read at most once)."""
    dtype, shape = _spec(leaf)
    if entry["dtype"] != dtype or tuple(entry["shape"]) != shape:
        raise CheckpointError(
            f"{read.path / entry['shards'][0]['file']}: entry '{name}' is {entry['dtype']}"
            f"{entry['shape']}, but the model expects {dtype}{list(shape)}"
        )
    if dtype == "bfloat16":
        stored = np.uint16
    elif dtype.startswith("key:"):
        stored = np.uint32
    else:
        stored = np.dtype(dtype)
    cache = {}

    def block(index) -> np.ndarray:
        bounds = _bounds(index, shape)
        out = np.empty([b - a for a, b in bounds], stored)
        for k, shard in enumerate(entry["shards"]):
            lo = [max(a, c) for (a, _), (c, _) in zip(bounds, shard["index"])]
            hi = [min(b, d) for (_, b), (_, d) in zip(bounds, shard["index"])]
            if any(low >= high for low, high in zip(lo, hi)):
                continue
            if k not in cache:
                cache[k] = read(name, shard)
            out[_window(lo, hi, bounds)] = cache[k][_window(lo, hi, shard["index"])]
        return out.view(jnp.bfloat16) if dtype == "bfloat16" else out

    sharding = getattr(leaf, "sharding", None)
    if sharding is None:
        array = jnp.asarray(block(tuple(slice(None) for _ in shape)))
    else:
        array = jax.make_array_from_callback(shape, sharding, block)
    return jax.random.wrap_key_data(array, impl=dtype[4:]) if dtype.startswith("key:") else array


def load(path: str | pathlib.Path, template: PyTree, strict: bool = True) -> tuple[PyTree, dict]:
    """Load checkpoint `path` into the structure and shardings of `template`.

    Arguments:
        path: the checkpoint's folder (e.g. from `latest`).
        template: a tree of arrays or ShapeDtypeStructs: the structure, dtypes and shapes the
            checkpoint must hold, and each leaf's sharding (`.sharding`; without one, the array
            is loaded whole on the default device).
        strict: refuse entries of the checkpoint that `template` lacks; with False they are
            ignored (e.g. load only {"model": ...} from a full training checkpoint).

    Returns:
        `(tree, meta)`: `template`'s tree of loaded jax.Arrays, and the `meta` given to `save`.

    Raises:
        CheckpointError: a missing or damaged file, a checksum mismatch, or entries that differ
            from `template` (each message names the file and the entry).
    """
    path = pathlib.Path(path)
    manifest = read_manifest(path)
    entries = manifest["entries"]
    named = names(template)
    missing = sorted({k for k, _ in named} - set(entries))
    extra = sorted(set(entries) - {k for k, _ in named}) if strict else []
    if missing or extra:
        raise CheckpointError(
            f"{path}: checkpoint and model differ: missing entries {missing[:5]}, "
            f"unexpected entries {extra[:5]}"
        )
    with contextlib.ExitStack() as stack:
        read = _Reader(path, stack)
        leaves = [_assemble(name, entries[name], leaf, read) for name, leaf in named]
    return jax.tree.unflatten(jax.tree.structure(template), leaves), manifest["meta"]
