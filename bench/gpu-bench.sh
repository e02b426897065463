#!/bin/sh
# gpu-bench: the CUDA backend on random-weight Qwen3-4B- and Qwen3-8B-shaped
# bf16 checkpoints, in one run on a GPU machine:
#   - the copy bandwidth (device to device, read + write) and the decode
#     ceiling it implies (weight bytes per token / bandwidth);
#   - the matmul kernels alone on the 8B shapes (bench/cuda-ops-bench.c);
#   - for each model: decode at contexts 512 and 8192 and the verify cost
#     curve t(k)/t(1), k = 1..16, with argmax ids coming back as in a greedy
#     verify (bench/verify-cost.c with DSPARK_DEVICE=cuda), the 16-row
#     verify with vocabulary-wide logits coming back (a sampled verify), and
#     prefill at 512, 4096 and 16384 tokens (4096 and 16384 also on the
#     pre-Hopper prefill attention kernel, DSPARK_BENCH_TUNING=att_wg=0);
#   - for 8B: a speculative round with random drafters of the published
#     Qwen3-8B DFlash (block 16) and DSpark (block 7) shapes on the GPU:
#     decode tok/s of `dspark run` (random weights accept nothing, so it is
#     rounds per second) and the calibrated drafter round cost; sampled
#     decode under several sampling settings (bench/gpu-sampled.sh); the
#     prefill of a 4,096-token prompt by `dspark run` with the DFlash
#     drafter (the speculative path: chunks whose layer taps go to the
#     drafter) and without one (the plain path);
#   - with FIRST=1, for 8B: the server's first requests with and without
#     its warm-up (bench/first-request.sh; the Qwen3 tokenizer from
#     $DSPARK_TOKENIZERS is copied into the random checkpoint);
#   - transformers' own greedy decode of the same checkpoint;
#   - llama.cpp's CUDA build on the same weights, when L points at an
#     unpacked llama.cpp build (bench/gpu-llama.sh).
# Usage (on the GPU machine, from a tree where scripts/cuda-pack's
# build/devpack.tar.xz was unpacked into $P):
#   P=/tmp/p [L=/tmp/llama] bench/gpu-bench.sh [OUT_DIR]
# SHAPES="8b" measures one model only; OPS=0 skips the op table, HF=0 the
# transformers reference; FAST=1 skips the 4k/16k prefills, the
# logits-back verify, the calibrated drafter
# costs and the plain `dspark run` baseline.
set -e
P=${P:-/tmp/p}
OUT=${1:-bench/out/gpu}
W=${WORK:-/tmp/gpu-bench}
mkdir -p "$OUT" "$W"
export LD_LIBRARY_PATH="$P/libs:$LD_LIBRARY_PATH"
# cuBLAS is not packed: the machine's own CUDA 13 one
if ldd "$P/dspark" | grep -q 'libcublas.*not found'; then
    export LD_LIBRARY_PATH="$(sh "$(dirname "$0")/cuda-libs.sh"):$LD_LIBRARY_PATH"
fi
# N prompt ids, comma-separated, spread over the vocabulary (distinct for N up to 150000)
prompt_ids() { awk -v n="$1" 'BEGIN { for (i = 1; i <= n; i++) printf "%s%d", (i > 1 ? "," : ""), (i * 7919) % 150000 }'; }
ids=$(prompt_ids 512)
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
if [ "${OPS:-1}" != 0 ]; then
  echo "== matmul kernels, Qwen3-8B shapes (us per launch)"
  "$P/cuda-ops-bench" 20
fi
for shape in ${SHAPES:-4b 8b}; do
  d="$W/qwen3-$shape-random"
  [ -f "$d/model.safetensors" ] || "$P/mkrandom" "$d" "$shape" >/dev/null
  echo "== qwen3-$shape-random"
  DSPARK_DEVICE=cuda "$P/verify-cost" "$d" 512 1 10
  DSPARK_DEVICE=cuda "$P/verify-cost" "$d" 8192 1 5 | grep -E "^#|^ 1 |^16 "
  [ -n "$FAST" ] || DSPARK_DEVICE=cuda "$P/verify-cost" "$d" 512 1 5 logits | grep -E "^ 1 |^16 " |
    sed 's/$/  (logits back)/'
  [ -n "$FAST" ] || DSPARK_DEVICE=cuda "$P/verify-cost" "$d" 4096 1 1 | head -1
  [ -n "$FAST" ] || [ "$shape" != 8b ] || DSPARK_DEVICE=cuda "$P/verify-cost" "$d" 16384 1 1 | head -1
  # the same prefills on the previous prefill attention kernel (k_attn_tc)
  [ -n "$FAST" ] || DSPARK_BENCH_TUNING=att_wg=0 DSPARK_DEVICE=cuda "$P/verify-cost" "$d" 4096 1 1 | head -1 |
    sed 's/$/  (k_attn_tc)/'
  [ -n "$FAST" ] || [ "$shape" != 8b ] || DSPARK_BENCH_TUNING=att_wg=0 DSPARK_DEVICE=cuda "$P/verify-cost" "$d" 16384 1 1 |
    head -1 | sed 's/$/  (k_attn_tc)/'
  if [ "$shape" = 8b ]; then
    for k in dflash dspark; do
      dd="$W/$k-8b-random"
      [ -f "$dd/model.safetensors" ] || "$P/mkrandom" "$dd" "$k-8b" >/dev/null
      for cap in 15 7 3; do
        [ "$k" = dspark ] && [ "$cap" = 15 ] && continue
        [ -n "$FAST" ] && [ "$cap" != 15 ] && { [ "$k" = dflash ] || [ "$cap" != 7 ]; } && continue
        printf "%s round, %s drafts: " "$k" "$cap"
        "$P/dspark" run --device cuda --model "$d" --drafter "$dd" --mode "$k" --max-draft "$cap" \
          --prompt-ids "$ids" -n 64 --ignore-eos --print-ids 2>&1 >/dev/null | grep -o "decode [^,]*tok/s.*" | head -1
      done
      [ -n "$FAST" ] || DSPARK_BIN="$P/dspark" DSPARK_DEVICE=cuda sh bench/drafter-cost.sh "$d" "$dd" | tail -1
    done
    ids4k=$(prompt_ids 4096)
    for k in dflash baseline; do
      printf "%s, 4,096-token prompt: " "$k"
      drafter=
      [ "$k" = dflash ] && drafter="--drafter $W/dflash-8b-random --max-draft 15"
      # shellcheck disable=SC2086
      "$P/dspark" run --device cuda --model "$d" $drafter --mode "$k" --prompt-ids "$ids4k" -n 4 --ignore-eos \
        2>&1 >/dev/null | grep -o "prefill [^,]*" | head -1
    done
    if [ "${FIRST:-0}" = 1 ] && [ -f "${DSPARK_TOKENIZERS:-}/qwen3/tokenizer.json" ]; then
      echo "== the server's first requests (bench/first-request.sh)"
      cp "$DSPARK_TOKENIZERS/qwen3/tokenizer.json" "$DSPARK_TOKENIZERS/qwen3/tokenizer_config.json" "$d/"
      BIN="$P/dspark" MODEL="$d" DEVICE=cuda ROUNDS=2 sh bench/first-request.sh || echo "first-request failed"
    fi
    [ -n "$FAST" ] || { echo "== sampled decode (bench/gpu-sampled.sh)"; P="$P" sh bench/gpu-sampled.sh "$d" 1; }
    [ -n "$FAST" ] || printf "baseline: "
    [ -n "$FAST" ] || "$P/dspark" run --device cuda --model "$d" --mode baseline --prompt-ids "$ids" -n 64 --ignore-eos --print-ids \
      2>&1 >/dev/null | grep -o "decode [^,]*tok/s" | head -1
  fi
  [ "${HF:-1}" = 0 ] || python3 bench/gpu-hf-ref.py "$d" 512 128 2>/dev/null || echo "transformers reference failed"
  if [ -n "$L" ] && [ "$shape" = 8b ]; then L="$L" P="$P" sh bench/gpu-llama.sh "$d" "$OUT" || echo "llama.cpp run failed"; fi
done
} 2>&1 | tee "$OUT/gpu-bench.txt"
