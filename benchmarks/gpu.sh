#!/usr/bin/env bash
# Issue 6's GPU benchmark, for one NVIDIA GPU (written for an H200), in under 5 minutes:
#
#   bash benchmarks/gpu.sh                 # prints everything
#   OUT=/some/dir bash benchmarks/gpu.sh   # also writes the tables to $OUT/gpu.txt, the full log to $OUT/gpu.log
#
# 1. The reference workload of Frost's first benchmark: ResNet-20 (CIFAR, option-A shortcuts),
#    batch 32, 300 training steps end to end in a fresh process, data loading included
#    (Frost: frost.data.Loader over random uint8 images; PyTorch: DataLoader over a TensorDataset).
# 2. Training-step throughput at batch 256, fp32 then bf16 (parameters and inputs cast): the CIFAR
#    ResNet-18 for Frost, PyTorch eager (NCHW, channels_last), torch.compile, Equinox + Optax and
#    plain JAX; then ResNet-20 for Frost and the PyTorch modes.
#
# Runs offline: it needs python3 with JAX (CUDA), PyTorch (CUDA), Triton, Equinox, Optax, NumPy,
# tqdm and safetensors already installed, and installs this repository with --no-deps.
# Each part has a time budget: rows that do not fit say "skipped" in their table (compilation,
# torch.compile especially, is most of the time). PYTHON, DEADLINE (seconds, default 290) and
# WORKERS (data-loader workers, default 4) can be set from outside.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
DEADLINE=${DEADLINE:-290}
WORKERS=${WORKERS:-4}
if [[ -n "${OUT:-}" ]]; then
  mkdir -p "$OUT"
  TXT="$OUT/gpu.txt" LOG="$OUT/gpu.log"
else
  TXT=/dev/null LOG=/dev/null
fi
: >"$TXT"

export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # works even if the install below fails
export JAX_PLATFORMS=cuda
# JAX and PyTorch share the GPU inside one process: JAX preallocates this fraction, PyTorch's
# caching allocator takes what it needs from the rest.
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.45}
export TOKENIZERS_PARALLELISM=false

left() { echo $((DEADLINE - SECONDS)); }

# run SECONDS ARGS...: benchmarks/resnet.py with a soft budget (no new peer starts after it) and a
# hard stop 30 s later (SIGINT: the script prints the rows it has; SIGKILL 15 s after that).
run() {
  local soft=$1 hard
  shift
  hard=$(($(left) - 5))
  ((hard > soft + 30)) && hard=$((soft + 30))
  if ((hard < 20)); then
    echo "== skipped (time is up): resnet.py $*" | tee -a "$TXT"
    return 0
  fi
  echo "== $(date -u +%H:%M:%S) python benchmarks/resnet.py $* --budget $soft   (hard stop ${hard} s)"
  timeout -s INT -k 15 "$hard" "$PY" benchmarks/resnet.py "$@" --budget "$soft" --out "$TXT"
  local rc=$?
  ((rc)) && echo "== resnet.py exited with $rc" | tee -a "$TXT"
  return 0
}

main() {
  {
    echo "== Frost GPU benchmark (benchmarks/gpu.sh), $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "nvidia-smi failed"
    echo
  } | tee -a "$TXT"
  timeout 120 "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null 2>&1 \
    || echo "(pip install -e . failed; using PYTHONPATH=$PWD)"

  # 1. The reference workload: two fresh processes, about 15-40 s each.
  run 70 --workload e2e --device gpu --models resnet20 --batch-size 32 --dtype fp32 \
    --e2e-steps 300 --workers "$WORKERS"

  # 2. Step throughput; peers start in order (cifar_resnet18 fp32, bf16, then resnet20 fp32, bf16)
  # until the budget is spent, leaving room for the last one's compilation.
  run $(($(left) - 50)) --device gpu --batch-size 256 --dtype fp32,bf16 \
    --models cifar_resnet18,resnet20 --steps 7 --inner 5 --warmup 3

  echo "== done in ${SECONDS} s" | tee -a "$TXT"
}

main 2>&1 | tee "$LOG"
