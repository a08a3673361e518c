"""Checkpoints: a PyTree of arrays in safetensors, plus a JSON manifest. No pickle.

    path = save(run_dir / "checkpoints", step, {"model": model, "opt_state": opt_state}, meta={...})
    tree, meta = load(latest(run_dir / "checkpoints"), template={"model": model, "opt_state": opt_state})

Layout: `<dir>/step_00001200/{arrays.safetensors, manifest.json}`. A checkpoint is written into
`step_00001200.tmp/`, each file fsynced, then the folder is renamed into place and the parent
fsynced, so a process killed mid-save leaves the previous checkpoints intact (`latest` ignores
`.tmp` folders; the next save removes them). Entries are named by their PyTree path
(`model.blocks[0].conv1.weight`); the manifest records each entry's shape and dtype and the
SHA-256 of the array file, so a corrupt or mismatched checkpoint is reported with the file and
the entry at fault. PRNG keys are stored as their raw `key_data`; bfloat16 as its 16-bit pattern.
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil

import jax
import jax.numpy as jnp
import numpy as np
from safetensors.numpy import load_file, save_file

FORMAT = "frost-checkpoint/1"


class CheckpointError(ValueError):
    pass


def _is_key(leaf) -> bool:
    return jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def _names(tree) -> list:
    """(entry name, leaf) pairs; the name is the leaf's PyTree path, e.g. 'model.blocks.0.conv1.weight'."""
    return [(jax.tree_util.keystr(path, simple=True, separator="."), leaf)
            for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]]


def _spec(leaf) -> tuple[str, tuple]:
    """(dtype name, shape) as stored: PRNG keys as their key data. Works on arrays and ShapeDtypeStructs."""
    if _is_key(leaf):
        return "key:" + str(jax.random.key_impl(leaf)), tuple(leaf.shape) + (2,)
    return np.dtype(leaf.dtype).name, tuple(leaf.shape)


def _stored(leaf) -> np.ndarray:
    array = np.asarray(jax.random.key_data(leaf)) if _is_key(leaf) else np.asarray(leaf)
    return array.view(np.uint16) if array.dtype == jnp.bfloat16 else array


def _fsync(path: pathlib.Path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(directory, step: int, tree, meta: dict | None = None, keep: int = 3) -> pathlib.Path:
    """Write `tree` atomically as checkpoint `step`; keep the newest `keep` checkpoints."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final, tmp = directory / f"step_{step:08d}", directory / f"step_{step:08d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    named = _names(tree)
    save_file({k: np.array(_stored(leaf), order="C") for k, leaf in named}, str(tmp / "arrays.safetensors"))
    digest = hashlib.sha256((tmp / "arrays.safetensors").read_bytes()).hexdigest()
    entries = {}
    for k, leaf in named:
        dtype, shape = _spec(leaf)
        entries[k] = {"dtype": dtype, "shape": list(shape)}
    manifest = {"format": FORMAT, "step": step, "sha256": digest, "meta": meta or {}, "entries": entries}
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1))
    for f in ("arrays.safetensors", "manifest.json"):
        _fsync(tmp / f)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync(directory)
    for old in checkpoints(directory)[:-keep] if keep else []:
        shutil.rmtree(old, ignore_errors=True)
    for stale in directory.glob("step_*.tmp"):
        shutil.rmtree(stale, ignore_errors=True)
    return final


def checkpoints(directory) -> list[pathlib.Path]:
    """Complete checkpoints in `directory`, oldest first."""
    directory = pathlib.Path(directory)
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.glob("step_*") if p.is_dir() and not p.name.endswith(".tmp")
                  and (p / "manifest.json").exists())


def latest(directory) -> pathlib.Path | None:
    found = checkpoints(directory)
    return found[-1] if found else None


def read_manifest(path) -> dict:
    path = pathlib.Path(path)
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path / 'manifest.json'}: cannot read checkpoint manifest ({e})") from e
    if manifest.get("format") != FORMAT:
        raise CheckpointError(f"{path / 'manifest.json'}: unknown format {manifest.get('format')!r}, expected {FORMAT!r}")
    return manifest


def load(path, template, strict: bool = True):
    """Load checkpoint `path` into the structure of `template` (arrays or ShapeDtypeStructs);
    return `(tree, meta)`. With `strict=False`, entries of the file not in `template` are ignored
    (e.g. load only {"model": ...} from a full training checkpoint)."""
    path = pathlib.Path(path)
    manifest = read_manifest(path)
    file = path / "arrays.safetensors"
    try:
        blob = file.read_bytes()
    except OSError as e:
        raise CheckpointError(f"{file}: cannot read checkpoint arrays ({e})") from e
    if hashlib.sha256(blob).hexdigest() != manifest["sha256"]:
        raise CheckpointError(f"{file}: checksum mismatch, the file is corrupt or was changed after saving")
    arrays = load_file(str(file))
    named = _names(template)
    missing = sorted({k for k, _ in named} - set(manifest["entries"]))
    extra = sorted(set(manifest["entries"]) - {k for k, _ in named}) if strict else []
    if missing or extra:
        raise CheckpointError(f"{file}: checkpoint and model differ: missing entries {missing[:5]}, "
                              f"unexpected entries {extra[:5]}")
    leaves = []
    for name, leaf in named:
        dtype, shape = _spec(leaf)
        entry = manifest["entries"][name]
        if entry["dtype"] != dtype or tuple(entry["shape"]) != shape:
            raise CheckpointError(f"{file}: entry '{name}' is {entry['dtype']}{entry['shape']}, "
                                  f"but the model expects {dtype}{list(shape)}")
        array = arrays[name].reshape(shape)  # safetensors stores 0-d arrays as 1-d
        if dtype == "bfloat16":
            array = array.view(jnp.bfloat16)
        leaves.append(jax.random.wrap_key_data(array, impl=dtype[4:]) if dtype.startswith("key:") else
                      jnp.asarray(array))
    return jax.tree.unflatten(jax.tree.structure(template), leaves), manifest["meta"]
