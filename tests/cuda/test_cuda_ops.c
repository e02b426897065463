/* CUDA ops against the CPU ops on random inputs of many shapes (including
 * sizes that are not multiples of the kernels' tiles), and the batch
 * invariance the lossless guarantee rests on: a row's matmul and attention
 * results are bit-identical whatever the batch they are computed in. Built
 * only by `make test-cuda` (tests/cuda/), run on a machine with a GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_hooks.h"
#include "engine/ops.h"
#include "engine/tensor.h"
#include "test.h"
#include "cuda/cuda_test.h"
#include "base/util.h"

static uint64_t rng = 0x1234567ULL;
#define frand() cu_frand(&rng)
#define fill(x, n, s) cu_fill(&rng, (x), (n), (s))
#define rel_err test_rel_err

TEST(cuda_device) {
    if (!have_gpu()) return;
    char d[256];
    CHECK_EQ_INT(cuda_describe(0, d, sizeof d), 0);
    fprintf(stderr, "     %s\n", d);
}

/* The build has kernels for the device it runs on; where the suite is
 * told the GPU is a Hopper one (DSPARK_TEST_REQUIRE_WG=1, scripts/test-cuda
 * on the H200), they were compiled with Hopper's clusters and
 * programmatic dependent launch, and both are on. */
TEST(cuda_build_matches_device) {
    if (!have_gpu()) return;
    char err[512] = "";
    int a = cuda_test_code_arch(err, sizeof err);
    CHECK_MSG(a >= 0, "%s", err);
    fprintf(stderr, "     kernels from compute_%d\n", a);
    const char *req = getenv("DSPARK_TEST_REQUIRE_WG");
    if (req && !strcmp(req, "1")) {
        CHECK_MSG(a == 0 || a >= 90, "a Hopper GPU runs kernels built for compute_%d", a);
        CHECK_MSG(cuda_test_hopper_paths(), "clusters or programmatic dependent launch are off on a Hopper GPU");
    }
}

TEST(cuda_matmul_vs_cpu) {
    if (!have_gpu()) return;
    const int shapes[][3] = {{1, 64, 64}, {1, 1000, 256}, {3, 37, 129}, {5, 131, 1001}, {8, 256, 512},
                             {9, 70, 264}, {16, 512, 1024}, {17, 33, 72}, {64, 96, 200}, {1, 4096, 4096}};
    const ds_dtype dts[] = {DT_BF16, DT_F16, DT_F32};
    char err[512];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int d = 0; d < 3; d++) {
            int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            float *x = xmalloc(sizeof(float) * M * K), *wf = xmalloc(sizeof(float) * N * K);
            float *b = xmalloc(sizeof(float) * N), *yc = xmalloc(sizeof(float) * M * N), *yg = xmalloc(sizeof(float) * M * N);
            fill(x, (size_t)M * K, 1.0f);
            fill(wf, (size_t)N * K, 0.1f);
            fill(b, (size_t)N, 0.5f);
            void *w = make_weights(dts[d], wf, (size_t)N * K);
            tensor t = {.name = "w", .dtype = dts[d], .ndim = 2, .shape = {N, K}, .data = w,
                        .nbytes = (size_t)N * K * dtype_size(dts[d])};
            op_matmul(NULL, yc, x, M, &t, s % 2 ? b : NULL);
            for (int i = 0; i < M * N; i++) yg[i] = NAN;
            int rc = cuda_test_matmul(yg, x, M, w, dts[d], N, K, s % 2 ? b : NULL, err, sizeof err);
            CHECK_MSG(rc == 0, "%s", err);
            double e = rel_err(yg, yc, (size_t)M * N);
            CHECK_MSG(e < 1e-5, "matmul M=%d N=%d K=%d %s: rel err %.3g", M, N, K, dtype_name(dts[d]), e);
            /* batch invariance: each row alone gives the same bits */
            float *row = xmalloc(sizeof(float) * N);
            for (int m = 0; m < M; m += (M > 4 ? M / 4 : 1)) {
                cuda_test_matmul(row, x + (size_t)m * K, 1, w, dts[d], N, K, s % 2 ? b : NULL, err, sizeof err);
                CHECK_MSG(!memcmp(row, yg + (size_t)m * N, sizeof(float) * N), "matmul row %d of M=%d N=%d K=%d %s differs "
                          "from the row alone", m, M, N, K, dtype_name(dts[d]));
            }
            free(row);
            free(x), free(wf), free(b), free(yc), free(yg), free(w);
        }
}

TEST(cuda_rmsnorm_rope_embed_vs_cpu) {
    if (!have_gpu()) return;
    char err[512];
    const int dims[][2] = {{1, 64}, {7, 100}, {3, 4096}, {33, 128}};
    for (size_t s = 0; s < 4; s++) {
        int M = dims[s][0], D = dims[s][1];
        float *x = xmalloc(sizeof(float) * M * D), *w = xmalloc(sizeof(float) * D), *yc = xmalloc(sizeof(float) * M * D),
              *yg = xmalloc(sizeof(float) * M * D);
        fill(x, (size_t)M * D, 3.0f);
        fill(w, (size_t)D, 1.0f);
        op_rmsnorm(yc, x, w, M, D, 1e-6f);
        CHECK(cuda_test_rmsnorm(yg, x, w, M, D, 1e-6f, err, sizeof err) == 0);
        double e = rel_err(yg, yc, (size_t)M * D);
        CHECK_MSG(e < 1e-5, "rmsnorm M=%d D=%d: %.3g", M, D, e);
        free(x), free(w), free(yc), free(yg);
    }
    const int rs[][3] = {{1, 2, 64}, {5, 3, 128}, {4, 32, 128}, {2, 1, 80}};
    for (size_t s = 0; s < 4; s++) {
        int M = rs[s][0], nh = rs[s][1], hd = rs[s][2];
        size_t n = (size_t)M * nh * hd;
        float *xc = xmalloc(sizeof(float) * n), *xg = xmalloc(sizeof(float) * n), *f = xmalloc(sizeof(float) * hd / 2);
        int *pos = xmalloc(sizeof(int) * M);
        fill(xc, n, 1.0f);
        memcpy(xg, xc, sizeof(float) * n);
        for (int i = 0; i < hd / 2; i++) f[i] = powf(1e6f, -2.0f * i / hd);
        for (int m = 0; m < M; m++) pos[m] = m * 997 + 3;
        op_rope(xc, M, nh, hd, pos, f);
        CHECK(cuda_test_rope(xg, M, nh, hd, pos, f, err, sizeof err) == 0);
        double e = rel_err(xg, xc, n);
        CHECK_MSG(e < 1e-5, "rope M=%d nh=%d hd=%d: %.3g", M, nh, hd, e);
        free(xc), free(xg), free(f), free(pos);
    }
    int V = 300, H = 72, M = 9, tok[9] = {0, 5, 299, 17, 17, 100, 1, 250, 42};
    float *ef = xmalloc(sizeof(float) * V * H), *yc = xmalloc(sizeof(float) * M * H), *yg = xmalloc(sizeof(float) * M * H);
    fill(ef, (size_t)V * H, 1.0f);
    const ds_dtype dts[] = {DT_BF16, DT_F16, DT_F32};
    for (int d = 0; d < 3; d++) {
        void *e = make_weights(dts[d], ef, (size_t)V * H);
        tensor t = {.name = "e", .dtype = dts[d], .ndim = 2, .shape = {V, H}, .data = e,
                    .nbytes = (size_t)V * H * dtype_size(dts[d])};
        op_embed(yc, &t, tok, M);
        CHECK(cuda_test_embed(yg, e, dts[d], V, H, tok, M, err, sizeof err) == 0);
        CHECK_MSG(!memcmp(yc, yg, sizeof(float) * M * H), "embed %s differs", dtype_name(dts[d]));
        free(e);
    }
    free(ef), free(yc), free(yg);
}

/* cuda_test_attention on case a (tiled: the prefill kernel), into out */
static int attn_case_gpu(const attn_case *a, float *out, int M, int np, int tiled, char *err, size_t errlen) {
    return cuda_test_attention(out, a->q + (size_t)(a->M - M) * a->nh * a->hd, M, a->nh, a->nkv, a->hd, a->k, a->v,
                               a->cap, np, a->scale, tiled, err, errlen);
}

TEST(cuda_attention_vs_cpu) {
    if (!have_gpu()) return;
    char err[512];
    /* M, nh, nkv, hd, n_past */
    /* (head_dim 256: one K/V stage at any length, so decode rows take the
       K-and-V-apart path and wider batches the one-stage loop) */
    const int shapes[][5] = {{1, 4, 1, 64, 0},  {1, 32, 8, 128, 511}, {5, 8, 2, 128, 100}, {16, 16, 4, 64, 3},
                             {33, 4, 4, 32, 7}, {2, 6, 3, 80, 1000},  {12, 32, 8, 128, 600}, {10, 16, 2, 64, 70},
                             {1, 8, 2, 256, 300}, {6, 8, 4, 256, 130}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        attn_case a = attn_case_make(&rng, shapes[s], 5);
        int M = a.M, nh = a.nh, hd = a.hd;
        float *oc = xmalloc(sizeof(float) * a.qn), *og = xmalloc(sizeof(float) * a.qn);
        op_attention(NULL, oc, a.q, M, nh, a.nkv, hd, a.k, a.v, a.cap, a.np, a.scale);
        CHECK_MSG(attn_case_gpu(&a, og, M, a.np, 0, err, sizeof err) == 0, "%s", err);
        double e = rel_err(og, oc, a.qn);
        CHECK_MSG(e < 1e-5, "attention M=%d nh=%d nkv=%d hd=%d n_past=%d: %.3g", M, nh, a.nkv, hd, a.np, e);
        /* the last row alone (n_past + M - 1 positions before it) gives the same bits */
        float *last = xmalloc(sizeof(float) * (size_t)nh * hd);
        attn_case_gpu(&a, last, 1, a.np + M - 1, 0, err, sizeof err);
        CHECK_MSG(!memcmp(last, og + (size_t)(M - 1) * nh * hd, sizeof(float) * nh * hd),
                  "attention: last row of M=%d differs from the row alone", M);
        free(last);
        free(oc), free(og);
        attn_case_free(&a);
    }
}

/* Case a on the GPU with a launch switch off (set(0)) and on (set(1)):
 * 1 when both give the same bits. The second output starts as NaNs, so an
 * element left unwritten cannot pass. */
static int attn_case_same_bits(const attn_case *a, int (*set)(int), char *err, size_t errlen) {
    float *o0 = xmalloc(sizeof(float) * a->qn), *o1 = xmalloc(sizeof(float) * a->qn);
    memset(o1, 0xff, sizeof(float) * a->qn);
    set(0);
    int ok = attn_case_gpu(a, o0, a->M, a->np, 0, err, errlen) == 0;
    set(1);
    ok = ok && attn_case_gpu(a, o1, a->M, a->np, 0, err, errlen) == 0;
    if (ok && memcmp(o0, o1, sizeof(float) * a->qn))
        ok = 0, snprintf(err, errlen, "M=%d nh=%d nkv=%d hd=%d n_past=%d: the outputs differ", a->M, a->nh, a->nkv,
                         a->hd, a->np);
    free(o0), free(o1);
    return ok;
}

/* The shapes (M, nh, nkv, hd, n_past) the verify-width launch switch
 * (wide) is checked on: decode rows and verify
 * widths (3-4 rows, 9-16, more than one launch group), caches shorter
 * than a chunk, at a chunk's edge and of several chunks a block, one to
 * sixteen query heads a kv head, head sizes 32 to 256 (the spread shape,
 * the forward's choice from 1024 positions, is off in
 * attn_shapes_same_bits, so the caches past it are checked without it) */
static const int attn_switch_shapes[][5] = {
    {1, 32, 8, 128, 512},  {16, 32, 8, 128, 512}, {16, 32, 8, 128, 600}, {16, 32, 8, 128, 1000},
    {9, 32, 8, 128, 512},  {9, 32, 8, 128, 600},  {9, 32, 8, 128, 1000}, {3, 32, 8, 128, 100},
    {4, 16, 4, 64, 63},    {12, 8, 1, 128, 700},  {17, 32, 8, 128, 64},  {33, 4, 4, 32, 7},
    {5, 16, 2, 128, 2000}, {2, 32, 8, 128, 900},  {7, 16, 16, 64, 90},   {1, 8, 1, 256, 300}};

/* each of those shapes with a launch switch off and on
 * (attn_case_same_bits) in the two-stage shape; the shape's setting
 * restored, the switch's left to the caller */
static void attn_shapes_same_bits(int slack, int (*set)(int), const char *what) {
    char err[512];
    int prev_s = cuda_test_attention_spread(0);
    for (size_t s = 0; s < sizeof attn_switch_shapes / sizeof attn_switch_shapes[0]; s++) {
        attn_case a = attn_case_make(&rng, attn_switch_shapes[s], slack);
        CHECK_MSG(attn_case_same_bits(&a, set, err, sizeof err), "%s: %s", what, err);
        attn_case_free(&a);
    }
    cuda_test_attention_spread(prev_s);
}

/* The spread launch shape (the forward's for caches from 1024 positions, or
 * the tuning att_spread=1: one K/V stage, the kv heads interleaved over
 * more blocks) gives the default's bits: long caches (several chunks per
 * block either way), verify widths, and groups of one to eight query heads
 * per kv head (a larger single stage). */
TEST(cuda_attention_spread_same_bits) {
    if (!have_gpu()) return;
    char err[512];
    /* M, nh, nkv, hd, n_past */
    const int shapes[][5] = {{1, 32, 8, 128, 4000}, {16, 32, 8, 128, 600}, {9, 32, 8, 128, 8000}, {1, 16, 2, 64, 300},
                             {5, 8, 2, 128, 100},   {3, 32, 4, 128, 2000}, {1, 4, 1, 64, 0},     {4, 8, 8, 64, 500},
                             {2, 16, 8, 128, 1500}};
    int prev = cuda_test_attention_spread(0);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        attn_case a = attn_case_make(&rng, shapes[s], 70);
        CHECK_MSG(attn_case_same_bits(&a, cuda_test_attention_spread, err, sizeof err), "spread attention: %s", err);
        attn_case_free(&a);
    }
    /* the forward's choice: by cache length unless forced */
    cuda_test_attention_spread(-1);
    CHECK(!cuda_test_attn_spread_for(0) && !cuda_test_attn_spread_for(1023) && cuda_test_attn_spread_for(1024) &&
          cuda_test_attn_spread_for(40000));
    cuda_test_attention_spread(0);
    CHECK(!cuda_test_attn_spread_for(8192));
    cuda_test_attention_spread(1);
    CHECK(cuda_test_attn_spread_for(0));
    cuda_test_attention_spread(prev);
}

/* The decode attention's first chunk requested before the wait (the
 * default) or after it gives the same bits: caches shorter than a chunk,
 * at a chunk boundary and long (several chunks per block), verify widths,
 * more than one launch group, both launch shapes. */
TEST(cuda_attention_early_same_bits) {
    if (!have_gpu()) return;
    char err[512];
    /* M, nh, nkv, hd, n_past */
    const int shapes[][5] = {{1, 32, 8, 128, 512}, {16, 32, 8, 128, 600}, {9, 32, 8, 128, 3000}, {2, 16, 2, 64, 63},
                             {5, 8, 2, 128, 128},  {33, 4, 4, 32, 7},     {3, 8, 1, 256, 130},   {17, 8, 8, 64, 64},
                             {1, 16, 2, 64, 8000}};
    int prev_e = cuda_test_attention_early(1), prev_s = cuda_test_attention_spread(0);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        attn_case a = attn_case_make(&rng, shapes[s], 70);
        for (int spread = 0; spread < 2; spread++) {
            cuda_test_attention_spread(spread);
            CHECK_MSG(attn_case_same_bits(&a, cuda_test_attention_early, err, sizeof err),
                      "early attention, spread %d: %s", spread, err);
        }
        attn_case_free(&a);
    }
    cuda_test_attention_spread(prev_s);
    cuda_test_attention_early(prev_e);
}

/* The verify widths on twice the warps (the default) or on one block's
 * usual warps give the same bits: 3-4 rows (one (row, head) pair a warp
 * only when wide), 9-16 rows (one row a warp), more rows than one launch
 * group, groups of one to eight query heads, caches shorter than a chunk
 * and spanning several; decode rows (never wide) as a control. */
TEST(cuda_attention_wide_same_bits) {
    if (!have_gpu()) return;
    int prev_w = cuda_test_attention_wide(1);
    attn_shapes_same_bits(71, cuda_test_attention_wide, "wide attention");
    cuda_test_attention_wide(prev_w);
}

/* The prefill attention kernels against the CPU, across their span boundary
   (2048 positions) and with partial row tiles; a row's bits do not depend on
   the batch (the first rows alone equal the same rows in the wide batch).
   Both kernels where the warpgroup-mma one runs (sm_90a build, compute
   capability 9.0, head dims 64 and 128): it, then k_attn_tc with it off.
   DSPARK_TEST_REQUIRE_WG=1 (scripts/test-cuda) fails the test where the
   warpgroup-mma kernel does not run for head dim 128. */
TEST(cuda_attention_tiled_vs_cpu) {
    if (!have_gpu()) return;
    char err[512];
    const char *req = getenv("DSPARK_TEST_REQUIRE_WG");
    if (req && !strcmp(req, "1")) CHECK_MSG(cuda_test_attn_wg_ready(128), "the warpgroup-mma prefill attention is off");
    /* M, nh, nkv, hd, n_past */
    const int shapes[][5] = {{200, 32, 8, 128, 300}, {130, 4, 4, 64, 2000}, {77, 6, 2, 128, 0},  {40, 16, 2, 32, 4100},
                             {129, 3, 1, 96, 5},     {70, 32, 8, 128, 2040}, {65, 8, 1, 64, 4090}, {3, 16, 8, 128, 9}};
    int prev = cuda_test_attention_wg(-1);
    for (int pass = 0; pass < 2; pass++) {
        cuda_test_attention_wg(pass ? 0 : -1);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            attn_case a = attn_case_make(&rng, shapes[s], 3);
            int M = a.M, nh = a.nh, hd = a.hd;
            float *oc = xmalloc(sizeof(float) * a.qn), *og = xmalloc(sizeof(float) * a.qn);
            float *o2 = xmalloc(sizeof(float) * a.qn);
            op_attention(NULL, oc, a.q, M, nh, a.nkv, hd, a.k, a.v, a.cap, a.np, a.scale);
            CHECK_MSG(attn_case_gpu(&a, og, M, a.np, 1, err, sizeof err) == 0, "%s", err);
            double e = rel_err(og, oc, a.qn);
            CHECK_MSG(e < 1e-5, "prefill attention (%s) M=%d nh=%d nkv=%d hd=%d n_past=%d: %.3g",
                      cuda_test_attn_wg_ready(hd) ? "wgmma" : "mma.sync", M, nh, a.nkv, hd, a.np, e);
            int half = M / 2; /* the first half of the rows: q from row 0, as in the full batch */
            CHECK(cuda_test_attention(o2, a.q, half, nh, a.nkv, hd, a.k, a.v, a.cap, a.np, a.scale, 1, err, sizeof err) ==
                  0);
            CHECK_MSG(!memcmp(o2, og, sizeof(float) * (size_t)half * nh * hd),
                      "prefill attention (%s): the first %d rows differ from the same rows of %d",
                      cuda_test_attn_wg_ready(hd) ? "wgmma" : "mma.sync", half, M);
            free(oc), free(og), free(o2);
            attn_case_free(&a);
        }
    }
    cuda_test_attention_wg(prev);
}

TEST(cuda_matmul_fused_epilogues_vs_cpu) {
    if (!have_gpu()) return;
    const int shapes[][3] = {{1, 64, 64}, {3, 37, 129}, {9, 70, 264}, {16, 512, 1024}, {1, 1000, 256},
                             {12, 4096, 4096}, {17, 300, 2056}};
    char err[512];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        float *x = xmalloc(sizeof(float) * M * K), *w1 = xmalloc(sizeof(float) * N * K), *w2 = xmalloc(sizeof(float) * N * K);
        float *b = xmalloc(sizeof(float) * N), *y0 = xmalloc(sizeof(float) * M * N), *a = xmalloc(sizeof(float) * M * N);
        float *c = xmalloc(sizeof(float) * M * N), *yg = xmalloc(sizeof(float) * M * N);
        fill(x, (size_t)M * K, 1.0f);
        fill(w1, (size_t)N * K, 0.1f);
        fill(w2, (size_t)N * K, 0.1f);
        fill(b, (size_t)N, 0.5f);
        fill(y0, (size_t)M * N, 2.0f);
        void *p1 = make_weights(DT_BF16, w1, (size_t)N * K), *p2 = make_weights(DT_BF16, w2, (size_t)N * K);
        tensor t1 = {.name = "w1", .dtype = DT_BF16, .ndim = 2, .shape = {N, K}, .data = p1, .nbytes = (size_t)N * K * 2};
        tensor t2 = {.name = "w2", .dtype = DT_BF16, .ndim = 2, .shape = {N, K}, .data = p2, .nbytes = (size_t)N * K * 2};
        /* residual add: y0 + x.W1^T + b */
        op_matmul(NULL, a, x, M, &t1, b);
        for (int i = 0; i < M * N; i++) a[i] += y0[i];
        memcpy(yg, y0, sizeof(float) * M * N);
        CHECK_MSG(cuda_test_matmul_fused(yg, x, M, p1, NULL, DT_BF16, N, K, b, 1, err, sizeof err) == 0, "%s", err);
        double e = rel_err(yg, a, (size_t)M * N);
        CHECK_MSG(e < 1e-5, "matmul+add M=%d N=%d K=%d: %.3g", M, N, K, e);
        /* batch invariance of the add (o and down: the widths take other tile and row-group counts): rows alone */
        for (int m = 0; m < M; m += M > 4 ? M / 4 : 1) {
            float *row = xmalloc(sizeof(float) * N);
            memcpy(row, y0 + (size_t)m * N, sizeof(float) * N);
            CHECK_MSG(cuda_test_matmul_fused(row, x + (size_t)m * K, 1, p1, NULL, DT_BF16, N, K, b, 1, err, sizeof err) == 0,
                      "%s", err);
            CHECK_MSG(!memcmp(row, yg + (size_t)m * N, sizeof(float) * N),
                      "matmul+add row %d of M=%d N=%d K=%d differs from the row alone", m, M, N, K);
            free(row);
        }
        /* swiglu of two projections */
        op_matmul(NULL, a, x, M, &t1, NULL);
        op_matmul(NULL, c, x, M, &t2, NULL);
        op_swiglu(a, a, c, M * N);
        CHECK_MSG(cuda_test_matmul_fused(yg, x, M, p1, p2, DT_BF16, N, K, NULL, 2, err, sizeof err) == 0, "%s", err);
        e = rel_err(yg, a, (size_t)M * N);
        CHECK_MSG(e < 1e-5, "matmul swiglu M=%d N=%d K=%d: %.3g", M, N, K, e);
        free(x), free(w1), free(w2), free(b), free(y0), free(a), free(c), free(yg), free(p1), free(p2);
    }
}

/* the CPU's RMSNorm(x, g) then y = xn . W1^T + b (mode 0) or the SwiGLU of
   W1 and W2 (mode 2; c: scratch of y's size) */
static void cpu_norm_matmul(float *y, float *c, float *xn, const float *x, const float *g, float eps, int M, int N,
                            int K, const tensor *t1, const tensor *t2, const float *b, int mode) {
    op_rmsnorm(xn, x, g, M, K, eps);
    if (mode == 0) {
        op_matmul(NULL, y, xn, M, t1, b);
    } else {
        op_matmul(NULL, y, xn, M, t1, NULL);
        op_matmul(NULL, c, xn, M, t2, NULL);
        op_swiglu(y, y, c, M * N);
    }
}

/* RMSNorm folded into the tensor-core matmul, against the CPU's separate
   norm and matmul, and each row alone against the batch (bit identity) */
TEST(cuda_matmul_norm_vs_cpu) {
    if (!have_gpu()) return;
    const int shapes[][3] = {{1, 64, 64}, {5, 100, 256}, {9, 70, 264}, {16, 512, 1024}, {17, 40, 136}, {3, 1000, 4096}};
    char err[512];
    const float eps = 1e-6f;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        float *x = xmalloc(sizeof(float) * M * K), *xn = xmalloc(sizeof(float) * M * K), *g = xmalloc(sizeof(float) * K);
        float *w1 = xmalloc(sizeof(float) * N * K), *w2 = xmalloc(sizeof(float) * N * K), *b = xmalloc(sizeof(float) * N);
        float *a = xmalloc(sizeof(float) * M * N), *c = xmalloc(sizeof(float) * M * N), *yg = xmalloc(sizeof(float) * M * N);
        float *row = xmalloc(sizeof(float) * N);
        fill(x, (size_t)M * K, 3.0f);
        for (int i = 0; i < K; i++) g[i] = 1.0f + frand() * 0.5f;
        fill(w1, (size_t)N * K, 0.1f);
        fill(w2, (size_t)N * K, 0.1f);
        fill(b, (size_t)N, 0.5f);
        void *p1 = make_weights(DT_BF16, w1, (size_t)N * K), *p2 = make_weights(DT_BF16, w2, (size_t)N * K);
        tensor t1 = {.name = "w1", .dtype = DT_BF16, .ndim = 2, .shape = {N, K}, .data = p1, .nbytes = (size_t)N * K * 2};
        tensor t2 = {.name = "w2", .dtype = DT_BF16, .ndim = 2, .shape = {N, K}, .data = p2, .nbytes = (size_t)N * K * 2};
        for (int mode = 0; mode <= 2; mode += 2) {
            cpu_norm_matmul(a, c, xn, x, g, eps, M, N, K, &t1, &t2, b, mode);
            CHECK_MSG(cuda_test_matmul_norm(yg, x, M, p1, mode ? p2 : NULL, DT_BF16, N, K, mode ? NULL : b, g, eps,
                                            mode, err, sizeof err) == 0,
                      "%s", err);
            double e = rel_err(yg, a, (size_t)M * N);
            CHECK_MSG(e < 1e-5, "norm+matmul mode %d M=%d N=%d K=%d: %.3g", mode, M, N, K, e);
            for (int m = 0; m < M; m++) {
                CHECK(cuda_test_matmul_norm(row, x + (size_t)m * K, 1, p1, mode ? p2 : NULL, DT_BF16, N, K,
                                            mode ? NULL : b, g, eps, mode, err, sizeof err) == 0);
                CHECK_MSG(!memcmp(row, yg + (size_t)m * N, sizeof(float) * N),
                          "norm+matmul mode %d row %d of %d differs from the row alone", mode, m, M);
            }
        }
        free(x), free(xn), free(g), free(w1), free(w2), free(b), free(a), free(c), free(yg), free(row), free(p1),
            free(p2);
    }
}

/* the index of the first of n values whose pre-cut form in c (word 2p the
   bf16 heads of values 2p and 2p + 1, low half first, word 2p + 1 their
   tails) is not head = y rounded to bf16 (nearest even), tail = y - head
   rounded, or -1 */
static long cut_mismatch(const uint32_t *c, const float *y, size_t n) {
    const uint16_t *u = (const uint16_t *)c;
    for (size_t i = 0; i < n; i++) {
        const uint16_t h = u[4 * (i / 2) + i % 2], l = u[4 * (i / 2) + i % 2 + 2];
        uint32_t hb = (uint32_t)h << 16;
        float hf;
        memcpy(&hf, &hb, 4);
        if (h != ds_f32_to_bf16(y[i]) || l != ds_f32_to_bf16(y[i] - hf)) return (long)i;
    }
    return -1;
}

/* The o and down projections of decode and verify forwards take their
   inputs pre-cut, written by the kernel producing them (the attention's
   combine, the SwiGLU's epilogue): those copies hold each value's bf16
   head and tail in the layout the matmul loads, and the matmul from them
   gives the bits of the one cutting the f32 input itself, at 1-16 rows
   and on shapes off the tile sizes. */
TEST(cuda_matmul_cut_same_bits) {
    if (!have_gpu()) return;
    const int shapes[][3] = {{1, 64, 64}, {2, 200, 264}, {8, 96, 1000}, {9, 130, 520}, {16, 512, 1024}, {16, 33, 72},
                             {5, 4096, 512}};
    char err[512];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        float *x = xmalloc(sizeof(float) * M * K), *g = xmalloc(sizeof(float) * K), *b = xmalloc(sizeof(float) * N);
        float *w1 = xmalloc(sizeof(float) * N * K), *w2 = xmalloc(sizeof(float) * N * K);
        float *y0 = xmalloc(sizeof(float) * M * N), *ya = xmalloc(sizeof(float) * M * N),
              *yb = xmalloc(sizeof(float) * M * N);
        uint32_t *yc = xmalloc(sizeof(uint32_t) * M * N);
        fill(x, (size_t)M * K, 3.0f);
        for (int i = 0; i < K; i++) g[i] = 1.0f + frand() * 0.5f;
        fill(w1, (size_t)N * K, 0.1f);
        fill(w2, (size_t)N * K, 0.1f);
        fill(b, (size_t)N, 0.5f);
        fill(y0, (size_t)M * N, 1.0f);
        void *p1 = make_weights(DT_BF16, w1, (size_t)N * K), *p2 = make_weights(DT_BF16, w2, (size_t)N * K);
        /* residual add: from the f32 input, then from its pre-cut form */
        memcpy(ya, y0, sizeof(float) * M * N);
        memcpy(yb, y0, sizeof(float) * M * N);
        CHECK_MSG(cuda_test_matmul_fused(ya, x, M, p1, NULL, DT_BF16, N, K, b, 1, err, sizeof err) == 0, "%s", err);
        CHECK_MSG(cuda_test_matmul_cut(yb, NULL, x, M, p1, NULL, N, K, b, NULL, 0.0f, 1, err, sizeof err) == 0, "%s",
                  err);
        CHECK_MSG(!memcmp(ya, yb, sizeof(float) * M * N), "M=%d N=%d K=%d: the pre-cut input gives other bits", M, N,
                  K);
        /* SwiGLU with its pre-cut copy (refused where N, the K of the
           matmul that would take it, is not a multiple of 8) */
        if (N % 8) {
            CHECK_MSG(cuda_test_matmul_cut(yb, yc, x, M, p1, p2, N, K, NULL, g, 1e-6f, 2, err, sizeof err) != 0,
                      "M=%d N=%d: a pre-cut SwiGLU copy of odd width was written", M, N);
            free(x), free(g), free(b), free(w1), free(w2), free(y0), free(ya), free(yb), free(yc), free(p1), free(p2);
            continue;
        }
        CHECK_MSG(cuda_test_matmul_norm(ya, x, M, p1, p2, DT_BF16, N, K, NULL, g, 1e-6f, 2, err, sizeof err) == 0, "%s",
                  err);
        memset(yc, 0xff, sizeof(uint32_t) * M * N);
        CHECK_MSG(cuda_test_matmul_cut(yb, yc, x, M, p1, p2, N, K, NULL, g, 1e-6f, 2, err, sizeof err) == 0, "%s", err);
        CHECK_MSG(!memcmp(ya, yb, sizeof(float) * M * N), "M=%d N=%d K=%d: the SwiGLU with a pre-cut copy differs", M,
                  N, K);
        long bad = cut_mismatch(yc, yb, (size_t)M * N);
        CHECK_MSG(bad < 0, "M=%d N=%d K=%d: the SwiGLU's pre-cut copy is wrong at value %ld", M, N, K, bad);
        free(x), free(g), free(b), free(w1), free(w2), free(y0), free(ya), free(yb), free(yc), free(p1), free(p2);
    }
    /* the attention's combine: its pre-cut copy of every row */
    const int att[][5] = {{1, 32, 8, 128, 500}, {16, 32, 8, 128, 70}, {3, 8, 2, 64, 2000}, {9, 16, 4, 128, 5000}};
    for (size_t s = 0; s < sizeof att / sizeof att[0]; s++) {
        attn_case a = attn_case_make(&rng, att[s], 20);
        float *o = xmalloc(sizeof(float) * a.qn);
        uint32_t *oc = xmalloc(sizeof(uint32_t) * a.qn);
        memset(oc, 0xff, sizeof(uint32_t) * a.qn);
        cuda_test_attention_cut(oc);
        CHECK_MSG(attn_case_gpu(&a, o, a.M, a.np, 0, err, sizeof err) == 0, "%s", err);
        cuda_test_attention_cut(NULL);
        long bad = cut_mismatch(oc, o, a.qn);
        CHECK_MSG(bad < 0, "attention M=%d nh=%d hd=%d n_past=%d: the pre-cut copy is wrong at value %ld", a.M, a.nh,
                  a.hd, a.np, bad);
        free(o), free(oc);
        attn_case_free(&a);
    }
}

/* The folded norm run apart (cu_norm_split's path: cu_norm_cut, then the
   matmul from its pre-cut rows and scales) gives the folded norm's bits:
   the plain store with a bias (q/k/v, the LM head) and the SwiGLU with its
   pre-cut copy, 1-16 rows, widths off the tiles, K from one chunk a warp
   to the 8B shape's hidden size and past it. */
TEST(cuda_norm_apart_same_bits) {
    if (!have_gpu()) return;
    const int shapes[][3] = {{1, 64, 64}, {2, 200, 264}, {8, 96, 1000}, {9, 136, 520}, {16, 512, 4096}, {13, 40, 72},
                             {16, 1000, 6144}};
    char err[512];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        float *x = xmalloc(sizeof(float) * M * K), *g = xmalloc(sizeof(float) * K), *b = xmalloc(sizeof(float) * N);
        float *w1 = xmalloc(sizeof(float) * N * K), *w2 = xmalloc(sizeof(float) * N * K);
        float *ya = xmalloc(sizeof(float) * M * N), *yb = xmalloc(sizeof(float) * M * N);
        uint32_t *ca = xmalloc(sizeof(uint32_t) * M * N), *cb = xmalloc(sizeof(uint32_t) * M * N);
        fill(x, (size_t)M * K, 3.0f);
        for (int i = 0; i < K; i++) g[i] = 1.0f + frand() * 0.5f;
        fill(w1, (size_t)N * K, 0.1f);
        fill(w2, (size_t)N * K, 0.1f);
        fill(b, (size_t)N, 0.5f);
        void *p1 = make_weights(DT_BF16, w1, (size_t)N * K), *p2 = make_weights(DT_BF16, w2, (size_t)N * K);
        CHECK_MSG(cuda_test_matmul_norm(ya, x, M, p1, NULL, DT_BF16, N, K, b, g, 1e-6f, 0, err, sizeof err) == 0, "%s",
                  err);
        CHECK_MSG(cuda_test_matmul_norm_apart(yb, NULL, x, M, p1, NULL, N, K, b, g, 1e-6f, 0, err, sizeof err) == 0,
                  "%s", err);
        CHECK_MSG(!memcmp(ya, yb, sizeof(float) * M * N), "M=%d N=%d K=%d: the norm apart gives other bits", M, N, K);
        if (N % 8 == 0) {
            memset(ca, 0xff, sizeof(uint32_t) * M * N);
            memset(cb, 0xee, sizeof(uint32_t) * M * N);
            CHECK_MSG(cuda_test_matmul_cut(ya, ca, x, M, p1, p2, N, K, NULL, g, 1e-6f, 2, err, sizeof err) == 0, "%s",
                      err);
            CHECK_MSG(cuda_test_matmul_norm_apart(yb, cb, x, M, p1, p2, N, K, NULL, g, 1e-6f, 2, err, sizeof err) == 0,
                      "%s", err);
            CHECK_MSG(!memcmp(ya, yb, sizeof(float) * M * N) && !memcmp(ca, cb, sizeof(uint32_t) * M * N),
                      "M=%d N=%d K=%d: the SwiGLU with the norm apart gives other bits", M, N, K);
        }
        free(x), free(g), free(b), free(w1), free(w2), free(ya), free(yb), free(ca), free(cb), free(p1), free(p2);
    }
}

/* The SwiGLU matmul of 1-8 rows run two blocks an SM (cu_swiglu_two, the
   forward's choice for short caches) gives the bits of one block an SM,
   its pre-cut copy included, on shapes off the tile sizes; 9-16 rows,
   which it leaves alone, as well. */
TEST(cuda_swiglu_two_same_bits) {
    if (!have_gpu()) return;
    const int shapes[][3] = {{1, 64, 64}, {1, 1000, 4096}, {3, 96, 264}, {8, 512, 1024}, {5, 136, 520}, {8, 40, 136},
                             {9, 200, 264}, {16, 512, 1024}};
    char err[512];
    const int prev = cuda_test_swiglu_two(0);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        float *x = xmalloc(sizeof(float) * M * K), *g = xmalloc(sizeof(float) * K);
        float *w1 = xmalloc(sizeof(float) * N * K), *w2 = xmalloc(sizeof(float) * N * K);
        float *y[2] = {xmalloc(sizeof(float) * M * N), xmalloc(sizeof(float) * M * N)};
        float *z[2] = {xmalloc(sizeof(float) * M * N), xmalloc(sizeof(float) * M * N)};
        uint32_t *c[2] = {xmalloc(sizeof(uint32_t) * M * N), xmalloc(sizeof(uint32_t) * M * N)};
        fill(x, (size_t)M * K, 3.0f);
        for (int i = 0; i < K; i++) g[i] = 1.0f + frand() * 0.5f;
        fill(w1, (size_t)N * K, 0.1f);
        fill(w2, (size_t)N * K, 0.1f);
        void *p1 = make_weights(DT_BF16, w1, (size_t)N * K), *p2 = make_weights(DT_BF16, w2, (size_t)N * K);
        for (int two = 0; two < 2; two++) {
            cuda_test_swiglu_two(two);
            CHECK_MSG(cuda_test_matmul_norm(y[two], x, M, p1, p2, DT_BF16, N, K, NULL, g, 1e-6f, 2, err, sizeof err) ==
                          0,
                      "%s", err);
            memset(c[two], 0xff, sizeof(uint32_t) * M * N);
            CHECK_MSG(cuda_test_matmul_cut(z[two], c[two], x, M, p1, p2, N, K, NULL, g, 1e-6f, 2, err, sizeof err) ==
                          0,
                      "%s", err);
        }
        CHECK_MSG(!memcmp(y[0], y[1], sizeof(float) * M * N), "M=%d N=%d K=%d: two blocks an SM give other bits", M,
                  N, K);
        CHECK_MSG(!memcmp(z[0], z[1], sizeof(float) * M * N) && !memcmp(c[0], c[1], sizeof(uint32_t) * M * N),
                  "M=%d N=%d K=%d: two blocks an SM give another SwiGLU or pre-cut copy", M, N, K);
        free(x), free(g), free(w1), free(w2), free(p1), free(p2);
        for (int i = 0; i < 2; i++) free(y[i]), free(z[i]), free(c[i]);
    }
    cuda_test_swiglu_two(prev);
}

/* the q/k/v projection's fused tail (the last block of each head
   normalises, ropes and stores it) gives the bits of the matmul followed by
   the separate kernel, at every decode and verify width, head_dim 64 and
   128, and its per-head counts are reset for the next use; the separate
   path's q is checked against the CPU ops as well */
TEST(cuda_qkv_tail_vs_separate) {
    if (!have_gpu()) return;
    const int shapes[][3] = {{1, 128, 256}, {3, 64, 128}, {8, 128, 256}, {9, 128, 264}, {16, 64, 512}}; /* M, hd, K */
    const int nh = 4, nkv = 2, cap = 40, len = 7;
    char err[512];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int M = shapes[s][0], hd = shapes[s][1], K = shapes[s][2], N = (nh + 2 * nkv) * hd;
        size_t nq = (size_t)M * nh * hd, nc = (size_t)nkv * cap * hd;
        float *x = xmalloc(sizeof(float) * M * K), *w = xmalloc(sizeof(float) * N * K), *b = xmalloc(sizeof(float) * N);
        float *g = xmalloc(sizeof(float) * K), *qn = xmalloc(sizeof(float) * hd), *kn = xmalloc(sizeof(float) * hd);
        float *f = xmalloc(sizeof(float) * hd / 2);
        float *q[2], *kc[2], *vc[2];
        int *pos = xmalloc(sizeof(int) * M);
        fill(x, (size_t)M * K, 2.0f);
        fill(w, (size_t)N * K, 0.1f);
        fill(b, (size_t)N, 0.5f);
        for (int i = 0; i < K; i++) g[i] = 1.0f + frand() * 0.5f;
        for (int i = 0; i < hd; i++) qn[i] = 1.0f + frand() * 0.5f, kn[i] = 1.0f + frand() * 0.5f;
        for (int i = 0; i < hd / 2; i++) f[i] = powf(10000.0f, -2.0f * i / hd);
        for (int m = 0; m < M; m++) pos[m] = len + m;
        void *pw = make_weights(DT_BF16, w, (size_t)N * K);
        for (int fused = 0; fused < 2; fused++) {
            q[fused] = xmalloc(sizeof(float) * nq), kc[fused] = xmalloc(sizeof(float) * nc);
            vc[fused] = xmalloc(sizeof(float) * nc);
            CHECK_MSG(cuda_test_qkv(q[fused], kc[fused], vc[fused], x, M, pw, K, b, g, qn, kn, pos, f, nh, nkv, hd, cap,
                                    len, fused, err, sizeof err) == 0,
                      "%s", err);
        }
        CHECK_MSG(!memcmp(q[0], q[1], sizeof(float) * nq), "M=%d hd=%d: fused q differs", M, hd);
        CHECK_MSG(!memcmp(kc[0], kc[1], sizeof(float) * nc), "M=%d hd=%d: fused k cache differs", M, hd);
        CHECK_MSG(!memcmp(vc[0], vc[1], sizeof(float) * nc), "M=%d hd=%d: fused v cache differs", M, hd);
        /* the separate path against the CPU ops: projection, q norm, RoPE */
        tensor t = {.name = "w", .dtype = DT_BF16, .ndim = 2, .shape = {N, K}, .data = pw, .nbytes = (size_t)N * K * 2};
        float *xn = xmalloc(sizeof(float) * M * K), *y = xmalloc(sizeof(float) * M * N), *qr = xmalloc(sizeof(float) * nq);
        op_rmsnorm(xn, x, g, M, K, 1e-6f);
        op_matmul(NULL, y, xn, M, &t, b);
        for (int m = 0; m < M; m++) op_rmsnorm(qr + (size_t)m * nh * hd, y + (size_t)m * N, qn, nh, hd, 1e-6f);
        op_rope(qr, M, nh, hd, pos, f);
        double e = rel_err(q[0], qr, nq);
        CHECK_MSG(e < 1e-5, "M=%d hd=%d: q against the CPU ops: %.3g", M, hd, e);
        int nz = 0; /* the caches hold exactly the rows' positions */
        for (size_t i = 0; i < nc; i++) {
            int p = (int)(i / hd % cap);
            if ((p >= len && p < len + M) != (vc[0][i] != 0.0f)) nz++;
        }
        CHECK_MSG(nz == 0, "M=%d hd=%d: %d v cache entries written at the wrong positions", M, hd, nz);
        for (int i = 0; i < 2; i++) free(q[i]), free(kc[i]), free(vc[i]);
        free(x), free(w), free(b), free(g), free(qn), free(kn), free(f), free(pos), free(pw), free(xn), free(y), free(qr);
    }
}

/* the TF32 head and tail the f16-weight matmul and the attention kernels multiply
   (tf32_cut), as the tensor core reads them (the top 19 bits of each):
   their sum is x to within 2^-21 of |x| for every float from 2^-100 up
   (below about 2^-115 the tail is subnormal and keeps fewer bits): random
   values over that exponent range, values just under a power of two, both
   signs, the largest floats; and exactly 0 for zeros; an Inf or NaN
   input leaves a NaN in the tail, so its products stay NaN */
static double tf32_read(uint32_t b) {
    float f;
    b &= 0xffffe000u;
    memcpy(&f, &b, 4);
    return f;
}
/* random floats of every kind for the cut tests: just under a power of
   two, any exponent, |x| in 2^-20 .. 2^20; both signs, finite, from
   2^-100 */
static void cut_inputs(float *x, int n) {
    uint32_t r = 12345u;
    for (int i = 0; i < n; i++) {
        r = r * 1664525u + 1013904223u;
        uint32_t b = r;
        switch (i % 4) {
        case 0: b = (b & 0xff800000u) | 0x007fffffu; break;
        case 1: b = (b & 0x80000000u) | (b % 0x7f000000u + 0x00800000u); break;
        default: b = (b & 0x80000000u) | ((b % 40u + 107u) << 23) | (b & 0x7fffffu); break;
        }
        if ((b & 0x7f800000u) == 0x7f800000u) b &= 0xbfffffffu;
        if ((b >> 23 & 0xffu) < 27u) b = (b & 0x807fffffu) | 27u << 23;
        memcpy(&x[i], &b, 4);
    }
}
/* Inf, -Inf, the host's NaN, the GPU's NaN (0x7fffffff) and its negative */
static const uint32_t cut_special[5] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7fffffffu, 0xffffffffu};

TEST(cuda_tf32_cut_bound) {
    if (!have_gpu()) return;
    enum { N = 1 << 16 };
    float *x = xmalloc(sizeof(float) * N);
    uint32_t *out = xmalloc(sizeof(uint32_t) * 2 * N);
    cut_inputs(x, N);
    x[0] = 0.0f, x[1] = -0.0f, x[2] = 3.4028235e38f, x[3] = -3.4028235e38f;
    char err[256];
    CHECK_MSG(cuda_test_tf32_cut(out, x, N, err, sizeof err) == 0, "%s", err);
    int bad = 0;
    double worst = 0;
    for (int i = 0; i < N; i++) {
        double v = tf32_read(out[2 * i]) + tf32_read(out[2 * i + 1]), d = fabs(v - (double)x[i]);
        double rel = x[i] != 0.0f ? d / fabs((double)x[i]) : d;
        if (rel > worst) worst = rel;
        if (!(rel <= 0x1p-21) && bad++ < 5)
            fprintf(stderr, "     x %.9g: head %08x tail %08x carry %.17g (%.3g of |x|)\n", x[i], out[2 * i],
                    out[2 * i + 1], v, rel);
    }
    CHECK_MSG(bad == 0, "%d values off by more than 2^-21 of their size", bad);
    CHECK_MSG(worst > 0x1p-23, "the largest error %.3g: the tail's truncation was never exercised", worst);
    float sp[5];
    uint32_t so[10];
    memcpy(sp, cut_special, sizeof sp);
    CHECK_MSG(cuda_test_tf32_cut(so, sp, 5, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < 5; i++)
        CHECK_MSG(isnan(tf32_read(so[2 * i + 1])), "input 0x%08x: the tail is %g (0x%08x), not NaN", cut_special[i],
                  tf32_read(so[2 * i + 1]), so[2 * i + 1]);
    free(x), free(out);
}

/* the bf16 heads and tails the matmul multiplies for bf16 weights
   (bf16_cut2): head plus tail is x to within 2^-17 of |x| for every float
   from 2^-100 up to the largest whose head rounds to a finite bf16
   (0x7f7f7fff, about 3.3895e38), and exactly 0 for zeros; past that (the
   head rounds to Inf), for Inf and for NaN, head plus tail is NaN, and so
   are the products' sum (an infinite head beside a NaN tail or one of the
   other sign); a pair's other value is cut as if alone */
static double bf16_half(uint32_t pair, int hi) {
    uint32_t b = hi ? pair & 0xffff0000u : pair << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}
TEST(cuda_bf16_cut_bound) {
    if (!have_gpu()) return;
    enum { N = 1 << 16 };
    float *x = xmalloc(sizeof(float) * N);
    uint32_t *out = xmalloc(sizeof(uint32_t) * N);
    cut_inputs(x, N);
    /* the largest finite heads, the smallest infinite ones, zeros, the
       specials; each beside 1.5 (the pair's other half) */
    const uint32_t edge[] = {0x7f7f7fffu, 0xff7f7fffu, 0x7f7f8000u, 0xff7f8000u, 0x7f7fffffu, 0xff7fffffu,
                             0x00000000u, 0x80000000u};
    const int ne = (int)(sizeof edge / sizeof edge[0]), ns = (int)(sizeof cut_special / sizeof cut_special[0]);
    for (int i = 0; i < ne + ns; i++) {
        memcpy(&x[4 * i + (i % 2)], i < ne ? &edge[i] : &cut_special[i - ne], 4);
        x[4 * i + 1 - (i % 2)] = 1.5f;
    }
    char err[256];
    CHECK_MSG(cuda_test_bf16_cut(out, x, N, err, sizeof err) == 0, "%s", err);
    int bad = 0, nan_in = 0;
    double worst = 0;
    for (int i = 0; i < N; i++) {
        const uint32_t h = out[2 * (i / 2)], l = out[2 * (i / 2) + 1];
        uint32_t b;
        memcpy(&b, &x[i], 4);
        const double v = bf16_half(h, i % 2) + bf16_half(l, i % 2);
        if ((b & 0x7fffffffu) >= 0x7f7f8000u) { /* the head rounds to Inf, or x is Inf or NaN */
            nan_in++;
            if (!isnan(v) && bad++ < 5)
                fprintf(stderr, "     x 0x%08x: head %g tail %g, not a NaN sum\n", b, bf16_half(h, i % 2),
                        bf16_half(l, i % 2));
            continue;
        }
        const double d = fabs(v - (double)x[i]), rel = x[i] != 0.0f ? d / fabs((double)x[i]) : d;
        if (rel > worst) worst = rel;
        if (!(rel <= 0x1p-17) && bad++ < 5)
            fprintf(stderr, "     x %.9g: heads %08x tails %08x carry %.17g (%.3g of |x|)\n", x[i], h, l, v, rel);
    }
    CHECK_MSG(bad == 0, "%d values cut wrong", bad);
    CHECK_MSG(nan_in >= 4 + ns, "only %d inputs whose head is Inf or NaN", nan_in);
    CHECK_MSG(worst > 0x1p-19, "the largest error %.3g: the tail's rounding was never exercised", worst);
    free(x), free(out);
}

/* device argmax = op_argmax, ties to the first index, any width, one
   block a row and split over slices (the tuning argmax_split=1): ties
   across slices, the largest in the last slice's ragged tail, rows all
   equal or all -inf, widths off 4, up to 17 rows */
TEST(cuda_argmax_vs_cpu) {
    if (!have_gpu()) return;
    const int widths[] = {1, 3, 4, 1000, 4097, 12291, 151936, 151937};
    char err[256];
    const int prev = cuda_test_argmax_split(0);
    for (int split = 0; split < 2; split++) {
        cuda_test_argmax_split(split);
        for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
            int n = widths[w], M = n > 100000 ? 17 : 7;
            float *x = xmalloc(sizeof(float) * (size_t)M * n);
            int got[17];
            fill(x, (size_t)M * n, 1.0f);
            /* row 1: a tie between two late positions; row 2: all equal; row 3: the max last;
               row 4: a tie between the first and the last value; row 5: all -inf;
               row 6: the max in the first slice, equalled in the last */
            if (n > 2) x[(size_t)n + n - 1] = x[(size_t)n + n / 2] = 5.0f;
            for (int i = 0; i < n; i++) x[(size_t)2 * n + i] = 0.25f;
            x[(size_t)3 * n + n - 1] = 7.0f;
            x[(size_t)4 * n] = x[(size_t)4 * n + n - 1] = 9.0f;
            for (int i = 0; i < n; i++) x[(size_t)5 * n + i] = -INFINITY;
            if (n > 3000) x[(size_t)6 * n + 2047] = x[(size_t)6 * n + n - 2] = 3.0f;
            CHECK_MSG(cuda_test_argmax(got, x, M, n, err, sizeof err) == 0, "%s", err);
            for (int m = 0; m < M; m++)
                CHECK_MSG(got[m] == op_argmax(x + (size_t)m * n, n), "argmax (%s) n=%d row %d: %d vs %d",
                          split ? "split" : "one block a row", n, m, got[m], op_argmax(x + (size_t)m * n, n));
            free(x);
        }
    }
    cuda_test_argmax_split(prev);
}

/* The prefill path: cuBLAS on bf16 head + tail rows for each whole group of
   CUDA_GEMM_MIN_ROWS rows, the kernels for the rest. Against the CPU (plain,
   bias, residual add, folded norm, SwiGLU of the normed input), and a row's
   bits depend only on its group: a group computed alone equals the same
   group inside a wider batch, and the rows past the last group equal the
   kernels' rows. */
TEST(cuda_matmul_prefill_vs_cpu) {
    if (!have_gpu()) return;
    const int G = CUDA_GEMM_MIN_ROWS;
    const int shapes[][3] = {{G, 100, 264}, {2 * G + 44, 77, 136}, {G + 1, 1000, 256}, {2 * G, 512, 1024}};
    char err[512];
    const float eps = 1e-6f;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        size_t MK = (size_t)M * K, MN = (size_t)M * N, NK = (size_t)N * K;
        float *x = xmalloc(sizeof(float) * MK), *xn = xmalloc(sizeof(float) * MK), *g = xmalloc(sizeof(float) * K);
        float *w1 = xmalloc(sizeof(float) * NK), *w2 = xmalloc(sizeof(float) * NK), *b = xmalloc(sizeof(float) * N);
        float *y0 = xmalloc(sizeof(float) * MN), *a = xmalloc(sizeof(float) * MN), *c = xmalloc(sizeof(float) * MN);
        float *yg = xmalloc(sizeof(float) * MN), *part = xmalloc(sizeof(float) * MN);
        fill(x, MK, 3.0f);
        for (int i = 0; i < K; i++) g[i] = 1.0f + frand() * 0.5f;
        fill(w1, NK, 0.1f);
        fill(w2, NK, 0.1f);
        fill(b, (size_t)N, 0.5f);
        fill(y0, MN, 2.0f);
        void *p1 = make_weights(DT_BF16, w1, NK), *p2 = make_weights(DT_BF16, w2, NK);
        tensor t1 = {.name = "w1", .dtype = DT_BF16, .ndim = 2, .shape = {N, K}, .data = p1, .nbytes = NK * 2};
        tensor t2 = {.name = "w2", .dtype = DT_BF16, .ndim = 2, .shape = {N, K}, .data = p2, .nbytes = NK * 2};
        op_rmsnorm(xn, x, g, M, K, eps);
        /* case: 0 store + bias, 1 residual add, 2 norm + store, 3 norm + SwiGLU */
        for (int cs = 0; cs < 4; cs++) {
            int mode = cs == 1 ? 1 : cs == 3 ? 2 : 0;
            const float *in = cs >= 2 ? xn : x, *gn = cs >= 2 ? g : NULL, *bias = cs == 0 ? b : NULL;
            op_matmul(NULL, a, in, M, &t1, bias);
            if (cs == 1)
                for (size_t i = 0; i < MN; i++) a[i] += y0[i];
            if (cs == 3) {
                op_matmul(NULL, c, in, M, &t2, NULL);
                op_swiglu(a, a, c, (int)MN);
            }
            memcpy(yg, y0, sizeof(float) * MN);
            CHECK_MSG(cuda_test_matmul_prefill(yg, x, M, p1, p2, N, K, bias, gn, eps, mode, err, sizeof err) == 0,
                      "%s", err);
            double e = rel_err(yg, a, MN);
            CHECK_MSG(e < 1e-4, "prefill matmul case %d M=%d N=%d K=%d: %.3g", cs, M, N, K, e);
            /* the second group alone, or the first when there is one */
            int g0 = M >= 2 * G ? G : 0;
            memcpy(part, y0 + (size_t)g0 * N, sizeof(float) * (size_t)G * N);
            CHECK(cuda_test_matmul_prefill(part, x + (size_t)g0 * K, G, p1, p2, N, K, bias, gn, eps, mode, err,
                                           sizeof err) == 0);
            CHECK_MSG(!memcmp(part, yg + (size_t)g0 * N, sizeof(float) * (size_t)G * N),
                      "prefill matmul case %d M=%d: the group at row %d differs when computed alone", cs, M, g0);
            /* the rows past the last group: the kernels' rows */
            int t0 = M / G * G;
            if (t0 < M) {
                memcpy(part, y0 + (size_t)t0 * N, sizeof(float) * (size_t)(M - t0) * N);
                int rc = gn ? cuda_test_matmul_norm(part, x + (size_t)t0 * K, M - t0, p1, p2, DT_BF16, N, K, bias, gn,
                                                    eps, mode, err, sizeof err)
                            : cuda_test_matmul_fused(part, x + (size_t)t0 * K, M - t0, p1, p2, DT_BF16, N, K, bias,
                                                     mode, err, sizeof err);
                CHECK(rc == 0);
                CHECK_MSG(!memcmp(part, yg + (size_t)t0 * N, sizeof(float) * (size_t)(M - t0) * N),
                          "prefill matmul case %d M=%d: the rows past the last group differ from the kernels'", cs, M);
            }
        }
        free(x), free(xn), free(g), free(w1), free(w2), free(b), free(y0), free(a), free(c), free(yg), free(part);
        free(p1), free(p2);
    }
}

/* Cache rows out to host and back (the prefix blocks' and the slots' copies):
   one staging chunk, several (the two pinned buffers taking turns, a last
   partial chunk), and rows wider than a buffer (the direct copy). */
TEST(cuda_rows_host_staged) {
    if (!have_gpu()) return;
    const struct {
        size_t row, cap, blocks;
        int pos0, n;
    } cs[] = {{256, 300, 4, 3, 128}, {256, 300, 700, 128, 128}, {512, 260, 1100, 0, 129}, {1024, 9100, 3, 17, 9000},
              {256, 40, 5, 40, 0}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        char err[512] = "";
        CHECK_MSG(cuda_test_rows_host(cs[i].row, cs[i].cap, cs[i].blocks, cs[i].pos0, cs[i].n, err, sizeof err) == 0,
                  "case %zu: %s", i, err);
    }
}
