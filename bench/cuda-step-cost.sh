#!/bin/sh
# cuda-step-cost: each kernel's share of a CUDA forward, timed by leaving it
# out of every layer (the CUDA tuning's omit, DSPARK_BENCH_TUNING=omit=...; the outputs are then wrong, only the
# times count): verify-cost's t(1) and t(16) with nothing left out, then
# without the q/k/v projection (with its norm/RoPE tail), the attention
# (with its combine), o, gate+up and down, and what each costs per layer
# (the difference from the full step over the layer count). The costs do
# not add up exactly: a kernel left out also changes how its neighbours
# overlap (docs/history/benchmarks-log.md, "PDL where it pays").
# Usage, on the GPU machine with scripts/cuda-pack's devpack unpacked in $P:
#   P=/tmp/p bench/cuda-step-cost.sh MODEL_DIR [CONTEXT=512] [REPS=10]
set -e
P=${P:-/tmp/p}
M=${1:?usage: P=DIR $0 MODEL_DIR [CONTEXT] [REPS]}
CTX=${2:-512}
REPS=${3:-10}
[ -f "$M/config.json" ] || { echo "no config.json in $M" >&2; exit 1; }
layers=$(sed -n 's/.*"num_hidden_layers" *: *\([0-9]*\).*/\1/p' "$M/config.json" | head -1)
[ -n "$layers" ] || { echo "no num_hidden_layers in $M/config.json" >&2; exit 1; }
echo "# $M, context $CTX, $layers layers, median of $REPS; ms, and us per layer against the full step"
echo "# left out       t(1)    t(16)   t(1) cost  t(16) cost"
full1='' full16=''
err=$(mktemp)
trap 'rm -f "$err"' EXIT
for k in none qkv attn o gateup down; do
    omit=$k
    [ "$k" = none ] && omit=0
    out=$(DSPARK_DEVICE=cuda DSPARK_BENCH_TUNING="omit=$omit" "$P/verify-cost" "$M" "$CTX" 1 "$REPS" 2> "$err") ||
        { cat "$err" >&2; exit 1; }
    t1=$(echo "$out" | awk '$1 == "1" { print $2 }')
    t16=$(echo "$out" | awk '$1 == "16" { print $2 }')
    if [ -z "$t1" ] || [ -z "$t16" ]; then echo "no t(1) / t(16) from verify-cost (omit=$omit)" >&2; exit 1; fi
    if [ "$k" = none ]; then
        full1=$t1 full16=$t16
        printf "  %-12s %7.3f %8.3f\n" "$k" "$t1" "$t16"
    else
        awk -v k="$k" -v a="$t1" -v b="$t16" -v f1="$full1" -v f16="$full16" -v n="$layers" \
            'BEGIN { printf "  %-12s %7.3f %8.3f %9.1f %10.1f\n", k, a, b, (f1 - a) * 1000 / n, (f16 - b) * 1000 / n }'
    fi
done
