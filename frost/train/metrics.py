"""`metrics.jsonl`: one JSON record per line, appended as training goes (and, with
`Log(..., tensorboard=True)`, the same scalars as TensorBoard event files in `tensorboard/`).

A crash can cut the last line short, and a run resumed from an earlier checkpoint repeats the
steps after it; `read` skips a cut last line (only the last: damage elsewhere is an error), and
`rewind` drops the records past the step a run resumes from, so no step is logged twice.

`peak_flops` gives a device's peak FLOP/s (a small table by device kind), for the model FLOPs
utilisation (MFU) that each evaluation's record gives on a GPU or TPU.
"""

import contextlib
import json
import pathlib

from frost import atomic
from frost.config import UsageError

# Peak dense FLOP/s of one device by its kind (`jax.Device.device_kind`), from the vendors' data
# sheets: (bf16 or fp16, fp32 matrix multiplies). JAX multiplies float32 matrices on NVIDIA GPUs in
# TF32 by default, so the fp32 column of those is TF32's. The first key the kind contains wins.
PEAK_FLOPS = {
    "H100 PCIe": (756e12, 378e12),
    "H100": (989e12, 495e12),  # SXM
    "H200": (989e12, 495e12),
    "A100": (312e12, 156e12),
    "L40S": (362e12, 183e12),
    "L4": (121e12, 60e12),
    "TPU v4": (275e12, 275e12),  # TPUs multiply float32 matrices in bf16 passes by default
    "TPU v5 lite": (197e12, 197e12),
}


def peak_flops(device_kind: str, precision: str = "fp32") -> float | None:
    """The peak FLOP/s of one device, for the model FLOPs utilisation (MFU).

    Arguments:
        device_kind: `jax.devices()[0].device_kind`, e.g. "NVIDIA H100 80GB HBM3".
        precision: "fp32", "bf16" or "fp16" (`--precision`): the compute dtype of the matmuls.

    Returns:
        FLOP/s from PEAK_FLOPS, or None for a device not in it (a CPU).
    """
    for name, (half, full) in PEAK_FLOPS.items():
        if name in device_kind:
            return full if precision == "fp32" else half
    return None


def read(path) -> list[dict]:
    path = pathlib.Path(path)
    if not path.exists():
        raise UsageError(f"{path} not found: is {path.parent} a frost run directory?")
    lines = path.read_text().splitlines()
    records = []
    for n, line in enumerate(lines, 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as e:
            if n == len(lines):  # cut short by a crash while it was written
                break
            raise UsageError(f"{path}:{n}: not a JSON line ({e})") from None
    return records


def rewind(path, step: int) -> None:
    """Keep only the records of steps <= `step` (all of them when the file ends there)."""
    path = pathlib.Path(path)
    if not path.exists():
        return
    records = read(path)
    text = path.read_text()
    kept = [r for r in records if r.get("step", 0) <= step]
    if len(kept) != len(records) or (text and not text.endswith("\n")):
        atomic.write(path, "".join(json.dumps(r) + "\n" for r in kept))


def logged(path, step: int, prefix: str) -> bool:
    """Whether `path` holds a record of `step` with a `{prefix}_...` number (an evaluation)."""
    records = read(path) if pathlib.Path(path).exists() else []
    return any(r["step"] == step and any(k.startswith(prefix + "_") for k in r) for r in records)


class Log(contextlib.ExitStack):
    """Appends records to `run_dir/metrics.jsonl`, rewound to `step` first; with `tensorboard`,
    writes each record's numbers as TensorBoard scalars at its step too (tensorboardX). As a
    context manager (an ExitStack), it closes both files on exit. With `primary=False` (every
    process but the first of a multi-process run, whose records are the same global numbers) it
    writes nothing."""

    def __init__(self, run_dir, step: int, tensorboard: bool = False, primary: bool = True):
        super().__init__()
        self.file = self.board = None
        if not primary:
            return
        run_dir = pathlib.Path(run_dir)
        rewind(run_dir / "metrics.jsonl", step)
        # closed by this ExitStack
        self.file = self.enter_context(open(run_dir / "metrics.jsonl", "a"))  # noqa: SIM115
        if tensorboard:
            from tensorboardX import SummaryWriter

            self.board = self.enter_context(SummaryWriter(str(run_dir / "tensorboard")))

    def write(self, record: dict) -> None:
        if self.file is None:
            return
        print(json.dumps(record), file=self.file, flush=True)
        for name, value in record.items() if self.board else ():
            if name not in ("step", "epoch") and isinstance(value, (int, float)):
                self.board.add_scalar(name, value, record["step"])
