"""Image loading throughput: decode JPEG + augment + batch with Frost, torch and Grain.

    flock /tmp/frost-bench.lock python benchmarks/loader.py          # about 3 minutes, 2 cores
    python benchmarks/loader.py --images 2048 --repeats 1             # a quick look

The work: `--images` Fashion-MNIST training images, upscaled to 64x64 RGB and saved as JPEG
(quality 90) into a temporary image folder, one sub-folder per class. Every loader runs the same
per-sample code — `frost.data.ImageFolder`'s Pillow decode, then RandomCrop(64, padding=4),
RandomFlip and Normalize with a per-sample numpy Generator — and batches 128 float32 images:

- Frost: `frost.data.Loader(workers=w)` (both backends; "process" is the default),
- torch: `torch.utils.data.DataLoader(num_workers=w, pin_memory=False, persistent_workers=w > 0)`,
  default collate and start method,
- Grain: `grain.python.DataLoader(worker_count=w)` with a RandomMapTransform and Batch.

Each loader streams batches across epochs. For each worker count all loaders are started (the
first batch, worker start-up included, is not timed), then they take turns: `--repeats` rounds,
each giving every loader `--warmup` untimed batches (draining what it prefetched while waiting)
and a timed window of `--batches` batches. The consumer reads every page of each batch (as a
training step does), so no loader gains by handing out memory that is never touched. Before
each window the script waits until no loader is using CPU, so no loader's background work
runs in another's window. Taking turns makes a change in the machine's load (other jobs
share it) hit every loader alike. The tables give the median over the windows of
images/s and of CPU seconds (all processes of the loader) per 1000 images, and Frost's
process backend (the default) against each peer.
"""

from __future__ import annotations

import argparse
import datetime
import os
import pathlib
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from frost import data, datasets

BATCH, SIZE = 128, 64
AUGMENT = data.Compose(
    data.RandomCrop(SIZE, padding=4),
    data.RandomFlip(),
    data.Normalize((0.286, 0.286, 0.286), (0.353, 0.353, 0.353)),
)


def make_folder(root: pathlib.Path, count: int) -> data.ImageFolder:
    from PIL import Image

    images, labels = datasets.fashion_mnist("train")
    for i in range(count):
        folder = root / str(labels[i])
        folder.mkdir(exist_ok=True)
        image = (
            Image.fromarray(images[i, :, :, 0]).resize((SIZE, SIZE), Image.BILINEAR).convert("RGB")
        )
        image.save(folder / f"{i:05d}.jpg", quality=90)
    return data.ImageFolder(root)


def frost_batches(source, workers, backend="process"):
    with data.Loader(
        source, BATCH, transform=AUGMENT, workers=workers, backend=backend, drop_last=True
    ) as loader:
        while True:
            for images, _ in loader:
                yield images


def torch_batches(source, workers):
    import torch

    class Dataset(torch.utils.data.Dataset):
        def __len__(self):
            return len(source)

        def __getitem__(self, i):
            return data.load_sample(source, AUGMENT, 0, 0, i)

    loader = torch.utils.data.DataLoader(
        Dataset(),
        BATCH,
        shuffle=True,
        drop_last=True,
        num_workers=workers,
        pin_memory=False,
        persistent_workers=workers > 0,
    )
    while True:
        for images, _ in loader:
            yield images


def grain_batches(source, workers):
    import grain.python as grain
    from absl import flags

    if not flags.FLAGS.is_parsed():  # Grain reads absl flags; this script has none of its own
        flags.FLAGS.mark_as_parsed()

    # Grain ships operations to workers with cloudpickle
    class GrainAugment(grain.RandomMapTransform):
        def random_map(self, element, rng):
            return AUGMENT(element, rng)

    sampler = grain.IndexSampler(
        len(source), grain.NoSharding(), shuffle=True, num_epochs=None, seed=0
    )
    loader = grain.DataLoader(
        data_source=source,
        sampler=sampler,
        worker_count=workers,
        operations=[GrainAugment(), grain.Batch(BATCH, drop_remainder=True)],
    )
    for images, _ in loader:
        yield images


def cpu_seconds(pid=None):
    """User + system CPU seconds of a process and all its descendants (Linux /proc)."""
    pid = pid or os.getpid()
    try:
        with open(f"/proc/{pid}/stat") as f:
            # fields 3.. of proc(5); utime, stime are 14, 15
            fields = f.read().rsplit(")", 1)[1].split()
        total = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                total += sum(cpu_seconds(int(child)) for child in f.read().split())
        return total
    except (FileNotFoundError, ProcessLookupError):  # a process that just exited
        return 0.0


def start(batches):
    """Seconds to the first batch (worker start-up included), checking what it holds."""
    t0 = time.perf_counter()
    first = next(batches)
    assert tuple(first.shape) == (BATCH, SIZE, SIZE, 3) and str(first.dtype).endswith("float32"), (
        first.dtype
    )
    return time.perf_counter() - t0


def touch(batch):
    """Read one float of every 4 KiB page, as a training step (or a device copy) reads the whole
    batch: a batch that arrives in fresh shared memory (torch's) costs its page faults only when
    it is first read, which an untouched batch would hide."""
    return float(np.asarray(batch).reshape(-1)[::1024].sum())


def settle(quiet=0.02, interval=0.2, limit=15.0):
    """Wait until the loaders' processes stop using CPU (their prefetch buffers are full), so
    that one loader's background work does not run during the next one's window. (Grain's
    workers keep working for a while after its window; without this, whichever loader came
    next was measured up to 40% slower.)"""
    end, last = time.perf_counter() + limit, cpu_seconds()
    while time.perf_counter() < end:
        time.sleep(interval)
        now = cpu_seconds()
        if now - last < quiet:
            return
        last = now


def window(batches, skip, count):
    """(images/s, CPU seconds per 1000 images) over `count` batches, after the machine is quiet
    and `skip` untimed batches that drain what the loader prefetched while the others had their
    turn."""
    settle()
    for _ in range(skip):
        touch(next(batches))
    t0, cpu = time.perf_counter(), cpu_seconds()
    for _ in range(count):
        touch(next(batches))
    return count * BATCH / (time.perf_counter() - t0), (cpu_seconds() - cpu) * 1000 / (
        count * BATCH
    )


def compare(runs, source, workers, args):
    """{name: (median images/s, seconds to first batch, median CPU s per 1000 images) or the error}.

    All loaders run at once and take turns, one timed window each per round, so a change in the
    machine's load (other jobs share it) hits every loader alike.
    """
    streams, first, samples, out = {}, {}, {}, {}
    for name, run in runs.items():
        try:
            streams[name] = run(source, workers)
            first[name], samples[name] = start(streams[name]), []
        except Exception as e:
            out[name] = e
            streams.pop(name, None)
            print(f"{name}, {workers} workers: failed: {e!r}", file=sys.stderr, flush=True)
    for _ in range(args.repeats):
        for name, batches in streams.items():
            samples[name].append(window(batches, args.warmup, args.batches))
    for name, batches in streams.items():
        batches.close()  # stops its workers
        rates, cpus = zip(*samples[name])
        out[name] = (statistics.median(rates), first[name], statistics.median(cpus))
        print(
            f"{name}, {workers} workers: {out[name][0]:.0f} images/s (windows: "
            f"{', '.join(f'{r:.0f}' for r in rates)}), "
            f"{out[name][2]:.2f} CPU s per 1000 images, first batch after {first[name]:.2f} s",
            file=sys.stderr,
        )
    return out


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        return next(
            line.split(":", 1)[1].strip()
            for line in out.splitlines()
            if line.startswith("Model name")
        )
    except (OSError, StopIteration, subprocess.SubprocessError):
        return platform.processor() or platform.machine()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=4096)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--warmup", type=int, default=8)
    parser.add_argument("--batches", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    runs = {
        "Frost (process)": frost_batches,
        "Frost (thread)": lambda s, w: frost_batches(s, w, "thread"),
        "torch DataLoader": torch_batches,
        "Grain DataLoader": grain_batches,
    }
    results = {}
    with tempfile.TemporaryDirectory(prefix="frost-bench-") as tmp:
        source = make_folder(pathlib.Path(tmp), args.images)
        for workers in args.workers:
            chosen = {
                n: r for n, r in runs.items() if not (n == "Frost (thread)" and workers == 0)
            }  # same as process
            results.update(
                {(n, workers): r for n, r in compare(chosen, source, workers, args).items()}
            )

    def cell(name, workers, i=0, fmt="{:.0f}"):
        r = results.get((name, workers))
        return (
            ""
            if r is None
            else f"failed: {type(r).__name__}"
            if isinstance(r, Exception)
            else fmt.format(r[i])
        )

    def ratio(workers, peer, i=0):  # images/s: frost / peer; CPU per image (i=2): peer / frost
        mine, theirs = results.get(("Frost (process)", workers)), results.get((peer, workers))
        if not all(isinstance(r, tuple) for r in (mine, theirs)):
            return "n/a"
        return f"{mine[0] / theirs[0]:.2f}" if i == 0 else f"{theirs[i] / mine[i]:.2f}"

    versions = ", ".join(
        f"{m} {sys.modules[m].__version__}" for m in ("numpy", "torch", "grain") if m in sys.modules
    )
    print(
        f"\n### Image loading: JPEG decode + augment + batch ({args.images} images {SIZE}x{SIZE}, "
        f"batch {BATCH})\n"
    )
    print(f"- date: {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}")
    print(
        f"- machine: {cpu_model()}, {len(os.sched_getaffinity(0))} cores; python "
        f"{platform.python_version()}, {versions}"
    )
    print(f"- command: `python {' '.join(shlex.quote(a) for a in sys.argv)}`\n")
    names = list(runs)
    print(
        "| workers | " + " | ".join(f"{n} img/s" for n in names) + " | frost/torch | frost/grain |"
    )
    print("| ---: | " + " | ".join("---:" for _ in names) + " | ---: | ---: |")
    for w in args.workers:
        print(
            f"| {w} | "
            + " | ".join(cell(n, w) for n in names)
            + f" | {ratio(w, 'torch DataLoader')} | {ratio(w, 'Grain DataLoader')} |"
        )
    print(
        "\nCPU seconds per 1000 images, all processes of the loader (lower is better; peer/frost > "
        "1: Frost uses less):\n"
    )
    print("| workers | " + " | ".join(names) + " | torch/frost | grain/frost |")
    print("| ---: | " + " | ".join("---:" for _ in names) + " | ---: | ---: |")
    for w in args.workers:
        print(
            f"| {w} | "
            + " | ".join(cell(n, w, 2, "{:.2f}") for n in names)
            + f" | {ratio(w, 'torch DataLoader', 2)} | {ratio(w, 'Grain DataLoader', 2)} |"
        )


if __name__ == "__main__":
    main()
