#!/bin/sh
# multi-decode: N sequences decoding one row a step, one multi forward a
# step against N forwards in turn (see bench/multi-decode.c).
#   bench/multi-decode.sh MODEL_DIR [CONTEXT=64] [THREADS=0 (all)] [STEPS=32] [REPS=5]
set -e
cd "$(dirname "$0")/.."
sh bench/build-tool.sh multi-decode bench/out/multi-decode
exec bench/out/multi-decode "$@"
