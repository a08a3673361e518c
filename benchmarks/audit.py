"""`frost audit`'s engine: K runs vmapped in one compiled program against the same K runs one at a
time.

    python benchmarks/audit.py            # image-s, gpt-s, image-m, gpt-m; K = 3, 8, 24; 100 steps
    python benchmarks/audit.py --quick    # image-s; K = 3, 8; 50 steps
    python benchmarks/audit.py --devices 8   # the same K runs on 1 device and split over 8
    python benchmarks/audit.py --vs-train    # whole commands: an audit against `frost train` runs

Both sides are `frost.audit.engine.run_group` on the same K AdamW runs (K learning rates, seed 0):
"vmapped" trains them together (one program for K runs), "one at a time" trains them in turn
(the engine's sequential fallback: one program for one run, compiled once and reused). Each side
is compiled first (its compile time is reported), then timed as the best of `--repeats`. "with
compiles" adds the compile time as an audit pays it: once for the vmapped program, once per run
when each run is its own program (as K separate `frost train` runs would be).

`--devices N` forces N CPU devices (XLA_FLAGS, in a fresh process) and compares instead the K runs
as N batches trained one after another on one device against the same N batches trained at once,
one per device, as `--mesh runs=N` trains them (`engine.run_groups`): runs/s of each, and the
largest difference in final loss between them (0: the same programs, bit for bit). On a CPU the N
devices share its cores, so this measures what training batches side by side costs or gains
there, not a GPU's speed-up.

`--vs-train` times whole commands as a user meets them, cold (fresh FROST_CACHE: no compiled
programs, tokenizer or tokens) and warm: `frost audit --workload gpt --quick --optimizers adamw`
(18 AdamW runs of gpt-s, 100 steps each) against the same model, batch, steps and optimizer as
`frost train gpt` commands, one per run (3 of them: the first cold, then warm). It prints the
seconds per run of each and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Publisher, header

from frost.audit import engine, protocol, workloads


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def compare(wl, data, k, steps, repeats):
    engine._programs.clear()  # both sides compile afresh
    trials = protocol.grid("adamw", None, wl.lr)
    group = engine.Group([engine.Run(trials[i % len(trials)], 0, steps) for i in range(k)], {})
    # compiles, then trains once
    compile_k = timed(lambda: engine.run_group(wl, data, "adamw", group))
    compile_1 = timed(lambda: engine.run_group(wl, data, "adamw", engine.Group(group.runs[:1], {})))
    together = min(
        timed(lambda: engine.run_group(wl, data, "adamw", group)) for _ in range(repeats)
    )
    alone = min(
        timed(lambda: engine.run_group(wl, data, "adamw", group, max_runs=1))
        for _ in range(repeats)
    )
    compile_k, compile_1 = compile_k - together, compile_1 - alone / k
    return (
        f"| {wl.name} | {k} | {steps} | {k / together:.2f} | {k / alone:.2f} | "
        f"{alone / together:.2f} | {compile_k:.1f} | {compile_1:.1f} | "
        f"{(alone + k * compile_1) / (together + compile_k):.2f} |"
    )


def compare_mesh(wl, data, k, steps, repeats, mesh):
    engine._programs.clear()
    trials = protocol.grid("adamw", None, wl.lr)
    runs = [engine.Run(trials[i % len(trials)], 0, steps) for i in range(k)]
    per_device = -(-k // mesh.size)  # the K runs as (at most) one batch per device
    jobs = [("adamw", engine.Group(runs[i : i + per_device], {})) for i in range(0, k, per_device)]

    def train(m):
        return [run for batch in engine.run_groups(wl, data, jobs, mesh=m) for run in batch]

    results, seconds = {}, {}
    for side, m in (("one", None), ("mesh", mesh)):
        first = timed(lambda: results.setdefault(side, train(m)))
        seconds[side] = min(timed(lambda: train(m)) for _ in range(repeats))
        seconds[side + " compile"] = first - seconds[side]
    gap = max(
        abs(a["final_loss"] - b["final_loss"]) for a, b in zip(results["one"], results["mesh"])
    )
    return (
        f"| {wl.name} | {k} | {steps} | {k / seconds['one']:.2f} | {k / seconds['mesh']:.2f} | "
        f"{seconds['one'] / seconds['mesh']:.2f} | {seconds['one compile']:.1f} | "
        f"{seconds['mesh compile']:.1f} | {gap:.1e} |"
    )


def command(argv, cache) -> float:
    """Seconds of one whole `frost` command with FROST_CACHE=cache (its output hidden)."""
    env = {**os.environ, "FROST_CACHE": str(cache)}
    run = [sys.executable, "-m", "frost.cli", *argv]
    return timed(lambda: subprocess.run(run, check=True, capture_output=True, env=env))


def compare_train(trains: int = 3) -> list[str]:
    root = pathlib.Path(tempfile.mkdtemp())
    audit = ["audit", "--workload", "gpt", "--quick", "--optimizers", "adamw"]
    seconds = {}
    for side in ("cold", "warm"):  # the warm audit in a new --out: nothing to resume
        seconds[side] = command([*audit, "--out", str(root / side)], root / "audit-cache")
    runs = len(json.loads((root / "cold" / "results.json").read_text())["runs"])
    wl = workloads.WORKLOADS["gpt-s"]
    train = ["train", "gpt", "--dim", str(wl.width), "--depth", str(wl.depth), "--heads", "2"]
    train += ["--seq-len", str(workloads.SEQ_LEN), "--vocab-size", str(workloads.VOCAB)]
    train += ["--batch-size", str(wl.batch), "--max-steps", "100", "--lr", str(wl.lr)]
    train += ["--eval-every", "100"]  # one evaluation, at the end, as the audit's run has
    train += ["--token-cache", str(root / "tokens")]
    times = [
        command([*train, "--seed", str(i), "--out", str(root / f"train{i}")], root / "train-cache")
        for i in range(trains)
    ]
    warm = sorted(times[1:])[len(times[1:]) // 2]
    return [
        f"| cold | {seconds['cold'] / runs:.2f} | {times[0]:.2f} | "
        f"{seconds['cold'] / runs / times[0]:.3f} |",
        f"| warm | {seconds['warm'] / runs:.2f} | {warm:.2f} | "
        f"{seconds['warm'] / runs / warm:.3f} |",
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", help="also append the table to this file")
    parser.add_argument("--devices", type=int, help="compare 1 device with N (forced CPU devices)")
    parser.add_argument("--vs-train", action="store_true", help="an audit against frost train")
    args = parser.parse_args()
    if args.vs_train:
        text = (
            header("frost audit (18 runs) against the same runs as frost train commands")
            + "\n\n| caches | audit s per run | frost train s per run | audit/train |\n"
            + "| --- | ---: | ---: | ---: |\n"
            + "\n".join(compare_train())
        )
        print(text)
        return Publisher(args.out)(text, final=True)
    flags, force = os.environ.get("XLA_FLAGS", ""), "--xla_force_host_platform_device_count"
    if args.devices and force not in flags:  # a fresh process that sees N devices
        env = {**os.environ, "XLA_FLAGS": f"{flags} {force}={args.devices}"}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    names, ks, steps = (
        (["image-s"], (3, 8), 50)
        if args.quick
        else (["image-s", "gpt-s", "image-m", "gpt-m"], (3, 8, 24), 100)
    )
    mesh = engine.runs_mesh(f"runs={args.devices}") if args.devices else None
    columns = (
        f"1 device runs/s | {args.devices} devices runs/s | 1 device time / mesh time | "
        "compile s (1) | compile s (mesh) | max final-loss gap"
        if mesh
        else "vmapped runs/s | one at a time runs/s | vmapped/one at a time | compile s (K) | "
        "compile s (1) | with compiles"
    )
    lines = [
        f"| workload | K | steps | {columns} |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    data = {}
    for name in names:
        wl = workloads.WORKLOADS[name]
        if wl.kind not in data:
            data[wl.kind] = workloads.load(
                wl.kind, None, pathlib.Path(tempfile.mkdtemp()), progress=False
            )
        for k in ks:
            if mesh is None:
                lines.append(compare(wl, data[wl.kind], k, steps, args.repeats))
            else:
                lines.append(compare_mesh(wl, data[wl.kind], k, steps, args.repeats, mesh))
            print(lines[-1], file=sys.stderr, flush=True)
    text = (
        header(
            f"frost audit: K AdamW runs on 1 device vs split over {args.devices}, best of "
            f"{args.repeats}"
            if mesh
            else f"frost audit: K AdamW runs vmapped vs one at a time, best of {args.repeats}",
            libraries=("jax",),
        )
        + "\n\n"
        + "\n".join(lines)
    )
    print(text)
    Publisher(args.out)(text, final=True)


if __name__ == "__main__":
    main()
