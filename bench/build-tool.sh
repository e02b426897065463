#!/bin/sh
# build-tool: builds a bench program, bench/NAME.c, against this tree's
# release objects (runs `make` first) into OUT (default build/NAME).
# The bench scripts run it as:  sh bench/build-tool.sh NAME [OUT]
set -e
cd "$(dirname "$0")/.."
name="${1:?usage: bench/build-tool.sh NAME [OUT]}"
make -s -j2 dspark >/dev/null
OBJS=$(ls build/rel/src/*.o | grep -v '/main\.o$')
mkdir -p "$(dirname "${2:-build/$name}")"
# shellcheck disable=SC2086
cc -std=c11 -D_GNU_SOURCE -O2 -pthread -Isrc -o "${2:-build/$name}" "bench/$name.c" $OBJS \
    -lcjson -lpcre2-8 -lutf8proc -ledit -lmicrohttpd -lm
