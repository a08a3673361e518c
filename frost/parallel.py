"""Scaling: meshes, sharding strategies, global batches, and multi-process start-up.

```python
mesh = make_mesh(data=8)  # or make_mesh(data=4, model=2)
shardings = fsdp(state.tree(), mesh)  # or replicated(...), tensor_parallel(...)
layout = (shardings["model"], shardings["opt_state"], batch_sharding(mesh))
step = make_train_step(opt, loss, shardings=layout)
```

Computation follows the data: the training step is the same function on one device or many;
only the shardings given to `jax.jit` change, and XLA inserts the collectives (all-reduce of
gradients for data parallelism, all-gather / reduce-scatter of parameters for FSDP). There
are no hand-written collectives here. Across machines, `initialize` starts JAX's own
multi-process runtime; each process feeds its share of the global batch
(`global_batch`), which the sampler's per-process shard provides.
"""

import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from frost.config import FrostError, UsageError
from frost.tree import PyTree

# seconds without a heartbeat before the runtime ends every process (in C++) because one is gone:
# the backstop for a hung process. One that died is noticed sooner, at the next collective (its
# sockets close), and reported in one line (`failure`); a long compile stays under this
HEARTBEAT_S = 20
MESSAGE_BYTES = 8192  # the most `on_first` broadcasts


def jit(fn: Callable, **kwargs: Any) -> Callable:
    """`jax.jit`, at XLA's optimisation level 1 on CPU, the level of every Frost loop program
    (Anakin's, the audit's): they compile about a third faster than at level 2 and run as fast
    (2 CPU cores, one PPO iteration: 8.8 -> 6.0 s compiling, 25 ms a run either way; level 0 runs
    3x slower).

    Arguments:
        fn: the function to compile.
        **kwargs: `jax.jit`'s other arguments (donate_argnums, in_shardings, ...).

    Returns:
        The jitted `fn`; on other backends, plain `jax.jit(fn, **kwargs)`.
    """
    options = {"xla_backend_optimization_level": 1} if jax.default_backend() == "cpu" else None
    return jax.jit(fn, compiler_options=options, **kwargs)


def scan_chunks(body: Callable, length: int) -> Callable:
    """The one chunked-scan driver (Anakin's iterations, the audit's training steps). Called once
    per chunk, it lets the host show progress between calls while the device never waits within
    one.

    Arguments:
        body: `body(carry, x, *args) -> (carry, y)`, one step.
        length: the steps in a chunk.

    Returns:
        A jitted `(carry, xs, *args) -> (carry, ys)` that runs `length` steps of `body` in one
        `lax.scan`, the carry donated; xs is a tree of (length, ...) arrays, or None, and ys
        stacks each step's y along a new leading (length,) axis.
    """

    def chunk(carry, xs, *args):
        return jax.lax.scan(lambda c, x: body(c, x, *args), carry, xs, length)

    return jit(chunk, donate_argnums=0)


def make_mesh(
    data: int | None = None, model: int = 1, devices: Sequence[jax.Device] | None = None
) -> Mesh:
    """A ("data", "model") mesh over `devices`.

    Arguments:
        data: the size of the data axis; None: the devices that `model` leaves.
        model: the size of the model axis.
        devices: the devices to lay out (`jax.devices()` by default); their number must be
            `data * model`.

    Returns:
        The (data, model) `Mesh` with axes named "data" and "model".
    """
    devices = list(jax.devices() if devices is None else devices)
    data = len(devices) // model if data is None else data
    if data * model != len(devices) or data < 1 or model < 1:
        raise UsageError(
            f"mesh data={data} x model={model} = {data * model} devices, but {len(devices)} are "
            f"visible; choose sizes whose product is {len(devices)}"
        )
    return Mesh(np.asarray(devices).reshape(data, model), ("data", "model"))


def replicated(tree: PyTree, mesh: Mesh) -> PyTree:
    """Every array whole on every device (data parallelism).

    Arguments:
        tree: a tree of arrays (or ShapeDtypeStructs), e.g. `{"model": ..., "opt_state": ...}`.
        mesh: the device mesh.

    Returns:
        The tree of `NamedSharding`s, one per leaf, each replicated (`PartitionSpec()`).
    """
    return jax.tree.map(lambda _: NamedSharding(mesh, P()), tree)


def _fsdp_spec(shape, size: int, axis: str) -> P:
    """Shard the largest axis that `size` divides; replicate when none does (scalars, odd sizes)."""
    for i in sorted(range(len(shape)), key=lambda i: -shape[i]):  # largest axis first
        if shape[i] % size == 0 and shape[i] >= size:
            return P(*[axis if j == i else None for j in range(len(shape))])
    return P()


def fsdp(tree: PyTree, mesh: Mesh, axis: str = "data") -> PyTree:
    """Fully sharded data parallel (Zhao et al. 2023, PyTorch FSDP; ZeRO-3): every parameter and
    optimizer-state array split along its largest divisible axis over `axis`.

    Arguments:
        tree: a tree of arrays (or ShapeDtypeStructs), e.g. `{"model": ..., "opt_state": ...}`.
        mesh: the device mesh.
        axis: the mesh axis the arrays are split over.

    Returns:
        The tree of `NamedSharding`s, one per leaf: split along the leaf's largest axis that the
        size of `axis` divides, replicated when none does (scalars, odd sizes).
    """
    size = mesh.shape[axis]
    return jax.tree.map(lambda x: NamedSharding(mesh, _fsdp_spec(np.shape(x), size, axis)), tree)


def tensor_parallel(tree: PyTree, mesh: Mesh, axis: str = "model") -> PyTree:
    """Megatron-style (Shoeybi et al. 2019, Megatron-LM) sharding of a GPT's blocks over `axis`:
    the qkv and fc weights (in, out) split by columns, proj and out weights split by rows,
    column-split biases split alike; everything else replicated. Optimizer states mirror their
    parameters, since their tree paths end the same way.

    Arguments:
        tree: a tree holding a `frost.models.gpt.GPT` (its `blocks`), e.g. `{"model": ...,
            "opt_state": ...}`.
        mesh: the device mesh.
        axis: the mesh axis the weights are split over.

    Returns:
        The tree of `NamedSharding`s, one per leaf.
    """
    column = ("qkv", "fc")  # (in, out) weights split by columns, and their biases
    row = ("proj", "out")  # (in, out) weights split by rows

    def spec(path, x):
        names = [getattr(k, "name", getattr(k, "key", None)) for k in path]
        layer, leaf = (names[-2], names[-1]) if len(names) >= 2 else (None, None)
        if "blocks" in names and layer in column and leaf in ("weight", "bias"):
            return NamedSharding(mesh, P(*([None] * (np.ndim(x) - 1)), axis))
        if "blocks" in names and layer in row and leaf == "weight":
            return NamedSharding(mesh, P(axis, None))
        return NamedSharding(mesh, P())

    return jax.tree_util.tree_map_with_path(spec, tree)


def batch_sharding(mesh: Mesh, axis: str = "data") -> NamedSharding:
    """The batch's sharding: its leading (batch) axis split over `axis`, the rest replicated.

    Arguments:
        mesh: the device mesh.
        axis: the mesh axis the batch is split over.

    Returns:
        `NamedSharding(mesh, PartitionSpec(axis))`.
    """
    return NamedSharding(mesh, P(axis))


def check_batch(mesh: Mesh, batch_size: int, axis: str = "data") -> None:
    """Refuse a batch that does not divide over the mesh, with a UsageError naming both sizes.

    Arguments:
        mesh: the device mesh.
        batch_size: the global batch size.
        axis: the mesh axis the batch is split over.
    """
    if batch_size % mesh.shape[axis]:
        raise UsageError(
            f"--batch-size {batch_size} is not divisible by mesh axis '{axis}' of size "
            f"{mesh.shape[axis]}; choose a batch size that is a multiple of {mesh.shape[axis]}"
        )


def put(tree: PyTree, shardings: PyTree) -> PyTree:
    """Place host-identical arrays (same values in every process) with `shardings`; each process
    builds only its own shards, so this works across processes where `jax.device_put` may not.

    Arguments:
        tree: a tree of arrays, the same values in every process.
        shardings: a tree of the same structure holding a `jax.sharding.Sharding` per leaf.

    Returns:
        The tree of global `jax.Array`s, each laid out by its sharding.
    """

    def place(x, sharding):
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    return jax.tree.map(place, tree, shardings)


def global_batch(local_batch: PyTree, sharding: NamedSharding) -> PyTree:
    """This process's rows of the global batch -> global jax.Arrays.

    Arguments:
        local_batch: a tree of numpy arrays, (B / processes, ...) each: this process's share.
        sharding: the batch's sharding (`batch_sharding`).

    Returns:
        The tree of (B, ...) global `jax.Array`s, each process holding its own rows.
    """
    return jax.tree.map(
        lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), local_batch
    )


STRATEGIES = {"dp": replicated, "fsdp": fsdp, "tp": tensor_parallel}


def parse_mesh(spec: str) -> dict[str, int]:
    """The axis sizes of a --mesh value: "data=4,model=2" -> {"data": 4, "model": 2}.

    Arguments:
        spec: comma-separated AXIS=SIZE pairs; the axes are data and model.

    Returns:
        {axis: size}, `make_mesh`'s keyword arguments.
    """
    try:
        pairs = (part.split("=") for part in spec.split(",") if part.strip())
        sizes = {k.strip(): int(v) for k, v in pairs}
    except ValueError:
        raise UsageError(
            f"--mesh {spec!r}: expected AXIS=SIZE pairs such as data=4 or data=4,model=2"
        ) from None
    if set(sizes) - {"data", "model"} or not sizes or min(sizes.values()) < 1:
        raise UsageError(f"--mesh {spec!r}: the axes are data and model, each of size >= 1")
    return sizes


def distribute(
    tree: PyTree, mesh_spec: str, strategy: str, batch_size: int
) -> tuple[PyTree, PyTree, NamedSharding]:
    """Lay `tree` out on a mesh.

    Arguments:
        tree: the arrays to place, e.g. {"model": ..., "opt_state": ...}, the same in every
            process.
        mesh_spec: the mesh's axis sizes, "data=8" or "data=4,model=2" (`parse_mesh`).
        strategy: a key of STRATEGIES ("dp", "fsdp", "tp"), checked where the user gives it
            (`--strategy`'s choices in frost.train.configs).
        batch_size: the global batch size, checked to divide over the data axis.

    Returns:
        `(placed tree, its shardings, the batch sharding)`.
    """
    mesh = make_mesh(**parse_mesh(mesh_spec))
    check_batch(mesh, batch_size)
    shardings = STRATEGIES[strategy](tree, mesh)
    return put(tree, shardings), shardings, batch_sharding(mesh)


def initialize(
    coordinator: str | None = None, num_processes: int | None = None, process_id: int | None = None
) -> None:
    """Start JAX's multi-process runtime (no-op for a single process).

    Arguments:
        coordinator: process 0's HOST:PORT; default the FROST_COORDINATOR variable.
        num_processes: the processes of the run; default FROST_NUM_PROCESSES, else 1.
        process_id: this process's index, from 0; default FROST_PROCESS_ID, else 0.
    """
    coordinator = coordinator or os.environ.get("FROST_COORDINATOR")
    num_processes = num_processes or int(os.environ.get("FROST_NUM_PROCESSES", "1"))
    process_id = int(os.environ.get("FROST_PROCESS_ID", "0")) if process_id is None else process_id
    if num_processes <= 1:
        return
    if coordinator is None:
        raise UsageError(
            "multi-process training needs --coordinator HOST:PORT (or FROST_COORDINATOR)"
        )
    if jax.config.jax_platforms in (None, "", "cpu") or os.environ.get("JAX_PLATFORMS") == "cpu":
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    # a process that dies is noticed by the others within seconds, not JAX's default 100 s
    jax.distributed.initialize(
        coordinator, num_processes, process_id, heartbeat_timeout_seconds=HEARTBEAT_S
    )


def failure(error: BaseException) -> str | None:
    """The one line for an unexpected error in a multi-process run, most often a collective that
    failed because another process died or gave up (raised as a runtime or value error from the
    collective's dispatch).

    Arguments:
        error: the exception the command met.

    Returns:
        The line (this process, the error's first line, how to continue the run); None in a
        single process, where a traceback shows a bug.
    """
    if not jax.distributed.is_initialized():
        return None
    first = (str(error).strip().splitlines() or [""])[0]
    return (
        f"process {jax.process_index()} of {jax.process_count()}: {type(error).__name__}: "
        f"{first}; another process of this run has probably stopped (see its output): start "
        "every process again with --resume to continue from the last checkpoint (--debug shows "
        "the traceback)"
    )


def exit_now(code: int) -> None:
    """In a multi-process run, end this process now (`os._exit`), skipping the runtime's shutdown
    barrier, which would wait for peers that are gone or stuck in a collective with this one; its
    closed connections stop them at once too. A no-op in a single process.

    Arguments:
        code: the exit status.
    """
    if jax.distributed.is_initialized():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def on_first(fn: Callable[[], Any]) -> Any:
    """`fn()` run by process 0 alone, its result given to every process; a FrostError it raises
    (a refused run directory) is raised in every process with the same message, so no process
    waits on one that gave up. One process: just `fn()`.

    Arguments:
        fn: a function of no arguments returning a JSON value of at most MESSAGE_BYTES encoded.

    Returns:
        `fn()`'s value, in every process (as JSON gives it back: tuples become lists).
    """
    if jax.process_count() == 1:
        return fn()
    from jax.experimental import multihost_utils

    answer = None
    if jax.process_index() == 0:
        try:
            answer = {"value": fn()}
        except FrostError as e:
            answer = {"error": str(e), "usage": isinstance(e, UsageError)}
    text = json.dumps(answer).encode()[:MESSAGE_BYTES].ljust(MESSAGE_BYTES, b"\0")
    sent = np.frombuffer(text, np.uint8)
    got = np.asarray(multihost_utils.broadcast_one_to_all(sent)).tobytes().rstrip(b"\0")
    answer = json.loads(got)
    if "error" in answer:
        raise (UsageError if answer["usage"] else FrostError)(answer["error"])
    return answer["value"]
