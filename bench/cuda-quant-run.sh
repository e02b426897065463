#!/bin/sh
# cuda-quant-run: one GPU run for the quantized CUDA kernels
# (src/engine/cuda/cuda_quant.cu), about 8 minutes on an H100/H200. It
# writes everything under $OUT, each step's output in its own file and a
# running log (OUT/log.txt) with each step's time and exit status; a step
# that fails or times out is logged and the next one runs. Steps, most
# important first (the later ones are skipped when the budget is spent):
#   1. tests (OUT/tests-*.txt): the quantized kernels against the CPU's
#      exact dequantization, every width 1..16 bit-equal to the row alone,
#      the prefill groups (cuBLAS on the matrix in bf16), the fixtures'
#      logits error against their float64 references through the kernels
#      (decode, verifies of 5; bound 1e-3) and with prefill groups of 4
#      rows (bound 5e-2) (the figures to report: "worst over the
#      fixtures"), then the golden quantized fixtures on the GPU
#      (quant_model_golden: the CPU's bound, 1e-4, on the GPU's rows);
#   2. OUT/quant-bench.md: cuda-quant-bench per format (Q8_0 Q4_K Q6_K
#      Q4_0 MLX4) at 1..16 rows on Qwen3-8B's shapes: us, GB/s, t(k)/t(1),
#      the 36-layer matmul total and the prefill path at 512 rows;
#   3. a random Qwen3-8B (mkrandom, bf16) and `dspark quantize` copies of it
#      (Q4_K_M, then Q8_0, then MLX 4-bit), then verify-cost on each at
#      context 512 (OUT/verify-*.txt: the prefill line of 512 tokens, then
#      t(k) and t(k)/t(1) for k = 1..16), the bf16 checkpoint first as the
#      baseline of the same card.
#
# On the build machine (nvcc, no GPU), from the tree's root:
#   scripts/cuda-pack          # build/devpack.tar.xz (cuda-quant-bench included)
# On the GPU machine, from a copy of the tree with build/devpack.tar.xz:
#   OUT=/some/dir sh bench/cuda-quant-run.sh
# (with build/devpack.tar.xz copied there beside the tree). BUDGET=seconds (default 460) bounds the
# run; W=dir (default /tmp/cqr) holds the unpacked pack and the models
# (about 45 GB of disk for the four 8B checkpoints).
set -u
OUT=${OUT:?set OUT to the results directory}
BUDGET=${BUDGET:-460}
W=${W:-/tmp/cqr}
P=$W/p
mkdir -p "$OUT" "$W"
cd "$(dirname "$0")/.."
T0=$(date +%s)
LOG=$OUT/log.txt
: > "$LOG"
say() { echo "$*" | tee -a "$LOG"; }
left() { echo $((BUDGET - ($(date +%s) - T0))); }
# step NAME SECONDS CMD...: runs CMD (its output in OUT/NAME.txt) under a
# timeout of SECONDS, or at most what is left of the budget; logs the time
# and status; skipped when less than a third of SECONDS is left
step() {
    name=$1 lim=$2
    shift 2
    l=$(left)
    if [ "$l" -lt $((lim / 3)) ]; then
        say "== $name: skipped ($l s of the budget left)"
        return 1
    fi
    [ "$lim" -gt "$l" ] && lim=$l
    t=$(date +%s)
    timeout "$lim" "$@" > "$OUT/$name.txt" 2>&1
    rc=$?
    say "== $name: exit $rc, $(($(date +%s) - t)) s (limit $lim s)$([ $rc = 124 ] && echo ', TIMED OUT')"
    tail -n 4 "$OUT/$name.txt" | sed 's/^/   /' | tee -a "$LOG"
    return $rc
}

say "cuda-quant-run: $(date -u), tree $(git rev-parse --short HEAD 2> /dev/null || echo '?'), budget $BUDGET s"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>&1 |
    tee "$OUT/gpu.txt" | tee -a "$LOG"
if [ ! -f build/devpack.tar.xz ]; then
    say "no build/devpack.tar.xz: run scripts/cuda-pack on the build machine and copy it here"
    exit 1
fi
rm -rf "$P" && mkdir -p "$P"
python3 -c "import tarfile, sys; tarfile.open('build/devpack.tar.xz').extractall(sys.argv[1])" "$P" || {
    say "cannot unpack build/devpack.tar.xz"
    exit 1
}
export LD_LIBRARY_PATH="$P/libs:$(sh bench/cuda-libs.sh 2> /dev/null):${LD_LIBRARY_PATH:-}"
export DSPARK_TOKENIZERS=$P/tok DSPARK_TEST_DATA=$PWD/tests/data DSPARK_BIN=$P/dspark
for b in dspark dspark-tests verify-cost mkrandom cuda-quant-bench; do
    [ -x "$P/$b" ] || say "the pack lacks $b (an older scripts/cuda-pack?)"
done
say "unpacked in $(($(date +%s) - T0)) s"

# 1. correctness
step tests-cuda-quant 150 "$P/dspark-tests" cuda_quant
step tests-quant-model 60 env DSPARK_DEVICE=cuda "$P/dspark-tests" quant_model

# 2. the kernels alone
step quant-bench 150 "$P/cuda-quant-bench" 30 Q8_0 Q4_K Q6_K Q4_0 MLX4 && cp "$OUT/quant-bench.txt" "$OUT/quant-bench.md"

# 3. whole models: a random Qwen3-8B, bf16 and quantized
M=$W/m8
if [ ! -f "$M/model.safetensors" ]; then # (made aside, so a cut-off run leaves no half checkpoint)
    rm -rf "$M.part"
    step mkrandom 120 "$P/mkrandom" "$M.part" 8b && mv "$M.part" "$M"
    rm -rf "$M.part"
fi
if [ -f "$M/model.safetensors" ]; then
    step verify-bf16 60 env DSPARK_DEVICE=cuda "$P/verify-cost" "$M" 512 1 5
    step quantize-q4_k_m 150 "$P/dspark" quantize --model "$M" --out "$W/m8q4km.gguf" --type Q4_K_M &&
        step verify-q4_k_m 60 env DSPARK_DEVICE=cuda "$P/verify-cost" "$W/m8q4km.gguf" 512 1 5
    rm -f "$W/m8q4km.gguf" # (disk: the next copies need the room)
    step quantize-q8_0 120 "$P/dspark" quantize --model "$M" --out "$W/m8q8.gguf" --type Q8_0 &&
        step verify-q8_0 60 env DSPARK_DEVICE=cuda "$P/verify-cost" "$W/m8q8.gguf" 512 1 5
    rm -f "$W/m8q8.gguf"
    step quantize-mlx4 120 "$P/dspark" quantize --model "$M" --out "$W/m8mlx4" --type mlx4 &&
        step verify-mlx4 60 env DSPARK_DEVICE=cuda "$P/verify-cost" "$W/m8mlx4" 512 1 5
fi

# the summary: each verify's prefill line and t(1), t(16), t(16)/t(1)
{
    echo
    echo "== summary ($(($(date +%s) - T0)) s)"
    grep -h "worst over the fixtures" "$OUT/tests-cuda-quant.txt" 2> /dev/null
    grep -h -E "passed, .* failed" "$OUT"/tests-*.txt 2> /dev/null
    grep -h -E "^## |^\| \| (1|8|16) \||prefill path" "$OUT/quant-bench.txt" 2> /dev/null
    for v in bf16 q8_0 q4_k_m mlx4; do
        f=$OUT/verify-$v.txt
        [ -f "$f" ] || continue
        echo "-- $v"
        grep -E -i "prefill|^ *1 |^ *8 |^ *16 " "$f"
    done
} | tee -a "$LOG"
