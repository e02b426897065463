#!/bin/sh
# cuda-stages: the tensor-core matmul alone on Qwen3-8B's matrices, in its
# register form and in its staged form at several ring sizes
# (DSPARK_CUDA_MMA_STAGES), alternated round by round in one run, from an
# unpacked scripts/cuda-pack archive on the GPU machine: microseconds per
# launch (cuda-ops-bench REPS one MATRIX M, tile-major weights cycled
# through copies that miss L2). q/k/v, gate+up and the LM head fold the
# RMSNorm in as the forward does (DSPARK_BENCH_NORM=1); o and down do not
# (the forward hands them pre-cut inputs, which the op benchmark does not).
# Prints a markdown table, a row per matrix and width, a column per ring
# size (0: the register form), each cell the rounds' figures.
#   bench/cuda-stages.sh DIR [STAGES="0 2 3 4 6"] [ROWS="1 16"] [MATRICES="qkv o gate+up down"]
# Knobs: ROUNDS (2), REPS (50).
set -e
D=$(cd "${1:?usage: bench/cuda-stages.sh DIR [STAGES] [ROWS] [MATRICES]}" && pwd)
STAGES=${2:-0 2 3 4 6} ROWS=${3:-1 16} MATS=${4:-qkv o gate+up down}
ROUNDS=${ROUNDS:-2} REPS=${REPS:-50}
libs=$(sh "$(dirname "$0")/cuda-libs.sh" 2>/dev/null || true)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for r in $(seq "$ROUNDS"); do
    for mat in $MATS; do
        case $mat in qkv | gate+up | lm_head) norm=1 ;; *) norm=0 ;; esac
        for m in $ROWS; do
            for s in $STAGES; do
                us=$(env LD_LIBRARY_PATH="$D/libs:$libs" DSPARK_CUDA_MMA_STAGES="$s" DSPARK_BENCH_NORM=$norm \
                    "$D/cuda-ops-bench" "$REPS" one "$mat" "$m" | sed -n 's/.*: \([0-9.]*\) us$/\1/p')
                [ -n "$us" ] || { echo "cuda-stages: no figure for $mat, $m rows, $s slots" >&2; exit 1; }
                echo "$mat $m $s $us" >>"$log"
            done
        done
    done
done
printf '| matrix, rows |'
for s in $STAGES; do [ "$s" = 0 ] && printf ' register form |' || printf ' %s slots |' "$s"; done
printf '\n|---|'
for s in $STAGES; do printf -- '---:|'; done
echo
for mat in $MATS; do
    for m in $ROWS; do
        printf '| %s, %s |' "$mat" "$m"
        for s in $STAGES; do
            printf ' %s |' "$(awk -v a="$mat" -v b="$m" -v c="$s" '$1 == a && $2 == b && $3 == c { printf "%s%s", (n++ ? " / " : ""), $4 }' "$log")"
        done
        echo
    done
done
