#!/bin/sh
# build-tool: builds a bench program, bench/NAME.c, against this tree's
# release objects (runs `make` first) into OUT (default build/NAME); with
# CUDA=1, against the CUDA build's objects (build/cuda, cuBLAS and the CUDA
# runtime linked), as scripts/cuda-pack does.
# TOOL_CFLAGS and TOOL_LIBS add compiler flags and libraries (CUPTI for
# cuda-timeline).
# The bench scripts run it as:  sh bench/build-tool.sh NAME [OUT]
set -e
cd "$(dirname "$0")/.."
name="${1:?usage: bench/build-tool.sh NAME [OUT]}"
if [ "${CUDA:-0}" = 1 ]; then
    make -s CUDA=1 -j2 build/cuda/dspark build/cuda/bench/cuda_mma_bench.o >/dev/null
    dir=build/cuda
    bench_obj=build/cuda/bench/cuda_mma_bench.o
    extra="-L${CUDA_HOME:-/usr/local/cuda}/lib64 -lcublas -lcudart -lstdc++"
    defs=-DBENCH_CUDA # (bench_tuning.h: DSPARK_BENCH_TUNING through tests/cuda/cuda_hooks.h)
else
    make -s -j2 dspark >/dev/null
    dir=build/rel
    extra=
fi
OBJS="$(find $dir/src -name "*.o" ! -name main.o) $dir/gen/web_assets.o"
mkdir -p "$(dirname "${2:-build/$name}")"
# shellcheck disable=SC2086
cc -std=c11 -D_GNU_SOURCE -O2 -pthread -Isrc -Itests ${defs:-} ${TOOL_CFLAGS:-} -o "${2:-build/$name}" "bench/$name.c" $OBJS ${bench_obj:-} \
    -lcjson -lpcre2-8 -lutf8proc -ledit -lmicrohttpd -lcurl -lcrypto -lm $extra ${TOOL_LIBS:-}
