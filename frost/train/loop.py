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

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from frost import checkpoint, nn, parallel
from frost.config import FrostError
from frost.nn import precision as mixed
from frost.optim import (
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
from frost.tree import where

_fold_in = jax.jit(jax.random.fold_in)  # the step's key; jitted: 8 us a call, 64 us eagerly


class NonFiniteError(FrostError, FloatingPointError):
    """Training met a non-finite step; the message names it and the last (finite) checkpoint."""


@dataclasses.dataclass
class TrainState:
    model: object
    opt_state: object
    key: jax.Array
    step: int = 0
    loader_state: dict | None = None
    last_eval: dict | None = None  # the latest `eval_fn` result (not checkpointed)
    skipped: int = 0  # non-finite steps skipped (on_nonfinite="skip")

    def tree(self):
        return {"model": self.model, "opt_state": self.opt_state, "key": self.key}


def train_step(
    optimizer,
    loss_fn=classification_loss,
    prepare=lambda batch: batch,
    hessian: str | None = None,
    precision: str = "fp32",
):
    """The pure step `(model, opt_state, batch, key) -> (model, opt_state, metrics)`, unjitted (so
    it can be vmapped, e.g. over a grid of hyper-parameters held in stacked optimizer states);
    `prepare` maps the loader's batch to the loss function's (e.g. uint8 images to floats).

    `precision` ("fp32", "bf16", "fp16"; frost.nn.precision) runs the forward and backward pass
    in that dtype with float32 parameters, moments and loss. fp16 needs the optimizer wrapped in
    `frost.optim.scaling.dynamic_scaling`: the loss is multiplied by its scale here, and it skips
    the updates whose gradients overflow (counted in metrics["overflow_skipped"], not as
    non-finite)."""
    if hessian is not None and hessian not in HESSIAN:
        raise ValueError(f"hessian={hessian!r}: choose one of {', '.join(HESSIAN)}")
    policy = mixed.policy(precision)

    # the loss (times `scale`) in the compute dtype, returned in float32
    def objective(model, batch, key, scale=1.0):
        loss, (stats_model, metrics) = loss_fn(
            policy.cast_to_compute(model), policy.cast_to_compute(batch), key
        )
        return policy.cast_to_output(loss) * scale, (policy.cast_to_param(stats_model), metrics)

    def step(model, opt_state, batch, key):
        batch = prepare(batch)
        scaled = find_states(opt_state, ScaledState)
        if precision == "fp16" and not scaled:
            raise ValueError(
                "precision='fp16' needs the optimizer in frost.optim.scaling.dynamic_scaling"
            )
        # fp16: the gradient is of loss * scale
        scale = scaled[0].scale.scale if scaled else jnp.float32(1)
        gradient = jax.value_and_grad(objective, has_aux=True)
        (loss, (stats_model, metrics)), grads = gradient(model, batch, key, scale)
        loss = loss / scale

        def estimate():
            return HESSIAN[hessian](objective, model, batch, key)

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


def _learning_rate(opt_state) -> dict:
    """{"learning_rate": the step's value} for a Frost optimizer's state (the first, with Muon's
    two)."""
    try:
        rates = [v for k, v in get_hyperparams(opt_state).items() if k.endswith("learning_rate")]
    except ValueError:  # a foreign state whose fields clash
        rates = []
    return {"learning_rate": rates[0]} if rates else {}


def make_train_step(optimizer, *args, shardings=None, **kwargs):
    """`train_step(optimizer, *args, **kwargs)` (loss_fn, prepare, hessian, precision) jitted, its
    model and optimizer state donated. `shardings=(model, opt_state, batch)` (keyword only; see
    frost.parallel) pins the layout of inputs and outputs on a mesh; the step itself is the same
    function on one device or many."""
    step = train_step(optimizer, *args, **kwargs)
    if shardings is None:
        return jax.jit(step, donate_argnums=(0, 1))
    model_sh, opt_sh, batch_sh = shardings
    whole = jax.sharding.NamedSharding(batch_sh.mesh, jax.sharding.PartitionSpec())
    ins = (model_sh, opt_sh, batch_sh, whole)  # (model, opt_state, batch, key)
    outs = (model_sh, opt_sh, whole)  # (model, opt_state, metrics)
    return jax.jit(step, donate_argnums=(0, 1), in_shardings=ins, out_shardings=outs)


def make_eval_step(prepare=lambda batch: batch):
    """A jitted `(model, batch, valid) -> {loss_sum, correct, count}` in evaluation mode, over
    the rows `valid` (N,) marks."""
    return jax.jit(lambda model, batch, valid: eval_sums(model, prepare(batch), valid))


def evaluate(model, batches, eval_step, rows: int, place=lambda batch: batch) -> dict:
    """Mean loss and accuracy over `batches` (a loader's, every sample once: drop_last=False).

    Each batch is padded to `rows` rows (this process's share of a full batch) and the padding
    masked out, so the last, short batch divides over any mesh and any number of processes, and
    every device count gives the single-device numbers. `place` puts a batch on the devices."""
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


def distribute(state: TrainState, mesh: str | None, strategy: str, batch_size: int):
    """Lay the model and optimizer state out on a mesh ("data=8", "data=4,model=2"; see
    frost.parallel). Returns (state, shardings for make_train_step, place for fit); with no mesh,
    one process keeps the state as it is and batches go to the default device, and many processes
    train data parallel over every device (never one model each)."""
    if not mesh and jax.process_count() == 1:
        return state, None, lambda batch: batch
    mesh = mesh or f"data={jax.device_count()}"
    tree, sh, batch_sh = parallel.distribute(
        {"model": state.model, "opt_state": state.opt_state}, mesh, strategy, batch_size
    )
    state = dataclasses.replace(state, **tree)
    shardings = (sh["model"], sh["opt_state"], batch_sh)
    return state, shardings, lambda batch: parallel.global_batch(batch, batch_sh)


def restore(run_dir, state: TrainState) -> TrainState:
    """`state` replaced by the latest checkpoint in `run_dir/checkpoints` (unchanged if none)."""
    path = checkpoint.latest(pathlib.Path(run_dir) / "checkpoints")
    if path is None:
        return state
    tree, meta = checkpoint.load(path, state.tree())  # model, opt_state, key
    return TrainState(
        **tree, step=meta["step"], loader_state=meta.get("loader"), skipped=meta.get("skipped", 0)
    )


def save(run_dir, state: TrainState, keep: int = 3, **meta) -> pathlib.Path:
    """Checkpoint `state`: every process calls it and writes the shards it holds (no gather)."""
    meta = dict(meta, step=state.step, loader=state.loader_state, skipped=state.skipped)
    directory = pathlib.Path(run_dir) / "checkpoints"
    return checkpoint.save(directory, state.step, state.tree(), meta, keep)


class _Policy:
    """The non-finite policy, applied to each step's `finite` flag in stream order."""

    def __init__(self, mode: str, max_skips: int, run_dir: pathlib.Path):
        if mode not in ("stop", "skip"):
            raise ValueError(f"on_nonfinite={mode!r}: choose 'stop' or 'skip'")
        self.mode, self.max_skips, self.run_dir, self.in_a_row = mode, max_skips, run_dir, 0

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
        max_steps: stop after this many steps (the schedule is unchanged).
        log_every: steps between metrics records.
        unit: what `count(batch)` counts, for the throughput (`images_per_s`).
        eval_name: the prefix of `eval_fn`'s keys in the records (`test_accuracy`).
        on_nonfinite, max_skips: the non-finite policy ("stop", or "skip" up to max_skips in a row).
        tensorboard: also write the records as TensorBoard scalars in run_dir/tensorboard.
        progress: show progress bars and per-epoch lines.
        meta: extra JSON kept in every checkpoint's manifest (e.g. the job's config).
    """

    epochs: int
    run_dir: str | pathlib.Path
    max_steps: int | None = None
    log_every: int = 20
    unit: str = "images"
    eval_name: str = "test"
    on_nonfinite: str = "stop"
    max_skips: int = 10
    tensorboard: bool = False
    progress: bool = True
    meta: dict | None = None


def fit(
    state: TrainState,
    train_step,
    loader,
    config: FitConfig,
    eval_fn=None,
    count=lambda batch: len(jax.tree.leaves(batch)[0]),
    place=lambda batch: batch,
) -> TrainState:
    """Train until `loader.epoch == config.epochs` (or `config.max_steps`), checkpointing after
    every epoch.

    `loader` is positioned already (a `frost.data.Loader` built with `state=state.loader_state`).
    `eval_fn(model) -> dict` runs after each epoch's checkpoint is written, logged as
    `{eval_name}_{key}`. Metrics go to `run_dir/metrics.jsonl` (records past `state.step` from an
    earlier attempt are dropped first), with the throughput in `unit`s per second (`count(batch)`
    of them per batch: rows by default). `place(batch)` puts a loader batch on the devices (e.g.
    frost.parallel.global_batch).
    """
    c = config
    if len(loader) == 0:
        raise ValueError(
            "fit: the loader yields no batches (fewer samples than one batch, with drop_last)"
        )
    run_dir = pathlib.Path(c.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    with metrics_log.Log(run_dir, state.step, c.tensorboard, jax.process_index() == 0) as log:
        if eval_fn is not None and state.step and loader.batch == 0:  # resumed at an epoch's end
            path = run_dir / "metrics.jsonl"  # killed after its checkpoint, before its evaluation?
            if not parallel.on_first(lambda: metrics_log.logged(path, state.step, c.eval_name)):
                state = _evaluate(state, loader.epoch - 1, eval_fn, c, log)
        while loader.epoch < c.epochs and (c.max_steps is None or state.step < c.max_steps):
            epoch, policy = loader.epoch, _Policy(c.on_nonfinite, c.max_skips, run_dir)
            seen, t0, pending = 0, time.perf_counter(), None
            with tqdm(
                total=len(loader),
                initial=loader.batch,
                desc=f"epoch {epoch + 1}/{c.epochs}",
                disable=not c.progress,
                dynamic_ncols=True,
            ) as bar:  # closed before an error shows
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
                    seen += count(batch)
                    bar.update(1)
                    # waits for this step anyway
                    if state.step % c.log_every == 0 and bool(metrics["finite"]):
                        state, pending = policy(pending, state), None
                        rate = seen / (time.perf_counter() - t0)
                        others = {k: v for k, v in metrics.items() if k not in ("loss", "finite")}
                        record = {
                            "step": state.step,
                            "epoch": epoch,
                            "loss": float(metrics["loss"]),
                            f"{c.unit}_per_s": rate,
                            **{k: float(v) for k, v in others.items()},
                        }
                        if state.skipped:
                            record["skipped"] = state.skipped
                        log.write(record)
                        bar.set_postfix(loss=f"{record['loss']:.4f}", per_s=f"{rate:.0f}")
                    if c.max_steps is not None and state.step >= c.max_steps:
                        break
                state = policy(pending, state)
            # the checkpoint first: nothing after it (an evaluation) can lose the epoch
            save(run_dir, state, **(c.meta or {}))
            if loader.epoch > epoch and eval_fn is not None:
                state = _evaluate(state, epoch, eval_fn, c, log)
    return state


def _evaluate(state: TrainState, epoch: int, eval_fn, c: FitConfig, log) -> TrainState:
    """`eval_fn` on the model after `epoch`, logged and printed, and kept in `state.last_eval`."""
    result = eval_fn(state.model)
    named = {f"{c.eval_name}_{k}": v for k, v in result.items()}
    log.write({"step": state.step, "epoch": epoch, **named})
    if c.progress:
        text = ", ".join(f"{c.eval_name} {k} {v:.4f}" for k, v in result.items())
        print(f"epoch {epoch + 1}: {text}", flush=True)
    return dataclasses.replace(state, last_eval=result)
