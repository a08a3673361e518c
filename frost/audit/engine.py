"""The vmapped runner: runs that differ only in hyper-parameter values or seed train together,
in one compiled program.

`frost.train.loop.train_step` (the one step, with its non-finite policy and Sophia's Hessian
refresh) is `jax.vmap`ped over stacked (model, optimizer state, key, peak learning rate):
- the learning rate is a schedule (10% linear warmup, then cosine to zero) times the run's peak,
  a traced value the optimizer is built around inside the step, so any optimizer that takes a
  schedule (Frost's, optax's) vmaps over its learning rate; the budget is an argument too, so
  every budget of an optimizer shares its program;
- weight decay, momentum and betas live in the state of Frost's optimizers (frost.optim.base):
  each run gets its values with `set_hyperparams`. A value the state does not hold (Sophia's
  gamma; an optax optimizer's weight decay) is built in: one group, and program, per value.

    for group in groups(workload, data, "lion", runs):
        results = run_group(workload, data, "lion", group)   # one dict per run, in order

Steps run CHUNK at a time inside `lax.scan`; batches are drawn on the device from (seed, step).
Integer leaves of an optimizer state are step counters, equal across a group, so they stay
unbatched: `lax.cond` in Sophia's refresh then stays a branch, rather than a select that would
compute the Hessian estimate on every step. A run diverges at the first step whose loss,
gradients or update are non-finite (the step then leaves the run as it was) or whose loss
exceeds the workload's threshold. A group whose program would need more than half a device's
memory (`memory`: a GPU's own, else the machine's) is split in halves, down to one run at a time
(a fixed cap, not the memory free now: a batch's composition, and so its last bits, never depend
on what else runs). With a "runs" mesh
(`--mesh runs=N`), up to N groups train at once, each on its own device with the very program
one device compiles for it (`run_groups`), so a run's numbers are the same bit for bit whatever
the mesh. (One program sharding the runs over the devices is not: XLA's SPMD pipeline simplifies
and fuses a partitioned program otherwise, and the last bits move. Forced CPU devices beyond the
cores change XLA's CPU thread pool, and with it some products' last bits, mesh or none.) A run
too big for a device trains alone with FSDP over the mesh. The chunks run on
frost.parallel.scan_chunks, the driver Anakin's iterations use too, at its optimisation level.
"""

import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from frost import optim, parallel
from frost.audit.protocol import MUON_ADAM_LR
from frost.config import UsageError
from frost.optim.registry import build, describe, resolve
from frost.train.loop import train_step
from frost.tree import PyTree

CHUNK = 10  # steps per compiled call
PLACEHOLDER = 0.5  # a non-zero build value for hyper-parameters set later
_programs = {}  # {(workload, shapes, optimizer, built values, runs, device, fsdp): compiled chunk}
_evals = {}  # {workload name: its jitted, vmapped evaluation loss}
_keys = {}  # {(workload, classes, optimizer, grid axes): _held's answer}
_ALONE = threading.Lock()  # an FSDP run takes every device of the mesh: one at a time


class Run(NamedTuple):
    hyperparams: dict  # the grid's names: learning_rate, weight_decay, b2, momentum, gamma, ...
    seed: int
    steps: int


class Group(NamedTuple):
    runs: list
    built: dict  # hyper-parameters the optimizer is built with (not held in its state)


class Carry(NamedTuple):
    """The stacked state of a group's runs, carried from chunk to chunk (each leaf has the runs'
    axis first, but the optimizer states' integer counters, shared by the group)."""

    models: PyTree  # each run's model
    states: PyTree  # each run's optimizer state
    peaks: jax.Array  # (K,) float32: each run's peak learning rate
    keys: jax.Array  # (K,) each run's key for its batches and steps
    diverged: jax.Array  # (K,) int32: the step each run diverged at, -1 while it has not


def unit_lr(t, total):
    """The schedule of a peak learning rate of 1: 10% warmup, then cosine to 0 at step `total`."""
    return optim.warmup_cosine(1.0, 100, 1000)(
        1000 * jnp.asarray(t, jnp.float32) / jnp.asarray(total, jnp.float32)
    )


def memory() -> int:
    """Bytes of memory of a device: its own (a GPU's), else its share of the machine's."""
    own = (jax.local_devices()[0].memory_stats() or {}).get("bytes_limit")
    machine = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return own or machine // jax.local_device_count()


def refuse(workload, need: int):
    """The one refusal of a run that does not fit in half a device's memory."""
    raise UsageError(
        f"{workload.name}: a run needs {need / 2**30:.3g} GiB, more than half of a device's "
        f"{memory() / 2**30:.3g} GiB; audit smaller models (--sizes) or split it (--mesh runs=N)"
    )


def least(workload, data, hyperparams: dict) -> tuple[int, int]:
    """(parameters, bytes) of a run of `workload` at the least, by arithmetic: its weights, their
    gradients (as many bytes) and the state of AdamW (the reference every audit trains), built as
    the trial `hyperparams`; activations and temporaries come on top. From shapes alone
    (jax.eval_shape): nothing is compiled or allocated."""
    model = jax.eval_shape(lambda k: workload.model(data, k), jax.random.key(0))
    state = jax.eval_shape(_make(workload, data, "adamw", {}, tuple(hyperparams)).init, model)
    weights = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(model))
    moments = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))
    return sum(x.size for x in jax.tree.leaves(model)), 2 * weights + moments


def refuse_by_arithmetic(workload, params: int, need: int, devices: int) -> None:
    """Refuse a workload whose `least` bytes `need`, split over `devices` (FSDP splits every
    weight, gradient and state array), exceed half a device's memory: before anything
    compiles."""
    if need / devices <= 0.5 * memory():
        return
    more = ""  # more devices, when they would do
    if need / jax.local_device_count() <= 0.5 * memory():
        more = f" or split it over more devices (--mesh runs=N, N <= {jax.local_device_count()})"
    if devices > 1:
        over = f"{devices} devices' {memory() / 2**30:.3g} GiB each"
    else:
        over = f"a device's {memory() / 2**30:.3g} GiB"
    raise UsageError(
        f"{workload.name}: a run needs at least {need / 2**30:.3g} GiB by arithmetic "
        f"({params / 1e9:.3g}B parameters x {need / params:.3g} bytes: weights, gradients and "
        f"AdamW's state), more than half of {over}; audit smaller models (--sizes){more}"
    )


def runs_mesh(spec: str | None) -> Mesh | None:
    """The 1-D "runs" mesh of `--mesh runs=N` over this process's first N devices; None: none."""
    devices = jax.local_devices()
    given = re.fullmatch(r"runs=([1-9][0-9]*)", spec or "runs=1")
    if given is None or int(given[1]) > len(devices):
        raise UsageError(f"--mesh {spec}: give runs=N, N <= {len(devices)} (the devices seen)")
    return Mesh(np.asarray(devices[: int(given[1])]), ("runs",)) if spec else None


def _make(workload, data, name, built, axes, peak=1.0, total=1):
    """The optimizer around the schedule `peak * unit_lr(step, total)`; held values are
    placeholders."""
    lr = lambda count: peak * unit_lr(count, total)  # noqa: E731
    extra = {}  # Muon's partition
    if name == "muon":
        extra.update(
            labels=workload.muon_labels(data.classes),
            adam_weight_decay=PLACEHOLDER,
            adam_learning_rate=lambda count: MUON_ADAM_LR * lr(count),
        )
    held = {axis: PLACEHOLDER for axis in axes if axis not in built and axis != "learning_rate"}
    return build(name, lr, **held, **built, **extra)


def _held(workload, data, name, axes) -> dict:
    """{grid name: the state's keys for it} of the hyper-parameters the optimizer's state holds."""
    tag = (workload.name, data.classes, name, axes)
    if tag not in _keys:
        model = jax.eval_shape(lambda k: workload.model(data, k), jax.random.key(0))
        state = jax.eval_shape(_make(workload, data, name, {}, axes).init, model)
        keys = optim.get_hyperparams(state)
        held = {}
        for axis in axes:
            found = [k for k in keys if k == axis or k.endswith("/" + axis)]  # "muon/momentum"
            if axis != "learning_rate" and found:
                held[axis] = found
        _keys[tag] = held
    return _keys[tag]


def groups(workload, data, name, runs) -> list[Group]:
    """Split `runs` (one optimizer, one budget) into groups that can share one program."""
    axes = tuple(runs[0].hyperparams)
    held = _held(workload, data, name, axes)
    built = [axis for axis in axes if axis not in held and axis != "learning_rate"]
    by_values = {}  # {the built hyper-parameters' values: the runs with them}
    for run in runs:
        by_values.setdefault(tuple(run.hyperparams[axis] for axis in built), []).append(run)
    return [Group(same, dict(zip(built, values))) for values, same in by_values.items()]


def probe(workload, data, name, hyperparams: dict) -> None:
    """Refuse an optimizer that cannot run, before any training: the very path a run takes (its
    stacked init, a chunk of vmapped training steps, its evaluation parameters), built as the
    trial `hyperparams` would be, is traced on the workload's shapes (jax.eval_shape: nothing is
    computed). Raises a one-line UsageError naming the exception and where the user's code raised
    it."""
    entry = resolve(name)
    try:
        opt, carry, chunk = _traced(workload, data, name, [Run(hyperparams, 0, CHUNK)])
        carry, _ = jax.eval_shape(chunk, carry, _steps(0), data.arrays, np.int32(CHUNK))
        jax.eval_shape(lambda c: _eval_params(opt, c), carry)
    except UsageError:
        raise
    except Exception as e:
        raise UsageError(f"--optimizer {name}: cannot train: {describe(e, entry.file)}") from None


def _traced(workload, data, name, runs):
    """(optimizer, carry as shapes, chunk program) of one group's runs; nothing is computed."""
    (group,) = groups(workload, data, name, runs)
    axes = tuple(runs[0].hyperparams)
    opt = _make(workload, data, name, group.built, axes)
    carry = jax.eval_shape(lambda: _init(workload, data, name, opt, group.runs))
    return opt, carry, _program(workload, data, name, group.built, axes, workload.threshold(data))


def footprint(workload, data, name, hyperparams: dict, k: int) -> int:
    """Bytes of memory a run takes in a program of `k` vmapped runs (compiled, not run)."""
    runs = [Run(hyperparams, seed, CHUNK) for seed in range(k)]
    _, carry, chunk = _traced(workload, data, name, runs)
    return _need(chunk.lower(carry, _steps(0), data.arrays, np.int32(CHUNK)).compile()) // k


def _need(program) -> int:
    """Bytes a compiled program needs: its arguments, outputs and temporaries."""
    stats = program.memory_analysis()
    return stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes


def _eval_params(opt, carry: Carry):
    """Each run's parameters to evaluate: the optimizer's `eval_params` (a registry.WithEval:
    schedule-free's averaged point), else its parameters."""
    params = getattr(opt, "eval_params", lambda params, state: params)
    return jax.vmap(params, in_axes=(0, _axes(carry.states)))(carry.models, carry.states)


def _axes(states):
    """The vmap axes of stacked optimizer states: integer leaves (step counters) are shared."""
    return jax.tree.map(lambda x: None if jnp.issubdtype(x.dtype, jnp.integer) else 0, states)


def _init(workload, data, name, opt, runs) -> Carry:
    """The runs' first Carry: models from their seeds, the states' held hyper-parameters set to
    theirs, no run diverged. Run eagerly: its random initialisers take longer to compile as one
    program than to run op by op."""
    axes = tuple(runs[0].hyperparams)
    values = {
        key: np.asarray([run.hyperparams[axis] for run in runs], np.float32)
        for axis, keys in _held(workload, data, name, axes).items()
        for key in keys
    }
    seeds = np.asarray([run.seed for run in runs], np.int32)
    peaks = np.asarray([run.hyperparams["learning_rate"] for run in runs], np.float32)
    keys = jax.vmap(jax.random.key)(seeds)
    models = jax.vmap(lambda k: workload.model(data, jax.random.fold_in(k, 0)))(keys)
    states = jax.vmap(opt.init)(models)
    if values:  # (vmap needs an array: a state may hold none, optax.EmptyState)
        states = jax.vmap(lambda state, held: optim.set_hyperparams(state, **held))(states, values)
    # counters shared; every other leaf its own buffer, as the chunk donates its carry (a state
    # may hold one array twice: prodigy's, cocob's)
    states = jax.tree.map(
        lambda x: x[0] if jnp.issubdtype(x.dtype, jnp.integer) else jnp.copy(x), states
    )
    step_keys = jax.vmap(lambda key: jax.random.fold_in(key, 1))(keys)
    return Carry(
        models=models,
        states=states,
        peaks=jnp.asarray(peaks),
        keys=step_keys,
        diverged=jnp.full(len(seeds), -1),
    )


def _program(workload, data, name, built, axes, threshold):
    """The jitted chunk: CHUNK steps of every run, returning the carry and each step's losses."""
    hessian = resolve(name).hessian

    def body(carry: Carry, t, arrays, total):
        axes_in = _axes(carry.states)

        def one(model, state, peak, key):  # train_step's default loss: softmax cross-entropy
            opt = _make(workload, data, name, built, axes, peak, total)
            step = train_step(opt, hessian=hessian)
            batch_key, step_key = jax.random.split(jax.random.fold_in(key, t))
            model, state, metrics = step(model, state, workload.draw(arrays, batch_key), step_key)
            return model, state, metrics["loss"], metrics["finite"]

        models, states, loss, finite = jax.vmap(one, in_axes=(0, axes_in, 0, 0))(
            carry.models, carry.states, carry.peaks, carry.keys
        )
        # counters: shared
        states = jax.tree.map(lambda x, axis: x if axis == 0 else jnp.max(x, 0), states, axes_in)
        fails = ~(finite & (loss <= threshold))
        diverged = jnp.where((carry.diverged < 0) & fails, t, carry.diverged)
        return carry._replace(models=models, states=states, diverged=diverged), loss

    # (carry, steps (CHUNK,), arrays, total) -> (carry, losses (CHUNK, K))
    return parallel.scan_chunks(body, CHUNK)


def _steps(t0: int) -> np.ndarray:
    """The step numbers of the chunk starting at `t0`: (CHUNK,) int32."""
    return np.arange(t0, t0 + CHUNK, dtype=np.int32)


def run_groups(workload, data, jobs: list[tuple[str, Group]], mesh: Mesh | None = None) -> list:
    """Train each of `jobs`, (optimizer, group) pairs, on its own device of `mesh`, all at once
    (job i on the mesh's device i: at most mesh.size jobs; no mesh: one after another on the
    default device); a list of `run_group`'s results, one per job. Each group trains as
    `run_group` trains it on one device, with the program one device compiles for it, so its
    numbers are the same bit for bit whatever the mesh's size."""
    if mesh is None:
        return [run_group(workload, data, name, group) for name, group in jobs]
    devices = list(mesh.devices.flat)
    # a thread per device: JAX leaves the GIL while a device computes, so they train together
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = [
            pool.submit(run_group, workload, data, name, group, None, mesh, device=device)
            for (name, group), device in zip(jobs, devices)
        ]
        return [future.result() for future in futures]


def run_group(
    workload, data, name, group: Group, max_runs=None, mesh=None, fsdp=False, device=None
):
    """Train the group's runs on `device` (None: the default device), vmapped, `max_runs` at a
    time (None: as many as half its memory allows); a list of one dict per run. A run too big
    for a device trains alone, `fsdp`: each of its leaves split along its largest divisible axis
    over `mesh` (a `runs_mesh`; parallel.fsdp; the batch is not split); too big even so, or with
    no mesh to split it over, it is refused."""
    runs = group.runs
    built = group.built
    if max_runs == 1 and len(runs) > 1:  # a padding copy is the run it copies: trained once
        alone = {}
        for run in runs:
            if id(run) not in alone:
                one = Group([run], built)
                alone[id(run)] = run_group(workload, data, name, one, 1, mesh, device=device)[0]
        return [alone[id(run)] for run in runs]
    if max_runs is not None and len(runs) > max_runs:
        results = []
        for i in range(0, len(runs), max_runs):
            part = Group(runs[i : i + max_runs], built)
            results += run_group(workload, data, name, part, max_runs, mesh, device=device)
        return results
    steps = runs[0].steps
    axes = tuple(runs[0].hyperparams)
    opt = _make(workload, data, name, built, axes)
    carry = _init(workload, data, name, opt, runs)
    arrays = data.arrays
    if fsdp:  # every leaf split over the mesh, the data whole on each device
        carry = jax.device_put(carry, parallel.fsdp(carry, mesh, "runs"))
        arrays = jax.device_put(arrays, NamedSharding(mesh, P()))
    elif device is not None:
        carry = jax.device_put(carry, device)
        arrays = jax.device_put(arrays, device)
    shapes = tuple(v.shape for v in arrays.values())
    tag = (workload.name, shapes, name, tuple(sorted(built.items())), len(runs), device, fsdp)
    if tag not in _programs:
        chunk = _program(workload, data, name, built, axes, workload.threshold(data))
        _programs[tag] = chunk.lower(carry, _steps(0), arrays, np.int32(steps)).compile()
    program = _programs[tag]
    if _need(program) > 0.5 * memory():  # (a device's share: memory_analysis is per device)
        if len(runs) > 1:
            return run_group(
                workload, data, name, group, max(len(runs) // 2, 1), mesh, device=device
            )
        if mesh is None or mesh.size == 1 or fsdp:
            refuse(workload, _need(program))
        with _ALONE:
            return run_group(workload, data, name, group, 1, mesh, fsdp=True)
    start = time.perf_counter()
    curve = []  # each chunk's mean loss of each run, (K,)
    for t0 in range(0, steps, CHUNK):
        carry, losses = program(carry, _steps(t0), arrays, np.int32(steps))
        curve.append(np.asarray(losses).mean(0))  # (K,)
        if (np.asarray(carry.diverged) >= 0).all():
            break  # every run has diverged
    seconds = (time.perf_counter() - start) / len(runs)  # training (not the evaluation's compile)
    if workload.name not in _evals:
        _evals[workload.name] = jax.jit(jax.vmap(workload.eval_loss, in_axes=(0, None)))
    final = np.asarray(_evals[workload.name](_eval_params(opt, carry), arrays))
    bad = np.asarray(carry.diverged)  # a non-finite final loss diverged at the last step
    bad = np.where((bad < 0) & ~np.isfinite(final), steps - 1, bad)
    return [
        {
            "final_loss": float(final[i]) if bad[i] < 0 else None,
            "diverged": bool(bad[i] >= 0),
            "diverged_step": int(bad[i]) if bad[i] >= 0 else None,
            "steps": steps,
            "seconds": seconds,
            "curve": [
                [(j + 1) * CHUNK, float(c[i]) if np.isfinite(c[i]) else None]
                for j, c in enumerate(curve)
            ],
        }
        for i in range(len(runs))
    ]
