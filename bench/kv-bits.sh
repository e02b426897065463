#!/bin/sh
# kv-bits: CPU attention over an f32 / f16 / int8 KV cache at long contexts
# (see bench/kv-bits.c).
#   bench/kv-bits.sh [THREADS=2] [CONTEXTS=4096,16384,32768]
set -e
cd "$(dirname "$0")/.."
sh bench/build-tool.sh kv-bits bench/out/kv-bits
exec bench/out/kv-bits "$@"
