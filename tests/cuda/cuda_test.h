/* The CUDA test files' shared helpers: a file's seeded uniform source and
   fills, the relative error the bounds are stated in, and the check that a
   GPU is visible (a CUDA test without one fails: make test-cuda runs only
   where a GPU is). Each file keeps its own seed, so its draws do not move
   when another file draws more. */
#ifndef DSPARK_TESTS_CUDA_TEST_H
#define DSPARK_TESTS_CUDA_TEST_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/cuda/cuda_backend.h"
#include "test.h"

/* uniform in [-1, 1) from a xorshift64 state */
static inline float cu_frand(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (float)((*s >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static inline void cu_fill(uint64_t *s, float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = cu_frand(s) * scale;
}

/* max |a-b| / max |b| (a NaN: infinitely far) */
static inline double cu_rel_err(const float *a, const float *b, size_t n) {
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= md)) md = d;
        if (fabs((double)b[i]) > mb) mb = fabs((double)b[i]);
    }
    return mb > 0 ? md / mb : md;
}

static inline int cu_have_gpu(const char *file, int line) {
    if (cuda_device_count() > 0) return 1;
    test_fail(file, line, "no CUDA device visible (make test-cuda needs a GPU)");
    return 0;
}
#define have_gpu() cu_have_gpu(__FILE__, __LINE__)

#endif
