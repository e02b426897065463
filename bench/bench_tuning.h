/* bench_tuning: DSPARK_BENCH_TUNING for the bench tools that load a model
 * (verify-cost, cuda-timeline): a CUDA tuning spec (cu_tuning_parse's,
 * src/engine/cuda/cuda_tuning.h, e.g. "att_early=0/graphs=0") that the
 * models they create take, set through the test hooks (tests/cuda/cuda_hooks.h).
 * Built with CUDA=1 (bench/build-tool.sh defines BENCH_CUDA); without it a
 * tuning is refused. Call before loading the model. */
#ifndef DS_BENCH_TUNING_H
#define DS_BENCH_TUNING_H

#include <stdio.h>
#include <stdlib.h>

#ifdef BENCH_CUDA
#include "cuda/cuda_hooks.h"
#endif

/* 0, or -1 having said why on stderr */
static int bench_tuning_apply(void) {
    const char *spec = getenv("DSPARK_BENCH_TUNING");
    if (!spec || !*spec) return 0;
#ifdef BENCH_CUDA
    cu_tuning t;
    char err[256];
    cuda_hook_tuning_get(&t);
    if (cu_tuning_parse(spec, &t, err, sizeof err) != 0) {
        fprintf(stderr, "DSPARK_BENCH_TUNING: %s\n", err);
        return -1;
    }
    cuda_hook_tuning_set(&t);
    return 0;
#else
    fprintf(stderr, "DSPARK_BENCH_TUNING: this tool was built without CUDA (CUDA=1 bench/build-tool.sh)\n");
    return -1;
#endif
}

#endif
