"""The vmapped runner: runs that differ only in hyper-parameter values or seed train together,
in one compiled program.

Hyper-parameters live in the optimizer state (frost.optim.base), so one optimizer, built once,
serves a whole grid row: K states are stacked along a leading axis, each gets its values with
`set_hyperparams`, and `frost.train.loop.train_step` (the one step, with its non-finite policy
and Sophia's Hessian refresh) is `jax.vmap`ped over (model, optimizer state, key). The schedule
(10% linear warmup, then cosine to zero) scales each run's peak learning rate inside the step;
the budget is an argument, so every budget of an optimizer shares one program. A value the state
does not hold (Sophia's gamma; all of an optax optimizer's) is built in, one group per value.

    for group in groups(workload, data, "lion", runs):
        results = run_group(workload, data, "lion", group)   # one dict per run, in order

Steps run in chunks of CHUNK inside `lax.scan`; batches are drawn on the device from
(seed, step). Integer leaves of an optimizer state are step counters, equal across a group, so
they stay unbatched: `lax.cond` in Sophia's refresh then stays a branch instead of becoming a
select that would compute the Hessian estimate on every step. A run diverges at the first step
whose loss, gradients or update are non-finite (the step then leaves the run as it was) or whose
loss exceeds the workload's threshold. A group whose compiled program would take more than half
the free memory is split in halves, down to one run at a time.
"""
from __future__ import annotations

import os
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from frost import optim
from frost.audit.protocol import ALIASES, MUON_ADAM_LR
from frost.optim.registry import OPTIMIZERS, build, resolve
from frost.train.loop import train_step
from frost.train.losses import classification_loss

CHUNK, PLACEHOLDER = 10, 0.5  # steps per compiled call; a non-zero build value for hyper-parameters set later
_programs, _evals, _keys = {}, {}, {}


class Run(NamedTuple):
    hyperparams: dict  # the grid's names: learning_rate, weight_decay, b2, momentum, gamma, ...
    seed: int
    steps: int


class Group(NamedTuple):
    runs: list
    built: dict        # hyper-parameters the optimizer is built with (not held in its state)


def unit_lr(t, total):
    """The schedule of a peak learning rate of 1: 10% warmup, then cosine to 0 at step `total`."""
    return optim.warmup_cosine(1.0, 100, 1000)(1000.0 * t / total)


def _extra(workload, data, name) -> dict:
    """Build arguments of Frost's own optimizers: weight decay on matrices only; Muon's partition."""
    if ALIASES.get(name, name) not in OPTIMIZERS:
        return {}
    extra = {"mask": optim.decay_mask}
    if name == "muon":
        extra.update(labels=workload.muon_labels(data.classes), adam_weight_decay=PLACEHOLDER)
    return extra


def _state_keys(workload, data, name, axes) -> set:
    """The hyper-parameter names the optimizer's state holds (built with every axis non-zero)."""
    key = (workload.name, data.classes, name, axes)
    if key not in _keys:
        opt = build(ALIASES.get(name, name), 1.0, **{a: PLACEHOLDER for a in axes if a != "learning_rate"},
                    **_extra(workload, data, name))
        model = jax.eval_shape(lambda k: workload.model(data, k), jax.random.key(0))
        _keys[key] = set(optim.get_hyperparams(jax.eval_shape(opt.init, model)))
    return _keys[key]


def _held(keys, axis) -> list:
    return [k for k in keys if k == axis or k.endswith("/" + axis)]


def groups(workload, data, name, runs) -> list[Group]:
    """Split `runs` (one optimizer, one budget) into groups that can share one program."""
    axes = tuple(runs[0].hyperparams)
    keys = _state_keys(workload, data, name, axes)
    built = [a for a in axes if not _held(keys, a)]
    out = {}
    for r in runs:
        out.setdefault(tuple(r.hyperparams[a] for a in built), []).append(r)
    return [Group(rs, dict(zip(built, values))) for values, rs in out.items()]


def _init(workload, data, name, opt, runs, keys):
    """Stacked (models, optimizer states, peak learning rates, keys, diverged step) of the runs."""
    seeds = jnp.stack([jax.random.key(r.seed) for r in runs])
    models = jax.vmap(lambda k: workload.model(data, jax.random.fold_in(k, 0)))(seeds)
    values = {k: jnp.asarray([r.hyperparams[a] * (MUON_ADAM_LR if k == "adam/learning_rate" else 1.0)
                              for r in runs], jnp.float32)
              for a in runs[0].hyperparams for k in _held(keys, a)}
    states = jax.vmap(lambda s, v: optim.set_hyperparams(s, **v))(jax.vmap(opt.init)(models), values)
    states = jax.tree.map(lambda x: x[0] if jnp.issubdtype(x.dtype, jnp.integer) else x, states)
    peaks = {k: jnp.array(v, copy=True) for k, v in values.items() if k.endswith("learning_rate")}  # own buffers
    return models, states, peaks, jax.vmap(lambda k: jax.random.fold_in(k, 1))(seeds), \
        jnp.full(len(runs), -1, jnp.int32)


def _program(workload, data, name, opt, threshold):
    """The jitted chunk: CHUNK steps of every run, returning the carry and each run's mean loss."""
    step = train_step(opt, classification_loss, hessian=resolve(ALIASES.get(name, name)).hessian)

    def chunk(carry, arrays, t0, total):
        def body(c, t):
            models, states, peaks, keys, bad = c
            axes = jax.tree.map(lambda x: None if jnp.issubdtype(x.dtype, jnp.integer) else 0, states)

            def one(model, state, peak, key):
                if peak:  # the learning rates the state holds follow the schedule
                    state = optim.set_hyperparams(state, **{k: v * unit_lr(t, total) for k, v in peak.items()})
                batch_key, step_key = jax.random.split(jax.random.fold_in(key, t))
                model, state, metrics = step(model, state, workload.draw(arrays, batch_key), step_key)
                return model, state, metrics["loss"], metrics["finite"]
            models, states, loss, finite = jax.vmap(one, in_axes=(0, axes, 0, 0))(models, states, peaks, keys)
            states = jax.tree.map(lambda x, a: x if a == 0 else jnp.max(x, 0), states, axes)  # counters: shared
            bad = jnp.where((bad < 0) & ~(finite & (loss <= threshold)), t, bad)
            return (models, states, peaks, keys, bad), loss
        carry, losses = jax.lax.scan(body, carry, t0 + jnp.arange(CHUNK, dtype=jnp.int32))
        return carry, jnp.mean(losses, 0)                                                    # (K,)
    return jax.jit(chunk, donate_argnums=0)


def run_group(workload, data, name, group: Group, max_runs: int | None = None) -> list[dict]:
    """Train the group's runs (vmapped, `max_runs` at a time; None: as many as memory allows)."""
    runs, built = group.runs, group.built
    if max_runs is not None and len(runs) > max_runs:
        return [r for i in range(0, len(runs), max_runs)
                for r in run_group(workload, data, name, Group(runs[i:i + max_runs], built), max_runs)]
    steps = runs[0].steps
    keys = _state_keys(workload, data, name, tuple(runs[0].hyperparams))
    lr = built.get("learning_rate")
    schedule = 1.0 if lr is None else (lambda count: lr * unit_lr(count, steps))
    args = {a: PLACEHOLDER for a in runs[0].hyperparams if a not in built and a != "learning_rate"}
    opt = build(ALIASES.get(name, name), schedule, **args, **{k: v for k, v in built.items() if k != "learning_rate"},
                **_extra(workload, data, name))
    carry = _init(workload, data, name, opt, runs, keys)
    at = (np.int32(0), np.int32(steps))
    tag = (workload.name, tuple(v.shape for v in data.arrays.values()), name, tuple(sorted(built.items())), len(runs),
           None if lr is None else steps)
    if tag not in _programs:
        _programs[tag] = _program(workload, data, name, opt, workload.threshold(data)).lower(
            carry, data.arrays, *at).compile()
    program = _programs[tag]
    stats = program.memory_analysis()
    need = stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes
    if len(runs) > 1 and need > 0.5 * os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"):
        return run_group(workload, data, name, group, max(len(runs) // 2, 1))
    start, curve = time.perf_counter(), []
    for t0 in range(0, steps, CHUNK):
        carry, loss = program(carry, data.arrays, np.int32(t0), np.int32(steps))
        curve.append(np.asarray(loss))
        if (np.asarray(carry[-1]) >= 0).all():
            break  # every run has diverged
    if workload.name not in _evals:
        _evals[workload.name] = jax.jit(jax.vmap(workload.eval_loss, in_axes=(0, None)))
    final = np.asarray(_evals[workload.name](carry[0], data.arrays))
    seconds = (time.perf_counter() - start) / len(runs)
    bad = np.where((np.asarray(carry[-1]) < 0) & ~np.isfinite(final), steps - 1, np.asarray(carry[-1]))
    return [{"final_loss": float(final[i]) if bad[i] < 0 else None, "diverged": bool(bad[i] >= 0),
             "diverged_step": int(bad[i]) if bad[i] >= 0 else None, "steps": steps, "seconds": seconds,
             "curve": [[(j + 1) * CHUNK, float(c[i]) if np.isfinite(c[i]) else None] for j, c in enumerate(curve)]}
            for i in range(len(runs))]
