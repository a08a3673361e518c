"""Each `frost` command as a new user meets it, as a whole process: cold (the first run after
install) and warm, beside the peers' commands on the same text.

    flock /tmp/frost-bench.lock python benchmarks/coldstart.py            # all, 3 repeats (train 1)
    flock /tmp/frost-bench.lock python benchmarks/coldstart.py --quick    # --help and tokenizers

cold: a fresh copy of the frost package (no __pycache__: no bytecode, no numba cache beside
merge.py) run with fresh NUMBA_CACHE_DIR and FROST_CACHE (frost train's JAX compilation cache,
also given as JAX_COMPILATION_CACHE_DIR) folders; each command gets its own copy. warm: the same
command again, caches kept. For the training commands, "warm, no JAX cache" keeps Python's and
numba's caches but starts with an empty JAX cache: warm minus it is what the persistent compilation
cache saves. Peers run as fresh processes (they keep no caches, so each run is a cold one): HF
tokenizers' BpeTrainer with the same regex and byte-level alphabet, and SentencePiece BPE through
its Python API (what spm_train runs; its own whitespace pre-tokenisation). The tokenizer commands
use the King James Bible (4.1 MB) at vocabulary 8192. Times are medians over --repeats; runs are
interleaved, and the load average is printed with each row, since other work on the machine slows
every run; CPU seconds (user + system, the command's worker processes included) are less sensitive
to that.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import frost
from frost.text import GPT4_PATTERN, kjv_text

PY = sys.executable
HF_TRAIN = f"""
import sys
from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex({GPT4_PATTERN!r}), "isolated"),
    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
])
tok.train([sys.argv[1]], trainers.BpeTrainer(vocab_size=int(sys.argv[2]), show_progress=False,
                                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
tok.save(sys.argv[3])
"""
HF_ENCODE = """
import sys, numpy as np
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
with open(sys.argv[2], encoding="utf-8") as f:
    lines = f.read().splitlines(keepends=True)
ids = [i for e in tok.encode_batch(lines) for i in e.ids]
np.asarray(ids, np.uint16).tofile(sys.argv[3])
"""
SP_TRAIN = """
import os, sys
import sentencepiece as spm
spm.SentencePieceTrainer.train(
    input=sys.argv[1], model_prefix=sys.argv[3], model_type="bpe", vocab_size=int(sys.argv[2]),
    byte_fallback=True, character_coverage=1.0, num_threads=os.cpu_count(), minloglevel=2,
)
"""
SP_ENCODE = """
import sys, numpy as np
import sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
with open(sys.argv[2], encoding="utf-8") as f:
    lines = f.read().splitlines()
np.asarray([i for ids in sp.encode(lines) for i in ids], np.uint16).tofile(sys.argv[3])
"""


class Sandbox:
    """A fresh copy of a frost package folder and fresh cache folders: a first run after install."""

    def __init__(self, source: pathlib.Path, root: pathlib.Path, name: str):
        self.dir = pathlib.Path(tempfile.mkdtemp(dir=root, prefix=f"{name}-"))
        shutil.copytree(source, self.dir / "frost", ignore=shutil.ignore_patterns("__pycache__"))
        self.fresh_jax_cache()

    def fresh_jax_cache(self):
        self.jax = tempfile.mkdtemp(dir=self.dir, prefix="jax-")

    def env(self) -> dict:
        """The environment: a user's (Python writes bytecode), with this copy first and these
        caches."""
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        return {
            **env,
            "PYTHONPATH": str(self.dir),
            "NUMBA_CACHE_DIR": str(self.dir / "numba"),
            "FROST_CACHE": self.jax,
            "JAX_COMPILATION_CACHE_DIR": self.jax,
        }


def run(argv: list[str], box: Sandbox | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and its children) `argv` takes, run in `box` (its
    folder is the working directory, so that `python -m frost.cli` imports its copy, and its
    environment), else here."""
    cpu = _children_cpu()
    start = time.perf_counter()
    done = subprocess.run(
        argv, env=box and box.env(), cwd=box and box.dir, capture_output=True, text=True
    )
    seconds, cpu = time.perf_counter() - start, _children_cpu() - cpu
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds, cpu


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def frost_cmd(*args) -> list[str]:
    return [PY, "-m", "frost.cli", *args]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="--help and the tokenizer commands only"
    )
    parser.add_argument(
        "--repeats", type=int, default=None, help="default 3 (2 with --quick); train commands 1"
    )
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument(
        "--frost",
        action="append",
        metavar="LABEL=FOLDER",
        default=[],
        help="a frost package folder to copy, under a label (repeatable; default: frost=the one "
        "imported here); e.g. before=/tmp/old/frost for interleaved before/after numbers",
    )
    args = parser.parse_args(argv)
    versions = dict(v.split("=", 1) for v in args.frost) or {
        "frost": pathlib.Path(frost.__file__).parent
    }
    first = next(iter(versions))
    reps = args.repeats or (2 if args.quick else 3)
    root = pathlib.Path(tempfile.mkdtemp(prefix="frost-coldstart-"))
    corpus = root / "kjv.txt"
    corpus.write_text(kjv_text(), encoding="utf-8")
    for name, code in (
        ("hf_train.py", HF_TRAIN),
        ("hf_encode.py", HF_ENCODE),
        ("sp_train.py", SP_TRAIN),
        ("sp_encode.py", SP_ENCODE),
    ):
        (root / name).write_text(code)
    v, times, loads = str(args.vocab_size), {}, {}
    tok, hf, sp, out = root / "tok.json", root / "hf.json", root / "sp", str(root / "ids.bin")

    def note(cmd, run_name, wall_cpu):
        times.setdefault((cmd, run_name), []).append(wall_cpu)
        loads.setdefault(cmd, []).append(os.getloadavg()[0])

    # each command's first run is its own: a fresh copy per command
    def cold_warm(cmd, label, source, cli_args):
        box = Sandbox(pathlib.Path(source), root, label)
        for mode in ("cold", "warm"):
            note(cmd, f"{label} {mode}", run(frost_cmd(*cli_args), box))

    try:
        # interleaved: each frost version cold and warm, then the peers, every repeat
        for _rep in range(reps):
            for label, source in versions.items():
                cold_warm("frost --help", label, source, ["--help"])
            note("frost --help", "python -c pass", run([PY, "-c", "pass"]))
            train_argv = ["tokenizer", "train", str(corpus), "--vocab-size", v, "-o", str(tok)]
            for label, source in versions.items():
                cold_warm("frost tokenizer train", label, source, train_argv)
            peer = [PY, str(root / "hf_train.py"), str(corpus), v, str(hf)]
            note("frost tokenizer train", "HF tokenizers", run(peer))
            note(
                "frost tokenizer train",
                "SentencePiece",
                run([PY, str(root / "sp_train.py"), str(corpus), v, str(sp)]),
            )
            encode_argv = ["tokenizer", "encode", "--tokenizer", str(tok), str(corpus), "-o", out]
            for label, source in versions.items():
                cold_warm("frost tokenizer encode", label, source, encode_argv)
            note(
                "frost tokenizer encode",
                "HF tokenizers",
                run([PY, str(root / "hf_encode.py"), str(hf), str(corpus), out]),
            )
            peer = [PY, str(root / "sp_encode.py"), f"{sp}.model", str(corpus), out]
            note("frost tokenizer encode", "SentencePiece", run(peer))
        if not args.quick:
            jobs = {
                "frost train resnet20": [
                    "resnet20",
                    "--limit",
                    "512",
                    "--batch-size",
                    "64",
                    "--max-steps",
                    "3",
                    "--workers",
                    "0",
                ],
                "frost train gpt": [
                    "gpt",
                    "--limit",
                    "100000",
                    "--max-steps",
                    "3",
                ],
            }
            for _rep in range(args.repeats or 1):
                for name, job in jobs.items():
                    for label, source in versions.items():
                        box = Sandbox(pathlib.Path(source), root, label)
                        for i, mode in enumerate(("cold", "warm, no JAX cache", "warm")):
                            if mode == "warm, no JAX cache":
                                keep = box.jax
                                box.fresh_jax_cache()
                            elif mode == "warm":
                                box.jax = keep
                            command = frost_cmd("train", *job, "--out", str(box.dir / f"run{i}"))
                            note(name, f"{label} {mode}", run(command, box))
    finally:
        shutil.rmtree(root, ignore_errors=True)

    med = {k: statistics.median(w for w, _ in t) for k, t in times.items()}
    cpu = {k: statistics.median(c for _, c in t) for k, t in times.items()}
    print(
        "\n`flock /tmp/frost-bench.lock python benchmarks/coldstart.py "
        f"{' '.join(argv or sys.argv[1:])}`".rstrip()
    )
    print(
        f"{_cpu()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}; medians of {reps} "
        f"runs (train commands: {args.repeats or 1}); vocabulary {v} on the KJV (4.1 MB). Ratios: "
        f"{first}'s time over this run's (below 1: {first} is faster)\n"
    )
    print(
        f"| command | run | seconds | CPU seconds | {first} cold / this | {first} warm / this | "
        "load (1 min) |"
    )
    print("|---|---|---|---|---|---|---|")
    for cmd in dict.fromkeys(k[0] for k in med):
        cold, warm = med[(cmd, f"{first} cold")], med[(cmd, f"{first} warm")]
        for (c, name), s in med.items():
            if c == cmd:
                print(
                    f"| `{cmd}` | {name} | {s:.2f} | {cpu[(c, name)]:.2f} | {cold / s:.2f} | "
                    f"{warm / s:.2f} | {statistics.median(loads[cmd]):.1f} |"
                )
    return 0


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(
                line.split(":", 1)[1].strip() for line in f if line.startswith("model name")
            )
    except (OSError, StopIteration):
        return "unknown CPU"


if __name__ == "__main__":
    sys.exit(main())
