/* Tests of engine/quant: dequantization of every format against golden
 * references (tests/data/quant_blocks, written by tools/gen_quant_golden.py
 * from gguf-py's NumPy dequantization and a NumPy MLX affine rule),
 * quant_matmul_rows against a double-precision dot of the reference rows,
 * scalar against SIMD, batch invariance (M, [n0, n1), threads), the ops
 * integration (op_matmul, op_embed) and quant_check's errors. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/ops.h"
#include "engine/ops_internal.h"
#include "engine/quant.h"
#include "engine/quant_internal.h"
#include "engine/threadpool.h"
#include "base/util.h"
#include "test.h"

typedef struct {
    char name[64];
    tensor t;
    void *data, *scales, *biases;
    float *ref; /* [N][K] */
} qcase;

static void *slurp(const char *dir, const char *name, const char *ext, size_t *len) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s%s", dir, name, ext);
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *b = xmalloc(n > 0 ? (size_t)n : 1);
    size_t got = fread(b, 1, (size_t)n, f);
    fclose(f);
    *len = got;
    return b;
}

static ds_dtype dt_of(const char *s) {
    static const char *names[] = {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"};
    for (int i = 0; i < 10; i++)
        if (!strcmp(s, names[i])) return (ds_dtype)(DT_Q8_0 + i);
    if (!strcmp(s, "MLX")) return DT_MLX;
    if (!strcmp(s, "F32")) return DT_F32;
    if (!strcmp(s, "F16")) return DT_F16;
    if (!strcmp(s, "BF16")) return DT_BF16;
    return DT_COUNT;
}

/* the fixture's cases; returns the count (0 with a failure when missing) */
static int load_cases(qcase **out) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/quant_blocks", test_data_dir());
    size_t len;
    char *man = slurp(dir, "manifest", ".txt", &len);
    CHECK_MSG(man != NULL, "missing %s/manifest.txt (tools/gen_quant_golden.py)", dir);
    if (!man) return 0;
    man = realloc(man, len + 1);
    man[len] = 0;
    qcase *cs = calloc(64, sizeof *cs);
    int n = 0;
    for (char *line = strtok(man, "\n"); line && n < 64; line = strtok(NULL, "\n")) {
        char name[64], dts[16], sds[16];
        long long N, K;
        int bits, group;
        if (sscanf(line, "%63s %15s %lld %lld %d %d %15s", name, dts, &N, &K, &bits, &group, sds) != 7) continue;
        qcase *c = &cs[n];
        snprintf(c->name, sizeof c->name, "%s", name);
        c->t.name = c->name;
        c->t.dtype = dt_of(dts);
        c->t.ndim = 2;
        c->t.shape[0] = N;
        c->t.shape[1] = K;
        c->data = slurp(dir, name, ".bin", &c->t.nbytes);
        c->t.data = c->data;
        size_t rl = 0;
        c->ref = slurp(dir, name, ".f32", &rl);
        CHECK_MSG(c->data && c->ref && rl == (size_t)(N * K) * 4, "%s: fixture files", name);
        if (c->t.dtype == DT_MLX) {
            size_t sl, bl;
            c->t.q.bits = bits;
            c->t.q.group = group;
            c->t.q.sdtype = dt_of(sds);
            c->scales = slurp(dir, name, ".scales", &sl);
            c->biases = slurp(dir, name, ".biases", &bl);
            c->t.q.scales = c->scales;
            c->t.q.biases = c->biases;
        }
        char err[256] = "";
        CHECK_MSG(quant_check(&c->t, err, sizeof err) == 0, "%s: %s", name, err);
        n++;
    }
    free(man);
    *out = cs;
    return n;
}

static void free_cases(qcase *cs, int n) {
    for (int i = 0; i < n; i++) {
        free(cs[i].data);
        free(cs[i].scales);
        free(cs[i].biases);
        free(cs[i].ref);
    }
    free(cs);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float frand(void) { return (float)(rnd() % 2000001) / 1000000.0f - 1.0f; }

TEST(quant_geometry) {
    CHECK_EQ_INT(quant_block_elems(DT_Q4_0), 32);
    CHECK_EQ_INT(quant_block_bytes(DT_Q4_0), 18);
    CHECK_EQ_INT(quant_block_elems(DT_Q6_K), 256);
    CHECK_EQ_INT(quant_block_bytes(DT_Q6_K), 210);
    CHECK_EQ_INT(quant_block_bytes(DT_F32), 0);
    CHECK_EQ_INT(quant_row_bytes(DT_Q4_K, 0, 1024), 4 * 144);
    CHECK_EQ_INT(quant_row_bytes(DT_MLX, 3, 256), 96);
    CHECK_EQ_INT(quant_row_bytes(DT_MLX, 4, 64), 32);
}

/* every row of every fixture equals its reference bit for bit: quant.c
 * follows ggml's order of f32 operations, which gguf-py's NumPy code also
 * follows, and the MLX reference is scale * q + bias in f32 */
TEST(quant_dequant_golden) {
    qcase *cs = NULL;
    int n = load_cases(&cs);
    CHECK(n >= 28);
    for (int i = 0; i < n; i++) {
        const qcase *c = &cs[i];
        int64_t N = c->t.shape[0], K = c->t.shape[1];
        float *row = xmalloc((size_t)K * sizeof(float));
        int bad = 0, nonzero = 0;
        for (int64_t r = 0; r < N; r++) {
            quant_row_f32(&c->t, r, row);
            for (int64_t k = 0; k < K; k++) {
                float want = c->ref[r * K + k];
                if (memcmp(&row[k], &want, 4) != 0) {
                    if (bad++ < 3)
                        test_fail(__FILE__, __LINE__, "%s row %lld elt %lld: %.9g, reference %.9g", c->name,
                                  (long long)r, (long long)k, row[k], want);
                }
                nonzero += want != 0.0f;
            }
        }
        CHECK_MSG(nonzero > K, "%s: reference mostly zeros", c->name);
        free(row);
    }
    free_cases(cs, n);
}

/* A random quantized tensor of N x K: random bytes with sane f16 scale
 * fields (GGUF) or random words, scales and biases (MLX). */
typedef struct {
    tensor t;
    uint8_t *data;
    uint16_t *sb;
} rtensor;

static void rand_tensor(rtensor *r, ds_dtype dt, int bits, int group, int N, int K) {
    memset(r, 0, sizeof *r);
    r->t.name = "rand";
    r->t.dtype = dt;
    r->t.ndim = 2;
    r->t.shape[0] = N;
    r->t.shape[1] = K;
    r->t.nbytes = (size_t)N * quant_row_bytes(dt, bits, K);
    r->data = xmalloc(r->t.nbytes);
    for (size_t i = 0; i < r->t.nbytes; i++) r->data[i] = (uint8_t)rnd();
    if (dt == DT_MLX) {
        size_t ng = (size_t)N * (size_t)(K / group);
        r->sb = xmalloc(2 * ng * sizeof(uint16_t));
        for (size_t i = 0; i < 2 * ng; i++) r->sb[i] = ds_f32_to_f16(frand() * 0.05f);
        r->t.q.bits = bits;
        r->t.q.group = group;
        r->t.q.sdtype = DT_F16;
        r->t.q.scales = r->sb;
        r->t.q.biases = r->sb + ng;
    } else {
        /* the f16 fields of each block (as tools/gen_quant_golden.py) */
        static const int offs[][3] = {{0, -1}, {0, -1}, {0, 2}, {0, -1}, {0, 2}, {80, 82}, {108, -1}, {0, 2}, {0, 2}, {208, -1}};
        const int *o = offs[dt - DT_Q8_0];
        size_t bb = quant_block_bytes(dt), nb = r->t.nbytes / bb;
        for (size_t b = 0; b < nb; b++)
            for (int j = 0; j < 2 && o[j] >= 0; j++) {
                uint16_t h = ds_f32_to_f16(frand() * 0.05f);
                memcpy(r->data + b * bb + (size_t)o[j], &h, 2);
            }
    }
    r->t.data = r->data;
}

static void free_rtensor(rtensor *r) {
    free(r->data);
    free(r->sb);
}

typedef struct { ds_dtype dt; int bits, group; } qfmt;
static const qfmt all_fmts[] = {
    {DT_Q8_0, 0, 0}, {DT_Q4_0, 0, 0}, {DT_Q4_1, 0, 0}, {DT_Q5_0, 0, 0}, {DT_Q5_1, 0, 0}, {DT_Q2_K, 0, 0},
    {DT_Q3_K, 0, 0}, {DT_Q4_K, 0, 0}, {DT_Q5_K, 0, 0}, {DT_Q6_K, 0, 0}, {DT_MLX, 4, 64}, {DT_MLX, 8, 32},
    {DT_MLX, 4, 128}, {DT_MLX, 3, 64}, {DT_MLX, 6, 32},
};
#define N_FMTS (int)(sizeof all_fmts / sizeof all_fmts[0])

/* a K past a multiple of 256 (a span cut short: a half chunk for blocks of
 * 32) where the format allows it */
static int k_for(const qfmt *f, int base) {
    if (f->dt == DT_MLX) return base + f->group;
    return quant_block_elems(f->dt) == 32 ? base + 32 : base;
}

/* x[m] quantized as the matmul sees it, dequantized in double: xd[k] =
 * d_b * q_k (exact); also d per element for the quantization bound */
static void xq_ref(const float *x, int K, double *xd, double *db) {
    int16_t q[32];
    for (int b = 0; b < K / 32; b++) {
        float d = quant_x_block(x + 32 * b, q);
        for (int j = 0; j < 32; j++) {
            xd[32 * b + j] = (double)d * q[j];
            db[32 * b + j] = d;
        }
    }
}

/* Every level on every format (random tensors and the golden fixtures),
 * against double dots of the exactly dequantized weights:
 * - with the quantized x (d * q): error from float rounding only, within
 *   tol_q = 1e-5 * sum|xq w| for the SIMD levels' f32 lanes (about K/16 +
 *   40 roundings of partial sums bounded by sum|xq w|) and 1e-6 for level
 *   0 (double sums, one f32 rounding);
 * - with the f32 x: within the quantization bound sum_k |w_k| * d_k / 2
 *   (each |x_k - d q_k| <= d / 2) plus tol_q. */
static void check_vs_ref(const char *what, const tensor *t, const float *ref, int M, const float *x, const float *bias) {
    const int N = (int)t->shape[0], K = (int)t->shape[1];
    float *y = xmalloc((size_t)M * N * sizeof(float));
    double *xd = xmalloc((size_t)K * sizeof(double)), *db = xmalloc((size_t)K * sizeof(double));
    for (int lvl = 0; lvl <= ops_max_level(); lvl++) {
        ops_set_level(lvl);
        quant_matmul_rows(y, N, x, M, K, t, bias, 0, N);
        int bad = 0;
        for (int m = 0; m < M; m++) {
            xq_ref(x + (size_t)m * K, K, xd, db);
            for (int r = 0; r < N; r++) {
                const float *w = ref + (size_t)r * K;
                double dq = 0, dx = 0, a = 0, qb = 0;
                for (int k = 0; k < K; k++) {
                    dq += xd[k] * w[k];
                    dx += (double)x[(size_t)m * K + k] * w[k];
                    a += fabs(xd[k] * w[k]);
                    qb += fabs((double)w[k]) * db[k] * 0.5;
                }
                const double b = bias ? bias[r] : 0.0, got = y[(size_t)m * N + r];
                const double tq = (lvl ? 1e-5 : 1e-6) * (a + fabs(b)) + 1e-30;
                if ((fabs(got - (dq + b)) > tq || fabs(got - (dx + b)) > qb + tq) && bad++ < 3)
                    test_fail(__FILE__, __LINE__, "%s level %d m %d n %d: %.9g, quantized-x ref %.9g (tol %.3g), f32-x ref %.9g (tol %.3g)",
                              what, lvl, m, r, got, dq + b, tq, dx + b, qb + tq);
            }
        }
    }
    free(y);
    free(xd);
    free(db);
}

TEST(quant_matmul_vs_reference) {
    qcase *cs = NULL;
    int n = load_cases(&cs);
    const int M = 3;
    int prev = ops_level();
    for (int i = 0; i < n; i++) {
        const qcase *c = &cs[i];
        int N = (int)c->t.shape[0], K = (int)c->t.shape[1];
        float *x = xmalloc((size_t)M * K * sizeof(float)), bias[64];
        for (int j = 0; j < M * K; j++) x[j] = frand();
        for (int j = 0; j < N && j < 64; j++) bias[j] = frand();
        check_vs_ref(c->name, &c->t, c->ref, M, x, N <= 64 ? bias : NULL);
        free(x);
    }
    ops_set_level(prev);
    free_cases(cs, n);
}

/* The unpacked form every kernel multiplies, a * (u - off) + c per unit,
 * equals the exact dequantization (as a value: ggml's d * q may be -0 where
 * a * q + 0 is +0) */
TEST(quant_unpack_exact) {
    const int N = 5, K = 1024 + 256;
    float *w = xmalloc((size_t)K * sizeof(float));
    uint8_t u[QSPAN];
    float a[16], c[16];
    for (int f = 0; f < N_FMTS; f++) {
        const int k = k_for(&all_fmts[f], 1024) + (all_fmts[f].group == 32 ? 64 : 0);
        rtensor r;
        rand_tensor(&r, all_fmts[f].dt, all_fmts[f].bits, all_fmts[f].group, N, k);
        const int off = quant_offset(&r.t);
        int bad = 0;
        for (int n = 0; n < N; n++) {
            quant_row_f32(&r.t, n, w);
            for (int sp = 0; sp < quant_kp(k) / QSPAN; sp++) {
                quant_unpack_span(&r.t, n, sp, u, a, c);
                for (int e = 0; e < QSPAN; e++) {
                    const int kk = sp * QSPAN + e;
                    if (kk >= k) {
                        bad += u[e] != 0 || a[e / 16] != 0.0f || c[e / 16] != 0.0f;
                        continue;
                    }
                    const float v = a[e / 16] * (float)((int)u[e] - off) + c[e / 16];
                    if (v != w[kk] && bad++ < 3)
                        test_fail(__FILE__, __LINE__, "%s/%d row %d elt %d: unpacked %.9g, dequantized %.9g",
                                  dtype_name(r.t.dtype), r.t.q.bits, n, kk, v, w[kk]);
                }
            }
        }
        CHECK_MSG(!bad, "%s/%d: %d unpacked elements differ", dtype_name(r.t.dtype), r.t.q.bits, bad);
        free_rtensor(&r);
    }
    free(w);
}

/* The activation quantizer: hand-computed blocks (ties at exactly .5 go
 * to even, zeros, huge and subnormal values, one outlier), then every
 * level's quantizer bit-equal to the scalar rule on random and special
 * rows. */
TEST(quant_act_quantizer) {
    float x[32];
    int16_t q[32];
    /* amax 32639 gives d = 1, so q = nearbyint(x): halves to even */
    const float in[8] = {32639.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 3.49f};
    const int want[8] = {32639, 0, 2, 2, 0, -2, -2, 3};
    for (int i = 0; i < 32; i++) x[i] = i < 8 ? in[i] : 0.0f;
    CHECK(quant_x_block(x, q) == 1.0f);
    for (int i = 0; i < 8; i++) CHECK_MSG(q[i] == want[i], "x %g: q %d, want %d", in[i], q[i], want[i]);
    /* all zeros: d = 0, q = 0 */
    for (int i = 0; i < 32; i++) x[i] = i & 1 ? -0.0f : 0.0f;
    CHECK(quant_x_block(x, q) == 0.0f);
    for (int i = 0; i < 32; i++) CHECK(q[i] == 0);
    /* -65278 and 1: d = 2, q(1) = nearbyint(0.5) = 0, q(3) = 2 (1.5 to
     * even), q(5) = 2 (2.5 to even), q(-7) = -4 (-3.5 to even) */
    for (int i = 0; i < 32; i++) x[i] = 0.0f;
    x[0] = -65278.0f, x[1] = 1.0f, x[2] = 3.0f, x[3] = 5.0f, x[4] = -7.0f;
    CHECK(quant_x_block(x, q) == 2.0f);
    CHECK(q[0] == -32639 && q[1] == 0 && q[2] == 2 && q[3] == 2 && q[4] == -4);
    /* huge: d = FLT_MAX-range / 32639 stays finite, q(x/2) a tie or near */
    x[0] = 3.0e38f, x[1] = -1.5e38f;
    float d = quant_x_block(x, q);
    CHECK_MSG(d == 3.0e38f / 32639.0f && q[0] == 32639 && (q[1] == -16319 || q[1] == -16320), "huge: d %g q %d %d", d,
              q[0], q[1]);
    /* subnormal d (a few ulps): |x / d| past 32639 is clamped to 32639 */
    for (int i = 0; i < 32; i++) x[i] = 0.0f;
    x[0] = ldexpf(48000.0f, -149), x[1] = -x[0], x[2] = ldexpf(3.0f, -149); /* d = 1 ulp */
    d = quant_x_block(x, q);
    CHECK_MSG(d > 0.0f && x[0] / d > 32639.5f && q[0] == 32639 && q[1] == -32639 && q[2] == (int)nearbyintf(x[2] / d),
              "subnormal: d %g x/d %g q %d %d %d", d, x[0] / d, q[0], q[1], q[2]);
    /* subnormal amax below 32639 ulps: d rounds to 0, so q = 0 */
    x[0] = ldexpf(1000.0f, -149), x[1] = x[2] = 0.0f;
    CHECK(quant_x_block(x, q) == 0.0f && q[0] == 0);
    /* every q of the rule's range, exact (one block per 31 values), with
     * level 2's reordered plane qp and the offset lanes cor */
    {
        const int K1 = 2112 * 32; /* 31 values per block cover [-32639, 32639] */
        float *xs = xmalloc((size_t)K1 * sizeof(float));
        void *ac = xmalloc(quant_act_bytes(1, K1));
        tensor t1 = {.dtype = DT_Q8_0, .ndim = 2, .shape = {1, K1}};
        /* block b: first element +-32639 (d = 1), the others consecutive */
        int v = -32639;
        for (int b = 0; b < K1 / 32; b++) {
            xs[32 * b] = b & 1 ? -32639.0f : 32639.0f;
            for (int j = 1; j < 32; j++) xs[32 * b + j] = (float)(v <= 32639 ? v++ : 0);
        }
        CHECK(v == 32640);
        int prev = ops_level(), bad = 0;
        for (int lvl = 0; lvl <= ops_max_level(); lvl++) {
            ops_set_level(lvl);
            quant_act_fill(ac, xs, 1, K1, &t1);
            const quant_xrow r = quant_xrow_at(ac, K1, 0);
            for (int k = 0; k < K1; k++) {
                const int want_q = (int)xs[k];
                /* element 4i + j of a 64-element chunk: word 2i + j (j < 2)
                 * or 32 + 2i + j - 2 of qp */
                const int e = k & 63, p = (k & ~63) + ((e & 2) ? 32 : 0) + e / 4 * 2 + (e & 1);
                const int e4 = k & ~3;
                const int okk = r.q[k] == want_q && r.qp[p] == want_q && r.d[k / 32] == 1.0f &&
                                r.cor[k / 4] == -128 * (r.q[e4] + r.q[e4 + 1] + r.q[e4 + 2] + r.q[e4 + 3]);
                if (!okk && bad++ < 3)
                    test_fail(__FILE__, __LINE__, "level %d elt %d: x %g q %d qp %d", lvl, k, xs[k], r.q[k], r.qp[p]);
            }
        }
        ops_set_level(prev);
        CHECK(!bad);
        free(xs);
        free(ac);
    }
    /* levels against the scalar rule */
    const int K = 1024;
    float *xr = xmalloc((size_t)K * sizeof(float));
    void *a0 = xmalloc(quant_act_bytes(1, K)), *a1 = xmalloc(quant_act_bytes(1, K));
    tensor t = {.dtype = DT_Q4_0, .ndim = 2, .shape = {1, K}};
    for (int trial = 0; trial < 4; trial++) {
        for (int i = 0; i < K; i++) {
            float v = frand();
            if (trial == 1) v *= 1e30f;
            if (trial == 2) v = (float)((int)(v * 8)) * 0.25f; /* many exact ties */
            if (trial == 3) v *= (i % 97 == 0) ? 1e4f : 1e-6f; /* outliers */
            xr[i] = (i / 32) % 7 == 3 ? 0.0f : v;
        }
        int prev = ops_level();
        ops_set_level(0);
        quant_act_fill(a0, xr, 1, K, &t);
        for (int lvl = 1; lvl <= ops_max_level(); lvl++) {
            ops_set_level(lvl);
            quant_act_fill(a1, xr, 1, K, &t);
            CHECK_MSG(memcmp(a0, a1, quant_act_stride(K)) == 0, "trial %d level %d: activations differ from level 0", trial,
                      lvl);
        }
        ops_set_level(prev);
    }
    free(xr);
    free(a0);
    free(a1);
}

/* scalar against SIMD on random tensors, relative to sum|x w| as above */
TEST(quant_scalar_vs_simd) {
    const int N = 19, K = 512 + 128, M = 5;
    float *x = xmalloc((size_t)M * K * sizeof(float)), *w = xmalloc((size_t)N * K * sizeof(float));
    for (int j = 0; j < M * K; j++) x[j] = frand();
    int prev = ops_level();
    for (int f = 0; f < N_FMTS; f++) {
        const int k = k_for(&all_fmts[f], 512);
        rtensor r;
        rand_tensor(&r, all_fmts[f].dt, all_fmts[f].bits, all_fmts[f].group, N, k);
        for (int n = 0; n < N; n++) quant_row_f32(&r.t, n, w + (size_t)n * k);
        char what[64];
        snprintf(what, sizeof what, "random %s/%d/%d", dtype_name(r.t.dtype), r.t.q.bits, r.t.q.group);
        /* x rows of length k: the first M * k values */
        check_vs_ref(what, &r.t, w, M, x, NULL);
        free_rtensor(&r);
    }
    ops_set_level(prev);
    free(x);
    free(w);
}

/* Row m of an M-row call equals the 1-row call on x[m], bit for bit, for
 * M = 1..17 and the prefill widths 130 and 512 (the blocked tiles, the
 * one-row tiles and their mixes), and any split of [0, N) gives the same
 * bits, at every level; at level 2 the generic unpacking gives the same
 * bits as each format's own. */
TEST(quant_batch_invariance) {
    const int N = 37, K = 512 + 128, MX = 512;
    float *x = xmalloc((size_t)MX * K * sizeof(float)), *ya = xmalloc((size_t)MX * N * sizeof(float));
    float *y1 = xmalloc((size_t)MX * N * sizeof(float)), bias[37];
    for (int j = 0; j < MX * K; j++) x[j] = frand();
    for (int j = 0; j < N; j++) bias[j] = frand();
    void *act = xmalloc(quant_act_bytes(MX, K));
    int prev = ops_level();
    for (int f = 0; f < N_FMTS; f++) {
        const int k = k_for(&all_fmts[f], 512);
        rtensor r;
        rand_tensor(&r, all_fmts[f].dt, all_fmts[f].bits, all_fmts[f].group, N, k);
        for (int lvl = 0; lvl <= ops_max_level(); lvl++) {
            ops_set_level(lvl);
            const int mx = lvl == 0 ? 130 : MX; /* the scalar level is slow */
            for (int m = 0; m < mx; m++)
                quant_matmul_rows(y1 + (size_t)m * N, N, x + (size_t)m * k, 1, k, &r.t, bias, 0, N);
            const int Ms[] = {2, 3, 4, 5, 7, 8, 9, 16, 17, 130, 512};
            for (size_t i = 0; i < sizeof Ms / sizeof Ms[0]; i++) {
                const int M = Ms[i];
                if (M > mx) continue;
                quant_matmul_rows(ya, N, x, M, k, &r.t, bias, 0, N);
                CHECK_MSG(memcmp(ya, y1, (size_t)M * N * sizeof(float)) == 0, "%s/%d level %d: M=%d differs from M=1",
                          dtype_name(r.t.dtype), r.t.q.bits, lvl, M);
            }
            /* [0, 1), [1, 6), [6, 23), [23, N) with M = 7 */
            const int cut[5] = {0, 1, 6, 23, N};
            memset(ya, 0, (size_t)7 * N * sizeof(float));
            for (int c = 0; c < 4; c++) quant_matmul_rows(ya, N, x, 7, k, &r.t, bias, cut[c], cut[c + 1]);
            CHECK_MSG(memcmp(ya, y1, (size_t)7 * N * sizeof(float)) == 0, "%s/%d level %d: split [n0, n1) differs",
                      dtype_name(r.t.dtype), r.t.q.bits, lvl);
#ifdef DS_HAVE_AVX2_PATH
            if (lvl == 2 && avx512_quant_ok()) {
                quant_act_fill(act, x, 130, k, &r.t);
                avx512_quant_matmul(ya, N, act, 130, k, &r.t, bias, 0, N, 1);
                CHECK_MSG(memcmp(ya, y1, (size_t)130 * N * sizeof(float)) == 0,
                          "%s/%d level 2: the generic unpacking differs from the format's own", dtype_name(r.t.dtype),
                          r.t.q.bits);
            }
#endif
        }
        free_rtensor(&r);
    }
    ops_set_level(prev);
    free(act);
    free(x);
    free(ya);
    free(y1);
}

/* op_matmul on quantized weights (1 and 2 threads, M = 1, 7 and 40)
 * equals quant_matmul_rows; op_embed dequantizes the table's rows */
TEST(quant_ops_integration) {
    const int N = 300, K = 256, MX = 40;
    tpool *tp = tp_create(2);
    float *x = xmalloc((size_t)MX * K * sizeof(float)), *ya = xmalloc((size_t)MX * N * sizeof(float));
    float *yb = xmalloc((size_t)MX * N * sizeof(float)), *w = xmalloc((size_t)K * sizeof(float));
    for (int j = 0; j < MX * K; j++) x[j] = frand();
    const qfmt fm[3] = {{DT_Q4_0, 0, 0}, {DT_Q6_K, 0, 0}, {DT_MLX, 4, 64}};
    for (int f = 0; f < 3; f++) {
        rtensor r;
        rand_tensor(&r, fm[f].dt, fm[f].bits, fm[f].group, N, K);
        const int Ms[3] = {1, 7, MX};
        for (int i = 0; i < 3; i++) {
            quant_matmul_rows(yb, N, x, Ms[i], K, &r.t, NULL, 0, N);
            for (int t = 0; t < 2; t++) {
                op_matmul(t ? tp : NULL, ya, x, Ms[i], &r.t, NULL);
                CHECK_MSG(memcmp(ya, yb, (size_t)Ms[i] * N * sizeof(float)) == 0, "%s M=%d threads %d",
                          dtype_name(r.t.dtype), Ms[i], t + 1);
            }
        }
        int toks[3] = {0, 299, 17};
        op_embed(ya, &r.t, toks, 3);
        for (int i = 0; i < 3; i++) {
            quant_row_f32(&r.t, toks[i], w);
            CHECK(memcmp(ya + (size_t)i * K, w, (size_t)K * sizeof(float)) == 0);
        }
        free_rtensor(&r);
    }
    tp_free(tp);
    free(x);
    free(ya);
    free(yb);
    free(w);
}

/* ------------------------------------------------- the prefill family */

/* quant_pre_fill then quant_pre_matmul over [n0, n1) at the current level */
static void pre_rows(float *y, int ldy, const float *x, int M, int K, const tensor *W, const float *bias, int64_t n0,
                     int64_t n1) {
    void *act = xaligned(quant_pre_bytes(M, K)), *work = xaligned(quant_pre_work_bytes(K));
    quant_pre_fill(act, x, M, K, W);
    quant_pre_matmul(y, ldy, act, M, K, W, bias, n0, n1, work);
    free(act);
    free(work);
}

/* Every format, every level: the prefill family against the double dots
 * (check_vs_ref's bounds: its x is the same 16-bit quantization, its f32
 * steps about K/16 + 20 roundings of partial sums bounded by sum|xq w|),
 * and every level's bits equal level 0's (quant.h: one f32 order) */
TEST(quant_pre_vs_reference) {
    const int N = 19, M = 5, KX = 512 + 128;
    float *x = xmalloc((size_t)M * KX * sizeof(float)), *w = xmalloc((size_t)N * KX * sizeof(float));
    float *y = xmalloc((size_t)M * N * sizeof(float)), *y0 = xmalloc((size_t)M * N * sizeof(float)), bias[19];
    double *xd = xmalloc((size_t)KX * sizeof(double)), *db = xmalloc((size_t)KX * sizeof(double));
    for (int j = 0; j < M * KX; j++) x[j] = frand();
    for (int j = 0; j < N; j++) bias[j] = frand();
    int prev = ops_level();
    for (int f = 0; f < N_FMTS; f++) {
        const int K = k_for(&all_fmts[f], 512);
        rtensor r;
        rand_tensor(&r, all_fmts[f].dt, all_fmts[f].bits, all_fmts[f].group, N, K);
        for (int n = 0; n < N; n++) quant_row_f32(&r.t, n, w + (size_t)n * K);
        const float *b = f % 2 ? bias : NULL;
        for (int lvl = 0; lvl <= ops_max_level(); lvl++) {
            ops_set_level(lvl);
            pre_rows(y, N, x, M, K, &r.t, b, 0, N);
            if (lvl == 0) memcpy(y0, y, (size_t)M * N * sizeof(float));
            CHECK_MSG(memcmp(y, y0, (size_t)M * N * sizeof(float)) == 0, "%s/%d level %d: bits differ from level 0",
                      dtype_name(r.t.dtype), r.t.q.bits, lvl);
        }
        int bad = 0;
        for (int m = 0; m < M; m++) {
            xq_ref(x + (size_t)m * K, K, xd, db);
            for (int n = 0; n < N; n++) {
                const float *wr = w + (size_t)n * K;
                double dq = 0, dx = 0, a = 0, qb = 0;
                for (int k = 0; k < K; k++) {
                    dq += xd[k] * wr[k];
                    dx += (double)x[(size_t)m * K + k] * wr[k];
                    a += fabs(xd[k] * wr[k]);
                    qb += fabs((double)wr[k]) * db[k] * 0.5;
                }
                const double bb = b ? b[n] : 0.0, got = y0[(size_t)m * N + n], tq = 1e-5 * (a + fabs(bb)) + 1e-30;
                if ((fabs(got - (dq + bb)) > tq || fabs(got - (dx + bb)) > qb + tq) && bad++ < 3)
                    test_fail(__FILE__, __LINE__, "%s/%d m %d n %d: %.9g, quantized-x ref %.9g (tol %.3g), f32-x ref %.9g (tol %.3g)",
                              dtype_name(r.t.dtype), r.t.q.bits, m, n, got, dq + bb, tq, dx + bb, qb + tq);
            }
        }
        free_rtensor(&r);
    }
    ops_set_level(prev);
    free(x);
    free(w);
    free(y);
    free(y0);
    free(xd);
    free(db);
}

/* Within the family a row's bits depend on nothing but the row: row m of
 * an M-row call equals the 1-row call on x[m] for M = 2..17, 130 and 300
 * (whole and partial tiles, several blocks of x rows), any split of
 * [0, N) gives the same bits, the level-2 quantizer fills the same bytes
 * as the scalar one, and op_matmul_pre on one or two threads equals it */
TEST(quant_pre_batch_invariance) {
    const int N = 37, MX = 300, KX = 512 + 128;
    tpool *tp = tp_create(2);
    float *x = xmalloc((size_t)MX * KX * sizeof(float)), *ya = xmalloc((size_t)MX * N * sizeof(float));
    float *y1 = xmalloc((size_t)MX * N * sizeof(float)), bias[37];
    for (int j = 0; j < MX * KX; j++) x[j] = frand();
    for (int j = 0; j < N; j++) bias[j] = frand();
    for (int f = 0; f < N_FMTS; f++) {
        const int K = k_for(&all_fmts[f], 512);
        rtensor r;
        rand_tensor(&r, all_fmts[f].dt, all_fmts[f].bits, all_fmts[f].group, N, K);
        for (int m = 0; m < MX; m++) pre_rows(y1 + (size_t)m * N, N, x + (size_t)m * K, 1, K, &r.t, bias, 0, N);
        const int Ms[] = {2, 3, 4, 5, 7, 16, 17, 130, 300};
        for (size_t i = 0; i < sizeof Ms / sizeof Ms[0]; i++) {
            pre_rows(ya, N, x, Ms[i], K, &r.t, bias, 0, N);
            CHECK_MSG(memcmp(ya, y1, (size_t)Ms[i] * N * sizeof(float)) == 0, "%s/%d: M=%d differs from M=1",
                      dtype_name(r.t.dtype), r.t.q.bits, Ms[i]);
        }
        const int cut[5] = {0, 1, 6, 23, N};
        memset(ya, 0, (size_t)7 * N * sizeof(float));
        for (int c = 0; c < 4; c++) pre_rows(ya, N, x, 7, K, &r.t, bias, cut[c], cut[c + 1]);
        CHECK_MSG(memcmp(ya, y1, (size_t)7 * N * sizeof(float)) == 0, "%s/%d: split [n0, n1) differs",
                  dtype_name(r.t.dtype), r.t.q.bits);
        /* the fill: every level's bytes equal the scalar rule's */
        const size_t ab = quant_pre_bytes(3, K);
        uint8_t *a0 = xaligned(ab), *a1 = xaligned(ab);
        memset(a0, 0, ab);
        memset(a1, 0, ab);
        for (int m = 0; m < 3; m++) quant_pre_row_scalar(quant_prow_at(a0, K, m), x + (size_t)m * K, K, quant_offset(&r.t));
        quant_pre_fill(a1, x, 3, K, &r.t);
        CHECK_MSG(memcmp(a0, a1, ab) == 0, "%s/%d: the activation fill differs from the scalar rule",
                  dtype_name(r.t.dtype), r.t.q.bits);
        free(a0);
        free(a1);
        for (int t = 0; t < 2 && quant_pre_fast(); t++) {
            op_matmul_pre(t ? tp : NULL, ya, x, 130, &r.t, bias);
            CHECK_MSG(memcmp(ya, y1, (size_t)130 * N * sizeof(float)) == 0, "%s/%d: op_matmul_pre, %d threads",
                      dtype_name(r.t.dtype), r.t.q.bits, t + 1);
        }
        free_rtensor(&r);
    }
    tp_free(tp);
    free(x);
    free(ya);
    free(y1);
}

static void check_err(const tensor *t, const char *want) {
    char err[256] = "";
    CHECK_EQ_INT(quant_check(t, err, sizeof err), -1);
    CHECK_MSG(strstr(err, "blk.0.ffn_up") != NULL, "error does not name the tensor: %s", err);
    CHECK_MSG(strstr(err, want) != NULL, "error '%s' does not mention '%s'", err, want);
}

TEST(quant_check_errors) {
    uint8_t buf[4096] = {0};
    uint16_t sb[64] = {0};
    tensor t = {.name = "blk.0.ffn_up", .dtype = DT_Q4_0, .ndim = 2, .shape = {4, 64}, .data = buf, .nbytes = 4 * 36};
    char err[256] = "";
    CHECK_EQ_INT(quant_check(&t, err, sizeof err), 0);
    t.nbytes = 4 * 36 - 1;
    check_err(&t, "bytes");
    t.nbytes = 4 * 36;
    t.shape[1] = 48;
    check_err(&t, "multiple");
    t.shape[1] = 64;
    t.ndim = 3;
    check_err(&t, "2-D");
    t.ndim = 2;
    tensor m = {.name = "blk.0.ffn_up", .dtype = DT_MLX, .ndim = 2, .shape = {4, 128}, .data = buf, .nbytes = 4 * 64};
    m.q.bits = 4;
    m.q.group = 64;
    m.q.sdtype = DT_F16;
    m.q.scales = sb;
    m.q.biases = sb + 8;
    CHECK_EQ_INT(quant_check(&m, err, sizeof err), 0);
    m.q.bits = 7;
    check_err(&m, "bits");
    m.q.bits = 4;
    m.q.group = 48;
    check_err(&m, "group");
    m.q.group = 64;
    m.shape[1] = 96;
    check_err(&m, "multiple");
    m.shape[1] = 128;
    m.nbytes = 4 * 64 + 4;
    check_err(&m, "bytes");
    m.nbytes = 4 * 64;
    m.q.sdtype = DT_I8;
    check_err(&m, "F32");
    m.q.sdtype = DT_F16;
    m.q.biases = NULL;
    check_err(&m, "missing");
}
