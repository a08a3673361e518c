"""The audit's workloads: a model, its data held on the device, and a batch drawn inside the
compiled program as a pure function of (run key, step), so K runs with K data orders train in
one program with no host traffic.

    gpt-s, gpt-m      a GPT with rotary positions (frost.models.gpt) on KJV, or any UTF-8 file,
                      tokenised with Frost's byte-level BPE (512 tokens, trained on the first 95%
                      by frost.data.corpus.prepare_text; the rest is the held-out part)
    image-s, image-m  an MLP on Fashion-MNIST, or any image folder with train/ (and test/)
                      sub-folders (frost.data.load_images)

Each comes at two sizes (WORKLOADS: GPT width 32 x 1 block and 48 x 2 blocks; MLP width 64 and
256), so the report can show whether a gap grows or shrinks with scale. `--sizes` replaces the
GPT pair with a ladder of its own (`sized`: 128x4 is width 128, 4 blocks; PRESETS up to GPT-2
small's shape, 768 x 12 with heads of 64), each trained on `--tokens-per-param` tokens per
parameter (Chinchilla's 20 by default). The sizes and budgets
keep the default audit (4 workloads, 4 optimizers, 24 trials each) within 30 minutes on 2 cores.
Training batches are drawn with replacement (random windows of text, random images); the final
loss is the mean cross-entropy on a fixed held-out set (64 windows; 2,000 images).
"""

import dataclasses
import hashlib
import math
import os
import pathlib
import re
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from frost import data as fdata
from frost import nn, text
from frost.config import UsageError
from frost.data import corpus
from frost.models import gpt
from frost.train import image
from frost.train.losses import eval_sums

VOCAB = 512  # the text workloads' BPE vocabulary
SEQ_LEN = 64  # tokens per training window
EVAL_WINDOWS = 64  # held-out windows of text
EVAL_IMAGES = 2000  # held-out images
# the text workloads' tokenizers and tokens, one folder per text's content
CACHE = pathlib.Path(os.environ.get("FROST_CACHE", "~/.cache/frost")).expanduser() / "audit"


class Data(NamedTuple):
    # device arrays: "train" tokens, or "train_x"/"train_y"; "eval_x"/"eval_y"; "mean"/"std"
    arrays: dict
    classes: int  # vocabulary size or number of classes
    fingerprint: str  # a hash of the content (the text, or the image arrays), whatever its path


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    kind: str  # "gpt" or "image"
    width: int  # GPT model width / MLP hidden width
    depth: int  # GPT blocks / MLP hidden layers
    batch: int  # sequences of SEQ_LEN tokens, or images, per step
    steps: int  # the 1x budget (training steps of a tuning run)
    lr: float  # AdamW's learning-rate grid centre (protocol.GRIDS scales it per optimizer)
    heads: int = 1  # GPT attention heads

    def describe(self, steps: int) -> str:
        what = (
            f"GPT of width {self.width} and depth {self.depth}, batches of {self.batch} x "
            f"{SEQ_LEN} tokens"
            if self.kind == "gpt"
            else f"MLP, {self.depth} hidden layers of {self.width}, batches of {self.batch}"
        )
        return f"{what}, {steps} steps"

    def model(self, data: Data, key):
        if self.kind == "gpt":
            return gpt.GPT(
                data.classes, self.width, self.depth, self.heads, SEQ_LEN, rotary=True, key=key
            )
        inputs = math.prod(data.arrays["eval_x"].shape[1:])
        sizes = [inputs] + [self.width] * self.depth + [data.classes]
        layers = []
        for k, cin, cout in zip(jax.random.split(key, self.depth + 1), sizes, sizes[1:]):
            layers += [nn.Linear(cin, cout, key=k), nn.relu]
        return nn.Sequential(nn.Flatten(), *layers[:-1])

    def draw(self, data: dict, key):
        """One training batch (inputs, labels) from `Data.arrays`, traced inside the step."""
        if self.kind == "gpt":
            tokens = data["train"]
            starts = jax.random.randint(key, (self.batch,), 0, tokens.shape[0] - SEQ_LEN - 1)
            window = tokens[starts[:, None] + jnp.arange(SEQ_LEN + 1)[None, :]]  # (B, T + 1)
            return window[:, :-1], window[:, 1:]
        picks = jax.random.randint(key, (self.batch,), 0, data["train_x"].shape[0])
        x = image.normalise(data["train_x"][picks], data["mean"], data["std"])  # (B, H, W, C)
        return x, data["train_y"][picks]

    def eval_loss(self, model, data: dict):
        sums = eval_sums(model, (data["eval_x"], data["eval_y"]))
        return sums["loss_sum"] / sums["count"]

    def threshold(self, data: Data) -> float:
        """Training loss above which a run counts as diverged: 1.5 ln(classes) (a uniform guess is
        ln(classes))."""
        return 1.5 * math.log(data.classes)

    def muon_labels(self, classes: int):
        """Muon for hidden matrices; the embedding and output layers (a matrix with a vocabulary or
        class dimension), biases and norms to AdamW, as Jordan et al. (2024) recommend."""
        return lambda params: jax.tree.map(
            lambda p: "muon" if p.ndim == 2 and classes not in p.shape else "adam", params
        )


WORKLOADS = {
    w.name: w
    for w in (
        Workload("gpt-s", "gpt", 32, 1, 8, 300, 1e-2, heads=2),
        Workload("gpt-m", "gpt", 48, 2, 8, 300, 4e-3, heads=3),
        Workload("image-s", "image", 64, 2, 64, 400, 6e-3),
        Workload("image-m", "image", 256, 2, 64, 400, 4e-3),
    )
}

# nanoGPT's shapes (124M and 350M parameters with GPT-2's vocabulary)
PRESETS = {"gpt2-small": "768x12", "gpt2-medium": "1024x24"}


def sized(spec: str) -> Workload:
    """The GPT of a `--sizes` entry, WIDTHxDEPTH or a preset: heads of 64 as GPT-2's, batches of
    width/8 sequences (at least 8), AdamW's grid centred on 1e-2 x 32 / width (gpt-s's centre,
    scaled as 1/width)."""
    shape = re.fullmatch(r"([1-9][0-9]*)x([1-9][0-9]*)", PRESETS.get(spec, spec))
    if shape is None or int(shape[1]) % 64:
        raise UsageError(
            f"--sizes {spec}: give WIDTHxDEPTH with a width that is a multiple of 64 (heads of "
            f"64), or one of {', '.join(PRESETS)}"
        )
    width, depth = int(shape[1]), int(shape[2])
    name = f"gpt-{width}x{depth}"
    batch = max(width // 8, 8)
    return Workload(name, "gpt", width, depth, batch, steps=300, lr=0.32 / width, heads=width // 64)


def ladder(kind: str, sizes: str | None) -> list[Workload]:
    """A kind's workloads, smallest first: WORKLOADS', or the GPTs of --sizes (comma-separated)."""
    if kind == "gpt" and sizes:
        gpts = {sized(size) for size in sizes.split(",")}
        return sorted(gpts, key=lambda wl: wl.width**2 * wl.depth)
    return [wl for wl in WORKLOADS.values() if wl.kind == kind]


def load(kind: str, source: str | None, cache: pathlib.Path, progress: bool = True) -> Data:
    """The data of a workload kind on the device; `source` is --data (default: kjv,
    fashion-mnist); a text's tokenizer and tokens are kept in `cache`."""
    if kind == "gpt":
        return _text(source or "kjv", cache / "gpt", progress)
    return _images(source or "fashion-mnist")


def fingerprint(*parts) -> str:
    """A hash of the data's bytes: the text, or the arrays (numpy) in the order given."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else np.ascontiguousarray(part))
    return digest.hexdigest()[:16]


def _text(source, folder: pathlib.Path, progress):
    key = fingerprint(corpus.read_text(source))
    # made once per content: reused from `folder` when the audit restarts, never for other text
    folder = folder / key
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = corpus.prepare_text(source, folder, VOCAB, None, 8 * SEQ_LEN + 1, progress)
    dtype = text.token_dtype(tokenizer.vocab_size)
    train, val = (
        np.fromfile(folder / file, dtype).astype(np.int32) for file in ("train.bin", "val.bin")
    )
    windows = min(EVAL_WINDOWS, (len(val) - 1) // SEQ_LEN)
    if windows < 1:
        raise UsageError(
            f"--data {source}: the held-out 5% has {len(val)} tokens, fewer than one window of "
            f"{SEQ_LEN + 1}; give more text"
        )
    # (E, T + 1)
    held_out = np.stack([val[i * SEQ_LEN : (i + 1) * SEQ_LEN + 1] for i in range(windows)])
    return Data(
        {
            "train": jnp.asarray(train),
            "eval_x": jnp.asarray(held_out[:, :-1]),
            "eval_y": jnp.asarray(held_out[:, 1:]),
        },
        tokenizer.vocab_size,
        key,
    )


def _images(source):
    images = fdata.load_images(source)
    x, y = _arrays(images.train, images.pre)
    if images.test is None:  # hold out the last 10% of a folder without test/
        cut = len(x) * 9 // 10
        x, y, tx, ty = x[:cut], y[:cut], x[cut:], y[cut:]
    else:
        tx, ty = _arrays(images.test, images.pre)
    stats = {
        "mean": jnp.asarray(images.mean, jnp.float32),
        "std": jnp.asarray(images.std, jnp.float32),
    }
    return Data(
        {
            **stats,
            "train_x": jnp.asarray(x),
            "train_y": jnp.asarray(y),
            "eval_y": jnp.asarray(ty[:EVAL_IMAGES]),
            "eval_x": image.normalise(jnp.asarray(tx[:EVAL_IMAGES]), **stats),
        },
        images.classes,
        fingerprint(x, y, tx, ty, images.mean, images.std),
    )


def _arrays(source, pre):
    """All of a source's (uint8 images, labels), resized as `pre` says."""
    if isinstance(source, fdata.Arrays):
        return source.arrays
    samples = [fdata.Compose(*pre)(source[i], None) for i in range(len(source))]
    images = np.stack([sample[0] for sample in samples])
    return images, np.asarray([sample[1] for sample in samples], np.int32)
