"""Checkpoints: round trips, errors, atomic saves, and sharded saves restored on other meshes.

The sharded cases run this file as a script in subprocesses, since the device count and the
multi-process runtime are fixed when JAX starts (and this pytest process has started it):

    python tests/test_checkpoint.py devices DIR           # 8 forced CPU devices, one process
    python tests/test_checkpoint.py process I N PORT DIR  # process I of N on localhost, 4 devices
    each
"""

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import textwrap
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import save_file

from frost import checkpoint, optim, parallel
from frost.models import gpt, resnet

TIMEOUT = 240


def build(make, key):
    """make(key) compiled without XLA's backend optimisation: CPU compiles random-number code ~10x
    faster so."""
    return jax.jit(make, compiler_options={"xla_backend_optimization_level": 0})(key)


def tiny_model(key):
    return build(
        lambda k: resnet.ResNet(resnet.BasicBlock, (1, 1), (4, 8), 3, 1, False, "A", key=k), key
    )


def equal(a, b):
    if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
        a, b = jax.random.key_data(a), jax.random.key_data(b)
    assert a.dtype == b.dtype
    np.testing.assert_array_equal(
        np.asarray(a).astype(np.float32) if a.dtype == jnp.bfloat16 else np.asarray(a),
        np.asarray(b).astype(np.float32) if b.dtype == jnp.bfloat16 else np.asarray(b),
    )


# --- one process, one device ---


def test_round_trip_with_key_bf16_and_optimizer_state(tmp_path, key):
    model = tiny_model(key)
    opt = optim.adamw(1e-3)
    tree = {
        "model": model,
        "opt_state": opt.init(model),
        "key": jax.random.key(3),
        "rbg": jax.random.key(4, impl="rbg"),  # key data of 4 words, not 2
        "half": jnp.arange(4, dtype=jnp.bfloat16) / 3,
        "scalar": jnp.float32(2.5),
    }
    path = checkpoint.save(tmp_path, 7, tree, meta={"note": "hi"})
    loaded, meta = checkpoint.load(path, tree)
    assert meta == {"note": "hi"}
    for a, b in zip(jax.tree.leaves(tree), jax.tree.leaves(loaded)):
        equal(a, b)
    manifest = json.loads((path / "manifest.json").read_text())
    assert sorted(p.name for p in path.iterdir()) == ["arrays.safetensors", "manifest.json"]
    entry = manifest["entries"]["model.blocks.0.conv1.weight"]
    assert (
        entry["shape"] == [3, 3, 4, 4]
        and len(entry["shards"]) == 1
        and entry["shards"][0]["index"] == [[0, 3], [0, 3], [0, 4], [0, 4]]
    )


def test_keeps_last_k(tmp_path):
    for step in range(5):
        checkpoint.save(tmp_path, step, {"x": jnp.ones(2) * step}, keep=2)
    assert [p.name for p in checkpoint.checkpoints(tmp_path)] == ["step_00000003", "step_00000004"]
    assert checkpoint.latest(tmp_path).name == "step_00000004"


def test_corrupt_and_mismatched_checkpoints_name_the_file_and_entry(tmp_path, key):
    tree = {"model": tiny_model(key)}
    path = checkpoint.save(tmp_path, 1, tree)
    other = {
        "model": build(
            lambda k: resnet.ResNet(resnet.BasicBlock, (1, 1), (4, 16), 3, 1, False, "A", key=k),
            key,
        )
    }
    with pytest.raises(
        checkpoint.CheckpointError,
        match=r"arrays.safetensors: entry 'model.blocks.1.conv1.weight' "
        r"is float32\[3, 3, 4, 16\].*expects float32\[3, 3, 4, 8\]",
    ):
        checkpoint.load(checkpoint.save(tmp_path, 2, other), tree)
    with pytest.raises(checkpoint.CheckpointError, match=r"missing entries \['extra'\]"):
        checkpoint.load(path, {**tree, "extra": jnp.ones(1)})
    blob = bytearray((path / "arrays.safetensors").read_bytes())
    blob[-5] ^= 0xFF
    (path / "arrays.safetensors").write_bytes(bytes(blob))
    with pytest.raises(
        checkpoint.CheckpointError, match=f"{path}/arrays.safetensors: checksum mismatch in entry"
    ):
        checkpoint.load(path, tree)
    (path / "arrays.safetensors").unlink()
    with pytest.raises(
        checkpoint.CheckpointError, match=f"{path}/arrays.safetensors: cannot read entry"
    ):
        checkpoint.load(path, tree)
    (path / "manifest.json").write_text("{truncated")
    with pytest.raises(checkpoint.CheckpointError, match="manifest.json: cannot read"):
        checkpoint.load(path, tree)
    # a deleted manifest: still the latest, refused, never a silent rollback
    (path / "manifest.json").unlink()
    assert path in checkpoint.checkpoints(tmp_path)
    with pytest.raises(
        checkpoint.CheckpointError, match=f"damaged: remove {path} to resume from the one before"
    ):
        checkpoint.load(path, tree)


def test_a_format_1_checkpoint_is_refused_by_name(tmp_path):
    path = tmp_path / "step_00000009"
    path.mkdir()
    save_file({"model.w": np.ones((3, 4), np.float32)}, str(path / "arrays.safetensors"))
    (path / "manifest.json").write_text(
        json.dumps(
            {
                "format": "frost-checkpoint/1",
                "step": 9,
                "meta": {},
                "entries": {"model.w": {"dtype": "float32", "shape": [3, 4]}},
            }
        )
    )
    with pytest.raises(
        checkpoint.CheckpointError,
        match="unknown format 'frost-checkpoint/1', expected 'frost-checkpoint/2'",
    ):
        checkpoint.load(checkpoint.latest(tmp_path), {"model": {"w": jnp.zeros((3, 4))}})


def test_process_killed_mid_save_leaves_previous_checkpoint(tmp_path):
    script = textwrap.dedent(f"""
        import time, jax.numpy as jnp
        from frost import atomic
        from frost import checkpoint
        checkpoint.save({str(tmp_path)!r}, 1, {{"x": jnp.ones(1000)}})
        atomic.fsync = lambda path: time.sleep(60)   # hang inside the second save
        checkpoint.save({str(tmp_path)!r}, 2, {{"x": jnp.zeros(1000)}})
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", script], env={**os.environ, "JAX_PLATFORMS": "cpu"}
    )
    try:
        deadline = time.time() + 60
        while not (tmp_path / "step_00000002.tmp" / "arrays.safetensors").exists():
            assert time.time() < deadline and proc.poll() is None, (
                "the saving process never reached step 2"
            )
            time.sleep(0.05)
        time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert checkpoint.latest(tmp_path).name == "step_00000001"
    tree, _ = checkpoint.load(checkpoint.latest(tmp_path), {"x": jnp.zeros(1000)})
    np.testing.assert_array_equal(tree["x"], np.ones(1000))
    checkpoint.save(tmp_path, 3, {"x": jnp.zeros(1000)})  # the next save cleans the partial one
    assert not list(tmp_path.glob("*.tmp"))


# --- sharded: 8 devices in one process, and 2 processes of 4 devices ---


def env(devices: int):
    # conftest's flags too
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}"
    return {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": flags.strip()}


def last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def eight_devices(tmp_path_factory):
    proc = subprocess.run(
        [sys.executable, __file__, "devices", str(tmp_path_factory.mktemp("devices"))],
        env=env(8),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return last_json(proc.stdout)


def test_fsdp_save_on_8_devices_restores_on_1_2_and_2x4(eight_devices):
    r = eight_devices
    assert r["shards"]["model.blocks.0.fc.weight"] == 8 and r["shards"]["key"] == 1
    assert r["restored"] == {"1 device": True, "2 devices": True, "2x4 mesh": True}
    assert r["shardings_kept"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_write_and_read_half_each(tmp_path):
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "process", str(i), "2", str(port), str(tmp_path)],
            env=env(4),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    try:
        outputs = [p.communicate(timeout=TIMEOUT) for p in procs]
    finally:
        for p in procs:  # end both, on success or failure
            if p.poll() is None:
                p.kill()
                p.wait(10)
    results = []
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, err[-3000:]
        results.append(last_json(out))
    total = results[0]["total_bytes"]
    assert sum(r["written"] for r in results) == total
    for r in results:
        assert r["restored"] == {"same mesh": True, "1 device each": True, "2x4 mesh": True}
        assert r["written"] < 0.6 * total and r["read_same_mesh"] < 0.6 * total  # about 1/2 each
    assert [r["writes_local"] for r in results] == [
        True,
        False,
    ]  # a process-local array: process 0's copy
    assert results[1]["local_files"] == ["arrays.safetensors", "manifest.json"]
    assert sorted(results[0]["files"]) == [
        "arrays.0.safetensors",
        "arrays.1.safetensors",
        "manifest.json",
    ]


# --- the subprocess side ---


def sample_state():
    """A GPT's parameters, AdamW state and key, every float leaf random (host values, same in every
    process)."""
    model = jax.eval_shape(
        lambda k: gpt.GPT(64, 32, 2, 4, 16, rotary=True, key=k), jax.random.key(0)
    )
    tree = {
        "model": model,
        "opt_state": jax.eval_shape(optim.adamw(1e-2).init, model),
        "half": jax.ShapeDtypeStruct((24, 8), jnp.bfloat16),
    }
    rng = np.random.default_rng(0)
    host = jax.tree.map(
        lambda s: (
            rng.standard_normal(s.shape)
            if jnp.issubdtype(s.dtype, jnp.floating)
            else rng.integers(0, 100, s.shape)
        ).astype(s.dtype),
        tree,
    )
    return host


def place(host, shardings, mesh):
    """Host values laid out with `shardings`, plus a replicated PRNG key and an array local to each
    process."""
    key = jax.jit(
        lambda: jax.random.key(7),
        out_shardings=jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()),
    )()
    return {
        **parallel.put(host, shardings),
        "key": key,
        "local": jnp.arange(6, dtype=jnp.float32) / 2,
    }


def templates(host, shardings=None):
    tree = {**host, "key": jax.random.key(7)}
    local = jax.ShapeDtypeStruct((6,), jnp.float32)
    if shardings is None:
        return {
            **jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree),
            "local": local,
        }
    shardings = {
        **shardings,
        "key": jax.sharding.NamedSharding(shardings["half"].mesh, jax.sharding.PartitionSpec()),
    }
    return {
        **jax.tree.map(
            lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings
        ),
        "local": local,
    }


def matches(loaded, host) -> bool:
    """Every addressable shard of `loaded` equals the host values at its index."""
    expected = {
        **host,
        "key": jax.random.key_data(jax.random.key(7)),
        "local": np.arange(6, dtype=np.float32) / 2,
    }
    got = {**loaded, "key": jax.random.key_data(loaded["key"])}
    for a, h in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
        h = np.asarray(h)
        for shard in a.addressable_shards:
            if a.dtype != h.dtype or not np.array_equal(np.asarray(shard.data), h[shard.index]):
                return False
    return True


class CountingReads:
    """Wraps safetensors.safe_open to count the bytes of the tensors read."""

    count = 0

    def __init__(self, opener):
        self.opener = opener

    def __call__(self, *args, **kwargs):
        handle, counter = self.opener(*args, **kwargs), self

        class Counted:
            def __enter__(self):
                self.inner = handle.__enter__()
                return self

            def __exit__(self, *exc):
                return handle.__exit__(*exc)

            def get_tensor(self, key):
                array = self.inner.get_tensor(key)
                counter.count += array.nbytes
                return array

        return Counted()


def devices_job(folder):
    host = sample_state()
    mesh8 = parallel.make_mesh(data=8)
    sh8 = parallel.fsdp(host, mesh8)
    path = checkpoint.save(folder, 1, place(host, sh8, mesh8))
    manifest = checkpoint.read_manifest(path)
    mesh2 = parallel.make_mesh(data=2, devices=jax.devices()[:2])
    mesh24 = parallel.make_mesh(data=2, model=4)
    sh24 = parallel.fsdp(host, mesh24, axis="model")
    restored, kept = {}, True
    for name, template in [
        ("1 device", templates(host)),
        ("2 devices", templates(host, parallel.fsdp(host, mesh2))),
        ("2x4 mesh", templates(host, sh24)),
    ]:
        loaded, _ = checkpoint.load(path, template)
        restored[name] = matches(loaded, host)
        kept &= all(
            a.sharding == t.sharding
            for a, t in zip(jax.tree.leaves(loaded), jax.tree.leaves(template))
            if t.sharding is not None
        )
    return {
        "shards": {k: len(e["shards"]) for k, e in manifest["entries"].items()},
        "restored": restored,
        "shardings_kept": bool(kept),
    }


def process_job(index, count, port, folder):
    parallel.initialize(f"127.0.0.1:{port}", count, index)
    host = sample_state()
    mesh8 = parallel.make_mesh(data=8)
    sh8 = parallel.fsdp(host, mesh8)
    path = checkpoint.save(folder, 1, place(host, sh8, mesh8))
    written = (path / f"arrays.{index}.safetensors").stat().st_size
    with checkpoint.safe_open(str(path / f"arrays.{index}.safetensors"), framework="numpy") as f:
        writes_local = "local#0" in f.keys()  # noqa: SIM118 (safe_open is not a Mapping)
    total = sum(f.stat().st_size for f in path.glob("arrays.*.safetensors"))
    checkpoint.safe_open = reads = CountingReads(checkpoint.safe_open)
    restored = {}
    for name, template in [
        ("same mesh", templates(host, sh8)),
        ("1 device each", templates(host)),
        (
            "2x4 mesh",
            templates(host, parallel.tensor_parallel(host, parallel.make_mesh(data=2, model=4))),
        ),
    ]:
        before = reads.count
        loaded, _ = checkpoint.load(path, template)
        restored[name] = matches(loaded, host)
        if name == "same mesh":
            read_same_mesh = reads.count - before
    # no global array: process 0 writes it
    local = checkpoint.save(folder / "local", 1, {"w": jnp.arange(4.0)})
    from jax.experimental import multihost_utils

    multihost_utils.sync_global_devices("local saved")
    local_files = sorted(p.name for p in local.iterdir())
    return {
        "written": written,
        "writes_local": writes_local,
        "local_files": local_files,
        "total_bytes": total,
        "read_same_mesh": read_same_mesh,
        "restored": restored,
        "files": sorted(p.name for p in path.iterdir()),
    }


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    mode, args = sys.argv[1], sys.argv[2:]
    result = (
        devices_job(pathlib.Path(args[0]))
        if mode == "devices"
        else process_job(int(args[0]), int(args[1]), int(args[2]), pathlib.Path(args[3]))
    )
    print(json.dumps(result), flush=True)
