#!/bin/sh
# verify-cost: t(k)/t(1) of a width-k verify forward (see bench/verify-cost.c).
#   bench/verify-cost.sh MODEL_DIR [CONTEXT=256] [THREADS=0 (all)] [REPS=20]
set -e
cd "$(dirname "$0")/.."
make -s dspark
mkdir -p bench/out
OBJS=$(ls build/rel/src/*.o | grep -v '/main\.o$')
cc -std=c11 -D_GNU_SOURCE -O2 -pthread -Isrc -o bench/out/verify-cost bench/verify-cost.c $OBJS \
    -lcjson -lpcre2-8 -lutf8proc -ledit -lmicrohttpd -lm
exec bench/out/verify-cost "$@"
