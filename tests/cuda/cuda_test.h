/* The CUDA test files' shared helpers: a file's seeded uniform source and
   fills, the check that a GPU is visible (a CUDA test without one fails:
   make test-cuda runs only where a GPU is), and random attention cases.
   Each file keeps its own seed, so its draws do not move when another file
   draws more. (The relative error is test.h's test_rel_err.) */
#ifndef DSPARK_TESTS_CUDA_TEST_H
#define DSPARK_TESTS_CUDA_TEST_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/util.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/tensor.h"
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

static inline int cu_have_gpu(const char *file, int line) {
    if (cuda_device_count() > 0) return 1;
    test_fail(file, line, "no CUDA device visible (make test-cuda needs a GPU)");
    return 0;
}
#define have_gpu() cu_have_gpu(__FILE__, __LINE__)

/* w[0 .. n) as a weight matrix of type dt (bf16, f16 or f32; allocated) */
static inline void *make_weights(ds_dtype dt, const float *w, size_t n) {
    void *p = xmalloc(n * dtype_size(dt));
    for (size_t i = 0; i < n; i++) {
        if (dt == DT_BF16) ((uint16_t *)p)[i] = ds_f32_to_bf16(w[i]);
        else if (dt == DT_F16) ((uint16_t *)p)[i] = ds_f32_to_f16(w[i]);
        else ((float *)p)[i] = w[i];
    }
    return p;
}

/* one attention test case: shape {M, nh, nkv, hd, n_past}, a cache of
   n_past + M + slack positions, random q, k and v from *s; win: a sliding
   window (0: none), which the caller sets */
typedef struct {
    int M, nh, nkv, hd, np, win, cap;
    size_t qn, kn;
    float *q, *k, *v, scale;
} attn_case;

static inline attn_case attn_case_make(uint64_t *s, const int shape[5], int slack) {
    attn_case a = {.M = shape[0], .nh = shape[1], .nkv = shape[2], .hd = shape[3], .np = shape[4]};
    a.cap = a.np + a.M + slack;
    a.qn = (size_t)a.M * a.nh * a.hd;
    a.kn = (size_t)a.nkv * a.cap * a.hd;
    a.q = xmalloc(sizeof(float) * a.qn);
    a.k = xmalloc(sizeof(float) * a.kn);
    a.v = xmalloc(sizeof(float) * a.kn);
    cu_fill(s, a.q, a.qn, 1.0f);
    cu_fill(s, a.k, a.kn, 1.0f);
    cu_fill(s, a.v, a.kn, 1.0f);
    a.scale = 1.0f / sqrtf((float)a.hd);
    return a;
}

static inline void attn_case_free(attn_case *a) { free(a->q), free(a->k), free(a->v); }

#endif
