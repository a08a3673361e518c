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
(`--mesh runs=N`), each batch is padded with copies of its last run to a multiple of N and its
runs are split over the N devices; counters and data are whole on each. The chunks run on
frost.parallel.scan_chunks, the driver Anakin's iterations use too, at its optimisation level.
"""

import os
import re
import time
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

CHUNK = 10  # steps per compiled call
PLACEHOLDER = 0.5  # a non-zero build value for hyper-parameters set later
_programs, _evals, _keys = {}, {}, {}


class Run(NamedTuple):
    hyperparams: dict  # the grid's names: learning_rate, weight_decay, b2, momentum, gamma, ...
    seed: int
    steps: int


class Group(NamedTuple):
    runs: list
    built: dict  # hyper-parameters the optimizer is built with (not held in its state)


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


def runs_mesh(spec: str | None) -> Mesh | None:
    """The 1-D "runs" mesh of `--mesh runs=N` over this process's first N devices; None: none."""
    devices, given = jax.local_devices(), re.fullmatch(r"runs=([1-9][0-9]*)", spec or "runs=1")
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
    held = {a: PLACEHOLDER for a in axes if a not in built and a != "learning_rate"}
    return build(name, lr, **held, **built, **extra)


def _held(workload, data, name, axes) -> dict:
    """{grid name: the state's keys for it} of the hyper-parameters the optimizer's state holds."""
    tag = (workload.name, data.classes, name, axes)
    if tag not in _keys:
        model = jax.eval_shape(lambda k: workload.model(data, k), jax.random.key(0))
        state = jax.eval_shape(_make(workload, data, name, {}, axes).init, model)
        keys = optim.get_hyperparams(state)
        held = {}
        for a in axes:
            found = [k for k in keys if k == a or k.endswith("/" + a)]  # "muon/momentum"
            if a != "learning_rate" and found:
                held[a] = found
        _keys[tag] = held
    return _keys[tag]


def groups(workload, data, name, runs) -> list[Group]:
    """Split `runs` (one optimizer, one budget) into groups that can share one program."""
    axes = tuple(runs[0].hyperparams)
    held = _held(workload, data, name, axes)
    built = [a for a in axes if a not in held and a != "learning_rate"]
    out = {}
    for r in runs:
        out.setdefault(tuple(r.hyperparams[a] for a in built), []).append(r)
    return [Group(rs, dict(zip(built, values))) for values, rs in out.items()]


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
    _, carry, chunk = _traced(workload, data, name, [Run(hyperparams, s, CHUNK) for s in range(k)])
    return _need(chunk.lower(carry, _steps(0), data.arrays, np.int32(CHUNK)).compile()) // k


def _need(program) -> int:
    """Bytes a compiled program needs: its arguments, outputs and temporaries."""
    stats = program.memory_analysis()
    return stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes


def _eval_params(opt, carry):
    """Each run's parameters to evaluate: the optimizer's `eval_params` (a registry.WithEval:
    schedule-free's averaged point), else its parameters."""
    params = getattr(opt, "eval_params", lambda params, state: params)
    return jax.vmap(params, in_axes=(0, _axes(carry[1])))(carry[0], carry[1])


def _axes(states):
    """The vmap axes of stacked optimizer states: integer leaves (step counters) are shared."""
    return jax.tree.map(lambda x: None if jnp.issubdtype(x.dtype, jnp.integer) else 0, states)


def _init(workload, data, name, opt, runs):
    """Stacked (models, optimizer states, peak learning rates, keys, diverged step) of the runs:
    models from their seeds, the states' held hyper-parameters set to theirs. Run eagerly: its
    random initialisers take longer to compile as one program than to run op by op."""
    axes = tuple(runs[0].hyperparams)
    values = {
        k: np.asarray([r.hyperparams[a] for r in runs], np.float32)
        for a, keys in _held(workload, data, name, axes).items()
        for k in keys
    }
    seeds = np.asarray([r.seed for r in runs], np.int32)
    peaks = np.asarray([r.hyperparams["learning_rate"] for r in runs], np.float32)
    keys = jax.vmap(jax.random.key)(seeds)
    models = jax.vmap(lambda k: workload.model(data, jax.random.fold_in(k, 0)))(keys)
    states = jax.vmap(opt.init)(models)
    if values:  # (vmap needs an array: a state may hold none, optax.EmptyState)
        states = jax.vmap(lambda s, v: optim.set_hyperparams(s, **v))(states, values)
    # counters shared; every other leaf its own buffer, as the chunk donates its carry (a state
    # may hold one array twice: prodigy's, cocob's)
    states = jax.tree.map(
        lambda x: x[0] if jnp.issubdtype(x.dtype, jnp.integer) else jnp.copy(x), states
    )
    step_keys = jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)
    return models, states, jnp.asarray(peaks), step_keys, jnp.full(len(seeds), -1)


def _program(workload, data, name, built, axes, threshold):
    """The jitted chunk: CHUNK steps of every run, returning the carry and each step's losses."""
    hessian = resolve(name).hessian

    def body(c, t, arrays, total):
        models, states, peaks, keys, bad = c
        axes_in = _axes(states)

        def one(model, state, peak, key):  # train_step's default loss: softmax cross-entropy
            opt = _make(workload, data, name, built, axes, peak, total)
            step = train_step(opt, hessian=hessian)
            batch_key, step_key = jax.random.split(jax.random.fold_in(key, t))
            model, state, metrics = step(model, state, workload.draw(arrays, batch_key), step_key)
            return model, state, metrics["loss"], metrics["finite"]

        models, states, loss, finite = jax.vmap(one, in_axes=(0, axes_in, 0, 0))(
            models, states, peaks, keys
        )
        # counters: shared
        states = jax.tree.map(lambda x, a: x if a == 0 else jnp.max(x, 0), states, axes_in)
        bad = jnp.where((bad < 0) & ~(finite & (loss <= threshold)), t, bad)
        return (models, states, peaks, keys, bad), loss

    # (carry, steps (CHUNK,), arrays, total) -> (carry, losses (CHUNK, K))
    return parallel.scan_chunks(body, CHUNK)


def _steps(t0: int) -> np.ndarray:
    """The step numbers of the chunk starting at `t0`: (CHUNK,) int32."""
    return np.arange(t0, t0 + CHUNK, dtype=np.int32)


def run_group(workload, data, name, group: Group, max_runs=None, mesh=None, fsdp=False):
    """Train the group's runs (vmapped, `max_runs` at a time; None: as many as memory allows),
    split over `mesh` (a `runs_mesh`; None: one device); a list of one dict per run. A run too
    big for a device trains alone, `fsdp`: each of its leaves split along its largest divisible
    axis over the mesh (parallel.fsdp; the batch is not split); too big even so, it is
    refused."""
    runs, built, n = group.runs, group.built, mesh.size if mesh else 1
    if max_runs is not None and len(runs) > max_runs:
        return [
            r
            for i in range(0, len(runs), max_runs)
            for r in run_group(
                workload, data, name, Group(runs[i : i + max_runs], built), max_runs, mesh
            )
        ]
    # every device an equal share (FSDP: one run over all): copies of the last run, dropped after
    if len(runs) % n and not fsdp:
        padded = Group(runs + runs[-1:] * (-len(runs) % n), built)
        return run_group(workload, data, name, padded, max_runs, mesh)[: len(runs)]
    steps, axes = runs[0].steps, tuple(runs[0].hyperparams)
    opt = _make(workload, data, name, built, axes)
    carry, arrays = _init(workload, data, name, opt, runs), data.arrays
    if mesh is not None:  # each run's leaves on its device, the states' counters on all; or FSDP
        split, whole = NamedSharding(mesh, P("runs")), NamedSharding(mesh, P())
        shared = lambda x: whole if jnp.issubdtype(x.dtype, jnp.integer) else split  # noqa: E731
        layout = jax.tree.map(lambda _: split, carry)
        layout = (layout[0], jax.tree.map(shared, carry[1]), *layout[2:])
        carry = jax.device_put(carry, parallel.fsdp(carry, mesh, "runs") if fsdp else layout)
        arrays = jax.device_put(arrays, whole)
    shapes = tuple(v.shape for v in arrays.values())
    tag = (workload.name, shapes, name, tuple(sorted(built.items())), len(runs), n, fsdp)
    if tag not in _programs:
        chunk = _program(workload, data, name, built, axes, workload.threshold(data))
        _programs[tag] = chunk.lower(carry, _steps(0), arrays, np.int32(steps)).compile()
    program = _programs[tag]
    if _need(program) > 0.5 * memory():  # (a device's share: memory_analysis is per device)
        if len(runs) > n:
            return run_group(workload, data, name, group, max(len(runs) // 2, n), mesh)
        if n == 1 or fsdp:
            refuse(workload, _need(program))
        alone = {}  # FSDP, a run at a time (a padding copy is the object it copies: trained once)
        for r in runs:
            if id(r) not in alone:
                alone[id(r)] = run_group(workload, data, name, Group([r], built), 1, mesh, True)[0]
        return [alone[id(r)] for r in runs]
    start, curve = time.perf_counter(), []
    for t0 in range(0, steps, CHUNK):
        carry, losses = program(carry, _steps(t0), arrays, np.int32(steps))
        curve.append(np.asarray(losses).mean(0))  # (K,)
        if (np.asarray(carry[-1]) >= 0).all():
            break  # every run has diverged
    seconds = (time.perf_counter() - start) / len(runs)  # training (not the evaluation's compile)
    if workload.name not in _evals:
        _evals[workload.name] = jax.jit(jax.vmap(workload.eval_loss, in_axes=(0, None)))
    final = np.asarray(_evals[workload.name](_eval_params(opt, carry), arrays))
    bad = np.asarray(carry[-1])
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
