#!/bin/sh
# cuda-step-profile: every kernel of one decode step of the CUDA backend,
# timed alone by Nsight Compute (gpu__time_duration, clocks as they run),
# summed by kernel and grid: where a step's time goes before the overlap
# that programmatic dependent launch gives inside the captured graph. From
# an unpacked scripts/cuda-pack archive on the GPU machine; the model is a
# checkpoint such as `mkrandom DIR 8b` makes. A run takes about a minute
# (every kernel of the prompt's prefill is profiled too).
#   bench/cuda-step-profile.sh PACK_DIR MODEL_DIR [CONTEXT=512]
set -e
P=$(cd "${1:?usage: bench/cuda-step-profile.sh PACK_DIR MODEL_DIR [CONTEXT]}" && pwd)
M=${2:?usage: bench/cuda-step-profile.sh PACK_DIR MODEL_DIR [CONTEXT]}
N=${3:-512}
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
ids=$(awk -v n="$N" 'BEGIN { for (i = 1; i <= n; i++) printf "%s%d", (i > 1 ? "," : ""), (i * 7919) % 150000 }')
T=$(mktemp)
trap 'rm -f "$T"' EXIT
"$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
    "$P/dspark" run --device cuda --model "$M" --mode baseline --prompt-ids "$ids" -n 3 --ignore-eos --temp 0 \
    > "$T" 2>/dev/null
python3 "$(dirname "$0")/cuda-step-profile.py" "$T"
