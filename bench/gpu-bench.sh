#!/bin/sh
# gpu-bench: the CUDA backend on random-weight Qwen3-4B- and Qwen3-8B-shaped
# bf16 checkpoints, in one run on a GPU machine:
#   - the copy bandwidth (device to device, read + write) and the decode
#     ceiling it implies (weight bytes per token / bandwidth);
#   - for each model: prefill and decode at contexts 512 and 8192 (and a
#     16k prefill for 8B), and the verify cost curve t(k)/t(1), k = 1..16
#     (bench/verify-cost.c with DSPARK_DEVICE=cuda);
#   - transformers' own greedy decode of the same checkpoint as a reference.
# Usage (on the GPU machine, from a tree where scripts/cuda-pack's
# build/devpack.tar.gz was unpacked into $P):
#   P=/tmp/p bench/gpu-bench.sh [OUT_DIR]
set -e
P=${P:-/tmp/p}
OUT=${1:-bench/out/gpu}
W=${WORK:-/tmp/gpu-bench}
mkdir -p "$OUT" "$W"
export LD_LIBRARY_PATH="$P/libs:$LD_LIBRARY_PATH"
{
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
python3 - <<'PY'
import torch, time
a = torch.empty(4 << 30, dtype=torch.uint8, device="cuda"); b = torch.empty_like(a)
for _ in range(3): b.copy_(a)
torch.cuda.synchronize(); t = time.time()
for _ in range(10): b.copy_(a)
torch.cuda.synchronize(); t = (time.time() - t) / 10
print(f"copy bandwidth: {2 * a.numel() / t / 1e12:.2f} TB/s (read + write of 4 GiB)")
PY
for shape in 4b 8b; do
  d="$W/qwen3-$shape-random"
  [ -f "$d/model.safetensors" ] || "$P/mkrandom" "$d" "$shape"
  echo "== qwen3-$shape-random"
  for ctx in 512 8192; do
    DSPARK_DEVICE=cuda "$P/verify-cost" "$d" $ctx 1 10
  done
  [ "$shape" = 8b ] && DSPARK_DEVICE=cuda "$P/verify-cost" "$d" 16384 1 3 | head -3
  python3 bench/gpu-hf-ref.py "$d" 512 128 2>/dev/null || echo "transformers reference failed"
done
} 2>&1 | tee "$OUT/gpu-bench.txt"
