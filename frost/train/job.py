"""One job mechanism behind every `frost train ...`: a job says what its data and model are;
`run` does the rest the same way for all of them.

    result = run(ImageJob(), ImageConfig(model="resnet20", epochs=5))

The path: claim the run directory (refuse one holding another run; on --resume, refuse a
different configuration), data (refuse data too small for one batch), model, optimizer by name
from frost.optim.registry (Sophia's Hessian refresh wired into the step), restore, distribute,
fit, final evaluation, `result.json`.

A job is a `Job` subclass taking its config (frost.train.configs): `data(cfg, run_dir, progress)
-> Data`, `model(cfg, data, key)` and `schedule(cfg, steps)` (the learning rate, peaking at
cfg.peak_lr), and where the defaults below do not fit, the other attributes and methods.
"""

import contextlib
import dataclasses
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
from frost.train import loop

# Options that may change when a run is resumed: they steer the run, not its numbers.
RESUMABLE = {"workers", "max_steps", "on_nonfinite", "max_skips", "out", "log", "resume"}


class Data(NamedTuple):
    train: Any  # a source of (x, y) samples
    eval: Any  # the same, or None
    describe: str  # for the start-up line
    augment: Callable | None = None  # per-sample transform in the loader (training only)
    eval_transform: Callable | None = None
    prepare: Callable = lambda batch: batch  # on the device, inside the jitted step
    extra: dict = {}
    per_row: int = 1  # units (the job's `unit`) per batch row: 1 image, or seq_len tokens


class Job:
    unit = "examples"  # what the throughput counts
    eval_name = "test"  # how evaluation results are named (test_accuracy)
    eval_batch = None  # about this many rows per evaluation batch; None: cfg.batch_size

    def optimizer_args(self, cfg) -> dict:
        """Extra hyper-parameters for the named optimizer (e.g. AdamW's b2)."""
        return {}

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
    """The named optimizer over the job's schedule; Frost's own get the decay mask (matrices only);
    with --precision fp16, inside dynamic loss scaling."""
    extra = job.optimizer_args(cfg) if frost_own(cfg.optimizer) else {}
    opt = build(cfg.optimizer, job.schedule(cfg, steps), weight_decay=cfg.weight_decay, **extra)
    return optim.scaling.dynamic_scaling(opt) if cfg.precision == "fp16" else opt


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
    data, state, step, place = _setup(job, cfg, run_dir, cfg.resume, progress)
    eval_step = loop.make_eval_step(data.prepare)
    # a multiple of the training batch, so it divides over the mesh and the processes as that does
    eval_rows = cfg.batch_size * max(1, (job.eval_batch or cfg.batch_size) // cfg.batch_size)
    # its share of each batch
    shard = dict(process_index=jax.process_index(), process_count=jax.process_count())

    def eval_fn(model):
        if data.eval is None:
            return {}
        with fdata.Loader(
            data.eval,
            eval_rows,
            shuffle=False,
            transform=data.eval_transform,
            workers=min(cfg.workers, 1),
            **shard,
        ) as batches:
            return loop.evaluate(model, batches, eval_step, eval_rows // jax.process_count(), place)

    start = time.perf_counter()
    first_step = state.step
    with fdata.Loader(
        data.train,
        cfg.batch_size,
        shuffle=True,
        seed=cfg.seed,
        drop_last=True,
        transform=data.augment,
        workers=cfg.workers,
        state=state.loader_state,
        **shard,
    ) as loader:
        fit_config = loop.FitConfig(
            epochs=cfg.epochs,
            run_dir=run_dir,
            max_steps=cfg.max_steps,
            unit=job.unit,
            eval_name=job.eval_name,
            on_nonfinite=cfg.on_nonfinite,
            max_skips=cfg.max_skips,
            tensorboard=cfg.log == "tensorboard",
            progress=progress,
            meta={"config": dataclasses.asdict(cfg)},
        )
        count = lambda batch: len(batch[0]) * data.per_row  # noqa: E731
        state = loop.fit(state, step, loader, fit_config, eval_fn, count, place)
    seconds = time.perf_counter() - start
    final = state.last_eval
    if final is None or cfg.max_steps is not None:
        final = eval_fn(state.model)
    # with fp16: the overflow count
    scaled = optim.find_states(state.opt_state, optim.scaling.ScaledState)
    result = {f"{job.eval_name}_{k}": v for k, v in final.items()}  # test_accuracy, ...
    result.update(steps=state.step, skipped=state.skipped, seconds=seconds)
    done = (state.step - first_step) * cfg.batch_size * data.per_row  # images or tokens
    result[f"{job.unit}_per_s"] = done / seconds
    result.update(job.finish(cfg, run_dir, state, data))
    if scaled:
        result["overflow_skipped"] = int(scaled[0].scale.skipped)
    atomic.write(run_dir / "result.json", json.dumps(result, indent=1))
    return result


def _setup(job, cfg, run_dir, resume, progress):
    """(data, train state, jitted step, batch placement): restored and laid out on the mesh."""
    data = job.data(cfg, run_dir, progress)
    rows = len(data.train)
    if rows < cfg.batch_size:
        raise UsageError(
            f"--batch-size {cfg.batch_size}: the training data has only {rows} examples"
            f"{f' (--limit {cfg.limit})' if cfg.limit else ''}; give more data or a smaller batch"
        )
    key = jax.random.key(cfg.seed)
    model = job.model(cfg, data, jax.random.fold_in(key, 0))
    steps = rows // cfg.batch_size * cfg.epochs
    optimizer = make_optimizer(job, cfg, steps)
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
    )
    if progress:
        print(
            f"{cfg.model}: {model.param_count():,} parameters; {data.describe}; {steps} steps of "
            f"{cfg.batch_size}; {cfg.optimizer}, peak lr {cfg.peak_lr:g}; run dir {run_dir}",
            flush=True,
        )
    return data, state, step, place
