"""The `frost` command line: `frost train`, `sample`, `plot`, `tokenizer`, `rl`, `audit`.

Each topic registers its subcommands from its own `cli.py` (`add_commands(subparsers)`), which
parses arguments and calls the library; nothing in `frost/` imports this module.

Errors: a user's mistake (`frost.config.UsageError`: a bad flag, missing or too-small data, a
stale run directory) prints one line, `frost: error: ...`, and exits 2; other `FrostError`s (a
diverged run, a failed data worker) print their message and exit 1. `--debug` (anywhere on the
line) or FROST_DEBUG=1 shows the traceback instead.

Memory: the command runs with glibc's malloc backing its memory by transparent huge pages; see
`huge_pages`. Convolutions on a CPU: XLA compiles them itself, not YNNPACK; see `cpu_convolutions`.
"""

import argparse
import importlib
import os
import sys
import traceback

from frost.config import FrostError, UsageError

# each has add_commands(subparsers)
TOPICS = ("frost.train.cli", "frost.text.cli", "frost.rl.cli", "frost.audit.cli")


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="frost",
        description="Frost: a readable deep-learning stack on JAX. "
        "Add --debug to any command to see tracebacks.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for topic in TOPICS:
        importlib.import_module(topic).add_commands(sub)
    return parser


def compilation_cache() -> str:
    """Keep XLA's compiled programs on disk, so every command's second run (and every later one
    with the same shapes: a restarted audit, a second agent) skips compiling: in $FROST_CACHE/jax
    (default ~/.cache/frost/jax). Set once for every command through JAX's own environment
    variables, which jax reads when a command first imports it: a command that never compiles
    (`frost tokenizer train`, `frost --help`) never imports jax. A JAX_COMPILATION_CACHE_DIR you
    set yourself is kept.

    Returns:
        The cache folder in use.
    """
    default = os.path.join(
        os.environ.get("FROST_CACHE", os.path.expanduser("~/.cache/frost")), "jax"
    )
    path = os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", default)
    seconds = os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
    if (jax := sys.modules.get("jax")) is not None:  # main() called by a program that imported jax
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", float(seconds))
    return path


# YNNPACK, XLA:CPU's default library for convolutions in jaxlib 0.10, off for convolutions alone
CPU_CONVOLUTIONS = "--xla_cpu_experimental_ynn_fusion_type=-individual_convolution"


def cpu_convolutions() -> None:
    """Have XLA:CPU compile convolutions itself instead of handing each to YNNPACK.

    jaxlib 0.10.2 gives every convolution to YNNPACK, whose backward passes are slow on x86 CPUs
    (and which refuses convolutions of 16 channels or fewer). With YNNPACK's individual
    convolutions turned off, XLA's own (Eigen) convolutions run: a CIFAR ResNet-18 training step
    took 2.9 s instead of 5.9 s, a ResNet-20 step 433 instead of 654 ms, and a 64-channel 3x3
    convolution's forward and backward 162 instead of 470 ms (docs/benchmarks.md, 2026-12-07,
    2-core Intel Xeon); models without convolutions are unchanged. Set here, for every command,
    through XLA_FLAGS before jax starts; an XLA_FLAGS that already names the option is kept. Your
    own scripts get the same by starting with `XLA_FLAGS=` and `CPU_CONVOLUTIONS`'s value.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_experimental_ynn_fusion_type" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {CPU_CONVOLUTIONS}".strip()


HUGE_PAGES = "glibc.malloc.hugetlb=1"


def huge_pages() -> None:
    """Re-execute this program once with glibc's malloc on transparent huge pages.

    XLA's CPU runtime allocates its large temporaries at every step and frees them after; glibc
    returns them to the kernel, and the next step faults them in again 4 KiB at a time (about
    140k page faults, a fifth of a small GPT's step, a quarter of ResNet-20's). With the
    `glibc.malloc.hugetlb=1` tunable the same memory comes back in 2 MiB pages. glibc reads its
    tunables only when a process starts, so this sets GLIBC_TUNABLES and replaces the process
    with a fresh copy of itself (before jax is imported; once: the variable is then set). A
    no-op off Linux, where the tunable is already set, or where FROST_NO_HUGE_PAGES=1; other C
    libraries ignore the variable. Your own scripts get the same by starting with
    `GLIBC_TUNABLES=glibc.malloc.hugetlb=1 python ...`.
    """
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if (
        sys.platform != "linux"
        or "glibc.malloc.hugetlb" in tunables
        or os.environ.get("FROST_NO_HUGE_PAGES") == "1"
    ):
        return
    env = {**os.environ, "GLIBC_TUNABLES": ":".join(filter(None, (tunables, HUGE_PAGES)))}
    sys.stdout.flush(), sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # run as the `frost` program, not called from Python
        huge_pages()
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv or os.environ.get("FROST_DEBUG") == "1"
    parser = _build_parser()
    args = parser.parse_args([a for a in argv if a != "--debug"])
    if getattr(args, "run", None) is None:
        parser.print_help()
        return 0
    compilation_cache()
    cpu_convolutions()
    try:
        return args.run(args) or 0
    except FrostError as e:
        if debug:
            raise
        line, code = f"frost: error: {e}", 2 if isinstance(e, UsageError) else 1
    except KeyboardInterrupt:
        line, code = "frost: interrupted", 130
    except Exception as e:
        # a run spans processes only if the command imported frost.parallel (and with it, jax)
        parallel = sys.modules.get("frost.parallel")
        if parallel is None or (lost := parallel.failure(e)) is None:
            raise
        if debug:
            traceback.print_exc()
        line, code = f"frost: error: {lost}", 1
    print(line, file=sys.stderr)
    if (parallel := sys.modules.get("frost.parallel")) is not None:
        parallel.exit_now(code)  # many processes: now, so the others see this one go within seconds
    return code


if __name__ == "__main__":
    sys.exit(main())
