#!/usr/bin/env bash
# pp512 of quantized GGUFs, interleaved per type and rep: this tree's
# dspark, another dspark build (BASE, e.g. an earlier revision's) and
# llama-bench, so a loaded host slows all three alike within a rep.
#
#   BASE=/path/to/dspark LLAMA_BENCH=/path/to/llama-bench bench/cpu-pp-ab.sh
#
# The GGUFs are bench/cpu-bench.sh's (run it once with QUANTS first).
# Options: QUANTS="Q8_0 Q4_0 Q4_K_M", REPS=3, THREADS=2, OUT=bench/out,
# SHAPE=0.6b. Prints each rep, then per type the means and their ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${BASE:?BASE must name another dspark binary}"
: "${LLAMA_BENCH:?LLAMA_BENCH must name llama-bench}"
QUANTS=${QUANTS:-Q8_0 Q4_0 Q4_K_M}
REPS=${REPS:-3}
THREADS=${THREADS:-2}
OUT=${OUT:-bench/out}
SHAPE=${SHAPE:-0.6b}
PY=${PYTHON:-/usr/bin/python3}
make -s dspark
PP_IDS=$(awk 'BEGIN{s=7; for(i=0;i<512;i++){s=(s*1103515245+12345)%2147483648; printf "%s%d", (i?",":""), 100+s%150000}}')
pp() { "$1" run --model "$2" --prompt-ids "$PP_IDS" -n 1 -t "$THREADS" -c 1024 --print-ids 2>&1 >/dev/null |
  sed -n 's/.*prefill \([0-9.]*\) tok\/s.*/\1/p'; }
log=$(mktemp)
for r in $(seq "$REPS"); do
  for q in $QUANTS; do
    g="$OUT/qwen3-$SHAPE-$q.gguf"
    [ -f "$g" ] || { echo "cpu-pp-ab: $g missing (run bench/cpu-bench.sh with QUANTS first)" >&2; exit 1; }
    a=$(pp ./dspark "$g"); b=$(pp "$BASE" "$g")
    l=$("$LLAMA_BENCH" -m "$g" -t "$THREADS" -p 512 -n 0 -r 1 --load-mode none -o json 2>/dev/null |
      "$PY" -c 'import json,sys; print("%.2f" % json.load(sys.stdin)[0]["avg_ts"])')
    echo "$r $q $a $b $l" | tee -a "$log"
  done
done
echo "| weights | pp512 this tree | pp512 BASE | llama.cpp | this / BASE | this / llama.cpp | BASE / llama.cpp |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for q in $QUANTS; do
  awk -v q="$q" '$2 == q {a += $3; b += $4; l += $5; n++}
    END {printf "| %s | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f |\n", q, a/n, b/n, l/n, a/b, a/l, b/l}' "$log"
done
rm -f "$log"
