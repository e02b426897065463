#!/bin/sh
# spec-batch: N generations stepped together against one after another
# (see bench/spec-batch.c), on the bundled model.
#   bench/spec-batch.sh [--threads 2] [--new 64] [--runs 1,2,4,8] [--modes plain,dspark]
#                       [--draft 6] [--reps 5] [--batch-rows 0,8]
set -e
cd "$(dirname "$0")/.."
sh bench/build-tool.sh spec-batch bench/out/spec-batch
exec bench/out/spec-batch "$@"
