"""The loader: batches of a source, built in parallel, in an order that depends only on
(seed, epoch, batch), and resumable from a few integers.

```python
with Loader(source, batch_size=256, transform=augment, workers=2) as loader:
    for epoch in range(10):
        for images, labels in loader:       # each `for` runs to the end of the current epoch
            ...
        save_json(loader.state())           # {"epoch": 3, "batch": 0, "seed": 0, ...}
Loader(source, 256, transform=augment, workers=4, state=saved)   # continues where it stopped
```

How it works
- The sampler names the sample indices of global batch (epoch, k); this process keeps its rows.
- The main process owns a ring of `prefetch` slots, each one batch of shared memory. It sends
  (slot, epoch, indices) to the least busy worker; the worker loads, transforms and writes each
  sample straight into the slot's arrays, then answers (slot, error). Only these small messages
  are pickled, never the batch.
- Answers arrive in any order; the main process yields batches in stream order, copying each out
  of its slot (so a batch stays valid however long it is kept) and reusing the slot at once.
  Tasks run ahead across epoch boundaries, so a new epoch starts with a full pipeline.
- Each batch is a pure function of (seed, epoch, k) — augmentation included, see transforms.py —
  so the output is identical for any worker count and backend, and `state()` is the stream
  position. A loader restored from it may use another worker count, or another process count:
  the global batches are the same and the sampler re-splits them.
- Workers are spawned, never forked (the main process may be running JAX's threads); they import
  only numpy and frost.data (`import frost` is lazy), never JAX. As with any spawned process, the
  main script is imported again in each worker, so guard it with `if __name__ == "__main__":`.
- An exception in a worker is raised in the main process as a WorkerError carrying the worker's
  traceback and the sample index. A worker that dies (a signal, the OOM killer) is seen at once
  through its process sentinel and raised as a WorkerError too; one that stops answering (stopped
  by SIGSTOP, stuck in I/O) for `timeout` seconds is raised as well: the loader never hangs. If the
  main process dies, the workers exit quietly and free the shared memory themselves.

The thread backend runs the same worker loop in threads (Pillow's decoder and large numpy
operations release the GIL); the process backend is the default because it measured faster
(benchmarks/loader.py, 2 workers on 2 cores: 14,100 images/s against the threads' 5,200).
"""

import collections
import contextlib
import itertools
import traceback
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from frost.config import FrostError
from frost.data.sampler import Sampler
from frost.data.transforms import sample_rng
from frost.data.workers import Layout, Processes, Threads, WorkerError, fields_of

if TYPE_CHECKING:  # for a type hint only: worker processes never import JAX
    import jax

# the Sampler's fields that define the stream: a state resumes only a loader that has the same
STREAM = ("seed", "batch_size", "size", "shuffle", "drop_last")


def load_sample(
    source: Any,
    transform: Callable[[Any, np.random.Generator], Any] | None,
    seed: int,
    epoch: int,
    index: int,
) -> Any:
    """Sample `index` of `source` as it appears in `epoch`: transformed with its own generator.

    The loader builds every sample with this function, so a test or a debugging session can see
    exactly the sample a batch holds.

    Arguments:
        source: a data source (`len(source)`, `source[i]` -> a sample), such as `Arrays`.
        transform: `t(sample, rng) -> sample` (for example a `Compose`), or None for none.
        seed: the loader's seed.
        epoch: the epoch the sample appears in (augmentation differs between epochs).
        index: the sample's index in `source`.

    Returns:
        The sample (a tuple or dict of numpy arrays), transformed with the generator
        `sample_rng(seed, epoch, index)`.
    """
    sample = source[int(index)]
    return sample if transform is None else transform(sample, sample_rng(seed, epoch, int(index)))


def _fill(out, source, transform, seed, epoch, indices):
    """Load samples `indices` into the batch arrays `out`, row by row."""
    for row, index in enumerate(map(int, indices)):
        try:
            leaves = fields_of(load_sample(source, transform, seed, epoch, index))
            if len(leaves) != len(out):
                raise ValueError(
                    f"the sample has {len(leaves)} fields, the first sample had {len(out)}"
                )
            for field, x in zip(out, leaves):
                x = np.asarray(x)
                if x.shape != field.shape[1:] or x.dtype != field.dtype:
                    raise ValueError(
                        f"a field has shape {x.shape} and dtype {x.dtype}, the first sample's had "
                        f"{field.shape[1:]} and {field.dtype}; batches need samples of one shape "
                        f"and dtype (resize images with transforms.Resize)"
                    )
                field[row] = x
        except Exception as e:
            name = source.name_of(index) if hasattr(source, "name_of") else None
            where = f" ({name})" if name else ""
            e.add_note(f"frost.data: while loading sample index {index}{where} (epoch {epoch})")
            e.frost_index = index
            raise


def _serve(recv, send, slots, source, transform, seed):
    """A worker's loop (process or thread): fill the slot each task names, answer (slot, index,
    traceback), or for a FrostError (a corrupt image: its message tells the story) the error."""
    while (task := recv()) is not None:
        slot, epoch, indices = task
        try:
            _fill(slots[slot], source, transform, seed, epoch, indices)
            send((slot, None, None))
        except Exception as e:
            told = e if isinstance(e, FrostError) else traceback.format_exc()
            send((slot, getattr(e, "frost_index", None), told))


class Loader(contextlib.AbstractContextManager):
    """Batches of `source`, in an order and with augmentation fixed by (seed, epoch, batch).

    Iterating yields the batches from the current position to the end of its epoch, each a tuple
    (or dict) of numpy arrays with a leading batch axis, such as (images (B, H, W, C) uint8,
    labels (B,) int32). Use it in `with`, or call `close()`, to stop the workers. See the module
    docstring for how it works.

    Arguments:
        source: a data source: `len(source)`, and `source[i]` -> a sample (a tuple or dict of
            numpy arrays, or one array) of the same shapes and dtypes for every i.
        batch_size: the global batch; each of `process_count` processes gets
            batch_size // process_count rows of it.
        shuffle: shuffle the samples each epoch (the order depends only on seed and epoch).
        seed: the seed of the shuffle and of every sample's augmentation.
        drop_last: leave out the last batch of an epoch when it is smaller than batch_size.
        transform: `t(sample, rng) -> sample` (for example `Compose`), called with a generator
            seeded from (seed, epoch, index); None for none.
        workers: 0 loads in the calling thread; N uses N workers of `backend`.
        backend: "process" (spawned processes, shared-memory batches) or "thread".
        prefetch: batches in flight or ready ahead of the consumer; None means 2 per worker.
        process_index: this process's index among `process_count` (multi-process training).
        process_count: the processes that share each global batch.
        state: a `state()` dict to resume from, or None to start at epoch 0, batch 0.
        timeout: seconds without an answer from any busy worker before the loader raises a
            WorkerError instead of waiting on.

    Raises:
        ValueError: a bad backend, workers, prefetch or timeout, or a `state` saved from
            another stream (another source size, batch_size, seed, shuffle or drop_last).
    """

    def __init__(
        self,
        source: Any,
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        transform: Callable[[Any, np.random.Generator], Any] | None = None,
        workers: int = 0,
        backend: str = "process",
        prefetch: int | None = None,
        process_index: int = 0,
        process_count: int = 1,
        state: dict | None = None,
        timeout: float = 60.0,
    ):
        if backend not in ("process", "thread"):
            raise ValueError(f"backend must be 'process' or 'thread', got {backend!r}")
        if workers < 0 or (prefetch is not None and prefetch < 1) or not timeout > 0:
            raise ValueError(
                f"need workers >= 0, prefetch >= 1 and timeout > 0, got workers={workers}, "
                f"prefetch={prefetch}, timeout={timeout}"
            )
        self.source = source
        self.transform = transform
        self.seed = int(seed)
        self.sampler = Sampler(
            len(source),
            batch_size,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
            process_index=process_index,
            process_count=process_count,
        )
        self.workers = workers
        self.backend = backend
        self.prefetch = prefetch or 2 * max(workers, 1)
        self.timeout = timeout
        # the position of the next batch in the global stream
        self.epoch = 0
        self.batch = 0
        self._pool = None
        self._layout = None
        if state is not None:
            self._restore(state)

    def __len__(self):
        """Batches per epoch."""
        return len(self.sampler)

    def __iter__(self):
        """The batches from the current position to the end of its epoch."""
        epoch = self.epoch
        while self.epoch == epoch and len(self):
            batch = self._take()
            self.epoch, self.batch = self._after(epoch, self.batch)
            yield batch

    def _after(self, epoch: int, k: int) -> tuple[int, int]:
        """The stream position after batch k of `epoch`: the next batch, or the next epoch's
        first."""
        if k + 1 < len(self):
            return epoch, k + 1
        return epoch + 1, 0

    def state(self) -> dict:
        """The stream position and what defines the stream, as plain JSON.

        Returns:
            {"epoch", "batch" (the next batch's position), "seed", "batch_size", "size",
            "shuffle", "drop_last"}: pass it as `Loader(..., state=...)` to resume here.
        """
        stream = {k: getattr(self.sampler, k) for k in STREAM}
        return {"epoch": self.epoch, "batch": self.batch, **stream}

    def _restore(self, state):
        wrong = "; ".join(
            f"{k}={state.get(k)!r} in the state, {getattr(self.sampler, k)!r} here"
            for k in STREAM
            if state.get(k) != getattr(self.sampler, k)
        )
        if wrong:
            raise ValueError(
                f"cannot resume: the state was saved from a different stream ({wrong}); build the "
                "loader with the same source, batch_size, seed, shuffle and drop_last"
            )
        if not 0 <= state["batch"] < max(len(self), 1):
            raise ValueError(
                f"cannot resume: batch {state['batch']} is outside an epoch of {len(self)} batches"
            )
        self.epoch, self.batch = int(state["epoch"]), int(state["batch"])

    def close(self):
        """Stop the workers and free the shared memory (iterating again starts new workers)."""
        if self._pool is not None:
            self._finalize()  # runs pool.close once
            self._pool = None

    def __exit__(self, *exc):
        self.close()

    # -- the pipeline ---------------------------------------------------------------------------
    def _take(self):
        """The batch at the current position."""
        pos = (self.epoch, self.batch)
        rows = len(self.sampler.batch(self.epoch, self.batch))
        if self._layout is None:  # the first sample tells the batch's fields, shapes and dtypes
            sample = load_sample(self.source, self.transform, self.seed, 0, 0)
            self._layout = Layout(sample, self.sampler.batch_size // self.sampler.process_count)
        if self.workers == 0:
            out = [np.empty((rows, *shape), dtype) for shape, dtype in self._layout.fields]
            _fill(out, self.source, self.transform, self.seed, self.epoch, self.sampler.batch(*pos))
            return self._layout.pack(out)
        try:
            if self._pool is None:
                self._start()
            while pos not in self._ready:
                for w, (slot, index, trace) in self._pool.wait():
                    done, _ = self._busy.pop(slot)
                    if trace is None:  # the slot holds the batch
                        self._ready[done] = slot
                    elif isinstance(trace, FrostError):  # its message tells the story
                        self._ready[done] = trace
                    else:  # the worker's traceback
                        why = f"data worker {w} failed on sample index {index} (epoch {done[0]})"
                        error = WorkerError(f"{why}; its traceback:\n{trace}", index, trace)
                        self._ready[done] = error
            slot = self._ready.pop(pos)
            if isinstance(slot, FrostError):  # raised in stream order, after the batches before it
                raise slot
            batch = self._layout.pack([field[:rows].copy() for field in self._pool.slots[slot]])
            self._submit(slot)
            return batch
        except BaseException:
            self.close()  # the position is unchanged: iterating again restarts from this batch
            raise

    def _start(self):
        """Start the workers and hand each slot a task."""
        pool = Processes if self.backend == "process" else Threads
        args = (self.source, self.transform, self.seed)
        self._pool = pool(self.workers, _serve, args, self._layout, self.prefetch, self.timeout)
        self._finalize = weakref.finalize(self, self._pool.close)
        self._next = (self.epoch, self.batch)  # the next position to hand to a worker
        self._busy = {}  # slot -> (position, worker) in flight
        self._ready = {}  # position -> slot (or its error)
        for slot in range(self.prefetch):
            self._submit(slot)

    def _submit(self, slot):
        """Hand `slot` to the least busy worker, for the next position of the stream."""
        busy = [w for _, w in self._busy.values()]  # the worker of each slot in flight
        w = min(range(self.workers), key=busy.count)
        epoch, k = self._next
        self._pool.submit(w, (slot, epoch, self.sampler.batch(epoch, k)))
        self._busy[slot] = self._next, w
        self._next = self._after(epoch, k)


def prefetch_to_device(
    batches: Iterable[Any], sharding: "jax.sharding.Sharding | None" = None, size: int = 2
) -> Iterator[Any]:
    """Yield `batches` already on device: while the step on batch i runs, batches i+1..i+size move.

    `jax.device_put` is asynchronous, so keeping `size` transfers queued overlaps them with
    compute. With several processes, each process's rows become one global array
    (`frost.parallel.global_batch`); `sharding` is then required.

    Arguments:
        batches: host batches (trees of numpy arrays, such as a `Loader`'s).
        sharding: where to put each batch (a `jax.sharding.Sharding`); None puts a one-process
            batch on the default device. Required with several processes.
        size: transfers kept in flight ahead of the consumer.

    Yields:
        Each batch as a tree of `jax.Array`s of the same shapes and dtypes, in order.
    """
    import jax

    from frost import parallel

    put = parallel.global_batch if jax.process_count() > 1 else jax.device_put
    placed = (put(batch, sharding) for batch in batches)
    pending = collections.deque(itertools.islice(placed, size))
    while pending:
        yield pending.popleft()
        pending.extend(itertools.islice(placed, 1))
