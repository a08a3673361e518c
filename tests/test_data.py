"""frost.data: determinism across workers and backends, resume (also with other worker and process
counts), sharding, failures, clean shutdown, and the file readers.

The reference for every batch is the definition written out naively here: the sample indices of
the global stream, each sample transformed with its own (seed, epoch, index) generator, stacked.
This module must not import JAX at top level: worker processes import it to unpickle the test
sources below.
"""

import gzip
import itertools
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from frost import data, datasets
from frost.config import UsageError

N, B, SEED = 200, 16, 7
RNG = np.random.default_rng(0)
IMAGES = RNG.integers(0, 256, (N, 12, 12, 3), dtype=np.uint8)
LABELS = RNG.integers(0, 10, N).astype(np.int32)
AUGMENT = data.Compose(
    data.RandomCrop(10, padding=2),
    data.RandomFlip(),
    data.Normalize([0.5, 0.4, 0.3], [0.2, 0.25, 0.3]),
)


def make(**kw):
    kw = {"seed": SEED, "transform": AUGMENT, **kw}
    return data.Loader(data.Arrays(IMAGES, LABELS), B, **kw)


def reference(epoch, k, process_index=0, process_count=1):
    """Batch k of `epoch` written out from the definition (sampler.py, transforms.py)."""
    order = np.random.default_rng([SEED, 0, epoch]).permutation(N)
    rows = order[k * B : (k + 1) * B]
    rows = rows[
        process_index * len(rows) // process_count : (process_index + 1)
        * len(rows)
        // process_count
    ]
    samples = [
        AUGMENT((IMAGES[i], LABELS[i]), np.random.default_rng([SEED, 1, epoch, i])) for i in rows
    ]
    return np.stack([s[0] for s in samples]), np.array([s[1] for s in samples], np.int32)


def stream(loader, count):
    """The next `count` batches of `loader`, across epoch boundaries."""
    epochs = itertools.chain.from_iterable(iter(loader) for _ in itertools.count())
    return list(itertools.islice(epochs, count))


def global_stream(loaders, count):
    """The next `count` global batches: the batches of one loader per process, concatenated."""
    per_process = [stream(loader, count) for loader in loaders]
    return [tuple(np.concatenate(fields) for fields in zip(*parts)) for parts in zip(*per_process)]


def assert_batches_equal(got, want):
    assert len(got) == len(want)
    for (x, y), (x_ref, y_ref) in zip(got, want):
        np.testing.assert_array_equal(x, x_ref)
        np.testing.assert_array_equal(y, y_ref)


def frost_shm():
    return sorted(f for f in os.listdir("/dev/shm") if f.startswith(f"frost_{os.getpid()}_"))


def frost_children():
    return [p for p in mp.active_children() if p.name.startswith("frost-data")]


def assert_clean():
    assert frost_shm() == [] and frost_children() == []


# -- the sampler -------------------------------------------------------------------------------


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
def test_two_processes_cover_each_index_once(shuffle, drop_last):
    shards = [
        data.Sampler(
            N, B, shuffle=shuffle, seed=3, drop_last=drop_last, process_index=p, process_count=2
        )
        for p in range(2)
    ]
    for epoch in range(2):
        seen = np.concatenate([s.batch(epoch, k) for s in shards for k in range(len(s))])
        expected = N // B * B if drop_last else N
        assert len(seen) == expected and len(np.unique(seen)) == expected
        sizes = {len(s.batch(epoch, k)) for s in shards for k in range(len(s) - 1)}
        assert sizes == {B // 2}
    one = data.Sampler(N, B, shuffle=shuffle, seed=3, drop_last=drop_last)
    assert all(
        (np.concatenate([s.batch(1, k) for s in shards]) == one.batch(1, k)).all()
        for k in range(len(one))
    )
    if shuffle:
        assert not np.array_equal(one.order(0), one.order(1))


def test_sampler_errors_teach():
    with pytest.raises(ValueError, match="divisible by process_count 3"):
        data.Sampler(N, 16, process_count=3)
    with pytest.raises(ValueError, match="process_index 2"):
        data.Sampler(N, 16, process_index=2, process_count=2)


# -- determinism and resume ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "workers,backend",
    [(0, "process"), (1, "process"), (2, "process"), (1, "thread"), (2, "thread")],
)
def test_same_batches_for_any_worker_count(workers, backend):
    per_epoch = -(-N // B)
    with make(workers=workers, backend=backend, prefetch=3) as loader:
        got = stream(loader, per_epoch + 3)  # across an epoch boundary, ending mid-epoch
        assert loader.state()["epoch"] == 1 and loader.state()["batch"] == 3
    want = [reference(*divmod(i, per_epoch)) for i in range(per_epoch + 3)]
    assert got[per_epoch - 1][0].shape == (N % B, 10, 10, 3) and got[0][0].dtype == np.float32
    assert_batches_equal(got, want)
    assert_clean()


@pytest.mark.parametrize(
    "before,after",
    [
        ({"workers": 0}, {"workers": 2}),
        ({"workers": 2}, {"workers": 1, "backend": "thread"}),
        ({"workers": 1, "process_count": 2}, {"workers": 0}),
        ({"workers": 0}, {"workers": 0, "process_count": 4}),
    ],
)
def test_resume_mid_epoch_equals_uninterrupted_run(before, after):
    def loaders(options, state=None):
        count = options.pop("process_count", 1)
        return [
            make(**options, process_index=p, process_count=count, state=state) for p in range(count)
        ]

    want = [reference(*divmod(i, 13)) for i in range(30)]
    old = loaders(dict(before))
    first = global_stream(old, 17)  # stops in epoch 1, batch 4
    states = [json.loads(json.dumps(loader.state())) for loader in old]
    assert all(s == states[0] for s in states) and (states[0]["epoch"], states[0]["batch"]) == (
        1,
        4,
    )
    for loader in old:
        loader.close()
    new = loaders(dict(after), states[0])
    rest = global_stream(new, 13)
    for loader in new:
        loader.close()
    assert_batches_equal(first + rest, want)
    assert_clean()


def test_state_from_another_stream_is_refused():
    state = make().state()
    with pytest.raises(ValueError, match="seed=7 in the state, 8 here"):
        make(seed=8, state=state)


# -- failures ------------------------------------------------------------------------------------


class Failing:
    """Raises on one index; sleeps per sample if asked (to keep workers busy)."""

    def __init__(self, bad=-1, delay=0.0):
        self.bad, self.delay = bad, delay

    def __len__(self):
        return 64

    def __getitem__(self, i):
        time.sleep(self.delay)
        if i == self.bad:
            raise KeyError(f"record {i} is missing")
        return np.full(3, i, np.int32), np.int32("jax" in sys.modules)


@pytest.mark.parametrize("backend", ["process", "thread"])
def test_worker_exception_reaches_main_with_traceback_and_index(backend):
    with data.Loader(Failing(bad=37), 8, shuffle=False, workers=2, backend=backend) as loader:
        with pytest.raises(data.WorkerError, match="sample index 37") as info:
            list(loader)
        assert loader.state()["batch"] == 37 // 8  # the batches before it were delivered
    assert info.value.index == 37
    assert (
        "KeyError: 'record 37 is missing'" in info.value.traceback
        and "__getitem__" in info.value.traceback
    )
    assert_clean()


def test_main_process_exception_names_the_index():
    with pytest.raises(KeyError) as info:
        list(data.Loader(Failing(bad=5), 8, shuffle=False))
    assert "while loading sample index 5 (epoch 0)" in info.value.__notes__[0]


def test_workers_do_not_import_jax():
    with data.Loader(Failing(), 8, workers=1) as loader:
        assert sum(int(y.sum()) for _, y in loader) == 0


def test_killed_worker_is_detected_quickly():
    with data.Loader(Failing(delay=0.02), 4, shuffle=False, workers=2, prefetch=2) as loader:
        batches = iter(loader)
        next(batches)
        os.kill(frost_children()[0].pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(data.WorkerError, match="killed by SIGKILL"):
            for _ in batches:
                pass
        assert time.monotonic() - start < 2
    assert_clean()


def test_stopped_worker_is_detected_within_the_liveness_timeout():
    with data.Loader(
        Failing(delay=0.02), 4, shuffle=False, workers=1, prefetch=1, timeout=1.5
    ) as loader:
        batches = iter(loader)
        next(batches)
        os.kill(frost_children()[0].pid, signal.SIGSTOP)
        start = time.monotonic()
        with pytest.raises(data.WorkerError, match="answered for 1.5 s: one is stopped"):
            for _ in batches:
                pass
        assert time.monotonic() - start < 4
    assert_clean()


KILLED_MAIN = """
import os, signal, sys
import numpy as np
from frost import data
if __name__ == "__main__":
    loader = data.Loader(data.Arrays(np.zeros((64, 32), np.float32)), 8, workers=2)
    next(iter(loader))
    print(os.getpid(), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_killing_the_main_process_leaves_no_noise_and_no_shared_memory(tmp_path):
    script = tmp_path / "main.py"
    script.write_text(KILLED_MAIN)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    pid = out.stdout.split()[0]
    deadline = time.monotonic() + 10  # the orphaned workers exit and free the segments
    while time.monotonic() < deadline and any(
        f.startswith(f"frost_{pid}_") for f in os.listdir("/dev/shm")
    ):
        time.sleep(0.1)
    assert not [f for f in os.listdir("/dev/shm") if f.startswith(f"frost_{pid}_")]
    assert out.returncode == -signal.SIGKILL and out.stderr == "", out.stderr


def test_no_leaks_after_early_stop_consumer_error_and_garbage_collection():
    with make(workers=2) as loader:
        for _ in loader:
            break
        assert len(frost_shm()) == loader.prefetch and len(frost_children()) == 2
    assert_clean()
    with pytest.raises(ZeroDivisionError), make(workers=1) as loader:
        for _ in loader:
            raise ZeroDivisionError
    assert_clean()
    loader = make(workers=1, backend="process")
    next(iter(loader))
    del loader  # no close(): the finalizer stops the workers and frees the memory
    import gc

    gc.collect()
    assert_clean()


# -- sources -------------------------------------------------------------------------------------


def write_idx(path, array, code):
    header = bytes([0, 0, code, array.ndim]) + np.array(array.shape, ">u4").tobytes()
    body = header + array.astype(array.dtype.newbyteorder(">")).tobytes()
    with (gzip.open if path.suffix == ".gz" else open)(path, "wb") as f:
        f.write(body)


@pytest.mark.parametrize(
    "name,array,code",
    [
        ("images-idx3-ubyte.gz", RNG.integers(0, 256, (5, 4, 3), dtype=np.uint8), 0x08),
        ("values-idx2", RNG.standard_normal((3, 7)).astype(np.float32), 0x0D),
        ("labels-idx1", RNG.integers(-5, 5, 6).astype(np.int32), 0x0C),
    ],
)
def test_idx_reader(tmp_path, name, array, code):
    path = tmp_path / name
    write_idx(path, array, code)
    got = data.read_idx(path)
    assert got.dtype == array.dtype and got.dtype.isnative
    np.testing.assert_array_equal(got, array)


def test_corrupt_idx_file_names_the_file(tmp_path):
    path = tmp_path / "train-images-idx3-ubyte"
    write_idx(path, np.zeros((4, 2, 2), np.uint8), 0x08)
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(
        ValueError, match=f"corrupt IDX file {path}.*needs 32 bytes, the file has 29"
    ):
        data.read_idx(path)
    path.write_bytes(b"<html>not found</html>")
    with pytest.raises(ValueError, match=f"{path} is not an IDX file"):
        data.read_idx(path)
    gz = tmp_path / "labels.gz"
    gz.write_bytes(gzip.compress(b"\0\0\x08\x01" + bytes(8))[:-6])
    with pytest.raises(ValueError, match=f"corrupt gzip file {gz}"):
        data.read_idx(gz)


def test_cifar_reader(tmp_path):
    images = RNG.integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    labels = np.array([4, 0, 9], np.uint8)
    records = np.concatenate([labels[:, None], images.transpose(0, 3, 1, 2).reshape(3, -1)], axis=1)
    (tmp_path / "data_batch_1.bin").write_bytes(records.tobytes())
    got_images, got_labels = data.read_cifar([tmp_path / "data_batch_1.bin"], kind=10)
    np.testing.assert_array_equal(got_images, images)
    np.testing.assert_array_equal(got_labels, labels)
    # CIFAR-100: coarse, fine, pixels
    coarse = np.concatenate([labels[:, None] // 2, records], axis=1)
    (tmp_path / "train.bin").write_bytes(coarse.tobytes())
    np.testing.assert_array_equal(data.read_cifar(tmp_path / "train.bin", kind=100)[1], labels)
    for i in range(2, 6):
        (tmp_path / f"data_batch_{i}.bin").write_bytes(records.tobytes())
    train_images, train_labels = datasets.cifar10("train", root=tmp_path)
    assert train_images.shape == (15, 32, 32, 3) and train_labels.dtype == np.int32
    with pytest.raises(FileNotFoundError, match="cifar-10-binary.tar.gz"):
        datasets.cifar10("test", root=tmp_path)


def test_load_images_reads_a_known_data_set_with_its_reader(tmp_path, monkeypatch):
    """load_images calls frost.datasets' readers directly (no cycle: datasets imports nothing of
    frost.data), here on CIFAR-10 files written in FROST_DATA."""
    assert data.DATASETS["cifar10"][0] is datasets.cifar10
    images = RNG.integers(0, 256, (6, 32, 32, 3), dtype=np.uint8)
    labels = np.array([4, 0, 9, 1, 2, 3], np.uint8)
    records = np.concatenate([labels[:, None], images.transpose(0, 3, 1, 2).reshape(6, -1)], axis=1)
    folder = tmp_path / "cifar-10-batches-bin"
    folder.mkdir()
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        (folder / name).write_bytes(records.tobytes())
    monkeypatch.setenv("FROST_DATA", str(tmp_path))
    d = data.load_images("cifar10", limit=4)
    assert (len(d.train), len(d.test), d.shape, d.classes, d.pad) == (4, 4, (32, 32, 3), 10, 4)
    image, label = d.train[1]
    np.testing.assert_array_equal(image, images[1])
    assert label == labels[1]
    with pytest.raises(UsageError, match="not a known data set"):
        data.load_images(str(tmp_path / "nowhere"))


def test_image_folder_and_unreadable_image(tmp_path):
    from PIL import Image

    pngs = RNG.integers(0, 256, (4, 9, 7, 3), dtype=np.uint8)
    for i, name in enumerate(["cat", "cat", "dog", "dog"]):
        (tmp_path / name).mkdir(exist_ok=True)
        Image.fromarray(pngs[i]).save(tmp_path / name / f"{i}.png")
    Image.fromarray(pngs[0]).save(tmp_path / "dog" / "5.jpg", quality=90)
    folder = data.ImageFolder(tmp_path)
    assert folder.classes == ["cat", "dog"] and len(folder) == 5
    image, label = folder[2]
    np.testing.assert_array_equal(image, pngs[2])
    assert label == 1 and folder[4][0].shape == (9, 7, 3)
    bad = tmp_path / "dog" / "6.jpg"
    bad.write_bytes(b"\xff\xd8 truncated")
    loader = data.Loader(data.ImageFolder(tmp_path), 2, shuffle=False, workers=1)
    # a corrupt file is the user's to fix: the worker's UsageError itself, one line naming it
    with loader, pytest.raises(UsageError, match=f"cannot read image {bad}") as info:
        list(loader)
    assert "\n" not in str(info.value)
    assert_clean()


def test_token_windows(tmp_path):
    tokens = RNG.integers(0, 60000, 103).astype(np.uint16)
    path = tmp_path / "tokens.bin"
    tokens.tofile(path)
    source = data.TokenWindows(path, seq_len=10)
    assert len(source) == 10
    x, y = source[9]
    np.testing.assert_array_equal(x, tokens[90:100])
    np.testing.assert_array_equal(y, tokens[91:101])
    assert x.dtype == np.int32
    import pickle

    assert len(pickle.dumps(source)) < 1000  # the file is reopened in each worker, not shipped
    with data.Loader(source, 4, workers=1, seed=1) as loader:
        xs, ys = next(iter(loader))
    np.testing.assert_array_equal(xs[:, 1:], ys[:, :-1])


def test_transforms_against_naive_code():
    image = RNG.integers(0, 256, (6, 5, 2), dtype=np.uint8)
    for size, padding in [((6, 5), 2), ((4, 3), 0), ((7, 7), 1)]:
        padded = np.pad(image, ((padding, padding), (padding, padding), (0, 0)))
        for seed in range(10):
            crop = data.RandomCrop(size, padding)(image, np.random.default_rng(seed))
            rng = np.random.default_rng(seed)
            top, left = (
                rng.integers(0, padded.shape[0] - size[0] + 1),
                rng.integers(0, padded.shape[1] - size[1] + 1),
            )
            np.testing.assert_array_equal(crop, padded[top : top + size[0], left : left + size[1]])
    with pytest.raises(ValueError, match="smaller than the crop"):
        data.RandomCrop(9, padding=1)(image, rng)
    image = image[..., :1]
    np.testing.assert_array_equal(data.RandomFlip(p=1.0)(image, rng), image[:, ::-1])
    np.testing.assert_allclose(
        data.Normalize(0.5, 0.25)(image), (image / 255 - 0.5) / 0.25, rtol=1e-6, atol=1e-6
    )
    rgb = RNG.integers(0, 256, (4, 5, 3), dtype=np.uint8)[:, ::-1]
    mean, std = np.array([0.1, 0.5, 0.9]), np.array([0.2, 0.3, 0.4])
    np.testing.assert_allclose(
        data.Normalize(mean, std)(rgb), (rgb / 255 - mean) / std, rtol=1e-5, atol=1e-5
    )
    assert data.Resize((3, 4))(image).shape == (3, 4, 1)


# -- device prefetch and data sets ---------------------------------------------------------------


def test_prefetch_to_device_matches_host_batches():
    import jax

    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    with make() as loader:
        host = stream(loader, 4)
    with make() as loader:
        device = list(itertools.islice(data.prefetch_to_device(loader, sharding, size=2), 4))
    assert all(isinstance(x, jax.Array) and x.sharding == sharding for x, _ in device)
    assert_batches_equal([(np.asarray(x), np.asarray(y)) for x, y in device], host)


@pytest.mark.skipif(
    not os.path.isdir("/usr/share/datasets/fashion-mnist"),
    reason="dataset-fashion-mnist not installed",
)
def test_fashion_mnist_loads_real_data(monkeypatch):
    monkeypatch.delenv("FROST_DATA", raising=False)
    images, labels = datasets.fashion_mnist("test")
    assert images.shape == (10000, 28, 28, 1) and images.dtype == np.uint8
    assert labels.shape == (10000,) and labels.dtype == np.int32
    assert set(np.unique(labels)) == set(range(10)) and images.max() == 255


def test_missing_data_set_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("FROST_DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="apt-get install dataset-fashion-mnist") as info:
        datasets.fashion_mnist("train")
    assert str(tmp_path) in str(info.value)
