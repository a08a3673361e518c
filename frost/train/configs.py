"""The training jobs' configurations: one base, per-job defaults (no JAX here, so `frost --help`
starts fast). `frost train`'s options are generated from these fields (frost.config).

Every value is checked when a config is built; what a check cannot see from one field (a
strategy without a mesh, heads that do not divide dim) is in `check()`.
"""

import dataclasses

from frost.config import (
    Checked,
    UsageError,
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


@dataclasses.dataclass(frozen=True)
class Config(Checked):
    model: str = option("resnet20", "the model", choices=RESNETS, cli=False)
    data: str = option(
        "fashion-mnist",
        "resnets: fashion-mnist, cifar10, or a folder with train/ and test/ "
        "image folders; gpt: kjv, a UTF-8 text file, or a corpus: .jsonl/.parquet files, "
        "a folder or glob of .txt/.jsonl/.parquet files, a datasets save_to_disk folder",
    )
    epochs: int = option(5, "passes over the training data", whole(1))
    batch_size: int = option(128, "global batch size", whole(1))
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
    seed: int = option(0, "random seed (initialisation, data order, augmentation)", whole(0))
    workers: int = option(2, "data-loading worker processes; 0 loads in the main process", whole(0))
    out: str | None = option(None, "run directory (default runs/MODEL)", optional(output_folder))
    resume: bool = option(False, "continue the run in --out from its latest checkpoint")
    max_steps: int | None = option(
        None, "stop after N steps (the schedule still spans all epochs)", optional(whole(1))
    )
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

    @property
    def run_dir(self) -> str:
        return self.out or f"runs/{self.model}"

    @property
    def peak_lr(self) -> float:
        return self.DEFAULT_LR if self.lr is None else self.lr

    def check(self):
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
    epochs: int = 3
    batch_size: int = 32
    optimizer: str = "adamw"
    weight_decay: float = 0.1
    workers: int = 0

    DEFAULT_LR = 2e-3

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
