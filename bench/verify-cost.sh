#!/bin/sh
# verify-cost: t(k)/t(1) of a width-k verify forward (see bench/verify-cost.c).
#   bench/verify-cost.sh MODEL_DIR [CONTEXT=256] [THREADS=0 (all)] [REPS=20]
set -e
cd "$(dirname "$0")/.."
sh bench/build-tool.sh verify-cost bench/out/verify-cost
exec bench/out/verify-cost "$@"
