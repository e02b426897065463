/* The CUDA ops that the families beyond Qwen and Llama add (sliding-window
 * attention: Mistral, Gemma 3's sliding layers; Gemma 3's GELU gating,
 * norms of the sublayers' outputs, scaled embedding and soft-capped logits)
 * against the CPU ops, with the batch invariance the lossless guarantee
 * rests on; and the family fixtures of tests/data/models on the GPU (as
 * they are, and written as Q8_0 GGUF: the quantized matmuls, GELU gating
 * apart): a long prompt (windows full, a cuBLAS group) against the CPU,
 * the same cache in one call or in 128-row calls, a verify's rows the
 * bits of the rows decoded alone, chained decoding the same ids. Built
 * only by `make test-cuda` (tests/cuda/). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cuda/cuda_hooks.h"
#include "engine/kv.h"
#include "engine/model.h"
#include "engine/ops.h"
#include "engine/tensor.h"
#include "test.h"
#include "cuda/cuda_test.h"
#include "base/util.h"

static uint64_t rng = 0x5eed5eedULL;
#define frand() cu_frand(&rng)
#define fill(x, n, s) cu_fill(&rng, (x), (n), (s))
#define rel_err test_rel_err

/* ---- sliding-window attention ---------------------------------------- */

/* a case: {M, nh, nkv, hd, n_past, window}, a cache of n_past + M + 7
   positions, random q, k and v */
static attn_case wcase_make(const int s[6]) {
    attn_case a = attn_case_make(&rng, s, 7);
    a.win = s[5];
    return a;
}

/* rows m0 .. m0 + M - 1 of case a on the GPU (tiled: the prefill kernel) */
static int wgpu(const attn_case *a, float *out, int m0, int M, int tiled, char *err, size_t errlen) {
    const int prev = cuda_test_attention_window(a->win);
    int rc = cuda_test_attention(out, a->q + (size_t)m0 * a->nh * a->hd, M, a->nh, a->nkv, a->hd, a->k, a->v, a->cap,
                                 a->np + m0, a->scale, tiled, err, errlen);
    cuda_test_attention_window(prev);
    return rc;
}

/* the CPU's attention of case a (op_attention_kv with its window) */
static void wcpu(const attn_case *a, float *out) {
    const void *kp[1] = {a->k}, *vp[1] = {a->v};
    kv_view w = {.bits = 32, .k = kp, .v = vp, .plen = a->cap, .shift = KV_FLAT_SHIFT};
    op_attention_kv(NULL, out, a->q, a->M, a->nh, a->nkv, a->hd, &w, a->np, a->scale, 0, a->win);
}

/* Windowed attention of decode and verify rows (1-16, and past one launch
 * group), windows of one position, inside a chunk, across chunks, wider
 * than the context, against the CPU; each row alone (a decode step at its
 * position) gives the batch's bits. */
TEST(cuda_attention_window_vs_cpu) {
    if (!have_gpu()) return;
    char err[512];
    /* M, nh, nkv, hd, n_past, window */
    const int shapes[][6] = {{1, 8, 4, 32, 40, 16},     {1, 32, 8, 128, 3000, 1024}, {5, 8, 2, 128, 700, 100},
                             {16, 16, 4, 64, 300, 64},  {16, 8, 4, 256, 500, 200},   {9, 32, 8, 128, 5000, 4096},
                             {12, 4, 1, 32, 80, 1},     {3, 16, 8, 128, 20, 1000},   {33, 4, 4, 32, 7, 5},
                             {2, 6, 3, 80, 2100, 2048}, {8, 8, 1, 256, 9000, 512},   {16, 4, 2, 32, 15, 16}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        attn_case a = wcase_make(shapes[s]);
        float *oc = xmalloc(sizeof(float) * a.qn), *og = xmalloc(sizeof(float) * a.qn);
        const size_t row = (size_t)a.nh * a.hd;
        float *one = xmalloc(sizeof(float) * row);
        wcpu(&a, oc);
        CHECK_MSG(wgpu(&a, og, 0, a.M, 0, err, sizeof err) == 0, "%s", err);
        double e = rel_err(og, oc, a.qn);
        CHECK_MSG(e < 1e-5, "window attention M=%d nh=%d nkv=%d hd=%d n_past=%d window=%d: %.3g", a.M, a.nh, a.nkv,
                  a.hd, a.np, a.win, e);
        for (int m = 0; m < a.M; m++) {
            CHECK(wgpu(&a, one, m, 1, 0, err, sizeof err) == 0);
            CHECK_MSG(!memcmp(one, og + (size_t)m * row, sizeof(float) * row),
                      "window attention M=%d n_past=%d window=%d: row %d alone differs", a.M, a.np, a.win, m);
        }
        free(oc), free(og), free(one);
        attn_case_free(&a);
    }
}

/* The decode attention's launch switches (the spread shape, the early
 * first chunk, verify rows on more warps) give the same bits under a
 * window, whose first chunk a block starts from. */
TEST(cuda_attention_window_same_bits) {
    if (!have_gpu()) return;
    char err[512];
    const int shapes[][6] = {{1, 32, 8, 128, 4000, 1024}, {16, 32, 8, 128, 600, 100}, {9, 32, 8, 128, 8000, 4096},
                             {4, 16, 4, 64, 63, 20},      {3, 8, 1, 256, 2000, 300}};
    int (*sets[])(int) = {cuda_test_attention_spread, cuda_test_attention_early, cuda_test_attention_wide};
    const char *names[] = {"spread", "early", "wide"};
    for (size_t k = 0; k < 3; k++) {
        const int prev = sets[k](0);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            attn_case a = wcase_make(shapes[s]);
            float *o0 = xmalloc(sizeof(float) * a.qn), *o1 = xmalloc(sizeof(float) * a.qn);
            memset(o1, 0xff, sizeof(float) * a.qn);
            sets[k](0);
            CHECK_MSG(wgpu(&a, o0, 0, a.M, 0, err, sizeof err) == 0, "%s", err);
            sets[k](1);
            CHECK_MSG(wgpu(&a, o1, 0, a.M, 0, err, sizeof err) == 0, "%s", err);
            CHECK_MSG(!memcmp(o0, o1, sizeof(float) * a.qn), "window attention, %s: M=%d n_past=%d window=%d differ",
                      names[k], a.M, a.np, a.win);
            free(o0), free(o1);
            attn_case_free(&a);
        }
        sets[k](prev);
    }
}

/* The prefill attention kernels under a window (the warpgroup-mma one where
 * it runs, then k_attn_tc), against the CPU, across the span boundary
 * (2048 positions) with spans and chunks before the window skipped; the
 * rows from a later first row as a batch of their own (other blocks, other
 * skips) give the same bits. */
TEST(cuda_attention_tiled_window_vs_cpu) {
    if (!have_gpu()) return;
    char err[512];
    const int shapes[][6] = {{200, 32, 8, 128, 300, 100}, {130, 4, 4, 64, 2000, 1024}, {77, 6, 2, 128, 0, 16},
                             {40, 16, 2, 32, 4100, 2048}, {129, 8, 1, 64, 4090, 4096}, {70, 8, 2, 128, 2040, 5},
                             {150, 4, 1, 64, 6000, 3000}};
    int prev = cuda_test_attention_wg(-1);
    for (int pass = 0; pass < 2; pass++) {
        cuda_test_attention_wg(pass ? 0 : -1);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            attn_case a = wcase_make(shapes[s]);
            const size_t row = (size_t)a.nh * a.hd;
            const char *kind = cuda_test_attn_wg_ready(a.hd) ? "wgmma" : "mma.sync";
            float *oc = xmalloc(sizeof(float) * a.qn), *og = xmalloc(sizeof(float) * a.qn),
                  *o2 = xmalloc(sizeof(float) * a.qn);
            wcpu(&a, oc);
            CHECK_MSG(wgpu(&a, og, 0, a.M, 1, err, sizeof err) == 0, "%s", err);
            double e = rel_err(og, oc, a.qn);
            CHECK_MSG(e < 1e-5, "prefill window attention (%s) M=%d nh=%d hd=%d n_past=%d window=%d: %.3g", kind, a.M,
                      a.nh, a.hd, a.np, a.win, e);
            const int starts[] = {1, a.M / 2, a.M - 3};
            for (int i = 0; i < 3; i++) {
                const int m0 = starts[i];
                if (m0 < 1 || m0 >= a.M) continue;
                CHECK(wgpu(&a, o2, m0, a.M - m0, 1, err, sizeof err) == 0);
                CHECK_MSG(!memcmp(o2, og + (size_t)m0 * row, sizeof(float) * (size_t)(a.M - m0) * row),
                          "prefill window attention (%s) M=%d window=%d: the rows from %d as their own batch differ",
                          kind, a.M, a.win, m0);
            }
            free(oc), free(og), free(o2);
            attn_case_free(&a);
        }
    }
    cuda_test_attention_wg(prev);
}

/* ---- GELU gating and the steps around the matmuls --------------------- */

/* the CPU's GELU-gated MLP input of x (RMSNorm first with g when not NULL):
   y = gelu_tanh(x.W1^T) * (x.W2^T); c, xn scratch of y's and x's size */
static void cpu_geglu(float *y, float *c, float *xn, const float *x, const float *g, int M, int N, int K,
                      const tensor *t1, const tensor *t2) {
    const float *in = x;
    if (g) {
        op_rmsnorm(xn, x, g, M, K, 1e-6f);
        in = xn;
    }
    op_matmul(NULL, y, in, M, t1, NULL);
    op_matmul(NULL, c, in, M, t2, NULL);
    op_geglu(y, y, c, M * N);
}

/* GELU gating (MM_GEGLU) in the matmul's epilogue against the CPU's
 * matmuls and op_geglu: bf16, f16 and f32 weights (the tensor-core and FMA
 * kernels), the folded norm, the prefill path (cuBLAS groups and the rows
 * past them), the pre-cut copy of the output and the norm run apart (the
 * folded norm's bits), each row alone the batch's bits. */
TEST(cuda_geglu_matmul_vs_cpu) {
    if (!have_gpu()) return;
    char err[512];
    const int shapes[][3] = {{1, 64, 64}, {3, 37, 129}, {9, 72, 264}, {16, 512, 1024}, {5, 1000, 256}, {17, 96, 136}};
    const ds_dtype dts[] = {DT_BF16, DT_F16, DT_F32};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        const size_t MK = (size_t)M * K, MN = (size_t)M * N, NK = (size_t)N * K;
        float *x = xmalloc(sizeof(float) * MK), *xn = xmalloc(sizeof(float) * MK), *g = xmalloc(sizeof(float) * K);
        float *w1 = xmalloc(sizeof(float) * NK), *w2 = xmalloc(sizeof(float) * NK);
        float *a = xmalloc(sizeof(float) * MN), *c = xmalloc(sizeof(float) * MN), *yg = xmalloc(sizeof(float) * MN);
        float *yb = xmalloc(sizeof(float) * MN), *row = xmalloc(sizeof(float) * N);
        uint32_t *ca = xmalloc(sizeof(uint32_t) * MN), *cb = xmalloc(sizeof(uint32_t) * MN);
        fill(x, MK, 3.0f);
        for (int i = 0; i < K; i++) g[i] = 1.0f + frand() * 0.5f;
        fill(w1, NK, 0.1f);
        fill(w2, NK, 0.1f);
        for (int d = 0; d < 3; d++) {
            void *p1 = make_weights(dts[d], w1, NK), *p2 = make_weights(dts[d], w2, NK);
            tensor t1 = {.name = "w1", .dtype = dts[d], .ndim = 2, .shape = {N, K}, .data = p1,
                         .nbytes = NK * dtype_size(dts[d])};
            tensor t2 = t1;
            t2.name = "w2", t2.data = p2;
            /* no norm */
            cpu_geglu(a, c, xn, x, NULL, M, N, K, &t1, &t2);
            CHECK_MSG(cuda_test_matmul_fused(yg, x, M, p1, p2, dts[d], N, K, NULL, 3, err, sizeof err) == 0, "%s", err);
            double e = rel_err(yg, a, MN);
            CHECK_MSG(e < 1e-5, "geglu matmul %s M=%d N=%d K=%d: %.3g", dtype_name(dts[d]), M, N, K, e);
            for (int m = 0; m < M; m += M > 4 ? M / 4 : 1) {
                CHECK(cuda_test_matmul_fused(row, x + (size_t)m * K, 1, p1, p2, dts[d], N, K, NULL, 3, err,
                                             sizeof err) == 0);
                CHECK_MSG(!memcmp(row, yg + (size_t)m * N, sizeof(float) * N),
                          "geglu matmul %s M=%d: row %d differs from the row alone", dtype_name(dts[d]), M, m);
            }
            /* the norm folded in (bf16 / f16, K a multiple of 8) */
            if (dts[d] != DT_F32 && K % 8 == 0) {
                cpu_geglu(a, c, xn, x, g, M, N, K, &t1, &t2);
                CHECK_MSG(cuda_test_matmul_norm(yg, x, M, p1, p2, dts[d], N, K, NULL, g, 1e-6f, 3, err, sizeof err) == 0,
                          "%s", err);
                e = rel_err(yg, a, MN);
                CHECK_MSG(e < 1e-5, "norm+geglu matmul %s M=%d N=%d K=%d: %.3g", dtype_name(dts[d]), M, N, K, e);
                for (int m = 0; m < M; m += M > 4 ? M / 4 : 1) {
                    CHECK(cuda_test_matmul_norm(row, x + (size_t)m * K, 1, p1, p2, dts[d], N, K, NULL, g, 1e-6f, 3, err,
                                                sizeof err) == 0);
                    CHECK_MSG(!memcmp(row, yg + (size_t)m * N, sizeof(float) * N),
                              "norm+geglu matmul %s M=%d: row %d differs from the row alone", dtype_name(dts[d]), M, m);
                }
                /* bf16 at 1-16 rows: the pre-cut copy (the down projection's
                   input) and the norm run apart give the folded norm's bits */
                if (dts[d] == DT_BF16 && M <= 16 && N % 8 == 0) {
                    memset(ca, 0xff, sizeof(uint32_t) * MN);
                    memset(cb, 0xee, sizeof(uint32_t) * MN);
                    CHECK_MSG(cuda_test_matmul_cut(yb, ca, x, M, p1, p2, N, K, NULL, g, 1e-6f, 3, err, sizeof err) == 0,
                              "%s", err);
                    CHECK_MSG(!memcmp(yb, yg, sizeof(float) * MN), "geglu M=%d N=%d: with the pre-cut copy, other bits",
                              M, N);
                    CHECK_MSG(cuda_test_matmul_norm_apart(yb, cb, x, M, p1, p2, N, K, NULL, g, 1e-6f, 3, err,
                                                          sizeof err) == 0,
                              "%s", err);
                    CHECK_MSG(!memcmp(yb, yg, sizeof(float) * MN) && !memcmp(ca, cb, sizeof(uint32_t) * MN),
                              "geglu M=%d N=%d: the norm apart gives other bits", M, N);
                }
            }
            free(p1), free(p2);
        }
        free(x), free(xn), free(g), free(w1), free(w2), free(a), free(c), free(yg), free(yb), free(row), free(ca),
            free(cb);
    }
    /* the prefill path: cuBLAS groups (two of 128 rows) and the rows past them */
    const int M = 300, N = 136, K = 264;
    const size_t MK = (size_t)M * K, MN = (size_t)M * N, NK = (size_t)N * K;
    float *x = xmalloc(sizeof(float) * MK), *xn = xmalloc(sizeof(float) * MK), *g = xmalloc(sizeof(float) * K);
    float *w1 = xmalloc(sizeof(float) * NK), *w2 = xmalloc(sizeof(float) * NK);
    float *a = xmalloc(sizeof(float) * MN), *c = xmalloc(sizeof(float) * MN), *yg = xmalloc(sizeof(float) * MN);
    fill(x, MK, 3.0f);
    for (int i = 0; i < K; i++) g[i] = 1.0f + frand() * 0.5f;
    fill(w1, NK, 0.1f);
    fill(w2, NK, 0.1f);
    void *p1 = make_weights(DT_BF16, w1, NK), *p2 = make_weights(DT_BF16, w2, NK);
    tensor t1 = {.name = "w1", .dtype = DT_BF16, .ndim = 2, .shape = {N, K}, .data = p1, .nbytes = NK * 2};
    tensor t2 = t1;
    t2.name = "w2", t2.data = p2;
    cpu_geglu(a, c, xn, x, g, M, N, K, &t1, &t2);
    CHECK_MSG(cuda_test_matmul_prefill(yg, x, M, p1, p2, N, K, NULL, g, 1e-6f, 3, err, sizeof err) == 0, "%s", err);
    double e = rel_err(yg, a, MN);
    CHECK_MSG(e < 1e-4, "prefill geglu M=%d N=%d K=%d: %.3g", M, N, K, e);
    free(x), free(xn), free(g), free(w1), free(w2), free(a), free(c), free(yg), free(p1), free(p2);
}

/* The steps of cuda_elem.cu against the CPU ops: the embedding's scale and
 * the soft-cap exact but for the device's tanhf (within 2 ulp), GELU
 * gating apart within 1e-6 of op_geglu, a norm then residual add within
 * 1e-6 of op_rmsnorm and op_add, each row alone its batch's bits. */
TEST(cuda_elem_vs_cpu) {
    if (!have_gpu()) return;
    char err[512];
    const int dims[][2] = {{1, 64}, {7, 100}, {3, 4096}, {33, 640}};
    for (size_t s = 0; s < sizeof dims / sizeof dims[0]; s++) {
        const int M = dims[s][0], D = dims[s][1];
        const size_t n = (size_t)M * D;
        float *x = xmalloc(sizeof(float) * n), *y = xmalloc(sizeof(float) * n), *w = xmalloc(sizeof(float) * D);
        float *c = xmalloc(sizeof(float) * n), *gk = xmalloc(sizeof(float) * n), *t = xmalloc(sizeof(float) * n);
        fill(x, n, 40.0f);
        fill(y, n, 3.0f);
        for (int i = 0; i < D; i++) w[i] = 1.0f + frand() * 0.5f;
        /* the scale: bit-exact */
        memcpy(c, x, sizeof(float) * n);
        op_scale(c, 8.0f, (int)n);
        memcpy(gk, x, sizeof(float) * n);
        CHECK_MSG(cuda_test_elem(0, gk, NULL, NULL, M, D, 8.0f, err, sizeof err) == 0, "%s", err);
        CHECK_MSG(!memcmp(gk, c, sizeof(float) * n), "scale M=%d D=%d: not x * s", M, D);
        /* the soft-cap */
        memcpy(c, x, sizeof(float) * n);
        op_softcap(c, 30.0f, (int)n);
        memcpy(gk, x, sizeof(float) * n);
        CHECK_MSG(cuda_test_elem(1, gk, NULL, NULL, M, D, 30.0f, err, sizeof err) == 0, "%s", err);
        double e = rel_err(gk, c, n);
        CHECK_MSG(e < 1e-6, "softcap M=%d D=%d: %.3g", M, D, e);
        /* GELU gating apart */
        for (size_t i = 0; i < n; i++) t[i] = x[i] / 10.0f;
        op_geglu(c, t, y, (int)n);
        memcpy(gk, t, sizeof(float) * n);
        CHECK_MSG(cuda_test_elem(2, gk, y, NULL, M, D, 0.0f, err, sizeof err) == 0, "%s", err);
        e = rel_err(gk, c, n);
        CHECK_MSG(e < 1e-6, "geglu apart M=%d D=%d: %.3g", M, D, e);
        /* a norm of y then the residual add into x */
        op_rmsnorm(t, y, w, M, D, 1e-6f);
        memcpy(c, x, sizeof(float) * n);
        op_add(c, t, (int)n);
        memcpy(gk, x, sizeof(float) * n);
        CHECK_MSG(cuda_test_elem(3, gk, y, w, M, D, 1e-6f, err, sizeof err) == 0, "%s", err);
        e = rel_err(gk, c, n);
        CHECK_MSG(e < 1e-6, "rmsnorm add M=%d D=%d: %.3g", M, D, e);
        memcpy(t, x + n - D, sizeof(float) * D);
        CHECK(cuda_test_elem(3, t, y + n - D, w, 1, D, 1e-6f, err, sizeof err) == 0);
        CHECK_MSG(!memcmp(t, gk + n - D, sizeof(float) * D), "rmsnorm add M=%d: the last row alone differs", M);
        free(x), free(y), free(w), free(c), free(gk), free(t);
    }
}

/* ---- the family fixtures on the GPU ------------------------------------ */

#define FAM_PROMPT 200 /* a cuBLAS group and 72 rows past it; windows of 16 full */
#define FAM_STEPS 8

/* the checkpoint at path (a folder or a GGUF file) on device dev */
static model *load_fixture(const char *path, const char *dev) {
    char err[1024];
    model *m;
    model_load_opts o = {.device = dev};
    if (model_load(&m, path, &o, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "%s on %s: %s", path, dev, err);
        return NULL;
    }
    return m;
}

/* the prompt's logits (every row into lg[FAM_PROMPT][V]) in calls of chunk
   rows (0: one call), then FAM_STEPS greedy steps decoded one by one (ids,
   their logits rows after the prompt's) */
static int fam_run(model *m, const int *prompt, int chunk, float *lg, int *ids, char *err, size_t errlen) {
    const int V = model_cfg(m)->vocab_size;
    model_ctx *c;
    if (mctx_create(&c, m, 256, 256, NULL, err, errlen) != 0) return -1;
    int rc = 0;
    for (int r0 = 0; !rc && r0 < FAM_PROMPT;) {
        const int n = chunk ? (FAM_PROMPT - r0 < chunk ? FAM_PROMPT - r0 : chunk) : FAM_PROMPT;
        model_batch b = {.n = n, .tokens = prompt + r0, .n_logits = n, .logits = lg + (size_t)r0 * V};
        rc = model_forward(c, &b, err, errlen);
        r0 += n;
    }
    float *row = lg + (size_t)(FAM_PROMPT - 1) * V;
    for (int i = 0; !rc && i < FAM_STEPS; i++) {
        ids[i] = op_argmax(row, V);
        int am = -1;
        row = lg + (size_t)(FAM_PROMPT + i) * V;
        model_batch d = {.n = 1, .tokens = ids + i, .n_logits = 1, .logits = row, .argmax = &am};
        rc = model_forward(c, &d, err, errlen);
        if (!rc && am != op_argmax(row, V))
            rc = ds_err(err, errlen, "step %d: the device's argmax %d, the logits row's %d", i, am, op_argmax(row, V));
    }
    mctx_free(c);
    return rc;
}

/* the FAM_STEPS greedy ids as one verify batch after the prompt, their
   logits into lg[FAM_STEPS][V] */
static int fam_verify(model *m, const int *prompt, const int *ids, float *lg, char *err, size_t errlen) {
    model_ctx *c;
    if (mctx_create(&c, m, 256, 256, NULL, err, errlen) != 0) return -1;
    model_batch p = {.n = FAM_PROMPT, .tokens = prompt, .n_logits = 1, .logits = lg};
    int rc = model_forward(c, &p, err, errlen);
    /* (the anchor is the prompt's last id: the verify's rows are the decode
       steps' rows, ids[0] at position FAM_PROMPT ...) */
    model_batch v = {.n = FAM_STEPS, .tokens = ids, .n_logits = FAM_STEPS, .logits = lg};
    if (!rc) rc = model_forward(c, &v, err, errlen);
    mctx_free(c);
    return rc;
}

/* the checkpoint at path (name: for messages) on the GPU: every logits row
   within tol of the CPU's (the golden bound, or for quantized weights the
   bound of the GPU's prefill groups, which round them to bf16), the rest
   bit for bit as above */
static void family_on_gpu(const char *path, const char *name, double tol) {
    char err[1024];
    model *mg = load_fixture(path, "cuda"), *mc = mg ? load_fixture(path, "cpu") : NULL;
    if (!mc) {
        if (mg) model_free(mg);
        return;
    }
    const int V = model_cfg(mg)->vocab_size;
    int prompt[FAM_PROMPT];
    uint32_t r = 777u;
    for (int i = 0; i < FAM_PROMPT; i++) {
        r = r * 1664525u + 1013904223u;
        prompt[i] = (int)((r >> 8) % (uint32_t)V);
    }
    const size_t nl = (size_t)(FAM_PROMPT + FAM_STEPS) * V;
    float *lg = xmalloc(sizeof(float) * nl), *lb = xmalloc(sizeof(float) * nl), *lc = xmalloc(sizeof(float) * nl);
    float *lv = xmalloc(sizeof(float) * (size_t)FAM_STEPS * V);
    int ig[FAM_STEPS], ib[FAM_STEPS], ic[FAM_STEPS];
    CHECK_MSG(fam_run(mg, prompt, 0, lg, ig, err, sizeof err) == 0, "%s: %s", name, err);
    CHECK_MSG(fam_run(mc, prompt, 0, lc, ic, err, sizeof err) == 0, "%s: %s", name, err);
    /* every row (the prompt's, a cuBLAS group among them, and the steps')
       within the golden tolerance of the CPU's; the steps from the GPU's
       ids, which the CPU's equal unless a near tie parts them */
    double worst = 0;
    for (int i = 0; i < FAM_PROMPT + FAM_STEPS; i++) {
        if (i >= FAM_PROMPT && memcmp(ig, ic, sizeof ig)) break;
        const double e = rel_err(lg + (size_t)i * V, lc + (size_t)i * V, (size_t)V);
        worst = e > worst ? e : worst;
    }
    CHECK_MSG(worst <= tol, "%s: GPU vs CPU logits %.3g > %g", name, worst, tol);
    fprintf(stderr, "     %s: GPU vs CPU %.3g, greedy continuation %s\n", name, worst,
            memcmp(ig, ic, sizeof ig) ? "differs" : "the same");
    /* the prompt in 128-row calls (the same cuBLAS groups): the same cache */
    CHECK_MSG(fam_run(mg, prompt, 128, lb, ib, err, sizeof err) == 0, "%s: %s", name, err);
    CHECK_MSG(!memcmp(lg + (size_t)(FAM_PROMPT - 1) * V, lb + (size_t)(FAM_PROMPT - 1) * V,
                      sizeof(float) * (size_t)(FAM_STEPS + 1) * V),
              "%s: the prompt in one call and in 128-row calls continue with other bits", name);
    /* the steps as one verify: each row the bits of the row decoded alone */
    CHECK_MSG(fam_verify(mg, prompt, ig, lv, err, sizeof err) == 0, "%s: %s", name, err);
    for (int i = 0; i < FAM_STEPS; i++)
        CHECK_MSG(!memcmp(lv + (size_t)i * V, lg + (size_t)(FAM_PROMPT + i) * V, sizeof(float) * V),
                  "%s: verify row %d differs from the row decoded alone", name, i);
    /* chained decoding (the steps' captured graphs, each step's input the
       previous one's argmax on the device): the same ids */
    model_ctx *c;
    CHECK_MSG(mctx_create(&c, mg, 256, 256, NULL, err, sizeof err) == 0, "%s: %s", name, err);
    model_batch p = {.n = FAM_PROMPT, .tokens = prompt, .n_logits = 1, .logits = lv};
    CHECK_MSG(model_forward(c, &p, err, sizeof err) == 0, "%s: %s", name, err);
    if (mctx_chain_ok(c)) {
        CHECK_MSG(mctx_chain_start(c, ig[0], err, sizeof err) == 0, "%s: %s", name, err);
        for (int i = 1; i < FAM_STEPS; i++) {
            int id = -1;
            CHECK_MSG(mctx_chain_next(c, i < FAM_STEPS - 1, &id, err, sizeof err) == 0, "%s: %s", name, err);
            CHECK_MSG(id == ig[i], "%s: chained step %d gave %d, decoding %d", name, i, id, ig[i]);
        }
        mctx_chain_end(c);
    }
    mctx_free(c);
    free(lg), free(lb), free(lc), free(lv);
    model_free(mg);
    model_free(mc);
}

/* fixture name of tests/data/models as it is, or written as a Q8_0 GGUF */
static void family(const char *name, int q8) {
    if (!have_gpu()) return;
    char dir[1024], out[1200], err[1024];
    snprintf(dir, sizeof dir, "%s/models/%s", test_data_dir(), name);
    if (!q8) {
        family_on_gpu(dir, name, 1e-3);
        return;
    }
    snprintf(out, sizeof out, "%s/%s-cuda-q8_0.gguf", test_tmp_dir(), name);
    if (quantize_model(dir, out, "Q8_0", 0, 2, NULL, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "quantize %s: %s", name, err);
        return;
    }
    family_on_gpu(out, name, 5e-2);
}

TEST(cuda_family_gemma3) { family("gemma3-bf16", 0); }
TEST(cuda_family_mistral_swa) { family("mistral-swa-bf16", 0); }
TEST(cuda_family_mistral) { family("mistral-bf16", 0); }
TEST(cuda_family_gemma3_q8_0) { family("gemma3-bf16", 1); }
TEST(cuda_family_mistral_swa_q8_0) { family("mistral-swa-bf16", 1); }
