#!/usr/bin/env bash
# Frost's GPU benchmarks (issues 6 and 7), for one NVIDIA GPU (written for an H200), in about 5 minutes:
#
#   bash benchmarks/gpu.sh                 # prints everything
#   OUT=/some/dir bash benchmarks/gpu.sh   # also writes the tables to $OUT/gpu.txt, the full log to $OUT/gpu.log
#   PARTS="attention gpt" bash benchmarks/gpu.sh    # only some parts
#
# Parts, in order, each with its own time budget (seconds, overridable: E2E_S, STEP_S, ATTN_S, GPT_S):
# 1. e2e (80 s): the reference workload of Frost's first benchmark: ResNet-20 (CIFAR, option-A
#    shortcuts), batch 32, 300 training steps end to end in a fresh process, data loading included
#    (Frost: frost.data.Loader over random uint8 images; PyTorch: DataLoader over a TensorDataset).
# 2. step (75 s): ResNet training-step throughput at batch 256, fp32 then bf16 (parameters and
#    inputs cast): the CIFAR ResNet-18 for Frost, PyTorch eager (NCHW, channels_last),
#    torch.compile, Equinox + Optax and plain JAX; then ResNet-20 for Frost and the PyTorch modes.
# 3. attention (75 s): benchmarks/attention.py: the Pallas flash-attention kernel checked against
#    the reference, then timed beside jax.nn.dot_product_attention (cuDNN, XLA), bf16, forward and
#    forward+backward, causal and not, T = 1k/4k/16k, D = 64/128.
# 4. gpt (70 s): benchmarks/gpt.py: GPT-2 small (768 x 12, 16 x 1024 tokens, bf16) training step,
#    Frost (Pallas attention, then XLA attention) beside PyTorch eager (SDPA) and torch.compile.
#
# Runs offline: it needs python3 with JAX (CUDA), PyTorch (CUDA), Triton, Equinox, Optax, NumPy,
# tqdm and safetensors already installed, and installs this repository with --no-deps.
# Rows that do not fit their part's budget say "skipped" or "interrupted" in their table
# (compilation, torch.compile especially, is most of the time). PYTHON, DEADLINE (seconds for
# everything, default 310) and WORKERS (data-loader workers, default 4) can be set from outside.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
DEADLINE=${DEADLINE:-310}
PARTS=${PARTS:-e2e step attention gpt}
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

# run SECONDS SCRIPT ARGS...: a benchmark script with a hard stop after SECONDS (or when the
# deadline comes first): SIGINT, on which each script prints the rows it has; SIGKILL 15 s later.
run() {
  local budget=$1 script=$2 hard
  shift 2
  hard=$(($(left) - 5))
  ((hard > budget)) && hard=$budget
  if ((hard < 20)); then
    echo "== skipped (time is up): $script $*" | tee -a "$TXT"
    return 0
  fi
  echo "== $(date -u +%H:%M:%S) python benchmarks/$script $*   (hard stop ${hard} s)"
  timeout -s INT -k 15 "$hard" "$PY" "benchmarks/$script" "$@"
  local rc=$?
  ((rc)) && echo "== $script exited with $rc" | tee -a "$TXT"
  return 0
}

# resnet SECONDS ARGS...: benchmarks/resnet.py with a soft budget 30 s before the hard stop (no new
# peer starts after it), so the last peer has time to finish.
resnet() {
  local budget=$1
  shift
  run "$budget" resnet.py "$@" --budget $((budget > 60 ? budget - 30 : budget / 2)) --out "$TXT"
}

want() { [[ " $PARTS " == *" $1 "* ]]; }

main() {
  {
    echo "== Frost GPU benchmark (benchmarks/gpu.sh), $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "nvidia-smi failed"
    echo
  } | tee -a "$TXT"
  timeout 120 "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null 2>&1 \
    || echo "(pip install -e . failed; using PYTHONPATH=$PWD)"

  # 1. The reference workload: two fresh processes, about 15-40 s each (no new one after 50 s).
  want e2e && resnet "${E2E_S:-80}" --workload e2e --device gpu --models resnet20 --batch-size 32 \
    --dtype fp32 --e2e-steps 300 --workers "$WORKERS"

  # 2. Step throughput; peers start in order (cifar_resnet18 fp32, bf16, then resnet20 fp32, bf16)
  # until the budget is spent.
  want step && resnet "${STEP_S:-75}" --device gpu --batch-size 256 --dtype fp32,bf16 \
    --models cifar_resnet18,resnet20 --steps 7 --inner 5 --warmup 3

  # 3. Attention: kernel check, then the table (printed at the end, or when interrupted).
  want attention && run "${ATTN_S:-75}" attention.py | tee -a "$TXT"

  # 4. GPT-2 small training step: frost, frost-xla, torch, torch-compile (slowest to compile: last).
  want gpt && run "${GPT_S:-70}" gpt.py --device gpu --steps 5 --inner 3 --warmup 2 --out "$TXT"

  echo "== done in ${SECONDS} s" | tee -a "$TXT"
}

main 2>&1 | tee "$LOG"
