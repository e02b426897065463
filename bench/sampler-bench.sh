#!/bin/sh
# sampler-bench: the host sampler's cost per row (bench/sampler-bench.c)
# at the vocabularies of the bundled model (6,144) and of Qwen3 (151,936),
# built from this tree's objects (runs `make` first).
#   bench/sampler-bench.sh [ROWS=200]
# To compare two revisions, run it in a checkout of each.
set -e
cd "$(dirname "$0")/.."
make -s -j2 dspark >/dev/null
OBJS=$(ls build/rel/src/*.o | grep -v '/main\.o$')
# shellcheck disable=SC2086
cc -std=c11 -D_GNU_SOURCE -O2 -pthread -Isrc -o build/sampler-bench bench/sampler-bench.c $OBJS \
    -lcjson -lpcre2-8 -lutf8proc -ledit -lmicrohttpd -lm
build/sampler-bench 6144 "${1:-200}"
build/sampler-bench 151936 "${1:-200}"
