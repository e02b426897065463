#!/bin/sh
# cuda-qmm-build: builds bench/cuda_qmm_ab.cu (the quantized matmul alone,
# timed per format, shape and width, its outputs written for a bit-for-bit
# comparison) against the src/ of a revision, on the build machine (nvcc,
# no GPU needed). The binary is small (about 2 MB, CUDA runtime linked
# statically), so a baseline and a candidate travel to the GPU machine
# together:
#   bench/cuda-qmm-build.sh OUT [REV]     (REV: a git revision; default the working tree)
# NVFLAGS adds nvcc flags (e.g. -DQK_STAGES=6 for a variant). On the GPU machine:
#   OUT DIR [REPS=20] [FORMATS]          (FORMATS: a list such as Q4_K,Q8_0; default all six)
# prints one line per launch shape and the 36-layer totals, and writes
# DIR/y-FORMAT-SHAPE-M.bin (M = 1, 9, 16) for `cmp` against another build's.
set -e
cd "$(dirname "$0")/.."
out=${1:?usage: bench/cuda-qmm-build.sh OUT [REV]}
src=src
if [ -n "$2" ]; then
    t=$(mktemp -d)
    git archive "$2" src | tar -x -C "$t"
    src=$t/src
fi
make -s build/rel/src/base/util.o build/rel/src/engine/tensor.o build/rel/src/engine/cuda/cuda_tuning.o
"${NVCC:-nvcc}" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xfatbin -compress-all -cudart static \
    ${NVFLAGS:-} -I"$src" -Itests bench/cuda_qmm_ab.cu build/rel/src/base/util.o build/rel/src/engine/tensor.o \
    build/rel/src/engine/cuda/cuda_tuning.o -o "$out"
[ -z "$2" ] || rm -rf "$t"
