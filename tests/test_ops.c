/* Tests for the CPU ops: every kernel against a float64 reference on
 * random inputs, on both the scalar path and the SIMD paths (AVX2, and
 * for matmul also AVX-512, as the CPU allows), with shapes at the edges of the vector and tile widths
 * (M = 1,2,3,5,17; N and K not multiples of 4/8/16; K across several K
 * tiles; n_past > 0; GQA ratios 1, 2, 4). Also: threaded results equal
 * single-threaded ones bit for bit, and a row computed in a batch equals
 * the same row computed alone (the SIMD kernels promise both). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu.h"
#include "engine/ops.h"
#include "engine/ops_internal.h"
#include "hooks.h"
#include "test.h"
#include "engine/threadpool.h"
#include "base/util.h"

/* ------------------------------------------------------------- helpers */

static uint64_t rng_state = 0x1234567887654321ULL;

static uint64_t rng_next(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static float frand(void) { /* uniform in [-1, 1) */
    return (float)((double)(rng_next() >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

static float *rand_vec(size_t n, float scale) {
    float *v = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = frand() * scale;
    return v;
}

/* A weight of the given dtype with random values, and its exact f32 copy. */
typedef struct {
    tensor t;
    void *buf;
    float *f; /* exact widened values */
} wmat;

static wmat make_w(ds_dtype dt, int N, int K, float scale) {
    wmat w;
    memset(&w, 0, sizeof w);
    size_t n = (size_t)N * K;
    w.f = malloc((n ? n : 1) * sizeof(float));
    size_t es = dt == DT_F32 ? 4 : 2;
    w.buf = malloc((n ? n : 1) * es);
    for (size_t i = 0; i < n; i++) {
        float v = frand() * scale;
        if (dt == DT_F32) {
            ((float *)w.buf)[i] = v;
            w.f[i] = v;
        } else if (dt == DT_BF16) {
            uint16_t h = ds_f32_to_bf16(v);
            ((uint16_t *)w.buf)[i] = h;
            w.f[i] = ds_bf16_to_f32(h);
        } else {
            uint16_t h = ds_f32_to_f16(v);
            ((uint16_t *)w.buf)[i] = h;
            w.f[i] = ds_f16_to_f32(h);
        }
    }
    w.t.name = "test.weight";
    w.t.dtype = dt;
    w.t.ndim = 2;
    w.t.shape[0] = N;
    w.t.shape[1] = K;
    w.t.data = w.buf;
    w.t.nbytes = n * es;
    return w;
}

static void free_w(wmat *w) {
    free(w->buf);
    free(w->f);
}

/* whether this build and this CPU have the SIMD path */
static int have_simd(void) {
#ifdef DS_HAVE_AVX2_PATH
    return cpu_has_avx2();
#else
    return 0;
#endif
}

/* the modes a kernel is checked in: scalar, and SIMD when available */
static int n_modes(void) { return have_simd() ? 2 : 1; }

/* matmul levels to check: scalar, AVX2, AVX-512, as this build and CPU allow */
static int n_levels(void) { return ops_max_level() + 1; }
static const char *level_str(int l) { return l == 0 ? "scalar" : l == 1 ? "avx2" : "avx512"; }

static const char *dt_str(ds_dtype dt) { return dt == DT_F32 ? "f32" : dt == DT_BF16 ? "bf16" : "f16"; }

/* -------------------------------------------------------------- matmul */

/* y vs float64 reference; the bound is that of fp32 recursive summation in
 * 8 lanes: (K/8 + 4) * eps * sum |x w| */
static int check_matmul_ref(const float *y, const float *x, const wmat *w, const float *bias, int M, int N,
                            int K, const char *what) {
    int bad = 0;
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            double ref = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double p = (double)x[(size_t)m * K + k] * w->f[(size_t)n * K + k];
                ref += p;
                mag += fabs(p);
            }
            if (bias) {
                ref += bias[n];
                mag += fabs(bias[n]);
            }
            double tol = ((double)K / 8 + 4) * 1.2e-7 * mag + 1e-30;
            double err = fabs((double)y[(size_t)m * N + n] - ref);
            if (!(err <= tol)) {
                if (bad < 3)
                    test_fail(__FILE__, __LINE__, "%s: M=%d N=%d K=%d y[%d][%d]=%.9g ref %.9g (tol %g)", what, M,
                              N, K, m, n, y[(size_t)m * N + n], ref, tol);
                bad++;
            }
        }
    }
    return bad;
}

TEST(ops_matmul_vs_reference) {
    const int Ms[] = {1, 2, 3, 5, 17};
    const int Ns[] = {1, 3, 7, 16, 67, 130};
    const int Ks[] = {1, 5, 8, 13, 64, 100, 515, 1030};
    const ds_dtype dts[] = {DT_F32, DT_F16, DT_BF16};
    int prev = ops_level();
    for (int mode = 0; mode < n_levels(); mode++) {
        ops_set_level(mode);
        for (size_t d = 0; d < 3; d++)
            for (size_t ik = 0; ik < sizeof Ks / sizeof Ks[0]; ik++)
                for (size_t in = 0; in < sizeof Ns / sizeof Ns[0]; in++) {
                    int K = Ks[ik], N = Ns[in];
                    /* keep the big combinations few */
                    if (K >= 515 && N > 67 && dts[d] != DT_BF16) continue;
                    wmat w = make_w(dts[d], N, K, 1.0f);
                    float *bias = rand_vec((size_t)N, 1.0f);
                    for (size_t im = 0; im < sizeof Ms / sizeof Ms[0]; im++) {
                        int M = Ms[im];
                        float *x = rand_vec((size_t)M * K, 1.0f);
                        float *y = malloc((size_t)M * N * sizeof(float));
                        char what[64];
                        snprintf(what, sizeof what, "%s %s", level_str(mode), dt_str(dts[d]));
                        op_matmul(NULL, y, x, M, &w.t, NULL);
                        check_matmul_ref(y, x, &w, NULL, M, N, K, what);
                        op_matmul(NULL, y, x, M, &w.t, bias);
                        check_matmul_ref(y, x, &w, bias, M, N, K, what);
                        free(x);
                        free(y);
                    }
                    free(bias);
                    free_w(&w);
                }
    }
    ops_set_level(prev);
}

/* scalar and SIMD agree to rounding; threads and batching change nothing
 * (in particular the SIMD direct and blocked loops agree bit for bit), and
 * the AVX2 and AVX-512 levels agree bit for bit */
TEST(ops_matmul_simd_scalar_threads_batch) {
    const ds_dtype dts[] = {DT_F32, DT_F16, DT_BF16};
    /* the last two are large enough in M*K for the SIMD path's blocked loop
     * (x beyond 384 KB), with several K tiles and a K tail */
    const int shapes[][3] = {{17, 130, 1030}, {5, 67, 515}, {3, 200, 64}, {2, 129, 1027}, {1, 300, 100},
                             {40, 70, 520}, {97, 70, 1030}, {130, 37, 777}, {23, 9, 1024}, {31, 131, 13}};
    tpool *tps[3] = {NULL, tp_create(2), tp_create(3)};
    int prev = ops_level();
    for (size_t d = 0; d < 3; d++) {
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            wmat w = make_w(dts[d], N, K, 0.5f);
            float *bias = rand_vec((size_t)N, 1.0f);
            float *x = rand_vec((size_t)M * K, 2.0f);
            size_t ny = (size_t)M * N;
            float *ys[3][3];
            for (int mode = 0; mode < n_levels(); mode++) {
                ops_set_level(mode);
                for (int t = 0; t < 3; t++) {
                    ys[mode][t] = malloc(ny * sizeof(float));
                    op_matmul(tps[t], ys[mode][t], x, M, &w.t, bias);
                }
                check_matmul_ref(ys[mode][0], x, &w, bias, M, N, K, level_str(mode));
                for (int t = 1; t < 3; t++)
                    CHECK_MSG(memcmp(ys[mode][0], ys[mode][t], ny * sizeof(float)) == 0,
                              "%s %s M=%d N=%d K=%d: %d threads differ from 1", level_str(mode),
                              dt_str(dts[d]), M, N, K, tp_size(tps[t]));
                /* each row alone equals the row computed in the batch */
                float *y1 = malloc((size_t)N * sizeof(float));
                for (int m = 0; m < M; m++) {
                    op_matmul(tps[1], y1, x + (size_t)m * K, 1, &w.t, bias);
                    CHECK_MSG(memcmp(y1, ys[mode][0] + (size_t)m * N, (size_t)N * sizeof(float)) == 0,
                              "%s %s M=%d N=%d K=%d: row %d alone differs from the batch", level_str(mode),
                              dt_str(dts[d]), M, N, K, m);
                }
                /* and a batch of 2 rows from the middle */
                if (M >= 3) {
                    float *y2 = malloc(2 * (size_t)N * sizeof(float));
                    op_matmul(NULL, y2, x + (size_t)1 * K, 2, &w.t, bias);
                    CHECK(memcmp(y2, ys[mode][0] + (size_t)N, 2 * (size_t)N * sizeof(float)) == 0);
                    free(y2);
                }
                free(y1);
            }
            if (n_levels() >= 2) {
                int bad = 0;
                for (size_t i = 0; i < ny; i++) {
                    double mag = 0;
                    int m = (int)(i / N), n = (int)(i % N);
                    for (int k = 0; k < K; k++) mag += fabs((double)x[(size_t)m * K + k] * w.f[(size_t)n * K + k]);
                    mag += fabs(bias[n]);
                    if (!(fabs(ys[0][0][i] - ys[1][0][i]) <= ((double)K / 4 + 8) * 1.2e-7 * mag)) bad++;
                }
                CHECK_MSG(bad == 0, "%s M=%d N=%d K=%d: %d outputs differ between scalar and simd", dt_str(dts[d]), M,
                          N, K, bad);
            }
            if (n_levels() >= 3)
                CHECK_MSG(memcmp(ys[1][0], ys[2][0], ny * sizeof(float)) == 0,
                          "%s M=%d N=%d K=%d: avx2 and avx512 differ", dt_str(dts[d]), M, N, K);
            for (int mode = 0; mode < n_levels(); mode++)
                for (int t = 0; t < 3; t++) free(ys[mode][t]);
            free(x);
            free(bias);
            free_w(&w);
        }
    }
    ops_set_level(prev);
    tp_free(tps[1]);
    tp_free(tps[2]);
}

/* M = 2..16 (speculative verify widths) with a realistic K, threaded */
TEST(ops_matmul_verify_widths) {
    tpool *tp = tp_create(2);
    int N = 96, K = 1024;
    wmat w = make_w(DT_BF16, N, K, 0.05f);
    float *x = rand_vec((size_t)16 * K, 1.0f);
    float *y = malloc((size_t)16 * N * sizeof(float));
    float *y1 = malloc((size_t)N * sizeof(float));
    int prev = ops_level();
    for (int mode = 0; mode < n_levels(); mode++) {
        ops_set_level(mode);
        for (int M = 2; M <= 16; M++) {
            op_matmul(tp, y, x, M, &w.t, NULL);
            check_matmul_ref(y, x, &w, NULL, M, N, K, level_str(mode));
            op_matmul(NULL, y1, x + (size_t)(M - 1) * K, 1, &w.t, NULL);
            CHECK(memcmp(y1, y + (size_t)(M - 1) * N, (size_t)N * sizeof(float)) == 0);
        }
    }
    ops_set_level(prev);
    free(x);
    free(y);
    free(y1);
    free_w(&w);
    tp_free(tp);
}

/* Every width the SIMD levels handle differently (M = 1 the decode loop;
 * the AVX-512 pairs loop up to OPS_PAIRS_MAX_M in one or several passes,
 * odd M with half a pair unused; the blocked loop beyond), every dtype,
 * with N not a multiple of the 4-row blocks and K tails of every length,
 * 1 and 2 threads: each row equals the row computed alone (M = 1), bit for
 * bit, and the AVX2 and AVX-512 levels agree bit for bit. */
TEST(ops_matmul_widths_bit_identical) {
    const int Ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 33, 48, 49, 64};
    const int shapes[][2] = {{37, 1030}, {67, 515}, {20, 13}, {131, 64}, {9, 1}, {6, 1023}}; /* N, K */
    const ds_dtype dts[] = {DT_BF16, DT_F16, DT_F32};
    const int nM = (int)(sizeof Ms / sizeof Ms[0]), Mmax = 64;
    tpool *tp = tp_create(2);
    int prev = ops_level();
    for (size_t d = 0; d < 3; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int N = shapes[s][0], K = shapes[s][1];
            wmat w = make_w(dts[d], N, K, 0.5f);
            float *bias = rand_vec((size_t)N, 1.0f);
            float *x = rand_vec((size_t)Mmax * K, 2.0f);
            float *y = malloc((size_t)Mmax * N * sizeof(float)), *yt = malloc((size_t)Mmax * N * sizeof(float));
            float *yl = malloc((size_t)Mmax * N * sizeof(float)), *y1 = malloc((size_t)N * sizeof(float));
            for (int mi = 0; mi < nM; mi++) {
                int M = Ms[mi];
                const float *b = mi % 2 ? bias : NULL;
                size_t ny = (size_t)M * N;
                /* the highest level: 1 and 2 threads, and each row alone */
                ops_set_level(2);
                int top = ops_level();
                op_matmul(NULL, y, x, M, &w.t, b);
                op_matmul(tp, yt, x, M, &w.t, b);
                CHECK_MSG(memcmp(y, yt, ny * sizeof(float)) == 0, "%s level %d M=%d N=%d K=%d: 2 threads differ",
                          dt_str(dts[d]), top, M, N, K);
                int rows_ok = 1;
                for (int m = 0; m < M; m++) {
                    op_matmul(m % 2 ? tp : NULL, y1, x + (size_t)m * K, 1, &w.t, b);
                    rows_ok &= memcmp(y1, y + (size_t)m * N, (size_t)N * sizeof(float)) == 0;
                }
                CHECK_MSG(rows_ok, "%s level %d M=%d N=%d K=%d: a row differs from the row alone", dt_str(dts[d]),
                          top, M, N, K);
                if (M == 2 || M == 7 || M == 16 || M == 33) check_matmul_ref(y, x, &w, b, M, N, K, level_str(top));
                /* the AVX2 level computes the very same outputs */
                if (top == 2) {
                    ops_set_level(1);
                    op_matmul(tp, yl, x, M, &w.t, b);
                    CHECK_MSG(memcmp(y, yl, ny * sizeof(float)) == 0, "%s M=%d N=%d K=%d: avx2 and avx512 differ",
                              dt_str(dts[d]), M, N, K);
                }
            }
            free(x);
            free(y);
            free(yt);
            free(yl);
            free(y1);
            free(bias);
            free_w(&w);
        }
    ops_set_level(prev);
    tp_free(tp);
}

/* The rows8 layout (tensor.h) changes where the weights are, not what is
 * computed: every level, thread count and width (the decode, small-M and
 * blocked loops, K across several tiles) gives the row-major weight's
 * bits; the embedding gather and tensor_same_values read it too. */
TEST(ops_matmul_rows8_same_bits) {
    /* the AVX-512 widths cover each side of every switch between the rows8
       loops (ops_r8_in_place: 5 | 6, 8 | 9, 12 | 13, 18 | 19, 24 | 25, ...)
       and the blocked loop's (48 | 49), on matrices below and above
       OPS_R8_SMALL (the last shape) */
    const int Ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 16, 17, 18, 19, 24, 25, 30, 31, 33, 36, 37, 42, 43, 48, 49, 100, 200};
    const int shapes[][2] = {{8, 8}, {16, 24}, {40, 1032}, {136, 520}, {64, 16}, {24, 1536}, {520, 1032}}; /* N, K */
    const ds_dtype dts[] = {DT_BF16, DT_F16, DT_F32};
    const int Mmax = 200;
    tpool *tp = tp_create(2);
    int prev = ops_level();
    for (size_t d = 0; d < 3; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int N = shapes[s][0], K = shapes[s][1];
            size_t es = dts[d] == DT_F32 ? 4 : 2;
            wmat w = make_w(dts[d], N, K, 0.5f);
            CHECK(tensor_rows8_ok(&w.t));
            tensor t8 = w.t;
            void *buf8 = malloc(w.t.nbytes);
            memcpy(buf8, w.buf, w.t.nbytes);
            tensor_to_rows8(buf8, es, N, K);
            t8.data = buf8;
            t8.rows8 = 1;
            CHECK(!tensor_rows8_ok(&t8));
            /* every element where tensor_off says */
            int moved = 0;
            for (int n = 0; n < N; n++)
                for (int k = 0; k < K; k++)
                    moved += memcmp((const char *)buf8 + tensor_off(K, 1, n, k) * es,
                                    (const char *)w.buf + ((size_t)n * K + k) * es, es) != 0;
            CHECK_EQ_INT(moved, 0);
            CHECK(tensor_same_values(&w.t, &t8) && tensor_same_values(&t8, &w.t) && tensor_same_values(&t8, &t8));
            float *bias = rand_vec((size_t)N, 1.0f), *x = rand_vec((size_t)Mmax * K, 2.0f);
            float *y = malloc((size_t)Mmax * N * sizeof(float)), *y8 = malloc((size_t)Mmax * N * sizeof(float));
            for (int l = 0; l < n_levels(); l++) {
                ops_set_level(l);
                for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
                    int M = Ms[mi];
                    const float *b = mi % 2 ? bias : NULL;
                    op_matmul(tp, y, x, M, &w.t, b);
                    op_matmul(mi % 3 ? tp : NULL, y8, x, M, &t8, b);
                    CHECK_MSG(memcmp(y, y8, (size_t)M * N * sizeof(float)) == 0,
                              "%s %s M=%d N=%d K=%d: rows8 weights give other bits", level_str(l), dt_str(dts[d]), M,
                              N, K);
                }
            }
            /* the gather of a tied embedding */
            int toks[5] = {0, N - 1, 7 % N, 7 % N, N / 2};
            float *e = malloc(5 * (size_t)K * sizeof(float)), *e8 = malloc(5 * (size_t)K * sizeof(float));
            op_embed(e, &w.t, toks, 5);
            op_embed(e8, &t8, toks, 5);
            CHECK(memcmp(e, e8, 5 * (size_t)K * sizeof(float)) == 0);
            /* one value changed: no longer the same */
            ((unsigned char *)buf8)[tensor_off(K, 1, N - 1, K - 1) * es] ^= 1;
            CHECK(!tensor_same_values(&w.t, &t8));
            free(e), free(e8), free(x), free(y), free(y8), free(bias), free(buf8);
            free_w(&w);
        }
    ops_set_level(prev);
    tp_free(tp);
    /* shapes the layout does not take */
    wmat odd = make_w(DT_BF16, 12, 16, 1.0f), oddk = make_w(DT_BF16, 16, 12, 1.0f);
    CHECK(!tensor_rows8_ok(&odd.t) && !tensor_rows8_ok(&oddk.t));
    free_w(&odd);
    free_w(&oddk);
}

/* a matrix large enough to be rearranged by several threads lands where
 * tensor_off says, every piece */
TEST(tensor_rows8_large_threaded) {
    const int64_t N = 2048, K = 1160; /* 4.75 MB of bf16: past the threads' threshold */
    uint16_t *a = malloc((size_t)(N * K) * 2), *b = malloc((size_t)(N * K) * 2);
    CHECK(a && b);
    if (!a || !b) {
        free(a), free(b);
        return;
    }
    for (int64_t i = 0; i < N * K; i++) a[i] = (uint16_t)(i * 2654435761u >> 7);
    memcpy(b, a, (size_t)(N * K) * 2);
    tensor_to_rows8(b, 2, N, K);
    int64_t bad = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k += 8)
            bad += memcmp(b + tensor_off(K, 1, n, k), a + n * K + k, 16) != 0;
    CHECK_EQ_INT((int)bad, 0);
    free(a), free(b);
}

/* ----------------------------------------------------------- attention */

/* causal attention in double; window > 0: row m sees only the positions
   after n_past + m - window (transformers' sliding-window rule) */
static void attn_ref_w(double *out, const float *q, int M, int nh, int nkv, int hd, const float *k, const float *v,
                       int stride, int n_past, float scale, int window) {
    int r = nh / nkv;
    double *s = malloc(((size_t)n_past + M) * sizeof(double));
    for (int m = 0; m < M; m++)
        for (int h = 0; h < nh; h++) {
            int g = h / r, L = n_past + m + 1, lo = window > 0 && L - window > 0 ? L - window : 0;
            const float *qh = q + ((size_t)m * nh + h) * hd;
            double mx = -INFINITY;
            for (int t = lo; t < L; t++) {
                const float *kt = k + ((size_t)g * stride + t) * hd;
                double d = 0;
                for (int i = 0; i < hd; i++) d += (double)qh[i] * kt[i];
                s[t] = d * scale;
                if (s[t] > mx) mx = s[t];
            }
            double sum = 0;
            for (int t = lo; t < L; t++) sum += (s[t] = exp(s[t] - mx));
            double *o = out + ((size_t)m * nh + h) * hd;
            for (int i = 0; i < hd; i++) o[i] = 0;
            for (int t = lo; t < L; t++) {
                const float *vt = v + ((size_t)g * stride + t) * hd;
                for (int i = 0; i < hd; i++) o[i] += s[t] / sum * vt[i];
            }
        }
    free(s);
}

static void attn_ref(double *out, const float *q, int M, int nh, int nkv, int hd, const float *k, const float *v,
                     int stride, int n_past, float scale) {
    attn_ref_w(out, q, M, nh, nkv, hd, k, v, stride, n_past, scale, 0);
}

typedef struct {
    int M, nh, nkv, hd, n_past;
    float qscale;
} attn_case;

TEST(ops_attention_vs_reference) {
    const attn_case cases[] = {
        {1, 4, 4, 8, 0, 1.0f},   {1, 4, 2, 64, 37, 3.0f}, {2, 8, 2, 16, 5, 1.0f},  {3, 4, 1, 64, 0, 2.0f},
        {5, 4, 4, 128, 9, 1.0f}, {17, 8, 2, 32, 3, 4.0f}, {17, 4, 4, 24, 0, 1.0f}, {5, 8, 2, 12, 11, 1.0f},
        {3, 6, 3, 40, 2, 1.0f},  {1, 16, 8, 128, 300, 1.0f}, {9, 16, 4, 8, 64, 8.0f},
    };
    tpool *tp = tp_create(3);
    int prev = ops_use_simd(1);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        attn_case a = cases[c];
        int stride = a.n_past + a.M + 3;
        size_t nq = (size_t)a.M * a.nh * a.hd, nkv = (size_t)a.nkv * stride * a.hd;
        float *q = rand_vec(nq, a.qscale), *k = rand_vec(nkv, 1.0f), *v = rand_vec(nkv, 1.0f);
        double *ref = malloc(nq * sizeof(double));
        float scale = 1.0f / sqrtf((float)a.hd);
        attn_ref(ref, q, a.M, a.nh, a.nkv, a.hd, k, v, stride, a.n_past, scale);
        float *outs[2][2];
        for (int mode = 0; mode < n_modes(); mode++) {
            ops_use_simd(mode);
            for (int t = 0; t < 2; t++) {
                float *out = outs[mode][t] = malloc(nq * sizeof(float));
                op_attention(t ? tp : NULL, out, q, a.M, a.nh, a.nkv, a.hd, k, v, stride, a.n_past, scale);
                int bad = 0;
                for (size_t i = 0; i < nq; i++)
                    if (!(fabs(out[i] - ref[i]) <= 2e-6)) {
                        if (!bad)
                            test_fail(__FILE__, __LINE__, "%s case %zu: out[%zu]=%.9g ref %.9g",
                                      mode ? "simd" : "scalar", c, i, out[i], ref[i]);
                        bad++;
                    }
            }
            CHECK_MSG(memcmp(outs[mode][0], outs[mode][1], nq * sizeof(float)) == 0,
                      "%s case %zu: threaded result differs", mode ? "simd" : "scalar", c);
            /* rows one at a time (decode) equal the batch (prefill/verify) */
            float *o1 = malloc((size_t)a.nh * a.hd * sizeof(float));
            int same = 1;
            for (int m = 0; m < a.M; m++) {
                op_attention(tp, o1, q + (size_t)m * a.nh * a.hd, 1, a.nh, a.nkv, a.hd, k, v, stride, a.n_past + m,
                             scale);
                same &= memcmp(o1, outs[mode][0] + (size_t)m * a.nh * a.hd, (size_t)a.nh * a.hd * sizeof(float)) == 0;
            }
            CHECK_MSG(same, "%s case %zu: rows alone differ from the batch", mode ? "simd" : "scalar", c);
            free(o1);
        }
        for (int mode = 0; mode < n_modes(); mode++)
            for (int t = 0; t < 2; t++) free(outs[mode][t]);
        free(q);
        free(k);
        free(v);
        free(ref);
    }
    ops_use_simd(prev);
    tp_free(tp);
}

/* A sliding window (op_attention_kv's window): each row within 2e-6 of the
   double reference over its window, scalar and SIMD, threaded or not; each
   row alone (decode) the same bits as in its batch, whose first row (and
   so the blocks the kernel skips) differs; a window that covers every
   position the same bits as no window. */
TEST(ops_attention_window) {
    const struct {
        int M, nh, nkv, hd, n_past, window;
    } cases[] = {{1, 4, 2, 64, 200, 16}, {17, 8, 2, 32, 70, 5},  {9, 4, 4, 64, 130, 64},
                 {5, 4, 1, 64, 0, 3},    {33, 4, 2, 16, 100, 1}, {12, 4, 2, 64, 300, 129}};
    tpool *tp = tp_create(3);
    int prev = ops_use_simd(1);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int M = cases[c].M, nh = cases[c].nh, nkv = cases[c].nkv, hd = cases[c].hd, np = cases[c].n_past,
                  W = cases[c].window, stride = np + M + 3;
        size_t nq = (size_t)M * nh * hd, nkvs = (size_t)nkv * stride * hd, row = (size_t)nh * hd;
        float *q = rand_vec(nq, 2.0f), *k = rand_vec(nkvs, 1.0f), *v = rand_vec(nkvs, 1.0f);
        float *out = malloc(nq * sizeof(float)), *o2 = malloc(nq * sizeof(float));
        double *ref = malloc(nq * sizeof(double));
        const float scale = 1.0f / sqrtf((float)hd);
        attn_ref_w(ref, q, M, nh, nkv, hd, k, v, stride, np, scale, W);
        const void *kp[1] = {k}, *vp[1] = {v};
        kv_view w = {.bits = 32, .k = kp, .v = vp, .plen = stride, .shift = KV_FLAT_SHIFT};
        for (int mode = 0; mode < n_modes(); mode++) {
            ops_use_simd(mode);
            op_attention_kv(tp, out, q, M, nh, nkv, hd, &w, np, scale, 0, W);
            int bad = 0;
            for (size_t i = 0; i < nq; i++)
                if (!(fabs(out[i] - ref[i]) <= 2e-6) && !bad++)
                    test_fail(__FILE__, __LINE__, "%s case %zu: out[%zu]=%.9g ref %.9g", mode ? "simd" : "scalar", c,
                              i, out[i], ref[i]);
            op_attention_kv(NULL, o2, q, M, nh, nkv, hd, &w, np, scale, 0, W);
            CHECK_MSG(!memcmp(out, o2, nq * sizeof(float)), "%s case %zu: threaded result differs",
                      mode ? "simd" : "scalar", c);
            int same = 1;
            for (int m = 0; m < M; m++) {
                op_attention_kv(tp, o2, q + (size_t)m * row, 1, nh, nkv, hd, &w, np + m, scale, 0, W);
                same &= !memcmp(o2, out + (size_t)m * row, row * sizeof(float));
            }
            CHECK_MSG(same, "%s case %zu: rows alone differ from the batch", mode ? "simd" : "scalar", c);
            if (M > 2) { /* the batch from its second row: another first row, other blocks skipped */
                op_attention_kv(tp, o2, q + row, M - 1, nh, nkv, hd, &w, np + 1, scale, 0, W);
                CHECK_MSG(!memcmp(o2, out + row, (nq - row) * sizeof(float)), "%s case %zu: a shorter batch differs",
                          mode ? "simd" : "scalar", c);
            }
            op_attention_kv(tp, out, q, M, nh, nkv, hd, &w, np, scale, 0, np + M);
            op_attention_kv(tp, o2, q, M, nh, nkv, hd, &w, np, scale, 0, 0);
            CHECK_MSG(!memcmp(out, o2, nq * sizeof(float)), "%s case %zu: a window over everything differs from none",
                      mode ? "simd" : "scalar", c);
        }
        free(q), free(k), free(v), free(out), free(o2), free(ref);
    }
    ops_use_simd(prev);
    tp_free(tp);
}

/* a 40k-position cache: heap scratch, no stack overflow, still accurate */
TEST(ops_attention_long_context) {
    int M = 2, nh = 4, nkv = 2, hd = 64, n_past = 40000, stride = n_past + M;
    size_t nq = (size_t)M * nh * hd, nkvs = (size_t)nkv * stride * hd;
    float *q = rand_vec(nq, 2.0f), *k = rand_vec(nkvs, 1.0f), *v = rand_vec(nkvs, 1.0f);
    double *ref = malloc(nq * sizeof(double));
    float *out = malloc(nq * sizeof(float));
    attn_ref(ref, q, M, nh, nkv, hd, k, v, stride, n_past, 0.125f);
    tpool *tp = tp_create(2);
    int prev = ops_use_simd(1);
    for (int mode = 0; mode < n_modes(); mode++) {
        ops_use_simd(mode);
        op_attention(tp, out, q, M, nh, nkv, hd, k, v, stride, n_past, 0.125f);
        double worst = 0;
        for (size_t i = 0; i < nq; i++) worst = fmax(worst, fabs(out[i] - ref[i]));
        CHECK_MSG(worst <= 1e-6, "%s: max error %g", mode ? "simd" : "scalar", worst);
    }
    ops_use_simd(prev);
    tp_free(tp);
    free(q);
    free(k);
    free(v);
    free(ref);
    free(out);
}

/* --------------------------------------------------------- elementwise */

TEST(ops_rmsnorm_vs_reference) {
    const int Ds[] = {1, 7, 8, 64, 1027};
    int prev = ops_use_simd(1);
    for (int mode = 0; mode < n_modes(); mode++) {
        ops_use_simd(mode);
        for (size_t id = 0; id < sizeof Ds / sizeof Ds[0]; id++) {
            int M = 3, D = Ds[id];
            float *x = rand_vec((size_t)M * D, 3.0f), *w = rand_vec((size_t)D, 1.5f);
            float *y = malloc((size_t)M * D * sizeof(float));
            op_rmsnorm(y, x, w, M, D, 1e-6f);
            for (int m = 0; m < M; m++) {
                double ss = 0;
                for (int i = 0; i < D; i++) ss += (double)x[m * D + i] * x[m * D + i];
                double r = 1.0 / sqrt(ss / D + 1e-6);
                for (int i = 0; i < D; i++) {
                    double ref = w[i] * (x[m * D + i] * r);
                    CHECK_NEAR(y[m * D + i], ref, 2e-6 * fabs(ref) + 1e-30);
                }
            }
            /* in place */
            float *z = malloc((size_t)M * D * sizeof(float));
            memcpy(z, x, (size_t)M * D * sizeof(float));
            op_rmsnorm(z, z, w, M, D, 1e-6f);
            CHECK(memcmp(z, y, (size_t)M * D * sizeof(float)) == 0);
            free(z);
            free(x);
            free(w);
            free(y);
        }
    }
    ops_use_simd(prev);
}

TEST(ops_rope_vs_reference) {
    int M = 5, nh = 3, hd = 64;
    int pos[5] = {0, 1, 17, 4095, 40000};
    float inv[32];
    for (int i = 0; i < hd / 2; i++) inv[i] = (float)pow(1000000.0, -2.0 * i / hd);
    int prev = ops_use_simd(1);
    for (int mode = 0; mode < n_modes(); mode++) {
        ops_use_simd(mode);
        float *x = rand_vec((size_t)M * nh * hd, 2.0f);
        float *y = malloc((size_t)M * nh * hd * sizeof(float));
        memcpy(y, x, (size_t)M * nh * hd * sizeof(float));
        op_rope(y, M, nh, hd, pos, inv);
        for (int m = 0; m < M; m++)
            for (int h = 0; h < nh; h++)
                for (int i = 0; i < hd / 2; i++) {
                    float ang = (float)pos[m] * inv[i]; /* the fp32 angle transformers uses */
                    double c = cos((double)ang), s = sin((double)ang);
                    const float *xh = x + ((size_t)m * nh + h) * hd;
                    const float *yh = y + ((size_t)m * nh + h) * hd;
                    double r0 = xh[i] * c - xh[i + hd / 2] * s, r1 = xh[i + hd / 2] * c + xh[i] * s;
                    CHECK_NEAR(yh[i], r0, 1e-6);
                    CHECK_NEAR(yh[i + hd / 2], r1, 1e-6);
                }
        free(x);
        free(y);
    }
    ops_use_simd(prev);
}

TEST(ops_swiglu_add_vs_reference) {
    int n = 1003;
    float *g = rand_vec((size_t)n, 20.0f), *u = rand_vec((size_t)n, 2.0f);
    g[0] = -100.0f;
    g[1] = 100.0f;
    g[2] = -88.0f;
    g[3] = 0.0f;
    g[4] = -1e-20f;
    int prev = ops_use_simd(1);
    for (int mode = 0; mode < n_modes(); mode++) {
        ops_use_simd(mode);
        float *y = malloc((size_t)n * sizeof(float));
        op_swiglu(y, g, u, n);
        for (int i = 0; i < n; i++) {
            double ref = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
            CHECK_NEAR(y[i], ref, 1e-6 * fabs(ref) + 1e-30);
        }
        /* y aliasing gate */
        float *z = malloc((size_t)n * sizeof(float));
        memcpy(z, g, (size_t)n * sizeof(float));
        op_swiglu(z, z, u, n);
        CHECK(memcmp(z, y, (size_t)n * sizeof(float)) == 0);
        /* add */
        float *a = rand_vec((size_t)n, 1.0f), *b = malloc((size_t)n * sizeof(float));
        memcpy(b, a, (size_t)n * sizeof(float));
        op_add(b, u, n);
        int bad = 0;
        for (int i = 0; i < n; i++) bad += b[i] != a[i] + u[i];
        CHECK_EQ_INT(bad, 0);
        free(a);
        free(b);
        free(y);
        free(z);
    }
    ops_use_simd(prev);
    free(g);
    free(u);
}

#ifdef DS_HAVE_AVX2_PATH
TEST(ops_exp_accuracy) {
    if (!have_simd()) return;
    int n = 200003;
    float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
    for (int i = 0; i < n; i++) x[i] = -87.0f + 175.0f * (float)i / (float)(n - 1); /* up to 88 */
    for (int i = 0; i < 1000; i++) x[i] = frand() * 0.01f;
    avx2_exp(y, x, n);
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double ref = exp((double)x[i]);
        worst = fmax(worst, fabs(y[i] - ref) / ref);
    }
    CHECK_MSG(worst < 1e-6, "exp max relative error %g", worst);
    float sp[6] = {-INFINITY, INFINITY, 89.0f, -200.0f, NAN, 0.0f}, sy[6];
    avx2_exp(sy, sp, 6);
    CHECK(sy[0] == 0.0f);
    CHECK(isinf(sy[1]) && sy[1] > 0);
    CHECK(isinf(sy[2]) && sy[2] > 0);
    CHECK(sy[3] == 0.0f);
    CHECK(isnan(sy[4]));
    CHECK(sy[5] == 1.0f);
    free(x);
    free(y);
}
#endif

TEST(ops_to_f32_and_embed_exact) {
    /* every 16-bit pattern widens exactly as util's reference conversions */
    uint16_t *h = malloc(65536 * sizeof(uint16_t));
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    float *y = malloc(65536 * sizeof(float));
    int prev = ops_use_simd(1);
    for (int mode = 0; mode < n_modes(); mode++) {
        ops_use_simd(mode);
        int bad = 0;
        op_to_f32(y, h, DT_BF16, 65536);
        for (int i = 0; i < 65536; i++) {
            float r = ds_bf16_to_f32(h[i]);
            bad += !(isnan(r) ? isnan(y[i]) : memcmp(&r, &y[i], 4) == 0);
        }
        op_to_f32(y, h, DT_F16, 65535); /* odd length: exercises the tail */
        for (int i = 0; i < 65535; i++) {
            float r = ds_f16_to_f32(h[i]);
            bad += !(isnan(r) ? isnan(y[i]) : memcmp(&r, &y[i], 4) == 0);
        }
        CHECK_EQ_INT(bad, 0);

        const ds_dtype dts[] = {DT_F32, DT_F16, DT_BF16};
        for (int d = 0; d < 3; d++) {
            int V = 50, D = 37;
            wmat e = make_w(dts[d], V, D, 1.0f);
            int toks[4] = {0, 49, 7, 7};
            float *out = malloc(4 * (size_t)D * sizeof(float));
            op_embed(out, &e.t, toks, 4);
            for (int m = 0; m < 4; m++)
                CHECK(memcmp(out + (size_t)m * D, e.f + (size_t)toks[m] * D, (size_t)D * sizeof(float)) == 0);
            free(out);
            free_w(&e);
        }
    }
    ops_use_simd(prev);
    free(h);
    free(y);
}

TEST(ops_argmax) {
    float x[10] = {1, 3, 2, 3, -1, 0, 3, 2, 1, 0};
    CHECK_EQ_INT(op_argmax(x, 10), 1);
    CHECK_EQ_INT(op_argmax(x, 1), 0);
    float *r = rand_vec(151936, 10.0f);
    r[123456] = 11.0f;
    CHECK_EQ_INT(op_argmax(r, 151936), 123456);
    free(r);
}

/* The SIMD argmax against the scalar loop's answer (the first index of the
   largest value; NaNs never win unless x[0] is one) on every length up to
   80 and a vocabulary-sized row, with ties, NaNs, infinities and signed
   zeros placed at random, and at x[0]. */
TEST(ops_argmax_simd_matches_scalar) {
    static float x[152000];
    unsigned s = 12345;
    const float specials[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 5.0f, 5.0f};
    for (int trial = 0; trial < 4000; trial++) {
        int n = trial < 3900 ? 1 + trial % 80 : 151936 - trial % 37;
        for (int i = 0; i < n; i++) {
            s = s * 1103515245u + 12345u;
            x[i] = (float)((s >> 16) % 9) - 4.0f; /* few distinct values: many ties */
        }
        int n_sp = trial % 5;
        for (int j = 0; j < n_sp; j++) {
            s = s * 1103515245u + 12345u;
            int at = (int)((s >> 8) % (unsigned)n);
            x[trial % 13 == 0 && j == 0 ? 0 : at] = specials[(s >> 4) % 8];
        }
        int want = scalar_argmax(x, n);
        int prev = ops_use_simd(1);
        int got = op_argmax(x, n);
        ops_use_simd(prev);
        if (got != want) {
            test_fail(__FILE__, __LINE__, "argmax n %d trial %d: simd %d, scalar %d", n, trial, got, want);
            return;
        }
    }
}

/* op_exp_sum: each e within 4e-7 relative of exp in double of the same
   f32 argument on both paths, exact zeros below -104 and for -inf, the
   sums within 1e-6 */
TEST(ops_exp_sum_simd_and_scalar) {
    static float x[5003], e[5003];
    unsigned s = 777;
    for (int i = 0; i < 5003; i++) {
        s = s * 1103515245u + 12345u;
        x[i] = (float)((s >> 8) & 0xffff) / 65536.0f * 60.0f - 50.0f;
    }
    x[7] = -INFINITY;
    x[11] = -200.0f;
    x[5002] = 10.0f; /* the maximum, in the tail past the last 8 */
    for (int simd = 0; simd <= 1; simd++) {
        int prev = ops_use_simd(simd);
        for (int n = 1; n <= 5003; n += n < 40 ? 1 : 997) {
            float mx = -INFINITY;
            for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
            double sum = op_exp_sum(e, x, n, mx, 1.0f / 0.7f), want = 0;
            for (int i = 0; i < n; i++) {
                float af = (x[i] - mx) * (1.0f / 0.7f);
                double w = af < -104.0f ? 0 : exp((double)af);
                want += e[i];
                if (w == 0) {
                    CHECK_MSG(e[i] == 0.0f, "simd %d n %d: e[%d] = %g, want 0", simd, n, i, (double)e[i]);
                } else if (w > 1e-30 && fabs(e[i] - w) > 4e-7 * w) {
                    test_fail(__FILE__, __LINE__, "simd %d n %d: e[%d] = %.9g, want %.9g", simd, n, i, (double)e[i], w);
                    ops_use_simd(prev);
                    return;
                }
            }
            CHECK_MSG(fabs(sum - want) <= 1e-6 * want, "simd %d n %d: sum %.12g, sum of e %.12g", simd, n, sum, want);
        }
        ops_use_simd(prev);
    }
}

TEST(ops_simd_switch) {
    int prev = ops_use_simd(0);
    CHECK_EQ_INT(ops_simd_active(), 0);
    CHECK_EQ_INT(ops_use_simd(1), 0);
    CHECK_EQ_INT(ops_simd_active(), have_simd());
    ops_use_simd(prev);
    CHECK_EQ_INT(ops_simd_active(), prev);
    /* levels clamp to what the CPU has */
    int mx = ops_max_level(), pl = ops_set_level(99);
    CHECK_EQ_INT(ops_level(), mx);
    CHECK_EQ_INT(mx >= 1, have_simd());
#ifdef DS_HAVE_AVX2_PATH
    CHECK_EQ_INT(mx == 2, cpu_has_avx512());
#endif
    ops_set_level(0);
    CHECK_EQ_INT(ops_simd_active(), 0);
    ops_set_level(-3);
    CHECK_EQ_INT(ops_level(), 0);
    ops_set_level(pl);
    CHECK_EQ_INT(ops_level(), pl);
}

/* the non-causal block attention: row m equals causal attention of that row
   alone over all n_past + M positions, bit for bit, on every kernel level */
TEST(ops_attention_block_rows) {
    enum { NH = 8, NKV = 2, HD = 64, CAP = 96 };
    uint32_t st = 4242;
    float *k = xmalloc(sizeof(float) * NKV * CAP * HD), *v = xmalloc(sizeof(float) * NKV * CAP * HD);
    float q[16 * NH * HD], out[16 * NH * HD], one[NH * HD];
    for (int i = 0; i < NKV * CAP * HD; i++) {
        st = st * 1664525u + 1013904223u;
        k[i] = (float)((st >> 8) % 2001) / 1000.0f - 1.0f;
        st = st * 1664525u + 1013904223u;
        v[i] = (float)((st >> 8) % 2001) / 1000.0f - 1.0f;
    }
    for (int i = 0; i < 16 * NH * HD; i++) {
        st = st * 1664525u + 1013904223u;
        q[i] = (float)((st >> 8) % 2001) / 1000.0f - 1.0f;
    }
    tpool *tp = tp_create(2);
    int prev = ops_use_simd(1);
    for (int simd = 0; simd < 2; simd++) {
        ops_use_simd(simd);
        static const int Ms[] = {1, 7, 16}, pasts[] = {0, 5, 64};
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) {
                int M = Ms[a], np = pasts[b];
                op_attention_block(tp, out, q, M, NH, NKV, HD, k, v, CAP, np, 0.125f);
                for (int m = 0; m < M; m++) {
                    op_attention(NULL, one, q + (size_t)m * NH * HD, 1, NH, NKV, HD, k, v, CAP, np + M - 1, 0.125f);
                    CHECK_MSG(!memcmp(one, out + (size_t)m * NH * HD, sizeof one), "simd %d M %d past %d row %d",
                              simd, M, np, m);
                }
            }
    }
    ops_use_simd(prev);
    tp_free(tp);
    free(k);
    free(v);
}
