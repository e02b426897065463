#!/bin/sh
# gpu-sampled: sampled decode on the GPU, `dspark run --device cuda --mode
# baseline -n 128 --ignore-eos --seed 1` after a 512-token prompt under
# several sampling settings, decode tok/s from the stamp. With OLD set to
# another dspark binary (an earlier revision's CUDA build) the two run
# alternated, REPS times each, for a side-by-side comparison in one run.
# MODE (default baseline) with DRAFTER (a drafter directory) and CAP (its
# --max-draft) measures speculative rounds instead.
#   P=/tmp/p [OLD=/tmp/old/dspark] [MODE=dspark DRAFTER=DIR CAP=7] bench/gpu-sampled.sh MODEL_DIR [REPS=2]
set -e
P=${P:-/tmp/p}
M=${1:?usage: bench/gpu-sampled.sh MODEL_DIR [REPS]}
REPS=${2:-2}
ids=$(awk 'BEGIN { for (i = 1; i <= 512; i++) printf "%s%d", (i > 1 ? "," : ""), (i * 7919) % 150000 }')
spec=""
[ -n "$DRAFTER" ] && spec="--drafter $DRAFTER --max-draft ${CAP:-7}"
run() { # binary, sampling flags
    "$1" run --device cuda --model "$M" --mode "${MODE:-baseline}" $spec --seed 1 --prompt-ids "$ids" -n 128 \
        --ignore-eos $2 \
        2>&1 >/dev/null | sed -n 's/.*decode \([0-9.]*\) tok\/s.*/\1/p'
}
for flags in "--temp 0" "--temp 1.0" "--temp 0.6 --top-k 20 --top-p 0.95" "--temp 0.7 --top-p 0.95" \
    "--temp 1.0 --min-p 0.05"; do
    new="" old=""
    r=0
    while [ $r -lt "$REPS" ]; do
        [ -n "$OLD" ] && old="$old $(run "$OLD" "$flags")"
        new="$new $(run "$P/dspark" "$flags")"
        r=$((r + 1))
    done
    if [ -n "$OLD" ]; then echo "$flags | old:$old | new:$new tok/s"; else echo "$flags |$new tok/s"; fi
done
