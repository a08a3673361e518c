"""The loader: batches of a source, built in parallel, in an order that depends only on
(seed, epoch, batch), and resumable from a few integers.

    with Loader(source, batch_size=256, transform=augment, workers=2) as loader:
        for epoch in range(10):
            for images, labels in loader:       # each `for` runs to the end of the current epoch
                ...
            save_json(loader.state())           # {"epoch": 3, "batch": 0, "seed": 0, ...}
    Loader(source, 256, transform=augment, workers=4, state=saved)   # continues where it stopped

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
import multiprocessing as mp
import os
import pickle
import queue
import signal
import threading
import traceback
import uuid
import weakref
from multiprocessing import connection, resource_tracker, shared_memory

import numpy as np

from frost.config import FrostError
from frost.data.sampler import Sampler
from frost.data.transforms import sample_rng


class WorkerError(FrostError, RuntimeError):
    """A data worker failed; `index` is the sample it was loading, `traceback` the worker's."""

    def __init__(self, message, index=None, traceback=None):
        super().__init__(message)
        self.index, self.traceback = index, traceback


def load_sample(source, transform, seed, epoch, index):
    """Sample `index` of `source` as it appears in `epoch`: transformed with its own generator."""
    sample = source[int(index)]
    return sample if transform is None else transform(sample, sample_rng(seed, epoch, int(index)))


def _leaves(sample):
    if isinstance(sample, dict):
        return list(sample.values())
    return list(sample) if isinstance(sample, (tuple, list)) else [sample]


class _Layout:
    """A batch's fields (rows, *sample shape) in dtype order, packed into one 64-byte aligned
    buffer."""

    def __init__(self, sample, rows):
        self.keys = (
            tuple(sample)
            if isinstance(sample, dict)
            else len(sample)
            if isinstance(sample, (tuple, list))
            else None
        )
        self.fields = [(np.shape(x), np.asarray(x).dtype) for x in _leaves(sample)]
        self.rows, self.offsets, end = rows, [], 0
        for shape, dtype in self.fields:
            self.offsets.append(end)
            end += -(-rows * int(np.prod(shape)) * dtype.itemsize // 64) * 64
        self.nbytes = max(end, 64)

    def views(self, buffer):
        return [
            np.ndarray((self.rows, *shape), dtype, buffer, offset)
            for (shape, dtype), offset in zip(self.fields, self.offsets)
        ]

    def pack(self, leaves):
        if self.keys is None:
            return leaves[0]
        return tuple(leaves) if isinstance(self.keys, int) else dict(zip(self.keys, leaves))


def _fill(out, source, transform, seed, epoch, indices):
    """Load samples `indices` into the batch arrays `out`, row by row."""
    for row, index in enumerate(map(int, indices)):
        try:
            leaves = _leaves(load_sample(source, transform, seed, epoch, index))
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
            e.add_note(
                f"frost.data: while loading sample index {index}{f' ({name})' if name else ''} "
                f"(epoch {epoch})"
            )
            e.frost_index = index
            raise


def _serve(recv, send, slots, source, transform, seed):
    """A worker's loop (process or thread): fill the slot each task names, answer (slot, index,
    traceback)."""
    while (task := recv()) is not None:
        slot, epoch, indices = task
        try:
            _fill(slots[slot], source, transform, seed, epoch, indices)
            send((slot, None, None))
        except Exception as e:
            send((slot, getattr(e, "frost_index", None), traceback.format_exc()))


def _worker_main(conn, first: bool):
    """A worker process: attach the slots, run `serve(recv, send, slots, *args)` (`_serve` for the
    loader; frost.rl.actors runs its actors so) until told to stop (None) or until the main process
    is gone; then the first worker frees the shared memory it can no longer free."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the main process to handle
    # The main process registered the segments with the resource tracker; attaching must not
    # register them again (Python 3.11 does, bpo-39959), or the tracker would report them leaked.
    tracker = resource_tracker.unregister
    resource_tracker.register = resource_tracker.unregister = lambda name, rtype: None
    try:
        serve, args, layout, names = pickle.loads(conn.recv_bytes())
        segments = [shared_memory.SharedMemory(name) for name in names]
    except (
        EOFError,
        OSError,
    ):  # the main process died, and its memory went, before this worker started
        return
    try:
        serve(conn.recv, conn.send, [layout.views(s.buf) for s in segments], *args)
    except (EOFError, OSError):  # a closed, broken or reset pipe: the main process is gone
        if first:  # free the memory, and withdraw the main process's registration once
            for s in segments:
                with contextlib.suppress(OSError):
                    s.unlink()
                tracker(s._name, "shared_memory")
    finally:
        for s in segments:
            with contextlib.suppress(BufferError):
                s.close()


class _Processes:
    """Spawned worker processes, one pipe each, each running `serve(recv, send, slots, *args)`;
    the slots live in shared memory; `role` names a worker in errors."""

    def __init__(self, count, serve, args, layout, slots, timeout, role="data worker"):
        self.timeout, self.role = timeout, role
        tag = f"frost_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self.segments, self.procs, self.conns = [], [], []
        try:
            for i in range(slots):
                self.segments.append(
                    shared_memory.SharedMemory(f"{tag}_{i}", create=True, size=layout.nbytes)
                )
            self.slots = [layout.views(s.buf) for s in self.segments]
            # The source travels on our pipe, not in Process args: a child that dies before reading
            # its args would block Process.start() forever, but a dead pipe end fails our send.
            try:
                payload = pickle.dumps((serve, args, layout, [s.name for s in self.segments]))
            except Exception as e:
                e.add_note(
                    "frost.data: the process backend pickles the source and transform for its "
                    "workers; define them at module level (no lambdas or local classes), or use "
                    "backend='thread'"
                )
                raise
            ctx = mp.get_context("spawn")
            for w in range(count):
                here, there = ctx.Pipe()
                proc = ctx.Process(
                    target=_worker_main, args=(there, w == 0), name=f"frost-data-{w}", daemon=True
                )
                proc.start()
                there.close()
                self.procs.append(proc)
                self.conns.append(here)
            for w in range(count):
                self.submit(w, payload, raw=True)
        except BaseException:
            self.close()
            raise

    def submit(self, worker, task, raw=False):
        try:
            self.conns[worker].send_bytes(task) if raw else self.conns[worker].send(task)
        except OSError:
            raise self._died(worker) from None

    def wait(self):
        """[(worker, answer)] for the answers ready now (blocking until one is); raises if a worker
        died."""
        ready = connection.wait(self.conns + [p.sentinel for p in self.procs], timeout=self.timeout)
        if not ready:
            raise _silent(self.timeout, [p.pid for p in self.procs])
        answers = []
        for w, conn in enumerate(self.conns):
            if conn in ready:
                # a dead worker's pipe: its sentinel tells
                with contextlib.suppress(EOFError, OSError):
                    answers.append((w, conn.recv()))
        if answers:
            return answers
        raise self._died(
            next(
                w for w, p in enumerate(self.procs) if p.sentinel in ready or self.conns[w] in ready
            )
        )

    def _died(self, w):
        proc = self.procs[w]
        proc.join(timeout=1)
        code = proc.exitcode
        how = (
            f"was killed by {signal.Signals(-code).name}"
            if code is not None and code < 0
            else f"exited (code {code})"
        )
        return WorkerError(
            f"{self.role} {w} (pid {proc.pid}) {how} while it was running (its own error, if "
            f"any, is printed above). If the out-of-memory killer did it, use fewer workers or "
            f"smaller batches."
        )

    def close(self):
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send(None)
        # a worker finishes its current batch, then reads the None
        for proc, conn in zip(self.procs, self.conns):
            proc.join(timeout=1)
            if proc.is_alive():
                proc.kill()
                proc.join()
            conn.close()
        self.slots = None
        for s in self.segments:
            s.unlink()
            with contextlib.suppress(BufferError):
                s.close()
        self.segments, self.procs, self.conns = [], [], []


def _silent(timeout, workers) -> WorkerError:
    return WorkerError(
        f"no data worker ({', '.join(map(str, workers))}) answered for {timeout:g} s: one is "
        "stopped (SIGSTOP, a debugger) or stuck; if a batch really takes that long, raise "
        "Loader(timeout=...)"
    )


class _Threads:
    """The same worker loop in threads; the slots are ordinary arrays."""

    def __init__(self, count, serve, args, layout, slots, timeout):
        self.timeout = timeout
        self.slots = [layout.views(np.empty(layout.nbytes, np.uint8)) for _ in range(slots)]
        self.tasks = [queue.SimpleQueue() for _ in range(count)]
        self.answers = queue.SimpleQueue()
        self.threads = [
            threading.Thread(
                target=serve,
                daemon=True,
                name=f"frost-data-{w}",
                args=(q.get, lambda a, w=w: self.answers.put((w, a)), self.slots, *args),
            )
            for w, q in enumerate(self.tasks)
        ]
        for t in self.threads:
            t.start()

    def submit(self, worker, task):
        self.tasks[worker].put(task)

    def wait(self):
        """[(worker, answer)] for the next answer (the loader calls again until it has the batch it
        wants)."""
        try:
            return [self.answers.get(timeout=self.timeout)]
        except queue.Empty:
            raise _silent(self.timeout, [t.name for t in self.threads]) from None

    def close(self):
        for q in self.tasks:
            q.put(None)
        for t in self.threads:
            t.join()


class Loader(contextlib.AbstractContextManager):
    """Batches of `source` (see the module docstring).

    batch_size      the global batch; each of `process_count` processes gets batch_size //
    process_count rows transform       `t(sample, rng) -> sample`, rng seeded from (seed, epoch,
    index) (transforms.Compose) workers         0: load in the calling thread; N: N workers of
    `backend` ("process" or "thread") prefetch        batches in flight or ready ahead of the
    consumer (default 2 per worker) timeout         seconds without an answer from any busy worker
    before the loader gives up state           a `state()` dict to resume from
    """

    def __init__(
        self,
        source,
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        transform=None,
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
        self.source, self.transform, self.seed = source, transform, int(seed)
        self.sampler = Sampler(
            len(source),
            batch_size,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
            process_index=process_index,
            process_count=process_count,
        )
        self.workers, self.backend, self.prefetch = (
            workers,
            backend,
            prefetch or 2 * max(workers, 1),
        )
        self.timeout = timeout
        self.epoch, self.batch = 0, 0  # the position of the next batch in the global stream
        self._pool = self._layout = None
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
            self.epoch, self.batch = (
                (epoch, self.batch + 1) if self.batch + 1 < len(self) else (epoch + 1, 0)
            )
            yield batch

    def state(self) -> dict:
        """The stream position (epoch, batch), and what defines the stream, as plain JSON."""
        s = self.sampler
        return {
            "epoch": self.epoch,
            "batch": self.batch,
            "seed": self.seed,
            "batch_size": s.batch_size,
            "size": s.size,
            "shuffle": s.shuffle,
            "drop_last": s.drop_last,
        }

    def _restore(self, state):
        wrong = [
            f"{k}={state.get(k)!r} in the state, {v!r} here"
            for k, v in self.state().items()
            if k not in ("epoch", "batch") and state.get(k) != v
        ]
        if wrong:
            raise ValueError(
                "cannot resume: the state was saved from a different stream ("
                + "; ".join(wrong)
                + "); build the loader with the same source, batch_size, seed, shuffle and "
                "drop_last"
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
        pos, rows = (self.epoch, self.batch), len(self.sampler.batch(self.epoch, self.batch))
        if self._layout is None:  # the first sample tells the batch's fields, shapes and dtypes
            sample = load_sample(self.source, self.transform, self.seed, 0, 0)
            self._layout = _Layout(sample, self.sampler.batch_size // self.sampler.process_count)
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
                    self._ready[done] = (
                        slot
                        if trace is None
                        else WorkerError(
                            f"data worker {w} failed on sample index {index} (epoch {done[0]}); "
                            f"its traceback:\n{trace}",
                            index,
                            trace,
                        )
                    )
            slot = self._ready.pop(pos)
            if isinstance(slot, WorkerError):  # raised in stream order, after the batches before it
                raise slot
            batch = self._layout.pack([field[:rows].copy() for field in self._pool.slots[slot]])
            self._submit(slot)
            return batch
        except BaseException:
            self.close()  # the position is unchanged: iterating again restarts from this batch
            raise

    def _start(self):
        """Start the workers and hand each slot a task."""
        pool = _Processes if self.backend == "process" else _Threads
        self._pool = pool(
            self.workers,
            _serve,
            (self.source, self.transform, self.seed),
            self._layout,
            self.prefetch,
            self.timeout,
        )
        self._finalize = weakref.finalize(self, self._pool.close)
        self._next = (self.epoch, self.batch)  # the next position to hand to a worker
        self._busy, self._ready = (
            {},
            {},
        )  # slot -> (position, worker) in flight; position -> slot (or its error)
        for slot in range(self.prefetch):
            self._submit(slot)

    def _submit(self, slot):
        """Hand `slot` to the least busy worker, for the next position of the stream."""
        busy = [w for _, w in self._busy.values()]  # the worker of each slot in flight
        w = min(range(self.workers), key=busy.count)
        epoch, k = self._next
        self._pool.submit(w, (slot, epoch, self.sampler.batch(epoch, k)))
        self._busy[slot] = self._next, w
        self._next = (epoch, k + 1) if k + 1 < len(self) else (epoch + 1, 0)


def prefetch_to_device(batches, sharding=None, size: int = 2):
    """Yield `batches` already on device: while the step on batch i runs, batches i+1..i+size move.

    `jax.device_put` is asynchronous, so keeping `size` transfers queued overlaps them with
    compute. With several processes, each process's rows become one global array
    (`frost.parallel.global_batch`); `sharding` is then required.
    """
    import jax

    from frost import parallel

    put = parallel.global_batch if jax.process_count() > 1 else jax.device_put
    placed = (put(batch, sharding) for batch in batches)
    pending = collections.deque(itertools.islice(placed, size))
    while pending:
        yield pending.popleft()
        pending.extend(itertools.islice(placed, 1))
