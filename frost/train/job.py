"""One job mechanism behind every `frost train ...`: a job says what its data and model are;
`run` does the rest the same way for all of them.

    result = run(ImageJob(), ImageConfig(model="resnet20", epochs=5))

The path: claim the run directory (refuse one holding another run; on --resume, refuse a
different configuration), data (refuse data too small for one batch), the plan (the run's length
and its evaluations, `plan`), model, optimizer by name from frost.optim.registry over the job's
schedule spanning the run (Sophia's Hessian refresh wired into the step), restore, distribute,
fit (a checkpoint and an evaluation every --eval-every steps and at the end), `result.json`.

One rule sets every job's length and evaluations: --max-steps, --tokens (a GPT) or --epochs; an
evaluation every epoch for a run of 2 epochs or more, else 5 a run; each on the same fixed subset
of the evaluation data (the first batches of one shuffle with a fixed seed), or all of it.

A job is a `Job` subclass taking its config (frost.train.configs): `data(cfg, run_dir, progress)
-> Data`, `model(cfg, data, key)` and `schedule(cfg, steps)` (the learning rate, peaking at
cfg.peak_lr, over a run of `steps` steps), and where the defaults below do not fit, the other
attributes and methods.
"""

import contextlib
import dataclasses
import itertools
import json
import pathlib
import shutil
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax

from frost import atomic, checkpoint, optim, parallel
from frost import data as fdata
from frost.config import UsageError, flag
from frost.optim.registry import build, frost_own, resolve
from frost.train import loop, metrics

# Options that may change when a run is resumed: they steer the run, not its numbers. The run's
# length is not one of them: the learning-rate schedule ends where the run does.
RESUMABLE = {"workers", "eval_every", "on_nonfinite", "max_skips", "out", "log", "resume"}
EVALUATIONS = 5  # a run shorter than 2 epochs evaluates this many times by default
EVAL_SEED = 0  # the shuffle that picks the evaluation subset: the same for every run and seed


class Data(NamedTuple):
    train: Any  # a source of (x, y) samples
    eval: Any  # the same, or None
    describe: str  # for the start-up line
    augment: Callable | None = None  # per-sample transform in the loader (training only)
    eval_transform: Callable | None = None
    prepare: Callable = lambda batch: batch  # on the device, inside the jitted step
    extra: dict = {}
    per_row: int = 1  # units (the job's `unit`) per batch row: 1 image, or seq_len tokens


class Plan(NamedTuple):
    """A run's length and evaluations, in steps and batches (`plan`).

    Arguments:
        steps: the run's length.
        per_epoch: the steps of one pass over the training data.
        step_rows: the rows (examples, windows) of one step: --batch-size x --grad-accum.
        per_row: the units (images, tokens) of one row.
        eval_every: the steps between evaluations (and the last step).
        eval_rows: the rows of one evaluation batch.
        eval_batches: the batches of each evaluation, a fixed subset; None: every batch.
        eval_total: the batches of a full pass over the evaluation data.
    """

    steps: int
    per_epoch: int
    step_rows: int
    per_row: int
    eval_every: int
    eval_rows: int
    eval_batches: int | None
    eval_total: int

    def describe(self, unit: str) -> str:
        """The run's length in steps, units and epochs, and its evaluations, for the start-up
        line."""
        per_step = self.step_rows * self.per_row
        epochs = self.steps / self.per_epoch
        text = f"{self.steps:,} steps of {per_step:,} {unit} ({self.steps * per_step:,} {unit}, "
        text += f"{epochs:.3g} epochs)"  # 3 epochs, 0.82 epochs, 0.00396 epochs of a corpus
        if self.eval_batches is None:
            subset = f"all {self.eval_total} batches"
        else:
            subset = f"{self.eval_batches} of {self.eval_total} batches"
        return f"{text}; evaluation every {self.eval_every} steps on {subset}"


class Job:
    unit = "examples"  # what the throughput counts
    eval_name = "test"  # how evaluation results are named (test_accuracy)
    eval_batch = None  # about this many rows per evaluation batch; None: cfg.batch_size
    eval_units = None  # units an evaluation needs by default (its standard error); None: all

    def optimizer_args(self, cfg) -> dict:
        """Extra hyper-parameters for the named optimizer (e.g. AdamW's b2)."""
        return {}

    def describe_schedule(self, cfg, steps: int) -> str:
        """The learning-rate schedule of a run of `steps` steps, for the start-up line."""
        return ""

    def flops_per_unit(self, cfg, model) -> float | None:
        """The model FLOPs of training on one unit (a token), for the throughput; None: unknown."""
        return None

    def finish(self, cfg, run_dir, state, data) -> dict:
        """Extra entries of the result (e.g. a text sample)."""
        return {}


def claim(
    run_dir, cfg, resume: bool | None = None, again: str = "--resume", **recorded
) -> pathlib.Path:
    """The run directory of `cfg` (a config dataclass), checked before any work: empty (or
    absent) for a new run; for --resume, a run of the same configuration; `resume=None` for a
    command without --resume. Writes config.json. `again`: the flag that continues a run, as
    the messages name it (`frost audit` continues the audit in --out by running it again).
    `recorded`: values config.json holds in place of cfg's (not options, so not checked again).
    Process 0 claims it and the others take its answer (frost.parallel.on_first): processes
    sharing --out never race, and a refusal is the same one line in every process."""
    mine = json.loads(json.dumps({**dataclasses.asdict(cfg), **recorded}))  # tuples are lists
    parallel.on_first(lambda: _claim(pathlib.Path(run_dir), mine, resume, again))
    return pathlib.Path(run_dir)


def _claim(run_dir: pathlib.Path, mine: dict, resume: bool | None, again: str) -> None:
    saved = run_dir / "config.json"
    if resume:
        if not saved.exists():
            raise UsageError(
                f"--resume: {run_dir} holds no run (no config.json); drop --resume to start one"
            )
        try:
            theirs = json.loads(saved.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise UsageError(
                f"{again}: {saved} is unreadable ({e}); start a new run with another --out"
            ) from None
        changed = ", ".join(
            f"{flag(k)} {theirs.get(k)!r}, now {mine.get(k)!r}"
            for k in sorted(set(mine) | set(theirs))
            if k not in RESUMABLE and mine.get(k) != theirs.get(k)
        )
        if changed:
            raise UsageError(
                f"{again}: {run_dir} was made with other settings ({changed}); resume with the "
                "same options, or choose another --out"
            )
    if run_dir.exists() and not run_dir.is_dir():
        raise UsageError(f"--out {run_dir}: is a file, not a folder; choose a new or empty folder")
    if not resume and run_dir.exists() and any(run_dir.iterdir()):
        how = "choose a new or empty --out" if resume is None else "pass --resume to continue it"
        raise UsageError(f"--out {run_dir}: already holds files from another run; {how}")
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic.write(saved, json.dumps(mine, indent=1))


def make_optimizer(job, cfg, steps: int):
    """The named optimizer over the job's schedule, after --clip's clipping of the gradients'
    global norm; Frost's own get the decay mask (matrices only); with --precision fp16, inside
    dynamic loss scaling."""
    extra = job.optimizer_args(cfg) if frost_own(cfg.optimizer) else {}
    opt = build(cfg.optimizer, job.schedule(cfg, steps), weight_decay=cfg.weight_decay, **extra)
    if cfg.clip is not None:
        opt = optim.chain(optim.clip_by_global_norm(cfg.clip), opt)
    return optim.scaling.dynamic_scaling(opt) if cfg.precision == "fp16" else opt


def plan(job, cfg, data) -> Plan:
    """The run's length and evaluations from its options and data (one rule for every job).

    The length is --max-steps, --tokens or --epochs (the job's default epochs when none is given).
    Evaluations come every --eval-every steps, by default every epoch when the run spans 2 epochs
    or more (a small data set), else EVALUATIONS times a run (a corpus), and at the last step.
    Each is on --eval-batches batches, by default on enough for `job.eval_units` units (all, when
    the job gives none), but on no more units than the run trains on between two evaluations:
    an evaluation (a forward pass) then costs at most about a third of the training before it.
    """
    step_rows = cfg.batch_size * cfg.grad_accum
    per_epoch = len(data.train) // step_rows
    steps = cfg.run_steps(per_epoch, step_rows * data.per_row)
    eval_every = cfg.eval_every
    if eval_every is None and steps >= 2 * per_epoch:
        eval_every = per_epoch
    elif eval_every is None:
        eval_every = -(-steps // EVALUATIONS)
    # a multiple of the batch, so it divides over the mesh and the processes as that does
    eval_rows = cfg.batch_size * max(1, (job.eval_batch or cfg.batch_size) // cfg.batch_size)
    eval_total = 0 if data.eval is None else -(-len(data.eval) // eval_rows)
    eval_batches = None if cfg.eval_batches == "all" else cfg.eval_batches
    if cfg.eval_batches is None and job.eval_units is not None:
        needed = -(-job.eval_units // (eval_rows * data.per_row))
        # the batches that hold as many rows as the run trains on between two evaluations
        trained = max(1, eval_every * step_rows // eval_rows)
        eval_batches = min(needed, trained)
    if eval_batches is not None and eval_batches >= eval_total:
        eval_batches = None  # the whole set
    return Plan(
        steps, per_epoch, step_rows, data.per_row, eval_every, eval_rows, eval_batches, eval_total
    )


@contextlib.contextmanager
def claimed(run_dir, cfg, resume: bool | None = None, work: str = "checkpoints"):
    """`claim` around a run: a new run directory is removed again when the run fails before it
    holds a checkpoint (in `run_dir/work`): a run that did no work (a corrupt image, a bad flag
    found late) leaves nothing behind, so fixing the mistake and rerunning works."""
    run_dir = claim(run_dir, cfg, resume)
    try:
        yield run_dir
    except BaseException:
        if not resume and jax.process_index() == 0 and checkpoint.latest(run_dir / work) is None:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise


def run(job, cfg, progress: bool = True) -> dict:
    """Train `cfg` with `job`; return the final evaluation and timing (also in result.json)."""
    with claimed(cfg.run_dir, cfg, cfg.resume) as run_dir:
        return _train(job, cfg, run_dir, progress)


def _train(job, cfg, run_dir, progress) -> dict:
    data, state, step, place, run = _setup(job, cfg, run_dir, cfg.resume, progress)
    eval_step = loop.make_eval_step(data.prepare)
    # its share of each batch
    shard = dict(process_index=jax.process_index(), process_count=jax.process_count())

    def eval_fn(model):
        if data.eval is None:
            return {}
        subset = run.eval_batches is not None
        with fdata.Loader(
            data.eval,
            run.eval_rows,
            shuffle=subset,  # a fixed random subset: the first batches of one shuffle
            seed=EVAL_SEED,
            transform=data.eval_transform,
            workers=min(cfg.workers, 1),
            **shard,
        ) as loader:
            batches = itertools.islice(loader, run.eval_batches) if subset else loader
            rows = run.eval_rows // jax.process_count()
            return loop.evaluate(model, batches, eval_step, rows, place)

    devices = jax.device_count() if cfg.mesh or jax.process_count() > 1 else 1
    peak = metrics.peak_flops(jax.devices()[0].device_kind, cfg.precision)
    start = time.perf_counter()
    with fdata.Loader(
        data.train,
        run.step_rows,
        shuffle=True,
        seed=cfg.seed,
        drop_last=True,
        transform=data.augment,
        workers=cfg.workers,
        state=state.loader_state,
        **shard,
    ) as loader:
        fit_config = loop.FitConfig(
            epochs=-(-run.steps // run.per_epoch),
            run_dir=run_dir,
            max_steps=run.steps,
            eval_every=run.eval_every,
            unit=job.unit,
            eval_name=job.eval_name,
            on_nonfinite=cfg.on_nonfinite,
            max_skips=cfg.max_skips,
            tensorboard=cfg.log == "tensorboard",
            progress=progress,
            meta={"config": dataclasses.asdict(cfg)},
            flops_per_unit=job.flops_per_unit(cfg, state.model),
            peak_flops=None if peak is None else peak * devices,
        )
        count = lambda batch: len(batch[0]) * data.per_row  # noqa: E731
        state = loop.fit(state, step, loader, fit_config, eval_fn, count, place)
    seconds = time.perf_counter() - start
    final = state.last_eval
    if final is None:  # resumed after the last evaluation
        final = eval_fn(state.model)
    # with fp16: the overflow count
    scaled = optim.find_states(state.opt_state, optim.scaling.ScaledState)
    result = {f"{job.eval_name}_{k}": v for k, v in final.items()}  # test_accuracy, ...
    result.update(steps=state.step, skipped=state.skipped, seconds=seconds)
    # tokens_per_s, flops_per_token, mfu: of this invocation's training (none when a resumed run
    # had nothing left to train)
    result.update(state.speed or {f"{job.unit}_per_s": 0.0})
    result.update(job.finish(cfg, run_dir, state, data))
    if scaled:
        result["overflow_skipped"] = int(scaled[0].scale.skipped)
    atomic.write(run_dir / "result.json", json.dumps(result, indent=1))
    return result


def _setup(job, cfg, run_dir, resume, progress):
    """(data, train state, jitted step, batch placement, plan): restored and laid out on the
    mesh."""
    data = job.data(cfg, run_dir, progress)
    rows = len(data.train)
    if rows < cfg.batch_size * cfg.grad_accum:
        accum = f" x --grad-accum {cfg.grad_accum}" if cfg.grad_accum > 1 else ""
        raise UsageError(
            f"--batch-size {cfg.batch_size}{accum}: the training data has only {rows} examples"
            f"{f' (--limit {cfg.limit})' if cfg.limit else ''}; give more data or a smaller batch"
        )
    run = plan(job, cfg, data)
    key = jax.random.key(cfg.seed)
    model = job.model(cfg, data, jax.random.fold_in(key, 0))
    optimizer = make_optimizer(job, cfg, run.steps)
    state = loop.TrainState(model, optimizer.init(model), jax.random.fold_in(key, 1))
    state, shardings, place = loop.distribute(state, cfg.mesh, cfg.strategy, cfg.batch_size)
    if resume:  # after distributing: each process reads only the shards it holds
        state = loop.restore(run_dir, state)
    hessian = resolve(cfg.optimizer).hessian  # Sophia's estimator, or None
    step = loop.make_train_step(
        optimizer,
        prepare=data.prepare,
        shardings=shardings,
        hessian=hessian,
        precision=cfg.precision,
        grad_accum=cfg.grad_accum,
    )
    if progress:
        schedule = job.describe_schedule(cfg, run.steps)
        print(
            f"{cfg.model}: {model.param_count():,} parameters; {data.describe}; "
            f"{run.describe(job.unit)}; {cfg.optimizer}, peak lr {cfg.peak_lr:g}"
            f"{f', {schedule}' if schedule else ''}; run dir {run_dir}",
            flush=True,
        )
    return data, state, step, place, run
