"""The one worker pool of frost: spawned processes (or threads) that each run a
`serve(recv, send, slots, *args)` loop, writing their results into shared-memory slots and
answering with small messages on pipes. The loader's data workers (frost.data.loader) and
Sebulba's actors (frost.rl.actors) both run on it.

    layout = Layout(example, rows)                      # the fields of one slot
    pool = Processes(workers, serve, args, layout, slots, timeout, role="data worker")
    pool.submit(w, task); answers = pool.wait(); pool.close()

- Workers are spawned, never forked (the main process may be running JAX's threads); the
  serve function and its arguments travel pickled on the worker's pipe.
- A worker that dies (a signal, the OOM killer) is seen at once through its process sentinel
  and raised as a WorkerError; one that stops answering for `timeout` seconds is raised as well,
  so the pool never hangs. If the main process dies, the workers exit quietly and the first
  frees the shared memory.
"""

import contextlib
import multiprocessing as mp
import os
import pickle
import queue
import signal
import threading
import uuid
from multiprocessing import connection, resource_tracker, shared_memory

import numpy as np

from frost.config import FrostError


class WorkerError(FrostError, RuntimeError):
    """A data worker failed; `index` is the sample it was loading, `traceback` the worker's."""

    def __init__(self, message, index=None, traceback=None):
        super().__init__(message)
        self.index = index
        self.traceback = traceback


def fields_of(sample) -> list:
    if isinstance(sample, dict):
        return list(sample.values())
    return list(sample) if isinstance(sample, (tuple, list)) else [sample]


class Layout:
    """A batch's fields (rows, *sample shape) in dtype order, packed into one 64-byte aligned
    buffer."""

    def __init__(self, sample, rows):
        self.single = not isinstance(sample, (dict, tuple, list))  # a single array
        self.keys = tuple(sample) if isinstance(sample, dict) else None  # a dict sample's
        self.fields = [(np.shape(x), np.asarray(x).dtype) for x in fields_of(sample)]
        self.rows = rows
        self.offsets = []
        end = 0
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
        if self.single:
            return leaves[0]
        return tuple(leaves) if self.keys is None else dict(zip(self.keys, leaves))


def _worker_main(conn, first: bool):
    """A worker process: attach the slots, run `serve(recv, send, slots, *args)` (the loader's
    `_serve`, or frost.rl.actors' `_act`) until told to stop (None) or until the main process
    is gone; then the first worker frees the shared memory it can no longer free."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the main process to handle
    # The main process registered the segments with the resource tracker; attaching must not
    # register them again (Python 3.11 does, bpo-39959), or the tracker would report them leaked.
    tracker = resource_tracker.unregister
    resource_tracker.register = resource_tracker.unregister = lambda name, rtype: None
    try:
        serve, args, layout, names = pickle.loads(conn.recv_bytes())
        segments = [shared_memory.SharedMemory(name) for name in names]
    except (EOFError, OSError):
        return  # the main process died, and its memory went, before this worker started
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


class Processes:
    """Spawned worker processes, one pipe each, each running `serve(recv, send, slots, *args)`;
    the slots live in shared memory; `role` names a worker in errors."""

    def __init__(self, count, serve, args, layout, slots, timeout, role="data worker"):
        self.timeout = timeout
        self.role = role
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
        for w, proc in enumerate(self.procs):  # a worker died: its sentinel or pipe is ready
            if proc.sentinel in ready or self.conns[w] in ready:
                raise self._died(w)

    def _died(self, w):
        proc = self.procs[w]
        proc.join(timeout=1)
        code = proc.exitcode
        how = f"exited (code {code})"
        if code is not None and code < 0:
            how = f"was killed by {signal.Signals(-code).name}"
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


class Threads:
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
