"""`frost audit`'s engine: K runs vmapped in one compiled program against the same K runs one at a
time.

    python benchmarks/audit.py            # image-s, gpt-s, image-m, gpt-m; K = 3, 8, 24; 100 steps
    python benchmarks/audit.py --quick    # image-s; K = 3, 8; 50 steps

Both sides are `frost.audit.engine.run_group` on the same K AdamW runs (K learning rates, seed 0):
"vmapped" trains them together (one program for K runs), "one at a time" trains them in turn
(the engine's sequential fallback: one program for one run, compiled once and reused). Each side
is compiled first (its compile time is reported), then timed as the best of `--repeats`. "with
compiles" adds the compile time as an audit pays it: once for the vmapped program, once per run
when each run is its own program (as K separate `frost train` runs would be).
"""

from __future__ import annotations

import argparse
import os
import pathlib
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", help="also append the table to this file")
    args = parser.parse_args()
    names, ks, steps = (
        (["image-s"], (3, 8), 50)
        if args.quick
        else (["image-s", "gpt-s", "image-m", "gpt-m"], (3, 8, 24), 100)
    )
    lines = [
        "| workload | K | steps | vmapped runs/s | one at a time runs/s | vmapped/one at a time | "
        "compile s (K) | compile s (1) | with compiles |",
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
            lines.append(compare(wl, data[wl.kind], k, steps, args.repeats))
            print(lines[-1], file=sys.stderr, flush=True)
    text = (
        header(
            f"frost audit: K AdamW runs vmapped vs one at a time, best of {args.repeats}",
            libraries=("jax",),
        )
        + "\n\n"
        + "\n".join(lines)
    )
    print(text)
    Publisher(args.out)(text, final=True)


if __name__ == "__main__":
    main()
