"""The training loop: a jitted step, evaluation, progress, metrics, checkpoints, and resume.

    step_fn = make_train_step(optimizer, classification_loss)
    state = TrainState(model, optimizer.init(model), key=jax.random.key(0))
    state = fit(state, step_fn, loader, FitConfig(epochs=3, run_dir="runs/r20"), eval_fn=...)

A step is a pure function `(model, opt_state, batch, key) -> (model, opt_state, metrics)`. The loss
function returns `(loss, (stats_model, metrics))`, where `stats_model` is the model with
BatchNorm statistics updated by `frost.nn.apply(..., train=True)`; the step applies the
optimizer to the parameters and takes the buffers from `stats_model`. With Sophia, the step
also refreshes the Hessian estimate (`hessian="gnb"` or `"hutchinson"`, see losses.HESSIAN).

The non-finite policy (one for every job): a step whose loss, gradients, new parameters or new
optimizer state hold a NaN or an Inf is not applied; the step returns the old state and
`finite=False`. `fit` then stops (`on_nonfinite="stop"`: raise NonFiniteError; every
checkpoint on disk is finite, since only finite states are ever kept) or skips the step and goes
on (`"skip"`), stopping after `max_skips` bad steps in a row. `fit` reads each step's flag after
dispatching the next, so the host never waits for the device between steps. Determinism: the key
of step t is `fold_in(key, t)`, and the loader's position is saved in each checkpoint, so a
resumed run repeats an uninterrupted one exactly on CPU.
"""

import dataclasses
import pathlib
import time
from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from frost import checkpoint, nn, parallel
from frost.config import FrostError
from frost.data import Loader
from frost.nn import precision as mixed
from frost.optim import (
    GradientTransformation,
    all_finite,
    apply_updates,
    call_update,
    find_states,
    get_hyperparams,
    global_norm,
    update_hessian,
)
from frost.optim.scaling import ScaledState
from frost.train import metrics as metrics_log
from frost.train.losses import HESSIAN, classification_loss, eval_sums
from frost.tree import PyTree, where

_fold_in = jax.jit(jax.random.fold_in)  # the step's key; jitted: 8 us a call, 64 us eagerly

# (model, batch, key) -> (loss, (stats_model, metrics)): a float32 scalar loss, the model with its
# new BatchNorm statistics, and a dict of scalar metrics
LossFn = Callable[[PyTree, PyTree, jax.Array], tuple[jax.Array, tuple[PyTree, dict]]]
# (model, opt_state, batch, key) -> (model, opt_state, metrics)
Step = Callable[[PyTree, PyTree, PyTree, jax.Array], tuple[PyTree, PyTree, dict]]


class NonFiniteError(FrostError, FloatingPointError):
    """Training met a non-finite step; the message names it and the last (finite) checkpoint."""


@dataclasses.dataclass
class TrainState:
    """What a training run carries from one step to the next; `fit` returns a new one each step.

    Arguments:
        model: the model (usually a `frost.nn.Module`; any PyTree of arrays the step takes).
        opt_state: the optimizer's state for `model` (`optimizer.init(model)`).
        key: a PRNG key (`jax.random.key`); step t draws its randomness from
            `jax.random.fold_in(key, t)`.
        step: the number of steps taken so far.
        loader_state: the loader's position after the last step (`frost.data.Loader.state()`),
            kept in each checkpoint so a resumed run continues mid-epoch; None at the start.
        last_eval: the latest `eval_fn` result (not checkpointed).
        skipped: the non-finite steps skipped so far (`on_nonfinite="skip"`).
        speed: the training throughput at the latest evaluation, as its record gives it
            (`tokens_per_s`, `flops_per_token`, `mfu`; not checkpointed).
    """

    model: PyTree
    opt_state: PyTree
    key: jax.Array
    step: int = 0
    loader_state: dict | None = None
    last_eval: dict | None = None  # the latest `eval_fn` result (not checkpointed)
    skipped: int = 0  # non-finite steps skipped (on_nonfinite="skip")
    speed: dict | None = None  # the throughput at the latest evaluation (not checkpointed)

    def tree(self) -> dict:
        """The arrays a checkpoint holds: `{"model": ..., "opt_state": ..., "key": ...}`."""
        return {"model": self.model, "opt_state": self.opt_state, "key": self.key}


def train_step(
    optimizer: GradientTransformation,
    loss_fn: LossFn = classification_loss,
    prepare: Callable[[PyTree], PyTree] = lambda batch: batch,
    hessian: str | None = None,
    precision: str = "fp32",
    grad_accum: int = 1,
) -> Step:
    """The pure training step, unjitted (so it can be vmapped, e.g. over a grid of
    hyper-parameters held in stacked optimizer states).

    `precision` ("fp32", "bf16", "fp16"; frost.nn.precision) runs the forward and backward pass
    in that dtype with float32 parameters, moments and loss. fp16 needs the optimizer wrapped in
    `frost.optim.scaling.dynamic_scaling`: the loss is multiplied by its scale here, and it skips
    the updates whose gradients overflow (counted in metrics["overflow_skipped"], not as
    non-finite).

    Gradient accumulation (`grad_accum` K > 1) splits the batch into K micro-batches, computes
    their gradients one after another (a `jax.lax.scan`, so only one micro-batch's activations
    are alive at a time) and averages them, their losses and their metrics: the update of one
    batch K times larger than a micro-batch, in the memory of one micro-batch. Micro-batch k
    takes rows k, K + k, 2K + k, ... of the batch, so on a mesh each device keeps its own rows.
    BatchNorm statistics are updated by each micro-batch in turn (as PyTorch's are), so a model
    with BatchNorm sees micro-batch statistics; Sophia's Hessian estimate uses the first
    micro-batch; the step's key is split into one key per micro-batch.

    Arguments:
        optimizer: the optimizer (a `GradientTransformation`, Frost's or optax's).
        loss_fn: `(model, batch, key) -> (loss, (stats_model, metrics))`: a float32 scalar loss,
            the model with its new BatchNorm statistics, and a dict of scalar metrics.
        prepare: maps the loader's batch to the loss function's (e.g. uint8 images to floats).
        hessian: Sophia's Hessian-diagonal estimator, "gnb" or "hutchinson" (losses.HESSIAN);
            None for every other optimizer.
        precision: "fp32", "bf16" or "fp16", the dtype of the forward and backward pass.
        grad_accum: K, the micro-batches the batch is split into; the batch's rows must be a
            multiple of K.

    Returns:
        The step `(model, opt_state, batch, key) -> (model, opt_state, metrics)`. The metrics hold
        the loss, the gradients' global norm, the learning rate (of a Frost optimizer), the loss
        function's metrics, and `finite`, a bool scalar: False when the step was not applied
        (the old model and state are returned).
    """
    if hessian is not None and hessian not in HESSIAN:
        raise ValueError(f"hessian={hessian!r}: choose one of {', '.join(HESSIAN)}")
    if grad_accum < 1:
        raise ValueError(f"grad_accum={grad_accum}: must be at least 1")
    policy = mixed.policy(precision)

    # the loss (times `scale`) in the compute dtype, returned in float32
    def objective(model, batch, key, scale=1.0):
        loss, (stats_model, metrics) = loss_fn(
            policy.cast_to_compute(model), policy.cast_to_compute(batch), key
        )
        return policy.cast_to_output(loss) * scale, (policy.cast_to_param(stats_model), metrics)

    gradient = jax.value_and_grad(objective, has_aux=True)

    def accumulated(model, micro_batches, key, scale):
        """`gradient` over the (K, B, ...) micro-batches: the mean of their losses, metrics and
        gradients, with the BatchNorm statistics of the last."""
        keys = jax.random.split(key, grad_accum)

        def body(carry, xs):
            stats_model, sums = carry
            micro_batch, micro_key = xs
            current = nn.update_buffers(model, stats_model)
            (loss, (stats_model, metrics)), grads = gradient(current, micro_batch, micro_key, scale)
            # the carry keeps the model's dtypes (the objective returns float32 statistics)
            stats_model = jax.tree.map(lambda new, old: new.astype(old.dtype), stats_model, model)
            sums = jax.tree.map(jnp.add, sums, (loss, metrics, grads))
            return (stats_model, sums), None

        first = jax.tree.map(lambda a: a[0], micro_batches)
        (loss, (_, metrics)), grads = jax.eval_shape(gradient, model, first, keys[0], scale)
        zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), (loss, metrics, grads))
        (stats_model, sums), _ = jax.lax.scan(body, (model, zeros), (micro_batches, keys))
        loss, metrics, grads = jax.tree.map(lambda total: total / grad_accum, sums)
        return (loss, (stats_model, metrics)), grads

    def step(model, opt_state, batch, key):
        batch = prepare(batch)
        scaled = find_states(opt_state, ScaledState)
        if precision == "fp16" and not scaled:
            raise ValueError(
                "precision='fp16' needs the optimizer in frost.optim.scaling.dynamic_scaling"
            )
        # fp16: the gradient is of loss * scale
        scale = scaled[0].scale.scale if scaled else jnp.float32(1)
        if grad_accum == 1:
            (loss, (stats_model, metrics)), grads = gradient(model, batch, key, scale)
            hessian_batch = batch
        else:
            micro_batches = jax.tree.map(lambda a: _micro_batches(a, grad_accum), batch)
            (loss, (stats_model, metrics)), grads = accumulated(model, micro_batches, key, scale)
            hessian_batch = jax.tree.map(lambda a: a[0], micro_batches)
        loss = loss / scale

        def estimate():
            return HESSIAN[hessian](objective, model, hessian_batch, key)

        # Sophia: refresh the Hessian estimate first
        new_opt_state = opt_state if hessian is None else update_hessian(opt_state, estimate)
        # value=: the loss, for an optimizer whose update takes extra arguments (optax.polyak_sgd)
        updates, new_opt_state = call_update(optimizer, grads, new_opt_state, model, value=loss)
        new_model = nn.update_buffers(apply_updates(model, updates), stats_model)
        finite = jnp.isfinite(loss) & all_finite(new_model) & all_finite(new_opt_state)
        # dynamic_scaling handles overflowing grads
        finite = finite if scaled else finite & all_finite(grads)
        metrics = dict(metrics, loss=loss, finite=finite, grad_norm=global_norm(grads) / scale)
        if scaled:
            metrics["overflow_skipped"] = find_states(new_opt_state, ScaledState)[0].scale.skipped
        metrics.update(_learning_rate(new_opt_state))
        return where(finite, new_model, model), where(finite, new_opt_state, opt_state), metrics

    return step


def _micro_batches(a: jax.Array, k: int) -> jax.Array:
    """(K * B, ...) -> (K, B, ...): micro-batch i holds rows i, K + i, 2K + i, ... (a split of each
    device's rows when the batch is sharded over its first axis)."""
    if a.shape[0] % k:
        raise ValueError(f"grad_accum={k}: the batch's {a.shape[0]} rows are not a multiple of it")
    return jnp.swapaxes(a.reshape(a.shape[0] // k, k, *a.shape[1:]), 0, 1)


def _learning_rate(opt_state) -> dict:
    """{"learning_rate": the step's value} for a Frost optimizer's state (the first, with Muon's
    two)."""
    try:
        rates = [v for k, v in get_hyperparams(opt_state).items() if k.endswith("learning_rate")]
    except ValueError:  # a foreign state whose fields clash
        rates = []
    return {"learning_rate": rates[0]} if rates else {}


def make_train_step(
    optimizer: GradientTransformation,
    loss_fn: LossFn = classification_loss,
    prepare: Callable[[PyTree], PyTree] = lambda batch: batch,
    hessian: str | None = None,
    precision: str = "fp32",
    grad_accum: int = 1,
    *,
    shardings: tuple[PyTree, PyTree, jax.sharding.NamedSharding] | None = None,
) -> Step:
    """`train_step` jitted, its model and optimizer state donated; on a mesh, with the layout of
    its inputs and outputs pinned.

    The step itself is the same function on one device or many: only `shardings` changes, and XLA
    inserts the collectives (see frost.parallel).

    ```python
    step = make_train_step(frost.optim.adamw(1e-3))
    model, opt_state, metrics = step(model, opt_state, batch, jax.random.key(0))
    ```

    Arguments:
        optimizer: the optimizer (a `GradientTransformation`, Frost's or optax's).
        loss_fn: `(model, batch, key) -> (loss, (stats_model, metrics))`: a float32 scalar loss,
            the model with its new BatchNorm statistics, and a dict of scalar metrics.
        prepare: maps the loader's batch to the loss function's, inside the jitted step (e.g.
            uint8 images to normalised floats).
        hessian: Sophia's Hessian-diagonal estimator, "gnb" or "hutchinson" (losses.HESSIAN);
            None for every other optimizer.
        precision: "fp32", "bf16" or "fp16" (frost.nn.precision), the dtype of the forward and
            backward pass; fp16 needs the optimizer in `frost.optim.scaling.dynamic_scaling`.
        grad_accum: K, the micro-batches each batch is split into, their gradients averaged
            (see `train_step`); the batch's rows must be a multiple of K.
        shardings: keyword only; `(model, opt_state, batch)`: the model's and the optimizer
            state's trees of `NamedSharding`s (e.g. from `frost.parallel.fsdp`) and the batch's
            `NamedSharding` (`frost.parallel.batch_sharding`). None: one device, no layout pinned.

    Returns:
        The jitted step `(model, opt_state, batch, key) -> (model, opt_state, metrics)` (see
        `train_step`). The model and optimizer state passed in are donated: use the returned ones.
    """
    step = train_step(optimizer, loss_fn, prepare, hessian, precision, grad_accum)
    if shardings is None:
        return jax.jit(step, donate_argnums=(0, 1))
    model_sh, opt_sh, batch_sh = shardings
    whole = jax.sharding.NamedSharding(batch_sh.mesh, jax.sharding.PartitionSpec())
    ins = (model_sh, opt_sh, batch_sh, whole)  # (model, opt_state, batch, key)
    outs = (model_sh, opt_sh, whole)  # (model, opt_state, metrics)
    return jax.jit(step, donate_argnums=(0, 1), in_shardings=ins, out_shardings=outs)


def make_eval_step(
    prepare: Callable[[PyTree], PyTree] = lambda batch: batch,
) -> Callable[[PyTree, PyTree, jax.Array], dict]:
    """The jitted evaluation step: a batch's loss and accuracy sums, the model in evaluation mode.

    Arguments:
        prepare: maps the loader's batch to the model's `(inputs, labels)`, inside the jitted step.

    Returns:
        A jitted `(model, batch, valid) -> {"loss_sum", "correct", "count"}` (scalars, summed over
        the positions of the rows that `valid`, an (N,) bool array, marks; losses.eval_sums).
    """
    return jax.jit(lambda model, batch, valid: eval_sums(model, prepare(batch), valid))


def evaluate(
    model: PyTree,
    batches: Iterable[PyTree],
    eval_step: Callable[[PyTree, PyTree, jax.Array], dict],
    rows: int,
    place: Callable[[PyTree], PyTree] = lambda batch: batch,
) -> dict:
    """Mean loss and accuracy over `batches` (a loader's, every sample once: drop_last=False).

    Each batch is padded to `rows` rows (this process's share of a full batch) and the padding
    masked out, so the last, short batch divides over any mesh and any number of processes, and
    every device count gives the single-device numbers.

    Arguments:
        model: the model `eval_step` evaluates (usually a `frost.nn.Module` giving logits).
        batches: host batches, each a tree of numpy arrays of at most `rows` rows
            (`(inputs, labels)` for `make_eval_step`'s step), e.g. a `frost.data.Loader`.
        eval_step: `(model, batch, valid) -> {"loss_sum", "correct", "count"}`, from
            `make_eval_step`.
        rows: the rows each batch is padded to: this process's share of a full batch.
        place: puts a padded `(batch, valid)` pair on the devices (e.g.
            `frost.parallel.global_batch`); by default they stay on the host.

    Returns:
        `{"loss": the mean loss, "accuracy": the fraction correct}`, floats over every real row.
    """
    totals = {"loss_sum": 0.0, "correct": 0, "count": 0}
    for batch in batches:
        n = len(jax.tree.leaves(batch)[0])
        padded = jax.tree.map(
            lambda a, n=n: np.concatenate([a, np.zeros((rows - n, *a.shape[1:]), a.dtype)]), batch
        )  # (rows, ...)
        batch, valid = place((padded, np.arange(rows) < n))
        for k, v in eval_step(model, batch, valid).items():
            totals[k] += float(v)
    n = max(totals["count"], 1)
    return {"loss": totals["loss_sum"] / n, "accuracy": totals["correct"] / n}


def distribute(
    state: TrainState, mesh: str | None, strategy: str, batch_size: int
) -> tuple[TrainState, tuple | None, Callable[[PyTree], PyTree]]:
    """Lay the model and optimizer state out on a mesh (see frost.parallel). With no mesh, one
    process keeps the state as it is and batches go to the default device, and many processes
    train data parallel over every device (never one model each).

    Arguments:
        state: the state to lay out.
        mesh: the mesh's axis sizes, "data=8" or "data=4,model=2"; None or "" for none.
        strategy: "dp", "fsdp" or "tp", a key of frost.parallel.STRATEGIES.
        batch_size: the global batch size, checked to divide over the data axis.

    Returns:
        `(state, shardings, place)`: the state on the mesh, the shardings for
        `make_train_step(shardings=...)` (None without a mesh), and the batch placement for `fit`.
    """
    if not mesh and jax.process_count() == 1:
        return state, None, lambda batch: batch
    mesh = mesh or f"data={jax.device_count()}"
    tree, sh, batch_sh = parallel.distribute(
        {"model": state.model, "opt_state": state.opt_state}, mesh, strategy, batch_size
    )
    state = dataclasses.replace(state, **tree)
    shardings = (sh["model"], sh["opt_state"], batch_sh)
    return state, shardings, lambda batch: parallel.global_batch(batch, batch_sh)


def restore(run_dir: str | pathlib.Path, state: TrainState) -> TrainState:
    """`state` replaced by the latest checkpoint in `run_dir/checkpoints` (unchanged if none).

    Arguments:
        run_dir: the run directory.
        state: the template: a fresh state of the same model and optimizer, laid out as the run
            wants it (each array is read into its sharding, each process reading only its shards).

    Returns:
        The checkpoint's model, optimizer state, key, step, loader position and skip count; `state`
        itself when there is no checkpoint.
    """
    path = checkpoint.latest(pathlib.Path(run_dir) / "checkpoints")
    if path is None:
        return state
    tree, meta = checkpoint.load(path, state.tree())  # model, opt_state, key
    return TrainState(
        **tree, step=meta["step"], loader_state=meta.get("loader"), skipped=meta.get("skipped", 0)
    )


def save(
    run_dir: str | pathlib.Path, state: TrainState, keep: int = 3, **meta: Any
) -> pathlib.Path:
    """Checkpoint `state`: every process calls it and writes the shards it holds (no gather).

    Arguments:
        run_dir: the run directory; the checkpoint goes in `run_dir/checkpoints`.
        state: what to save: its `tree()`, and its step, loader position and skip count in the
            manifest.
        keep: how many checkpoints to keep (the newest).
        **meta: more JSON values for the manifest (e.g. `config=...`).

    Returns:
        The checkpoint's folder, `run_dir/checkpoints/step_<step, 8 digits>`.
    """
    meta = dict(meta, step=state.step, loader=state.loader_state, skipped=state.skipped)
    directory = pathlib.Path(run_dir) / "checkpoints"
    return checkpoint.save(directory, state.step, state.tree(), meta, keep)


class _Policy:
    """The non-finite policy, applied to each step's `finite` flag in stream order."""

    def __init__(self, mode: str, max_skips: int, run_dir: pathlib.Path):
        if mode not in ("stop", "skip"):
            raise ValueError(f"on_nonfinite={mode!r}: choose 'stop' or 'skip'")
        self.mode = mode
        self.max_skips = max_skips
        self.run_dir = run_dir
        self.in_a_row = 0  # non-finite steps in a row

    def __call__(self, pending, state: TrainState) -> TrainState:
        """`pending`: the metrics of step `state.step`, dispatched; returns `state` with its skip
        count."""
        if pending is None or bool(pending["finite"]):
            self.in_a_row = 0
            return state
        self.in_a_row += 1
        if self.mode == "skip" and self.in_a_row < self.max_skips:
            return dataclasses.replace(state, skipped=state.skipped + 1)
        last = checkpoint.latest(self.run_dir / "checkpoints")
        why = (
            f"{self.in_a_row} steps in a row were non-finite and skipped (--max-skips "
            f"{self.max_skips})"
            if self.mode == "skip"
            else "training stopped before applying it"
        )
        raise NonFiniteError(
            f"step {state.step}: non-finite loss, gradients or update (loss="
            f"{float(pending['loss'])}); {why}. The last checkpoint, {last or 'none yet'}, "
            "holds finite parameters and optimizer state. Lower --lr, or try --on-nonfinite skip"
        )


@dataclasses.dataclass(frozen=True)
class FitConfig:
    """How `fit` runs.

    Arguments:
        epochs: train until the loader reaches this epoch.
        run_dir: checkpoints/ (the newest 3 kept, as `save` keeps) and metrics.jsonl go here.
        max_steps: stop after this many steps (the optimizer's schedule is the caller's: a job
            makes it end here).
        eval_every: evaluate (after a checkpoint) every this many steps and at the last step;
            None: at the end of each epoch, as the checkpoints.
        log_every: steps between metrics records.
        unit: what `count(batch)` counts, for the throughput (`images_per_s`).
        eval_name: the prefix of `eval_fn`'s keys in the records (`test_accuracy`).
        on_nonfinite: the non-finite policy: "stop", or "skip" (up to `max_skips` in a row).
        max_skips: with "skip", stop at this many non-finite steps in a row.
        tensorboard: also write the records as TensorBoard scalars in run_dir/tensorboard.
        progress: show a progress bar and a line for each evaluation.
        meta: extra JSON kept in every checkpoint's manifest (e.g. the job's config).
        flops_per_unit: the model FLOPs of training on one unit (a token: 6N plus attention,
            `frost.models.GPT.flops_per_token`), added to each evaluation's record with the
            throughput; None: not known.
        peak_flops: the devices' peak FLOP/s together (`metrics.peak_flops` times the device
            count), for the model FLOPs utilisation (MFU) of each evaluation; None: not known.
    """

    epochs: int
    run_dir: str | pathlib.Path
    max_steps: int | None = None
    eval_every: int | None = None
    log_every: int = 20
    unit: str = "images"
    eval_name: str = "test"
    on_nonfinite: str = "stop"
    max_skips: int = 10
    tensorboard: bool = False
    progress: bool = True
    meta: dict | None = None
    flops_per_unit: float | None = None
    peak_flops: float | None = None


class _Clock:
    """Training throughput: units trained per second of training steps, from the end of the first
    step (its compilation) on; evaluations and checkpoints (between `pause` and `resume`) are not
    counted. A run of one step counts that step, compilation and all."""

    def __init__(self):
        self.units = 0
        self.seconds = 0.0  # of training, up to `started`
        self.started = time.perf_counter()  # None while paused
        self.first = None  # (units, seconds) of the first step

    def add(self, units: int, metrics: dict) -> None:
        """Count a dispatched step of `units`; the first waits for its `metrics`."""
        if self.first is None:
            jax.block_until_ready(metrics)
            self.first = (units, time.perf_counter() - self.started)
            self.started = time.perf_counter()
        else:
            self.units += units

    def pause(self) -> None:
        self.seconds += time.perf_counter() - self.started
        self.started = None

    def resume(self) -> None:
        self.started = time.perf_counter()

    def rate(self) -> float:
        """Units per second so far (the steps dispatched may still be running)."""
        seconds = self.seconds
        if self.started is not None:
            seconds += time.perf_counter() - self.started
        if self.units == 0:  # one step so far: count it
            units, seconds = self.first or (0, 0.0)
        else:
            units = self.units
        return units / seconds if seconds > 0 else 0.0


def fit(
    state: TrainState,
    train_step: Step,
    loader: Loader,
    config: FitConfig,
    eval_fn: Callable[[PyTree], dict] | None = None,
    count: Callable[[PyTree], int] = lambda batch: len(jax.tree.leaves(batch)[0]),
    place: Callable[[PyTree], PyTree] = lambda batch: batch,
) -> TrainState:
    """Train until `loader.epoch == config.epochs` or `config.max_steps`, checkpointing and
    evaluating every `config.eval_every` steps and at the last (or after every epoch).

    Metrics go to `run_dir/metrics.jsonl` (records past `state.step` from an earlier attempt are
    dropped first), with the throughput in `config.unit`s per second. Each evaluation is written
    after its checkpoint, so a run killed between the two evaluates first when it resumes.

    Arguments:
        state: where training starts: a fresh state, or one from `restore`.
        train_step: the jitted step `(model, opt_state, batch, key) -> (model, opt_state,
            metrics)` (`make_train_step`); its metrics hold a scalar "loss" and a bool "finite".
        loader: a `frost.data.Loader`, positioned already (built with
            `state=state.loader_state`).
        config: how to run: length, evaluations, run directory, logging, the non-finite policy.
        eval_fn: `eval_fn(model) -> dict` of numbers, run after each evaluation's checkpoint is
            written and logged as `{config.eval_name}_{key}` with the throughput; None: no
            evaluation.
        count: the number of `config.unit`s in a loader batch (its rows by default).
        place: puts a loader batch on the devices (e.g. `frost.parallel.global_batch`).

    Returns:
        The state after the last step, its `last_eval` the latest evaluation (with the
        throughput).

    Raises:
        NonFiniteError: a non-finite step that the policy does not skip.
        ValueError: the loader yields no batches.
    """
    if len(loader) == 0:
        raise ValueError(
            "fit: the loader yields no batches (fewer samples than one batch, with drop_last)"
        )
    run_dir = pathlib.Path(config.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    last = config.epochs * len(loader)  # the run's last step
    if config.max_steps is not None:
        last = min(last, config.max_steps)

    def evaluates(step: int, epoch_ended: bool) -> bool:
        """Whether `step` is followed by an evaluation."""
        if config.eval_every is None:
            return epoch_ended
        return step % config.eval_every == 0 or step == last

    policy = _Policy(config.on_nonfinite, config.max_skips, run_dir)
    clock = _Clock()
    with (
        metrics_log.Log(run_dir, state.step, config.tensorboard, jax.process_index() == 0) as log,
        tqdm(
            total=last,
            initial=min(state.step, last),
            disable=not config.progress,
            dynamic_ncols=True,
        ) as bar,  # closed before an error shows
    ):

        def checkpoint(state: TrainState, evaluate: bool) -> TrainState:
            """Save `state`, then evaluate it: the checkpoint first, so nothing after it (an
            evaluation) can lose the steps before it. Neither counts as training time."""
            clock.pause()
            save(run_dir, state, **(config.meta or {}))
            if evaluate and eval_fn is not None:
                state = _evaluate(state, len(loader), eval_fn, config, log, clock)
            clock.resume()
            return state

        # killed after its checkpoint, before its evaluation?
        if eval_fn is not None and state.step and evaluates(state.step, loader.batch == 0):
            path = run_dir / "metrics.jsonl"
            if not parallel.on_first(
                lambda: metrics_log.logged(path, state.step, config.eval_name)
            ):
                state = _evaluate(state, len(loader), eval_fn, config, log, clock)
        while loader.epoch < config.epochs and state.step < last:
            epoch = loader.epoch
            bar.set_description(f"epoch {epoch + 1}/{-(-last // len(loader))}")
            pending = None  # the metrics of the step dispatched last, its flag not read yet
            for batch in loader:
                model, opt_state, metrics = train_step(
                    state.model, state.opt_state, place(batch), _fold_in(state.key, state.step)
                )
                state = policy(pending, state)  # the previous step's flag, while this one runs
                pending = metrics
                state = dataclasses.replace(
                    state,
                    model=model,
                    opt_state=opt_state,
                    step=state.step + 1,
                    loader_state=loader.state(),
                )
                clock.add(count(batch), metrics)
                bar.update(1)
                # waits for this step anyway
                if state.step % config.log_every == 0 and bool(metrics["finite"]):
                    state = policy(pending, state)
                    pending = None
                    _log_step(state, epoch, metrics, clock.rate(), config, log, bar)
                if config.eval_every is not None and evaluates(state.step, False):
                    state = policy(pending, state)  # only finite states are saved
                    pending = None
                    state = checkpoint(state, evaluate=True)
                if state.step >= last:
                    break
            state = policy(pending, state)
            if config.eval_every is None:
                state = checkpoint(state, evaluate=loader.epoch > epoch)
    return state


def _log_step(state, epoch, metrics, rate, config, log, bar) -> None:
    """Write a step's metrics record, and show its loss on the bar."""
    others = {k: v for k, v in metrics.items() if k not in ("loss", "finite")}
    record = {
        "step": state.step,
        "epoch": epoch,
        "loss": float(metrics["loss"]),
        f"{config.unit}_per_s": rate,
        **{k: float(v) for k, v in others.items()},
    }
    if state.skipped:
        record["skipped"] = state.skipped
    log.write(record)
    bar.set_postfix(loss=f"{record['loss']:.4f}", per_s=f"{rate:.0f}")


def _evaluate(
    state: TrainState,
    per_epoch: int,
    eval_fn,
    config: FitConfig,
    log: metrics_log.Log,
    clock: _Clock,
) -> TrainState:
    """`eval_fn` on the model at `state.step`, logged with the training throughput so far (when
    this fit has trained), printed, and kept in `state.last_eval` and `state.speed`."""
    result = eval_fn(state.model)
    text = ", ".join(f"{config.eval_name} {k} {v:.4f}" for k, v in result.items())
    speed = None
    if clock.first is not None:
        speed = _speed(clock.rate(), config)
        text += f"; {speed[f'{config.unit}_per_s']:,.0f} {config.unit}/s"
        flops = speed.get(f"flops_per_{_singular(config.unit)}")
        if flops is not None:
            text += f", {flops / 1e6:,.1f} MFLOPs a {_singular(config.unit)}"
        if "mfu" in speed:
            text += f", MFU {100 * speed['mfu']:.1f}%"
    record = {f"{config.eval_name}_{k}": v for k, v in result.items()}
    epoch = (state.step - 1) // per_epoch  # the epoch of the step's batch
    log.write({"step": state.step, "epoch": epoch, **record, **(speed or {})})
    if config.progress:
        tqdm.write(f"step {state.step} (epoch {state.step / per_epoch:.3g}): {text}")
    return dataclasses.replace(state, last_eval=result, speed=speed)


def _singular(unit: str) -> str:
    return unit.removesuffix("s")  # tokens -> token


def _speed(rate: float, config: FitConfig) -> dict:
    """The training throughput under the names of metrics.jsonl and result.json: `{unit}_per_s`;
    with `config.flops_per_unit`, `flops_per_{unit}` (flops_per_token); with `config.peak_flops`
    too, `mfu`, the model FLOPs utilisation (achieved model FLOP/s over the peak)."""
    speed = {f"{config.unit}_per_s": rate}
    if config.flops_per_unit is not None:
        speed[f"flops_per_{_singular(config.unit)}"] = config.flops_per_unit
        if config.peak_flops:
            speed["mfu"] = rate * config.flops_per_unit / config.peak_flops
    return speed
