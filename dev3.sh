mkdir -p /tmp/p && python3 -c "import tarfile; tarfile.open('build/devpack.tar.xz').extractall('/tmp/p')"
export LD_LIBRARY_PATH=/tmp/p/libs:$(sh bench/cuda-libs.sh):$LD_LIBRARY_PATH DSPARK_TOKENIZERS=/tmp/p/tok
date
P=/tmp/p SHAPES="4b 8b" FAST=1 OPS=0 HF=0 sh bench/gpu-bench.sh $OUT
date
ids=$(awk 'BEGIN { for (i = 1; i <= 512; i++) printf "%s%d", (i > 1 ? "," : ""), (i * 7919) % 150000 }')
for s in 4b 8b; do d=/tmp/gpu-bench/qwen3-$s-random
  printf "$s baseline 512: "; /tmp/p/dspark run --device cuda --model $d --mode baseline --seed 1 --prompt-ids "$ids" -n 128 --ignore-eos --temp 0 2>&1 >/dev/null | grep -oE "decode [^,]*tok/s|fnv1a [0-9a-f]+" | tr '\n' ' '; echo
done
d=/tmp/gpu-bench/qwen3-8b-random
DSPARK_DEVICE=cuda /tmp/p/verify-cost $d 4096 1 1 | head -1
DSPARK_DEVICE=cuda /tmp/p/verify-cost $d 16384 1 1 | head -1
date
