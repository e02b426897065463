#!/bin/sh
# sampler-bench: the host sampler's cost per row (bench/sampler-bench.c)
# at the vocabularies of the bundled model (6,144) and of Qwen3 (151,936),
# built from this tree's objects (runs `make` first).
#   bench/sampler-bench.sh [ROWS=200]
# To compare two revisions, run it in a checkout of each.
set -e
cd "$(dirname "$0")/.."
sh bench/build-tool.sh sampler-bench
build/sampler-bench 6144 "${1:-200}"
build/sampler-bench 151936 "${1:-200}"
