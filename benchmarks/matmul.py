"""Square matmul throughput: Frost's path (`a @ b` under jax.jit, as frost.nn.Linear computes it)
beside NumPy (OpenBLAS) and PyTorch, float32 and bfloat16, against this machine's estimated peak.

    flock /tmp/frost-bench.lock python benchmarks/matmul.py            # n = 256, 1024, 2048, 4096
    flock /tmp/frost-bench.lock python benchmarks/matmul.py --quick    # n = 256, 1024

GFLOP/s = 2 n^3 / seconds, the median of 5 timings of a loop that runs at least 0.3 s (0.1 s with
--quick), inputs drawn from N(0, 1). NumPy runs in a subprocess with OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE removed from its environment (some machines set them to work around old
OpenBLAS builds; they slow a current one), and the kernel OpenBLAS then picked, as threadpoolctl
reports it, is printed. NumPy has no bfloat16 BLAS (ml_dtypes' bfloat16 falls back to a scalar
loop), so it has float32 rows only. Peak = cores x clock x FMA units x lanes x 2 flops, from
/proc/cpuinfo: lanes = vector bits / 32 (AVX-512: 512, AVX2: 256, else 128); 2 FMA units per core
is an assumption (true of Intel since Haswell and AMD since Zen 2; Zen 4 runs AVX-512 on them
at half rate, so it counts 256 bits there). bfloat16 peak: twice float32 with avx512_bf16 or AMX,
else the float32 peak (the arithmetic then happens in float32). The error column: the largest
|Frost result - float64 product of the float32 inputs| over the largest |product|. Needs
threadpoolctl.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

NUMPY_RUN = r"""
import json, sys, time, statistics
import numpy as np
from threadpoolctl import threadpool_info
ns, budget = json.loads(sys.argv[1]), float(sys.argv[2])
rng = np.random.default_rng(0)
out = {"blas": threadpool_info()}
for n in ns:
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    a @ b
    reps, t = 1, 0.0
    while t < budget:
        t0 = time.perf_counter()
        for _ in range(reps):
            a @ b
        t = time.perf_counter() - t0
        reps *= 2
    reps //= 2
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            a @ b
        times.append((time.perf_counter() - t0) / reps)
    out[str(n)] = statistics.median(times)
print(json.dumps(out))
"""


def seconds_per_call(fn, budget: float) -> float:
    """Median time of one call, from 5 timings of a loop long enough to take `budget` seconds."""
    fn()
    reps, t = 1, 0.0
    while t < budget:
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        t = time.perf_counter() - start
        reps *= 2
    reps //= 2
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        times.append((time.perf_counter() - start) / reps)
    return statistics.median(times)


def cpu_info() -> dict:
    info = {
        "model": platform.processor() or platform.machine(),
        "vendor": "",
        "mhz": None,
        "flags": set(),
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "model name":
                    info["model"] = value
                elif key == "vendor_id":
                    info["vendor"] = value
                elif key == "cpu MHz" and info["mhz"] is None:
                    info["mhz"] = float(value)
                elif key == "flags" and not info["flags"]:
                    info["flags"] = set(value.split())
    except OSError:
        pass
    return info


def peak_gflops(info: dict, cores: int) -> tuple[float | None, float | None, str]:
    flags, mhz = info["flags"], info["mhz"]
    if not mhz or "fma" not in flags:
        return None, None, "peak unknown (no clock or no FMA in /proc/cpuinfo)"
    intel = info["vendor"] == "GenuineIntel"
    bits = (
        512
        if "avx512f" in flags and intel
        else 256
        if "avx2" in flags or "avx512f" in flags
        else 128
    )
    fp32 = cores * mhz / 1e3 * 2 * (bits // 32) * 2
    fast_bf16 = "avx512_bf16" in flags or "amx_bf16" in flags
    how = (
        f"{cores} cores x {mhz / 1e3:.2f} GHz x 2 FMA units x {bits // 32} lanes ({bits}-bit) x 2 "
        "flops; bfloat16 "
        f"{'2x (avx512_bf16/AMX)' if fast_bf16 else 'as float32 (no avx512_bf16/AMX)'}"
    )
    return fp32, fp32 * (2 if fast_bf16 else 1), how


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 256 and 1024, shorter timings")
    args = parser.parse_args(argv)
    ns = [256, 1024] if args.quick else [256, 1024, 2048, 4096]
    budget = 0.1 if args.quick else 0.3
    cores = os.cpu_count() or 1
    env = {
        k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
    }
    done = subprocess.run(
        [sys.executable, "-c", NUMPY_RUN, json.dumps(ns), str(budget)],
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"the NumPy measurement failed:\n{done.stderr[-2000:]}")
    numpy_times = json.loads(done.stdout)

    import jax
    import jax.numpy as jnp
    import torch

    torch.set_num_threads(cores)
    # Frost's matmul path: frost.nn.Linear is `x @ self.weight` under jit
    dot = jax.jit(lambda a, b: a @ b)
    rng = np.random.default_rng(0)
    rows, rate, skipped = [], {}, []
    for dtype in ("float32", "bfloat16"):
        for n in ns:
            a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
            ja, jb = jnp.asarray(a, dtype), jnp.asarray(b, dtype)
            ta, tb = (
                torch.from_numpy(a).to(getattr(torch, dtype)),
                torch.from_numpy(b).to(getattr(torch, dtype)),
            )
            ref = a.astype(np.float64) @ b.astype(np.float64)
            err = float(np.abs(np.asarray(dot(ja, jb), np.float64) - ref).max() / np.abs(ref).max())
            flops = 2 * n**3
            calls = {
                "frost (jnp @ under jit)": lambda: dot(ja, jb).block_until_ready(),
                "PyTorch": lambda: torch.matmul(ta, tb),
            }
            t = {}
            for (
                lib,
                call,
            ) in calls.items():  # a library far below peak at n/2 would take minutes here: skipped
                measured, at = rate.get((dtype, lib), (1e12, 0))
                if not lib.startswith("frost") and flops / measured > 20:
                    skipped.append(
                        f"{lib} {dtype} n={n}: skipped (over 20 s a call at {measured / 1e9:.1f} "
                        f"GFLOP/s, its rate at n={at})"
                    )
                    continue
                t[lib] = seconds_per_call(call, budget)
                rate[(dtype, lib)] = flops / t[lib], n
            if dtype == "float32":
                t["NumPy (OpenBLAS)"] = numpy_times[str(n)]
            frost_t = t["frost (jnp @ under jit)"]
            for lib, s in t.items():
                rows.append(
                    (
                        dtype,
                        n,
                        lib,
                        flops / s / 1e9,
                        frost_t / s,
                        err if lib.startswith("frost") else None,
                        os.getloadavg()[0],
                    )
                )
                print(rows[-1], file=sys.stderr, flush=True)
    info = cpu_info()
    fp32_peak, bf16_peak, how = peak_gflops(info, cores)
    blas = [
        f"{b.get('internal_api')} {b.get('version')} kernel {b.get('architecture')}, "
        f"{b.get('num_threads')} threads"
        for b in numpy_times["blas"]
        if b.get("user_api") == "blas"
    ]
    print(
        "\n`flock /tmp/frost-bench.lock python benchmarks/matmul.py "
        f"{' '.join(argv or sys.argv[1:])}`".rstrip()
    )
    print(
        f"{info['model']}, {cores} cores, jax {jax.__version__}, torch {torch.__version__}, numpy "
        f"{np.__version__}; NumPy's BLAS (OPENBLAS_CORETYPE/L2_SIZE unset): "
        f"{'; '.join(blas) or 'not reported'}"
    )
    print(
        f"peak: {how} = "
        + (
            f"{fp32_peak:.0f} GFLOP/s float32, {bf16_peak:.0f} bfloat16\n"
            if fp32_peak
            else "unknown\n"
        )
    )
    print(
        "| dtype | n | library | GFLOP/s | % of peak | frost/peer time | frost max rel. error vs "
        "float64 | load |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for dtype, n, lib, gflops, ratio, err, load in rows:
        peak = fp32_peak if dtype == "float32" else bf16_peak
        share = f"{100 * gflops / peak:.0f}%" if peak else "-"
        error = "-" if err is None else f"{err:.1e}"
        row = [dtype, n, lib, f"{gflops:.1f}", share, f"{ratio:.2f}", error, f"{load:.1f}"]
        print("| " + " | ".join(map(str, row)) + " |")
    for line in skipped:
        print(f"- {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
