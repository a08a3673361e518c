"""Helpers shared by benchmarks/*.py: timing, the machine's description, and the result table.

    timing = measure(step, sync, warmup=2, steps=5)   # step() -> out; sync(out) -> loss (a float)
    rows.append(Row("resnet20", "Frost", batch, timing))
    print(header("ResNet training step", device="cpu"), table(rows), sep="\n\n")

Timing: the first call (tracing and compilation for jitted code, plus one step) is timed on its
own, then `warmup` untimed calls, then `steps` timed samples of `inner` calls each, each sample
ending with `sync` (which must wait for the device: `jax.block_until_ready`,
`torch.cuda.synchronize`). A step's time is the median sample divided by `inner`; "compile s"
is the first call's time less one median step.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
import traceback

from frost.cli import cpu_convolutions, huge_pages

# every row, Frost's and its peers', runs under the malloc and XLA settings of the `frost` command
huge_pages()
cpu_convolutions()
LOAD_AT_START = os.getloadavg()[0] if hasattr(os, "getloadavg") else None


@dataclasses.dataclass
class Timing:
    first_s: float  # the first call: compilation + one step
    samples_s: list  # seconds per step, one per timed sample
    loss: float | None = None  # the loss of the last timed step

    @property
    def step_s(self) -> float:
        return statistics.median(self.samples_s)

    @property
    def compile_s(self) -> float:
        return max(self.first_s - self.step_s, 0.0)


def measure(step, sync, *, warmup: int = 2, steps: int = 5, inner: int = 1) -> Timing:
    """Time `step()` as the module docstring says; `sync(out)` waits for `out` and returns its
    loss."""
    t0 = time.perf_counter()
    sync(step())
    first = time.perf_counter() - t0
    for _ in range(warmup):
        sync(step())
    samples, loss = [], None
    for _ in range(max(steps, 1)):
        t0 = time.perf_counter()
        for _ in range(inner):
            out = step()
        loss = sync(out)
        samples.append((time.perf_counter() - t0) / inner)
    return Timing(first, samples, None if loss is None else float(loss))


def jax_wait(out) -> None:
    """A `sync` for jitted JAX code without a loss: wait for `out` on the device."""
    import jax

    jax.block_until_ready(out)


def measure_torch(loss_fn, opt, device, args) -> Timing:
    """`measure` a PyTorch training step: zero the grads, `loss_fn()`, backward, `opt.step()`;
    `args` gives warmup, steps and inner."""
    import torch

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn()
        loss.backward()
        opt.step()
        return loss

    def sync(loss):
        if device.type == "cuda":
            torch.cuda.synchronize()
        return loss.item()

    return measure(step, sync, warmup=args.warmup, steps=args.steps, inner=args.inner)


@dataclasses.dataclass
class Row:
    model: str
    framework: str
    batch: int  # images per step
    timing: Timing | None = None
    error: str | None = None  # set instead of timing when the peer failed
    baseline: bool = False  # the row the ratios are relative to (one per model)

    @property
    def images_per_s(self) -> float | None:
        return None if self.timing is None else self.batch / self.timing.step_s


def attempt(rows: list, model: str, framework: str, batch: int, fn, baseline: bool = False) -> Row:
    """Run `fn() -> Timing` and append its row; an exception becomes the row's error and is
    printed."""
    print(f"[{model}] {framework} ...", file=sys.stderr, flush=True)
    try:
        row = Row(model, framework, batch, fn(), baseline=baseline)
        t = row.timing
        print(
            f"[{model}] {framework}: {row.images_per_s:.1f}/s, first call {t.first_s:.1f} s, "
            f"loss {t.loss:.4f}",
            file=sys.stderr,
            flush=True,
        )
    except Exception as e:
        traceback.print_exc()
        row = Row(
            model, framework, batch, error=one_line(f"{type(e).__name__}: {e}"), baseline=baseline
        )
    rows.append(row)
    return row


def one_line(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split()).replace("|", "/")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def table(rows: list, unit: str = "img/s") -> str:
    """A markdown table; frost/peer is Frost's throughput over the row's, for the same model.
    `unit` names what Row.batch counts per step (images, tokens)."""
    out = [
        f"| model | framework | {unit} | ms/step | compile s | loss | frost/peer |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    base = {r.model: r.images_per_s for r in rows if r.baseline and r.images_per_s}
    for r in rows:
        if r.timing is None:
            out.append(f"| {r.model} | {r.framework} | {status(r.error)} | | | | |")
            continue
        ratio = f"{base[r.model] / r.images_per_s:.2f}" if r.model in base else "n/a"
        loss = f"{r.timing.loss:.4f}" if r.timing.loss is not None else ""
        out.append(
            f"| {r.model} | {r.framework} | {r.images_per_s:.1f} | {1e3 * r.timing.step_s:.1f} | "
            f"{r.timing.compile_s:.1f} | {loss} | {ratio} |"
        )
    return "\n".join(out)


def status(error: str) -> str:
    return error if error.startswith(("skipped", "interrupted")) else f"failed: {error}"


def cpu_model() -> str:
    try:
        for line in subprocess.run(
            ["lscpu"], capture_output=True, text=True, timeout=10
        ).stdout.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return platform.processor() or platform.machine()


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def versions(*names) -> str:
    found = []
    for name in names:
        module = sys.modules.get(name)
        if module is None:
            try:
                module = __import__(name)
            except Exception:
                continue
        found.append(f"{name} {getattr(module, '__version__', None) or _installed(name)}")
    return ", ".join(found)


def _installed(name: str) -> str:
    """The installed distribution's version, for a module without __version__ (gymnax,
    minatar), else '?'."""
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def load() -> str:
    """The 1-minute load average at import and now: other work on the machine skews timings."""
    if LOAD_AT_START is None:
        return ""
    return f"; load average {LOAD_AT_START:.1f} at start, {os.getloadavg()[0]:.1f} at end"


def command() -> str:
    return "python " + " ".join(shlex.quote(a) for a in sys.argv)


def header(title: str, gpu: str | None = None, libraries=()) -> str:
    """Title, date, machine (lscpu model name and cores, the GPU if any), library versions,
    command."""
    machine = f"{cpu_model()}, {cores()} cores" + (f"; GPU: {gpu}" if gpu else "")
    lines = [
        f"### {title}",
        "",
        f"- date: {datetime.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}",
        f"- machine: {machine}" + load(),
        f"- python {platform.python_version()}"
        + (f", {versions(*libraries)}" if libraries else ""),
        f"- command: `{command()}`"
        + (f" (GLIBC_TUNABLES={t})" if (t := os.environ.get("GLIBC_TUNABLES")) else "")
        + (f" (XLA_FLAGS={x})" if (x := os.environ.get("XLA_FLAGS")) else ""),
    ]
    return "\n".join(lines)


class Publisher:
    """--out FILE: after each row, the report so far replaces this run's part of FILE (what was in
    it before stays), so a run that is killed still leaves the rows it measured."""

    def __init__(self, path):
        self.path = path
        if path and not os.path.exists(path):
            open(path, "w").close()
        self.start = os.path.getsize(path) if path and os.path.isfile(path) else None

    def __call__(self, report, final=False):
        if not self.path:
            return
        # not a regular file (/dev/null, a pipe): write the final report only
        if self.start is None:
            if final:
                with open(self.path, "a") as f:
                    f.write(report + "\n\n")
            return
        with open(self.path, "r+") as f:
            f.seek(self.start)
            f.truncate()
            f.write(report + "\n\n")
