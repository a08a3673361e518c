"""The training jobs' configurations: one base, per-job defaults (no JAX here, so `frost --help`
starts fast). `frost train`'s options are generated from these fields (frost.config).

Every value is checked when a config is built; what a check cannot see from one field (a
strategy without a mesh, heads that do not divide dim) is in `check()`.
"""

import dataclasses

from frost.config import (
    Checked,
    UsageError,
    flag,
    needs,
    nonnegative,
    option,
    optional,
    output_folder,
    positive,
    whole,
)

# The image models, named here so the parser needs no JAX; a test checks them against resnet.MODELS.
RESNETS = ("cifar_resnet18", "resnet18", "resnet20", "resnet34", "resnet50", "resnet56")


def _optimizer(name):
    from frost.optim.registry import resolve

    resolve(name)  # raises UsageError naming the choices


def _mesh(spec):
    from frost.parallel import parse_mesh

    parse_mesh(spec)  # raises UsageError


def _log(kind):
    if kind == "tensorboard":
        needs("tensorboardX", "--log tensorboard", "'frost[log]'")


def _eval_batches(value):
    if value == "all" or whole(1)(value) is None:
        return None
    return "must be a whole number >= 1, or all"


def _warmup(value):
    if nonnegative(value) is None and (value < 1 or float(value).is_integer()):
        return None
    return "must be a whole number of steps, or a fraction of the run below 1"


@dataclasses.dataclass(frozen=True)
class Config(Checked):
    model: str = option("resnet20", "the model", choices=RESNETS, cli=False)
    data: str = option(
        "fashion-mnist",
        "resnets: fashion-mnist, cifar10, or a folder with train/ and test/ "
        "image folders; gpt: kjv, a UTF-8 text file, or a corpus: .jsonl/.parquet files, "
        "a folder or glob of .txt/.jsonl/.parquet files, a datasets save_to_disk folder",
    )
    epochs: int | None = option(
        None,
        "the run's length in passes over the training data, for small data sets (default 5 for "
        "resnets, 3 for gpt, unless --max-steps or --tokens gives the length)",
        optional(whole(1)),
    )
    max_steps: int | None = option(
        None,
        "the run's length in steps: training stops there and the learning-rate schedule ends there",
        optional(whole(1)),
    )
    batch_size: int = option(
        128, "global batch size (of each micro-batch, with --grad-accum)", whole(1)
    )
    grad_accum: int = option(
        1,
        "micro-batches of --batch-size in each step: their gradients are averaged, so a step "
        "sees K x --batch-size examples in the memory of one micro-batch",
        whole(1),
    )
    eval_every: int | None = option(
        None,
        "steps between evaluations, each written to metrics.jsonl after a checkpoint (default: "
        "every epoch when the run spans 2 epochs or more, else 5 a run; always at the end)",
        optional(whole(1)),
    )
    eval_batches: int | str | None = option(
        None,
        "batches in each evaluation: the same fixed subset of the evaluation data every time, or "
        "'all' for a full pass (default: all for resnets; for gpt enough that the loss's "
        "standard error is about 0.01, at most the tokens trained on between evaluations)",
        optional(_eval_batches),
    )
    lr: float | None = option(
        None,
        "peak learning rate (default 0.1 for resnets with sgd, 2e-3 for gpt with "
        "adamw; required with any other optimizer)",
        optional(positive),
    )
    optimizer: str = option(
        "sgd",
        "sgd (Nesterov momentum 0.9), adam, adamw, lion, sophia (Sophia-G), sophia-h "
        "(Sophia-H), muon, or MODULE:FUNCTION returning an optax-style optimizer",
        _optimizer,
    )
    weight_decay: float = option(5e-4, "weight decay (on matrices and kernels only)", nonnegative)
    clip: float | None = option(
        None,
        "clip the gradients' global norm to this before the optimizer",
        optional(positive),
    )
    seed: int = option(0, "random seed (initialisation, data order, augmentation)", whole(0))
    workers: int = option(2, "data-loading worker processes; 0 loads in the main process", whole(0))
    out: str | None = option(None, "run directory (default runs/MODEL)", optional(output_folder))
    resume: bool = option(False, "continue the run in --out from its latest checkpoint")
    limit: int | None = option(
        None, "use only the first N examples (images; characters for gpt)", optional(whole(1))
    )
    mesh: str | None = option(
        None, "devices as AXIS=SIZE: data=8 (data parallel), data=4,model=2", optional(_mesh)
    )
    strategy: str = option(
        "dp",
        "with --mesh: replicated parameters (dp), fully sharded (fsdp), or GPT tensor "
        "parallel over the model axis (tp)",
        choices=("dp", "fsdp", "tp"),
    )
    on_nonfinite: str = option(
        "stop",
        "a NaN/Inf loss, gradient or update: stop (keep the last finite "
        "checkpoint) or skip the step",
        choices=("stop", "skip"),
    )
    max_skips: int = option(
        10, "with --on-nonfinite skip: consecutive skipped steps before stopping", whole(1)
    )
    precision: str = option(
        "fp32",
        "compute dtype of the forward and backward pass; parameters, moments and the "
        "loss stay float32 (fp16: with dynamic loss scaling)",
        choices=("fp32", "bf16", "fp16"),
    )
    log: str = option(
        "jsonl",
        "metrics.jsonl, or also TensorBoard event files in OUT/tensorboard",
        _log,
        choices=("jsonl", "tensorboard"),
    )

    DEFAULT_LR = 0.1  # for the default optimizer
    DEFAULT_EPOCHS = 5  # the run's length when no length option is given
    LENGTHS = ("epochs", "max_steps")  # the options that set the run's length: one at most

    def run_steps(self, per_epoch: int, per_step: int) -> int:
        """The run's length in steps.

        Arguments:
            per_epoch: the steps in one pass over the training data.
            per_step: the units (images, tokens) one step trains on.

        Returns:
            --max-steps, or --epochs (by default DEFAULT_EPOCHS) passes of `per_epoch` steps.
        """
        if self.max_steps is not None:
            return self.max_steps
        return per_epoch * (self.DEFAULT_EPOCHS if self.epochs is None else self.epochs)

    @property
    def run_dir(self) -> str:
        return self.out or f"runs/{self.model}"

    @property
    def peak_lr(self) -> float:
        return self.DEFAULT_LR if self.lr is None else self.lr

    def check(self):
        given = [name for name in self.LENGTHS if getattr(self, name) is not None]
        if len(given) > 1:
            both = " and ".join(f"{flag(name)} {getattr(self, name)}" for name in given)
            choices = ", ".join(flag(name) for name in self.LENGTHS)
            raise UsageError(f"{both}: each sets the run's length; give one of {choices}")
        default = type(self).__dataclass_fields__["optimizer"].default
        if self.lr is None and self.optimizer != default:
            raise UsageError(
                f"--optimizer {self.optimizer}: give --lr too (the default {self.DEFAULT_LR:g} "
                f"is tuned for {default})"
            )
        if self.strategy != "dp" and not self.mesh:
            raise UsageError(f"--strategy {self.strategy}: needs --mesh, e.g. --mesh data=8")
        if self.strategy == "tp" and "model=" not in self.mesh.replace(" ", ""):
            raise UsageError(
                f"--strategy tp: --mesh {self.mesh!r} has no model axis; use e.g. data=4,model=2"
            )


@dataclasses.dataclass(frozen=True)
class ImageConfig(Config):
    def check(self):
        super().check()
        if self.strategy == "tp":
            raise UsageError(
                "--strategy tp: tensor parallelism splits a GPT's blocks; for resnets use dp or "
                "fsdp"
            )


@dataclasses.dataclass(frozen=True)
class LMConfig(Config):
    model: str = option("gpt", "the model", choices=("gpt",), cli=False)
    data: str = "kjv"
    vocab_size: int = option(2048, "BPE vocabulary: 256 bytes + merges", whole(257))
    seq_len: int = option(128, "tokens per training window", whole(1))
    dim: int = option(192, "model width", whole(1))
    depth: int = option(4, "transformer blocks", whole(1))
    heads: int = option(4, "attention heads (must divide --dim)", whole(1))
    tokenizer: str | None = option(None, "a corpus's Frost tokenizer.json or GPT-2 folder")
    tokenizer_sample: int = option(10**8, "characters the tokenizer is trained on", whole(1))
    text_key: str = option("text", "the text field of .jsonl documents")
    text_column: str = option("text", "the text column of .parquet and datasets documents")
    token_cache: str = option(
        "~/.cache/frost/tokens", "where a corpus's token shards are kept", output_folder
    )
    tokens: int | None = option(
        None,
        "the run's length in tokens (rounded up to whole steps): training stops there and the "
        "learning-rate schedule ends there",
        optional(whole(1)),
    )
    warmup: float | None = option(
        None,
        "linear warmup: a whole number of steps, or a fraction of the run below 1 (default 10% "
        "of the run, at most 100 steps)",
        optional(_warmup),
    )
    min_lr: float | None = option(
        None,
        "the learning rate the cosine decays to at the run's end (default 0.1 x the peak)",
        optional(nonnegative),
    )
    batch_size: int = 32
    optimizer: str = "adamw"
    weight_decay: float = 0.1
    clip: float | None = 1.0
    workers: int = 0

    DEFAULT_LR = 2e-3
    DEFAULT_EPOCHS = 3
    LENGTHS = ("epochs", "max_steps", "tokens")

    @property
    def end_lr(self) -> float:
        """The learning rate at the run's end: --min-lr, or a tenth of the peak."""
        return 0.1 * self.peak_lr if self.min_lr is None else self.min_lr

    def run_steps(self, per_epoch: int, per_step: int) -> int:
        """The run's length in steps: --tokens over the tokens a step trains on (rounded up), or
        the base class's (--max-steps, --epochs).

        Arguments:
            per_epoch: the steps in one pass over the training data.
            per_step: the tokens one step trains on.

        Returns:
            The number of steps.
        """
        if self.tokens is not None:
            return -(-self.tokens // per_step)
        return super().run_steps(per_epoch, per_step)

    def warmup_steps(self, steps: int) -> int:
        """The warmup's length in steps, for a run of `steps` steps.

        Arguments:
            steps: the run's length.

        Returns:
            --warmup steps, or that fraction of the run (rounded), or by default a tenth of the
            run, at most 100 steps.

        Raises:
            UsageError: a warmup longer than the run.
        """
        if self.warmup is None:
            return min(100, steps // 10)
        warmup = round(self.warmup * steps) if self.warmup < 1 else int(self.warmup)
        if warmup > steps:
            raise UsageError(f"--warmup {self.warmup:g}: longer than the run's {steps} steps")
        return warmup

    def check(self):
        super().check()
        if self.dim % self.heads or (self.dim // self.heads) % 2:
            raise UsageError(
                f"--heads {self.heads}: must divide --dim {self.dim} into an even head size "
                "(rotary positions rotate pairs)"
            )


JOBS = {**{name: ImageConfig for name in RESNETS}, "gpt": LMConfig}


@dataclasses.dataclass(frozen=True)
class SampleConfig(Checked):
    run_dir: str | None = option(None, "a `frost train gpt` run directory", cli=False)
    hf: str | None = option(
        None,
        "a Hugging Face GPT-2 folder (config.json, model.safetensors, vocab.json, "
        "merges.txt) to sample from instead of a run",
    )
    prompt: str = option("In the beginning", "text to continue")  # an empty one is refused
    tokens: int = option(100, "tokens to generate", whole(1))
    temperature: float = option(0.8, "softmax temperature; 0 is greedy", nonnegative)
    top_k: int | None = option(40, "sample among the k likeliest tokens", optional(whole(1)))
    seed: int = option(0, "random seed", whole(0))

    def check(self):
        if (self.run_dir is None) == (self.hf is None):
            raise UsageError("frost sample: give a run directory or --hf PATH (one of them)")
