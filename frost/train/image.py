"""The image-classification job behind `frost train resnet20 --data fashion-mnist`.

Data: `fashion-mnist` (Debian's dataset-fashion-mnist, 28x28 grey), `cifar10` (binary format
under $FROST_DATA), or a folder with `train/` and `test/` image-folder sub-directories.
Fashion-MNIST is used at its own 28x28 size: the CIFAR ResNets' 3x3 stem and global pooling
take any size, so stages run at 28, 14 and 7 pixels (no padding to 32). Training augmentation
is the CIFAR recipe (random crop with 2-4 pixels of zero padding, horizontal flip), run in the
loader's workers on uint8 images; normalisation runs on the device inside the jitted step.

Recipe (defaults): SGD with Nesterov momentum 0.9, weight decay 5e-4 on weights (not on
BatchNorm or biases), one-cycle learning rate (Smith & Topin 2017) peaking at `lr`, batch 128.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
import time

import jax
import jax.numpy as jnp

from frost import data, datasets, optim
from frost.models import resnet
from frost.nn.module import expand_to
from frost.train import loop

DATASETS = {  # name: (loader of (images, labels) per split, crop padding, normalisation mean/std)
    "fashion-mnist": (datasets.fashion_mnist, 2, (0.2860,), (0.3530,)),
    "cifar10": (datasets.cifar10, 4, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
}


@dataclasses.dataclass
class Config:
    model: str = "resnet20"
    data: str = "fashion-mnist"
    epochs: int = 5
    batch_size: int = 128
    lr: float = 0.1
    optimizer: str = "sgd"
    weight_decay: float = 5e-4
    seed: int = 0
    workers: int = 2
    out: str = "runs/resnet20"
    max_steps: int | None = None  # stop early (smoke tests); None trains all epochs
    limit: int | None = None  # use only the first `limit` train and test images (smoke tests)
    mesh: str | None = None  # e.g. "data=8" or "data=4,model=2" (frost.parallel); None: one device
    strategy: str = "dp"  # dp (replicated), fsdp, or tp (GPT tensor parallel over the model axis)


def load_data(name: str, limit: int | None = None, image_size: int = 32):
    """(train source, test source or None, image shape (H, W, C), classes, crop padding, mean, std,
    transforms to run before augmentation). Sources yield (uint8 image (H, W, C), int32 label)."""
    if name in DATASETS:
        read, pad, mean, std = DATASETS[name]
        (images, labels), test = read("train"), read("test")
        if limit:
            images, labels, test = images[:limit], labels[:limit], (test[0][:limit], test[1][:limit])
        return (data.Arrays(images, labels), data.Arrays(*test), images.shape[1:], int(max(labels.max(), test[1].max())) + 1,
                pad, mean, std, ())
    root = pathlib.Path(name)
    if not (root / "train").is_dir():
        raise FileNotFoundError(f"--data {name!r}: not a known data set ({', '.join(DATASETS)}) nor a folder "
                                "with train/ (and optionally test/) image-folder sub-directories")
    train = data.ImageFolder(root / "train")
    test = data.ImageFolder(root / "test") if (root / "test").is_dir() else None
    return (train, test, (image_size, image_size, 3), len(train.classes), 4, (0.5,) * 3, (0.25,) * 3,
            (data.Resize(image_size),))


def make_optimizer(cfg: Config, total_steps: int):
    schedule = optim.one_cycle(max(total_steps, 1), cfg.lr)
    mask = optim.decay_mask
    if cfg.optimizer == "sgd":
        return optim.sgd(schedule, momentum=0.9, nesterov=True, weight_decay=cfg.weight_decay, mask=mask)
    if cfg.optimizer == "adamw":
        return optim.adamw(schedule, weight_decay=cfg.weight_decay, mask=mask)
    if cfg.optimizer == "lion":
        return optim.lion(schedule, weight_decay=cfg.weight_decay, mask=mask)
    raise ValueError(f"--optimizer {cfg.optimizer!r}: choose sgd, adamw or lion")


def train(cfg: Config, resume: bool = False, progress: bool = True) -> dict:
    """Train `cfg.model` on `cfg.data`; return the final test metrics and timing."""
    if cfg.model not in resnet.MODELS:
        raise ValueError(f"unknown model {cfg.model!r}; choose one of {', '.join(resnet.MODELS)}")
    run_dir = pathlib.Path(cfg.out)
    if not resume and loop.checkpoint.latest(run_dir / "checkpoints") is not None:
        raise FileExistsError(f"{run_dir} already holds a run: pass --resume to continue it, or choose another --out")
    train_source, test_source, shape, classes, pad, mean, std, pre = load_data(cfg.data, cfg.limit)
    augment = data.Compose(*pre, data.RandomCrop(shape[:2], padding=pad), data.RandomFlip())
    mean, std = jnp.asarray(mean, jnp.float32), jnp.asarray(std, jnp.float32)

    def prepare(batch):  # uint8 (N, H, W, C) -> normalised float32
        x, y = batch
        return (x.astype(jnp.float32) / 255 - expand_to(mean, x.ndim)) / expand_to(std, x.ndim), y

    key = jax.random.key(cfg.seed)
    model = resnet.MODELS[cfg.model](classes, shape[-1], key=jax.random.fold_in(key, 0))
    make_loader = lambda state: data.Loader(train_source, cfg.batch_size, shuffle=True,  # noqa: E731
                                            seed=cfg.seed, drop_last=True, transform=augment,
                                            workers=cfg.workers, state=state, **loop.process_shard())
    steps = len(make_loader(None)) * cfg.epochs
    optimizer = make_optimizer(cfg, steps)
    state = loop.TrainState(model, optimizer.init(model), jax.random.fold_in(key, 1))
    if resume:
        state = loop.restore(run_dir, state)
    state, shardings, place = loop.distribute(state, cfg.mesh, cfg.strategy, cfg.batch_size)
    eval_step = loop.make_eval_step(prepare)

    def eval_fn(model):
        if test_source is None:
            return {}
        with data.Loader(test_source, 1000, shuffle=False, transform=data.Compose(*pre) if pre else None,
                         workers=min(cfg.workers, 1), **loop.process_shard()) as batches:
            return loop.evaluate(model, map(place, batches), eval_step)

    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=1))
    if progress:
        print(f"{cfg.model}: {model.param_count():,} parameters; {cfg.data}: {len(train_source)} training images "
              f"{tuple(shape)}; {steps} steps; run dir {run_dir}", flush=True)
    start = time.perf_counter()
    with make_loader(state.loader_state) as loader:
        step = loop.make_train_step(optimizer, loop.classification_loss, prepare, shardings)
        state = loop.fit(state, step, loader, epochs=cfg.epochs, run_dir=run_dir, eval_fn=eval_fn,
                         meta={"config": dataclasses.asdict(cfg)}, progress=progress, max_steps=cfg.max_steps,
                         place=place)
    final = state.last_eval if state.last_eval is not None and cfg.max_steps is None else eval_fn(state.model)
    result = {**final, "steps": state.step, "seconds": time.perf_counter() - start}
    (run_dir / "result.json").write_text(json.dumps(result, indent=1))
    return result
